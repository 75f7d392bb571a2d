/**
 * CLI-01: the built `effect-agent` binary (`dist/cli/main.js`, built here when missing or older
 * than `src`) run as a child process against real stores — a directory of files, a SQLite file,
 * and Postgres when `EFFECT_AGENT_PG_URL` is set — including bad input: an unknown id (exit 3), a
 * corrupt session (5), a locked one (4) and bad flags (2), with a check that nothing changed.
 *
 * `it.live`: the CLI is another process on the real clock, so leases written here must be on it too.
 */
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Scope } from "effect"
import { execFile, execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { beforeAll } from "vitest"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import type { SessionId } from "../src/Message.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { tempDirectory } from "./fixtures/backends.js"
import { closedTurn, openTurn } from "./fixtures/cliSessions.js"
import { header, sid } from "./fixtures/persistenceConformance.js"
import { sqlStores } from "./fixtures/sqlStores.js"

const repository = fileURLToPath(new URL("..", import.meta.url))
const main = path.join(repository, "dist", "cli", "main.js")

/** The newest modification time under `directory`. */
const newest = (directory: string): number =>
  fs.readdirSync(directory, { withFileTypes: true }).reduce((latest, entry) => {
    const full = path.join(directory, entry.name)
    return Math.max(latest, entry.isDirectory() ? newest(full) : fs.statSync(full).mtimeMs)
  }, 0)

beforeAll(() => {
  const isStale = !fs.existsSync(main) || fs.statSync(main).mtimeMs < newest(path.join(repository, "src"))
  if (isStale) {
    const tsc = path.join(repository, "node_modules", "typescript", "bin", "tsc")
    execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: repository })
  }
}, 240_000)

/** Each test starts several Node processes at once; a loaded 2-core machine needs the margin. */
const TIMEOUT = 180_000

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs the built binary; stderr is a pipe, not a terminal. */
const cli = (...args: ReadonlyArray<string>): Effect.Effect<Run> =>
  Effect.async<Run>((resume) => {
    execFile(process.execPath, [main, ...args], { cwd: repository }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1
      resume(Effect.succeed({ code, stdout, stderr }))
    })
  })

/** A store under test: its CLI flags, a persistence of this process, and what it holds, dumped. */
interface CliStore {
  readonly flags: ReadonlyArray<string>
  readonly persistence: SessionPersistence.SessionPersistence["Type"]
  /** Everything stored, as text: equal before and after means nothing changed. */
  readonly snapshot: Effect.Effect<string, unknown>
  /** Makes the stored session `id` corrupt (a record that is not JSON, not the last one). */
  readonly corrupt: (id: SessionId) => Effect.Effect<void, unknown>
  /** Makes the header of `id` unreadable (its list entry is an `UnreadableSession`, DUR-08). */
  readonly corruptHeader: (id: SessionId) => Effect.Effect<void, unknown>
  /** Plants a lock of a process of another host on `id`. */
  readonly foreignLock: (id: SessionId) => Effect.Effect<void, unknown>
  readonly hasLock: (id: SessionId) => Effect.Effect<boolean, unknown>
}

const fileStore: Effect.Effect<CliStore, unknown, Scope.Scope> = Effect.gen(function*() {
  const directory = yield* tempDirectory("effect-agent-cli-")
  const persistence = yield* Layer.build(
    FileSessionPersistence.layer({ directory, durability: "buffered" }).pipe(Layer.provide(NodeContext.layer))
  ).pipe(Effect.map(Context.get(SessionPersistence.SessionPersistence)))
  const file = (name: string) => path.join(directory, name)
  return {
    flags: ["--dir", directory],
    persistence,
    snapshot: Effect.sync(() =>
      fs.readdirSync(directory).sort().map((name) => `${name}\n${fs.readFileSync(file(name), "utf8")}`).join("\n")
    ),
    corrupt: (id) =>
      Effect.sync(() => {
        const lines = fs.readFileSync(file(`${id}.jsonl`), "utf8").split("\n")
        lines[2] = "this is not JSON"
        fs.writeFileSync(file(`${id}.jsonl`), lines.join("\n"))
      }),
    corruptHeader: (id) =>
      Effect.sync(() => {
        const lines = fs.readFileSync(file(`${id}.jsonl`), "utf8").split("\n")
        lines[0] = "{\"not\": \"a header\"}"
        fs.writeFileSync(file(`${id}.jsonl`), lines.join("\n"))
      }),
    foreignLock: (id) =>
      Effect.sync(() =>
        fs.writeFileSync(
          file(`${id}.lock`),
          JSON.stringify({ host: "another-host.example", pid: 4242, instanceId: "remote", token: "remote-token" })
        )
      ),
    hasLock: (id) => Effect.sync(() => fs.existsSync(file(`${id}.lock`)))
  } satisfies CliStore
})

