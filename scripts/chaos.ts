/**
 * `npm run chaos -- --cycles N [--backend file|sqlite] [--seed S] [--tsx]`: a long run of the
 * crash-consistency suite (DUR-13, test/chaos/). Without `--backend` both backends run, N cycles
 * each; without `--seed` a random seed is drawn and printed. Prints a summary per backend and exits
 * non-zero when any violation was found (each names its seed and cycle).
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { parseArgs } from "node:util"
import { formatSummary, runChaos } from "../test/chaos/driver.js"
import type { Backend } from "../test/chaos/plan.js"

const { values } = parseArgs({
  options: {
    cycles: { type: "string", default: "100" },
    backend: { type: "string" },
    seed: { type: "string" },
    tsx: { type: "boolean", default: false },
    keep: { type: "boolean", default: false }
  }
})

const cycles = Number(values.cycles)
const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed)
const backends: ReadonlyArray<Backend> = values.backend === undefined
  ? ["file", "sqlite"]
  : [values.backend === "sqlite" ? "sqlite" : "file"]

const usage = "usage: npm run chaos -- --cycles N [--backend file|sqlite] [--seed S] [--tsx] [--keep]"

const runOne = (backend: Backend) =>
  Effect.gen(function*() {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), `effect-agent-chaos-${backend}-`))
    yield* Console.log(`chaos (${backend}, seed ${seed}): ${cycles} cycles in ${directory}`)
    const summary = yield* runChaos({
      backend,
      cycles,
      seed,
      directory,
      runner: values.tsx ? "tsx" : "bundle",
      onCycle: (report) =>
        report.violations.length > 0 || (report.plan.cycle + 1) % 25 === 0
          ? Console.log(
            `  cycle ${report.plan.cycle + 1}/${cycles}: ${report.outcome}, ${report.acknowledged} acknowledged` +
              (report.violations.length > 0 ? `\n    ${report.violations.join("\n    ")}` : "")
          )
          : Effect.void
    })
    yield* Console.log(formatSummary(summary))
    if (!values.keep && summary.violations.length === 0) fs.rmSync(directory, { recursive: true, force: true })
    return summary.violations.length
  })

const program = Effect.gen(function*() {
  if (!Number.isSafeInteger(cycles) || cycles < 1 || !Number.isSafeInteger(seed)) {
    yield* Console.error(usage)
    return process.exit(2)
  }
  let violations = 0
  for (const backend of backends) violations += yield* runOne(backend)
  if (violations > 0) process.exitCode = 1
})

NodeRuntime.runMain(program.pipe(Effect.provide(NodeContext.layer)))
