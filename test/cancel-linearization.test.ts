/**
 * SEC-11: a cancel's call is its linearization point. It discards exactly the input pending when it
 * was called; input acknowledged after the call survives it and, when sent waking, runs once the
 * cancelled activity converged (DLV-06) — even while the cancel's own splices and interruption are
 * still in progress. The rounds race sends against a cancel held mid-way by Deferred gates (a send's
 * durable write held so that it is in flight at the call, the cancel's own splice held, the activity
 * held in a hook, a model request or a maintenance task); a variant restarts every backend's store
 * after the cancel and resumes. Waits are gates and `whenIdle`, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Either, Fiber, Layer } from "effect"
import type { Scope } from "effect"
import type { Agent, AgentHandle } from "../src/Agent.js"
import * as AgentError from "../src/AgentError.js"
import type { UserMessage } from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import type * as Tool from "../src/Tool.js"
import * as Prng from "./chaos/prng.js"
import { backends } from "./fixtures/backends.js"
import {
  autoOpenGate,
  idFates,
  logViolations,
  makeHarness,
  msg,
  ofType,
  route,
  turnEnds,
  typesOf,
  userTexts
} from "./fixtures/driverHarness.js"

type Harness = Effect.Effect.Success<ReturnType<typeof makeHarness>>

type Verb = "followup" | "steer" | "inject" | "park"

/** `park`: a next-turn message sent without waking (`send(m, { wake: false })`). */
const sendBy = (agent: Agent, verb: Verb, message: UserMessage) =>
  verb === "park" ? agent.send(message, { target: "next-turn", wake: false }) : agent[verb](message)

const isWaking = (verb: Verb) => verb === "followup" || verb === "steer"

/** The model: a request whose last message is the user's `hold` hangs (until cancelled); any other is answered. */
const script = (request: Model.ModelRequest): Model.Reply => {
  const last = request.messages[request.messages.length - 1]
  const text = last?.role === "user" && last.content[0]?.type === "text" ? last.content[0].text : ""
  return text === "hold" ? Model.hang("") : Model.text("ok")
}

/** A batch that writes the splice inserting `id`. */
const insertsId = (id: string) => (batch: ReadonlyArray<SessionEvent>) =>
  ofType(batch, "agent/inbox/spliced").some((event) => event.data.inserted.some((m) => m.id === id))

/** A batch that writes a `canceled` splice. */
const cancelsSomething = (batch: ReadonlyArray<SessionEvent>) =>
  ofType(batch, "agent/inbox/spliced").some((event) => event.data.outcome === "canceled")

const spliceTargets = (events: ReadonlyArray<SessionEvent>) =>
  ofType(events, "agent/inbox/spliced").map((event) =>
    `${event.data.target}:${event.data.inserted.map((m) => `+${m.id}`).join("")}${
      event.data.removed.map((id) => `-${id}`).join("")
    }${event.data.outcome !== undefined ? `:${event.data.outcome}` : ""}`
  )

/** The turn each message entered. */
const enteredTurns = (log: ReadonlyArray<SessionEvent>) =>
  new Map(ofType(log, "user/message").map((e) => [e.data.message.id as string, e.data.turn]))

/** The turns a user's cancel aborted (not a teardown's). */
const cancelledTurns = (log: ReadonlyArray<SessionEvent>) =>
  new Set(ofType(log, "turn/end").flatMap((e) =>
    e.data.reason.kind === "aborted" && e.data.reason.cause.kind === "user" ? [e.data.turn] : []
  ))

/**
 * Calls the cancel in a fiber of its own. The forked fiber runs its first step — the call — before
 * this fiber resumes from `yieldNow` (the scheduler runs tasks in order).
 */
const callCancel = (agent: Agent, options?: { readonly keepInbox?: boolean }) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(agent.cancel({ kind: "user" }, options))
    yield* Effect.yieldNow()
    return fiber
  })

