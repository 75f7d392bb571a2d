/**
 * PERF-03: the bench on Node 24 as well. The binary comes from the npm registry's `node` package (as
 * CI installs it, DOC-04), pinned to 24.18.1 like CI (better-sqlite3 12 aborts on 24.19–24.21), and is
 * kept under `node_modules/.cache/effect-agent-node24` (never committed). The bench's child on Node 24
 * writes its rows to a file; the parent prints them beside its own.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Row } from "./harness.js"
import { fmt, fmtStat } from "./harness.js"

export const NODE24_VERSION = "24.18.1"

/**
 * Scenarios that do not run on Node 24 here: they load better-sqlite3, whose addon in node_modules is
 * built for the machine's Node (CI builds one for 24; the bench does not).
 */
export const nativeAddonScenarios: ReadonlySet<string> = new Set(["B6", "B12"])

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const cacheDirectory = path.join(root, "node_modules", ".cache", "effect-agent-node24")

/** The installed binary, if any: the platform package's `bin/node`, else the `node` package's link. */
const findBinary = (): string | undefined => {
  const modules = path.join(cacheDirectory, "node_modules")
  const platform = path.join(modules, "node", "node_modules", `node-${os.platform()}-${os.arch()}`, "bin", "node")
  const linked = path.join(modules, "node", "bin", "node")
  for (const candidate of [platform, linked]) {
    if (!fs.existsSync(candidate)) continue
    const version = spawnSync(candidate, ["--version"], { encoding: "utf8" }).stdout.trim()
    if (version === `v${NODE24_VERSION}`) return candidate
  }
  return undefined
}

/** The Node 24 binary, installed from the npm registry on first use; or why there is none. */
export const ensureNode24 = (log: (line: string) => void): { readonly binary: string } | { readonly error: string } => {
  const found = findBinary()
  if (found !== undefined) return { binary: found }
  log(`bench: installing node@${NODE24_VERSION} from the npm registry into ${path.relative(root, cacheDirectory)}`)
  fs.mkdirSync(cacheDirectory, { recursive: true })
  const npm = os.platform() === "win32" ? "npm.cmd" : "npm"
  const installed = spawnSync(
    npm,
    ["install", "--prefix", cacheDirectory, "--no-save", "--no-package-lock", "--no-audit", "--no-fund", `node@${NODE24_VERSION}`],
    { encoding: "utf8" }
  )
  const binary = findBinary()
  if (binary !== undefined) return { binary }
  const reason = (installed.stderr || installed.error?.message || "no binary after install").trim().split("\n").slice(-3)
  return { error: `npm install node@${NODE24_VERSION} failed: ${reason.join(" ")}` }
}

/**
 * Runs `bench/run.ts` with `ids` under Node 24 (with the parent's loader flags and `--expose-gc`)
 * and returns its rows.
 */
export const runOnNode24 = (
  binary: string,
  ids: ReadonlyArray<string>,
  flags: ReadonlyArray<string>
): { readonly rows: ReadonlyArray<Row> } | { readonly error: string } => {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-bench-node24-")), "rows.json")
  try {
    const execArgv = process.execArgv.filter((arg) => arg !== "--expose-gc")
    const child = spawnSync(
      binary,
      ["--expose-gc", ...execArgv, path.join(root, "bench", "run.ts"), ...ids, ...flags],
      {
        stdio: ["ignore", "ignore", "inherit"],
        env: { ...process.env, EFFECT_AGENT_BENCH_CHILD: "1", EFFECT_AGENT_BENCH_ROWS_OUT: out }
      }
    )
    if (!fs.existsSync(out)) return { error: `the Node 24 run ended with status ${child.status} and no rows` }
    return { rows: JSON.parse(fs.readFileSync(out, "utf8")) as ReadonlyArray<Row> }
  } finally {
    fs.rmSync(path.dirname(out), { recursive: true, force: true })
  }
}

const cpuAndBytes = (row: Row | undefined): string => {
  const cpu = row?.extra?.["cpuMsPerTurn"]
  const bytes = row?.extra?.["bytesPerTurn"]
  const operations = row?.extra?.["operationsPerTurn"]
  return [
    cpu !== undefined ? `${fmt(cpu)} ms CPU/turn` : undefined,
    bytes !== undefined ? `${fmt(bytes / 1024)} KB/turn` : undefined,
    operations !== undefined ? `${fmt(operations)} ops/turn` : undefined
  ].filter((part) => part !== undefined).join(", ")
}

/** The two columns (Node 20 | Node 24) for every row the Node 24 run produced. */
export const comparisonTable = (
  node20: ReadonlyArray<Row>,
  node24: ReadonlyArray<Row>,
  versions: { readonly here: string; readonly other: string }
): string => {
  const lines = [
    `| id | scenario | Node ${versions.here} | Node ${versions.other} | Node 24 / Node 20 |`,
    "|---|---|---|---|---|"
  ]
  for (const row of node24) {
    const mine = node20.find((r) => r.id === row.id && r.scenario === row.scenario)
    const here = mine === undefined ? "—" : `${fmtStat(mine.ours, mine.unit)} ${cpuAndBytes(mine)}`.trim()
    const there = `${fmtStat(row.ours, row.unit)} ${cpuAndBytes(row)}`.trim()
    const ratio = mine === undefined ? "—" : `${fmt(row.ours.median / mine.ours.median)}×`
    lines.push(`| ${row.id} | ${row.scenario} | ${here} | ${there} | ${ratio} |`)
  }
  return lines.join("\n")
}
