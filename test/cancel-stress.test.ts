/**
 * Adversarial stress of the driver's wake-ups and of SEC-11's cancel linearization: waking sends,
 * maintenance and cancels whose fibers the scheduler preempts at every offset (a fiber yields after
 * `maxOpsBeforeYield` operations, so sweeping the operations run before a verb moves the preemption
 * point across it), overlapping cancels, cancels whose splices fail,
 * on memory and on real files. Each round checks that nothing acknowledged is lost, that input
 * acknowledged after a cancel's call survives it and, sent waking, runs exactly once, and that the
 * agent never stays idle with waking input pending. Waits are gates and `whenIdle`, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Layer } from "effect"
import type { Scope } from "effect"
import type { Agent } from "../src/Agent.js"
import * as AgentError from "../src/AgentError.js"
import type { UserMessage } from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as Prng from "./chaos/prng.js"
import { backends } from "./fixtures/backends.js"
import {
  idFates,
  logViolations,
  makeHarness,
  msg,
  nextEvent,
  ofType,
  route,
  tagged
} from "./fixtures/driverHarness.js"

/** Runs `self` in a fiber of its own that yields every `maxOps` operations, after `pad` operations. */
const preempted = <A, E>(self: Effect.Effect<A, E>, maxOps: number, pad: number) =>
  Effect.withMaxOpsBeforeYield(
    Effect.gen(function*() {
      for (let i = 0; i < pad; i++) yield* Effect.void
      return yield* self
    }),
    maxOps
  )

/** Operation budgets small enough to preempt inside a verb (below 16 Effect's own yield never returns). */
const budgets = [16, 32] as const

type WakingVerb = "followup" | "steer" | "maintenance"

const wakingVerb = (agent: Agent, verb: WakingVerb, message: UserMessage): Effect.Effect<void, unknown> =>
  verb === "maintenance" ? Effect.asVoid(agent.runMaintenance(Effect.void)) : agent[verb](message)

describe("cancel stress (SEC-11)", () => {
  it.scoped(
    "CORE-04 AGT-05 DLV-03 SEC-11 a waking send or a maintenance task on an idle agent runs wherever the scheduler " +
      "preempts its fiber: the drain fiber's wake-up never comes before the phase it starts (no agent left " +
      "running with nothing started, whenIdle never stuck)",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(() => Model.text("ok"))
        let round = 0
        for (const maxOps of budgets) {
          for (let pad = 0; pad <= maxOps; pad++) {
            for (const verb of ["followup", "steer", "maintenance"] as const) {
              const id = `w${round++}`
              const { agent } = yield* h.create(id)
              yield* Fiber.join(yield* Effect.fork(preempted(wakingVerb(agent, verb, msg(`${id}.x`)), maxOps, pad)))
              yield* agent.whenIdle
              const log = yield* agent.session.events
              assert.deepStrictEqual(logViolations(log), [], `${id} (${verb}, budget ${maxOps}, pad ${pad})`)
              if (verb !== "maintenance") {
                assert.isFalse(yield* agent.inbox.hasPending, `${id} (${verb}): its input still pending`)
              }
            }
          }
        }
      }),
    30_000
  )
})

describe("an interrupted cancel (SEC-11)", () => {
  it.scoped(
    "SEC-11 AGT-03 CAN-02 a cancel called while runMaintenance starts its task takes effect at its call: its caller " +
      "interrupted while it waits for that start, the task is still interrupted (AgentCanceled), never left to run",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(() => Model.text("ok"))
        let round = 0
        let waited = 0
        for (const maxOps of [20, 24, 32]) {
          for (let pad = 0; pad <= maxOps; pad++) {
            for (let yields = 1; yields <= 2; yields++) {
              const { agent } = yield* h.create(`i${round++}`)
              const gate = yield* Deferred.make<void>()
              const task = yield* Effect.fork(preempted(agent.runMaintenance(Deferred.await(gate)), maxOps, pad))
              for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
              const canceling = yield* Effect.fork(agent.cancel({ kind: "user" }, { keepInbox: true }))
              // the call has happened; the caller gives up on the rest
              yield* Effect.yieldNow()
              const canceled = yield* Effect.zipRight(Fiber.interrupt(canceling), Fiber.await(canceling))
              yield* Deferred.succeed(gate, undefined)
              const exit = yield* Fiber.await(task)
              // interrupted only while waiting for the task's start (a transition under way at its call)
              if (Exit.isInterrupted(canceled)) {
                waited++
                assert.isTrue(
                  Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error instanceof AgentError.AgentCanceled,
                  `budget ${maxOps}, pad ${pad}, ${yields} yields: the task ended ${String(exit)}`
                )
              }
              yield* agent.whenIdle
            }
          }
        }
        // the sweep must have called some cancel inside the task's start, or it tested nothing
        assert.isAbove(waited, 0)
      }),
    30_000
  )
})

