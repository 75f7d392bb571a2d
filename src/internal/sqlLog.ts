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
import type { SqlError } from "@effect/sql/SqlError"
import { Either } from "effect"
import type { SessionId } from "../Message.js"
import * as SessionError from "../SessionError.js"
import type { SessionEvent, SessionHeader } from "../SessionEvent.js"
import { recordError, storedEvent, storedHeader } from "./eventCodec.js"

/** @internal */
export interface EventRow {
  readonly record: string
}

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

const parseJson = (text: unknown): Either.Either<unknown, string> => {
  if (typeof text !== "string") return Either.left(`not JSON text (a ${typeof text})`)
  try {
    return Either.right(JSON.parse(text))
  } catch (e) {
    return Either.left(`not JSON (${e instanceof Error ? e.message : String(e)})`)
  }
}

/** The header record as stored. @internal */
export const headerRecord = (header: SessionHeader): string => JSON.stringify(header)

/** An event record as stored. @internal */
export const eventRecord = (event: SessionEvent): string => JSON.stringify(event)

/**
 * Validates a stored header: JSON, a supported version, and the session's own id.
 *
 * @internal
 */
export const decodeHeader = (
  id: SessionId,
  text: unknown
): Either.Either<SessionHeader, SessionError.SessionCorrupt | SessionError.SessionFormatUnsupported> => {
  const json = parseJson(text)
  if (Either.isLeft(json)) return Either.left(recordError(id, 1, { _tag: "Invalid", reason: json.left }))
  const header = storedHeader(json.right)
  if (Either.isLeft(header)) return Either.left(recordError(id, 1, header.left))
  if (header.right.id !== id) {
    return Either.left(recordError(id, 1, {
      _tag: "Invalid",
      reason: `the header names session ${JSON.stringify(header.right.id)}, not its row's`
    }))
  }
  return Either.right(header.right)
}

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
