/**
 * The single writer of a SQL-persisted session (PERS-01): a row of `effect_agent_leases` holding a
 * fencing token, a description of its holder and `expires_at` (epoch ms, from the writer's
 * `Clock`). The holder renews it every ttl/3; once it expired, another writer may take it over
 * with a new token. Every append checks the token in its own transaction (see `appendBatch`), so a
 * writer whose lease was taken over writes nothing more.
 *
 * Each step is one statement, atomic on its own: `INSERT … ON CONFLICT DO NOTHING` to take a free
 * lease, a compare-and-set `UPDATE … WHERE token = old AND expires_at <= now` to take an expired
 * one, `UPDATE … WHERE token = old` to take the lease of a holder that is a dead process of this
 * host (PKG-04: the row names host, pid and start time, judged like a lock file's owner, DUR-06).
 * On Postgres the `UPDATE` of an append locks the lease row until commit, so a takeover waits
 * for the append in flight and then sees the renewed `expires_at`.
 *
 * @internal
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Clock, Data, Effect, Option, Schedule, Schema } from "effect"
import type { SessionId } from "../../../Message.js"
import * as SessionError from "../../../SessionError.js"
import type { ProcessProbe } from "../file/lock.js"
import { processLiveness } from "../file/lock.js"
import { malformedRow, SqlNumber } from "./log.js"

/** The process a lease names (PKG-04). @internal */
export interface LeaseHolder {
  readonly host: string
  readonly pid: number
  /** `undefined` where the platform cannot tell a process's start (then the pid alone decides). */
  readonly startTime: string | undefined
  /** The holder's PID namespace (DUR-06), `undefined` where it cannot be read. */
  readonly pidNamespace?: string | undefined
}

/**
 * The `holder_start` column: the start time, then `|` and the PID namespace when known (a start
 * time never holds a `|`). Older rows hold the start time alone.
 */
const encodeStart = (holder: LeaseHolder): string | null =>
  holder.startTime === undefined
    ? null
    : holder.pidNamespace === undefined
    ? holder.startTime
    : `${holder.startTime}|${holder.pidNamespace}`

const decodeStart = (stored: string | null): { readonly startTime?: string; readonly pidNamespace?: string } => {
  if (stored === null) return {}
  const bar = stored.indexOf("|")
  return bar < 0 ? { startTime: stored } : { startTime: stored.slice(0, bar), pidNamespace: stored.slice(bar + 1) }
}

/** @internal */
export interface LeaseContext {
  readonly sql: SqlClient
  readonly ttlMillis: number
  /** Who new leases are written for (a human-readable description of this process). */
  readonly holder: string
  /** This process, recorded in new leases. */
  readonly self: LeaseHolder
  /** Tells whether the holder of a lease of this host still runs. */
  readonly probe: ProcessProbe
}

/** A lease this process holds. @internal */
export interface Lease {
  readonly id: SessionId
  readonly token: string
}

/** The lease row as `SqlSchema` decodes it (CORE-09). */
const LeaseRow = Schema.Struct({
  token: Schema.String,
  holder: Schema.String,
  expires_at: SqlNumber,
  holder_host: Schema.NullOr(Schema.String),
  holder_pid: Schema.NullOr(SqlNumber),
  holder_start: Schema.NullOr(Schema.String)
})

type LeaseRow = typeof LeaseRow.Type

/** The lease row of `id`, if any. */
const findLease = (sql: SqlClient) => {
  const find = SqlSchema.findOne({
    Request: Schema.String,
    Result: LeaseRow,
    execute: (id) =>
      sql`SELECT token, holder, expires_at, holder_host, holder_pid, holder_start
        FROM effect_agent_leases WHERE session_id = ${id}`
  })
  return (id: SessionId): Effect.Effect<Option.Option<LeaseRow>, SqlError> =>
    Effect.catchTag(find(id), "ParseError", (error) => Effect.fail(malformedRow(`the lease of ${JSON.stringify(id)}`)(error)))
}

/**
 * PKG-04: the remedy a SQL `SessionLocked` names. The lease of a dead process of this host never
 * gets here (it is taken over), so the holder runs, is on another host, or is unknown.
 *
 * @internal
 */
