/**
 * The driver of the crash-consistency suite (DUR-13). Each cycle starts a worker process (see
 * worker.ts) with the cycle's plan (plan.ts), journals every acknowledgement it prints before
 * acting on it (so an acknowledged id is on record before the kill can matter), SIGKILLs it where
 * the plan aims (after N acknowledgements, inside a lock takeover, inside a repair, inside a 1 MiB
 * append) and drains what it printed before dying. The next cycle's worker is a fresh process that
 * first resumes and verifies every session the killed one touched; after the last cycle a final
 * worker verifies every session and checks that nothing is left behind. Every violation names the
 * seed and the cycle, and how to reproduce the run.
 */
import { Command } from "@effect/platform"
import type { CommandExecutor } from "@effect/platform"
import { Clock, Duration, Effect, Exit, Fiber, Option, Scope, Stream } from "effect"
import * as nodeFs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { journaledKinds } from "./journal.js"
import type { Backend, CyclePlan } from "./plan.js"
import { planCycle } from "./plan.js"

const workerSource = fileURLToPath(new URL("./worker.ts", import.meta.url))
const repository = fileURLToPath(new URL("../..", import.meta.url))

/** Options of {@link runChaos}. */
export interface ChaosOptions {
  readonly backend: Backend
  readonly cycles: number
  readonly seed: number
  /** An empty directory for the store and the journal (the caller removes it). */
  readonly directory: string
  /** Sessions a worker works on (default 3). */
  readonly sessions?: number | undefined
  /** Cycles before the work moves to fresh sessions, keeping logs small (default 10). */
  readonly cyclesPerGeneration?: number | undefined
  /** SQLite lease ttl in ms (default 250: the next worker waits out a killed one's lease, see worker.ts). */
  readonly leaseTtlMillis?: number | undefined
  /** How the worker runs: bundled once with the esbuild that tsx ships (default, starts ~3x faster), or by tsx. */
  readonly runner?: "bundle" | "tsx" | undefined
  /** Called after each cycle (progress of long runs). */
  readonly onCycle?: ((report: CycleReport) => Effect.Effect<void>) | undefined
  /**
   * Journals an acknowledgement for an input no worker ever sent, to show that the verifier
   * catches a lost input (tests of the suite itself only).
   */
  readonly phantomAck?: boolean | undefined
}

/** What one cycle did. */
export interface CycleReport {
  readonly plan: CyclePlan
  /** Where the kill landed (`acks` when a planned marker never came), or `clean`/`exited`. */
  readonly outcome: string
  readonly acknowledged: number
  readonly violations: ReadonlyArray<string>
}

/** The result of a run. */
export interface ChaosSummary {
  readonly backend: Backend
  readonly seed: number
  readonly cycles: number
  /** Kills by where they were aimed (`<target>`), or `<target>→acks` when its marker never came. */
  readonly kills: Readonly<Record<string, number>>
  /** Cycles whose worker finished its verbs and shut down without being killed. */
  readonly cleanExits: number
  /** Acknowledged inputs (follow-ups, steers, injects, 1 MiB follow-ups). */
  readonly acknowledged: number
  /** Acknowledged 1 MiB follow-ups. */
  readonly bigAcknowledged: number
  /** Acknowledged custom events. */
  readonly events: number
  /** Acknowledged cancels. */
  readonly cancels: number
  /** Sessions resumed and verified (by the workers after each kill and by the final verifier). */
  readonly verifications: number
  /** Resumes that appended repair closers (DUR-12). */
  readonly repairs: number
  /** Lock (file) or lease (SQLite) takeovers the library reported. */
  readonly takeovers: number
  /** Torn last records dropped on resume. */
  readonly tornTails: number
  /** Leftover temporary and guard files the lock protocol removed. */
  readonly leftoversRemoved: number
  /** Temp files a kill cut before they were filled, removed by the final sweep once aged past 60 s. */
  readonly agedTemps: number
  readonly violations: ReadonlyArray<string>
  readonly durationMillis: number
}

