/**
 * OBS-01: the library's spans through Effect's tracer, exported with `@effect/opentelemetry` to an
 * in-memory exporter: the tree and attributes of a two-step tool turn, of a cancelled turn, and of
 * a resume with repair.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Schema } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Repair from "../src/Repair.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as Tool from "../src/Tool.js"
import { route } from "./fixtures/runtime.js"
import { childrenOf, isChildOf, named, one, runTraced } from "./fixtures/tracing.js"

const noParams = Schema.Struct({})

const usageOf = (log: ReadonlyArray<SessionEvent>) => {
  let input = 0
  let output = 0
  for (const event of log) {
    if (event.type !== "assistant/message") continue
    const usage = (event.data as { readonly usage?: { inputTokens?: number; outputTokens?: number } }).usage
    input += usage?.inputTokens ?? 0
    output += usage?.outputTokens ?? 0
  }
  return { input, output }
}

describe("OBS-01 spans", () => {
  it.scoped("OBS-01 a two-step tool turn: turn → step → model request + tool call, each with its attributes", () =>
    Effect.gen(function*() {
      const look = Tool.make({
        name: "look",
        description: "looks",
        parameters: noParams,
        // the tool's own span nests under its tool.call span
        run: () => Effect.withSpan(Effect.succeed(Tool.text("seen")), "look.body")
      })
      const { result: log, spans } = yield* runTraced(
        [[Model.text("let me look"), Model.toolCall("c1", "look", "{}")], Model.text("done")],
        Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({
            sessionId: "traced",
            options: route,
            setup: (a) => a.tools.register(look)
          })
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          yield* handle.agent.whenIdle
          const log = yield* handle.agent.session.events
          yield* handle.dispose
          return log
        })
      )
      const create = one(spans, "effect-agent.create")
      assert.strictEqual(create.attributes["effect_agent.agent.id"], "traced")
      const turn = one(spans, "effect-agent.turn")
      // the turn is the root of its tree (the drain carries no caller's span, §6.3)
      assert.isUndefined(turn.parentSpanContext)
      const { input, output } = usageOf(log)
      assert.isAbove(output, 0)
      assert.deepInclude(turn.attributes, {
        "effect_agent.agent.id": "traced",
        "effect_agent.turn": 1,
        "effect_agent.turn.end_reason": "completed",
        "effect_agent.turn.steps": 2,
        "gen_ai.usage.input_tokens": input,
        "gen_ai.usage.output_tokens": output
      })
      const steps = [...named(spans, "effect-agent.step")].sort((a, b) =>
        Number(a.attributes["effect_agent.step"]) - Number(b.attributes["effect_agent.step"])
      )
      assert.strictEqual(steps.length, 2)
      assert.isTrue(steps.every((step) => isChildOf(step, turn)))
      assert.deepStrictEqual(steps.map((s) => s.attributes["gen_ai.response.finish_reasons"]), ["tool-calls", "stop"])
      const requests = named(spans, "effect-agent.model.request")
      assert.strictEqual(requests.length, 2)
      for (const [i, step] of steps.entries()) {
        const children = childrenOf(spans, step).map((span) => span.name).filter((name) => !name.includes("commit"))
        assert.deepStrictEqual(children.sort(), i === 0 ? ["effect-agent.model.request", "effect-agent.tool.call"] : [
          "effect-agent.model.request"
        ])
        const [request] = childrenOf(spans, step).filter((span) => span.name === "effect-agent.model.request")
        assert.deepInclude(request!.attributes, {
          "gen_ai.system": "scripted",
          "gen_ai.request.model": "test",
          "effect_agent.turn": 1,
          "effect_agent.step": i + 1
        })
        assert.isAbove(Number(request!.attributes["gen_ai.usage.output_tokens"]), 0)
      }
      const call = one(spans, "effect-agent.tool.call")
      assert.deepInclude(call.attributes, {
        "gen_ai.tool.name": "look",
        "gen_ai.tool.call.id": "c1",
        "effect_agent.tool.is_error": false
      })
      assert.isTrue(isChildOf(one(spans, "look.body"), call))
      // every durable commit of the turn sits in the turn's tree (under the span that wrote it)
      const commits = named(spans, "effect-agent.persistence.commit")
      const treeIds = new Set([turn, ...steps, call].map((span) => span.spanContext().spanId))
      const inTree = commits.filter((c) => c.parentSpanContext !== undefined && treeIds.has(c.parentSpanContext.spanId))
      assert.isAtLeast(inTree.length, 4)
      assert.isTrue(commits.every((c) => Number(c.attributes["effect_agent.persistence.batch_size"]) > 0))
      assert.isTrue(commits.some((c) => isChildOf(c, steps[0]!)), "the step's assistant/message commit")
      assert.isTrue(commits.some((c) => isChildOf(c, call)), "the tool result's commit")
      const dispose = one(spans, "effect-agent.dispose")
      assert.strictEqual(dispose.attributes["effect_agent.agent.id"], "traced")
      assert.isUndefined(dispose.attributes["error.type"])
    }))

  it.scoped("OBS-01 a cancelled turn: end reason and error.type on the turn, the interrupted step and tool call", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const slow = Tool.make({
        name: "slow",
        description: "never finishes",
        parameters: noParams,
        run: () => Deferred.succeed(started, undefined).pipe(Effect.zipRight(Effect.never))
      })
      const { spans } = yield* runTraced(
        [[Model.toolCall("c1", "slow", "{}")]],
        Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({
            sessionId: "cancelled",
            options: route,
            setup: (a) => a.tools.register(slow)
          })
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          yield* Deferred.await(started)
          yield* handle.agent.cancel({ kind: "user" })
          yield* handle.agent.whenIdle
          yield* handle.dispose
        })
      )
      const turn = one(spans, "effect-agent.turn")
      assert.deepInclude(turn.attributes, {
        "effect_agent.turn.end_reason": "aborted",
        "error.type": "aborted:user",
        "effect_agent.turn.steps": 1
      })
      const step = one(spans, "effect-agent.step")
      assert.isTrue(isChildOf(step, turn))
      assert.strictEqual(step.attributes["error.type"], "interrupted")
      const call = one(spans, "effect-agent.tool.call")
      assert.isTrue(isChildOf(call, step))
      assert.strictEqual(call.attributes["error.type"], "interrupted")
      assert.strictEqual(call.attributes["gen_ai.tool.name"], "slow")
      // the request that asked for the call completed
      const request = one(spans, "effect-agent.model.request")
      assert.isTrue(isChildOf(request, step))
      assert.isUndefined(request.attributes["error.type"])
      // the closers' batch (ABORTED result, step/end, turn/end) is committed under the turn
      assert.isTrue(named(spans, "effect-agent.persistence.commit").some((c) => isChildOf(c, turn)))
    }))

  it.scoped("OBS-01 RES-03 a resume with repair: the resume span counts the repair events, its commit is a child", () =>
    Effect.gen(function*() {
      // a first process ran a turn; its turn/end never reached the disk
      const first = yield* runTraced(
        [Model.text("stored answer")],
        Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({ sessionId: "repaired", options: route })
          yield* handle.agent.followup(Message.user("question", { id: "m1" }))
          yield* handle.agent.whenIdle
          yield* handle.dispose
        })
      )
      const id = "repaired" as SessionId
      const stored = (yield* first.storage.events(id)) ?? []
      assert.strictEqual(stored.at(-1)?.type, "turn/end")
      yield* first.storage.truncate(id, stored.length - 1)
      const { result: log, spans } = yield* runTraced(
        [],
        Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.resume({ sessionId: "repaired", options: route })
          const log = yield* handle.agent.session.events
          yield* handle.dispose
          return log
        }),
        { storage: first.storage }
      )
      // the repair closed the open turn (RES-03)
      assert.strictEqual(log.length, stored.length)
      assert.strictEqual(log.at(-1)?.type, "turn/end")
      assert.deepStrictEqual(log.at(-1)?.data, Repair.closers(log.slice(0, -1))[0]?.data)
      const resume = one(spans, "effect-agent.resume")
      assert.deepInclude(resume.attributes, { "effect_agent.agent.id": "repaired", "effect_agent.repair.events": 1 })
      assert.isUndefined(resume.attributes["error.type"])
      const repairCommits = named(spans, "effect-agent.persistence.commit").filter((c) =>
        c.attributes["effect_agent.repair.events"] !== undefined
      )
      assert.strictEqual(repairCommits.length, 1)
      assert.isTrue(isChildOf(repairCommits[0]!, resume))
      assert.strictEqual(repairCommits[0]!.attributes["effect_agent.persistence.batch_size"], 1)
      // nothing was pending: no turn ran
      assert.strictEqual(named(spans, "effect-agent.turn").length, 0)
      assert.strictEqual(one(spans, "effect-agent.dispose").attributes["effect_agent.agent.id"], "repaired")
    }))
})
