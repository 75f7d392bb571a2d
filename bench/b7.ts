/**
 * B7: N concurrent agents each running 10 sequential turns (N = 100, 1,000; 10,000 with `--large`,
 * which alone takes minutes here), memory persistence, model answers at once. Creation is not timed.
 */
import { Effect } from "effect"
import { AgentRegistry } from "../src/index.js"
import type { Agent } from "../src/Agent.js"
import { memoryRuntime, route, userMessage } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, settle, stat } from "./harness.js"

const TURNS = 10

const run = (round: string, agents: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* memoryRuntime
    return yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      const live: Array<Agent> = []
      for (let i = 0; i < agents; i++) {
        live.push((yield* registry.create({ sessionId: `b7-${round}-${i}`, options: route })).agent)
      }
      const start = now()
      yield* Effect.forEach(live, (agent) =>
        Effect.gen(function*() {
          for (let t = 0; t < TURNS; t++) {
            yield* agent.followup(userMessage(`${agent.id}-${t}`, "next question, please"))
            yield* agent.whenIdle
          }
        }), { concurrency: "unbounded", discard: true })
      const elapsed = now() - start
      const ended = (yield* live[0]!.session.events).filter((e) => e.type === "turn/end").length
      if (ended !== TURNS) return yield* Effect.dieMessage(`B7: ${ended} turns, ${TURNS} expected`)
      return (agents * TURNS) / (elapsed / 1000)
    })).pipe(Effect.provide(context))
  })).pipe(Effect.orDie)

export const scenario: Scenario = {
  id: "B7",
  title: "100 / 1,000 (/ 10,000 with --large) concurrent agents × 10 turns",
  run: async ({ large, quick, log }) => {
    const rows: Array<Row> = []
    await Effect.runPromise(run("warm", 100))
    let base: number | undefined
    for (const agents of large ? [100, 1_000, 10_000] : [100, 1_000]) {
      const rounds = quick || agents >= 10_000 ? 1 : agents >= 1_000 ? 2 : 3
      const rates: Array<number> = []
      for (let r = 0; r < rounds; r++) {
        await settle()
        rates.push(await Effect.runPromise(run(`${agents}-${r}`, agents)))
        log(`B7 ${agents} round ${r}: ${fmt(rates[r]!)} turns/s`)
      }
      const rate = stat(rates)
      base ??= rate.median
      rows.push({
        id: "B7",
        scenario: `${fmt(agents)} agents × ${TURNS} turns, concurrent, memory`,
        ours: rate,
        unit: "turns/s",
        notes: `per-turn cost vs 100 agents: ${fmt(base / rate.median)}×`,
        peer: agents === 100 ? `100×20 ≈800–1,100/s → ${fmt(rate.median / 950)}×` : ""
      })
    }
    return rows
  }
}