type Harness = Effect.Effect.Success<ReturnType<typeof makeHarness>>

type Verb = "followup" | "steer" | "inject" | "park"

const sendBy = (agent: Agent, verb: Verb, message: UserMessage) =>
  verb === "park" ? agent.send(message, { target: "next-turn", wake: false }) : agent[verb](message)

const isWaking = (verb: Verb) => verb === "followup" || verb === "steer"

/** The model: `hold` hangs until cancelled, `retry` fails retryably (the turn waits in a backoff, TestClock), else "ok". */
const script = (request: Model.ModelRequest): Model.Reply => {
  const last = request.messages[request.messages.length - 1]
  const text = last?.role === "user" && last.content[0]?.type === "text" ? last.content[0].text : ""
  return text === "hold" ? Model.hang("") : text === "retry" ? Model.fail("RATE_LIMITED") : Model.text("ok")
}

/** A batch that writes a `canceled` splice. */
const cancelsSomething = (batch: ReadonlyArray<SessionEvent>) =>
  ofType(batch, "agent/inbox/spliced").some((event) => event.data.outcome === "canceled")

/** Where the agent is when the cancels come. */
type Activity = "model" | "retry" | "idle" | "maintenance"

/** One send of a round: when it started relative to the cancels, and (once it ended) whether it was acknowledged. */
interface Sent {
  readonly id: string
  readonly verb: Verb
  /** How many cancels had been called when it started. */
  readonly startedAfter: number
  readonly fiber: Fiber.RuntimeFiber<void, unknown>
}

/** One cancel of a round. */
interface Called {
  readonly keepInbox: boolean
  /** The sends that had returned when it was called. */
  readonly ackedBefore: ReadonlySet<string>
  /** How many turns were opened in the log just after its call. */
  readonly turnsAtCall: number
  readonly fiber: Fiber.RuntimeFiber<void, unknown>
}

const budgetsOrDefault: ReadonlyArray<readonly [number, number]> = [[16, 1], [24, 1], [32, 1], [2048, 2]]
const verbs: ReadonlyArray<readonly [Verb, number]> = [["followup", 3], ["steer", 3], ["inject", 2], ["park", 1]]

/**
 * One round: an activity held (a hanging model request, a retry backoff, maintenance, or none),
 * input sent before, then 1–3 cancels (some keeping the inbox, the first one's splices failing now
 * and then) with sends forked between them — in fibers the scheduler preempts at random offsets, so
 * many are in flight at a call — and after the last; now and then a teardown racing them, then a
 * resume and a wake. Then every fact SEC-11, DLV-06 and INB-07 promise is checked.
 */
