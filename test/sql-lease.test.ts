/**
 * PKG-04: the lease of a SQL-persisted session names its process (host, pid, start time), so a
 * writer of this host that died is replaced at once instead of after the ttl; a holder of another
 * host is never guessed dead, and `SqlSessionPersistence.breakLock` is the operator's tool. Run on
 * a SQLite file and on Postgres (when `EFFECT_AGENT_PG_URL` is set), with a real child process
 * that takes a lease and is SIGKILLed.
 */
import { Command } from "@effect/platform"
import type { CommandExecutor } from "@effect/platform/CommandExecutor"
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Stream, TestClock } from "effect"
import type { Scope } from "effect"
import * as os from "node:os"
import { fileURLToPath } from "node:url"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import type { SessionId } from "../src/Message.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { header, notes, sid } from "./fixtures/persistenceConformance.js"
import { withLogs } from "./fixtures/logs.js"
import { sqlStores } from "./fixtures/sqlStores.js"
import type { SqlStore } from "./fixtures/sqlStores.js"

const fixture = fileURLToPath(new URL("./fixtures/holdSqlLease.ts", import.meta.url))
const repository = fileURLToPath(new URL("..", import.meta.url))

/** The persistence of this process over `store`, alive until the Scope closes. */
const persistenceOf = (store: SqlStore, options?: SqlSessionPersistence.Options) =>
  Layer.build(SqlSessionPersistence.layer({ instanceId: "test-process", ...options }).pipe(
    Layer.provide(store.client)
  )).pipe(Effect.map(Context.get(SessionPersistence.SessionPersistence)))

/** A stored session of `count` events, its writer released. */
const storedSession = (persistence: SessionPersistence.SessionPersistence["Type"], id: SessionId, count: number) =>
  Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(notes(0, count))))

/** Runs `statement` through a client of `store`. */
const onDatabase = <A>(store: SqlStore, body: (sql: SqlClient) => Effect.Effect<A, unknown>) =>
  Effect.flatMap(SqlClient, body).pipe(Effect.provide(store.client))

/** Starts a process that holds the lease of `id`; resolves with its pid once it does. */
const holder = (kind: string, store: SqlStore, id: SessionId) =>
  Effect.gen(function*() {
    const child = yield* Command.make(process.execPath, "--import", "tsx", fixture, kind, store.location, id).pipe(
      Command.workingDirectory(repository),
      Command.start
    )
    const ready = yield* child.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runHead)
    if (Option.isNone(ready) || !ready.value.startsWith("locked ")) {
      const stderr = yield* child.stderr.pipe(Stream.decodeText(), Stream.mkString)
      return yield* Effect.dieMessage(`the lease holder did not start: ${stderr}`)
    }
    return { child, pid: Number(ready.value.slice("locked ".length)) }
  })

const leaseRow = (store: SqlStore, id: SessionId) =>
  onDatabase(store, (sql) =>
    sql<{ readonly holder: string; readonly holder_pid: number | string | null }>`SELECT holder, holder_pid
      FROM effect_agent_leases WHERE session_id = ${id}`)

const inStore = <A, E>(
  make: Effect.Effect<SqlStore, unknown, Scope.Scope>,
  body: (store: SqlStore) => Effect.Effect<A, E, Scope.Scope | CommandExecutor>
) =>
  Effect.flatMap(make, body).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

