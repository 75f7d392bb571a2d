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
import type { SessionId } from "../Message.js"
import * as SessionError from "../SessionError.js"
import type { SessionEvent, SessionHeader } from "../SessionEvent.js"
import { headerOf, parseJson, recordError, storedEvent } from "./eventCodec.js"

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

/** The row of an event: its record is JSON text, validated by the event codec. @internal */
export const EventRow = Schema.Struct({ record: Schema.Unknown })

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
 * Validates the event rows of a session, in seq order. Rows are written in transactions, so
 * nothing is ever torn: any bad record fails (PERS-03: committed data is never silently dropped).
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
    events[i] = event.right
  }
  return Either.right(events)
}
