/**
 * The first-time user's polish of the operator CLI (DOC-02): the built binary run as a child
 * process against real stores — `serve` on a SQLite file that does not exist yet, `sessions rm`
 * of a session with a summary and of an unknown id, one version everywhere, `--help` into a pipe —
 * and `sessions repair --truncate-at-corruption` (DOC-05) on real files and real SQL databases.
 *
 * `it.live`: the CLI is another process on the real clock.
 */
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Context, Effect, Layer, Scope, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { beforeAll } from "vitest"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import { VERSION } from "../src/internal/version.js"
import type { SessionId } from "../src/Message.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { tempDirectory } from "./fixtures/backends.js"
import { closedTurn } from "./fixtures/cliSessions.js"
import { cli, ensureBuilt, repository, type Run, serveProcess } from "./fixtures/cliProcess.js"
import { header, sid } from "./fixtures/persistenceConformance.js"
import { sqlStores } from "./fixtures/sqlStores.js"

beforeAll(ensureBuilt, 240_000)

/** Each test starts Node processes; a loaded 2-core machine needs the margin. */
const TIMEOUT = 180_000

const expectCode = (run: Run, code: number, what: string) =>
  assert.strictEqual(run.code, code, `${what}: exit ${run.code}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`)

// eslint-disable-next-line no-control-regex
const ansi = /\x1b\[/

const fileStoreIn = (directory: string) =>
  Layer.build(FileSessionPersistence.layer({ directory, durability: "buffered" }).pipe(Layer.provide(NodeContext.layer)))
    .pipe(Effect.map(Context.get(SessionPersistence.SessionPersistence)))

const store = (
  persistence: SessionPersistence.SessionPersistence["Type"],
  id: SessionId,
  events: readonly [SessionEvent, ...Array<SessionEvent>]
) => Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(events)))

const fetchJson = (url: string, init?: RequestInit) =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    return { status: response.status, body: (await response.json()) as Record<string, unknown> }
  })

