/**
 * Group commit across the sessions of one `SqlSessionPersistence` layer (SES-02, PERS-02, PERS-04).
 *
 * Each session's writer fiber already gathers that session's appends into one batch. On SQL every
 * batch used to be its own transaction, and on SQLite (one connection, a synchronous driver) those
 * transactions, each waiting for its own sync, ran one after another: 64 sessions appending at
 * once were no faster than one. Here every writer hands its batch to the one committer fiber of
 * the layer; the batches that arrive while a commit is in flight go out together in the next
 * transaction, so one commit (one sync) acknowledges all of them. No timers: a batch that finds
 * the committer idle is committed at once.
 *
 * A transaction writes all its batches with a fixed number of statements: renew the leases still
 * holding our tokens, read the stored lengths, insert the rows of the batches that passed both
 * checks (PERS-02: the others fail `SessionConflict` and write nothing), touch `updated_at`.
 *
 * DUR-04, one session's batch never fails another's:
 * - Batches arrive encoded: each writer turns its events into records (and checks their sizes)
 *   in its own fiber before it submits, so a value that cannot be encoded fails its own append
 *   with `InvalidEventData` and never enters a transaction. The committer does no JSON work.
 * - If a statement of the shared work fails (a constraint or trigger refusing one session's rows,
 *   a driver refusing a value) or even dies (a bug), that work is rolled back to its savepoint and
 *   each batch is written again in a savepoint of its own: the batch that breaks fails alone
 *   (`PersistenceError`, or its defect), the others commit in the same transaction. Retrying
 *   without the failing batch would need to know which one failed, which a driver error does not
 *   say; savepoints per session find it in one pass. Their cost (a few statements per session)
 *   is paid only after a failure: the common case keeps its fixed number of statements.
 * - If the transaction itself fails (begin or commit), nothing is committed and every writer in it
 *   gets `PersistenceError`.
 *
 * A submitted batch is waited for uninterruptibly (as the file writer's write is): it is either
 * acknowledged or refused, never left unknown to its session. When the layer's Scope closes, new
 * batches are refused with `PersistenceError`, and the close waits until every batch accepted
 * before it is committed (the committer is never interrupted, so none is dropped).
 *
 * @internal
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type { Array as Arr, ParseResult, Scope } from "effect"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { Cause, Clock, Context, Effect, Exit, Fiber, Option, Queue, Schema, Tracer } from "effect"
import type { SessionId } from "../../../Message.js"
import * as SessionError from "../../../SessionError.js"
import type { Lease } from "./lease.js"
import { conflict, malformedRow, persistenceError, SqlNumber } from "./log.js"

/** A session and its stored length (the seq its next event takes). */
const LengthRow = Schema.Struct({ session_id: Schema.String, next_seq: SqlNumber })

/** @internal */
export type WriteError = SessionError.SessionConflict | SessionError.PersistenceError

/**
 * One event's row, its record already encoded by the session's writer (a type, not an interface:
 * `sql.insert` takes records).
 *
 * @internal
 */
export type EventRow = {
  readonly session_id: SessionId
  readonly seq: number
  readonly event_time: number
  readonly event_type: string
  readonly record: string
}

/** @internal */
export interface Committer {
  /**
   * Commits one session's batch (rows with consecutive seqs) together with whatever else is
   * waiting; resolves with the session's stored length after it.
   */
  readonly submit: (held: Lease, rows: Arr.NonEmptyReadonlyArray<EventRow>) => Effect.Effect<number, WriteError>
}

interface Pending {
  readonly held: Lease
  readonly rows: Arr.NonEmptyReadonlyArray<EventRow>
  readonly span: Option.Option<Tracer.AnySpan>
  readonly resume: (exit: Exit.Exit<number, WriteError>) => void
}

type Outcome = Exit.Exit<number, WriteError>

/** Queued behind the last batch when the layer closes. */
const STOP = "stop" as const

/** Rows per `INSERT`: 5 parameters each stays far below every driver's parameter limit. */
const INSERT_CHUNK = 200

