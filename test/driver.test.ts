/**
 * The driver (SPEC §8): status, the verbs (follow-up, steer, inject, send), cancellation,
 * maintenance, the publication gate and a broken log. Waits are Deferred gates, `awaitRequest`,
 * live events and `whenIdle` — never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Either, Exit, Fiber, FiberId, Option, Schema, Stream } from "effect"
import type { AgentEvent } from "../src/AgentEvent.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as Tool from "../src/Tool.js"
import {
  autoOpenGate,
  hasType,
  logViolations,
  makeHarness,
  msg,
  nextEvent,
  ofType,
  recordEvents,
  statusesOf,
  stepsOf,
  tagged,
  turnEnds,
  typesOf,
  userTexts
} from "./fixtures/driverHarness.js"

const enter = (messages: ReadonlyArray<Message.UserMessage>): Tool.PreStepDecision => ({ kind: "enter", messages })

/** A preStep hook that holds turn `turn` until `gate` opens (the batch is peeked, nothing claimed). */
const holdTurn = (turn: number, gate: Deferred.Deferred<void>, reached?: Deferred.Deferred<void>) =>
(info: Tool.StepInfo & { readonly messages: ReadonlyArray<Message.UserMessage> }) =>
  info.turn === turn && info.step === 1
    ? Effect.gen(function*() {
      if (reached !== undefined) yield* Deferred.succeed(reached, undefined)
      yield* Deferred.await(gate)
      return enter(info.messages)
    })
    : Effect.succeed(enter(info.messages))

/**
 * A tool that signals when it started and then runs until interrupted; its interruption signals
 * `interrupted` and then waits for `release` (so the cancelled activity converges only then).
 */
const slowTool = (gates: {
  readonly started: Deferred.Deferred<void>
  readonly interrupted: Deferred.Deferred<void>
  readonly release: Deferred.Deferred<void>
}) =>
  Tool.make({
    name: "slow",
    description: "runs until cancelled",
    parameters: Schema.Struct({}),
    run: () =>
      Deferred.succeed(gates.started, undefined).pipe(
        Effect.zipRight(Effect.never),
        Effect.onInterrupt(() =>
          Deferred.succeed(gates.interrupted, undefined).pipe(Effect.zipRight(Deferred.await(gates.release)))
        )
      )
  })

const slowGates = Effect.all({
  started: Deferred.make<void>(),
  interrupted: Deferred.make<void>(),
  release: autoOpenGate
})

const spliceTargets = (events: ReadonlyArray<SessionEvent>) =>
  ofType(events, "agent/inbox/spliced").map((event) =>
    `${event.data.target}:${event.data.inserted.map((m) => `+${m.id}`).join("")}${
      event.data.removed.map((id) => `-${id}`).join("")
    }${event.data.outcome !== undefined ? `:${event.data.outcome}` : ""}`
  )

