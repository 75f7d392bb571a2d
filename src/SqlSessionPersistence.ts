/**
 * Sessions persisted in SQL through any `@effect/sql` `SqlClient` on SQLite (embedded) or
 * Postgres (shared by many processes and machines) (SPEC §4.3, PERS-05).
 *
 * Tables (`effect_agent_*`) are created on first use by a versioned migration recorded in
 * `effect_agent_migrations`: one row per session (its header), one row per event with a unique
 * `(session_id, seq)`, and one lease row per open writer.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { Duration } from "effect"
import { Effect, Layer } from "effect"
import type { FactoryAlreadySet } from "./AgentError.js"
import * as AgentRuntime from "./AgentRuntime.js"
import * as sqlPersistence from "./internal/storage/sql/persistence.js"
import type { SessionId } from "./Message.js"
import type { Model } from "./Model.js"
import type * as SessionError from "./SessionError.js"
import type { SizeLimits } from "./SessionPersistence.js"
import { SessionPersistence } from "./SessionPersistence.js"


/**
 * When an append is acknowledged (PERS-04). An append is acknowledged when its transaction
 * committed; what "committed" guarantees is the database's:
 *
 * - SQLite: `"fsync"` (default) sets `PRAGMA synchronous = FULL` when the layer is built, so every
 *   commit is synced; `"buffered"` sets `PRAGMA synchronous = NORMAL`, which in WAL mode (the
 *   `@effect/sql-sqlite-node` default) hands commits to the OS without a sync — they survive a
 *   crash of the process, not of the machine. Either pragma applies to the whole connection, so to
 *   everything else the application runs on the same client.
 * - Postgres: the option is ignored; durability is the server's `synchronous_commit` (on by
 *   default: a commit returns once its WAL is flushed).
 *
 * @since 0.1.0
 * @category models
 */
export type Durability = "fsync" | "buffered"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options extends SizeLimits {
  /** Default `"fsync"`; see {@link Durability}. */
  readonly durability?: Durability | undefined
  /**
   * How long a writer's lease lasts without renewal (default 30 seconds). The writer renews it
   * every ttl/3; a lease not renewed for a ttl (its process died or hung) may be taken over. Lease
   * times come from each process's `Clock`, so the clocks of the machines sharing a database must
   * agree to well within a ttl.
   */
  readonly leaseTtl?: Duration.DurationInput | undefined
  /** Names this process in lease rows (default: a random id). */
  readonly instanceId?: string | undefined
  /**
   * Whether a process of this host is running; decides whether the valid lease of a process of this
   * host is orphaned and taken over at once (PKG-04). Default: `FileSessionPersistence.isProcessAlive`.
   *
   * @since 0.2.0
   */
  readonly isProcessAlive?: ((pid: number) => boolean) | undefined
  /**
   * When the process running under `pid` on this host started, recorded in lease rows so that a
   * reused pid does not keep a dead holder's lease (PKG-04, DUR-06). Default:
   * `FileSessionPersistence.processStartTime`.
   *
   * @since 0.2.0
   */
  readonly processStartTime?: ((pid: number) => string | undefined) | undefined
  /**
   * Reads only: the layer neither creates nor migrates tables nor sets pragmas (for the operator
   * CLI's read commands); writing through it is not supported.
   *
   * @internal
   */
  readonly readOnly?: boolean | undefined
}

