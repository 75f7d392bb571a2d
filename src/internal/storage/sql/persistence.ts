/**
 * The SQL store behind `SqlSessionPersistence.layer` (SPEC §4.3, PERS-05): the layer's state record,
 * its statements, the per-session writer and the service's methods. The public module holds the
 * options, the layers and their documentation; this module builds no runtime (ARCH-02).
 *
 * @internal
 */
import { SqlClient } from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import type { SqlError } from "@effect/sql/SqlError"
import type { ParseResult } from "effect"
import { Array as Arr, Chunk, Clock, Duration, Effect, Either, Option, Schema, Stream } from "effect"
import * as os from "node:os"
import type { SessionId } from "../../../Message.js"
import { sessionId } from "../../../Message.js"
import * as SessionError from "../../../SessionError.js"
import type { SessionEvent, SessionHeader } from "../../../SessionEvent.js"
import type { CorruptTail, SessionWriter, StoredSession } from "../../../SessionPersistence.js"
import { SessionPersistence } from "../../../SessionPersistence.js"
import type { Options } from "../../../SqlSessionPersistence.js"
import * as lock from "../../lock.js"
import * as recordSize from "../../log/recordSize.js"
import * as truncation from "../../log/truncation.js"
import * as internalOptions from "../../options.js"
import { namedSession } from "../file/jsonl.js"
import { procInNamespace, processIsAlive as isProcessAlive, procPidNamespace, procStartTime } from "../file/lock.js"
import type { ListEntry } from "../listing.js"
import { unreadable } from "../listing.js"
import { discardRefused, inWriterScope } from "../writerScope.js"
import * as committer from "./committer.js"
import * as lease from "./lease.js"
import {
  conflict,
  decodeEvents,
  decodeHeader,
  EventRow,
  headerRecord,
  malformedRow,
  persistenceError,
  SqlNumber
} from "./log.js"
import type { Dialect } from "./schema.js"
import { checkReadable, dialectOf, migrate } from "./schema.js"
import * as hostSqlSummary from "./summary.js"

type WriteError = committer.WriteError | SessionError.InvalidEventData | SessionError.SessionFull

/** A batch ready for the committer: its rows and the size of their lines. */
interface EncodedBatch {
  readonly rows: Arr.NonEmptyReadonlyArray<committer.EventRow>
  readonly bytes: number
}

interface WriterState {
  nextSeq: number
  /**
   * The session's size as the file store counts it (header and event lines, DUR-05): what was
   * stored when the writer opened plus what it committed since.
   */
  bytes: number
  /** Released or discarded: appends are refused. */
  isClosed: boolean
  /** The renewal found the lease taken over: appends are refused without a round trip. */
  isLost: boolean
}



// CORE-09: rows are decoded by SqlSchema; a row of another shape is the statement's SqlError

/** The lease row `breakLock` reports. */
const LeaseRow = Schema.Struct({
  session_id: Schema.String,
  token: Schema.String,
  holder: Schema.String,
  expires_at: SqlNumber
})

/** A session's header row: the header is JSON text, validated by the event codec (DUR-07 checks the id). */
const HeaderRow = Schema.Struct({ session_id: Schema.String, header: Schema.Unknown })

/** A page row of `list`. */
const SummaryRow = Schema.Struct({
  session_id: Schema.String,
  header: Schema.Unknown,
  updated_at: SqlNumber,
  event_count: SqlNumber
})

type SummaryRow = typeof SummaryRow.Type

/** A stored session's size as the file store counts it (DUR-05), summed by the database. */
const SizeRow = Schema.Struct({ header_bytes: Schema.NullOr(SqlNumber), event_bytes: Schema.NullOr(SqlNumber) })

/** `find`, with a row of another shape reported as the statement's `SqlError`. */
const rows = <I, A>(
  find: (request: I) => Effect.Effect<A, SqlError | ParseResult.ParseError>,
  what: (request: I) => string
) =>
(request: I): Effect.Effect<A, SqlError> =>
  Effect.catchTag(find(request), "ParseError", (error) => Effect.fail(malformedRow(what(request))(error)))

