/**
 * The tables of the SQL persistence and their versioned migration (PERS-05). Every statement here
 * runs on SQLite and Postgres alike; the few differences are chosen with `onDialect`.
 *
 * Tables (all prefixed `effect_agent_`):
 * - `migrations (version, name, applied_at)`: which schema versions were applied (v1's table; the
 *   `Migrator` reads and writes it through the view `effect_agent_migrator`, CORE-09);
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
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Data, Effect, Option, Schedule, Schema } from "effect"
import * as SessionError from "../../../SessionError.js"
import { malformedRow, SqlNumber } from "./log.js"

/** The dialects the statements are written for. @internal */
export type Dialect = "sqlite" | "pg"

/** @internal */
export const dialectOf = (sql: SqlClient.SqlClient): Dialect | undefined =>
  sql.onDialectOrElse({
    sqlite: () => "sqlite" as const,
    pg: () => "pg" as const,
    orElse: () => undefined
  })

const statements = (list: ReadonlyArray<string>): Effect.Effect<void, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.forEach(list, (statement) => sql.withoutTransforms().unsafe(statement), { discard: true }))

/**
 * Append-only: a released migration is never edited, a change is a new version. Keyed
 * `<version>_<name>` for `Migrator.fromRecord`; the names are the ones v1 recorded.
 */
const migrations: Record<string, Effect.Effect<void, SqlError, SqlClient.SqlClient>> = {
  "1_sessions, events, leases": statements([
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
  ]),
  // PKG-04: who holds a lease, so a dead holder on this host is recognised (DUR-06's identity)
  "2_lease holder process": statements([
    `ALTER TABLE effect_agent_leases ADD COLUMN holder_host TEXT`,
    `ALTER TABLE effect_agent_leases ADD COLUMN holder_pid INTEGER`,
    `ALTER TABLE effect_agent_leases ADD COLUMN holder_start TEXT`
  ])
}

/** The schema version this library writes. @internal */
export const schemaVersion: number = Math.max(...Object.keys(migrations).map((key) => Number.parseInt(key, 10)))

// Any constant: it only has to be the same in every process that migrates this database (v1 used it too).
const MIGRATION_LOCK_KEY = 4_851_031_772

/**
 * The Migrator's table is a view of v1's `effect_agent_migrations (version, name, applied_at)`:
 * the Migrator reads and records versions there (`migration_id`, `name`, `created_at` are
 * `version`, `name`, `applied_at`), so a database migrated by v1 migrates on, and an older
 * library still reads the versions where it always did (and refuses a newer database itself).
 */
const MIGRATOR_TABLE = "effect_agent_migrator"

/** v1's table, created where it is missing (by v1's definition, so an older library can use it). */
const createMigrationsTable = `CREATE TABLE IF NOT EXISTS effect_agent_migrations (
  version INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  applied_at BIGINT NOT NULL
)`

const viewOfMigrations = `SELECT version AS migration_id, name, applied_at AS created_at FROM effect_agent_migrations`

/**
 * Creates the Migrator's view if missing. Postgres inserts into the view by itself (a simple view
 * is updatable; the view's default fills `applied_at`); SQLite needs an `INSTEAD OF` trigger.
 */
const ensureMigratorView = (sql: SqlClient.SqlClient, dialect: Dialect): Effect.Effect<void, SqlError> =>
  dialect === "sqlite"
    ? Effect.zipRight(
      sql.unsafe(`CREATE VIEW IF NOT EXISTS ${MIGRATOR_TABLE} AS ${viewOfMigrations}`),
      sql.unsafe(`CREATE TRIGGER IF NOT EXISTS ${MIGRATOR_TABLE}_insert INSTEAD OF INSERT ON ${MIGRATOR_TABLE}
        BEGIN
          INSERT INTO effect_agent_migrations (version, name, applied_at) VALUES
            (NEW.migration_id, NEW.name, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
        END`)
    )
    : Effect.flatMap(
      sql<{ readonly view: string | null }>`SELECT to_regclass(${MIGRATOR_TABLE})::text AS view`,
      (rows) =>
        rows[0]?.view != null ? Effect.void : Effect.zipRight(
          sql.unsafe(`CREATE VIEW ${MIGRATOR_TABLE} AS ${viewOfMigrations}`),
          sql.unsafe(`ALTER VIEW ${MIGRATOR_TABLE} ALTER COLUMN created_at
            SET DEFAULT (extract(epoch from clock_timestamp()) * 1000)::bigint`)
        )
    )

const runMigrator = Migrator.make({})({ loader: Migrator.fromRecord(migrations), table: MIGRATOR_TABLE })

/** The newest version recorded (0 when none), decoded by `SqlSchema` (a row of another shape is a `SqlError`). */
const newestVersion = (sql: SqlClient.SqlClient): Effect.Effect<number, SqlError> =>
  SqlSchema.single({
    Request: Schema.Void,
    Result: Schema.Struct({ newest: Schema.NullOr(SqlNumber) }),
    execute: () => sql`SELECT MAX(version) AS newest FROM effect_agent_migrations`
  })(undefined).pipe(
    Effect.map((row) => row.newest ?? 0),
    Effect.catchTags({
      // an aggregate without GROUP BY answers one row, always
      NoSuchElementException: Effect.die,
      ParseError: (error) => Effect.fail(malformedRow("the versions of effect_agent_migrations")(error))
    })
  )