const sqlStore = (make: (typeof sqlStores)[number]["make"]): Effect.Effect<CliStore, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* make
    const context = yield* Layer.build(SqlSessionPersistence.layer().pipe(Layer.provideMerge(store.client)))
    const sql = Context.get(context, SqlClient)
    return {
      flags: [store.location.startsWith("postgres") ? "--postgres" : "--sqlite", store.location],
      persistence: Context.get(context, SessionPersistence.SessionPersistence),
      snapshot: Effect.map(
        Effect.all([
          sql`SELECT session_id, header, updated_at FROM effect_agent_sessions ORDER BY session_id`,
          sql`SELECT session_id, seq, record FROM effect_agent_events ORDER BY session_id, seq`,
          // not expires_at: this process renews its own lease meanwhile
          sql`SELECT session_id, token, holder FROM effect_agent_leases ORDER BY session_id`,
          sql`SELECT version FROM effect_agent_migrations ORDER BY version`
        ]),
        (tables) => JSON.stringify(tables)
      ),
      corrupt: (id) => sql`UPDATE effect_agent_events SET record = 'this is not JSON' WHERE session_id = ${id} AND seq = 1`,
      corruptHeader: (id) => sql`UPDATE effect_agent_sessions SET header = '{"not": "a header"}' WHERE session_id = ${id}`,
      foreignLock: (id) =>
        sql`INSERT INTO effect_agent_leases (session_id, token, holder, expires_at, holder_host, holder_pid, holder_start)
          VALUES (${id}, 'remote-token', 'instance "remote" (process 4242 on host "another-host.example")',
          ${Date.now() + 3_600_000}, 'another-host.example', 4242, 'boot:1')`,
      hasLock: (id) =>
        Effect.map(sql`SELECT token FROM effect_agent_leases WHERE session_id = ${id}`, (rows) => rows.length > 0)
    } satisfies CliStore
  })

const stores: ReadonlyArray<readonly [string, Effect.Effect<CliStore, unknown, Scope.Scope>]> = [
  ["files", fileStore],
  ...sqlStores.map((kind) => [kind.name, sqlStore(kind.make)] as const)
]

const store = (persistence: CliStore["persistence"], id: SessionId, events: ReadonlyArray<SessionEvent>) =>
  Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) =>
    events.length === 0 ? Effect.void : writer.append(events as readonly [SessionEvent, ...Array<SessionEvent>])))

/** stdout as the one JSON document it must be. */
const json = <A>(run: Run): A => {
  assert.doesNotThrow(() => JSON.parse(run.stdout), `stdout is one JSON document: ${run.stdout}\n${run.stderr}`)
  return JSON.parse(run.stdout) as A
}

interface ErrorDoc {
  readonly error: { readonly _tag: string; readonly message: string; readonly exitCode: number }
}

interface ListDoc {
  readonly sessions: ReadonlyArray<{ readonly _tag: string; readonly id: string; readonly eventCount?: number }>
}

interface VerifyDoc {
  readonly ok: boolean
  readonly eventCount: number
  readonly lastTurn: { readonly state: string }
  readonly repair: ReadonlyArray<{ readonly seq: number; readonly type: string }>
  readonly lock: string | null
}

interface RepairDoc {
  readonly written: ReadonlyArray<{ readonly seq: number; readonly type: string }>
}

const expectCode = (run: Run, code: number, what: string) =>
  assert.strictEqual(run.code, code, `${what}: exit ${run.code}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`)

