/**
 * The worker of the crash-consistency suite (DUR-13), run as its own process by the driver
 * (`node --import tsx test/chaos/worker.ts …`, or the driver's bundle of it). It opens the real
 * runtime with `fsync` durability — JSONL files (`--backend file --store <directory>`) or SQLite
 * (`--backend sqlite --store <file>`) — and then:
 *
 * 1. verifies: resumes every session to verify (`--verify`, and the work sessions) WITHOUT operator
 *    help, and checks each against the journal (`--journal`, what earlier workers acknowledged):
 *    `verified <session> …` or `violation <session> <what>`. This is a fresh process, so it sees
 *    only what the killed one made durable;
 * 2. works (unless `--final`): on each work session (`--work`), `--ops` random verbs from the
 *    PRNG of `--seed`: followup, steer, inject, cancel with and without `keepInbox` (raced by up to
 *    two sends started after its call, which it must never discard: SEC-11), a 1 MiB
 *    follow-up (`--big`: its probability), custom `chaos/note` events; the scripted model calls a
 *    tool that takes a while and a quick one, in parallel. Each acknowledged verb is printed
 *    (`ack`, `cancel-start`/`cancel`, `event`; see journal.ts) right after its Effect succeeded;
 *    `phase …` lines mark the moments the driver may kill it in: `phase resume <session> <tags>`
 *    before a resume (tags `takeover`: a lock or lease is held by a dead writer; `repair`: the log
 *    ends inside a turn) and `phase big-append <session> <id>` before a 1 MiB follow-up.
 *
 * With `--final` it verifies, disposes every agent and checks that no lock, guard, temporary file
 * (file store; a temp file a kill cut before it was filled is aged past DUR-06's 60 s and must then
 * be swept) or lease (SQLite) is left. Log lines of the library go to stdout as `log <LEVEL> …`.
 *
 * The cycle's part of the arguments (`--cycle`, `--work`, `--verify`, `--final`, `--ops`, `--big`)
 * may instead come as one JSON line on stdin (`--stdin`): the driver starts each worker ahead of
 * its cycle that way.
 */
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Context, Effect, Either, Fiber, Layer, Logger, Option, Schedule, Schema } from "effect"
import * as nodeFs from "node:fs"
import * as path from "node:path"
import { parseArgs } from "node:util"
import type { AgentHandle, AgentSetup } from "../../src/Agent.js"
import { AgentRegistry } from "../../src/AgentRegistry.js"
import * as NodeFileSessionPersistence from "../../src/NodeFileSessionPersistence.js"
import * as SqlSessionPersistence from "../../src/SqlSessionPersistence.js"
import * as Message from "../../src/Message.js"
import * as Model from "../../src/Model.js"
import * as Repair from "../../src/Repair.js"
import type { SessionEvent } from "../../src/SessionEvent.js"
import { SessionPersistence } from "../../src/SessionPersistence.js"
import * as Tool from "../../src/Tool.js"
import type { SessionJournal } from "./journal.js"
import { emptyJournal, parseJournal } from "./journal.js"
import * as Prng from "./prng.js"
import { noteType, sessionViolations } from "./verify.js"

const { values: args } = parseArgs({
  options: {
    backend: { type: "string", default: "file" },
    store: { type: "string" },
    journal: { type: "string" },
    seed: { type: "string", default: "1" },
    cycle: { type: "string", default: "0" },
    work: { type: "string", default: "" },
    verify: { type: "string", default: "" },
    final: { type: "boolean", default: false },
    ops: { type: "string", default: "30" },
    big: { type: "string", default: "0.02" },
    "lease-ttl": { type: "string", default: "250" },
    stdin: { type: "boolean", default: false },
    "keep-stale-locks": { type: "boolean", default: false }
  }
})

const backend = args.backend === "sqlite" ? "sqlite" : "file"
const store = args.store ?? "."
const seed = Number(args.seed)
const leaseTtlMillis = Number(args["lease-ttl"])
const list = (csv: string) => csv.split(",").filter((s) => s.length > 0)