/** A running turn whose model request hangs until it is cancelled. */
const runningAgent = (h: Harness, id: string) =>
  Effect.gen(function*() {
    const handle = yield* h.create(id)
    const next = (yield* h.model.requests).length + 1
    yield* handle.agent.followup(msg(`${id}.go`, "hold"))
    yield* h.model.awaitRequest(next)
    return handle.agent
  })

describe("cancel linearization (SEC-11)", () => {
  it.scoped(
    "SEC-11 DLV-06 a send in flight at a cancel's call (its splice being written) is acknowledged after it, " +
      "survives it and runs in the next turn; only the input pending at the call is canceled",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        const agent = yield* runningAgent(h, "in-flight")
        yield* agent.followup(msg("p1"))
        yield* agent.steer(msg("p2"))
        const held = yield* h.writes.holdNext(insertsId("x"))
        const sending = yield* Effect.fork(agent.steer(msg("x")))
        yield* held.reached
        const canceling = yield* callCancel(agent)
        yield* held.release
        yield* Fiber.join(sending)
        yield* Fiber.join(canceling)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        assert.deepStrictEqual(spliceTargets(log).slice(4), [
          "next-step:+x",
          "next-step:-p2:canceled",
          "next-turn:-p1:canceled",
          "next-step:-x"
        ])
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["aborted", "completed"])
        assert.deepStrictEqual(enteredTurns(log).get("x"), 2)
        assert.deepStrictEqual(userTexts(log), ["hold", "x"])
      })
  )

  it.scoped(
    "SEC-11 from its call, the input a cancel discards is gone for every reader while its splices are written " +
      "(lists, replace, remove); a followup and a steer sent meanwhile are acknowledged after them and run next",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        const agent = yield* runningAgent(h, "reader")
        yield* agent.followup(msg("p1"))
        yield* agent.inject(msg("p2"))
        const held = yield* h.writes.holdNext(cancelsSomething)
        const canceling = yield* callCancel(agent)
        yield* held.reached
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [])
        assert.deepStrictEqual(yield* agent.inbox.nextStep, [])
        assert.isFalse(yield* agent.inbox.hasPending)
        const replaced = yield* Effect.fork(agent.inbox.replace(msg("p1").id, msg("p1b")))
        const removed = yield* Effect.fork(agent.inbox.remove(msg("p2").id))
        const followup = yield* Effect.fork(agent.followup(msg("y1")))
        const steer = yield* Effect.fork(agent.steer(msg("y2")))
        yield* held.release
        yield* Fiber.join(canceling)
        assert.isFalse(yield* Fiber.join(replaced))
        assert.isFalse(yield* Fiber.join(removed))
        yield* Fiber.join(followup)
        yield* Fiber.join(steer)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        const fates = idFates(log, [])
        assert.deepStrictEqual(["p1", "p2", "p1b", "y1", "y2"].map((id) => fates.get(id)), [
          ["canceled"],
          ["canceled"],
          undefined,
          ["entered"],
          ["entered"]
        ])
        // DLV-06: both run after the aborted turn (to next-turn while it converges, or into the drain after it)
        assert.deepStrictEqual(turnEnds(log)[0], { kind: "aborted", cause: { kind: "user" } })
        assert.deepStrictEqual(userTexts(log).slice(0, 1), ["hold"])
        const turns = enteredTurns(log)
        for (const id of ["y1", "y2"]) assert.isAbove(turns.get(id) ?? 0, 1, id)
      })
  )

  it.scoped(
    "SEC-11 DLV-06 CAN-03 with keepInbox nothing is canceled; a followup in flight at the call (acknowledged after " +
      "it) is latched and runs when the cancelled activity converges, the kept input with it",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        const agent = yield* runningAgent(h, "keep")
        yield* agent.steer(msg("kept-step"))
        yield* agent.followup(msg("kept-turn"))
        const held = yield* h.writes.holdNext(insertsId("x"))
        const sending = yield* Effect.fork(agent.followup(msg("x")))
        yield* held.reached
        const canceling = yield* callCancel(agent, { keepInbox: true })
        yield* held.release
        yield* Fiber.join(canceling)
        yield* Fiber.join(sending)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        assert.deepStrictEqual(ofType(log, "agent/inbox/spliced").filter((e) => e.data.outcome === "canceled"), [])
        // the latched drain runs what is pending, the parked input included: nothing is lost or canceled
        assert.deepStrictEqual(turnEnds(log)[0], { kind: "aborted", cause: { kind: "user" } })
        const turns = enteredTurns(log)
        for (const id of ["x", "kept-step", "kept-turn"]) assert.isAbove(turns.get(id) ?? 0, 1, id)
        assert.isFalse(yield* agent.inbox.hasPending)
      })
  )

  it.scoped(
    "SEC-11 CAN-04 DLV-06 a second cancel discards what arrived between the two (kept and parked with keepInbox: " +
      "its latch is reset) while what comes after it runs; the first cause wins",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        for (const keepInbox of [false, true]) {
          const agent = yield* runningAgent(h, `twice-${keepInbox}`)
          yield* agent.cancel({ kind: "user" })
          yield* agent.steer(msg(`between-${keepInbox}`))
          const second = yield* callCancel(agent, { keepInbox })
          yield* agent.followup(msg(`after-${keepInbox}`))
          yield* Fiber.join(second)
          yield* agent.whenIdle
          const log = yield* agent.session.events
          assert.deepStrictEqual(logViolations(log), [])
          assert.deepStrictEqual(turnEnds(log)[0], { kind: "aborted", cause: { kind: "user" } })
          const fates = idFates(log, [...(yield* agent.inbox.nextStep), ...(yield* agent.inbox.nextTurn)])
          assert.deepStrictEqual(fates.get(`between-${keepInbox}`), [keepInbox ? "entered" : "canceled"])
          assert.deepStrictEqual(fates.get(`after-${keepInbox}`), ["entered"])
        }
        // the latch is reset by the second cancel: with nothing sent after it, what came between stays parked
        const agent = yield* runningAgent(h, "parked")
        yield* agent.cancel({ kind: "hook", reason: "first" })
        yield* agent.followup(msg("parked"))
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "aborted", cause: { kind: "hook", reason: "first" } }])
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("parked")])
      })
  )

  it.scoped(
    "SEC-11 DLV-03 a cancel called while a followup opens a turn on an idle agent aborts that turn with no step; " +
      "the followup, acknowledged after the call, runs in the next turn; parked input pending at the call is canceled",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        const { agent } = yield* h.create("opening")
        yield* agent.inject(msg("parked"))
        const held = yield* h.writes.holdNext(insertsId("x"))
        const sending = yield* Effect.fork(agent.followup(msg("x")))
        yield* held.reached
        const canceling = yield* callCancel(agent)
        yield* held.release
        yield* Fiber.join(sending)
        yield* Fiber.join(canceling)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        assert.deepStrictEqual(typesOf(log).slice(0, 4), [
          "agent/inbox/spliced",
          "agent/inbox/spliced",
          "turn/start",
          "agent/inbox/spliced"
        ])
        assert.deepStrictEqual(spliceTargets(log).slice(0, 3), [
          "next-step:+parked",
          "next-turn:+x",
          "next-step:-parked:canceled"
        ])
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["aborted", "completed"])
        assert.deepStrictEqual(enteredTurns(log).get("x"), 2)
        assert.strictEqual(ofType(log, "step/start").filter((e) => e.data.turn === 1).length, 0)
      })
  )

  it.scoped(
    "SEC-11 LIFE-01 a dispose called while a cancel waits to write its splices waits for them: what was pending " +
      "at the cancel's call is canceled in the log, the message being appended at the call stays pending",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        const handle = yield* h.create("disposed")
        const agent = handle.agent
        // through the inbox alone: the driver never ran anything before the cancel
        yield* agent.inbox.append("next-step", msg("p"))
        const held = yield* h.writes.holdNext(insertsId("x"))
        const appending = yield* Effect.fork(agent.inbox.append("next-step", msg("x")))
        yield* held.reached
        const canceling = yield* callCancel(agent)
        const disposing = yield* Effect.fork(handle.dispose)
        yield* Effect.yieldNow()
        yield* held.release
        yield* Fiber.join(appending)
        yield* Fiber.join(canceling)
        yield* Fiber.join(disposing)
        const log = yield* agent.session.events
        assert.deepStrictEqual(spliceTargets(log), ["next-step:+p", "next-step:+x", "next-step:-p:canceled"])
        assert.deepStrictEqual(yield* agent.inbox.nextStep, [msg("x")])
      })
  )

  it.scoped(
    "SEC-11 SES-02b a cancel whose splices cannot be written fails with the error, still interrupts the turn, and " +
      "the input it could not discard is pending again; a later cancel discards it",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        const agent = yield* runningAgent(h, "unwritten")
        yield* agent.followup(msg("p"))
        yield* h.writes.failNext(cancelsSomething)
        const failed = yield* Effect.flip(agent.cancel({ kind: "user" }))
        assert.strictEqual(failed._tag, "PersistenceError")
        yield* agent.whenIdle
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("p")])
        assert.deepStrictEqual(turnEnds(yield* agent.session.events), [{ kind: "aborted", cause: { kind: "user" } }])
        yield* agent.cancel({ kind: "user" })
        const log = yield* agent.session.events
        assert.deepStrictEqual(idFates(log, yield* agent.inbox.nextTurn).get("p"), ["canceled"])
        assert.deepStrictEqual(logViolations(log), [])
      })
  )

  it.scoped(
    "SEC-11 DLV-06 300 rounds racing sends against a cancel held mid-way: input pending at its call is canceled " +
      "exactly once (kept with keepInbox), every send acknowledged after its call survives and, sent waking, runs " +
      "after the cancelled activity in a later turn",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(script)
        const rng = Prng.make(Prng.derive(1111, 11))
        for (let round = 0; round < 300; round++) {
          const raced = yield* race(h, rng, `r${round}`)
          if (rng.chance(0.5)) yield* Effect.yieldNow()
          yield* raced.release
          yield* raced.agent.whenIdle
          checkLive(raced, yield* raced.agent.session.events, yield* pendingIds(raced.agent))
          yield* raced.handle.dispose
        }
      }),
    120_000
  )

  for (const backend of backends.filter((b) => b.name !== "memory")) {
    it.scoped(
      `SEC-11 DLV-06 ${backend.name}: 25 raced cancels, the store restarted after them: each resumed inbox is the ` +
        "live one, what was pending at a cancel's call is canceled exactly once, input acknowledged after it " +
        "survives and, sent waking, runs after the wake",
      () =>
        Effect.gen(function*() {
          const persistence = yield* storeOf(backend.make)
          const rng = Prng.make(Prng.derive(2222, backends.indexOf(backend)))
          const stopped = yield* Effect.scoped(Effect.gen(function*() {
            const h = yield* makeHarness(script, { persistence })
            const out: Array<{ readonly raced: Raced; readonly pending: ReadonlyArray<string> }> = []
            for (let round = 0; round < 25; round++) {
              const raced = yield* race(h, rng, `${backend.name}-${round}`)
              yield* raced.release
              // a restart while the cancelled activity converges, or after it went idle
              if (rng.chance(0.5)) yield* raced.agent.whenIdle
              yield* raced.handle.dispose
              out.push({ raced, pending: yield* pendingIds(raced.agent) })
            }
            return out
          }))
          const h = yield* makeHarness(script, { persistence })
          for (const { pending, raced } of stopped) {
            const { agent } = yield* h.registry.resume({ sessionId: raced.sessionId, options: route })
            assert.deepStrictEqual(yield* pendingIds(agent), pending, `${raced.where}: the resumed inbox`)
            yield* agent.wake
            yield* agent.whenIdle
            checkLive(raced, yield* agent.session.events, yield* pendingIds(agent))
          }
        }),
      120_000
    )
  }
})

