import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schema, Stream, TestClock } from "effect"
import * as Model from "../src/Model.js"
import * as Tool from "../src/Tool.js"
import { makeHarness, msg, nextEvent, ofType, tagged, typesOf } from "./fixtures/driverHarness.js"

const ran: Array<string> = []

const deploy = Tool.make({
  name: "deploy",
  description: "Deploys",
  parameters: Schema.Struct({ env: Schema.String }),
  approval: "always",
  run: (args) => Effect.sync(() => {
    ran.push(args.env)
    return Tool.text(`deployed ${args.env}`)
  })
})

const script = [Model.toolCall("c1", "deploy", JSON.stringify({ env: "prod" })), Model.text("done")]

describe("approvals", () => {
  it.scoped("HIL-01 HIL-02 HIL-06 a call that needs approval waits (awaiting-input), approve runs it and the turn goes on", () =>
    Effect.gen(function*() {
      ran.length = 0
      const harness = yield* makeHarness(script)
      const { agent } = yield* harness.create("a1", { setup: (a) => a.tools.register(deploy) })
      yield* agent.followup(msg("m1"))
      yield* agent.whenIdle
      assert.strictEqual(yield* agent.status, "awaiting-input")
      const pending = yield* agent.pending
      assert.strictEqual(pending.length, 1)
      assert.strictEqual(pending[0]!._tag, "Approval")
      assert.strictEqual(pending[0]!.callId, "c1")
      const events = yield* agent.session.events
      assert.isFalse(typesOf(events).includes("tool/call"))
      assert.isFalse(typesOf(events).includes("turn/end"))
      const first = yield* agent.approve("c1")
      assert.isFalse(first.duplicate)
      yield* agent.whenIdle
      const again = yield* agent.approve("c1")
      assert.isTrue(again.duplicate)
      const refused = yield* Effect.flip(agent.reject("c1"))
      assert.strictEqual(refused._tag, "ApprovalAlreadyDecided")
      const unknown = yield* Effect.flip(agent.approve("nope"))
      assert.strictEqual(unknown._tag, "ApprovalNotFound")
      assert.deepStrictEqual(ran, ["prod"])
      const after = yield* agent.session.events
      assert.strictEqual(ofType(after, "turn/end").length, 1)
      assert.strictEqual(ofType(after, "tool/approval-decided").length, 1)
      assert.strictEqual(yield* agent.status, "idle")
    }))

  it.scoped("HIL-02 a decision made as soon as the request is durable (before the step goes on) is acted on", () =>
    Effect.gen(function*() {
      ran.length = 0
      const harness = yield* makeHarness(script)
      const { agent } = yield* harness.create("a-early", { setup: (a) => a.tools.register(deploy) })
      // a watcher of the log approves the moment the writer publishes the request
      const watcher = yield* agent.session.changes.pipe(
        Stream.filter((event) => event.type === "tool/approval-requested"),
        Stream.take(1),
        Stream.runForEach(() => agent.approve("c1")),
        Effect.fork
      )
      yield* Effect.yieldNow()
      yield* agent.followup(msg("m1"))
      yield* Fiber.join(watcher)
      yield* agent.whenIdle
      assert.deepStrictEqual(ran, ["prod"])
      assert.strictEqual(yield* agent.status, "idle")
      assert.deepStrictEqual(yield* agent.pending, [])
      const events = yield* agent.session.events
      assert.strictEqual(ofType(events, "tool/approval-decided").length, 1)
      assert.strictEqual(ofType(events, "turn/end")[0]!.data.reason.kind, "completed")
    }))

  it.scoped("HIL-02 reject gives the call a REJECTED result with the message, nothing runs", () =>
    Effect.gen(function*() {
      ran.length = 0
      const harness = yield* makeHarness(script)
      const { agent } = yield* harness.create("a2", { setup: (a) => a.tools.register(deploy) })
      yield* agent.followup(msg("m1"))
      yield* agent.whenIdle
      yield* agent.reject("c1", { message: "not today" })
      yield* agent.whenIdle
      const events = yield* agent.session.events
      const result = ofType(events, "tool/result")[0]!
      assert.strictEqual(result.data.error?.code, "REJECTED")
      assert.deepStrictEqual(result.data.message.content, [{ type: "text", text: "not today" }])
      assert.deepStrictEqual(ran, [])
      assert.strictEqual(ofType(events, "turn/end").length, 1)
    }))

  it.scoped("HIL-04 disposal of a suspended agent writes nothing; resume comes up suspended and approve runs the call", () =>
    Effect.gen(function*() {
      ran.length = 0
      const harness = yield* makeHarness(script)
      const handle = yield* harness.create("a4", { setup: (a) => a.tools.register(deploy) })
      yield* handle.agent.followup(msg("m1"))
      yield* handle.agent.whenIdle
      const before = (yield* handle.agent.session.events).length
      yield* handle.dispose
      const resumed = yield* harness.registry.resume({
        sessionId: "a4",
        options: { provider: "scripted", model: "test" },
        setup: (a) => a.tools.register(deploy)
      })
      const stored = yield* resumed.agent.session.events
      assert.strictEqual(stored.length, before)
      assert.strictEqual(yield* resumed.agent.status, "awaiting-input")
      assert.strictEqual((yield* resumed.agent.pending).length, 1)
      yield* resumed.agent.approve("c1")
      yield* resumed.agent.whenIdle
      assert.deepStrictEqual(ran, ["prod"])
      const after = yield* resumed.agent.session.events
      assert.strictEqual(ofType(after, "turn/end")[0]!.data.reason.kind, "completed")
    }))

  it.scoped("HIL-05 cancel settles the pending request as canceled and ends the turn aborted", () =>
    Effect.gen(function*() {
      const harness = yield* makeHarness(script)
      const { agent } = yield* harness.create("a3", { setup: (a) => a.tools.register(deploy) })
      yield* agent.followup(msg("m1"))
      yield* agent.whenIdle
      yield* agent.cancel({ kind: "user" })
      yield* agent.whenIdle
      const events = yield* agent.session.events
      assert.strictEqual(ofType(events, "tool/approval-decided")[0]!.data.decision, "canceled")
      assert.strictEqual(ofType(events, "tool/result")[0]!.data.error?.code, "CANCELED")
      assert.strictEqual(ofType(events, "turn/end")[0]!.data.reason.kind, "aborted")
    }))

  it.scoped("HIL-05 approvalTimeout: at the stored deadline (the Clock's time) the request is rejected with reason timeout", () =>
    Effect.gen(function*() {
      ran.length = 0
      const harness = yield* makeHarness(script)
      const { agent } = yield* harness.create("a5", {
        options: { provider: "scripted", model: "test", approvalTimeout: "1 minute" },
        setup: (a) => a.tools.register(deploy)
      })
      yield* agent.followup(msg("m1"))
      yield* agent.whenIdle
      const requested = ofType(yield* agent.session.events, "tool/approval-requested")[0]!
      assert.strictEqual(requested.data.deadline, 60_000)
      // the decision's live event follows its durable write (EVS-02); the turn's end follows the decision
      const ended = yield* nextEvent(agent, tagged("TurnEnded"))
      yield* TestClock.adjust("2 minutes")
      yield* ended
      const events = yield* agent.session.events
      const decided = ofType(events, "tool/approval-decided")[0]!
      assert.strictEqual(decided.data.decision, "rejected")
      assert.strictEqual(decided.data.reason, "timeout")
      assert.deepStrictEqual(ran, [])
    }))
})