/** What this cycle does: from the arguments, or (`--stdin`) from one JSON line the driver sends. */
export interface CycleConfig {
  readonly cycle: number
  readonly work: ReadonlyArray<string>
  readonly verify: ReadonlyArray<string>
  readonly final: boolean
  readonly ops: number
  readonly big: number
  /**
   * Files: leave locks of dead writers to the resumes (their takeover is what a `takeover` cycle aims
   * at) instead of clearing them at the layer's start (the default, issue 15; the same protocol).
   */
  readonly keepStaleLocks: boolean
}

const configFromArgs: CycleConfig = {
  cycle: Number(args.cycle),
  work: list(args.work),
  verify: list(args.verify),
  final: args.final,
  ops: Number(args.ops),
  big: Number(args.big),
  keepStaleLocks: args["keep-stale-locks"]
}

/**
 * With `--stdin` the driver starts the worker ahead of its cycle: it loads its modules (most of
 * a start's cost) while the previous worker runs, and touches nothing stored until the driver,
 * once that one is dead and drained, sends the cycle's configuration and closes stdin.
 */
const readConfig: Effect.Effect<CycleConfig> = args.stdin
  ? Effect.async<CycleConfig>((resume) => {
    let text = ""
    process.stdin.setEncoding("utf8")
    process.stdin.on("data", (chunk: string) => void (text += chunk))
    process.stdin.on("end", () => resume(Effect.sync(() => JSON.parse(text) as CycleConfig)))
  })
  : Effect.succeed(configFromArgs)

const route = { provider: "scripted", model: "chaos" } as const

/** One line to the driver. Writes to a pipe are synchronous on Linux: once this returns, it survives a kill. */
const emit = (line: string) => Effect.sync(() => void process.stdout.write(`${line}\n`))

const oneLine = (text: string) => text.replace(/\s+/g, " ")

const toStdout = Logger.make(({ logLevel, message }) => {
  const text = Array.isArray(message) ? message.map(String).join(" ") : String(message)
  process.stdout.write(`log ${logLevel.label} ${oneLine(text)}\n`)
})

// --- the model and its tools ----------------------------------------------------------------------

const slow = Tool.make({
  name: "slow",
  description: "Takes a few milliseconds.",
  parameters: Schema.Struct({ ms: Schema.Number }),
  run: ({ ms }) => Effect.as(Effect.sleep(ms), Tool.text(`slept ${ms} ms`))
})

const quick = Tool.make({
  name: "quick",
  description: "Answers at once.",
  parameters: Schema.Struct({}),
  run: () => Effect.succeed(Tool.text("quick answer"))
})

const setup = (agent: AgentSetup) =>
  Effect.all([agent.tools.register(slow), agent.tools.register(quick)], { discard: true })

/** Replies drawn from the cycle's PRNG: text, or one or two tool calls (run in parallel). */
const reply = (rng: Prng.Prng, cycle: number) => (request: Model.ModelRequest, n: number): Model.Reply => {
  const callId = (i: number) => `c${cycle}x${n}x${i}`
  const slowCall = (i: number) => Model.toolCall(callId(i), "slow", JSON.stringify({ ms: rng.int(1, 25) }))
  if (request.messages[request.messages.length - 1]?.role === "tool") {
    return rng.chance(0.3) ? [Model.text("one more"), slowCall(0)] : Model.text("done")
  }
  return rng.weighted<Model.Reply>([
    [Model.text("noted"), 4],
    [[Model.text("let me look"), slowCall(0)], 3],
    [[Model.toolCall(callId(0), "quick", "{}"), slowCall(1)], 3]
  ])
}

// --- verification -------------------------------------------------------------------------------