/** A store built once for the whole test (a `:memory:` SQLite database must outlive the first runtime). */
const storeOf = (
  make: Effect.Effect<Layer.Layer<SessionPersistence, unknown>, unknown, Scope.Scope>
): Effect.Effect<Layer.Layer<SessionPersistence>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const layer = yield* make
    const context = yield* Layer.build(layer)
    return Layer.succeed(SessionPersistence, Context.get(context, SessionPersistence))
  }).pipe(Effect.orDie)

const pendingIds = (agent: Agent) =>
  Effect.map(
    Effect.all([agent.inbox.nextStep, agent.inbox.nextTurn]),
    ([steps, turns]) => [...steps, ...turns].map((m) => m.id as string)
  )

/** Where the activity is when the cancel is called. */
type Activity = "model" | "pre-step" | "idle" | "maintenance"

const verbs: ReadonlyArray<readonly [Verb, number]> = [["followup", 3], ["steer", 3], ["inject", 2], ["park", 1]]
const quietVerbs: ReadonlyArray<readonly [Verb, number]> = [["inject", 1], ["park", 1]]

/** One raced cancel, up to its return and the acknowledgement of every send. */
interface Raced {
  readonly sessionId: string
  readonly where: string
  readonly handle: AgentHandle
  readonly agent: Agent
  readonly keepInbox: boolean
  /** Input pending when the cancel was called. */
  readonly before: ReadonlyArray<string>
  /** Input acknowledged after its call. */
  readonly after: ReadonlyArray<{ readonly id: string; readonly verb: Verb }>
  /** Lets the held activity go on (a hook's gate; a maintenance task's end is observed). */
  readonly release: Effect.Effect<void>
}

