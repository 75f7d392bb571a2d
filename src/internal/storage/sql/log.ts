/**
 * Rows of the SQL persistence to and from the durable vocabulary: records are JSON text, validated
 * through the event codec on the way back (validation only, MSG-00), and `SqlError` is translated
 * to `PersistenceError` at this boundary.
 *
 * A reported `line` counts records the way the JSONL file does: 1 is the header, an event's line
 * is its seq + 2.
 *
 * @internal
 */
import { SqlError } from "@effect/sql/SqlError"
import type { ParseResult } from "effect"
import { Either, Schema } from "effect"
import type { SessionId } from "../../../Message.js"
import * as SessionError from "../../../SessionError.js"
import type { SessionEvent, SessionHeader } from "../../../SessionEvent.js"
import { headerOf, parseJson, recordError, storedEvent } from "../../log/eventCodec.js"

/**
 * An integer column as the drivers answer it (CORE-09, rows through `SqlSchema`): a number, a
 * numeric string (Postgres `BIGINT`, `COUNT`) or a bigint, as a number.
 *
 * @internal
 */
export const SqlNumber: Schema.Schema<number, number | string | bigint> = Schema.Union(
  Schema.Number,
  Schema.NumberFromString,
  Schema.transform(Schema.BigIntFromSelf, Schema.Number, {
    strict: true,
    decode: (n) => Number(n),
    encode: (n) => BigInt(n)
  })
)

/**
 * The row of an event: its `seq` column, and its record as JSON text, validated by the event codec.
 *
 * @internal
 */
export const EventRow = Schema.Struct({ seq: SqlNumber, record: Schema.Unknown })

/** @internal */
export type EventRow = typeof EventRow.Type

/**
 * A row the database answered that does not have the shape our statements select: reported as the
 * `SqlError` of the statement (and translated to `PersistenceError` with it), naming the problem.
 *
 * @internal
 */
export const malformedRow = (what: string) => (error: ParseResult.ParseError): SqlError =>
  new SqlError({ cause: error, message: `${what}: the database answered a row of an unexpected shape (${error.message})` })

const describeCause = (cause: unknown): string => {
  if (cause instanceof Error) return cause.message
  return typeof cause === "string" ? cause : ""
}

/** Translates a `SqlError` at the module boundary. @internal */
export const persistenceError = (what: string) => (error: SqlError): SessionError.PersistenceError => {
  const detail = describeCause(error.cause)
  return new SessionError.PersistenceError({
    reason: `${what}: ${error.message}${detail !== "" && detail !== error.message ? ` (${detail})` : ""}`,
    cause: error
  })
}

/** A batch that does not start where the stored log ends, or a writer that lost its lease (PERS-02). @internal */
export const conflict = (id: SessionId, expectedSeq: number, actualSeq: number): SessionError.SessionConflict =>
  new SessionError.SessionConflict({ id, expectedSeq, actualSeq })

/** The header record as stored. @internal */
export const headerRecord = (header: SessionHeader): string => JSON.stringify(header)

/**
 * Validates a stored header: JSON, a supported version, and the session's own id.
 *
 * @internal
 */
export const decodeHeader = (
  id: SessionId,
  text: unknown
): Either.Either<SessionHeader, SessionError.SessionCorrupt | SessionError.SessionFormatUnsupported> =>
  headerOf(id, text, "row")

/**
 * SEC-07: a row whose `seq` column is not the seq of the event it holds. The appends of a writer
 * take the column's largest value as the log's length, so such a row would make every later append
 * conflict; it is reported where it is read (resume, `verify`, `repair`), naming both seqs.
 */
const misplacedRow = (id: SessionId, seq: number, column: number): SessionError.SessionCorrupt =>
  new SessionError.SessionCorrupt({
    id,
    line: seq + 2,
    reason: `the row of the event of seq ${seq} is stored with seq ${column} in its seq column (the column and the ` +
      `record disagree, so the log's length cannot be told and every append would conflict); set that row's seq ` +
      `column back to ${seq} once you have checked the row`
  })

/**
 * Validates the event rows of a session, in seq order. Rows are written in transactions, so
 * nothing is ever torn: any bad record fails (PERS-03: committed data is never silently dropped),
 * and so does a row whose `seq` column disagrees with its record (SEC-07).
 *
 * @internal
 */
export const decodeEvents = (
  id: SessionId,
  rows: ReadonlyArray<EventRow>
): Either.Either<ReadonlyArray<SessionEvent>, SessionError.SessionCorrupt | SessionError.SessionFormatUnsupported> => {
  const events: Array<SessionEvent> = new Array(rows.length)
  for (let i = 0; i < rows.length; i++) {
    const json = parseJson(rows[i]!.record)
    const event = Either.isLeft(json)
      ? Either.left({ _tag: "Invalid" as const, reason: json.left })
      : storedEvent(json.right, i)
    if (Either.isLeft(event)) return Either.left(recordError(id, i + 2, event.left))
    if (rows[i]!.seq !== i) return Either.left(misplacedRow(id, i, rows[i]!.seq))
    events[i] = event.right
  }
  return Either.right(events)
}