/** Sessions per page of `list`. */
const LIST_PAGE = 500

/** The layer's options as their Schema decoded them (CORE-08). */
type DecodedOptions = Either.Either.Right<ReturnType<typeof internalOptions.decodeSqlOptions>>

/** The layer's state record: its client and statements, its leases, its committer and its limits. */
interface SqlLayer {
  readonly sql: SqlClient
  readonly leases: lease.LeaseContext
  readonly commits: committer.Committer
  readonly maxEventBytes: number
  readonly maxSessionBytes: number
  readonly headerRows: (id: string) => Effect.Effect<ReadonlyArray<typeof HeaderRow.Type>, SqlError>
  readonly eventRows: (id: string) => Effect.Effect<ReadonlyArray<typeof EventRow.Type>, SqlError>
  readonly sizeOf: ReturnType<typeof sizeQuery>
  readonly page: (after: string) => Effect.Effect<ReadonlyArray<SummaryRow>, SqlError>
}

/** PERS-01: who this process is in lease rows, and how it judges another holder (PKG-04, DUR-06). */
const leaseContextOf = (
  options: DecodedOptions,
  sql: SqlClient,
  ttlMillis: number
): lease.LeaseContext => {
  const instanceId = options.instanceId ?? globalThis.crypto.randomUUID()
  const startTimeOf = options.processStartTime ?? procStartTime
  return {
    sql,
    ttlMillis,
    holder: `instance ${JSON.stringify(instanceId)} ` +
      `(process ${process.pid} on host ${JSON.stringify(os.hostname())})`,
    self: {
      host: os.hostname(),
      pid: process.pid,
      startTime: startTimeOf(process.pid),
      pidNamespace: procPidNamespace()
    },
    probe: {
      isProcessAlive: options.isProcessAlive ?? isProcessAlive,
      processStartTime: startTimeOf,
      inNamespace: procInNamespace
    }
  }
}

/** PERS-05: the pragma of the durability (SQLite) and the migrations (CORE-09), unless read-only. */
const prepareDatabase = (options: DecodedOptions, sql: SqlClient, dialect: Dialect) =>
  Effect.gen(function*() {
    if (options.readOnly === true) return yield* checkReadable(sql)
    if (dialect === "sqlite") {
      const level = (options.durability ?? "fsync") === "fsync" ? "FULL" : "NORMAL"
      yield* sql.unsafe(`PRAGMA synchronous = ${level}`).pipe(
        Effect.mapError(persistenceError(`setting PRAGMA synchronous = ${level}`))
      )
    }
    yield* migrate(sql, dialect).pipe(
      Effect.catchTag("SqlError", (error) => Effect.fail(persistenceError("migrating the effect-agent tables")(error)))
    )
  })

/**
 * A stored session's size as the file store counts it (DUR-05): its header line and its event lines,
 * summed by the database over the rows (no record crosses the wire again). UTF-8 bytes of a text
 * column with `CAST … AS BLOB` rather than `octet_length`, which SQLite has only since 3.43.
 */
const sizeQuery = (sql: SqlClient, dialect: Dialect) => {
  const octets = sql.literal(dialect === "pg" ? "octet_length" : "length")
  const asBytes = (column: string) => sql.literal(dialect === "pg" ? column : `CAST(${column} AS BLOB)`)
  return SqlSchema.single({
    Request: Schema.String,
    Result: SizeRow,
    execute: (id) =>
      sql`SELECT
          (SELECT ${octets}(${asBytes("header")}) + 1 FROM effect_agent_sessions
            WHERE session_id = ${id}) AS header_bytes,
          (SELECT COALESCE(SUM(${octets}(${asBytes("record")}) + 1), 0) FROM effect_agent_events
            WHERE session_id = ${id}) AS event_bytes`
  })
}

