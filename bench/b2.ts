/**
 * B2: heap retained per live idle agent (after a full GC) at 100 / 1,000 / 10,000 agents, and the
 * peak heap while they are live. Needs `--expose-gc` (the runner re-spawns node with it).
 */
import { Effect } from "effect"
import { AgentRegistry } from "../src/index.js"
import { memoryRuntime, route } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { collect, fmt, fmtBytes, hasGc, settle, stat } from "./harness.js"

const measure = (count: number, round: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* memoryRuntime
    return yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      // one agent first, so lazily built module state is not charged to the measured ones
      yield* registry.create({ sessionId: `b2-${round}-warm`, options: route })
      collect()
      const before = process.memoryUsage().heapUsed
      let peak = before
      for (let i = 0; i < count; i++) {
        yield* registry.create({ sessionId: `b2-${round}-${i}`, options: route })
        if (i % 500 === 0) peak = Math.max(peak, process.memoryUsage().heapUsed)
      }
      peak = Math.max(peak, process.memoryUsage().heapUsed)
      collect()
      const after = process.memoryUsage().heapUsed
      return { perAgent: (after - before) / count, peak: peak - before, total: after - before }
    })).pipe(Effect.provide(context))
  }))

export const scenario: Scenario = {
  id: "B2",
  title: "heap per live idle agent (after GC) at 100 / 1,000 / 10,000 agents",
  run: async ({ quick, log }) => {
    if (!hasGc()) log("B2: run node with --expose-gc for exact figures (heap is then measured without a full GC)")
    const rows: Array<Row> = []
    await Effect.runPromise(measure(200, -1))
    const sizes = [100, 1_000, 10_000]
    const perSize: Record<number, number> = {}
    for (const count of sizes) {
      const rounds = quick ? 1 : count >= 10_000 ? 2 : 3
      const perAgent: Array<number> = []
      const peaks: Array<number> = []
      for (let r = 0; r < rounds; r++) {
        await settle()
        const result = await Effect.runPromise(measure(count, r))
        perAgent.push(result.perAgent)
        peaks.push(result.peak)
        log(`B2 ${count} round ${r}: ${fmtBytes(result.perAgent)}/agent, peak +${fmtBytes(result.peak)}`)
      }
      const s = stat(perAgent)
      perSize[count] = s.median
      rows.push({
        id: "B2",
        scenario: `${fmt(count)} live idle agents, heap per agent after GC`,
        ours: stat(perAgent.map((b) => b / 1024)),
        unit: "KB/agent",
        notes: `peak heap +${fmtBytes(stat(peaks).median)} while creating` +
          (count > 100 ? `; per agent vs 100 agents: ${fmt(s.median / perSize[100]!)}×` : ""),
        peer: `≈40 KB → ${fmt(s.median / 1024 / 40)}× (target ≤0.5×)`,
        extra: { agents: count, kbPerAgent: s.median / 1024 }
      })
    }
    return rows
  }
}
