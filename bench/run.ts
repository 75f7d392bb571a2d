/**
 * Runs the benchmarks (SPEC §10): `npm run bench` runs them all, `npm run bench -- B3 B5` some of
 * them, `--quick` fewer rounds (for profiling, not for figures), `--large` adds B7 at 10,000 agents
 * (minutes on a 2-core machine). Prints a Markdown table and
 * writes `bench/results/latest.json`. B14 also runs on Node 24 (PERF-03: installed from the npm
 * registry on first use; `--no-node24` skips it), and `--node24` runs every selected scenario there
 * too; the Node 24 figures are printed beside the Node 20 ones.
 *
 * B2 needs `--expose-gc`: without it, this script re-runs itself in a node that has it (with the
 * same loader flags, so `tsx` still compiles the TypeScript).
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Row, Scenario } from "./harness.js"
import { fmt, hasGc, table } from "./harness.js"
import { comparisonTable, ensureNode24, nativeAddonScenarios, NODE24_VERSION, runOnNode24 } from "./node24.js"

if (!hasGc() && process.env["EFFECT_AGENT_BENCH_CHILD"] === undefined) {
  const child = spawnSync(process.execPath, ["--expose-gc", ...process.execArgv, ...process.argv.slice(1)], {
    stdio: "inherit",
    env: { ...process.env, EFFECT_AGENT_BENCH_CHILD: "1" }
  })
  process.exit(child.status ?? 1)
}

const all: ReadonlyArray<() => Promise<{ readonly scenario: Scenario }>> = [
  () => import("./b1.js"),
  () => import("./b2.js"),
  () => import("./b3.js"),
  () => import("./b4.js"),
  () => import("./b5.js"),
  () => import("./b6.js"),
  () => import("./b7.js"),
  () => import("./b8.js"),
  () => import("./b9.js"),
  () => import("./b10.js"),
  () => import("./b11.js"),
  () => import("./b12.js"),
  () => import("./b13.js"),
  () => import("./b14.js"),
  () => import("./b15.js")
]

const args = process.argv.slice(2)
const quick = args.includes("--quick")
const large = args.includes("--large")
const node24All = args.includes("--node24")
const node24Never = args.includes("--no-node24")
/** Set in the Node 24 child: write the rows there and stop (no gates, no latest.json). */
const rowsOut = process.env["EFFECT_AGENT_BENCH_ROWS_OUT"]
const wanted = new Set(args.filter((a) => !a.startsWith("--")).map((a) => a.toUpperCase()))

const log = (line: string) => process.stderr.write(line + "\n")

/** A budget of SPEC §14 (gated in Effect operations, load-independent, and B2's heap per idle agent). */
interface Gate {
  readonly name: string
  readonly limit: number
  readonly unit: string
  /** The measured figure among the rows, if the scenario ran. */
  readonly measure: (rows: ReadonlyArray<Row>) => number | undefined
}

const extraOf = (id: string, key: string, where?: (row: Row) => boolean) => (rows: ReadonlyArray<Row>) =>
  rows.find((row) => row.id === id && (where === undefined || where(row)))?.extra?.[key]

const gates: ReadonlyArray<Gate> = [
  { name: "create+dispose", limit: 240, unit: "ops", measure: extraOf("B1", "operationsPerAgent") },
  { name: "inject", limit: 80, unit: "ops", measure: extraOf("B3", "operationsPerInject") },
  { name: "turn", limit: 800, unit: "ops", measure: extraOf("B5", "operationsPerTurn") },
  // the steady state: the largest population measured (the per-agent figure at 100 carries fixed costs)
  {
    name: "heap per idle agent",
    limit: 20,
    unit: "KB",
    measure: (rows) => {
      const b2 = rows.filter((row) => row.id === "B2" && row.extra?.["agents"] !== undefined)
      const largest = b2.reduce<Row | undefined>(
        (acc, row) => (acc === undefined || row.extra!["agents"]! > acc.extra!["agents"]! ? row : acc),
        undefined
      )
      return largest?.extra?.["kbPerAgent"]
    }
  }
]