export const lockedRemedy = (id: SessionId): string =>
  "wait until its writer releases it or its lease expires (a running writer renews it); if that process is " +
  "gone for good (another host, a hung process), break the lock as an operator: SqlSessionPersistence.breakLock" +
  `(${JSON.stringify(id)}) or \`effect-agent sessions break-lock ${id} --sqlite <file> | --postgres <url>\``

const validUntil = (row: LeaseRow) => `lease valid until ${new Date(row.expires_at).toISOString()}`

const locked = (id: SessionId, row: LeaseRow) =>
  new SessionError.SessionLocked({ id, holder: `${row.holder}, ${validUntil(row)}`, remedy: lockedRemedy(id) })

/**
 * PKG-04: the process a lease row names, from its `holder_*` columns; `undefined` for a row of
 * version 1 (the columns are NULL) or one naming no valid pid.
 *
 * @internal
 */
export const holderOfRow = (row: {
  readonly holder_host: string | null
  readonly holder_pid: number | null
  readonly holder_start: string | null
}): LeaseHolder | undefined => {
  if (row.holder_host === null || row.holder_pid === null) return undefined
  const pid = row.holder_pid
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined
  const { pidNamespace, startTime } = decodeStart(row.holder_start)
  return { host: row.holder_host, pid, startTime, pidNamespace }
}

/** PKG-04: whether the row's holder is a process of this host that no longer runs (v1 rows never are). */
const isHolderGone = (ctx: LeaseContext, row: LeaseRow): boolean => {
  const owner = holderOfRow(row)
  return owner !== undefined && processLiveness(ctx.probe, ctx.self, owner) === "Gone"
}

/** The lease changed between two of our statements (released, renewed, taken over): look again. */
class LeaseChanged extends Data.TaggedError("LeaseChanged")<{ readonly why: string }> {}

/** Up to 3 more attempts, at once: each one that loses a race saw another writer's change. */
const lookAgain = Schedule.recurs(3)

/** One attempt at the lease: ours, `SessionLocked` with its holder, or `LeaseChanged` under us. */
const attemptLease = (
  ctx: LeaseContext,
  id: SessionId
): Effect.Effect<Lease, SessionError.SessionLocked | LeaseChanged | SqlError> =>
  Effect.gen(function*() {
    const { self, sql } = ctx
    const now = yield* Clock.currentTimeMillis
    const token = globalThis.crypto.randomUUID()
    const expiresAt = now + ctx.ttlMillis
    const inserted = yield* sql<{ readonly token: string }>`INSERT INTO effect_agent_leases
      (session_id, token, holder, expires_at, holder_host, holder_pid, holder_start)
      VALUES (${id}, ${token}, ${ctx.holder}, ${expiresAt}, ${self.host}, ${self.pid}, ${encodeStart(self)})
      ON CONFLICT (session_id) DO NOTHING RETURNING token`
    if (inserted.length > 0) return { id, token }

    const current = yield* findLease(sql)(id)
    if (Option.isNone(current)) return yield* new LeaseChanged({ why: "the lease was released while we looked" })
    const row = current.value
    const isExpired = row.expires_at <= now
    // PKG-04: a dead holder of this host is taken over at once; one of another host never is.
    const isOrphaned = !isExpired && isHolderGone(ctx, row)
    if (!isExpired && !isOrphaned) return yield* locked(id, row)

    // compare-and-set on the token; an expired lease also must still be expired
    const stillExpiredBy = isOrphaned ? Number.MAX_SAFE_INTEGER : now
    const taken = yield* sql<{ readonly token: string }>`UPDATE effect_agent_leases
      SET token = ${token}, holder = ${ctx.holder}, expires_at = ${expiresAt},
        holder_host = ${self.host}, holder_pid = ${self.pid}, holder_start = ${encodeStart(self)}
      WHERE session_id = ${id} AND token = ${row.token} AND expires_at <= ${stillExpiredBy}
      RETURNING token`
    if (taken.length === 0) return yield* new LeaseChanged({ why: "the lease changed while we took it over" })
    yield* Effect.logWarning(
      isOrphaned
        ? `effect-agent: took over the lease of session ${JSON.stringify(id)} from ${row.holder}, ` +
          `which is no longer running (its ${validUntil(row)})`
        : `effect-agent: took over the expired lease of session ${JSON.stringify(id)} from ${row.holder} ` +
          `(it expired at ${new Date(row.expires_at).toISOString()} without being renewed)`
    )
    return { id, token }
  })

