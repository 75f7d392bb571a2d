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
 * checks (PERS-02: the others fail `SessionConflict` and write nothing), touch `updated_at`. If a
 * statement fails, that work is rolled back to a savepoint and each batch is written again in a
 * savepoint of its own, so a statement only one session's rows break fails only that session's
 * batch. If the transaction itself fails (begin or commit), nothing is committed and every writer
 * in it gets `PersistenceError`.
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
import type { Array as Arr, Scope } from "effect"
import { Cause, Clock, Context, Effect, Exit, Fiber, Option, Queue, Tracer } from "effect"
import type { SessionId } from "../Message.js"
import * as SessionError from "../SessionError.js"
import type { SessionEvent } from "../SessionEvent.js"
import type { Lease } from "./sqlLease.js"
import { conflict, eventRecord, persistenceError } from "./sqlLog.js"

/** @internal */
export type WriteError = SessionError.SessionConflict | SessionError.PersistenceError

/** @internal */
export interface Committer {
  /**
   * Commits one session's batch (consecutive seqs) together with whatever else is waiting;
   * resolves with the session's stored length after it.
   */
  readonly submit: (held: Lease, events: Arr.NonEmptyReadonlyArray<SessionEvent>) => Effect.Effect<number, WriteError>
}

interface Pending {
  readonly held: Lease
  readonly events: Arr.NonEmptyReadonlyArray<SessionEvent>
  readonly span: Option.Option<Tracer.AnySpan>
  readonly resume: (exit: Exit.Exit<number, WriteError>) => void
}

type Outcome = Exit.Exit<number, WriteError>

/** Queued behind the last batch when the layer closes. */
const STOP = "stop" as const

/** Rows per `INSERT`: 5 parameters each stays far below every driver's parameter limit. */
const INSERT_CHUNK = 200

/** Sessions per transaction: keeps the `IN`/`OR` lists of its statements within parameter limits. */
const MAX_SESSIONS = 500


// Postgres locks the lease rows a transaction renews; one order for everybody avoids deadlocks.
const bySession = (a: Pending, b: Pending) => (a.held.id < b.held.id ? -1 : a.held.id > b.held.id ? 1 : 0)

const describe = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause)
  return failure instanceof Error ? failure.message : String(failure)
}

/**
 * Starts the committer in the current Scope (the layer's).
 *
 * @internal
 */