/** The statements of the layer, their rows decoded by `SqlSchema` (CORE-09). */
const statementsOf = (sql: SqlClient) => ({
  /**
   * The header row of `id`, compared in JavaScript too (DUR-07): a database whose collation folds case
   * would otherwise answer for `ABC` with the row of `abc`.
   */
  headerRows: rows(
    SqlSchema.findAll({
      Request: Schema.String,
      Result: HeaderRow,
      execute: (id) => sql`SELECT session_id, header FROM effect_agent_sessions WHERE session_id = ${id}`
    }),
    (id) => `the header row of session ${JSON.stringify(id)}`
  ),
  eventRows: rows(
    SqlSchema.findAll({
      Request: Schema.String,
      Result: EventRow,
      execute: (id) => sql`SELECT seq, record FROM effect_agent_events WHERE session_id = ${id} ORDER BY seq`
    }),
    (id) => `the event rows of session ${JSON.stringify(id)}`
  ),
  page: rows(
    SqlSchema.findAll({
      Request: Schema.String,
      Result: SummaryRow,
      execute: (after) =>
        sql`SELECT s.session_id, s.header, s.updated_at,
            (SELECT COUNT(*) FROM effect_agent_events e WHERE e.session_id = s.session_id) AS event_count
          FROM effect_agent_sessions s WHERE s.session_id > ${after}
          ORDER BY s.session_id LIMIT ${LIST_PAGE}`
    }),
    () => "a page of sessions"
  )
})

/** PERS-01: the writer lease of `id`, released with the current Scope. */
const takeLease = (s: SqlLayer, id: SessionId) =>
  Effect.acquireRelease(
    lease.acquire(s.leases, id).pipe(
      Effect.catchTag("SqlError", (error) =>
        Effect.fail(persistenceError(`taking the writer lease of session ${JSON.stringify(id)}`)(error)))
    ),
    (held) => lease.release(s.leases, held)
  )

const headerRow = (s: SqlLayer, id: SessionId) =>
  Effect.map(s.headerRows(id), (found) => found.find((row) => row.session_id === id))

/** The stored session: its header and its events, decoded by the one codec (DUR-01). */
const readLog = (s: SqlLayer, id: SessionId) =>
  Effect.gen(function*() {
    const row = yield* headerRow(s, id)
    if (row === undefined) return yield* new SessionError.SessionNotFound({ id })
    const header = yield* decodeHeader(id, row.header)
    const events = yield* decodeEvents(id, yield* s.eventRows(id))
    return { header, events, tornTailDropped: 0 } satisfies StoredSession
  }).pipe(
    Effect.catchTag("SqlError", (error) =>
      Effect.fail(persistenceError(`reading session ${JSON.stringify(id)}`)(error)))
  )

/** DUR-05: the stored session's size as the file store counts it. */
const storedBytes = (s: SqlLayer, id: SessionId) =>
  s.sizeOf(id).pipe(
    Effect.map((row) => (row.header_bytes ?? 0) + (row.event_bytes ?? 0)),
    Effect.catchTags({
      // an aggregate without GROUP BY answers one row, always
      NoSuchElementException: Effect.die,
      ParseError: (error) => Effect.fail(malformedRow(`the size of session ${JSON.stringify(id)}`)(error))
    }),
    Effect.catchTag("SqlError", (error) =>
      Effect.fail(persistenceError(`measuring session ${JSON.stringify(id)}`)(error)))
  )

/**
 * The batch's rows, encoded and measured in the appending fiber and before the shared transaction
 * (DUR-04, DUR-05): a batch that cannot be stored fails alone and writes nothing. A batch that is
 * also misplaced fails `SessionConflict`, as on the other layers (DUR-09).
 */
const rowsOf = (
  s: SqlLayer,
  id: SessionId,
  state: WriterState,
  events: Arr.NonEmptyReadonlyArray<SessionEvent>
): Either.Either<EncodedBatch, WriteError> => {
  const refuse = (error: WriteError) =>
    Either.left(events[0].seq !== state.nextSeq ? conflict(id, events[0].seq, state.nextSeq) : error)
  const records = recordSize.encodeRecords(events, s.maxEventBytes)
  if (Either.isLeft(records)) return refuse(records.left)
  const bytes = recordSize.recordsBytes(records.right)
  const full = recordSize.overLimit(id, state.bytes, bytes, s.maxSessionBytes)
  if (full !== undefined) return refuse(full)
  const encoded = Arr.map(events, (event, i): committer.EventRow => ({
    session_id: id,
    seq: event.seq,
    event_time: event.time,
    event_type: event.type,
    record: records.right[i]!
  }))
  return Either.right({ rows: encoded, bytes })
}

