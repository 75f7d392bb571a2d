/**
 * CORE-09, PERS-05: the SQL schema is migrated by `@effect/sql`'s `Migrator` over v1's
 * `effect_agent_migrations` table: a database of v1 or v2 migrates on, a database migrated by a newer
 * version is refused before anything changes, older libraries still read the versions, and two
 * processes that migrate a fresh database at the same moment both succeed, the migrations applied
 * once. On a SQLite file and on Postgres (when `EFFECT_AGENT_PG_URL` is set), with real child processes.
 */
import { Command } from "@effect/platform"
import type { CommandExecutor } from "@effect/platform/CommandExecutor"
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Fiber, Layer, Stream } from "effect"
import type { Scope } from "effect"
import { fileURLToPath } from "node:url"
import { migrate, schemaVersion } from "../src/internal/storage/sql/schema.js"
import * as SessionError from "../src/SessionError.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { header, sid } from "./fixtures/persistenceConformance.js"
import { sqlStores } from "./fixtures/sqlStores.js"
import type { SqlStore, SqlStoreKind } from "./fixtures/sqlStores.js"

const fixture = fileURLToPath(new URL("./fixtures/migrateSql.ts", import.meta.url))
const repository = fileURLToPath(new URL("..", import.meta.url))

const onDatabase = <A>(store: SqlStore, body: (sql: SqlClient) => Effect.Effect<A, unknown>) =>
  Effect.flatMap(SqlClient, (sql) => body(sql.withoutTransforms())).pipe(Effect.provide(store.client))

const inStore = <A, E>(
  kind: SqlStoreKind,
  body: (store: SqlStore) => Effect.Effect<A, E, Scope.Scope | CommandExecutor>
) => Effect.flatMap(kind.make, body).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

const dialectOf = (kind: SqlStoreKind): "pg" | "sqlite" => kind.name === "postgres" ? "pg" : "sqlite"

const versions = (store: SqlStore) =>
  onDatabase(store, (sql) =>
    Effect.map(
      sql<{ readonly version: number | string }>`SELECT version FROM effect_agent_migrations ORDER BY version`,
      (rows) => rows.map((row) => Number(row.version))
    ))

/** Whether the table `name` exists (in the search path's schema on Postgres). */
const hasTable = (kind: SqlStoreKind, store: SqlStore, name: string) =>
  onDatabase(store, (sql) =>
    kind.name === "postgres"
      ? Effect.map(sql<{ readonly found: string | null }>`SELECT to_regclass(${name})::text AS found`, (rows) =>
        rows[0]?.found != null)
      : Effect.map(sql<{ readonly name: string }>`SELECT name FROM sqlite_master WHERE name = ${name}`, (rows) =>
        rows.length > 0))

/** The tables exactly as version 2 of this library left them, with one stored session. */
const versionTwoDatabase = (store: SqlStore, id: string) =>
  onDatabase(store, (sql) =>
    Effect.gen(function*() {
      yield* sql.unsafe(`CREATE TABLE effect_agent_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
        applied_at BIGINT NOT NULL)`)
      yield* sql.unsafe(`CREATE TABLE effect_agent_sessions (session_id TEXT PRIMARY KEY, header TEXT NOT NULL,
        updated_at BIGINT NOT NULL)`)
      yield* sql.unsafe(`CREATE TABLE effect_agent_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
        event_time BIGINT NOT NULL, event_type TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (session_id, seq))`)
      yield* sql.unsafe(`CREATE TABLE effect_agent_leases (session_id TEXT PRIMARY KEY, token TEXT NOT NULL,
        holder TEXT NOT NULL, expires_at BIGINT NOT NULL, holder_host TEXT, holder_pid INTEGER, holder_start TEXT)`)
      yield* sql`INSERT INTO effect_agent_migrations VALUES (1, 'sessions, events, leases', 0)`
      yield* sql`INSERT INTO effect_agent_migrations VALUES (2, 'lease holder process', 0)`
      yield* sql`INSERT INTO effect_agent_sessions VALUES (${id}, ${JSON.stringify(header(sid(id)))}, 0)`
    }))

/**
 * Starts a migrating process whose stdin says "go" once `go` completes; `ready` completes when it
 * printed `ready`. Answers its stdout lines once it exited, and its exit code.
 */
const migrator = (kind: SqlStoreKind, store: SqlStore, go: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const ready = yield* Deferred.make<void>()
    const release = Stream.fromEffect(Deferred.await(go)).pipe(Stream.map(() => new TextEncoder().encode("go\n")))
    const child = yield* Command.make(process.execPath, "--import", "tsx", fixture, kind.name, store.location).pipe(
      Command.workingDirectory(repository),
      Command.stdin(release),
      Command.start
    )
    const lines = yield* child.stdout.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.tap((line) => line === "ready" ? Deferred.succeed(ready, undefined) : Effect.void),
      Stream.runCollect,
      Effect.map(Chunk.toReadonlyArray),
      Effect.fork
    )
    const stderr = yield* child.stderr.pipe(Stream.decodeText(), Stream.mkString, Effect.fork)
    return {
      ready: Deferred.await(ready),
      done: Effect.all({ lines: Fiber.join(lines), code: child.exitCode, stderr: Fiber.join(stderr) })
    }
  })

