/**
 * CLI-01: the `effect-agent` command against real stores — a directory of files, a SQLite file,
 * and Postgres when `EFFECT_AGENT_PG_URL` is set — including bad input: an unknown id (exit 3), a
 * corrupt session (5), a locked one (4) and bad flags (2), with a check that nothing changed. Most
 * cases run the command in-process (`program.ts`: the same Effect the executable runs, its stdout and
 * stderr captured, its exit code returned), which spares a Node start-up per command; the usage
 * errors run the executable (`src/cli/main.ts`, bundled) as a child process, as an operator would.
 *
 * SEC-07 and SEC-09: `break-lock` against a real holder process (alive, then SIGKILLed), a SQL row
 * whose seq column disagrees with its record, and the answers to bad usage (exit 2, one line).
 *
 * `it.live`: the holders are other processes on the real clock, so leases written here must be on it too.
 */
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { execFile, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { CliOutput } from "../src/cli/output.js"
import { program } from "../src/cli/program.js"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import type { SessionId } from "../src/Message.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { tempDirectory } from "./fixtures/backends.js"
import { nodeArguments } from "./fixtures/bundle.js"
import { closedTurn, openTurn } from "./fixtures/cliSessions.js"
import { header, sid } from "./fixtures/persistenceConformance.js"
import { sqlStores } from "./fixtures/sqlStores.js"

const repository = fileURLToPath(new URL("..", import.meta.url))
/** What `process.argv[1]` is for the in-process command. */
const mainPath = path.join(repository, "src", "cli", "main.ts")

/** Each test runs several commands at once; a loaded 2-core machine needs the margin. */
const TIMEOUT = 180_000

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs the command in-process, as the executable would with these arguments: what it writes on
 * stdout and stderr, and its exit code. A run that has not ended after 170 s (a `serve` that started
 * when it should have refused) is interrupted and reported with code -1.
 */
const cli = (...args: ReadonlyArray<string>): Effect.Effect<Run> =>
  Effect.suspend(() => {
    let stdout = ""
    let stderr = ""
    return program([process.execPath, mainPath, ...args]).pipe(
      Effect.provideService(CliOutput, {
        stdout: (text) => void (stdout += text),
        stderr: (text) => void (stderr += text)
      }),
      Effect.timeout("170 seconds"),
      Effect.exit,
      Effect.map((exit) => ({ code: Exit.isSuccess(exit) ? exit.value : -1, stdout, stderr }))
    )
  })

/**
 * Runs the executable as a child process (`node` and `main`: `nodeArguments` of `src/cli/main.ts`,
 * its bundle); stderr is a pipe, not a terminal. A run that has not ended after 170 s is killed and
 * reported with code -1.
 */
const cliProcess = (main: ReadonlyArray<string>, ...args: ReadonlyArray<string>): Effect.Effect<Run> =>
  Effect.async<Run>((resume) => {
    execFile(process.execPath, [...main, ...args], { cwd: repository, timeout: 170_000 }, (error, stdout, stderr) => {
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
  /** The fixture and arguments of a child process that holds the writer of `id` (SEC-07). */
  readonly holderArgs: (id: SessionId) => ReadonlyArray<string>
  /** SQL only: moves the row of event `from` to seq `to` in the seq column, its record unchanged (SEC-07). */
  readonly misplaceRow?: (id: SessionId, from: number, to: number) => Effect.Effect<void, unknown>
}

const fixtures = fileURLToPath(new URL("./fixtures/", import.meta.url))

/**
 * A real process of this host holding the writer of a session (SEC-07): its fixture bundled, ready once
 * it printed `locked <pid>`; `kill` SIGKILLs it and waits for it to end (its lock is left behind).
 * The Scope kills it if the test did not.
 */
const holder = ([fixture, ...args]: ReadonlyArray<string>) =>
  Effect.flatMap(nodeArguments(fixture!), (node) => Effect.acquireRelease(
    Effect.async<{ readonly pid: number; readonly kill: Effect.Effect<void> }, Error>((resume) => {
      const child = spawn(process.execPath, [...node, ...args], { cwd: repository })
      const ended = new Promise<void>((done) => child.once("exit", () => done()))
      const kill = Effect.promise(() => {
        child.kill("SIGKILL")
        return ended
      })
      let stdout = ""
      let stderr = ""
      child.stderr.on("data", (chunk) => (stderr += String(chunk)))
      child.stdout.on("data", (chunk) => {
        stdout += String(chunk)
        const ready = /^locked (\d+)\n/.exec(stdout)
        if (ready !== null) resume(Effect.succeed({ pid: Number(ready[1]), kill }))
      })
      child.once("exit", (code) => resume(Effect.fail(new Error(`the holder ended (${code}) before it locked: ${stderr}`))))
    }),
    (held) => held.kill
  ))

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
    hasLock: (id) => Effect.sync(() => fs.existsSync(file(`${id}.lock`))),
    holderArgs: (id) => [path.join(fixtures, "holdSessionLock.ts"), directory, id]
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
        Effect.map(sql`SELECT token FROM effect_agent_leases WHERE session_id = ${id}`, (rows) => rows.length > 0),
      holderArgs: (id) => [
        path.join(fixtures, "holdSqlLease.ts"),
        store.location.startsWith("postgres") ? "postgres" : "sqlite",
        store.location,
        id
      ],
      misplaceRow: (id, from, to) =>
        sql`UPDATE effect_agent_events SET seq = ${to} WHERE session_id = ${id} AND seq = ${from}`
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

/** SEC-09: an error the way a CLI gives it — one line on stderr, no stack. */
const expectOneLine = (run: Run, what: string) => {
  assert.strictEqual(run.stderr.trimEnd().split("\n").length, 1, `${what}: one line on stderr:\n${run.stderr}`)
  assert.notMatch(run.stderr, /\bat .*:\d+:\d+|Error:/, `${what}: no stack:\n${run.stderr}`)
}

interface WriterDoc {
  readonly lastTurn: { readonly state: string }
  readonly writer: { readonly state: string; readonly pid?: number; readonly started?: string } | null
}

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

    it.live("SEC-07 SEC-09 break-lock refuses a live holder unless --force; show and verify say a live writer holds it; a dead holder's lock is broken", () =>
      Effect.gen(function*() {
        const opened = yield* open
        const { flags, persistence } = opened
        const live = sid("live-holder")
        const dead = sid("dead-holder")
        yield* store(persistence, live, openTurn())
        yield* store(persistence, dead, closedTurn())
        const [alive, killed] = yield* Effect.all([holder(opened.holderArgs(live)), holder(opened.holderArgs(dead))], {
          concurrency: "unbounded"
        })
        yield* killed.kill

        const [refused, show, verify, verifyJson, brokeDead] = yield* Effect.all([
          cli("sessions", "break-lock", live, ...flags),
          cli("sessions", "show", live, ...flags),
          cli("sessions", "verify", live, ...flags),
          cli("sessions", "verify", live, ...flags, "--json"),
          cli("sessions", "break-lock", dead, ...flags)
        ], { concurrency: "unbounded" })

        expectCode(refused, 4, "break-lock of a live holder")
        expectOneLine(refused, "break-lock of a live holder")
        assert.include(refused.stderr, `process ${alive.pid}`)
        assert.match(refused.stderr, /started \d{4}-\d\d-\d\dT/, "the holder's start time")
        assert.include(refused.stderr, "--force")
        assert.isTrue(yield* opened.hasLock(live), "the live holder keeps its lock")

        for (const [run, what] of [[show, "show"], [verify, "verify"]] as const) {
          expectCode(run, 0, what)
          assert.notInclude(run.stdout, "interrupted", what)
          assert.include(run.stdout, `held by a live writer (process ${alive.pid}`, what)
        }
        assert.include(verify.stdout, "a live writer holds it")
        expectCode(verifyJson, 0, "verify --json")
        const report = json<WriterDoc>(verifyJson)
        assert.strictEqual(report.lastTurn.state, "open")
        assert.strictEqual(report.writer?.state, "running")
        assert.strictEqual(report.writer?.pid, alive.pid)

        expectCode(brokeDead, 0, "break-lock of a dead holder")
        // a SQL lease may also have expired meanwhile on a loaded machine (30 s without renewal)
        assert.match(brokeDead.stdout, /no longer running|lease expired/)
        assert.isFalse(yield* opened.hasLock(dead))

        const forced = yield* cli("sessions", "break-lock", live, ...flags, "--force")
        expectCode(forced, 0, "break-lock --force")
        assert.include(forced.stderr, "warning: --force")
        assert.include(forced.stderr, `process ${alive.pid}`)
        assert.isFalse(yield* opened.hasLock(live))
      }).pipe(Effect.scoped), TIMEOUT)

    if (name !== "files") {
      it.live("SEC-07 verify and repair name a row whose seq column disagrees with its record (exit 5); nothing changes", () =>
        Effect.gen(function*() {
          const opened = yield* open
          const { flags, persistence } = opened
          const moved = sid("moved")
          yield* store(persistence, moved, closedTurn())
          const last = closedTurn().length - 1
          yield* opened.misplaceRow!(moved, last, 40)
          const before = yield* opened.snapshot

          const [verify, repaired] = yield* Effect.all([
            cli("sessions", "verify", moved, ...flags),
            cli("sessions", "repair", moved, ...flags, "--json")
          ], { concurrency: "unbounded" })
          expectCode(verify, 5, "verify")
          expectOneLine(verify, "verify")
          assert.include(verify.stderr, `"${moved}"`)
          assert.include(verify.stderr, `seq ${last}`)
          assert.include(verify.stderr, "seq 40")
          expectCode(repaired, 5, "repair")
          const error = json<ErrorDoc>(repaired).error
          assert.strictEqual(error._tag, "SessionCorrupt")
          assert.include(error.message, "seq 40")
          assert.strictEqual(yield* opened.snapshot, before, "nothing stored changed")
        }).pipe(Effect.scoped), TIMEOUT)
    }
  })
}

describe("effect-agent usage errors (CLI-01)", () => {
  it.live("CLI-01 bad flags exit 2 with a clear message and touch nothing (the executable, as a child process)", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-cli-usage-")
      const main = yield* nodeArguments("src/cli/main.ts")
      const [noStore, twoStores, noId, badFormat, badId, unknownCommand] = yield* Effect.all([
        cliProcess(main, "sessions", "list"),
        cliProcess(main, "sessions", "list", "--dir", directory, "--sqlite", path.join(directory, "x.db")),
        cliProcess(main, "sessions", "show", "--dir", directory),
        cliProcess(main, "sessions", "export", "x", "--dir", directory, "--format", "xml"),
        cliProcess(main, "sessions", "show", "../escape", "--dir", directory, "--json"),
        cliProcess(main, "sessions", "destroy", "--dir", directory)
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
      const missing = yield* cliProcess(main, "sessions", "list", "--sqlite", path.join(directory, "missing.db"))
      expectCode(missing, 1, "a missing SQLite file")
      assert.include(missing.stderr, "no SQLite database")
      assert.deepStrictEqual(fs.readdirSync(directory), [])
    }).pipe(Effect.scoped), TIMEOUT)
})

/** A TCP port of 127.0.0.1 held by this process while the Scope is open. */
const portInUse = Effect.acquireRelease(
  Effect.async<net.Server>((resume) => {
    const server = net.createServer()
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
  }),
  (server) =>
    Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
    })
).pipe(Effect.map((server) => (server.address() as net.AddressInfo).port))