/** PERS-02: one batch of the writer, contiguous, handed to the committer (SES-02). */
const appendSql = (
  s: SqlLayer,
  held: lease.Lease,
  state: WriterState,
  events: Arr.NonEmptyReadonlyArray<SessionEvent>
): Effect.Effect<void, WriteError> =>
  Effect.suspend(() => {
    const id = held.id
    if (state.isClosed || state.isLost) return Effect.fail(conflict(id, events[0].seq, state.nextSeq))
    for (let i = 1; i < events.length; i++) {
      const seq = events[i]!.seq
      if (seq !== events[0].seq + i) return Effect.fail(conflict(id, seq, events[0].seq + i))
    }
    const batch = rowsOf(s, id, state, events)
    if (Either.isLeft(batch)) return Effect.fail(batch.left)
    return s.commits.submit(held, batch.right.rows).pipe(
      Effect.flatMap((length) =>
        Effect.sync(() => {
          state.nextSeq = length
          state.bytes += batch.right.bytes
        })
      )
    )
  })

/**
 * PKG-03's rollback of a create: refuses new appends, then deletes the session's rows, only while the
 * lease is ours (a writer that lost it must not delete its successor's session).
 */
const discardSql = (
  s: SqlLayer,
  held: lease.Lease,
  state: WriterState
): Effect.Effect<void, SessionError.PersistenceError> =>
  Effect.suspend(() => {
    if (state.isClosed) return Effect.void
    state.isClosed = true
    const { sql } = s
    const id = held.id
    return sql.withTransaction(Effect.gen(function*() {
      const released = yield* sql<{ readonly token: string }>`DELETE FROM effect_agent_leases
        WHERE session_id = ${id} AND token = ${held.token} RETURNING token`
      if (released.length === 0) return
      yield* sql`DELETE FROM effect_agent_events WHERE session_id = ${id}`
      yield* sql`DELETE FROM effect_agent_sessions WHERE session_id = ${id}`
    })).pipe(
      Effect.catchTag("SqlError", (error) =>
      Effect.fail(persistenceError(`discarding session ${JSON.stringify(id)}`)(error)))
    )
  })

/** The writer of one session; appends are serialized (the session's writer fiber batches them, SES-02). */
const makeWriter = Effect.fnUntraced(function*(
  s: SqlLayer,
  held: lease.Lease,
  start: { readonly nextSeq: number; readonly bytes: number },
  isCreateMode: boolean
) {
  const state: WriterState = { nextSeq: start.nextSeq, bytes: start.bytes, isClosed: false, isLost: false }
  // one batch of this writer at a time (the committer takes one per writer)
  const permit = lock.make()
  yield* lease.keepAlive(s.leases, held, {
    isClosed: () => state.isClosed,
    onLost: () => {
      state.isLost = true
    }
  }).pipe(Effect.interruptible, Effect.forkScoped)
  // Finalizers run in reverse: wait for the batch in flight and refuse new ones, stop renewing, then
  // release the lease (registered by the caller earlier).
  yield* Effect.addFinalizer(() => permit.withLock(Effect.sync(() => (state.isClosed = true))))
  return {
    // no span per append (as in the file writer): the commit span, linked to its callers, covers it
    append: (events) => permit.withLock(appendSql(s, held, state, events)),
    nextSeq: Effect.sync(() => state.nextSeq),
    // uninterruptible: once it has refused new appends it also deletes the rows (a retry would not)
    discard: isCreateMode
      ? permit.withLock(discardSql(s, held, state)).pipe(
        Effect.uninterruptible,
        Effect.withSpan("SqlSessionPersistence.discard")
      )
      : discardRefused(held.id)
  } satisfies SessionWriter
})

