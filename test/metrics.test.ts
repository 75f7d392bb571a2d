/**
 * OBS-02: the library's metrics (Effect `Metric`s, `effect-agent/Metrics`) after scripted runs:
 * each read as the change it made (the global registry is shared by the file's tests).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Metric, MetricLabel, Schema } from "effect"
import * as AgentHost from "../src/AgentHost.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Metrics from "../src/Metrics.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { memoryRuntime, route } from "./fixtures/runtime.js"

const noParams = Schema.Struct({})

/** A metric with its tags, in the order the library adds them. */
const tagged = <Type, In, Out>(metric: Metric.Metric<Type, In, Out>, ...pairs: ReadonlyArray<string>) => {
  const labels: Array<MetricLabel.MetricLabel> = []
  for (let i = 0; i + 1 < pairs.length; i += 2) labels.push(MetricLabel.make(pairs[i]!, pairs[i + 1]!))
  return Metric.taggedWithLabels(metric, labels)
}

const count = (metric: Metric.Metric.Counter<number>, ...pairs: ReadonlyArray<string>) =>
  Effect.map(Metric.value(tagged(metric, ...pairs)), (state) => state.count)

const gauge = (metric: Metric.Metric.Gauge<number>) => Effect.map(Metric.value(metric), (state) => state.value)

const histogram = (metric: Metric.Metric.Histogram<number>, ...pairs: ReadonlyArray<string>) =>
  Effect.map(Metric.value(tagged(metric, ...pairs)), (state) => ({ count: state.count, sum: state.sum }))

/** Runs `read` before and after `body`: the difference of each number it returns. */
const changeOf = <R extends Record<string, number>, A, E, X>(
  read: Effect.Effect<R>,
  body: Effect.Effect<A, E, X>
) =>
  Effect.gen(function*() {
    const before = yield* read
    const result = yield* body
    const after = yield* read
    const change = {} as Record<keyof R, number>
    for (const key of Object.keys(before) as Array<keyof R>) change[key] = after[key]! - before[key]!
    return { change, result, after }
  })