/** A summary as the `chaos` script prints it. */
export const formatSummary = (summary: ChaosSummary): string => {
  const kills = Object.entries(summary.kills).sort(([a], [b]) => a.localeCompare(b))
  return [
    `chaos (${summary.backend}, seed ${summary.seed}): ${summary.cycles} cycles in ` +
    `${(summary.durationMillis / 1000).toFixed(1)} s`,
    `  kills: ${kills.map(([where, n]) => `${where} ${n}`).join(", ")}; clean exits ${summary.cleanExits}`,
    `  acknowledged: ${summary.acknowledged} inputs (${summary.bigAcknowledged} of 1 MiB), ${summary.events} ` +
    `custom events, ${summary.cancels} cancels`,
    `  verified resumes: ${summary.verifications} (repairs ${summary.repairs}, takeovers ${summary.takeovers}, ` +
    `torn tails dropped ${summary.tornTails}, leftovers removed ${summary.leftoversRemoved}, empty temp files ` +
    `swept once 60 s old ${summary.agedTemps})`,
    `  violations: ${summary.violations.length}`,
    ...summary.violations.slice(0, 20).map((v) => `    ${v}`),
    ...(summary.violations.length > 20 ? [`    … and ${summary.violations.length - 20} more`] : [])
  ].join("\n")
}

// --- the worker's command -------------------------------------------------------------------------

/** The part of esbuild's API the bundler uses (esbuild comes with tsx; it is not a direct dependency). */
interface Esbuild {
  readonly build: (options: Record<string, unknown>) => Promise<unknown>
}

/**
 * The worker bundled into one ES module (Effect included, so Node parses one file instead of
 * hundreds), next to the repository's node_modules (under the ignored `.tmp/`, for better-sqlite3),
 * removed with the Scope; `None` when esbuild cannot be loaded (then tsx runs the source). Run by
 * tsx, a worker starts three to four times slower: too slow for 60 cycles per backend in CI.
 */
const bundleWorker: Effect.Effect<Option.Option<string>, never, Scope.Scope> = Effect.acquireRelease(
  Effect.tryPromise(async () => {
    const specifier = "esbuild"
    const esbuild = (await import(specifier)) as Esbuild
    const outfile = path.join(repository, ".tmp", "chaos", `worker-${process.pid}-${Date.now()}.mjs`)
    await esbuild.build({
      entryPoints: [workerSource],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      // Everything in one module (Node parses one file instead of hundreds) but the native driver.
      external: ["better-sqlite3"],
      // Bundled CommonJS code `require`s Node's modules: give the ES module a `require`.
      banner: {
        js: "import { createRequire as chaosRequire } from \"node:module\"\n" +
          "const require = chaosRequire(import.meta.url)"
      },
      outfile,
      logLevel: "silent"
    })
    return outfile
  }).pipe(Effect.option),
  (outfile) => Effect.sync(() => Option.map(outfile, (file) => nodeFs.rmSync(file, { force: true })))
)

const workerArguments = (runner: "bundle" | "tsx") =>
  runner === "tsx"
    ? Effect.succeed(["--import", "tsx", workerSource])
    : Effect.map(bundleWorker, Option.match({ onNone: () => ["--import", "tsx", workerSource], onSome: (f) => [f] }))

// --- one run --------------------------------------------------------------------------------------

interface RunState {
  readonly kills: Record<string, number>
  cleanExits: number
  acknowledged: number
  bigAcknowledged: number
  events: number
  cancels: number
  verifications: number
  repairs: number
  takeovers: number
  tornTails: number
  leftoversRemoved: number
  agedTemps: number
  readonly violations: Array<string>
  /** Sessions touched since they were last verified and released. */
  readonly unsettled: Set<string>
}

/** What a cycle's line reader knows while the worker runs. */
interface CycleState {
  acks: number
  markers: number
  kill: Option.Option<string>
  done: boolean
  readonly verified: Set<string>
  readonly violations: Array<string>
}

/** Counts the library's log lines that show what a crash left behind and how it was cleaned up. */
const countLog = (run: RunState, text: string) => {
  if (text.includes("took over")) run.takeovers++
  if (text.includes("torn record")) run.tornTails++
  if (text.includes("left by an interrupted lock operation")) run.leftoversRemoved++
}

/** Whether `line` is the marker the plan aims the kill at (and the skips are used up). */
const isAimedMarker = (plan: CyclePlan, cycle: CycleState, words: ReadonlyArray<string>) => {
  const matches = plan.target === "big-append"
    ? words[0] === "phase" && words[1] === "big-append"
    : (plan.target === "takeover" || plan.target === "repair") && words[0] === "phase" && words[1] === "resume" &&
      (words[3] ?? "").split(",").includes(plan.target)
  if (!matches) return false
  cycle.markers++
  return cycle.markers > plan.skip
}

/** Where the kill goes after this line, if it goes now. */
const killAfter = (plan: CyclePlan, cycle: CycleState, words: ReadonlyArray<string>): Option.Option<string> => {
  if (plan.target === "clean" || Option.isSome(cycle.kill)) return Option.none()
  if (isAimedMarker(plan, cycle, words)) return Option.some(plan.target)
  if (cycle.acks < plan.acks) return Option.none()
  return Option.some(plan.target === "acks" ? "acks" : `${plan.target}→acks`)
}