/**
 * PERS-03: a new session's header row and its writer, under its lease. A plain generator that
 * `create`'s traced body delegates to (`yield*`): no Effect of its own.
 */
function* createIn(s: SqlLayer, header: SessionHeader) {
  const id = header.id
  const record = headerRecord(header)
  if (Either.isLeft(decodeHeader(id, record))) {
    return yield* Effect.dieMessage(`bug: the header of session ${JSON.stringify(id)} would not read back`)
  }
  return yield* inWriterScope(Effect.gen(function*() {
    const held = yield* takeLease(s, id)
    const now = yield* Clock.currentTimeMillis
    const inserted = yield* s.sql`INSERT INTO effect_agent_sessions (session_id, header, updated_at)
      VALUES (${id}, ${record}, ${now}) ON CONFLICT (session_id) DO NOTHING RETURNING session_id`.pipe(
      Effect.catchTag("SqlError", (error) =>
        Effect.fail(persistenceError(`creating session ${JSON.stringify(id)}`)(error)))
    )
    if (inserted.length === 0) return yield* new SessionError.SessionAlreadyExists({ id })
    return yield* makeWriter(s, held, { nextSeq: 0, bytes: recordSize.lineBytes(record) }, true)
  }))
}

/** The list entry of a row (DUR-08): its summary, or what keeps it from being read. */
const entryOf = (row: SummaryRow): Effect.Effect<ListEntry> => {
  const where = `the session row ${JSON.stringify(row.session_id)}`
  const id = sessionId(row.session_id)
  if (Either.isLeft(id)) return unreadable(row.session_id, `not a valid session id (${id.left.message})`, where)
  const header = decodeHeader(id.right, row.header)
  if (Either.isLeft(header)) return unreadable(row.session_id, header.left.message, where)
  return Effect.succeed({
    _tag: "SessionSummary",
    id: id.right,
    header: header.right,
    eventCount: row.event_count,
    updatedAt: row.updated_at
  })
}

/** PERS-03: every stored session, page by page in id order (DUR-08: unreadable rows listed as such). */
const listIn = (s: SqlLayer): Stream.Stream<ListEntry, SessionError.PersistenceError> =>
  Stream.paginateChunkEffect(
    "",
    (after) =>
      Effect.map(
        s.page(after).pipe(
          Effect.catchTag("SqlError", (error) => Effect.fail(persistenceError("listing sessions")(error)))
        ),
        (rows): [Chunk.Chunk<SummaryRow>, Option.Option<string>] => {
          const last = rows[rows.length - 1]
          return [
            Chunk.unsafeFromArray(rows),
            rows.length === LIST_PAGE && last !== undefined ? Option.some(last.session_id) : Option.none()
          ]
        }
      )
  ).pipe(
    Stream.mapEffect(entryOf),
    Stream.withSpan("SqlSessionPersistence.list")
  )

/**
 * Deletes this id's own rows (DUR-07: never a header that names another session), holding the lease:
 * a session that has a writer is refused, and none can open it halfway through.
 */
const removeIn = (s: SqlLayer, id: SessionId) =>
  Effect.scoped(Effect.flatMap(takeLease(s, id), () =>
    s.sql.withTransaction(Effect.gen(function*() {
      const row = yield* headerRow(s, id)
      if (row === undefined) return
      const named = typeof row.header === "string" ? namedSession(row.header) : undefined
      if (named !== undefined && named !== id) {
        return yield* new SessionError.SessionCorrupt({
          id,
          line: 1,
          reason: `its header names session ${JSON.stringify(named)}, so it was not removed`
        })
      }
      yield* s.sql`DELETE FROM effect_agent_events WHERE session_id = ${id}`
      yield* s.sql`DELETE FROM effect_agent_sessions WHERE session_id = ${id}`
    })).pipe(
      Effect.catchTag("SqlError", (error) =>
      Effect.fail(persistenceError(`removing session ${JSON.stringify(id)}`)(error)))
    )))

