/**
 * The tables of the SQL persistence and their versioned migration (PERS-05). Every statement here
 * runs on SQLite and Postgres alike; the few differences are chosen with `onDialect`.
 *
 * Tables (all prefixed `effect_agent_`):
 * - `migrations (version, name, applied_at)`: which schema versions were applied;
 * - `sessions (session_id, header, updated_at)`: one row per session, the header as JSON text;
 * - `events (session_id, seq, event_time, event_type, record)`: one row per event, unique
 *   `(session_id, seq)`; `record` is the whole event as JSON text (the other columns are for
 *   queries: reads validate `record` alone);
 * - `leases (session_id, token, holder, expires_at, holder_host, holder_pid, holder_start)`: the
 *   single writer of a session (PERS-01); since version 2 it names its process (host, pid, start
 *   time), so a lease of a dead process of the same host is taken over at once (PKG-04). Rows
 *   written by version 1 have NULL there and wait for their expiry.
 *
 * JSON is stored as text, never `jsonb`: `jsonb` reorders keys, and the log must read back exactly.
 *
 * @internal
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect } from "effect"
import * as SessionError from "../SessionError.js"

/** The dialects the statements are written for. @internal */
export type Dialect = "sqlite" | "pg"

/** @internal */
export const dialectOf = (sql: SqlClient): Dialect | undefined =>
  sql.onDialectOrElse({
    sqlite: () => "sqlite" as const,
    pg: () => "pg" as const,
    orElse: () => undefined
  })

interface Migration {
  readonly version: number
  readonly name: string
  readonly statements: ReadonlyArray<string>
}

/** Append-only: a released migration is never edited, a change is a new version. */
const migrations: ReadonlyArray<Migration> = [
  {
    version: 1,
    name: "sessions, events, leases",
    statements: [
      `CREATE TABLE effect_agent_sessions (
        session_id TEXT PRIMARY KEY,
        header TEXT NOT NULL,
        updated_at BIGINT NOT NULL
      )`,
      `CREATE TABLE effect_agent_events (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event_time BIGINT NOT NULL,
        event_type TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
      )`,
      `CREATE TABLE effect_agent_leases (
        session_id TEXT PRIMARY KEY,
        token TEXT NOT NULL,
        holder TEXT NOT NULL,
        expires_at BIGINT NOT NULL
      )`
    ]
  },
  {
    // PKG-04: who holds a lease, so a dead holder on this host is recognised (DUR-06's identity)
    version: 2,
    name: "lease holder process",
    statements: [
      `ALTER TABLE effect_agent_leases ADD COLUMN holder_host TEXT`,
      `ALTER TABLE effect_agent_leases ADD COLUMN holder_pid INTEGER`,
      `ALTER TABLE effect_agent_leases ADD COLUMN holder_start TEXT`
    ]
  }
]

/** The schema version this library writes. @internal */
export const schemaVersion: number = migrations[migrations.length - 1]!.version

// Any constant: it only has to be the same in every process that migrates this database.
const MIGRATION_LOCK_KEY = 4_851_031_772

/**
 * Brings the schema to {@link schemaVersion} in one transaction. On Postgres an advisory
 * transaction lock serializes processes that start at the same time; SQLite serializes writers
 * itself. A database migrated by a newer version of this library is refused, not guessed at.
 *
 * @internal
 */
export const migrate = (
  sql: SqlClient,
  dialect: Dialect
): Effect.Effect<ReadonlyArray<number>, SessionError.PersistenceError | SqlError> =>
  sql.withTransaction(Effect.gen(function*() {
    if (dialect === "pg") yield* sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`
    yield* sql.unsafe(
      `CREATE TABLE IF NOT EXISTS effect_agent_migrations (
        version INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        applied_at BIGINT NOT NULL
      )`
    )
    const rows = yield* sql<{ readonly version: number | string }>`SELECT version FROM effect_agent_migrations`
    const applied = new Set(rows.map((row) => Number(row.version)))
    const newest = Math.max(0, ...applied)
    if (newest > schemaVersion) {
      return yield* new SessionError.PersistenceError({
        reason: `the effect-agent tables are at schema version ${newest}, newer than the version ${schemaVersion} ` +
          "this library knows; upgrade effect-agent to use this database"
      })
    }
    const now = yield* Clock.currentTimeMillis
    const ran: Array<number> = []
    for (const migration of migrations) {
      if (applied.has(migration.version)) continue
      for (const statement of migration.statements) yield* sql.unsafe(statement)
      yield* sql`INSERT INTO effect_agent_migrations (version, name, applied_at)
        VALUES (${migration.version}, ${migration.name}, ${now})`
      ran.push(migration.version)
    }
    return ran
  }))

/**
 * For read-only use (the operator CLI's read commands): checks that the tables exist and that this
 * library can read them, without creating or migrating anything. The read paths use only the
 * columns of version 1, so an unmigrated version 1 database is read as it is.
 *
 * @internal
 */
export const checkReadable = (sql: SqlClient): Effect.Effect<number, SessionError.PersistenceError> =>
  sql<{ readonly version: number | string }>`SELECT version FROM effect_agent_migrations`.pipe(
    Effect.mapError((error) =>
      new SessionError.PersistenceError({
        reason: `this database holds no effect-agent tables (${error.message}); check the database you named`,
        cause: error
      })
    ),
    Effect.flatMap((rows) => {
      const newest = Math.max(0, ...rows.map((row) => Number(row.version)))
      return newest > schemaVersion
        ? Effect.fail(
          new SessionError.PersistenceError({
            reason: `the effect-agent tables are at schema version ${newest}, newer than the version ` +
              `${schemaVersion} this library knows; upgrade effect-agent to use this database`
          })
        )
        : Effect.succeed(newest)
    })
  )