const sessionsOf = (generation: number, sessions: number) =>
  Array.from({ length: sessions }, (_, k) => `g${generation}-s${k}`)

/** A worker started ahead of its cycle, waiting for its configuration on stdin (see worker.ts). */
interface Waiting {
  readonly child: CommandExecutor.Process
  readonly stderr: Fiber.Fiber<string>
  /** Owns the process: closing it kills the process if it still runs. */
  readonly scope: Scope.CloseableScope
}

const startWorker = (options: ChaosOptions, worker: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const store = path.join(options.directory, options.backend === "file" ? "sessions" : "sessions.db")
    const child = yield* Command.make(process.execPath, ...worker, ...[
      "--stdin",
      "--backend", options.backend, "--store", store, "--journal", path.join(options.directory, "journal"),
      "--seed", String(options.seed), "--lease-ttl", String(options.leaseTtlMillis ?? 250)
    ]).pipe(Command.workingDirectory(repository), Command.stdin("pipe"), Command.start, Scope.extend(scope))
    const stderr = yield* Effect.forkIn(
      child.stderr.pipe(
        Stream.decodeText(),
        Stream.runFold("", (all, text) => (all + text).slice(-4000)),
        Effect.catchAll((error) => Effect.succeed(`(stderr unreadable: ${error.message})`))
      ),
      scope
    )
    return { child, stderr, scope } satisfies Waiting
  }).pipe(Effect.orDie)

/**
 * Hands a started worker its cycle (`undefined` plan: the final verification, never killed) and
 * reads its stdout to the end: journals acknowledgements, counts, and kills it where the plan aims.
 */
const runWorker = (
  options: ChaosOptions,
  run: RunState,
  waiting: Waiting,
  plan: CyclePlan | undefined,
  sessions: { readonly work: ReadonlyArray<string>; readonly verify: ReadonlyArray<string> }
) =>
  Effect.gen(function*() {
    const { child } = waiting
    const journal = path.join(options.directory, "journal")
    const where = plan === undefined ? "final (verify)" : `${plan.cycle} (${plan.target})`
    const label = `seed ${options.seed} cycle ${where} on ${options.backend}`
    if (options.phantomAck === true && plan !== undefined && plan.cycle === 0) {
      nodeFs.appendFileSync(journal, `ack ${sessions.work[0]} phantom-${options.seed} followup\n`)
    }
    const config = {
      cycle: plan?.cycle ?? options.cycles,
      work: sessions.work,
      verify: sessions.verify,
      final: plan === undefined,
      ops: plan?.ops ?? 0,
      big: plan?.big ?? 0,
      keepStaleLocks: plan?.target === "takeover"
    }
    yield* Stream.make(JSON.stringify(config)).pipe(Stream.encodeText, Stream.run(child.stdin))
    const cycle: CycleState = {
      acks: 0, markers: 0, kill: Option.none(), done: false, verified: new Set(), violations: []
    }
    const onLine = (line: string) =>
      Effect.suspend(() => {
        const words = line.split(" ")
        const [kind, session] = words
        if (kind !== undefined && journaledKinds.has(kind)) nodeFs.appendFileSync(journal, `${line}\n`)
        if (kind === "ack" || kind === "event" || kind === "cancel") cycle.acks++
        if (kind === "ack") run.acknowledged++
        if (kind === "ack" && words[3] === "big") run.bigAcknowledged++
        if (kind === "event") run.events++
        if (kind === "cancel") run.cancels++
        if (kind === "phase" && words[1] === "resume" && words[2] !== undefined) run.unsettled.add(words[2])
        if (kind === "verified" && session !== undefined) {
          run.verifications++
          cycle.verified.add(session)
          if (!line.endsWith(" closers=0")) run.repairs++
        }
        if (kind === "violation") cycle.violations.push(`${label}: ${words.slice(1).join(" ")}`)
        if (kind === "log") countLog(run, line)
        if (kind === "done") cycle.done = true
        if (kind === "aged") run.agedTemps += Number(words[1])
        if (kind === "ready") {
          // Sessions verified and released by this worker are settled until a worker touches them again.
          for (const id of cycle.verified) if (!sessions.work.includes(id)) run.unsettled.delete(id)
        }
        if (plan === undefined) return Effect.void
        const kill = killAfter(plan, cycle, words)
        if (Option.isNone(kill)) return Effect.void
        cycle.kill = kill
        const delay = kill.value === plan.target ? plan.delayMillis : 0
        return Effect.asVoid(Effect.forkScoped(Effect.ignore(
          Effect.zipRight(Effect.sleep(Duration.millis(delay)), child.kill("SIGKILL"))
        )))
      })
    const finished = yield* child.stdout.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.runForEach(onLine),
      Effect.zipRight(Effect.either(child.exitCode)),
      Effect.timeout(Duration.minutes(3)),
      Effect.option
    )
    if (Option.isNone(finished)) {
      yield* Effect.ignore(child.kill("SIGKILL"))
      cycle.violations.push(`${label}: the worker did not finish within 3 minutes (a hang)`)
    } else {
      // Only our SIGKILL may end a worker early: an exit code other than 0, or 0 before `done`, is a failure.
      const exit = finished.value
      const failed = exit._tag === "Right" ? exit.right !== 0 || !cycle.done : Option.isNone(cycle.kill)
      if (failed) {
        const output = (yield* Fiber.join(waiting.stderr)).trim().split("\n").slice(-6).join(" | ")
        const how = exit._tag === "Right" ? `exit code ${exit.right}` : exit.left.message
        cycle.violations.push(`${label}: the worker failed (${how}): ${output}`)
      }
    }
    run.violations.push(...cycle.violations)
    // A worker that printed `done` finished its verbs: a kill sent after that changed nothing.
    return { cycle, outcome: cycle.done ? "clean" : Option.getOrElse(cycle.kill, () => "exited") }
  }).pipe(Effect.scoped, Effect.orDie, Effect.ensuring(Scope.close(waiting.scope, Exit.void)))

