/**
 * B14 (PERF-02): concurrent turns — 100 agents × 20 turns, 10 × 200 and 1,000 × 5 — with the
 * scripted instant model and memory persistence. Each agent runs its turns one after another
 * (follow-up, then `whenIdle`), all agents at once. Reports turns/s (wall), CPU time per turn
 * (`process.cpuUsage`, user + system, which a shared machine moves less than wall time) and bytes
 * allocated per turn (`measureAllocated`). Creating the agents is not measured.
 */
import { Effect } from "effect"
import { AgentRegistry } from "../src/index.js"
import type { Agent } from "../src/Agent.js"
import { memoryRuntime, route, userMessage } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, fmtBytes, measureAllocated, now, settle, stat } from "./harness.js"

/** The shapes measured: agents × sequential turns per agent. */
export const shapes: ReadonlyArray<readonly [agents: number, turns: number]> = [[100, 20], [10, 200], [1_000, 5]]

interface Sample {
  readonly turnsPerSecond: number
  readonly cpuMsPerTurn: number
  readonly bytesPerTurn: number
}

const run = (round: string, agents: number, turns: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* memoryRuntime
    return yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      const live: Array<Agent> = []
      for (let i = 0; i < agents; i++) {
        live.push((yield* registry.create({ sessionId: `b14-${round}-${i}`, options: route })).agent)
      }
      const messages = live.map((agent) =>
        Array.from({ length: turns }, (_, t) => userMessage(`${agent.id}-${t}`, "next question, please"))
      )
      const cpu = process.cpuUsage()
      const start = now()
      const [, bytes] = yield* measureAllocated(Effect.forEach(live, (agent, i) =>
        Effect.gen(function*() {
          for (const message of messages[i]!) {
            yield* agent.followup(message)
            yield* agent.whenIdle
          }
        }), { concurrency: "unbounded", discard: true }))
      const elapsed = now() - start
      const used = process.cpuUsage(cpu)
      const ended = (yield* live[0]!.session.events).filter((e) => e.type === "turn/end").length
      if (ended !== turns) return yield* Effect.dieMessage(`B14: ${ended} turns, ${turns} expected`)
      const total = agents * turns
      const sample: Sample = {
        turnsPerSecond: total / (elapsed / 1000),
        cpuMsPerTurn: (used.user + used.system) / 1000 / total,
        bytesPerTurn: bytes / total
      }
      return sample
    })).pipe(Effect.provide(context))
  })).pipe(Effect.orDie)

const count = (n: number): string => n.toLocaleString("en-US")

/** The reference system's figures at 100 × 20 on this machine kind (SPEC §25). */
const peer = { turnsPerSecond: 864, cpuMsPerTurn: 1.19 }

export const scenario: Scenario = {
  id: "B14",
  title: "concurrent turns: 100 agents × 20, 10 × 200, 1,000 × 5 (memory, model answers at once)",
  run: async ({ quick, log }) => {
    const rows: Array<Row> = []
    await Effect.runPromise(run("warm", 100, 20))
    for (const [agents, turns] of shapes) {
      const rounds = quick ? 1 : 3
      const samples: Array<Sample> = []
      for (let r = 0; r < rounds; r++) {
        await settle()
        const sample = await Effect.runPromise(run(`${agents}x${turns}-${r}`, agents, turns))
        samples.push(sample)
        log(
          `B14 ${agents}×${turns} round ${r}: ${fmt(sample.turnsPerSecond)} turns/s, ` +
            `${fmt(sample.cpuMsPerTurn)} ms CPU/turn, ${fmtBytes(sample.bytesPerTurn)}/turn`
        )
      }
      const rate = stat(samples.map((s) => s.turnsPerSecond))
      const cpu = stat(samples.map((s) => s.cpuMsPerTurn))
      const bytes = stat(samples.map((s) => s.bytesPerTurn))
      const isPeerShape = agents === 100 && turns === 20
      rows.push({
        id: "B14",
        scenario: `${count(agents)} agents × ${count(turns)} turns, concurrent, memory`,
        ours: rate,
        unit: "turns/s",
        notes: `${fmt(cpu.median)} ms CPU per turn ±${(cpu.spread * 100).toFixed(0)}%; ` +
          `${fmtBytes(bytes.median)} allocated per turn`,
        peer: isPeerShape
          ? `${peer.turnsPerSecond} turns/s, ${peer.cpuMsPerTurn} ms CPU/turn → ` +
            `${fmt(rate.median / peer.turnsPerSecond)}× the rate, ${fmt(cpu.median / peer.cpuMsPerTurn)}× the CPU ` +
            `(goal ≤ 0.4 ms)`
          : "",
        extra: { agents, turns, cpuMsPerTurn: cpu.median, bytesPerTurn: bytes.median }
      })
    }
    return rows
  }
}
