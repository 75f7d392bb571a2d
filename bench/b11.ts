/**
 * B11 (SPEC §10b): `AgentHost.get` of a passivated agent — resume on demand — with a 10,000-event
 * log, against B4 (a bare resume of the same log) in the same run (target ≤ 1.5×); and 1,000
 * concurrent activations under `maxLive` 100, whose heap must stay bounded by `maxLive` (heap after
 * the 1,000 vs after the first 100, both after a full GC).
 */
import { Context, Effect, Layer } from "effect"
import * as fs from "node:fs"
import { AgentHost } from "../src/index.js"
import { measureResume, measured } from "./b4.js"
import { fileRuntime, route, tempDirectory, turnLog, writeSessionFile } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { collect, fmt, fmtBytes, now, ratios, settle, stat } from "./harness.js"

const SIZE = 10_000

/** A host over the file store in `directory`, built in the current Scope. */
const hostIn = (directory: string, options: AgentHost.HostOptions) =>
  Effect.gen(function*() {
    const runtime = yield* fileRuntime(directory, "buffered")
    const context = yield* Layer.build(AgentHost.layer(options).pipe(Layer.provide(Layer.succeedContext(runtime))))
    return Context.get(context, AgentHost.AgentHost)
  })

/** Activation of a passivated 10k-event agent, timed per round; passivation between rounds is not. */
const measureActivation = (rounds: number, log: (line: string) => void) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const directory = yield* tempDirectory("b11")
    writeSessionFile(directory, "b11", turnLog(SIZE))
    const host = yield* hostIn(directory, {})
    const once = Effect.gen(function*() {
      const start = now()
      const agent = yield* host.get("b11")
      const elapsed = now() - start
      if ((yield* agent.session.events).length !== SIZE) return yield* Effect.dieMessage("b11: wrong length")
      yield* host.passivate("b11")
      return elapsed
    })
    yield* once
    const samples: Array<number> = []
    for (let r = 0; r < rounds; r++) {
      yield* Effect.promise(settle)
      samples.push(yield* once)
      log(`B11 activation round ${r}: ${fmt(samples[r]!)} ms`)
    }
    return samples
  }).pipe(Effect.orDie)))

const heapNow = () => {
  collect()
  return process.memoryUsage().heapUsed
}

/** 1,000 concurrent activations (creations, then resumes of the passivated ones) under maxLive 100. */
const measureConcurrent = (log: (line: string) => void) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const directory = yield* tempDirectory("b11-many")
    const host = yield* hostIn(directory, { maxLive: 100, activationTimeout: "5 minutes" })
    const ids = Array.from({ length: 1_000 }, (_, i) => `agent-${i}`)
    const before = heapNow()
    yield* Effect.forEach(ids.slice(0, 100), (id) => host.get(id, { options: route }), {
      concurrency: "unbounded",
      discard: true
    })
    const at100 = heapNow() - before
    const t0 = now()
    yield* Effect.forEach(ids.slice(100), (id) => host.get(id, { options: route }), {
      concurrency: "unbounded",
      discard: true
    })
    const created = now() - t0
    const t1 = now()
    yield* Effect.forEach(ids, (id) => host.get(id), { concurrency: "unbounded", discard: true })
    const resumed = now() - t1
    const at1000 = heapNow() - before
    const live = (yield* host.live).length
    const files = fs.readdirSync(directory).filter((name) => name.endsWith(".jsonl")).length
    log(`B11 concurrent: 900 creations ${fmt(created)} ms, 1,000 activations ${fmt(resumed)} ms, live ${live}`)
    return { at100, at1000, created, resumed, live, files }
  }).pipe(Effect.orDie)))

export const scenario: Scenario = {
  id: "B11",
  title: "AgentHost.get of a passivated 10k-event agent vs B4; 1,000 concurrent activations under maxLive 100",
  run: async ({ quick, log }) => {
    const rounds = quick ? 3 : 9
    const b4 = measured.get(SIZE) ?? (await measureResume(`b4-${SIZE}`, turnLog(SIZE), quick ? 2 : 5, log))
    const ours = await measureActivation(rounds, log)
    const sorted = [...ours].sort((a, b) => a - b)
    const p99 = sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!
    const many = await measureConcurrent(log)
    const rows: Array<Row> = [
      {
        id: "B11",
        scenario: `host.get of a passivated ${fmt(SIZE)}-event agent, file`,
        ours: stat(ours),
        unit: "ms",
        raw: { label: "B4 resume (same run)", value: b4.ours },
        costRatio: ratios(ours.slice(0, b4.ours.samples.length), b4.ours.samples),
        notes: `p50 ${fmt(stat(ours).median)} ms, p99 ${fmt(p99)} ms; vs B4 median ${
          fmt(stat(ours).median / b4.ours.median)
        }×`,
        peer: "target ≤ 1.5× B4"
      },
      {
        id: "B11",
        scenario: "1,000 concurrent activations, maxLive 100, file",
        ours: stat([many.resumed]),
        unit: "ms",
        notes: `900 creations ${fmt(many.created)} ms; live after: ${many.live}; heap after 1,000 ${
          fmtBytes(many.at1000)
        } vs after 100 ${fmtBytes(many.at100)} (${fmt(many.at1000 / Math.max(1, many.at100))}×)`,
        peer: "heap bounded by maxLive",
        extra: { heapAt100: many.at100, heapAt1000: many.at1000, live: many.live, sessions: many.files }
      }
    ]
    return rows
  }
}