const stressRound = (h: Harness, rng: Prng.Prng, sessionId: string) =>
  Effect.gen(function*() {
    const activity = rng.weighted<Activity>([["model", 3], ["retry", 1], ["idle", 2], ["maintenance", 1]])
    const where = `${sessionId} (${activity})`
    const handle = yield* h.create(sessionId)
    const agent = handle.agent
    const sent: Array<Sent> = []
    const called: Array<Called> = []
    let names = 0
    const send = (verb: Verb) =>
      Effect.gen(function*() {
        const maxOps = rng.weighted(budgetsOrDefault)
        const pad = maxOps > 64 ? 0 : rng.int(0, maxOps)
        const id = `${sessionId}.m${names++}`
        const fiber = yield* Effect.fork(preempted(sendBy(agent, verb, msg(id)), maxOps, pad))
        sent.push({ id, verb, startedAfter: called.length, fiber })
      })
    const randomSends = (low: number, high: number, quiet = false) =>
      Effect.gen(function*() {
        for (let i = rng.int(low, high); i > 0; i--) {
          yield* send(quiet ? rng.weighted<Verb>([["inject", 1], ["park", 1]]) : rng.weighted(verbs))
        }
      })

    let maintenance: Fiber.RuntimeFiber<void, unknown> | undefined
    if (activity === "model" || activity === "retry") {
      const retried = yield* nextEvent(agent, tagged("ModelRetry"))
      const next = (yield* h.model.requests).length + 1
      yield* agent.followup(msg(`${sessionId}.go`, activity === "model" ? "hold" : "retry"))
      yield* h.model.awaitRequest(next)
      if (activity === "retry") yield* retried
    } else if (activity === "maintenance") {
      const started = yield* Deferred.make<void>()
      maintenance = yield* Effect.fork(agent.runMaintenance(
        Deferred.succeed(started, undefined).pipe(Effect.zipRight(Effect.never))
      ))
      yield* Deferred.await(started)
    }
    // input before the first cancel (an idle agent gets only input that does not wake it)
    yield* randomSends(0, 3, activity === "idle")
    if (rng.chance(0.5)) for (const s of sent) yield* Effect.exit(Fiber.await(s.fiber))

    const cancels = rng.int(1, 3)
    for (let c = 0; c < cancels; c++) {
      if (rng.chance(0.5)) yield* Effect.yieldNow()
      const keepInbox = rng.chance(0.3)
      // the first cancel's splices fail now and then: only where no turn writes at the same time (a
      // turn's closers committed in the same writer batch would fail too, and break the agent: SES-02b)
      if (!keepInbox && c === 0 && (activity === "idle" || activity === "maintenance") && rng.chance(0.4)) {
        yield* h.writes.failNext(cancelsSomething)
      }
      const ackedBefore = new Set(sent.filter((s) => s.fiber.unsafePoll() !== null).map((s) => s.id))
      const fiber = yield* Effect.fork(agent.cancel({ kind: "user" }, { keepInbox }))
      yield* Effect.yieldNow()
      const turnsAtCall = ofType(yield* agent.session.events, "turn/start").length
      called.push({ keepInbox, ackedBefore, turnsAtCall, fiber })
      if (activity === "idle" && called.length === 1 && rng.chance(0.5)) {
        // a waking send may open a turn now; later cancels then race its transition
        yield* randomSends(1, 2)
      } else {
        yield* randomSends(0, 2)
      }
      if (rng.chance(0.3)) yield* Fiber.await(fiber)
    }
    yield* randomSends(0, 2)
    // now and then a teardown races the cancels' splices and the sends in flight (LIFE-01), and the
    // session is resumed and woken (HOST-03): what was acknowledged is still there and runs
    const teardown = rng.chance(0.2)
    const disposing = teardown ? yield* Effect.fork(handle.dispose) : undefined
    if (teardown) yield* randomSends(0, 1)
    yield* h.writes.failNext(() => false)
    const cancelExits = yield* Effect.forEach(called, (c) => Fiber.await(c.fiber))
    const sendExits = new Map<string, Exit.Exit<void, unknown>>()
    for (const s of sent) sendExits.set(s.id, yield* Fiber.await(s.fiber))
    if (maintenance !== undefined) {
      const exit = yield* Effect.exit(Fiber.join(maintenance))
      assert.isTrue(
        Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error instanceof AgentError.AgentCanceled,
        `${where}: maintenance ended ${String(exit)}`
      )
    }
    let live = agent
    if (disposing !== undefined) {
      yield* Fiber.join(disposing)
      live = (yield* h.registry.resume({ sessionId, options: route })).agent
      yield* live.wake
    }
    yield* live.whenIdle
    const log = yield* live.session.events
    const pending = [...(yield* live.inbox.nextStep), ...(yield* live.inbox.nextTurn)]
    checkRound(`${where}${teardown ? " (torn down, resumed)" : ""}`, log, pending, sent, sendExits, called, cancelExits)
    if (disposing === undefined) yield* handle.dispose
  })