/**
 * Takes the lease of `id` for this process, or fails `SessionLocked` at once with its holder. An
 * attempt that loses a race to another writer is retried (CORE-09: `Effect.retry` on a
 * `Schedule`). Not interruptible in the middle: run it as the acquire of an `acquireRelease`.
 *
 * @internal
 */
export const acquire = (
  ctx: LeaseContext,
  id: SessionId
): Effect.Effect<Lease, SessionError.SessionLocked | SqlError> =>
  attemptLease(ctx, id).pipe(
    Effect.retry({ schedule: lookAgain, while: (error) => error._tag === "LeaseChanged" }),
    Effect.catchTag("LeaseChanged", ({ why }) =>
      Effect.fail(
        new SessionError.SessionLocked({ id, holder: `a writer that keeps changing (${why})`, remedy: lockedRemedy(id) })
      ))
  )

/**
 * Extends the lease by a ttl from now. `false` when it is no longer ours (taken over after it
 * expired, or removed).
 *
 * @internal
 */
export const renew = (ctx: LeaseContext, lease: Lease): Effect.Effect<boolean, SqlError> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.map(
      ctx.sql<{ readonly token: string }>`UPDATE effect_agent_leases SET expires_at = ${now + ctx.ttlMillis}
        WHERE session_id = ${lease.id} AND token = ${lease.token} RETURNING token`,
      (rows) => rows.length > 0
    ))

/**
 * Removes the lease if it is still ours. Never fails: a lease that cannot be removed is reported
 * by a warning and expires by itself.
 *
 * @internal
 */
export const release = (ctx: LeaseContext, lease: Lease): Effect.Effect<void> =>
  ctx.sql`DELETE FROM effect_agent_leases WHERE session_id = ${lease.id} AND token = ${lease.token}`.pipe(
    Effect.asVoid,
    Effect.catchAll((error) =>
      Effect.logWarning(
        `effect-agent: could not release the lease of session ${JSON.stringify(lease.id)} ` +
          `(${error.message}); it expires by itself`
      )
    )
  )

/**
 * Renews the lease every ttl/3 until interrupted (CORE-09: `Effect.repeat` on a `Schedule`). Stops
 * (with a warning, unless the writer was closed meanwhile) when the lease turns out to have been
 * taken over; a renewal that fails is logged and retried at the next tick, while the lease may
 * still be valid.
 *
 * @internal
 */
export const keepAlive = (
  ctx: LeaseContext,
  lease: Lease,
  options: { readonly isClosed: () => boolean; readonly onLost: () => void }
): Effect.Effect<void> => {
  const interval = Math.max(1, Math.floor(ctx.ttlMillis / 3))
  /** One renewal: whether to keep renewing. */
  const tick: Effect.Effect<boolean> = Effect.suspend(() => {
    if (options.isClosed()) return Effect.succeed(false)
    return Effect.matchEffect(renew(ctx, lease), {
      onFailure: (error) =>
        Effect.as(
          Effect.logWarning(
            `effect-agent: could not renew the lease of session ${JSON.stringify(lease.id)} ` +
              `(${error.message}); retrying in ${interval} ms`
          ),
          true
        ),
      onSuccess: (renewed) => {
        if (renewed) return Effect.succeed(true)
        options.onLost()
        return Effect.as(
          options.isClosed() ? Effect.void : Effect.logWarning(
            `effect-agent: the lease of session ${JSON.stringify(lease.id)} was taken over by another writer; ` +
              "appends through this writer fail SessionConflict: dispose the agent and resume it"
          ),
          false
        )
      }
    })
  })
  return tick.pipe(
    Effect.repeat(Schedule.spaced(interval).pipe(Schedule.whileInput((keepRenewing: boolean) => keepRenewing))),
    Effect.delay(interval),
    Effect.asVoid
  )
}