for (const [name, open] of stores) {
  describe(`effect-agent sessions on ${name} (CLI-01)`, () => {
    it.live("CLI-01 read commands report without changing anything; unknown 3, corrupt 5, locked 4", () =>
      Effect.gen(function*() {
        const opened = yield* open
        const { flags, persistence } = opened
        yield* store(persistence, sid("done"), closedTurn())
        yield* store(persistence, sid("open-turn"), openTurn())
        yield* store(persistence, sid("broken"), closedTurn())
        yield* opened.corrupt(sid("broken"))
        yield* store(persistence, sid("headless"), closedTurn())
        yield* opened.corruptHeader(sid("headless"))
        yield* store(persistence, sid("held"), closedTurn())
        // this process holds the writer of "held" while the CLI runs
        yield* persistence.openWrite(sid("held"))
        const before = yield* opened.snapshot

        const runs = yield* Effect.all([
          cli("sessions", "list", ...flags, "--json"),
          cli("sessions", "show", "held", ...flags),
          cli("sessions", "verify", "open-turn", ...flags, "--json"),
          cli("sessions", "verify", "open-turn", ...flags),
          cli("sessions", "verify", "broken", ...flags),
          cli("sessions", "show", "nope", ...flags, "--json"),
          cli("sessions", "export", "done", ...flags),
          cli("sessions", "export", "done", ...flags, "--format", "markdown"),
          cli("sessions", "rm", "held", ...flags),
          cli("sessions", "repair", "held", ...flags, "--json")
        ], { concurrency: "unbounded" })
        const [list, show, verify, verifyHuman, corrupt, unknown, exported, markdown, rmLocked, repairLocked] = runs

        expectCode(list, 0, "list")
        const entries = json<ListDoc>(list).sessions
        assert.deepStrictEqual(entries.map((entry) => `${entry.id}:${entry._tag}`), [
          // files validate every record to count them; SQL counts rows (the corruption shows on read)
          name === "files" ? "broken:UnreadableSession" : "broken:SessionSummary",
          "done:SessionSummary",
          "headless:UnreadableSession",
          "held:SessionSummary",
          "open-turn:SessionSummary"
        ])
        assert.strictEqual(entries.find((entry) => entry.id === "open-turn")?.eventCount, 4)
        assert.notInclude(list.stderr, "listing sessions:", "no progress when stderr is not a terminal")

        expectCode(show, 0, "show")
        assert.match(show.stdout, /Session\s+held/)
        assert.match(show.stdout, /Lock\s+.*test|Lock\s+.*process/)

        expectCode(verify, 0, "verify --json")
        const report = json<VerifyDoc>(verify)
        assert.isTrue(report.ok)
        assert.strictEqual(report.lastTurn.state, "open")
        assert.deepStrictEqual(report.repair.map((closer) => `${closer.seq}:${closer.type}`), [
          "4:tool/result",
          "5:step/end",
          "6:turn/end"
        ])
        expectCode(verifyHuman, 0, "verify")
        assert.include(verifyHuman.stdout, "would write 3 event(s)")
        assert.include(verifyHuman.stdout, "TOOL_OUTCOME_UNKNOWN")

        expectCode(corrupt, 5, "verify of a corrupt session")
        assert.include(corrupt.stderr, "corrupt")
        assert.strictEqual(corrupt.stdout, "")

        expectCode(unknown, 3, "show of an unknown id")
        assert.strictEqual(json<ErrorDoc>(unknown).error._tag, "SessionNotFound")
        assert.include(unknown.stderr, "\"nope\"")

        expectCode(exported, 0, "export")
        const lines = exported.stdout.trimEnd().split("\n").map((line) => JSON.parse(line))
        assert.deepStrictEqual(lines.slice(1), [...closedTurn()])
        assert.strictEqual(lines[0].id, "done")
        expectCode(markdown, 0, "export --format markdown")
        assert.include(markdown.stdout, "# Session `done`")
        assert.include(markdown.stdout, "What is 2 + 2?")

        expectCode(rmLocked, 4, "rm of a locked session")
        assert.include(rmLocked.stderr, "held by another writer")
        expectCode(repairLocked, 4, "repair of a locked session")
        assert.strictEqual(json<ErrorDoc>(repairLocked).error.exitCode, 4)

        assert.strictEqual(yield* opened.snapshot, before, "nothing stored changed")
      }).pipe(Effect.scoped), TIMEOUT)

    it.live("CLI-01 DUR-12 repair writes the closers once; break-lock and rm change what they say", () =>
      Effect.gen(function*() {
        const opened = yield* open
        const { flags, persistence } = opened
        yield* store(persistence, sid("open-turn"), openTurn())
        yield* store(persistence, sid("remote"), closedTurn())
        yield* store(persistence, sid("done"), closedTurn())
        yield* opened.foreignLock(sid("remote"))

        const [repaired, broken, removed] = yield* Effect.all([
          cli("sessions", "repair", "open-turn", ...flags, "--json"),
          cli("sessions", "break-lock", "remote", ...flags),
          cli("sessions", "rm", "done", ...flags)
        ], { concurrency: "unbounded" })

        expectCode(repaired, 0, "repair")
        assert.deepStrictEqual(json<RepairDoc>(repaired).written.map((closer) => closer.type), [
          "tool/result",
          "step/end",
          "turn/end"
        ])
        const stored = yield* persistence.read(sid("open-turn"))
        assert.deepStrictEqual(stored.events.map((event) => event.type).slice(4), ["tool/result", "step/end", "turn/end"])
        const again = yield* cli("sessions", "repair", "open-turn", ...flags)
        expectCode(again, 0, "repair of a repaired session")
        assert.include(again.stdout, "needs no repair")
        assert.strictEqual((yield* persistence.read(sid("open-turn"))).events.length, 7)

        expectCode(broken, 0, "break-lock")
        assert.include(broken.stdout, "another-host.example")
        assert.include(broken.stderr, "breaking the lock")
        assert.isFalse(yield* opened.hasLock(sid("remote")))

        expectCode(removed, 0, "rm")
        assert.isFalse(yield* persistence.exists(sid("done")))
        const missing = yield* cli("sessions", "rm", "done", ...flags)
        expectCode(missing, 3, "rm of an unknown id")
      }).pipe(Effect.scoped), TIMEOUT)
  })
}