describe("the operator CLI's polish (DOC-02)", () => {
  it.live("DOC-02 one version: package.json, its lock file, --version, the README and the OpenAPI document (titled effect-agent)", () =>
    Effect.gen(function*() {
      const manifest = JSON.parse(fs.readFileSync(path.join(repository, "package.json"), "utf8"))
      const lock = JSON.parse(fs.readFileSync(path.join(repository, "package-lock.json"), "utf8"))
      assert.strictEqual(VERSION, "0.3.0")
      assert.strictEqual(manifest.version, VERSION)
      assert.strictEqual(lock.version, VERSION)
      assert.strictEqual(lock.packages[""].version, VERSION)
      const readme = fs.readFileSync(path.join(repository, "README.md"), "utf8")
      assert.include(readme, VERSION)
      for (const [, named] of readme.matchAll(/effect-agent@(\d+\.\d+\.\d+)/g)) assert.strictEqual(named, VERSION)

      const version = yield* cli(["--version"])
      expectCode(version, 0, "--version")
      assert.strictEqual(version.stdout.trim(), VERSION)
    }).pipe(Effect.scoped), TIMEOUT)

  it.live("DOC-02 --help prints no colour codes when stdout is not a terminal", () =>
    Effect.gen(function*() {
      const runs = yield* Effect.all([
        cli(["--help"]),
        cli(["sessions", "repair", "--help"]),
        cli(["serve", "--help"])
      ], { concurrency: "unbounded" })
      for (const run of runs) {
        expectCode(run, 0, "--help")
        assert.include(run.stdout, "USAGE")
        assert.notMatch(run.stdout, ansi, run.stdout)
        assert.notMatch(run.stderr, ansi, run.stderr)
      }
      assert.include(runs[2]!.stdout, "--host")
    }), TIMEOUT)

  it.live("DOC-02 serve --sqlite creates a missing database, listens on 127.0.0.1, prints the inspector's URL and refuses a bad request with a path message", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-polish-")
      const database = path.join(directory, "new.db")
      const { serving } = yield* serveProcess(["--sqlite", "./new.db", "--port", "0"], { cwd: directory })
      assert.isTrue(fs.statSync(database).isFile(), "the database file was created")
      assert.match(serving.url, /^http:\/\/127\.0\.0\.1:\d+$/, serving.banner)
      assert.strictEqual(serving.inspector, `${serving.url}/inspector/`)

      const page = yield* Effect.promise(() => fetch(serving.inspector).then((response) => response.status))
      assert.strictEqual(page, 200, "the printed inspector URL answers")
      const openApi = yield* fetchJson(`${serving.url}/openapi.json`)
      assert.deepStrictEqual(openApi.body["info"], { title: "effect-agent", version: VERSION })

      const created = yield* fetchJson(`${serving.url}/sessions/s1`, {
        method: "PUT",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ meta: { x: "y" } })
      })
      assert.strictEqual(created.status, 201)
      for (const [url, body, says] of [
        [`${serving.url}/sessions/s2`, { options: { provider: 5 } }, "field options.provider: expected a string, got 5"],
        [`${serving.url}/sessions/s1/fork`, { childId: "c", upTo: "x" }, "field upTo: expected a number, got \"x\""]
      ] as const) {
        const refused = yield* fetchJson(url, {
          method: url.endsWith("fork") ? "POST" : "PUT",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body)
        })
        assert.strictEqual(refused.status, 400)
        const detail = String(refused.body["detail"])
        assert.include(detail, says)
        for (const internal of ["└", "├", "readonly", "Expected", "{ "]) assert.notInclude(detail, internal, detail)
      }

      // the session commands still never create a store
      const missing = yield* cli(["sessions", "list", "--sqlite", path.join(directory, "other.db")])
      expectCode(missing, 1, "list of a missing database")
      assert.isFalse(fs.existsSync(path.join(directory, "other.db")))
    }).pipe(Effect.scoped), TIMEOUT)

  it.live("DOC-02 sessions rm removes the summary with the log; an unknown id exits 3 saying not found", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-polish-rm-")
      const persistence = yield* fileStoreIn(directory)
      yield* store(persistence, sid("done"), closedTurn())
      // the host's recovery summaries write the sidecar index
      const summaries = yield* Stream.runCollect(persistence.summaries!)
      assert.strictEqual(Chunk.size(summaries), 1)
      const sidecar = path.join(directory, ".summaries", "done.json")
      assert.isTrue(fs.existsSync(sidecar), "the summary exists before rm")

      const removed = yield* cli(["sessions", "rm", "done", "--dir", directory])
      expectCode(removed, 0, "rm")
      assert.isFalse(fs.existsSync(path.join(directory, "done.jsonl")))
      assert.isFalse(fs.existsSync(sidecar), "the summary went with the log")

      const [again, unknown] = yield* Effect.all([
        cli(["sessions", "rm", "done", "--dir", directory]),
        cli(["sessions", "rm", "nobody", "--dir", directory, "--json"])
      ], { concurrency: "unbounded" })
      for (const run of [again, unknown]) {
        expectCode(run, 3, "rm of an unknown id")
        assert.include(run.stderr, "not found")
        assert.notInclude(run.stderr, "create it first")
      }
      assert.strictEqual(JSON.parse(unknown.stdout).error._tag, "SessionNotFound")
    }).pipe(Effect.scoped), TIMEOUT)
})

// -------------------------------------------------------------------------------------------------
// DOC-05

/** A store under test: its CLI flags, a persistence of this process, and raw access to its records. */
interface TruncationStore {
  readonly flags: ReadonlyArray<string>
  readonly persistence: SessionPersistence.SessionPersistence["Type"]
  /** Where the CLI puts a backup by default. */
  readonly backupDirectory: string
  /** Rewrites the stored record of `seq` (its text as stored). */
  readonly rewrite: (id: SessionId, seq: number, change: (text: string) => string) => Effect.Effect<void, unknown>
  /** The stored records of `id` from `seq` on, as text, one per line (what a backup holds). */
  readonly recordsFrom: (id: SessionId, seq: number) => Effect.Effect<string, unknown>
  /** Everything stored, as text: equal before and after means nothing changed. */
  readonly snapshot: Effect.Effect<string, unknown>
}