/** What the verifier asks the store itself: whether a dead writer's lock/lease is left, what a clean shutdown left. */
class StoreProbe extends Context.Tag("chaos/StoreProbe")<StoreProbe, {
  /** Whether a writer (now dead: the workers run one at a time) still holds `id`'s lock or lease. */
  readonly isHeld: (id: string) => Effect.Effect<boolean>
  /** What a clean shutdown must not leave: anything but the logs (file store), any lease (SQLite). */
  readonly leftovers: (sessions: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>>
}>() {}

/** Files in the store besides the logs of `sessions`. */
const strayFiles = (sessions: ReadonlyArray<string>) => {
  const expected = new Set(sessions.map((id) => `${id}.jsonl`))
  return nodeFs.readdirSync(store).filter((name) => !expected.has(name))
}

/**
 * A lock's temporary file that a kill cut before it was filled: it names no owner, so nobody can
 * tell it from one being written right now until it is 60 s old (DUR-06).
 */
const isInterruptedTemp = (name: string) => {
  if (!/\.lock\.[A-Za-z0-9-]{1,64}\.tmp$/.test(name)) return false
  try {
    JSON.parse(nodeFs.readFileSync(path.join(store, name), "utf8"))
    return false
  } catch {
    return true
  }
}

/**
 * After a clean shutdown only the logs may remain — except temp files cut before they were filled,
 * which the protocol removes once they are 60 s old: they are aged by 61 s here (their mtime set
 * back), and a writer's start (its sweep) must then remove them. Prints `aged <n>`.
 */
const fileLeftovers = (sessions: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const interrupted = strayFiles(sessions).filter(isInterruptedTemp)
    if (interrupted.length > 0) {
      const past = new Date(Date.now() - 61_000)
      for (const name of interrupted) nodeFs.utimesSync(path.join(store, name), past, past)
      yield* Effect.scoped(Layer.build(NodeFileSessionPersistence.layer({ directory: store, instanceId: "sweep" })))
      yield* emit(`aged ${interrupted.length}`)
    }
    return strayFiles(sessions).map((name) => `file ${name}`)
  }).pipe(Effect.orDie)

const fileProbe = Layer.succeed(StoreProbe, {
  isHeld: (id) => Effect.sync(() => nodeFs.existsSync(path.join(store, `${id}.lock`))),
  leftovers: fileLeftovers
})

const sqlProbe = Layer.effect(
  StoreProbe,
  Effect.map(SqlClient.SqlClient, (sql) => ({
    isHeld: (id: string) =>
      Effect.orDie(Effect.map(
        sql<{ readonly held: number }>`SELECT 1 AS held FROM effect_agent_leases WHERE session_id = ${id}`,
        (rows) => rows.length > 0
      )),
    leftovers: () =>
      Effect.orDie(Effect.map(
        sql<{ readonly session_id: string }>`SELECT session_id FROM effect_agent_leases`,
        (rows) => rows.map((row) => `lease of ${row.session_id}`)
      ))
  }))
)

/**
 * SQL leases have no dead-process detection yet: a killed worker's lease is taken over once it
 * expired (a ttl after its last renewal). Waiting for that is not operator help; waiting longer is
 * a failure.
 */
const waitOutLease = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
  backend === "file" ? effect : effect.pipe(
    Effect.retry({
      while: (error) => error._tag === "SessionLocked",
      schedule: Schedule.spaced("50 millis"),
      times: Math.ceil((4 * leaseTtlMillis + 5_000) / 50)
    })
  )

const describeError = (error: unknown) => {
  if (!(error instanceof Error)) return oneLine(String(error))
  const tag = "_tag" in error && typeof error._tag === "string" ? error._tag : error.name
  return oneLine(`${tag}: ${error.message}`)
}

/**
 * Resumes `id` (creates it when it was never acknowledged open and nothing is stored), checks it
 * against the journal and returns its handle; `None` when it could not be resumed (reported).
 */