describe("effect-agent usage errors (CLI-01)", () => {
  it.live("CLI-01 bad flags exit 2 with a clear message and touch nothing", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-cli-usage-")
      const [noStore, twoStores, noId, badFormat, badId, unknownCommand] = yield* Effect.all([
        cli("sessions", "list"),
        cli("sessions", "list", "--dir", directory, "--sqlite", path.join(directory, "x.db")),
        cli("sessions", "show", "--dir", directory),
        cli("sessions", "export", "x", "--dir", directory, "--format", "xml"),
        cli("sessions", "show", "../escape", "--dir", directory, "--json"),
        cli("sessions", "destroy", "--dir", directory)
      ], { concurrency: "unbounded" })
      expectCode(noStore, 2, "no store")
      assert.include(noStore.stderr, "--dir <directory>, --sqlite <file> or --postgres <url>")
      expectCode(twoStores, 2, "two stores")
      assert.include(twoStores.stderr, "exclude each other")
      expectCode(noId, 2, "no id")
      expectCode(badFormat, 2, "a bad --format")
      assert.include(badFormat.stderr, "jsonl")
      expectCode(badId, 2, "an invalid id")
      assert.strictEqual(json<ErrorDoc>(badId).error._tag, "UsageError")
      assert.include(badId.stderr, "../escape")
      expectCode(unknownCommand, 2, "an unknown command")
      assert.deepStrictEqual(fs.readdirSync(directory), [], "nothing was created")
      // a store that does not exist is never created
      const missing = yield* cli("sessions", "list", "--sqlite", path.join(directory, "missing.db"))
      expectCode(missing, 1, "a missing SQLite file")
      assert.include(missing.stderr, "no SQLite database")
      assert.deepStrictEqual(fs.readdirSync(directory), [])
    }).pipe(Effect.scoped), TIMEOUT)
})