const fileTruncationStore: Effect.Effect<TruncationStore, unknown, Scope.Scope> = Effect.gen(function*() {
  const directory = yield* tempDirectory("effect-agent-doc05-")
  const persistence = yield* fileStoreIn(directory)
  const file = (id: SessionId) => path.join(directory, `${id}.jsonl`)
  return {
    flags: ["--dir", directory],
    persistence,
    backupDirectory: directory,
    rewrite: (id, seq, change) =>
      Effect.sync(() => {
        const lines = fs.readFileSync(file(id), "utf8").split("\n")
        lines[seq + 1] = change(lines[seq + 1]!)
        fs.writeFileSync(file(id), lines.join("\n"))
      }),
    recordsFrom: (id, seq) =>
      Effect.sync(() => `${fs.readFileSync(file(id), "utf8").split("\n").slice(seq + 1).join("\n")}`),
    snapshot: Effect.sync(() =>
      fs.readdirSync(directory).filter((name) => name.endsWith(".jsonl")).sort()
        .map((name) => `${name}\n${fs.readFileSync(path.join(directory, name), "utf8")}`).join("\n")
    )
  } satisfies TruncationStore
})

const sqlTruncationStore = (make: (typeof sqlStores)[number]["make"]) =>
  Effect.gen(function*() {
    const store = yield* make
    const context = yield* Layer.build(SqlSessionPersistence.layer().pipe(Layer.provideMerge(store.client)))
    const sql = Context.get(context, SqlClient)
    const isPostgres = store.location.startsWith("postgres")
    const backupDirectory = isPostgres ? yield* tempDirectory("effect-agent-doc05-pg-") : path.dirname(store.location)
    return {
      flags: [isPostgres ? "--postgres" : "--sqlite", store.location, ...(isPostgres ? ["--backup-dir", backupDirectory] : [])],
      persistence: Context.get(context, SessionPersistence.SessionPersistence),
      backupDirectory,
      rewrite: (id, seq, change) =>
        Effect.flatMap(
          sql<{ readonly record: string }>`SELECT record FROM effect_agent_events WHERE session_id = ${id} AND seq = ${seq}`,
          (rows) =>
            sql`UPDATE effect_agent_events SET record = ${change(rows[0]!.record)} WHERE session_id = ${id} AND seq = ${seq}`
        ),
      recordsFrom: (id, seq) =>
        Effect.map(
          sql<{ readonly record: string }>`SELECT record FROM effect_agent_events WHERE session_id = ${id} AND seq >= ${seq}
            ORDER BY seq`,
          (rows) => rows.map((row) => `${row.record}\n`).join("")
        ),
      snapshot: Effect.map(
        Effect.all([
          sql`SELECT session_id, header FROM effect_agent_sessions ORDER BY session_id`,
          sql`SELECT session_id, seq, record FROM effect_agent_events ORDER BY session_id, seq`
        ]),
        (tables) => JSON.stringify(tables)
      )
    } satisfies TruncationStore
  })

const truncationStores: ReadonlyArray<readonly [string, Effect.Effect<TruncationStore, unknown, Scope.Scope>]> = [
  ["files", fileTruncationStore],
  ...sqlStores.map((kind) => [kind.name, sqlTruncationStore(kind.make)] as const)
]

const notJson = () => "this is not JSON"

/** A record a newer version could write: a core event type this version does not know. */
const newerType = (text: string) => JSON.stringify({ ...JSON.parse(text), type: "turn/paused" })

interface TruncationDoc {
  readonly truncated: {
    readonly line: number
    readonly seq: number
    readonly keptEvents: number
    readonly dropped: ReadonlyArray<{ readonly line: number; readonly bytes: number }>
    readonly droppedBytes: number
    readonly backup: string
  } | null
  readonly written: ReadonlyArray<{ readonly type: string }>
}