/**
 * SQL persistence on the `SqlClient` of the context (PERS-05): SQLite through
 * `@effect/sql-sqlite-node`, Postgres through `@effect/sql-pg`. Building the layer creates or
 * migrates the tables; it fails `PersistenceError` when that fails or the database was migrated by
 * a newer version of this library.
 *
 * - PERS-01: one writer per session across processes and machines, through a lease row with a
 *   fencing token, renewed every `leaseTtl`/3 while the writer's Scope is open; a second writer
 *   fails `SessionLocked` at once while the lease is valid. A lease that expired (its process died
 *   or stalled for a ttl) is taken over with a new token and a warning, and the writer that lost
 *   it fails `SessionConflict` on its next append, writing nothing.
 * - PERS-02/04: a batch checks the token and the expected seq and is acknowledged once committed
 *   (see {@link Durability}). SES-02: the batches of every session waiting while a commit is in
 *   flight share the next transaction (group commit across sessions, one sync for all); a batch
 *   that fails its checks (`SessionConflict`) or a statement on its own rows (`PersistenceError`)
 *   fails alone, the others commit.
 * - DUR-04/DUR-05: each writer encodes and measures its batch before it hands it to the shared
 *   transaction, so a value that cannot be encoded or an event over `maxEventBytes` fails its own
 *   append with `InvalidEventData`, a batch that would take its session over `maxSessionBytes`
 *   fails `SessionFull` (see {@link SizeLimits}); nothing is written and no other session notices.
 *   `openWrite` counts what is stored with one aggregate query (the database sums the rows).
 * - The layer is scoped: its committer fiber lives in the layer's Scope. Closing it commits every
 *   batch accepted before the close (none is dropped) and fails later appends with
 *   `PersistenceError`.
 * - PERS-03: rows are written in transactions, so nothing is torn: any invalid row fails
 *   `SessionCorrupt` (its `line` is 1 for the header, seq + 2 for an event) and nothing is changed;
 *   so does a row whose `seq` column disagrees with the seq of its record (SEC-07).
 * - DUR-07: a session's rows are the ones whose `session_id` equals the id exactly (also under a
 *   collation that folds case) and whose header names it. DUR-08: `list` reports a row it cannot
 *   read as an `UnreadableSession` and lists the others.
 *
 * @example
 * ```ts
 * import { SqliteClient } from "@effect/sql-sqlite-node"
 * import { Layer } from "effect"
 * import * as SqlSessionPersistence from "effect-agent/SqlSessionPersistence"
 *
 * const PersistenceLive = SqlSessionPersistence.layer({ durability: "fsync" }).pipe(
 *   Layer.provide(SqliteClient.layer({ filename: "./sessions.db" }))
 * )
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options?: Options | undefined
): Layer.Layer<SessionPersistence, SessionError.PersistenceError, SqlClient> =>
  Layer.scoped(SessionPersistence, sqlPersistence.make(options))

/**
 * The agent runtime (`AgentRuntime.layer`) with SQL persistence over the `SqlClient` of the context
 * (SQLite through `@effect/sql-sqlite-node`, Postgres through `@effect/sql-pg`). v1:
 * `AgentRuntime.layerSql`, moved here so that the package index needs no `@effect/sql` (PKG-01).
 *
 * @example
 * ```ts
 * import { SqliteClient } from "@effect/sql-sqlite-node"
 * import { Layer } from "effect"
 * import * as SqlSessionPersistence from "effect-agent/SqlSessionPersistence"
 *
 * // Still needs a Model.
 * const RuntimeLive = SqlSessionPersistence.layerRuntime().pipe(
 *   Layer.provide(SqliteClient.layer({ filename: "./sessions.db" }))
 * )
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layerRuntime = (
  options?: Options | undefined
): Layer.Layer<
  AgentRuntime.Services | SessionPersistence,
  FactoryAlreadySet | SessionError.PersistenceError,
  Model | SqlClient
> => AgentRuntime.layer.pipe(Layer.provideMerge(layer(options)))

/**
 * Removes the writer lease of session `id` in the database of the context's `SqlClient`, whoever
 * holds it, with a warning naming the holder (PKG-04); nothing happens when no lease is held. For
 * operators only: use it when the holder is known to be gone — a process of another host, or a
 * hung one, whose lease is never guessed dead (a dead process of this host is taken over at once
 * by the next writer). Breaking the lease of a live writer makes its next append fail
 * `SessionConflict` (the fencing token changed), so the log stays consistent.
 *
 * @example
 * ```ts
 * import { SqliteClient } from "@effect/sql-sqlite-node"
 * import { Effect } from "effect"
 * import * as Message from "effect-agent/Message"
 * import * as SqlSessionPersistence from "effect-agent/SqlSessionPersistence"
 *
 * const program = SqlSessionPersistence.breakLock(Message.SessionId.make("support-1")).pipe(
 *   Effect.provide(SqliteClient.layer({ filename: "./sessions.db" }))
 * )
 * ```
 *
 * @since 0.2.0
 * @category locks
 */
export const breakLock = Effect.fn("SqlSessionPersistence.breakLock")(function*(id: SessionId) {
  yield* sqlPersistence.breakLease(id)
})