/**
 * Runs `options.cycles` kill cycles and a final verification; the summary lists every violation.
 */
export const runChaos = (
  options: ChaosOptions
): Effect.Effect<ChaosSummary, never, CommandExecutor.CommandExecutor> =>
  Effect.gen(function*() {
    const started = yield* Clock.currentTimeMillis
    nodeFs.mkdirSync(path.join(options.directory, "sessions"), { recursive: true })
    nodeFs.writeFileSync(path.join(options.directory, "journal"), "")
    const worker = yield* workerArguments(options.runner ?? "bundle")
    const perGeneration = options.cyclesPerGeneration ?? 10
    const sessions = options.sessions ?? 3
    const run: RunState = {
      kills: {}, cleanExits: 0, acknowledged: 0, bigAcknowledged: 0, events: 0, cancels: 0, verifications: 0,
      repairs: 0, takeovers: 0, tornTails: 0, leftoversRemoved: 0, agedTemps: 0, violations: [], unsettled: new Set()
    }
    // The next cycle's worker loads while the current one runs (it touches nothing before its turn).
    let next = yield* startWorker(options, worker)
    yield* Effect.addFinalizer(() => Scope.close(next.scope, Exit.void))
    for (let c = 0; c < options.cycles; c++) {
      const plan = planCycle(options.seed, c, options.backend)
      const work = sessionsOf(Math.floor(c / perGeneration), sessions)
      const verify = [...run.unsettled].filter((id) => !work.includes(id))
      const before = { acknowledged: run.acknowledged, violations: run.violations.length }
      const current = next
      next = yield* startWorker(options, worker)
      const { outcome } = yield* runWorker(options, run, current, plan, { work, verify })
      if (outcome === "clean") run.cleanExits++
      else if (outcome !== "exited") run.kills[outcome] = (run.kills[outcome] ?? 0) + 1
      if (options.onCycle !== undefined) {
        yield* options.onCycle({
          plan,
          outcome,
          acknowledged: run.acknowledged - before.acknowledged,
          violations: run.violations.slice(before.violations)
        })
      }
    }
    const everySession = Array.from(
      { length: Math.ceil(options.cycles / perGeneration) },
      (_, g) => sessionsOf(g, sessions)
    ).flat()
    yield* runWorker(options, run, next, undefined, { work: [], verify: everySession })
    const reproduce = `reproduce: npm run chaos -- --backend ${options.backend} --seed ${options.seed} ` +
      `--cycles ${options.cycles}`
    const { unsettled: _, ...counts } = run
    return {
      ...counts,
      backend: options.backend,
      seed: options.seed,
      cycles: options.cycles,
      violations: run.violations.length === 0 ? [] : [...run.violations, reproduce],
      durationMillis: (yield* Clock.currentTimeMillis) - started
    }
  }).pipe(Effect.scoped)