for (const kind of sqlStores) {
  describe(`SqlSessionPersistence leases of processes on ${kind.name} (PKG-04)`, () => {
    it.effect("PKG-04 the lease of a SIGKILLed process of this host is taken over at once, not after the ttl", () =>
      inStore(kind.make, (store) =>
        Effect.gen(function*() {
          const id = sid("killed-holder")
          const persistence = yield* persistenceOf(store)
          yield* storedSession(persistence, id, 2)
          const { child, pid } = yield* holder(kind.name, store, id)

          const locked = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(locked._tag, "SessionLocked")
          if (locked._tag === "SessionLocked") {
            assert.include(locked.holder, `process ${pid}`)
            assert.include(locked.holder, "lease valid until")
            // the remedy a SQL lease has: its expiry, then SqlSessionPersistence.breakLock (not the file tool)
            assert.include(locked.message, "SqlSessionPersistence.breakLock")
            assert.include(locked.message, "effect-agent sessions break-lock")
            assert.notInclude(locked.message, "FileSessionPersistence")
          }
          assert.strictEqual(Number((yield* leaseRow(store, id))[0]?.holder_pid), pid)

          yield* child.kill("SIGKILL")
          yield* Effect.ignore(child.exitCode)
          // The TestClock stands still: the child's lease is valid for its whole ttl from our view.
          const [{ stored }, logs] = yield* withLogs(Effect.scoped(persistence.openWrite(id)))
          assert.deepStrictEqual(stored.events, notes(0, 2))
          assert.isTrue(
            logs.some((l) => l.startsWith("WARN") && l.includes("took over") && l.includes(`process ${pid}`)),
            logs.join("\n")
          )
        })))

    it.effect("PKG-04 a lease of another host is never guessed dead; breakLock removes it, warning with its holder", () =>
      inStore(kind.make, (store) =>
        Effect.gen(function*() {
          const id = sid("remote-holder")
          // even a probe that says every process is gone does not judge another host's process
          const persistence = yield* persistenceOf(store, { isProcessAlive: () => false })
          yield* storedSession(persistence, id, 1)
          yield* onDatabase(store, (sql) =>
            sql`INSERT INTO effect_agent_leases (session_id, token, holder, expires_at, holder_host, holder_pid,
              holder_start) VALUES (${id}, ${"remote-token"}, ${"instance \"remote\" on another-host.example"},
              ${1_000_000}, ${"another-host.example"}, ${4242}, ${"boot:1"})`)

          assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(id))))._tag, "SessionLocked")
          assert.strictEqual((yield* Effect.flip(persistence.remove(id)))._tag, "SessionLocked")
          assert.strictEqual((yield* leaseRow(store, id)).length, 1)

          const [, logs] = yield* withLogs(SqlSessionPersistence.breakLock(id).pipe(Effect.provide(store.client)))
          assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes("another-host.example")), logs.join("\n"))
          assert.strictEqual((yield* leaseRow(store, id)).length, 0)
          const { stored } = yield* Effect.scoped(persistence.openWrite(id))
          assert.deepStrictEqual(stored.events, notes(0, 1))
          // nothing held: breaking again changes nothing and says nothing
          const [, quiet] = yield* withLogs(SqlSessionPersistence.breakLock(id).pipe(Effect.provide(store.client)))
          assert.deepStrictEqual(quiet, [])
        })))

    it.effect("PKG-04 DUR-06 a live pid of this host holds its lease; the same pid with another start time does not", () =>
      inStore(kind.make, (store) =>
        Effect.gen(function*() {
          const persistence = yield* persistenceOf(store)
          const startTime = FileSessionPersistence.processStartTime(process.pid)
          const insert = (id: SessionId, start: string | null) =>
            onDatabase(store, (sql) =>
              sql`INSERT INTO effect_agent_leases (session_id, token, holder, expires_at, holder_host, holder_pid,
                holder_start) VALUES (${id}, ${`token-${id}`}, ${"a process of this host"}, ${1_000_000},
                ${os.hostname()}, ${process.pid}, ${start})`)
          const live = sid("live-pid")
          const reused = sid("reused-pid")
          yield* storedSession(persistence, live, 1)
          yield* storedSession(persistence, reused, 1)
          yield* insert(live, startTime ?? null)
          yield* insert(reused, "another-boot:1")

          assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(live))))._tag, "SessionLocked")
          if (startTime !== undefined) {
            const { stored } = yield* Effect.scoped(persistence.openWrite(reused))
            assert.deepStrictEqual(stored.events, notes(0, 1))
          }
        })))

    it.effect("PKG-04 PERS-05 a version 1 database migrates to version 2; its lease rows without a process wait for their ttl", () =>
      inStore(kind.make, (store) =>
        Effect.gen(function*() {
          const id = sid("from-v1")
          // the tables exactly as version 1 created them, with one session and one lease
          yield* onDatabase(store, (sql) =>
            Effect.gen(function*() {
              yield* sql.unsafe(`CREATE TABLE effect_agent_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                applied_at BIGINT NOT NULL)`)
              yield* sql.unsafe(`CREATE TABLE effect_agent_sessions (session_id TEXT PRIMARY KEY, header TEXT NOT NULL,
                updated_at BIGINT NOT NULL)`)
              yield* sql.unsafe(`CREATE TABLE effect_agent_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
                event_time BIGINT NOT NULL, event_type TEXT NOT NULL, record TEXT NOT NULL,
                PRIMARY KEY (session_id, seq))`)
              yield* sql.unsafe(`CREATE TABLE effect_agent_leases (session_id TEXT PRIMARY KEY, token TEXT NOT NULL,
                holder TEXT NOT NULL, expires_at BIGINT NOT NULL)`)
              yield* sql`INSERT INTO effect_agent_migrations VALUES (1, 'sessions, events, leases', 0)`
              yield* sql`INSERT INTO effect_agent_sessions VALUES (${id}, ${JSON.stringify(header(id))}, 0)`
              yield* sql`INSERT INTO effect_agent_leases VALUES (${id}, 'v1-token', 'a version 1 writer', 30000)`
            }))
          const persistence = yield* persistenceOf(store, { isProcessAlive: () => false })
          const versions = yield* onDatabase(store, (sql) =>
            sql<{ readonly version: number | string }>`SELECT version FROM effect_agent_migrations ORDER BY version`)
          assert.deepStrictEqual(versions.map((row) => Number(row.version)), [1, 2])
          assert.deepStrictEqual((yield* persistence.read(id)).events, [])

          assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(id))))._tag, "SessionLocked")
          yield* TestClock.adjust(30_000)
          const [{ stored }, logs] = yield* withLogs(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(stored.header.id, id)
          assert.isTrue(logs.some((l) => l.includes("took over the expired lease")), logs.join("\n"))
        })))
  })
}