export const make = (options: {
  readonly sql: SqlClient
  readonly ttlMillis: number
}): Effect.Effect<Committer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { sql, ttlMillis } = options
    const queue = yield* Queue.unbounded<Pending | typeof STOP>()
    let isClosed = false

    const storedLengths = (ids: ReadonlyArray<SessionId>) =>
      Effect.map(
        sql<{ readonly session_id: string; readonly next_seq: number | string }>`
          SELECT s.session_id, (SELECT COALESCE(MAX(e.seq) + 1, 0) FROM effect_agent_events e
            WHERE e.session_id = s.session_id) AS next_seq
          FROM effect_agent_sessions s WHERE ${sql.in("s.session_id", ids)}`,
        (rows) => new Map(rows.map((row) => [row.session_id, Number(row.next_seq)]))
      )

    /** Writes `batch` in the current transaction; one outcome per batch, in order. */
    const write = (batch: ReadonlyArray<Pending>): Effect.Effect<Array<Outcome>, SqlError> =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        // Renews the leases still holding our tokens and reads those sessions' stored lengths, one
        // index seek each (a GROUP BY over the events would read every row of each session).
        const ours = yield* sql<{ readonly session_id: string; readonly next_seq: number | string }>`
          UPDATE effect_agent_leases SET expires_at = ${now + ttlMillis}
          WHERE ${sql.or(batch.map(({ held }) => sql`(session_id = ${held.id} AND token = ${held.token})`))}
          RETURNING session_id, (SELECT COALESCE(MAX(e.seq) + 1, 0) FROM effect_agent_events e
            WHERE e.session_id = effect_agent_leases.session_id) AS next_seq`
        const stored = new Map<string, number>()
        for (const row of ours) stored.set(row.session_id, Number(row.next_seq))
        // Only a writer that lost its lease gets here (rare): its error states the stored length too.
        const lost = batch.filter(({ held }) => !stored.has(held.id)).map(({ held }) => held.id)
        const lengths = lost.length === 0 ? new Map<string, number>() : yield* storedLengths(lost)

        const outcomes: Array<Outcome> = []
        const written: Array<SessionId> = []
        const rows: Array<Record<string, unknown>> = []
        for (const { events, held: { id } } of batch) {
          const length = stored.get(id)
          if (length === undefined || events[0].seq !== length) {
            outcomes.push(Exit.fail(conflict(id, events[0].seq, length ?? lengths.get(id) ?? 0)))
            continue
          }
          for (const event of events) {
            rows.push({
              session_id: id,
              seq: event.seq,
              event_time: event.time,
              event_type: event.type,
              record: eventRecord(event)
            })
          }
          written.push(id)
          outcomes.push(Exit.succeed(length + events.length))
        }
        for (let start = 0; start < rows.length; start += INSERT_CHUNK) {
          yield* sql`INSERT INTO effect_agent_events ${sql.insert(rows.slice(start, start + INSERT_CHUNK))}`
        }
        if (written.length > 0) {
          yield* sql`UPDATE effect_agent_sessions SET updated_at = ${now}
            WHERE ${sql.in("session_id", written)}`
        }
        return outcomes
      })

    const failed = (pending: Pending) => (error: SqlError): Outcome =>
      Exit.fail(persistenceError(`appending to session ${JSON.stringify(pending.held.id)}`)(error))

    /** Each batch in a savepoint of its own: a failing statement fails only its own batch. */
    const writeEach = (batch: ReadonlyArray<Pending>) =>
      Effect.forEach(batch, (pending) =>
        sql.withTransaction(write([pending])).pipe(
          Effect.match({ onFailure: failed(pending), onSuccess: (outcomes) => outcomes[0]! })
        ))

    const commit = (batch: Array<Pending>): Effect.Effect<void> => {
      batch.sort(bySession)
      let events = 0
      const links: Array<Tracer.SpanLink> = []
      for (const pending of batch) {
        events += pending.events.length
        if (Option.isSome(pending.span)) links.push({ _tag: "SpanLink", span: pending.span.value, attributes: {} })
      }
      // A statement that fails rolls its transaction (or savepoint) back before it is answered.
      const run = batch.length === 1
        ? sql.withTransaction(write(batch)).pipe(
          Effect.catchTag("SqlError", (error) => Effect.succeed([failed(batch[0]!)(error)]))
        )
        : sql.withTransaction(sql.withTransaction(write(batch)).pipe(Effect.catchAll(() => writeEach(batch))))
      return run.pipe(
        Effect.exit,
        Effect.map((exit) => {
          if (Exit.isSuccess(exit)) {
            for (let i = 0; i < batch.length; i++) batch[i]!.resume(exit.value[i]!)
            return
          }
          // Nothing of this transaction was committed, whatever its savepoints said.
          const refused = Exit.fail(
            new SessionError.PersistenceError({
              reason: `committing the appends of ${batch.length} session(s): ${describe(exit.cause)}`,
              cause: Cause.squash(exit.cause)
            })
          )
          for (const pending of batch) pending.resume(refused)
        }),
        Effect.withSpan("SqlSessionPersistence.commit", {
          root: true,
          links,
          attributes: { "effect_agent.sessions": batch.length, "effect_agent.events": events }
        })
      )
    }

    const closed = (id: SessionId): Outcome =>
      Exit.fail(
        new SessionError.PersistenceError({
          reason: `appending to session ${JSON.stringify(id)}: the SqlSessionPersistence layer was closed`
        })
      )

    // The committer is never interrupted, so no batch it took can be dropped: closing refuses new
    // batches, then queues `stop` behind the last accepted one and waits until all are committed.
    const loop = Effect.gen(function*() {
      while (true) {
        const first = yield* Queue.take(queue)
        if (first === STOP) return
        // lets the fibers woken by the previous commit hand in their next batches first
        yield* Effect.yieldNow()
        const batch = [first]
        let stopping = false
        for (const next of yield* Queue.takeUpTo(queue, MAX_SESSIONS - 1)) {
          if (next === STOP) stopping = true
          else batch.push(next)
        }
        yield* commit(batch)
        if (stopping) return
      }
    })
    const committer = yield* Effect.forkScoped(Effect.uninterruptible(loop))
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        isClosed = true
        queue.unsafeOffer(STOP)
        return Fiber.await(committer)
      })
    )

    const submit = (held: Lease, events: Arr.NonEmptyReadonlyArray<SessionEvent>) =>
      Effect.withFiberRuntime<number, WriteError>((fiber) => {
        const span = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
        return Effect.async<number, WriteError>((resume) => {
          if (isClosed) return resume(closed(held.id))
          queue.unsafeOffer({ held, events, span, resume })
        })
      }).pipe(Effect.uninterruptible)

    return { submit } satisfies Committer
  })