/**
 * Record text per `INSERT` (UTF-16 units, at most 3 UTF-8 bytes each): keeps one statement's
 * message far below Postgres's 1 GiB limit whatever the batches' sizes (a single larger record
 * still goes alone).
 */
const INSERT_TEXT = 64 * 1024 * 1024

/** Sessions per transaction: keeps the `IN`/`OR` lists of its statements within parameter limits. */
const MAX_SESSIONS = 500


// Postgres locks the lease rows a transaction renews; one order for everybody avoids deadlocks.
const bySession = (a: Pending, b: Pending) => (a.held.id < b.held.id ? -1 : a.held.id > b.held.id ? 1 : 0)

const describe = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause)
  return failure instanceof Error ? failure.message : String(failure)
}

/** A query answering sessions' stored lengths, its rows decoded by `SqlSchema` (CORE-09). */
type LengthQuery<I> = (
  request: I
) => Effect.Effect<ReadonlyArray<typeof LengthRow.Type>, SqlError | ParseResult.ParseError>

/** The committer's state record: its client, its queue of batches, and its prepared statements. */
interface CommitterState {
  readonly sql: SqlClient
  readonly ttlMillis: number
  readonly queue: Queue.Queue<Pending | typeof STOP>
  isClosed: boolean
  readonly findStoredLengths: LengthQuery<ReadonlyArray<string>>
  /** Renews the leases still holding our tokens; answers those sessions' stored lengths. */
  readonly renewOurs: LengthQuery<{
    readonly now: number
    readonly leases: ReadonlyArray<{ readonly id: string; readonly token: string }>
  }>
}

/** The stored lengths of sessions (one index seek each). */
const storedLengths = (s: CommitterState, ids: ReadonlyArray<SessionId>) =>
  s.findStoredLengths(ids).pipe(
    Effect.map((rows) => new Map(rows.map((row) => [row.session_id, row.next_seq]))),
    Effect.catchTag("ParseError", (error) => Effect.fail(malformedRow("the stored lengths of sessions")(error)))
  )

/** Inserts rows in statements bounded by row count and by text. */
const insertRows = (s: CommitterState, rows: ReadonlyArray<EventRow>): Effect.Effect<void, SqlError> =>
  Effect.suspend(() => {
    const sql = s.sql
    const statements: Array<Effect.Effect<unknown, SqlError>> = []
    let start = 0
    let text = 0
    for (let i = 0; i < rows.length; i++) {
      const size = rows[i]!.record.length
      if (i > start && (i - start === INSERT_CHUNK || text + size > INSERT_TEXT)) {
        statements.push(sql`INSERT INTO effect_agent_events ${sql.insert(rows.slice(start, i))}`)
        start = i
        text = 0
      }
      text += size
    }
    if (start < rows.length) statements.push(sql`INSERT INTO effect_agent_events ${sql.insert(rows.slice(start))}`)
    return Effect.forEach(statements, (statement) => statement, { discard: true })
  })

/**
 * PERS-02: one outcome per batch, in order: a batch whose lease is ours and whose first seq is the
 * stored length is written; the others fail `SessionConflict` (with the stored length) and write nothing.
 */
const outcomesOf = (
  batch: ReadonlyArray<Pending>,
  stored: ReadonlyMap<string, number>,
  lengths: ReadonlyMap<string, number>
) => {
  const outcomes: Array<Outcome> = []
  const written: Array<SessionId> = []
  const rows: Array<EventRow> = []
  for (const { held: { id }, rows: own } of batch) {
    const length = stored.get(id)
    if (length === undefined || own[0].seq !== length) {
      outcomes.push(Exit.fail(conflict(id, own[0].seq, length ?? lengths.get(id) ?? 0)))
      continue
    }
    for (const row of own) rows.push(row)
    written.push(id)
    outcomes.push(Exit.succeed(length + own.length))
  }
  return { outcomes, written, rows }
}