for (const [name, open] of truncationStores) {
  describe(`effect-agent sessions repair --truncate-at-corruption on ${name} (DOC-05)`, () => {
    it.live(`DOC-05 ${name}: drops the corrupt record and everything after it, after printing what it drops and keeping a backup; the rest is repaired`, () =>
      Effect.gen(function*() {
        const opened = yield* open
        const [broken, twin] = [sid("broken"), sid("twin")]
        yield* store(opened.persistence, broken, closedTurn())
        yield* store(opened.persistence, twin, closedTurn())
        yield* opened.rewrite(broken, 2, notJson)
        yield* opened.rewrite(twin, 3, notJson)
        const droppedRecords = yield* opened.recordsFrom(broken, 2)
        const before = yield* opened.snapshot

        // without the flag: refused (5), nothing changed, and the message names the way out
        const refused = yield* cli(["sessions", "repair", broken, ...opened.flags])
        expectCode(refused, 5, "repair of a corrupt session")
        assert.include(refused.stderr, "--truncate-at-corruption")
        assert.strictEqual(yield* opened.snapshot, before)

        const [human, json] = yield* Effect.all([
          cli(["sessions", "repair", broken, ...opened.flags, "--truncate-at-corruption"]),
          cli(["sessions", "repair", twin, ...opened.flags, "--truncate-at-corruption", "--json"])
        ], { concurrency: "unbounded" })
        expectCode(human, 0, "repair --truncate-at-corruption")
        // what is dropped is printed (stderr, before the drop), then the result (stdout)
        assert.include(human.stderr, "line 4 (seq 2) is corrupt")
        assert.include(human.stderr, `4 record(s), ${Buffer.byteLength(droppedRecords)} bytes`)
        const backup = /backed up in (\S+)/.exec(human.stderr)?.[1]
        assert.isDefined(backup, human.stderr)
        assert.strictEqual(path.dirname(backup!), opened.backupDirectory)
        assert.strictEqual(fs.readFileSync(backup!, "utf8"), droppedRecords, "the backup holds the dropped records as stored")
        assert.include(human.stdout, "truncated session broken at line 4 (seq 2): dropped 4 record(s)")
        assert.include(human.stdout, `backup: ${backup}`)

        const repaired = yield* opened.persistence.read(broken)
        assert.deepStrictEqual(repaired.events.slice(0, 2), closedTurn().slice(0, 2), "the events before the cut are kept")
        assert.deepStrictEqual(repaired.events.slice(2).map((event) => event.type), ["step/end", "turn/end"])

        expectCode(json, 0, "repair --truncate-at-corruption --json")
        const doc = JSON.parse(json.stdout) as TruncationDoc
        assert.strictEqual(doc.truncated?.line, 5)
        assert.strictEqual(doc.truncated?.seq, 3)
        assert.strictEqual(doc.truncated?.keptEvents, 3)
        assert.deepStrictEqual(doc.truncated?.dropped.map((record) => record.line), [5, 6, 7])
        assert.isTrue(fs.existsSync(doc.truncated!.backup))
        assert.deepStrictEqual(doc.written.map((event) => event.type), ["step/end", "turn/end"])
        assert.strictEqual((yield* opened.persistence.read(twin)).events.length, 5)

        // a sound session: nothing dropped, no backup
        const again = yield* cli(["sessions", "repair", broken, ...opened.flags, "--truncate-at-corruption"])
        expectCode(again, 0, "a second run")
        assert.include(again.stdout, "has no corrupt record: nothing dropped")
        assert.include(again.stdout, "needs no repair")
      }).pipe(Effect.scoped), TIMEOUT)

    it.live(`DOC-05 ${name}: never drops a record that is merely of a newer format (SessionFormatUnsupported, exit 5, nothing changed)`, () =>
      Effect.gen(function*() {
        const opened = yield* open
        const [newerAfter, newerFirst] = [sid("newer-after"), sid("newer-first")]
        yield* store(opened.persistence, newerAfter, closedTurn())
        yield* store(opened.persistence, newerFirst, closedTurn())
        // a corrupt record with a newer one after it; and a newer record alone
        yield* opened.rewrite(newerAfter, 2, notJson)
        yield* opened.rewrite(newerAfter, 4, newerType)
        yield* opened.rewrite(newerFirst, 3, newerType)
        const before = yield* opened.snapshot
        const backups = () => fs.readdirSync(opened.backupDirectory).filter((name) => name.includes(".dropped-"))
        assert.deepStrictEqual(backups(), [])

        const runs = yield* Effect.all([
          cli(["sessions", "repair", newerAfter, ...opened.flags, "--truncate-at-corruption", "--json"]),
          cli(["sessions", "repair", newerFirst, ...opened.flags, "--truncate-at-corruption", "--json"])
        ], { concurrency: "unbounded" })
        for (const [run, line] of [[runs[0], 6], [runs[1], 5]] as const) {
          expectCode(run, 5, "a newer record")
          const error = JSON.parse(run.stdout).error
          assert.strictEqual(error._tag, "SessionFormatUnsupported")
          assert.include(error.message, `line ${line}`)
          assert.include(error.message, "turn/paused")
        }
        assert.strictEqual(yield* opened.snapshot, before, "nothing stored changed")
        assert.deepStrictEqual(backups(), [], "no backup was written")
      }).pipe(Effect.scoped), TIMEOUT)
  })
}