/**
 * An activity held where a random `Activity` says; input pending before the call; maybe a send in
 * flight at the call (its write held); the cancel called; sends while its splices and interruption
 * are under way (some forked before the in-flight write is released), and after it returned.
 */
const race = (h: Harness, rng: Prng.Prng, sessionId: string) =>
  Effect.gen(function*() {
    const activity = rng.weighted<Activity>([["model", 3], ["pre-step", 2], ["idle", 2], ["maintenance", 1]])
    const keepInbox = rng.chance(0.35)
    const where = `${sessionId} (${activity}${keepInbox ? ", keepInbox" : ""})`
    const hookGate = yield* autoOpenGate
    const hookReached = yield* Deferred.make<void>()
    const holdPreStep = (info: Tool.StepInfo & { readonly messages: ReadonlyArray<UserMessage> }) =>
      info.turn === 1 && info.step === 1 && activity === "pre-step"
        ? Deferred.succeed(hookReached, undefined).pipe(
          Effect.zipRight(Deferred.await(hookGate)),
          Effect.as<Tool.PreStepDecision>({ kind: "enter", messages: info.messages })
        )
        : Effect.succeed<Tool.PreStepDecision>({ kind: "enter", messages: info.messages })
    const handle = yield* h.create(sessionId, { setup: (a) => a.hooks.preStep(holdPreStep) })
    const agent = handle.agent
    const id = (name: string) => `${sessionId}.${name}`
    const before: Array<string> = []
    const after: Array<{ readonly id: string; readonly verb: Verb }> = []

    let maintenance: Fiber.RuntimeFiber<void, unknown> | undefined
    if (activity === "model") {
      const next = (yield* h.model.requests).length + 1
      yield* agent.followup(msg(id("go"), "hold"))
      yield* h.model.awaitRequest(next)
    } else if (activity === "pre-step") {
      // peeked by the held hook, not claimed: pending at the call
      yield* agent.followup(msg(id("go")))
      yield* Deferred.await(hookReached)
      before.push(id("go"))
    } else if (activity === "maintenance") {
      const started = yield* Deferred.make<void>()
      maintenance = yield* Effect.fork(agent.runMaintenance(
        Deferred.succeed(started, undefined).pipe(Effect.zipRight(Effect.never))
      ))
      yield* Deferred.await(started)
    }
    // input pending at the call (an idle agent gets only input that does not wake it)
    for (let i = rng.int(0, 3); i > 0; i--) {
      yield* sendBy(agent, rng.weighted(activity === "idle" ? quietVerbs : verbs), msg(id(`p${i}`)))
      before.push(id(`p${i}`))
    }
    // a send in flight at the call: its splice (with a turn/start, on an idle agent) is being written
    let inFlight: Fiber.RuntimeFiber<void, unknown> | undefined
    let releaseInFlight: Effect.Effect<void> = Effect.void
    if (rng.chance(0.6)) {
      const verb = rng.weighted(verbs)
      const held = yield* h.writes.holdNext(insertsId(id("x")))
      inFlight = yield* Effect.fork(sendBy(agent, verb, msg(id("x"))))
      yield* held.reached
      releaseInFlight = held.release
      after.push({ id: id("x"), verb })
    } else if (!keepInbox && before.length > 0 && rng.chance(0.5)) {
      // or the cancel's own splices held: the sends below race them
      const held = yield* h.writes.holdNext(cancelsSomething)
      releaseInFlight = Effect.zipRight(held.reached, held.release)
    }
    const canceling = yield* callCancel(agent, { keepInbox })
    const racing: Array<Fiber.RuntimeFiber<void, unknown>> = []
    for (let i = rng.int(0, 2); i > 0; i--) {
      const verb = rng.weighted(verbs)
      racing.push(yield* Effect.fork(sendBy(agent, verb, msg(id(`y${i}`)))))
      after.push({ id: id(`y${i}`), verb })
    }
    if (rng.chance(0.5)) yield* Effect.yieldNow()
    yield* releaseInFlight
    for (let i = rng.int(0, 2); i > 0; i--) {
      const verb = rng.weighted(verbs)
      yield* sendBy(agent, verb, msg(id(`z${i}`)))
      after.push({ id: id(`z${i}`), verb })
    }
    yield* Fiber.join(canceling)
    for (const fiber of racing) yield* Fiber.join(fiber)
    if (inFlight !== undefined) yield* Fiber.join(inFlight)
    if (rng.chance(0.5)) {
      const verb = rng.weighted(verbs)
      yield* sendBy(agent, verb, msg(id("late")))
      after.push({ id: id("late"), verb })
    }
    const release = Effect.gen(function*() {
      yield* Deferred.succeed(hookGate, undefined)
      if (maintenance !== undefined) {
        const exit = yield* Effect.either(Fiber.join(maintenance))
        assert.isTrue(Either.isLeft(exit) && exit.left instanceof AgentError.AgentCanceled, `${where}: maintenance`)
      }
    })
    const raced: Raced = { sessionId, where, handle, agent, keepInbox, before, after, release }
    return raced
  })