/** Writes `batch` in the current transaction; one outcome per batch, in order. */
const write = (s: CommitterState, batch: ReadonlyArray<Pending>): Effect.Effect<Array<Outcome>, SqlError> =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    // Renews the leases still holding our tokens and reads those sessions' stored lengths, one index
    // seek each (a GROUP BY over the events would read every row of each session).
    const ours = yield* s.renewOurs({ now, leases: batch.map(({ held }) => held) }).pipe(
      Effect.catchTag("ParseError", (error) => Effect.fail(malformedRow("the renewed leases")(error)))
    )
    const stored = new Map<string, number>()
    for (const row of ours) stored.set(row.session_id, row.next_seq)
    // Only a writer that lost its lease gets here (rare): its error states the stored length too.
    const lost = batch.filter(({ held }) => !stored.has(held.id)).map(({ held }) => held.id)
    const lengths = lost.length === 0 ? new Map<string, number>() : yield* storedLengths(s, lost)
    const { outcomes, rows, written } = outcomesOf(batch, stored, lengths)
    yield* insertRows(s, rows)
    if (written.length > 0) {
      yield* s.sql`UPDATE effect_agent_sessions SET updated_at = ${now}
        WHERE ${s.sql.in("session_id", written)}`
    }
    return outcomes
  })

const persistenceErrorOf = (pending: Pending, error: SqlError) =>
  persistenceError(`appending to session ${JSON.stringify(pending.held.id)}`)(error)

const failed = (pending: Pending) => (error: SqlError): Outcome => Exit.fail(persistenceErrorOf(pending, error))

/**
 * Each batch in a savepoint of its own (DUR-04): a statement that fails, or dies, on one session's
 * batch fails only that batch (rolled back to its savepoint), with its own cause.
 */
const writeEach = (s: CommitterState, batch: ReadonlyArray<Pending>) =>
  Effect.forEach(batch, (pending) =>
    Effect.map(Effect.exit(s.sql.withTransaction(write(s, [pending]))), (exit): Outcome =>
      Exit.isSuccess(exit)
        ? exit.value[0]!
        : Exit.failCause(Cause.map(exit.cause, (error) => persistenceErrorOf(pending, error)))))

/** Answers every batch of a transaction that failed: nothing of it was committed. */
const refuseTransaction = (batch: ReadonlyArray<Pending>, cause: Cause.Cause<unknown>): void => {
  // Nothing of this transaction was committed, whatever its savepoints said.
  const refused = Exit.fail(
    new SessionError.PersistenceError({
      reason: `committing the appends of ${batch.length} session(s): ${describe(cause)}`,
      cause: Cause.squash(cause)
    })
  )
  for (const pending of batch) pending.resume(refused)
}

/** One transaction for the batches (PERS-04: acknowledged when committed), in one span linked to the appends. */
const commit = (s: CommitterState, batch: Array<Pending>): Effect.Effect<void> => {
  batch.sort(bySession)
  let events = 0
  const links: Array<Tracer.SpanLink> = []
  for (const pending of batch) {
    events += pending.rows.length
    if (Option.isSome(pending.span)) links.push({ _tag: "SpanLink", span: pending.span.value, attributes: {} })
  }
  const sql = s.sql
  // A statement that fails rolls its transaction (or savepoint) back before it is answered.
  const run = batch.length === 1
    ? sql.withTransaction(write(s, batch)).pipe(
      Effect.catchTag("SqlError", (error) => Effect.succeed([failed(batch[0]!)(error)]))
    )
    : sql.withTransaction(sql.withTransaction(write(s, batch)).pipe(Effect.catchAllCause(() => writeEach(s, batch))))
  return run.pipe(
    Effect.exit,
    Effect.map((exit) => {
      if (Exit.isSuccess(exit)) {
        for (let i = 0; i < batch.length; i++) batch[i]!.resume(exit.value[i]!)
        return
      }
      refuseTransaction(batch, exit.cause)
    }),
    Effect.withSpan("SqlSessionPersistence.commit", {
      root: true,
      links,
      attributes: { "effect_agent.sessions": batch.length, "effect_agent.events": events }
    })
  )
}