const checkRound = (
  where: string,
  log: ReadonlyArray<SessionEvent>,
  pending: ReadonlyArray<UserMessage>,
  sent: ReadonlyArray<Sent>,
  sendExits: ReadonlyMap<string, Exit.Exit<void, unknown>>,
  called: ReadonlyArray<Called>,
  cancelExits: ReadonlyArray<Exit.Exit<void, unknown>>
) => {
  assert.deepStrictEqual(logViolations(log), [], `${where}: ${dump(log)}`)
  const fates = idFates(log, pending)
  const enteredIn = new Map(ofType(log, "user/message").map((e) => [e.data.message.id as string, e.data.turn]))
  // the turns a user's cancel aborted (a teardown's, `disposed`, may abort a turn input sent later entered)
  const aborted = new Set(ofType(log, "turn/end").flatMap((e) =>
    e.data.reason.kind === "aborted" && e.data.reason.cause.kind === "user" ? [e.data.turn] : []
  ))
  // a cancel's splices either were written or it failed with the error (and still interrupted)
  const discarding = called.map((c, i) => !c.keepInbox && Exit.isSuccess(cancelExits[i]!))
  for (const s of sent) {
    const label = `${where}: ${s.id} (${s.verb}, started after ${s.startedAfter} of ${called.length} cancels)`
    const fate = fates.get(s.id) ?? []
    if (Exit.isFailure(sendExits.get(s.id)!)) {
      // refused: nothing written, nothing pending (DLV-02)
      assert.deepStrictEqual(fate, [], `${label} failed but left a trace`)
      continue
    }
    // nothing acknowledged is lost, nothing runs twice (INB-07)
    assert.strictEqual(fate.length, 1, `${label} has fates ${fate.join(",")}`)
    // only a cancel called after it started (and not keeping the inbox) may discard it (SEC-11)
    if (fate[0] === "canceled") {
      assert.isTrue(called.some((c, i) => i >= s.startedAfter && !c.keepInbox), `${label} was canceled`)
    }
    // sent waking after the last cancel's call: it runs, never in an aborted turn (DLV-06)
    if (s.startedAfter === called.length) {
      assert.notStrictEqual(fate[0], "canceled", `${label} was canceled`)
      if (isWaking(s.verb)) {
        assert.strictEqual(fate[0], "entered", `${label} never ran (the agent went idle with it pending)`)
        assert.isFalse(aborted.has(enteredIn.get(s.id)!), `${label} entered aborted turn ${enteredIn.get(s.id)}`)
      }
    }
    // acknowledged before a discarding cancel's call: gone, or entered a turn opened before that call
    called.forEach((c, i) => {
      if (!discarding[i] || !c.ackedBefore.has(s.id)) return
      assert.notStrictEqual(fate[0], "pending", `${label} was pending at cancel ${i}'s call and survived it`)
      const turn = enteredIn.get(s.id)
      if (turn !== undefined) assert.isAtMost(turn, c.turnsAtCall, `${label} entered after cancel ${i}'s call`)
    })
  }
}

/** A compact form of a log, for the message of a failed check. */
const dump = (log: ReadonlyArray<SessionEvent>) =>
  log.map((event) => {
    const splice = ofType([event], "agent/inbox/spliced")[0]
    if (splice === undefined) return `${event.seq}:${event.type}${JSON.stringify(event.data).slice(0, 120)}`
    const data = splice.data
    return `${event.seq}:${data.target}${data.inserted.map((m) => `+${m.id}`).join("")}${
      data.removed.map((id) => `-${id}`).join("")
    }${data.outcome === undefined ? "" : `:${data.outcome}`}`
  }).join("\n")

/** A store built once for the whole test. */
const storeOf = (
  make: Effect.Effect<Layer.Layer<SessionPersistence, unknown>, unknown, Scope.Scope>
): Effect.Effect<Layer.Layer<SessionPersistence>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const layer = yield* make
    const context = yield* Layer.build(layer)
    return Layer.succeed(SessionPersistence, Context.get(context, SessionPersistence))
  }).pipe(Effect.orDie)

describe("cancel stress, randomized (SEC-11)", () => {
  for (const [backend, rounds] of [["memory", 150], ["files", 40]] as const) {
    it.scoped(
      `SEC-11 DLV-06 CAN-04 INB-07 ${backend}: ${rounds} rounds of 1–3 overlapping cancels (some keeping the inbox, ` +
        "the first one's splices failing now and then) on a model request, a retry backoff, maintenance or an idle agent, raced by " +
        "preempted sends and now and then a teardown (then resumed and woken): nothing acknowledged is lost or runs twice, only a cancel called after a send started " +
        "discards it, input acknowledged before a discarding cancel never survives it, and waking input sent after " +
        "the last cancel runs (the agent never stays idle with it pending)",
      () =>
        Effect.gen(function*() {
          const found = backends.find((b) => b.name === backend)!
          const persistence = yield* storeOf(found.make)
          const h = yield* makeHarness(script, { persistence })
          const rng = Prng.make(Prng.derive(4711, backend === "memory" ? 1 : 2))
          for (let round = 0; round < rounds; round++) yield* stressRound(h, rng, `${backend}-${round}`)
        }),
      60_000
    )
  }
})