/** The facts about every id of a raced cancel, from a log and what is pending after it. */
const checkLive = (raced: Raced, log: ReadonlyArray<SessionEvent>, pending: ReadonlyArray<string>) => {
  const { where } = raced
  assert.deepStrictEqual(logViolations(log), [], where)
  const fates = idFates(log, pending.map((id) => msg(id)))
  for (const id of raced.before) {
    const fate = fates.get(id) ?? []
    if (raced.keepInbox) assert.isFalse(fate.includes("canceled"), `${where}: ${id} was canceled by a keepInbox cancel`)
    else assert.deepStrictEqual(fate, ["canceled"], `${where}: ${id} was pending at the call`)
  }
  const turns = enteredTurns(log)
  const cancelled = cancelledTurns(log)
  for (const { id, verb } of raced.after) {
    const fate = fates.get(id) ?? []
    assert.strictEqual(fate.length, 1, `${where}: ${id} (${verb}, after the call) has fates ${fate.join(",")}`)
    assert.notStrictEqual(fate[0], "canceled", `${where}: ${id} (${verb}) was acknowledged after the call`)
    if (isWaking(verb)) assert.strictEqual(fate[0], "entered", `${where}: ${id} (${verb}) never ran`)
    const turn = turns.get(id)
    if (turn !== undefined) assert.isFalse(cancelled.has(turn), `${where}: ${id} entered the cancelled turn ${turn}`)
  }
}