/** Answers every batch of a commit that died (an answer already given stays: a resume counts once). */
const refuseAll = (batch: ReadonlyArray<Pending>, cause: Cause.Cause<unknown>): void => {
  const refused = Exit.fail(
    new SessionError.PersistenceError({
      reason: `committing the appends of ${batch.length} session(s) failed unexpectedly: ${describe(cause)}`,
      cause: Cause.squash(cause)
    })
  )
  for (const pending of batch) pending.resume(refused)
}

const closed = (id: SessionId): Outcome =>
  Exit.fail(
    new SessionError.PersistenceError({
      reason: `appending to session ${JSON.stringify(id)}: the SqlSessionPersistence layer was closed`
    })
  )

/**
 * One commit of whatever is waiting; whether to go on (`false` once `stop` was taken). The committer is
 * never interrupted, so no batch it took can be dropped: closing refuses new batches, then queues
 * `stop` behind the last accepted one and waits until all are committed.
 */
const round = (s: CommitterState) =>
  Effect.gen(function*() {
    const first = yield* Queue.take(s.queue)
    if (first === STOP) return false
    // lets the fibers woken by the previous commit hand in their next batches first
    yield* Effect.yieldNow()
    const batch = [first]
    let stopping = false
    for (const next of yield* Queue.takeUpTo(s.queue, MAX_SESSIONS - 1)) {
      if (next === STOP) stopping = true
      else batch.push(next)
    }
    // CORE-01: a defect outside the transaction (a tracer, a callback) must not kill the loop and leave
    // this batch and every later one waiting forever: its callers get the failure
    yield* Effect.catchAllCause(commit(s, batch), (cause) => Effect.sync(() => refuseAll(batch, cause)))
    return !stopping
  })

/** Hands one session's batch to the committer and waits, uninterruptibly, for its answer. */
const submit = (s: CommitterState, held: Lease, rows: Arr.NonEmptyReadonlyArray<EventRow>) =>
  Effect.withFiberRuntime<number, WriteError>((fiber) => {
    const span = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
    return Effect.async<number, WriteError>((resume) => {
      if (s.isClosed) return resume(closed(held.id))
      s.queue.unsafeOffer({ held, rows, span, resume })
    })
  }).pipe(Effect.uninterruptible)

/**
 * Starts the committer in the current Scope (the layer's, CORE-01).
 *
 * @internal
 */
export const make = (options: {
  readonly sql: SqlClient
  readonly ttlMillis: number
}): Effect.Effect<Committer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { sql, ttlMillis } = options
    const s: CommitterState = {
      sql,
      ttlMillis,
      queue: yield* Queue.unbounded<Pending | typeof STOP>(),
      isClosed: false,
      // CORE-09: rows decoded by SqlSchema; a row of another shape is the statement's SqlError
      findStoredLengths: SqlSchema.findAll({
        Request: Schema.Array(Schema.String),
        Result: LengthRow,
        execute: (ids) =>
          sql`SELECT s.session_id, (SELECT COALESCE(MAX(e.seq) + 1, 0) FROM effect_agent_events e
              WHERE e.session_id = s.session_id) AS next_seq
            FROM effect_agent_sessions s WHERE ${sql.in("s.session_id", ids)}`
      }),
      renewOurs: SqlSchema.findAll({
        Request: Schema.Struct({
          now: Schema.Number,
          leases: Schema.Array(Schema.Struct({ id: Schema.String, token: Schema.String }))
        }),
        Result: LengthRow,
        execute: ({ leases, now }) =>
          sql`UPDATE effect_agent_leases SET expires_at = ${now + ttlMillis}
            WHERE ${sql.or(leases.map(({ id, token }) => sql`(session_id = ${id} AND token = ${token})`))}
            RETURNING session_id, (SELECT COALESCE(MAX(e.seq) + 1, 0) FROM effect_agent_events e
              WHERE e.session_id = effect_agent_leases.session_id) AS next_seq`
      })
    }
    const loop = Effect.repeat(round(s), { while: (goOn) => goOn })
    const committer = yield* Effect.forkScoped(Effect.uninterruptible(loop))
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        s.isClosed = true
        s.queue.unsafeOffer(STOP)
        return Fiber.await(committer)
      })
    )
    return { submit: (held, rows) => submit(s, held, rows) } satisfies Committer
  })