for (const kind of sqlStores) {
  describe(`SQL migrations with the Migrator on ${kind.name} (CORE-09)`, () => {
    it.effect("CORE-09 PERS-05 a fresh database is migrated once; older libraries read the versions where they did", () =>
      inStore(kind, (store) =>
        Effect.gen(function*() {
          const first = yield* onDatabase(store, (sql) => migrate(sql, dialectOf(kind)))
          assert.deepStrictEqual(first, [1, 2])
          assert.strictEqual(schemaVersion, 2)
          const again = yield* onDatabase(store, (sql) => migrate(sql, dialectOf(kind)))
          assert.deepStrictEqual(again, [])
          assert.deepStrictEqual(yield* versions(store), [1, 2])
          // v1's columns, filled as v1 filled them (applied_at in epoch ms)
          const rows = yield* onDatabase(store, (sql) =>
            sql<{ readonly name: string; readonly applied_at: number | string }>`SELECT name, applied_at
              FROM effect_agent_migrations ORDER BY version`)
          assert.deepStrictEqual(rows.map((row) => row.name), ["sessions, events, leases", "lease holder process"])
          for (const row of rows) assert.isAbove(Number(row.applied_at), Date.UTC(2024, 0, 1))
          // the Migrator's own record of them
          const recorded = yield* onDatabase(store, (sql) =>
            sql<{ readonly migration_id: number | string }>`SELECT migration_id FROM effect_agent_migrator
              ORDER BY migration_id`)
          assert.deepStrictEqual(recorded.map((row) => Number(row.migration_id)), [1, 2])
        })))

    it.effect("CORE-09 PERS-05 a version 2 database migrates on: nothing is applied again and its sessions read", () =>
      inStore(kind, (store) =>
        Effect.gen(function*() {
          yield* versionTwoDatabase(store, "kept")
          assert.deepStrictEqual(yield* onDatabase(store, (sql) => migrate(sql, dialectOf(kind))), [])
          assert.deepStrictEqual(yield* versions(store), [1, 2])
          const persistence = yield* Layer.build(SqlSessionPersistence.layer().pipe(Layer.provide(store.client))).pipe(
            Effect.map(Context.get(SessionPersistence.SessionPersistence))
          )
          assert.strictEqual((yield* persistence.read(sid("kept"))).header.id, "kept")
        })))

    it.effect("CORE-09 PERS-05 a database migrated by a newer version is refused with PersistenceError; nothing is created", () =>
      inStore(kind, (store) =>
        Effect.gen(function*() {
          yield* onDatabase(store, (sql) =>
            Effect.zipRight(
              sql.unsafe(`CREATE TABLE effect_agent_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                applied_at BIGINT NOT NULL)`),
              sql`INSERT INTO effect_agent_migrations VALUES (3, 'from the future', 0)`
            ))
          const refused = yield* Effect.flip(
            Layer.build(SqlSessionPersistence.layer().pipe(Layer.provide(store.client)))
          ).pipe(Effect.flatMap((error) => error instanceof SessionError.PersistenceError ? Effect.succeed(error) : Effect.die(error)))
          assert.include(refused.reason, "schema version 3, newer than the version 2")
          assert.deepStrictEqual(yield* versions(store), [3])
          assert.isFalse(yield* hasTable(kind, store, "effect_agent_sessions"))
          assert.isFalse(yield* hasTable(kind, store, "effect_agent_migrator"))
        })))

    it.live("CORE-09 PERS-05 two processes migrating a fresh database at the same moment both succeed; each migration runs once", () =>
      inStore(kind, (store) =>
        Effect.gen(function*() {
          // rounds on fresh databases: the moment the two meet differs from round to round
          for (let round = 0; round < 2; round++) {
            const fresh = round === 0 ? store : yield* kind.make
            const go = yield* Deferred.make<void>()
            const children = yield* Effect.all([migrator(kind, fresh, go), migrator(kind, fresh, go)])
            yield* Effect.forEach(children, (child) => child.ready, { discard: true })
            yield* Deferred.succeed(go, undefined)
            const results = yield* Effect.forEach(children, (child) => child.done, { concurrency: "unbounded" })
            const applied: Array<number> = []
            for (const result of results) {
              assert.strictEqual(result.code, 0, `${result.lines.join("\n")}\n${result.stderr}`)
              const line = result.lines.find((l) => l.startsWith("migrated "))
              assert.isDefined(line, result.lines.join("\n"))
              applied.push(...(JSON.parse(line!.slice("migrated ".length)) as Array<number>))
            }
            assert.deepStrictEqual(applied.sort(), [1, 2], "each migration ran in exactly one of the processes")
            assert.deepStrictEqual(yield* versions(fresh), [1, 2])
          }
        })))
  })
}