const verifySession = (id: string, journal: SessionJournal) =>
  Effect.gen(function*() {
    const persistence = yield* SessionPersistence
    const registry = yield* AgentRegistry
    const probe = yield* StoreProbe
    const sessionId = Message.sessionId(id).pipe(Either.getOrThrow)
    const read = yield* Effect.either(waitOutLease(persistence.read(sessionId)))
    if (Either.isLeft(read) && read.left._tag !== "SessionNotFound") {
      yield* emit(`violation ${id} reading the stored log failed: ${describeError(read.left)}`)
    }
    const stored = Either.isRight(read) ? read.right.events : undefined
    const tags = [
      ...((yield* probe.isHeld(id)) ? ["takeover"] : []),
      ...(stored !== undefined && Option.isSome(Repair.openTurn(stored)) ? ["repair"] : [])
    ]
    yield* emit(`phase resume ${id} ${tags.length === 0 ? "-" : tags.join(",")}`)
    const options = { sessionId: id, options: route, setup }
    const resumed = yield* Effect.either(waitOutLease(
      stored === undefined && !journal.opened ? registry.resumeOrCreate(options) : registry.resume(options)
    ))
    if (Either.isLeft(resumed)) {
      yield* emit(`violation ${id} resume without an operator failed: ${describeError(resumed.left)}`)
      return Option.none<AgentHandle>()
    }
    const agent = resumed.right.agent
    yield* emit(`open ${id}`)
    const events: ReadonlyArray<SessionEvent> = yield* agent.session.events
    const pending = [...(yield* agent.inbox.nextStep), ...(yield* agent.inbox.nextTurn)].map((m) => m.id as string)
    const violations = sessionViolations(journal, { stored, resumed: events, pending })
    for (const violation of violations) yield* emit(`violation ${id} ${oneLine(violation)}`)
    const closers = stored === undefined ? 0 : events.length - stored.length
    yield* emit(`verified ${id} events=${events.length} pending=${pending.length} closers=${closers}`)
    return Option.some(resumed.right)
  })

// --- work ---------------------------------------------------------------------------------------

type Verb = "followup" | "steer" | "inject" | "cancel" | "big" | "note" | "idle"

const bigText = "x".repeat(1 << 20)

/** Runs a verb; its failure is reported as a violation (in a healthy runtime none of them fails). */
const attempt = <E>(id: string, what: string, effect: Effect.Effect<void, E>) =>
  Effect.catchAll(effect, (error) => emit(`violation ${id} ${what} failed: ${describeError(error)}`))

const workOn = (id: string, handle: AgentHandle, rng: Prng.Prng, config: CycleConfig) =>
  Effect.gen(function*() {
    const agent = handle.agent
    for (let op = 0; op < config.ops; op++) {
      const verb = rng.weighted<Verb>([
        ["followup", 30],
        ["steer", 12],
        ["inject", 10],
        ["cancel", 6],
        ["big", 100 * config.big],
        ["note", 16],
        ["idle", 8]
      ])
      const key = `${id}.${config.cycle}.${op}`
      switch (verb) {
        case "followup":
        case "steer":
        case "inject": {
          const message = Message.user(`${verb} ${op}`, { id: key })
          yield* attempt(id, `${verb} ${key}`, Effect.zipRight(agent[verb](message), emit(`ack ${id} ${key} ${verb}`)))
          break
        }
        case "big": {
          yield* emit(`phase big-append ${id} ${key}`)
          const message = Message.user(bigText, { id: key })
          yield* attempt(id, `big ${key}`, Effect.zipRight(agent.followup(message), emit(`ack ${id} ${key} big`)))
          break
        }
        case "cancel": {
          const mode = rng.chance(0.5) ? "keep" : "drop"
          // SEC-11: sends racing the cancel — some started before it (their writes in flight at its
          // call), some after. Each prints its `ack` in the slice its splice committed in, and the
          // cancel prints `cancel-start` in the slice it is called in: a send acknowledged after that
          // line must never be discarded by this cancel, which the verifier checks
          const racer = (i: number) => {
            const verb = rng.weighted<"followup" | "steer" | "inject">([["followup", 2], ["steer", 2], ["inject", 1]])
            const racerKey = `${key}.r${i}`
            const message = Message.user(`${verb} ${racerKey}`, { id: racerKey })
            return attempt(
              id,
              `${verb} ${racerKey} racing a cancel`,
              Effect.zipRight(agent[verb](message), emit(`ack ${id} ${racerKey} ${verb}`))
            )
          }
          const before = Array.from({ length: rng.int(0, 2) }, (_, i) => racer(i))
          const after = Array.from({ length: rng.int(0, 1) }, (_, i) => racer(2 + i))
          const racing = yield* Effect.forEach(before, (send) => Effect.fork(send))
          if (before.length > 0) yield* Effect.yieldNow()
          const cancel = emit(`cancel-start ${id} ${mode}`).pipe(
            Effect.zipRight(agent.cancel({ kind: "user" }, { keepInbox: mode === "keep" })),
            Effect.zipRight(emit(`cancel ${id} ${mode}`))
          )
          racing.push(yield* Effect.fork(attempt(id, `cancel ${mode}`, cancel)))
          for (const send of after) racing.push(yield* Effect.fork(send))
          yield* Fiber.joinAll(racing)
          break
        }
        case "note": {
          yield* attempt(
            id,
            `note ${key}`,
            Effect.zipRight(agent.session.append({ type: noteType, data: { key } }), emit(`event ${id} ${key}`))
          )
          break
        }
        case "idle":
          yield* agent.whenIdle
      }
    }
    yield* agent.whenIdle
  })

