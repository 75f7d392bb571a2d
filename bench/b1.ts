/**
 * B1: create + dispose 10,000 agents sequentially over memory persistence, against a bare
 * `Scope.make` + `Scope.close` per agent.
 */
import { Effect, Exit, Scope } from "effect"
import { AgentRegistry } from "../src/index.js"
import { memoryRuntime, route } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { countOperations, fmt, now, perSecond, ratios, settle, stat } from "./harness.js"

const AGENTS = 10_000

const ours = (round: string, count: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* memoryRuntime
    return yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      const start = now()
      for (let i = 0; i < count; i++) {
        const handle = yield* registry.create({ sessionId: `b1-${round}-${i}`, options: route })
        yield* handle.dispose
      }
      return ((now() - start) * 1000) / count
    })).pipe(Effect.provide(context))
  })).pipe(Effect.orDie)

const raw = (count: number) =>
  Effect.gen(function*() {
    const start = now()
    for (let i = 0; i < count; i++) {
      const scope = yield* Scope.make()
      yield* Scope.close(scope, Exit.void)
    }
    return ((now() - start) * 1000) / count
  })

/**
 * Effect operations per create+dispose (and per bare Scope.make+close): counted over `count` agents,
 * less the runtime's own construction, so the figure is exact whatever the machine's load.
 */
const operationsPerAgent = (count: number) =>
  Effect.gen(function*() {
    const [, withAgents] = yield* countOperations(ours("ops", count))
    const [, empty] = yield* countOperations(ours("ops-empty", 0))
    const [, scopes] = yield* countOperations(raw(count))
    return { ours: (withAgents - empty) / count, raw: scopes / count }
  })

export const scenario: Scenario = {
  id: "B1",
  title: "create + dispose 10,000 agents sequentially (memory persistence)",
  run: async ({ quick, log }) => {
    const rounds = quick ? 1 : 3
    // a full round first: the per-agent cost keeps falling over the first ~10,000 creations while
    // the JIT settles, and the figure is meant to be the steady state
    await Effect.runPromise(ours("warm", AGENTS))
    await Effect.runPromise(raw(AGENTS))
    const oursUs: Array<number> = []
    const rawUs: Array<number> = []
    for (let r = 0; r < rounds; r++) {
      await settle()
      oursUs.push(await Effect.runPromise(ours(`r${r}`, AGENTS)))
      rawUs.push(await Effect.runPromise(raw(AGENTS)))
      log(`B1 round ${r}: ${fmt(oursUs[r]!)} µs/agent, raw ${fmt(rawUs[r]!)} µs`)
    }
    const operations = await Effect.runPromise(operationsPerAgent(1_000))
    log(`B1 Effect operations per agent: ${fmt(operations.ours)} (Scope.make+close: ${fmt(operations.raw)})`)
    const rate = stat(oursUs.map(perSecond))
    const row: Row = {
      id: "B1",
      scenario: "create+dispose 10,000 agents, sequential, memory",
      ours: rate,
      unit: "agents/s",
      raw: { label: "Scope.make+close", value: stat(rawUs.map(perSecond)) },
      costRatio: ratios(oursUs, rawUs),
      notes: `${fmt(stat(oursUs).median)} µs per agent; ${fmt(operations.ours)} Effect operations per agent ` +
        `(Scope.make+close: ${fmt(operations.raw)})`,
      peer: `1,200–1,700/s → ${fmt(rate.median / 1450)}× (target ≥3×)`,
      extra: { operationsPerAgent: operations.ours, rawOperationsPerAgent: operations.raw }
    }
    return [row]
  }
}