const newerSchema = (newest: number) =>
  new SessionError.PersistenceError({
    reason: `the effect-agent tables are at schema version ${newest}, newer than the version ${schemaVersion} ` +
      "this library knows; upgrade effect-agent to use this database"
  })

/** The Migrator left the schema below ours: another process's migration was running (SQLite). */
class MigrationIncomplete extends Data.TaggedError("MigrationIncomplete")<{ readonly version: number }> {}

const describeCause = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

/** A `MigrationError` (failed or died: a failing migration is a defect to the Migrator) as ours. */
const migrationFailed = (error: Migrator.MigrationError) =>
  new SessionError.PersistenceError({
    reason: `migrating the effect-agent tables: ${error.message}` +
      (error.cause === undefined ? "" : ` (${describeCause(error.cause)})`),
    cause: error.cause ?? error
  })

/**
 * One attempt, in one transaction: v1's table and the Migrator's view, the Migrator, then the
 * version check. On Postgres an advisory transaction lock serializes processes that start at the
 * same time (the Migrator's own `LOCK TABLE` comes after our `CREATE`s).
 */
const migrateOnce = (sql: SqlClient.SqlClient, dialect: Dialect) =>
  sql.withTransaction(Effect.gen(function*() {
    if (dialect === "pg") yield* sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`
    yield* sql.unsafe(createMigrationsTable)
    yield* ensureMigratorView(sql, dialect)
    const ran = yield* runMigrator.pipe(
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.catchTag("MigrationError", (error) => Effect.fail(migrationFailed(error))),
      Effect.catchSomeDefect((defect) =>
        defect instanceof Migrator.MigrationError ? Option.some(Effect.fail(migrationFailed(defect))) : Option.none()
      )
    )
    const newest = yield* newestVersion(sql)
    if (newest > schemaVersion) return yield* newerSchema(newest)
    if (newest < schemaVersion) return yield* new MigrationIncomplete({ version: newest })
    return ran.map(([version]) => version)
  }))

/** SQLite's "busy"/"locked" and Postgres's serialization, deadlock and lock-not-available errors. */
const isContention = (error: unknown): boolean => {
  const cause = typeof error === "object" && error !== null && "cause" in error ? error.cause : undefined
  const code = typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : ""
  return code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED") ||
    code === "40001" || code === "40P01" || code === "55P03" ||
    (typeof cause === "object" && cause !== null && cause !== error && isContention(cause))
}

/** Waits between attempts that met another process's migration: about 2.5 s in all. */
const contentionSchedule = Schedule.exponential("20 millis").pipe(Schedule.jittered, Schedule.intersect(Schedule.recurs(7)))

/**
 * CORE-09, PERS-05: brings the schema to {@link schemaVersion} with `@effect/sql`'s `Migrator`, over
 * v1's `effect_agent_migrations` (an existing v1 or v2 database migrates on). A database migrated by
 * a newer version of this library is refused, not guessed at. Two processes that migrate a fresh
 * SQLite file at once: the one whose transaction meets the other's (`SQLITE_BUSY`, or the Migrator
 * finding the versions being recorded) retries on a `Schedule` and then finds the schema done.
 * Answers the versions this call applied.
 *
 * @internal
 */
export const migrate = (
  sql: SqlClient.SqlClient,
  dialect: Dialect
): Effect.Effect<ReadonlyArray<number>, SessionError.PersistenceError | SqlError> =>
  migrateOnce(sql, dialect).pipe(
    Effect.retry({
      schedule: contentionSchedule,
      while: (error) => error._tag === "MigrationIncomplete" || isContention(error)
    }),
    Effect.catchTag("MigrationIncomplete", (incomplete) =>
      Effect.fail(
        new SessionError.PersistenceError({
          reason: `the effect-agent tables stayed at schema version ${incomplete.version} while another process ` +
            `migrated them to ${schemaVersion}; check that process, then start again`
        })
      )),
    Effect.withSpan("SqlSessionPersistence.migrate")
  )

/**
 * For read-only use (the operator CLI's read commands): checks that the tables exist and that this
 * library can read them, without creating or migrating anything. The read paths use only the
 * columns of version 1, so an unmigrated version 1 database is read as it is.
 *
 * @internal
 */
export const checkReadable = (sql: SqlClient.SqlClient): Effect.Effect<number, SessionError.PersistenceError> =>
  newestVersion(sql).pipe(
    Effect.mapError((error) =>
      new SessionError.PersistenceError({
        reason: `this database holds no effect-agent tables (${error.message}); check the database you named`,
        cause: error
      })
    ),
    Effect.filterOrFail((newest) => newest <= schemaVersion, newerSchema)
  )