// --- the program --------------------------------------------------------------------------------

const program = Effect.gen(function*() {
  const config = yield* readConfig
  const journal = parseJournal(args.journal === undefined ? "" : nodeFs.readFileSync(args.journal, "utf8"))
  const journalOf = (id: string): SessionJournal => journal.get(id) ?? emptyJournal(id)
  const toVerify = config.final
    ? [...new Set([...journal.keys(), ...config.verify])]
    : [...new Set([...config.verify, ...config.work])]
  const model = yield* Model.scripted(reply(Prng.make(Prng.derive(seed, config.cycle, 0)), config.cycle))

  yield* Effect.gen(function*() {
    const handles = new Map<string, AgentHandle>()
    for (const id of toVerify) {
      const handle = yield* verifySession(id, journalOf(id))
      if (Option.isSome(handle)) handles.set(id, handle.value)
    }
    // Sessions of past generations are only verified: release them now.
    for (const [id, handle] of handles) {
      if (config.final || !config.work.includes(id)) yield* Effect.orDie(handle.dispose)
    }
    if (config.final) {
      for (const leftover of yield* (yield* StoreProbe).leftovers(toVerify)) {
        yield* emit(`violation - left after a clean shutdown: ${leftover}`)
      }
      return yield* emit("done")
    }
    yield* emit("ready")
    yield* Effect.forEach(
      config.work.flatMap((id, index) => {
        const handle = handles.get(id)
        const rng = Prng.make(Prng.derive(seed, config.cycle, index + 1))
        return handle === undefined ? [] : [workOn(id, handle, rng, config)]
      }),
      (work) => work,
      { concurrency: "unbounded", discard: true }
    )
    for (const id of config.work) {
      const handle = handles.get(id)
      if (handle !== undefined) yield* Effect.orDie(handle.dispose)
    }
    yield* emit("done")
  }).pipe(Effect.scoped, Effect.provide(runtimeLayer(model.layer, config)))
}).pipe(Effect.scoped)

function runtimeLayer(modelLayer: Layer.Layer<Model.Model>, config: CycleConfig) {
  const instanceId = `chaos-worker-${config.cycle}`
  if (backend === "file") {
    const clearStaleLocks = !config.keepStaleLocks
    const options = { directory: store, durability: "fsync" as const, instanceId, clearStaleLocks }
    return NodeFileSessionPersistence.layerRuntime(options).pipe(
      Layer.provide(modelLayer),
      Layer.merge(fileProbe),
      Layer.orDie
    )
  }
  return SqlSessionPersistence.layerRuntime({ durability: "fsync", leaseTtl: leaseTtlMillis, instanceId }).pipe(
    Layer.merge(sqlProbe),
    Layer.provideMerge(SqliteClient.layer({ filename: store })),
    Layer.provide(modelLayer),
    Layer.orDie
  )
}

NodeRuntime.runMain(program.pipe(Effect.provide(Logger.replace(Logger.defaultLogger, toStdout))), {
  disablePrettyLogger: true
})
