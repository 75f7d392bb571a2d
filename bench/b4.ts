/**
 * B4: resume a stored session of 1k / 10k / 100k events (file persistence), against reading the
 * same file and `JSON.parse` of each of its lines. B8 reuses the measurement.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import { AgentRegistry } from "../src/index.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { fileRuntime, tempDirectory, turnLog, writeSessionFile } from "./fixtures.js"
import type { Row, Stat } from "./harness.js"
import { fmt, now, ratios, settle, stat } from "./harness.js"
import type { Scenario } from "./harness.js"

/** Resumes `id` in `directory` (timed), then disposes it (not timed). Milliseconds. */
const resumeOnce = (directory: string, id: string, expected: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* fileRuntime(directory, "buffered")
    return yield* Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      const start = now()
      const handle = yield* Effect.scoped(Effect.gen(function*() {
        const handle = yield* registry.resume({ sessionId: id })
        const elapsed = now() - start
        const length = (yield* handle.agent.session.events).length
        if (length !== expected) {
          return yield* Effect.dieMessage(`resume of ${id}: ${length} events, ${expected} expected`)
        }
        return elapsed
      }))
      return handle
    }).pipe(Effect.provide(context))
  })).pipe(Effect.orDie)

/**
 * The raw cost: read the file, decode it, `JSON.parse` every line into an array kept until the end
 * (as `JSON.parse` of the whole log would: a resume holds the log, and holding 100k parsed records
 * costs the GC about as much as parsing them). Milliseconds.
 */
export const parseFile = (file: string): number => {
  const start = now()
  const text = fs.readFileSync(file, "utf8")
  const lines = text.split("\n")
  const records: Array<unknown> = []
  for (let i = 0; i < lines.length - 1; i++) records.push(JSON.parse(lines[i]!))
  const elapsed = now() - start
  if (records.length !== lines.length - 1) throw new Error("unreachable")
  return elapsed
}

export interface ResumeResult {
  readonly ours: Stat
  readonly raw: Stat
  readonly ratio: Stat
  readonly bytes: number
}

/** Measures resume against parse over `rounds` interleaved rounds. */
export const measureResume = async (
  name: string,
  events: ReadonlyArray<SessionEvent>,
  rounds: number,
  log: (line: string) => void
): Promise<ResumeResult> =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const directory = yield* tempDirectory(name)
    const file = writeSessionFile(directory, name, events)
    const bytes = fs.statSync(file).size
    yield* resumeOnce(directory, name, events.length)
    parseFile(file)
    const ours: Array<number> = []
    const raw: Array<number> = []
    for (let r = 0; r < rounds; r++) {
      yield* Effect.promise(settle)
      ours.push(yield* resumeOnce(directory, name, events.length))
      raw.push(parseFile(file))
      log(`${name} round ${r}: resume ${fmt(ours[r]!)} ms, JSON.parse ${fmt(raw[r]!)} ms`)
    }
    return { ours: stat(ours), raw: stat(raw), ratio: ratios(ours, raw), bytes }
  })))

export const sizes = [1_000, 10_000, 100_000] as const

/** Filled by B4 for B8 (B8 measures it itself when run alone). */
export const measured = new Map<number, ResumeResult>()

export const scenario: Scenario = {
  id: "B4",
  title: "resume a stored session of 1k / 10k / 100k events (file persistence)",
  run: async ({ quick, log }) => {
    const rows: Array<Row> = []
    for (const size of sizes) {
      const rounds = quick ? 2 : size >= 100_000 ? 3 : 5
      const result = await measureResume(`b4-${size}`, turnLog(size), rounds, log)
      measured.set(size, result)
      const perEvent = (result.ours.median * 1000) / size
      const base = measured.get(1_000)
      rows.push({
        id: "B4",
        scenario: `resume ${fmt(size)}-event session (${fmt(result.bytes / 1024 / 1024)} MB), file`,
        ours: result.ours,
        unit: "ms",
        raw: { label: "readFile+JSON.parse", value: result.raw },
        costRatio: result.ratio,
        notes: `${fmt(perEvent)} µs/event` +
          (base !== undefined && size > 1_000
            ? `; per event vs 1k: ${fmt(perEvent / ((base.ours.median * 1000) / 1_000))}×`
            : ""),
        peer: size === 10_000
          ? `≈100 ms → ${fmt(100 / result.ours.median)}× faster`
          : size === 100_000
          ? "target ≤2× JSON.parse"
          : ""
      })
    }
    return rows
  }
}