/** One line per gate whose scenario ran; `false` when one was missed. */
const checkGates = (rows: ReadonlyArray<Row>): { readonly lines: ReadonlyArray<string>; readonly met: boolean } => {
  const lines: Array<string> = []
  let met = true
  for (const gate of gates) {
    const value = gate.measure(rows)
    if (value === undefined) continue
    const ok = value <= gate.limit
    met &&= ok
    lines.push(`gate ${gate.name} ${fmt(value)} ${gate.unit} ≤ ${gate.limit} ${ok ? "ok" : "MISSED"}`)
  }
  return { lines, met }
}

/**
 * PERF-03: the scenarios that also run on Node 24 (B14 always, every selected one with `--node24`,
 * less those that need the native SQLite addon), run there; the two columns, or a line saying why not.
 */
const secondColumn = (rows: ReadonlyArray<Row>): string | undefined => {
  if (node24Never) return undefined
  const ran = [...new Set(rows.map((row) => row.id))]
  const ids = ran.filter((id) => (node24All || id === "B14") && !nativeAddonScenarios.has(id))
  if (ids.length === 0) return undefined
  const skipped = node24All ? ran.filter((id) => nativeAddonScenarios.has(id)) : []
  const skippedNote = skipped.length > 0 ? ` (${skipped.join(", ")} not run there: they load better-sqlite3)` : ""
  log(`# Node ${NODE24_VERSION}: ${ids.join(" ")}`)
  const node = ensureNode24(log)
  if ("error" in node) return `Node ${NODE24_VERSION}: not run — ${node.error}`
  const flags = [quick ? "--quick" : undefined, large ? "--large" : undefined].filter((f) => f !== undefined)
  const result = runOnNode24(node.binary, ids, flags)
  if ("error" in result) return `Node ${NODE24_VERSION}: not run — ${result.error}`
  return `Node ${process.version.slice(1)} | Node ${NODE24_VERSION}${skippedNote}:\n\n` +
    comparisonTable(rows, result.rows, { here: process.version.slice(1), other: NODE24_VERSION })
}

const main = async () => {
  const rows: Array<Row> = []
  const started = Date.now()
  const loadBefore = os.loadavg()
  for (const load of all) {
    const { scenario } = await load()
    if (wanted.size > 0 && !wanted.has(scenario.id)) continue
    log(`# ${scenario.id}: ${scenario.title}`)
    const t0 = Date.now()
    rows.push(...(await scenario.run({ large, quick, log })))
    log(`# ${scenario.id} took ${((Date.now() - t0) / 1000).toFixed(1)} s`)
  }
  if (rows.length === 0) {
    log(`no scenario matches ${[...wanted].join(", ")} (B1 … B15)`)
    process.exit(2)
  }
  if (rowsOut !== undefined) {
    fs.writeFileSync(rowsOut, JSON.stringify(rows))
    process.exit(0)
  }
  const markdown = table(rows)
  process.stdout.write(markdown + "\n")
  const node24 = secondColumn(rows)
  if (node24 !== undefined) process.stdout.write("\n" + node24 + "\n")
  const gated = checkGates(rows)
  if (gated.lines.length > 0) process.stdout.write("\n" + gated.lines.join("\n") + "\n")
  const results = {
    date: new Date(started).toISOString(),
    seconds: (Date.now() - started) / 1000,
    node: process.version,
    cpus: os.cpus().length,
    cpu: os.cpus()[0]?.model,
    loadavg: { before: loadBefore, after: os.loadavg() },
    gc: hasGc(),
    quick,
    large,
    rows,
    markdown,
    node24,
    gates: gated.lines
  }
  const directory = path.join(path.dirname(fileURLToPath(import.meta.url)), "results")
  fs.mkdirSync(directory, { recursive: true })
  fs.writeFileSync(path.join(directory, "latest.json"), JSON.stringify(results, null, 2) + "\n")
  log(`wrote ${path.join("bench", "results", "latest.json")} (${results.seconds.toFixed(0)} s)`)
  if (!gated.met) {
    log("a budget gate was missed (see the gate lines above)")
    process.exit(1)
  }
  // after B12 the loop stayed alive (some handle of its Postgres or cluster clients, not found yet): end it here
  process.exit(0)
}

main().catch((error: unknown) => {
  console.error(error)
  process.exit(1)
})