const usageSums = (log: ReadonlyArray<SessionEvent>) => {
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

describe("OBS-02 metrics", () => {
  it.scoped("OBS-02 a scripted tool turn: turns, steps, tool calls and latency, model requests, tokens, commits", () =>
    Effect.gen(function*() {
      const rt = yield* memoryRuntime([
        [Model.text("let me look"), Model.toolCall("c1", "look", "{}"), Model.toolCall("c2", "broken", "{}")],
        Model.text("done")
      ])
      const look = Tool.make({
        name: "look",
        description: "looks",
        parameters: noParams,
        run: () => Effect.succeed(Tool.text("seen"))
      })
      const broken = Tool.make({
        name: "broken",
        description: "fails",
        parameters: noParams,
        run: () => Effect.fail("no disk")
      })
      const read = Effect.all({
        live: gauge(Metrics.liveAgents),
        depth: gauge(Metrics.inboxDepth),
        completed: count(Metrics.turns, "reason", "completed"),
        steps: count(Metrics.steps),
        lookOk: count(Metrics.toolCalls, "tool", "look", "outcome", "ok"),
        brokenFailed: count(Metrics.toolCalls, "tool", "broken", "outcome", "tool_failed"),
        lookTimed: Effect.map(histogram(Metrics.toolCallDuration, "tool", "look"), (h) => h.count),
        requests: Effect.map(
          histogram(Metrics.modelRequestDuration, "provider", "scripted", "model", "test", "outcome", "ok"),
          (h) => h.count
        ),
        input: count(Metrics.modelTokens, "provider", "scripted", "model", "test", "kind", "input"),
        output: count(Metrics.modelTokens, "provider", "scripted", "model", "test", "kind", "output"),
        commits: Effect.map(histogram(Metrics.persistenceCommitBatchSize), (h) => h.count),
        committedEvents: Effect.map(histogram(Metrics.persistenceCommitBatchSize), (h) => h.sum),
        commitsTimed: Effect.map(histogram(Metrics.persistenceCommitDuration, "outcome", "ok"), (h) => h.count)
      })
      const { change, result: log } = yield* changeOf(
        read,
        Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({
            sessionId: "metered",
            options: route,
            setup: (a) => Effect.all([a.tools.register(look), a.tools.register(broken)], { discard: true })
          })
          const before = yield* read
          // an inject waits in the inbox of the idle agent: the depth counts it until a step claims it
          yield* handle.agent.inject(Message.user("context", { id: "m0" }))
          assert.strictEqual((yield* read).depth - before.depth, 1)
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          yield* handle.agent.whenIdle
          assert.strictEqual((yield* read).depth, before.depth, "both messages entered the turn")
          assert.strictEqual((yield* read).live - before.live, 0)
          const log = yield* handle.agent.session.events
          yield* handle.dispose
          return log
        }).pipe(Effect.provide(rt.context))
      )
      const { input, output } = usageSums(log)
      assert.deepStrictEqual(change, {
        live: 0,
        depth: 0,
        completed: 1,
        steps: 2,
        lookOk: 1,
        brokenFailed: 1,
        lookTimed: 1,
        requests: 2,
        input,
        output,
        commits: change.commitsTimed,
        // every event of the log went through the session writer, in batches
        committedEvents: log.length,
        commitsTimed: change.commitsTimed
      })
      assert.isAbove(change.commitsTimed, 3)
      assert.isBelow(change.commitsTimed, log.length, "batches of several events")
    }))

  it.scoped("OBS-02 live agents and inbox depth: from publication, a resume's pending counts, a teardown leaves", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const rt = yield* memoryRuntime([], { storage })
      const read = Effect.all({ live: gauge(Metrics.liveAgents), depth: gauge(Metrics.inboxDepth) })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const start = yield* read
        const handle = yield* registry.create({ sessionId: "pending", options: route })
        yield* handle.agent.inject(Message.user("one", { id: "p1" }))
        yield* handle.agent.inject(Message.user("two", { id: "p2" }))
        assert.deepStrictEqual(yield* read, { live: start.live + 1, depth: start.depth + 2 })
        // a cancel discards them: the depth follows the canceled splice
        yield* handle.agent.cancel({ kind: "user" })
        assert.deepStrictEqual(yield* read, { live: start.live + 1, depth: start.depth })
        yield* handle.agent.inject(Message.user("three", { id: "p3" }))
        // torn down with its inbox kept (LIFE-06): no longer live, its pending message no longer counted
        yield* handle.dispose
        assert.deepStrictEqual(yield* read, start)
        // resumed: live again, and what its log holds pending counts again
        const resumed = yield* registry.resume({ sessionId: "pending" })
        assert.deepStrictEqual(yield* read, { live: start.live + 1, depth: start.depth + 1 })
        yield* resumed.dispose
        assert.deepStrictEqual(yield* read, start)
        // a creation vetoed by its setup never was live
        const vetoed = yield* Effect.flip(registry.create({ sessionId: "vetoed", setup: () => Effect.fail("no") }))
        assert.strictEqual(vetoed, "no")
        assert.deepStrictEqual(yield* read, start)
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("OBS-02 a cancelled turn counts turns by reason aborted and the interrupted call as aborted", () =>
    Effect.gen(function*() {
      const rt = yield* memoryRuntime([[Model.toolCall("c1", "stuck", "{}")]])
      const started = yield* Deferred.make<void>()
      const stuck = Tool.make({
        name: "stuck",
        description: "never ends",
        parameters: noParams,
        run: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
      })
      const read = Effect.all({
        aborted: count(Metrics.turns, "reason", "aborted"),
        stuckAborted: count(Metrics.toolCalls, "tool", "stuck", "outcome", "aborted")
      })
      const { change } = yield* changeOf(
        read,
        Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({
            sessionId: "aborted",
            options: route,
            setup: (a) => a.tools.register(stuck)
          })
          yield* handle.agent.followup(Message.user("go"))
          yield* Deferred.await(started)
          yield* handle.agent.cancel({ kind: "user" })
          yield* handle.agent.whenIdle
          yield* handle.dispose
        }).pipe(Effect.provide(rt.context))
      )
      assert.deepStrictEqual(change, { aborted: 1, stuckAborted: 1 })
    }))

  it.scoped("OBS-02 a failed model request is timed by its error code", () =>
    Effect.gen(function*() {
      const rt = yield* memoryRuntime([Model.fail("BAD_REQUEST")])
      const read = Effect.all({
        failed: Effect.map(
          histogram(Metrics.modelRequestDuration, "provider", "scripted", "model", "test", "outcome", "BAD_REQUEST"),
          (h) => h.count
        ),
        error: count(Metrics.turns, "reason", "error")
      })
      const { change } = yield* changeOf(
        read,
        Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({ sessionId: "failing", options: { ...route, maxRequestRetries: 0 } })
          yield* handle.agent.followup(Message.user("go"))
          yield* handle.agent.whenIdle
          yield* handle.dispose
        }).pipe(Effect.provide(rt.context))
      )
      assert.deepStrictEqual(change, { failed: 1, error: 1 })
    }))

  it.scoped("OBS-02 host activations (by outcome) and passivations (forced or not)", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const layer = AgentHost.layer().pipe(
        Layer.provideMerge(AgentRuntime.layerMemory({ storage })),
        Layer.provide(Model.layerScripted([]))
      )
      const read = Effect.all({
        ok: count(Metrics.hostActivations, "outcome", "ok"),
        failed: count(Metrics.hostActivations, "outcome", "failed"),
        forced: count(Metrics.hostPassivations, "forced", "true")
      })
      const { change } = yield* changeOf(
        read,
        Effect.gen(function*() {
          const host = yield* AgentHost.AgentHost
          yield* host.get("h1", { options: route })
          assert.isTrue(yield* host.passivate("h1"))
          // passivating what is not live passivates nothing
          assert.isFalse(yield* host.passivate("h1"))
          yield* host.get("h1")
          const missing = yield* Effect.flip(host.get("nobody"))
          assert.strictEqual(missing._tag, "SessionNotFound")
        }).pipe(Effect.provide(layer))
      )
      assert.deepStrictEqual(change, { ok: 2, failed: 1, forced: 1 })
    }))
})
