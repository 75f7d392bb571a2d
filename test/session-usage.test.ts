/**
 * MOD-06: `session.usage` sums the usage every `assistant/message` recorded, per field.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { Usage } from "../src/SessionEvent.js"
import { memoryRuntime, route } from "./fixtures/runtime.js"

describe("session usage (MOD-06)", () => {
  it.scoped("MOD-06 session.usage is the per-field sum of the usage each assistant/message recorded, also after a resume", () =>
    Effect.gen(function*() {
      const { context } = yield* memoryRuntime([Model.text("one"), Model.text("two, a little longer")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "usage-1", options: route })
        const agent = handle.agent
        assert.deepStrictEqual(yield* agent.session.usage, {})
        for (const text of ["first", "second"]) {
          yield* agent.followup(Message.user(text))
          yield* agent.whenIdle
        }
        const recorded: Array<Usage> = []
        for (const event of yield* agent.session.events) {
          if (event.type === "assistant/message" && event.data !== null && typeof event.data === "object") {
            const usage = (event.data as { readonly usage?: Usage }).usage
            if (usage !== undefined) recorded.push(usage)
          }
        }
        assert.strictEqual(recorded.length, 2)
        const sum = (field: keyof Usage) => recorded.reduce((n, usage) => n + (usage[field] ?? 0), 0)
        const usage = yield* agent.session.usage
        assert.strictEqual(usage.inputTokens, sum("inputTokens"))
        assert.strictEqual(usage.outputTokens, sum("outputTokens"))
        assert.isAbove(usage.outputTokens ?? 0, 0)
        assert.strictEqual(usage.reasoningTokens, undefined)
        // a resume folds the same sums from the stored log
        yield* handle.dispose
        const resumed = yield* registry.resume({ sessionId: "usage-1", options: route })
        assert.deepStrictEqual(yield* resumed.agent.session.usage, usage)
      }).pipe(Effect.provide(context))
    }))
})
