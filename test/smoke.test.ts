import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import { memoryRuntime, route } from "./fixtures/runtime.js"

describe("smoke", () => {
  it.scoped("a followup runs one turn", () =>
    Effect.gen(function*() {
      const { context } = yield* memoryRuntime([Model.text("hello back")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "a1", options: route })
        yield* handle.agent.followup(Message.user("hi", { id: "m1" }))
        yield* handle.agent.whenIdle
        const events = yield* handle.agent.session.events
        assert.deepStrictEqual(events.map((e) => e.type), [
          "agent/inbox/spliced",
          "turn/start",
          "agent/inbox/spliced",
          "step/start",
          "user/message",
          "request/config",
          "assistant/message",
          "step/end",
          "turn/end"
        ])
        yield* handle.dispose
      }).pipe(Effect.provide(context))
    }))
})