// -------------------------------------------------------------------------------------------------
// DOC-05: past a corrupt record

const utf8 = new TextEncoder()

/** A stored record's text as the backup holds it (a record that is not text is shown as JSON). */
const recordText = (record: unknown): string => (typeof record === "string" ? record : JSON.stringify(record) ?? "")

/**
 * The cut of a corrupt log: the row at the corrupt position and every one after it (the rows before
 * it hold seqs 0..seq-1, so the `seq` column of each dropped row is at least `seq`); refused if a
 * dropped record is of a newer format. Sizes count as the file store's lines do.
 */
const corruptTailOf = (s: SqlLayer, id: SessionId, corrupt: SessionError.SessionCorrupt) =>
  Effect.gen(function*() {
    if (corrupt.line <= 1) return yield* corrupt
    const seq = corrupt.line - 2
    const what = `reading session ${JSON.stringify(id)}`
    const header = yield* Effect.mapError(headerRow(s, id), persistenceError(what))
    const rows = yield* Effect.mapError(s.eventRows(id), persistenceError(what))
    const lines = rows.map((row) => `${recordText(row.record)}\n`)
    const kept = lines.slice(0, seq)
    const dropped = lines.slice(seq)
    const newer = truncation.newerFormatAmong(
      id,
      dropped.map((text, i) => ({ line: corrupt.line + i, text: text.slice(0, -1) }))
    )
    if (newer !== undefined) return yield* newer
    const data = utf8.encode(dropped.join(""))
    return {
      id,
      line: corrupt.line,
      seq,
      reason: corrupt.reason,
      keptEvents: seq,
      keptBytes: utf8.encode(`${recordText(header?.header)}\n${kept.join("")}`).length,
      dropped: dropped.map((text, i) => ({ line: corrupt.line + i, bytes: utf8.encode(text).length })),
      droppedBytes: data.length,
      data
    } satisfies CorruptTail
  })

/**
 * DOC-05: under the session's lease, a log whose read fails `SessionCorrupt` loses the rows from the
 * corrupt one on (in one transaction) once `keep` has them.
 */
const truncateIn = <E>(s: SqlLayer, id: SessionId, keep: (cut: CorruptTail) => Effect.Effect<void, E>) =>
  Effect.scoped(Effect.gen(function*() {
    const stored = yield* Effect.mapError(headerRow(s, id), persistenceError(`reading session ${JSON.stringify(id)}`))
    if (stored === undefined) return yield* new SessionError.SessionNotFound({ id })
    yield* takeLease(s, id)
    const corrupt = yield* readLog(s, id).pipe(
      Effect.as(undefined),
      Effect.catchTag("SessionCorrupt", (error) => Effect.succeed(error))
    )
    if (corrupt === undefined) return Option.none<CorruptTail>()
    const cut = yield* corruptTailOf(s, id, corrupt)
    yield* keep(cut)
    yield* s.sql`DELETE FROM effect_agent_events WHERE session_id = ${id} AND seq >= ${cut.seq}`.pipe(
      Effect.mapError(persistenceError(`truncating session ${JSON.stringify(id)}`))
    )
    yield* Effect.logWarning(
      `effect-agent: session ${id}: dropped ${cut.dropped.length} record(s) (${cut.droppedBytes} bytes) from seq ` +
        `${cut.seq}, the first corrupt record (${cut.reason})`
    )
    return Option.some(cut)
  }))

