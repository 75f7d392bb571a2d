/**
 * The agent and the session are class instances (B2: their accessors on the prototype) whose verbs
 * stay own functions: taken off the object, they still act on it, and a view made with
 * `Object.create` (as the host's) reads everything through the prototype.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Agent } from "../src/Agent.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import { memoryRuntime, route } from "./fixtures/runtime.js"

describe("agent shape", () => {
  it.scoped("AGT-04 SES-01 verbs taken off the agent and the session act on them", () =>
    Effect.gen(function*() {
      const { context } = yield* memoryRuntime([Model.text("hello back")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent, dispose } = yield* registry.create({ sessionId: "shape-1", options: route })
        const { followup, inject, whenIdle, session } = agent
        const { append, appendAll } = session
        yield* followup(Message.user("hi", { id: "m1" }))
        yield* whenIdle
        yield* inject(Message.user("later", { id: "m2" }))
        yield* append({ type: "app/note", data: { n: 1 } })
        yield* appendAll([{ type: "app/note", data: { n: 2 } }])
        const events = yield* agent.session.events
        assert.deepStrictEqual(events.map((e) => e.type).slice(-4), [
          "turn/end",
          "agent/inbox/spliced",
          "app/note",
          "app/note"
        ])
        assert.deepStrictEqual((yield* agent.inbox.nextStep).map((m) => m.id), ["m2"])
        yield* dispose
      }).pipe(Effect.provide(context))
    }))

  it.scoped("HOST-02 a view made with Object.create reads the agent's status, events and session through it", () =>
    Effect.gen(function*() {
      const { context } = yield* memoryRuntime([Model.text("hello back")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent, dispose } = yield* registry.create({ sessionId: "shape-2", options: route })
        const view: Agent = Object.create(agent)
        assert.strictEqual(view.id, agent.id)
        assert.strictEqual(yield* view.status, "idle")
        yield* view.followup(Message.user("hi", { id: "m1" }))
        yield* view.whenIdle
        assert.strictEqual(yield* view.status, "idle")
        assert.deepStrictEqual((yield* view.session.messages).map((m) => m.role), ["user", "assistant"])
        assert.strictEqual(view.tools, agent.tools)
        yield* dispose
      }).pipe(Effect.provide(context))
    }))
})
