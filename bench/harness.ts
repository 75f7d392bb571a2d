/**
 * Measurement helpers shared by the scenarios: rounds after a warm-up, medians with their spread,
 * and the rows the runner prints as a Markdown table and writes as JSON. Timings are never
 * asserted; every figure is also reported as a ratio to the raw platform cost it stands on,
 * measured in the same run, because ratios survive a noisy machine and absolute figures do not.
 */

import { Effect, RuntimeFlags, RuntimeFlagsPatch, Supervisor } from "effect"
import * as v8 from "node:v8"

/** Counts every Effect operation run by the fibers it supervises. */
class OpCounter extends Supervisor.AbstractSupervisor<number> {
  count = 0
  get value(): Effect.Effect<number> {
    return Effect.sync(() => this.count)
  }
  override onEffect(): void {
    this.count++
  }
}

/**
 * Runs `effect` counting the Effect operations of its fiber and of every fiber forked from it
 * (including from runtimes captured inside it): a measure of work that, unlike time, does not move
 * with the machine's load.
 */
export const countOperations = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<[A, number], E, R> =>
  Effect.suspend(() => {
    const counter = new OpCounter()
    return effect.pipe(
      Effect.supervised(counter),
      Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision)),
      Effect.map((value): [A, number] => [value, counter.count])
    )
  })

/**
 * Bytes allocated on the JavaScript heap while `effect` runs (PERF-01): the heap in use at the end
 * less at the start, plus what every garbage collection in between freed (`v8.GCProfiler` reports
 * the heap in use before and after each one). Every byte allocated is either still in use at the end
 * or was freed by one of those collections, so the sum is the allocation itself — unlike a bare
 * `heapUsed` delta, which collections make meaningless — whether or not a GC ran, on Node 20 and 24.
 * Runs of other fibers at the same time are charged too: measure with nothing else running.
 */
export const measureAllocated = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<[A, number], E, R> =>
  Effect.suspend(() => {
    const profiler = new v8.GCProfiler()
    const start = v8.getHeapStatistics().used_heap_size
    profiler.start()
    return Effect.map(effect, (value): [A, number] => {
      const end = v8.getHeapStatistics().used_heap_size
      const result = profiler.stop()
      let freed = 0
      for (const gc of result?.statistics ?? []) {
        freed += gc.beforeGC.heapStatistics.usedHeapSize - gc.afterGC.heapStatistics.usedHeapSize
      }
      return [value, end - start + freed]
    })
  })

/** A measured quantity over rounds. */
export interface Stat {
  readonly median: number
  readonly min: number
  readonly max: number
  /** Half the range relative to the median: the ± printed next to it. */
  readonly spread: number
  readonly samples: ReadonlyArray<number>
}

export const stat = (samples: ReadonlyArray<number>): Stat => {
  const sorted = [...samples].sort((a, b) => a - b)
  const n = sorted.length
  const median = n === 0 ? NaN : n % 2 === 1 ? sorted[(n - 1) / 2]! : (sorted[n / 2 - 1]! + sorted[n / 2]!) / 2
  const min = sorted[0] ?? NaN
  const max = sorted[n - 1] ?? NaN
  return { median, min, max, spread: median === 0 ? 0 : (max - min) / 2 / Math.abs(median), samples }
}

/** One line of the results table. */
export interface Row {
  readonly id: string
  readonly scenario: string
  /** Our figure (higher is better for rates, lower for sizes and times). */
  readonly ours: Stat
  readonly unit: string
  /** The raw platform cost measured in the same rounds, in the same unit. */
  readonly raw?: { readonly label: string; readonly value: Stat } | undefined
  /**
   * Our cost per operation relative to the raw one (≥ 1: how many times the raw cost we pay),
   * the median of the per-round ratios of interleaved rounds.
   */
  readonly costRatio?: Stat | undefined
  /** Scaling facts (first-10% vs last-10%, per-size ratios, …). */
  readonly notes?: string | undefined
  /** The reference system's figure and our ratio to it. */
  readonly peer?: string | undefined
  readonly extra?: Readonly<Record<string, number>> | undefined
}

export interface Scenario {
  readonly id: string
  readonly title: string
  readonly run: (options: RunOptions) => Promise<ReadonlyArray<Row>>
}

export interface RunOptions {
  /** Scales the number of rounds (quick runs while profiling). */
  readonly quick: boolean
  /** Adds the sizes that take minutes on a small machine (B7 at 10,000 agents). */
  readonly large: boolean
  readonly log: (line: string) => void
}

export const now = (): number => performance.now()

/** Full garbage collection when node runs with `--expose-gc` (twice: weak refs and finalizers). */
export const collect = (): void => {
  const gc = (globalThis as { readonly gc?: (() => void) | undefined }).gc
  if (gc !== undefined) {
    gc()
    gc()
  }
}

export const hasGc = (): boolean => typeof (globalThis as { readonly gc?: unknown }).gc === "function"

/** Yields to the event loop (lets pending IO callbacks and timers run between rounds). */
export const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

const group = (n: number): string => {
  const fixed = n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n >= 1 ? n.toFixed(2) : n.toPrecision(2)
  const [int, frac] = fixed.split(".")
  return int!.replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (frac !== undefined ? "." + frac : "")
}

export const fmt = (n: number): string => (Number.isFinite(n) ? group(n) : String(n))

export const fmtStat = (s: Stat, unit: string): string => `${fmt(s.median)} ${unit} ±${(s.spread * 100).toFixed(0)}%`

export const fmtBytes = (bytes: number): string =>
  bytes >= 1024 * 1024
    ? `${(bytes / 1024 / 1024).toFixed(1)} MB`
    : bytes >= 1024
    ? `${(bytes / 1024).toFixed(1)} KB`
    : `${bytes.toFixed(0)} B`

/** Cost ratio per round from interleaved per-op costs (ours / raw). */
export const ratios = (ours: ReadonlyArray<number>, raw: ReadonlyArray<number>): Stat =>
  stat(ours.map((o, i) => o / raw[i]!))

/** Per-op cost in µs to a rate per second. */
export const perSecond = (microsPerOp: number): number => 1e6 / microsPerOp

export const table = (rows: ReadonlyArray<Row>): string => {
  const lines = [
    "| id | scenario | ours (median ±spread) | raw platform cost | cost ratio ours/raw | scaling " +
    "| peer (ours vs peer) |",
    "|---|---|---|---|---|---|---|"
  ]
  for (const row of rows) {
    lines.push(
      "| " + [
        row.id,
        row.scenario,
        fmtStat(row.ours, row.unit),
        row.raw === undefined ? "—" : `${row.raw.label}: ${fmtStat(row.raw.value, row.unit)}`,
        row.costRatio === undefined
          ? "—"
          : `${fmt(row.costRatio.median)}× ±${(row.costRatio.spread * 100).toFixed(0)}%`,
        row.notes ?? "",
        row.peer ?? ""
      ].join(" | ") + " |"
    )
  }
  return lines.join("\n")
}