describe("driver", () => {
  // -----------------------------------------------------------------------------------------------
  describe("status", () => {
    it.scoped("AGT-02 a waking send on Idle is running when it returns; one drain of three turns is exactly running, idle", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("r1"), Model.text("r2"), Model.text("r3")])
        const gate = yield* Deferred.make<void>()
        const handle = yield* h.create("status", { setup: (a) => a.hooks.preStep(holdTurn(1, gate)) })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        assert.strictEqual(yield* agent.status, "idle")
        yield* agent.followup(msg("m1"))
        assert.strictEqual(yield* agent.status, "running")
        yield* agent.followup(msg("m2"))
        yield* agent.followup(msg("m3"))
        yield* Deferred.succeed(gate, undefined)
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.status, "idle")
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }, { kind: "completed" }, { kind: "completed" }])
        assert.deepStrictEqual(userTexts(log), ["m1", "m2", "m3"])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))

    it.scoped("AGT-02 statusChanges: transitions only, in causal order with the inbox and turn events", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("one"), Model.text("two")])
        const handle = yield* h.create("causal")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("a"))
        yield* agent.whenIdle
        yield* agent.followup(msg("b"))
        yield* agent.whenIdle
        yield* handle.dispose
        const all = yield* events
        assert.deepStrictEqual(statusesOf(all), ["running", "idle", "running", "idle"])
        const firstTurn = all.slice(0, all.findIndex((e) => e._tag === "TurnEnded") + 1).map((e) => e._tag)
        assert.deepStrictEqual(firstTurn.filter((t) => t !== "ModelDelta"), [
          "InboxInserted",
          "AgentStatusChanged",
          "TurnStarted",
          "InboxClaimed",
          // EVS-02: the step's durable assistant/message is announced before the turn ends
          "AssistantMessage",
          "TurnEnded"
        ])
      }))

    it.scoped("AGT-02 DLV-06 a latched replay after a cancel continues running with no idle in between", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "slow", "{}"), Model.text("for B")])
        const gates = yield* slowGates
        const handle = yield* h.create("latched", { setup: (a) => a.tools.register(slowTool(gates)) })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("A"))
        yield* Deferred.await(gates.started)
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        yield* Deferred.await(gates.interrupted)
        // the cancelled turn has not converged: its tool is still being interrupted
        yield* agent.steer(msg("B"))
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("B")])
        assert.deepStrictEqual(yield* agent.inbox.nextStep, [])
        yield* Deferred.succeed(gates.release, undefined)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "aborted", cause: { kind: "user" } }, { kind: "completed" }])
        assert.deepStrictEqual(userTexts(log), ["A", "B"])
        assert.deepStrictEqual(logViolations(log), [])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("verbs", () => {
    it.scoped("DLV-01 followup goes to next-turn and wakes: a turn runs with it", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("hi")])
        const { agent } = yield* h.create("followup")
        yield* agent.followup(msg("f"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(spliceTargets(log), ["next-turn:+f", "next-turn:-f"])
        assert.deepStrictEqual(stepsOf(log), [[1, 1]])
        assert.deepStrictEqual(userTexts(log), ["f"])
      }))

    it.scoped("DLV-01 DLV-02 a followup interrupted while its splice and turn/start are written still starts its turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("one"), Model.text("two")])
        const { agent } = yield* h.create("interrupted-send")
        const held = yield* h.writes.holdNext(hasType("turn/start"))
        const sender = yield* Effect.fork(agent.followup(msg("m1")))
        yield* held.reached
        // the durable write is under way: the interruption waits for it, then must not cut the
        // drain's start off from the turn/start it wrote (it used to: an open turn with no drain)
        yield* Fiber.interruptFork(sender)
        yield* held.release
        yield* Fiber.await(sender)
        yield* agent.whenIdle
        yield* agent.followup(msg("m2"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        assert.deepStrictEqual(userTexts(log), ["m1", "m2"])
        assert.deepStrictEqual(turnEnds(log).map((reason) => reason.kind), ["completed", "completed"])
      }))

    it.scoped("DLV-01 steer on an idle agent goes to next-step and starts a turn that enters it at step 1", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const { agent } = yield* h.create("steer-idle")
        yield* agent.steer(msg("s"))
        assert.strictEqual(yield* agent.status, "running")
        assert.isTrue(typesOf(yield* agent.session.events).includes("turn/start"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(spliceTargets(log), ["next-step:+s", "next-step:-s"])
        assert.deepStrictEqual(ofType(log, "user/message").map((e) => [e.data.turn, e.data.step]), [[1, 1]])
      }))

    it.scoped("DLV-01 inject never wakes: on an idle agent it is parked until a wake, then enters first (next-step)", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const handle = yield* h.create("inject-idle")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.inject(msg("context"))
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.status, "idle")
        assert.deepStrictEqual(typesOf(yield* agent.session.events), ["agent/inbox/spliced"])
        assert.deepStrictEqual(yield* agent.inbox.nextStep, [msg("context")])
        assert.strictEqual((yield* h.model.requests).length, 0)
        yield* agent.followup(msg("prompt"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(userTexts(log), ["context", "prompt"])
        assert.deepStrictEqual(stepsOf(log), [[1, 1]])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))

    it.scoped("DLV-01 steer and inject while running enter at the next step boundary of the same turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "wait", "{}"), Model.text("done")])
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const wait = Tool.make({
          name: "wait",
          description: "waits for the test",
          parameters: Schema.Struct({}),
          run: () =>
            Deferred.succeed(started, undefined).pipe(
              Effect.zipRight(Deferred.await(release)),
              Effect.as(Tool.text("waited"))
            )
        })
        const { agent } = yield* h.create("steer-running", { setup: (a) => a.tools.register(wait) })
        yield* agent.followup(msg("go"))
        yield* Deferred.await(started)
        yield* agent.steer(msg("steer"))
        yield* agent.inject(msg("note"))
        yield* Deferred.succeed(release, undefined)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        const entered = ofType(log, "user/message").map((e) => [Message.textOf(e.data.message.content), e.data.step])
        assert.deepStrictEqual(entered, [
          ["go", 1],
          ["steer", 2],
          ["note", 2]
        ])
        // entered after the tool result of step 1, never between a call and its result
        const types = typesOf(log)
        assert.isTrue(types.lastIndexOf("tool/result") < types.indexOf("user/message", types.indexOf("tool/result")))
        const second = yield* h.model.awaitRequest(2)
        assert.deepStrictEqual(second.messages.map((m) => m.role), ["user", "assistant", "tool", "user", "user"])
      }))

    it.scoped("DLV-02 invalid input fails before anything is written or woken; a duplicate id writes nothing", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const { agent } = yield* h.create("invalid")
        const bad = { ...Message.user("x", { id: "bad" }), extra: () => 1 }
        const failed = yield* Effect.either(agent.followup(bad))
        assert.isTrue(Either.isLeft(failed) && failed.left._tag === "InvalidEventData")
        const badText = Message.user("y", { id: "nan", content: [{ type: "text", text: "ok" }] })
        const withNaN = {
          ...badText,
          content: [{ type: "image" as const, mediaType: "image/png", data: "AA==", extra: Number.NaN }]
        }
        const failed2 = yield* Effect.either(agent.steer(withNaN))
        assert.isTrue(Either.isLeft(failed2) && failed2.left._tag === "InvalidEventData")
        assert.deepStrictEqual(yield* agent.session.events, [])
        assert.strictEqual(yield* agent.status, "idle")
        yield* agent.followup(msg("ok"))
        yield* agent.whenIdle
        const length = (yield* agent.session.events).length
        const duplicate = yield* Effect.either(agent.followup(msg("ok")))
        assert.isTrue(Either.isLeft(duplicate) && duplicate.left._tag === "DuplicateMessage")
        assert.strictEqual((yield* agent.session.events).length, length)
        assert.strictEqual(yield* agent.status, "idle")
      }))

    it.scoped("DLV-03 when followup returns on an Idle agent, turn/start is in the log, written in one batch with the splice", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const { agent } = yield* h.create("batch")
        yield* agent.followup(msg("m"))
        assert.deepStrictEqual(typesOf(yield* agent.session.events).slice(0, 2), ["agent/inbox/spliced", "turn/start"])
        yield* agent.whenIdle
        const batches = (yield* h.writes.batches).map(typesOf)
        assert.deepStrictEqual(batches[0], ["agent/inbox/spliced", "turn/start"])
        // the claim, step/start and the user/message are one batch too (INB-07)
        assert.deepStrictEqual(batches[1], ["agent/inbox/spliced", "step/start", "user/message"])
      }))

    it.scoped("DLV-03 CAN-02 a cancel before step 1 ends the turn aborted with no step; the message is canceled", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([])
        const gate = yield* Deferred.make<void>()
        const reached = yield* Deferred.make<void>()
        const { agent } = yield* h.create("before-step", { setup: (a) => a.hooks.preStep(holdTurn(1, gate, reached)) })
        yield* agent.followup(msg("m"))
        yield* Deferred.await(reached)
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log), ["agent/inbox/spliced", "turn/start", "agent/inbox/spliced", "turn/end"])
        assert.deepStrictEqual(spliceTargets(log), ["next-turn:+m", "next-turn:-m:canceled"])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "aborted", cause: { kind: "user" } }])
        assert.strictEqual((yield* h.model.requests).length, 0)
      }))

    it.scoped("DLV-03 CAN-03 with keepInbox a cancel before step 1 leaves the message pending (nothing was claimed)", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("later")])
        const gate = yield* Deferred.make<void>()
        const reached = yield* Deferred.make<void>()
        const { agent } = yield* h.create("before-step-keep", {
          setup: (a) => a.hooks.preStep(holdTurn(1, gate, reached))
        })
        yield* agent.followup(msg("m"))
        yield* Deferred.await(reached)
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log), ["agent/inbox/spliced", "turn/start", "turn/end"])
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("m")])
        // parked: it runs with the next wake
        yield* Deferred.succeed(gate, undefined)
        yield* agent.followup(msg("n"))
        yield* agent.whenIdle
        assert.deepStrictEqual(userTexts(yield* agent.session.events), ["m", "n"])
      }))

    it.scoped("DLV-06 waking input after a cancel goes to next-turn; removed before convergence, no turn follows", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "slow", "{}")])
        const gates = yield* slowGates
        const handle = yield* h.create("reclassified", { setup: (a) => a.tools.register(slowTool(gates)) })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("A"))
        yield* Deferred.await(gates.started)
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        yield* Deferred.await(gates.interrupted)
        yield* agent.steer(msg("S"))
        assert.isTrue(yield* agent.inbox.remove(msg("S").id))
        yield* Deferred.succeed(gates.release, undefined)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.strictEqual(ofType(log, "turn/start").length, 1)
        assert.deepStrictEqual(spliceTargets(log).slice(2), ["next-turn:+S", "next-turn:-S:canceled"])
        assert.strictEqual((yield* h.model.requests).length, 1)
        yield* handle.dispose
        const inserted = (yield* events).flatMap((e) =>
          e._tag === "InboxInserted" ? [`${e.target}:${e.messages[0]?.id}`] : []
        )
        assert.deepStrictEqual(inserted, ["next-turn:A", "next-turn:S"])
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))

    it.scoped("DLV-06 LIFE-06 after a disposed cancel nothing is latched: sends fail AgentInactive", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "slow", "{}")])
        const gates = yield* slowGates
        const handle = yield* h.create("disposed", { setup: (a) => a.tools.register(slowTool(gates)) })
        const agent = handle.agent
        yield* agent.followup(msg("A"))
        yield* Deferred.await(gates.started)
        const disposing = yield* Effect.fork(handle.dispose)
        yield* Deferred.await(gates.interrupted)
        const late = yield* Effect.either(agent.followup(msg("B")))
        assert.isTrue(Either.isLeft(late) && late.left._tag === "AgentInactive")
        const late2 = yield* Effect.either(agent.steer(msg("C")))
        assert.isTrue(Either.isLeft(late2) && late2.left._tag === "AgentInactive")
        yield* Deferred.succeed(gates.release, undefined)
        yield* Fiber.join(disposing)
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "aborted", cause: { kind: "disposed" } }])
        assert.deepStrictEqual(spliceTargets(log), ["next-turn:+A", "next-turn:-A"])
        assert.deepStrictEqual(logViolations(log), [])
      }))

    it.scoped("DLV-09 TURN-07 an empty batch at step 1 ends the turn completed with no step or model call, and the drain stops", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("for b")])
        const gate = yield* Deferred.make<void>()
        const reached = yield* Deferred.make<void>()
        const handle = yield* h.create("empty-batch", {
          setup: (a) =>
            a.hooks.preStep((info) =>
              info.turn === 1
                ? Deferred.succeed(reached, undefined).pipe(Effect.zipRight(Deferred.await(gate)), Effect.as(enter([])))
                : Effect.succeed(enter(info.messages))
            )
        })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("a"))
        yield* Deferred.await(reached)
        yield* agent.followup(msg("b"))
        yield* Deferred.succeed(gate, undefined)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log), [
          "agent/inbox/spliced",
          "turn/start",
          "agent/inbox/spliced",
          "agent/inbox/spliced",
          "turn/end"
        ])
        assert.deepStrictEqual(spliceTargets(log), ["next-turn:+a", "next-turn:+b", "next-turn:-a:rejected"])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.strictEqual((yield* h.model.requests).length, 0)
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("b")])
        // the parked follow-up runs with the next wake
        yield* agent.followup(msg("c"))
        yield* agent.whenIdle
        assert.deepStrictEqual(userTexts(yield* agent.session.events), ["b", "c"])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle", "running", "idle"])
      }))

    it.scoped("DLV-09 a wake whose message was removed before the claim opens and closes an empty turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([])
        const gate = yield* Deferred.make<void>()
        const reached = yield* Deferred.make<void>()
        const { agent } = yield* h.create("removed", { setup: (a) => a.hooks.preStep(holdTurn(1, gate, reached)) })
        yield* agent.followup(msg("m"))
        yield* Deferred.await(reached)
        assert.isTrue(yield* agent.inbox.remove(msg("m").id))
        yield* Deferred.succeed(gate, undefined)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log), ["agent/inbox/spliced", "turn/start", "agent/inbox/spliced", "turn/end"])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.strictEqual((yield* h.model.requests).length, 0)
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("cancel", () => {
    it.scoped("CAN-01 cancel with no activity only clears the inbox; with keepInbox it writes nothing; the next prompt runs", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("real")])
        const handle = yield* h.create("idle-cancel")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.cancel({ kind: "user" })
        assert.deepStrictEqual(yield* agent.session.events, [])
        yield* agent.inject(msg("x"))
        yield* agent.cancel({ kind: "user" })
        assert.deepStrictEqual(spliceTargets(yield* agent.session.events), ["next-step:+x", "next-step:-x:canceled"])
        yield* agent.inject(msg("y"))
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        assert.strictEqual((yield* agent.session.events).length, 3)
        assert.deepStrictEqual(yield* agent.inbox.nextStep, [msg("y")])
        assert.strictEqual(yield* agent.status, "idle")
        yield* agent.followup(msg("real prompt"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.deepStrictEqual(userTexts(log), ["y", "real prompt"])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))

    it.scoped("CAN-02 default cancel: canceled splices next-step first, then the interruption; aborted; no further turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.hang("")])
        const handle = yield* h.create("default-cancel")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("go"))
        yield* h.model.awaitRequest(1)
        yield* agent.followup(msg("tail"))
        yield* agent.steer(msg("s"))
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log).slice(-5), [
          "agent/inbox/spliced",
          "agent/inbox/spliced",
          "agent/inbox/spliced",
          "step/end",
          "turn/end"
        ])
        assert.deepStrictEqual(spliceTargets(log).slice(-2), ["next-step:-s:canceled", "next-turn:-tail:canceled"])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "aborted", cause: { kind: "user" } }])
        assert.deepStrictEqual(userTexts(log), ["go"])
        assert.strictEqual((yield* h.model.requests).length, 1)
        assert.deepStrictEqual(logViolations(log), [])
        yield* handle.dispose
        const all = yield* events
        const discarded = all.flatMap((e) =>
          e._tag === "InboxDiscarded" ? [`${e.target}:${e.ids.join(",")}:${e.outcome}`] : []
        )
        assert.deepStrictEqual(discarded, ["next-step:s:canceled", "next-turn:tail:canceled"])
        assert.deepStrictEqual(statusesOf(all), ["running", "idle"])
        const errors = all.filter((e) => e._tag === "AgentError")
        assert.deepStrictEqual(errors, [])
      }))

    it.scoped("CAN-03 keepInbox interrupts only: pending work stays, parked until a later wake", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.hang(""), Model.text("p"), Model.text("w")])
        const { agent } = yield* h.create("keep")
        yield* agent.followup(msg("active"))
        yield* h.model.awaitRequest(1)
        yield* agent.followup(msg("preserved"))
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        yield* agent.whenIdle
        let log = yield* agent.session.events
        assert.deepStrictEqual(ofType(log, "agent/inbox/spliced").filter((e) => e.data.outcome === "canceled"), [])
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("preserved")])
        assert.strictEqual(ofType(log, "turn/start").length, 1)
        yield* agent.followup(msg("wake it"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(userTexts(log), ["active", "preserved", "wake it"])
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["aborted", "completed", "completed"])
        assert.strictEqual((yield* h.model.requests).length, 3)
      }))

    it.scoped("CAN-04 the first cause of an activity wins and is what turn/end records", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.hang(""), Model.hang("")])
        const first = yield* h.create("first-cause")
        yield* first.agent.followup(msg("go"))
        yield* h.model.awaitRequest(1)
        yield* first.agent.cancel({ kind: "parent" })
        yield* first.agent.cancel({ kind: "user" })
        yield* first.agent.cancel({ kind: "hook", reason: "late" })
        yield* first.agent.whenIdle
        assert.deepStrictEqual(turnEnds(yield* first.agent.session.events), [
          { kind: "aborted", cause: { kind: "parent" } }
        ])
        // a later disposal does not overwrite an earlier user cancel
        const second = yield* h.create("first-cause-2")
        yield* second.agent.followup(msg("go"))
        yield* h.model.awaitRequest(2)
        yield* second.agent.cancel({ kind: "user" })
        yield* second.dispose
        assert.deepStrictEqual(turnEnds(yield* second.agent.session.events), [
          { kind: "aborted", cause: { kind: "user" } }
        ])
      }))

    it.scoped("CAN-05 mid-stream: an interrupted assistant message with the text so far, then step/end, turn/end", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([[Model.reasoning("hmm"), Model.hang("partial")], Model.text("second")])
        const { agent } = yield* h.create("mid-stream")
        const delta = yield* nextEvent(agent, tagged("ModelDelta", (e) => e.text === "partial"))
        yield* agent.followup(msg("go"))
        yield* delta
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log).slice(-3), ["assistant/message", "step/end", "turn/end"])
        const [assistant] = ofType(log, "assistant/message")
        assert.deepStrictEqual(assistant?.data.message.content, [
          { type: "reasoning", text: "hmm" },
          { type: "text", text: "partial" }
        ])
        assert.strictEqual(assistant?.data.interrupted, true)
        assert.strictEqual(assistant?.data.finish, undefined)
        assert.deepStrictEqual(assistant?.data.message.source, { kind: "model", provider: "scripted", model: "test" })
        assert.deepStrictEqual(logViolations(log), [])
        // CAN-10: the next follow-up runs normally, and the model sees what was delivered
        yield* agent.followup(msg("second"))
        yield* agent.whenIdle
        const after = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(after), [{ kind: "aborted", cause: { kind: "user" } }, { kind: "completed" }])
        const request = yield* h.model.awaitRequest(2)
        assert.deepStrictEqual(request.messages.map((m) => Message.textOf(m.content)), ["go", "partial", "second"])
      }))

    it.scoped("CAN-05 a cancel landing before a stream delivered text writes no assistant message", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.hang("")])
        const { agent } = yield* h.create("no-text")
        yield* agent.followup(msg("go"))
        yield* h.model.awaitRequest(1)
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log).slice(-3), ["request/config", "step/end", "turn/end"])
      }))

    it.scoped("CAN-05 after the model asked for tools but before they ran: synthetic tool/call + ABORTED_BEFORE_DISPATCH", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          [Model.text("let me"), Model.toolCall("c1", "danger", "{}"), Model.toolCall("c2", "danger", "{}")]
        ])
        let runs = 0
        const danger = Tool.make({
          name: "danger",
          description: "must not run",
          parameters: Schema.Struct({}),
          run: () => Effect.sync(() => runs++).pipe(Effect.as(Tool.text("ran")))
        })
        const { agent } = yield* h.create("before-dispatch", { setup: (a) => a.tools.register(danger) })
        const held = yield* h.writes.holdNext(hasType("assistant/message"))
        yield* agent.followup(msg("go"))
        yield* held.reached
        yield* agent.cancel({ kind: "user" })
        yield* held.release
        yield* agent.whenIdle
        assert.strictEqual(runs, 0)
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log).slice(-7), [
          "assistant/message",
          "tool/call",
          "tool/result",
          "tool/call",
          "tool/result",
          "step/end",
          "turn/end"
        ])
        const results = ofType(log, "tool/result")
        const outcomes = results.map((e) => [e.data.message.toolCallId, e.data.message.isError, e.data.error?.code])
        assert.deepStrictEqual(outcomes, [
          ["c1", true, "ABORTED_BEFORE_DISPATCH"],
          ["c2", true, "ABORTED_BEFORE_DISPATCH"]
        ])
        assert.deepStrictEqual(ofType(log, "tool/call").map((e) => [e.data.callId, e.data.name, e.data.arguments]), [
          ["c1", "danger", "{}"],
          ["c2", "danger", "{}"]
        ])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "aborted", cause: { kind: "user" } }])
        assert.deepStrictEqual(logViolations(log), [])
      }))

    it.scoped("CAN-05 during tools: running tools get ABORTED (may have partly run), finished ones keep theirs, barriers never run", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([[
          Model.toolCall("c1", "quick", "{}"),
          Model.toolCall("c2", "slow", "{}"),
          Model.toolCall("c3", "barrier", "{}")
        ]])
        const gates = yield* slowGates
        yield* Deferred.succeed(gates.release, undefined)
        let barrierRuns = 0
        const quick = Tool.make({
          name: "quick",
          description: "finishes at once",
          parameters: Schema.Struct({}),
          run: () => Effect.succeed(Tool.text("quick result"))
        })
        const barrier = Tool.make({
          name: "barrier",
          description: "exclusive",
          mode: "exclusive",
          parameters: Schema.Struct({}),
          run: () => Effect.sync(() => barrierRuns++).pipe(Effect.as(Tool.text("barrier ran")))
        })
        const { agent } = yield* h.create("during-tools", {
          setup: (a) =>
            Effect.all([a.tools.register(quick), a.tools.register(slowTool(gates)), a.tools.register(barrier)], {
              discard: true
            })
        })
        const quickDone = yield* nextEvent(agent, tagged("ToolCallFinished", (e) => e.callId === "c1"))
        yield* agent.followup(msg("go"))
        yield* Deferred.await(gates.started)
        yield* quickDone
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        assert.strictEqual(barrierRuns, 0)
        const log = yield* agent.session.events
        const results = ofType(log, "tool/result").map((e) => ({
          callId: e.data.message.toolCallId,
          text: Message.textOf(e.data.message.content),
          isError: e.data.message.isError,
          code: e.data.error?.code
        }))
        assert.deepStrictEqual(results.map((r) => [r.callId, r.isError, r.code]), [
          ["c1", false, undefined],
          ["c2", true, "ABORTED"],
          ["c3", true, "ABORTED_BEFORE_DISPATCH"]
        ])
        assert.strictEqual(results[0]?.text, "quick result")
        assert.match(results[1]?.text ?? "", /may have partly run/)
        assert.match(results[1]?.text ?? "", /verify its side effects/)
        assert.deepStrictEqual(typesOf(log).slice(-3), ["tool/result", "step/end", "turn/end"])
        assert.deepStrictEqual(logViolations(log), [])
      }))

    it.scoped("CAN-05 a cancel landing while a batch of the loop is being written still leaves a valid log", () =>
      Effect.gen(function*() {
        const windows = ["step/start", "tool/call", "tool/result", "step/end"] as const
        const idOf = (window: string) => `window-${window.replace("/", "-")}`
        const h = yield* makeHarness(
          Object.fromEntries(
            windows.map((w) => [idOf(w), [Model.toolCall("c1", "quick", "{}"), Model.text("next step")]])
          )
        )
        let runs = 0
        const quick = Tool.make({
          name: "quick",
          description: "finishes at once",
          parameters: Schema.Struct({}),
          run: () => Effect.sync(() => runs++).pipe(Effect.as(Tool.text("done")))
        })
        for (const window of windows) {
          const { agent } = yield* h.create(idOf(window), { setup: (a) => a.tools.register(quick) })
          const held = yield* h.writes.holdNext(hasType(window))
          const runsBefore = runs
          yield* agent.followup(msg(`go-${window}`))
          yield* held.reached
          yield* agent.cancel({ kind: "user" }, { keepInbox: true })
          yield* held.release
          yield* agent.whenIdle
          const log = yield* agent.session.events
          assert.deepStrictEqual(logViolations(log), [], window)
          assert.deepStrictEqual(turnEnds(log), [{ kind: "aborted", cause: { kind: "user" } }], window)
          assert.deepStrictEqual(stepsOf(log), [[1, 1]], window)
          assert.strictEqual(ofType(log, "step/end").length, 1, window)
          const ran = runs > runsBefore
          const results = ofType(log, "tool/result").map((e) =>
            e.data.error?.code ?? Message.textOf(e.data.message.content)
          )
          switch (window) {
            case "step/start":
              // interrupted before its request: no model call, no tool
              assert.isFalse(ran)
              assert.deepStrictEqual(results, [])
              break
            case "tool/call":
              // the body either finished before the interruption reached it, or never started
              assert.deepStrictEqual(results, [ran ? "done" : "ABORTED"])
              break
            default:
              assert.isTrue(ran)
              assert.deepStrictEqual(results, ["done"])
          }
        }
        assert.strictEqual((yield* h.model.requests).length, 3)
      }))

    it.scoped("CAN-10 a cancelled turn leaves no stale state: the next turns of a new drain run normally", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.hang("x"), Model.text("two"), Model.text("three")])
        const { agent } = yield* h.create("fresh")
        yield* agent.followup(msg("one"))
        yield* h.model.awaitRequest(1)
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        yield* agent.followup(msg("two"))
        yield* agent.followup(msg("three"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["aborted", "completed", "completed"])
        assert.deepStrictEqual(userTexts(log), ["one", "two", "three"])
        assert.deepStrictEqual(logViolations(log), [])
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("maintenance", () => {
    it.scoped("AGT-03 a runMaintenance caller interrupted as soon as its task started takes the task down with it", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([])
        const { agent } = yield* h.create("maint-interrupted")
        const callerRef: { fiber?: Fiber.RuntimeFiber<unknown, unknown> } = {}
        const stopped = yield* Deferred.make<void>()
        // the task's first step interrupts its own caller: the caller has just forked the activity
        const task = Effect.sync(() => callerRef.fiber!.unsafeInterruptAsFork(FiberId.none)).pipe(
          Effect.zipRight(Effect.never),
          Effect.onInterrupt(() => Deferred.succeed(stopped, undefined))
        )
        const caller = yield* Effect.fork(agent.runMaintenance(task))
        callerRef.fiber = caller
        assert.isTrue(Exit.isInterrupted(yield* Fiber.await(caller)))
        // the task was interrupted with its caller, and the agent is idle and free again
        yield* Deferred.await(stopped)
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.runMaintenance(Effect.succeed(7)), 7)
      }))

    it.scoped("AGT-03 runMaintenance from idle runs exclusively: status stays idle, no turn, the task's result", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([])
        const handle = yield* h.create("maint")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const task = yield* Effect.fork(
          agent.runMaintenance(
            Deferred.succeed(started, undefined).pipe(Effect.zipRight(Deferred.await(release)), Effect.as(42))
          )
        )
        yield* Deferred.await(started)
        assert.strictEqual(yield* agent.status, "idle")
        const busy = yield* Effect.either(agent.runMaintenance(Effect.void))
        assert.isTrue(Either.isLeft(busy) && busy.left._tag === "AgentBusy")
        yield* Deferred.succeed(release, undefined)
        assert.strictEqual(yield* Fiber.join(task), 42)
        // a typed failure of the task is the caller's
        const failed = yield* Effect.either(agent.runMaintenance(Effect.fail("nope" as const)))
        assert.deepStrictEqual(failed, Either.left("nope" as const))
        yield* agent.whenIdle
        assert.deepStrictEqual(yield* agent.session.events, [])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), [])
      }))

    it.scoped("AGT-03 runMaintenance while running fails AgentBusy at once", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.hang("")])
        const { agent } = yield* h.create("maint-busy")
        yield* agent.followup(msg("go"))
        const busy = yield* Effect.either(agent.runMaintenance(Effect.succeed(1)))
        assert.isTrue(Either.isLeft(busy) && busy.left._tag === "AgentBusy")
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
      }))

    it.scoped("AGT-03 cancel interrupts the task: AgentCanceled with the cause", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([])
        const { agent } = yield* h.create("maint-cancel")
        const started = yield* Deferred.make<void>()
        const task = yield* Effect.fork(
          agent.runMaintenance(Deferred.succeed(started, undefined).pipe(Effect.zipRight(Effect.never)))
        )
        yield* Deferred.await(started)
        yield* agent.cancel({ kind: "hook", reason: "stop it" })
        const exit = yield* Effect.either(Fiber.join(task))
        assert.isTrue(Either.isLeft(exit))
        if (Either.isLeft(exit)) {
          assert.strictEqual(exit.left._tag, "AgentCanceled")
          if (exit.left._tag === "AgentCanceled") {
            assert.deepStrictEqual(exit.left.cause, { kind: "hook", reason: "stop it" })
          }
        }
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.status, "idle")
      }))

    it.scoped("AGT-03 AGT-04 DLV-06 a wake latched after a maintenance cancel goes to next-turn; the task still reports its cause", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("after")])
        const handle = yield* h.create("maint-latched")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        const started = yield* Deferred.make<void>()
        const interrupted = yield* Deferred.make<void>()
        const release = yield* autoOpenGate
        const task = yield* Effect.fork(agent.runMaintenance(
          Deferred.succeed(started, undefined).pipe(
            Effect.zipRight(Effect.never),
            Effect.onInterrupt(() =>
              Deferred.succeed(interrupted, undefined).pipe(Effect.zipRight(Deferred.await(release)))
            )
          )
        ))
        yield* Deferred.await(started)
        yield* agent.followup(msg("discard"))
        yield* agent.cancel({ kind: "parent" })
        yield* Deferred.await(interrupted)
        yield* agent.steer(msg("park"))
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("park")])
        yield* Deferred.succeed(release, undefined)
        const exit = yield* Effect.either(Fiber.join(task))
        assert.isTrue(Either.isLeft(exit) && exit.left._tag === "AgentCanceled" && exit.left.cause.kind === "parent")
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(userTexts(log), ["park"])
        assert.strictEqual((yield* h.model.requests).length, 1)
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))

    it.scoped("AGT-04 AGT-05 waking input during maintenance writes only its splice; the turn runs when the task settles, whenIdle follows it", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const handle = yield* h.create("maint-wake")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        const release = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const task = yield* Effect.fork(
          agent.runMaintenance(Deferred.succeed(started, undefined).pipe(Effect.zipRight(Deferred.await(release))))
        )
        yield* Deferred.await(started)
        yield* agent.followup(msg("queued"))
        assert.deepStrictEqual(typesOf(yield* agent.session.events), ["agent/inbox/spliced"])
        assert.strictEqual(yield* agent.status, "idle")
        // AGT-05: whenIdle follows the replacement activity (the latched turn)
        const idle = yield* Effect.fork(agent.whenIdle)
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(task)
        yield* Fiber.join(idle)
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.deepStrictEqual(userTexts(log), ["queued"])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))

    it.scoped("AGT-04 input removed during maintenance: no turn/start, no request", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("never")])
        const { agent } = yield* h.create("maint-removed")
        const release = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const task = yield* Effect.fork(
          agent.runMaintenance(Deferred.succeed(started, undefined).pipe(Effect.zipRight(Deferred.await(release))))
        )
        yield* Deferred.await(started)
        yield* agent.followup(msg("gone"))
        assert.isTrue(yield* agent.inbox.remove(msg("gone").id))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(task)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log), ["agent/inbox/spliced", "agent/inbox/spliced"])
        assert.strictEqual((yield* h.model.requests).length, 0)
        assert.strictEqual(yield* agent.status, "idle")
      }))

    it.scoped("AGT-05 whenIdle resolves at once with no activity, never fails, and resolves after an error turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.fail("AUTH")])
        const { agent } = yield* h.create("when-idle")
        yield* agent.whenIdle
        yield* agent.followup(msg("go"))
        const waiters = yield* Effect.all([Effect.fork(agent.whenIdle), Effect.fork(agent.whenIdle)])
        for (const waiter of waiters) {
          const exit = yield* Fiber.await(waiter)
          assert.strictEqual(exit._tag, "Success")
        }
        assert.strictEqual(yield* agent.status, "idle")
        assert.deepStrictEqual(turnEnds(yield* agent.session.events).map((r) => r.kind), ["error"])
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("publication (PUB-11)", () => {
    it.scoped("PUB-11 AGT-04 a followup from a fiber the creation's hook forked, finishing after publication, still wakes the agent", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("welcome")])
        const sent = yield* Deferred.make<void>()
        const held = yield* h.writes.holdNext(hasType("agent/inbox/spliced"))
        // the forked fiber inherits the hook's "own creation" mark; its insert is held until the
        // creation has published, so its wake can no longer be latched for the creation to see
        yield* h.registry.onSessionStart((agent) =>
          Effect.forkDaemon(agent.followup(msg("late")).pipe(Effect.ensuring(Deferred.succeed(sent, undefined)))).pipe(
            Effect.zipRight(held.reached)
          )
        )
        const handle = yield* h.create("forked-hook")
        yield* held.release
        yield* Deferred.await(sent)
        yield* handle.agent.whenIdle
        const log = yield* handle.agent.session.events
        assert.deepStrictEqual(userTexts(log), ["late"])
        assert.deepStrictEqual(yield* handle.agent.inbox.nextTurn, [])
      }))

    it.scoped("PUB-11 a send from the creation's own onSessionStart hook latches; the first turn opens after the hooks", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("welcome")])
        const registryEvents = yield* h.registry.subscribe
        const seen: Array<string> = []
        yield* h.registry.onSessionStart((agent) =>
          Effect.gen(function*() {
            yield* agent.followup(msg("hello from the hook"))
            const log = yield* agent.session.events
            seen.push(`hook:${typesOf(log).join(",")}:${yield* agent.status}`)
          })
        )
        yield* h.registry.onSessionStart((agent) =>
          Effect.gen(function*() {
            const log = yield* agent.session.events
            seen.push(`second hook:${typesOf(log).join(",")}`)
          })
        )
        const handle = yield* h.create("own-hook")
        yield* handle.agent.whenIdle
        const collected = yield* registryEvents.pipe(
          Stream.takeUntil((e) => e._tag === "TurnEnded"),
          Stream.runCollect
        )
        assert.deepStrictEqual(seen, ["hook:agent/inbox/spliced:idle", "second hook:agent/inbox/spliced"])
        const tags = Array.from(collected).map((e: AgentEvent) => e._tag).filter((t) => t !== "ModelDelta")
        assert.isTrue(tags.indexOf("AgentSessionStart") < tags.indexOf("TurnStarted"))
        assert.deepStrictEqual(tags.slice(0, 3), ["AgentCreated", "AgentSessionStart", "InboxInserted"])
        const log = yield* handle.agent.session.events
        assert.deepStrictEqual(typesOf(log).slice(0, 2), ["agent/inbox/spliced", "turn/start"])
        assert.deepStrictEqual(userTexts(log), ["hello from the hook"])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
      }))

    it.scoped("PUB-11 a send from another fiber during publication waits for it, then proceeds (DLV-03)", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const inHook = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        yield* h.registry.onCreated(() =>
          Deferred.succeed(inHook, undefined).pipe(Effect.zipRight(Deferred.await(release)))
        )
        const registryEvents = yield* h.registry.subscribe
        const creating = yield* Effect.fork(h.create("gated"))
        yield* Deferred.await(inHook)
        const found = yield* h.registry.get("gated")
        assert.isTrue(Option.isSome(found))
        if (Option.isNone(found)) return
        const agent = found.value
        const sending = yield* Effect.fork(agent.followup(msg("early")))
        for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
        assert.isTrue(Option.isNone(yield* Fiber.poll(sending)))
        assert.deepStrictEqual(yield* agent.session.events, [])
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(creating)
        yield* Fiber.join(sending)
        assert.isTrue(typesOf(yield* agent.session.events).includes("turn/start"))
        yield* agent.whenIdle
        const collected = yield* registryEvents.pipe(Stream.takeUntil((e) => e._tag === "TurnEnded"), Stream.runCollect)
        const tags = Array.from(collected).map((e: AgentEvent) => e._tag)
        assert.isTrue(tags.indexOf("AgentSessionStart") >= 0)
        assert.isTrue(tags.indexOf("AgentSessionStart") < tags.indexOf("TurnStarted"))
      }))

    it.scoped("PUB-11 a send waiting for publication fails AgentInactive after a veto", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([])
        const inHook = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        yield* h.registry.onCreated(() =>
          Deferred.succeed(inHook, undefined).pipe(
            Effect.zipRight(Deferred.await(release)),
            Effect.zipRight(Effect.fail("veto"))
          )
        )
        const creating = yield* Effect.fork(h.create("vetoed"))
        yield* Deferred.await(inHook)
        const found = yield* h.registry.get("vetoed")
        if (Option.isNone(found)) return assert.fail("the agent is live while its hooks run")
        const sending = yield* Effect.fork(Effect.either(found.value.followup(msg("early"))))
        yield* Deferred.succeed(release, undefined)
        const created = yield* Effect.either(Fiber.join(creating))
        assert.isTrue(Either.isLeft(created) && created.left._tag === "AgentCreationVetoed")
        const sent = yield* Fiber.join(sending)
        assert.isTrue(Either.isLeft(sent) && sent.left._tag === "AgentInactive")
        assert.strictEqual((yield* h.model.requests).length, 0)
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("broken log (SES-02b)", () => {
    it.scoped("SES-02b a failing write inside the loop: AgentError event, idle, later sends and maintenance fail AgentBroken", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("lost")])
        const handle = yield* h.create("broken")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* h.writes.failNext(hasType("assistant/message"))
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.status, "idle")
        const log = yield* agent.session.events
        // nothing of the failed batch was committed; the open turn is left for repair at resume
        assert.deepStrictEqual(ofType(log, "assistant/message"), [])
        assert.deepStrictEqual(ofType(log, "turn/end"), [])
        const sent = yield* Effect.either(agent.followup(msg("after")))
        assert.isTrue(Either.isLeft(sent) && sent.left._tag === "AgentBroken")
        const steered = yield* Effect.either(agent.steer(msg("after2")))
        assert.isTrue(Either.isLeft(steered) && steered.left._tag === "AgentBroken")
        const injected = yield* Effect.either(agent.inject(msg("after3")))
        assert.isTrue(Either.isLeft(injected) && injected.left._tag === "AgentBroken")
        const maintained = yield* Effect.either(agent.runMaintenance(Effect.void))
        assert.isTrue(Either.isLeft(maintained) && maintained.left._tag === "AgentBroken")
        assert.strictEqual((yield* agent.session.events).length, log.length)
        yield* handle.dispose
        const all = yield* events
        const errors = all.flatMap((e) => e._tag === "AgentError" ? [e.error.code] : [])
        assert.deepStrictEqual(errors, ["PERSISTENCE"])
        assert.deepStrictEqual(statusesOf(all), ["running", "idle"])
        // resume repairs the open turn
        const resumed = yield* h.registry.resume({ sessionId: "broken" })
        const repaired = yield* resumed.agent.session.events
        assert.deepStrictEqual(turnEnds(repaired), [{ kind: "interrupted" }])
      }))

    it.scoped("SES-02b SPEC §9 a writer defect inside the loop breaks the agent the same way; it never hangs", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "missing", "{}")])
        const handle = yield* h.create("writer-dies")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* h.writes.dieNext(hasType("tool/result"))
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.status, "idle")
        const log = yield* agent.session.events
        assert.deepStrictEqual(ofType(log, "tool/result"), [])
        assert.deepStrictEqual(ofType(log, "turn/end"), [])
        const sent = yield* Effect.either(agent.followup(msg("after")))
        assert.isTrue(Either.isLeft(sent) && sent.left._tag === "AgentBroken")
        yield* handle.dispose
        assert.deepStrictEqual((yield* events).flatMap((e) => e._tag === "AgentError" ? [e.error.code] : []), [
          "PERSISTENCE"
        ])
      }))

    it.scoped("SES-02b a failing append of a send reaches the caller and changes nothing; the agent stays usable", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const { agent } = yield* h.create("send-fails")
        yield* h.writes.failNext(hasType("agent/inbox/spliced"))
        const failed = yield* Effect.either(agent.followup(msg("m")))
        assert.isTrue(Either.isLeft(failed) && failed.left._tag === "PersistenceError")
        assert.deepStrictEqual(yield* agent.session.events, [])
        assert.strictEqual(yield* agent.status, "idle")
        yield* agent.followup(msg("m"))
        yield* agent.whenIdle
        assert.deepStrictEqual(turnEnds(yield* agent.session.events), [{ kind: "completed" }])
      }))
  })
})