describe("effect-agent answers bad usage like a CLI (SEC-09)", () => {
  it.live("SEC-09 a bare command prints usage (2); bad values and unknown flags, a port in use and stores that are not one get one line", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-cli-sec09-")
      const textFile = path.join(directory, "notes.txt")
      fs.writeFileSync(textFile, "this is not a database\n")
      const sessionsDir = path.join(directory, "sessions")
      const port = yield* portInUse
      const serve = (...args: ReadonlyArray<string>) => cli("serve", ...args, "--dir", sessionsDir)
      const [bare, bareRoot, bigPort, wordPort, negativeDrain, bogus, bogusList, inUse, dirFile, serveDirFile, sqliteText] =
        yield* Effect.all([
          cli("sessions"),
          cli(),
          serve("--port", "99999"),
          serve("--port", "abc"),
          serve("--port", "0", "--drain", "-1"),
          serve("--bogus"),
          cli("sessions", "list", "--dir", directory, "--bogus"),
          serve("--host", "127.0.0.1", "--port", String(port)),
          cli("sessions", "list", "--dir", textFile),
          cli("serve", "--port", "0", "--dir", textFile),
          cli("sessions", "list", "--sqlite", textFile)
        ], { concurrency: "unbounded" })

      expectCode(bare, 2, "a bare `sessions`")
      assert.include(bare.stderr, "usage: effect-agent sessions <command>")
      assert.include(bare.stderr, "break-lock <id> [--force]")
      expectCode(bareRoot, 2, "a bare `effect-agent`")
      assert.include(bareRoot.stderr, "usage: effect-agent")

      for (const [run, what, says] of [
        [bigPort, "--port 99999", "--port \"99999\""],
        [wordPort, "--port abc", "--port \"abc\""],
        [negativeDrain, "--drain -1", "--drain \"-1\""],
        [bogus, "serve --bogus", "--bogus"],
        [bogusList, "list --bogus", "--bogus"]
      ] as const) {
        expectCode(run, 2, what)
        expectOneLine(run, what)
        assert.include(run.stderr, says, what)
        assert.strictEqual(run.stdout, "", what)
      }

      expectCode(inUse, 1, "a port in use")
      expectOneLine(inUse, "a port in use")
      assert.include(inUse.stderr, "EADDRINUSE")
      assert.include(inUse.stderr, String(port))

      for (const [run, what, says] of [
        [dirFile, "list --dir <a file>", "is not a directory"],
        [serveDirFile, "serve --dir <a file>", "is not a directory"],
        [sqliteText, "--sqlite <a text file>", "is not a SQLite database"]
      ] as const) {
        expectCode(run, 1, what)
        expectOneLine(run, what)
        assert.include(run.stderr, says, what)
      }
      assert.strictEqual(fs.readFileSync(textFile, "utf8"), "this is not a database\n", "the text file is untouched")
    }).pipe(Effect.scoped), TIMEOUT)
})