/** The service over the layer's state; each method traced (`Effect.fn`). */
const serviceOf = (s: SqlLayer) => {
  const exists = Effect.fn("SqlSessionPersistence.exists")(function*(id: SessionId) {
      const row = yield* headerRow(s, id).pipe(
      Effect.catchTag("SqlError", (error) =>
      Effect.fail(persistenceError(`checking session ${JSON.stringify(id)}`)(error)))
    )
    return row !== undefined
  })
  return SessionPersistence.of({
    create: Effect.fn("SqlSessionPersistence.create")(function*(header: SessionHeader) {
      return yield* createIn(s, header)
    }),
    openWrite: Effect.fn("SqlSessionPersistence.openWrite")(function*(id: SessionId) {
          // Spares a missing id the lease; the read below is the authoritative check.
      if (!(yield* exists(id))) return yield* new SessionError.SessionNotFound({ id })
      return yield* inWriterScope(Effect.gen(function*() {
        const held = yield* takeLease(s, id)
        const stored = yield* readLog(s, id)
        const bytes = yield* storedBytes(s, id)
        const writer = yield* makeWriter(s, held, { nextSeq: stored.events.length, bytes }, false)
        return { writer, stored }
      }))
    }),
    read: Effect.fn("SqlSessionPersistence.read")(function*(id: SessionId) {
          return yield* readLog(s, id)
    }),
    list: listIn(s),
    exists,
    remove: Effect.fn("SqlSessionPersistence.remove")(function*(id: SessionId) {
      if (!(yield* exists(id))) return
      yield* removeIn(s, id)
    }),
    truncateAtCorruption: <E>(id: SessionId, keep: (cut: CorruptTail) => Effect.Effect<void, E>) =>
      Effect.suspend(() => truncateIn(s, id, keep)).pipe(
        Effect.withSpan("SqlSessionPersistence.truncateAtCorruption")
      ),
    // HOST-04: recovery summaries as a query
    summaries: hostSqlSummary.summaries(s.sql)
  })
}

export const make = (input: Options | undefined) =>
  Effect.gen(function*() {
    // CORE-08: the options decoded once by their Schema; a bad one fails the layer naming each field
    const options = yield* internalOptions.decodeSqlOptions(input)
    const client = yield* SqlClient
    // Our row names are fixed: a client that transforms names (camelCase, …) must not touch them.
    const sql = client.withoutTransforms()
    const dialect = dialectOf(sql)
    if (dialect === undefined) {
      return yield* new SessionError.PersistenceError({
        reason: "SqlSessionPersistence runs on SQLite and Postgres clients; this SqlClient is of another dialect"
      })
    }
    const ttlMillis = Duration.toMillis(options.leaseTtl ?? Duration.seconds(30))
    const leases = leaseContextOf(options, sql, ttlMillis)
    yield* prepareDatabase(options, sql, dialect)
    return serviceOf({
      sql,
      leases,
      // One transaction (one sync) for the batches of every session waiting at that moment (SES-02).
      commits: yield* committer.make({ sql, ttlMillis }),
      maxEventBytes: options.limits.maxEventBytes,
      maxSessionBytes: options.limits.maxSessionBytes,
      sizeOf: sizeQuery(sql, dialect),
      ...statementsOf(sql)
    })
  })

/** PKG-04: removes the writer lease of `id`, whoever holds it, with a warning naming the holder. */
export const breakLease = (id: SessionId): Effect.Effect<void, SessionError.PersistenceError, SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient).withoutTransforms()
    yield* Effect.gen(function*() {
      const leases = yield* rows(
        SqlSchema.findAll({
          Request: Schema.String,
          Result: LeaseRow,
          execute: (id) =>
            sql`SELECT session_id, token, holder, expires_at FROM effect_agent_leases WHERE session_id = ${id}`
        }),
        (id) => `the lease of session ${JSON.stringify(id)}`
      )(id)
      // DUR-07: only this id's own lease, also under a collation that folds case
      const row = leases.find((candidate) => candidate.session_id === id)
      if (row === undefined) return
      yield* Effect.logWarning(
        `effect-agent: breaking the lock of session ${JSON.stringify(id)} held by ${row.holder} ` +
          `(lease valid until ${new Date(row.expires_at).toISOString()})`
      )
      yield* sql`DELETE FROM effect_agent_leases WHERE session_id = ${id} AND token = ${row.token}`
    }).pipe(
      Effect.catchTag("SqlError", (error) =>
        Effect.fail(persistenceError(`breaking the lock of session ${JSON.stringify(id)}`)(error)))
    )
  })
