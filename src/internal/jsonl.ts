/**
 * The JSONL session file: the header record on line 1, then one event per line (PERS-05). Reading
 * tells a torn tail (a crash mid-write) from corruption (PERS-03).
 *
 * Reading is the resume path of every session, so it is plain synchronous code over the whole
 * file: one decode of the bytes, one split, one `JSON.parse` and one validation per line.
 *
 * @internal
 */
import { Either } from "effect"
import type { SessionId } from "../Message.js"
import type * as SessionError from "../SessionError.js"
import type { SessionEvent, SessionHeader } from "../SessionEvent.js"
import { acceptParsedEvent, headerOf, recordError, storedEvent } from "./eventCodec.js"

/** @internal */
export interface ParsedLog {
  readonly header: SessionHeader
  readonly events: ReadonlyArray<SessionEvent>
  /** How many trailing records were torn and dropped (0 or 1). */
  readonly tornTailDropped: number
  /** Byte length of the records kept: where the next append goes. */
  readonly validBytes: number
}

const NEWLINE = 0x0a
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })
const encoder = new TextEncoder()

/** @internal */
export const encode = (text: string): Uint8Array => encoder.encode(text)

/** The header record as written on line 1, newline included. @internal */
export const headerLine = (header: SessionHeader): string => JSON.stringify(header) + "\n"

/**
 * The lines of a batch, newline-terminated. Throws (a defect) if an event is not JSON, which the
 * session's validation rules out.
 *
 * @internal
 */
export const eventLines = (events: ReadonlyArray<SessionEvent>): string => {
  let out = ""
  for (const event of events) out += JSON.stringify(event) + "\n"
  return out
}

/**
 * Splits the terminated part of the file into lines. Invalid UTF-8 is located per line so that it
 * reports like any other unreadable record.
 */
const splitLines = (bytes: Uint8Array): ReadonlyArray<string | undefined> => {
  try {
    const lines = strictUtf8.decode(bytes).split("\n")
    lines.pop()
    return lines
  } catch {
    const lines: Array<string | undefined> = []
    let start = 0
    for (let i = 0; i < bytes.length; i++) {
      if (bytes[i] !== NEWLINE) continue
      try {
        lines.push(strictUtf8.decode(bytes.subarray(start, i)))
      } catch {
        lines.push(undefined)
      }
      start = i + 1
    }
    return lines
  }
}

/**
 * Parses a session file.
 *
 * - Bytes after the last newline are an unterminated record: torn, dropped.
 * - Otherwise a last event line that is not JSON or not a valid event is torn and dropped.
 * - Any other unreadable or invalid record fails `SessionCorrupt{line}` (1-based, header = 1); an
 *   unknown core type or a newer header version fails `SessionFormatUnsupported` wherever it is,
 *   since that record was written on purpose by a newer version.
 *
 * @internal
 */
export const parseLog = (
  id: SessionId,
  bytes: Uint8Array
): Either.Either<ParsedLog, SessionError.SessionCorrupt | SessionError.SessionFormatUnsupported> => {
  const terminated = bytes.lastIndexOf(NEWLINE) + 1
  if (terminated === 0) {
    return Either.left(recordError(id, 1, {
      _tag: "Invalid",
      reason: bytes.length === 0
        ? "the file is empty: the creation of this session did not complete"
        : "the header record is unterminated: the creation of this session did not complete"
    }))
  }
  const lines = splitLines(bytes.subarray(0, terminated))

  const headerText = lines[0]
  const header = headerText === undefined
    ? Either.left(recordError(id, 1, { _tag: "Invalid", reason: "not UTF-8" }))
    : headerOf(id, headerText, "file")
  if (Either.isLeft(header)) return Either.left(header.left)

  let tornTailDropped = terminated < bytes.length ? 1 : 0
  let validBytes = terminated
  const last = lines.length - 1
  const events: Array<SessionEvent> = []
  for (let i = 1; i <= last; i++) {
    // The common case allocates nothing but the parsed record: parse, check by hand, freeze in place.
    const text = lines[i]
    let json: unknown
    let notJson: string | undefined
    if (text === undefined) {
      notJson = "not UTF-8"
    } else {
      try {
        json = JSON.parse(text)
      } catch (e) {
        notJson = `not JSON (${e instanceof Error ? e.message : String(e)})`
      }
    }
    if (notJson === undefined) {
      const accepted = acceptParsedEvent(json, i - 1)
      if (accepted !== undefined) {
        events.push(accepted)
        continue
      }
    }
    const event = notJson !== undefined
      ? Either.left({ _tag: "Invalid" as const, reason: notJson })
      : storedEvent(json, i - 1)
    if (Either.isRight(event)) {
      events.push(event.right)
      continue
    }
    if (i === last && tornTailDropped === 0 && event.left._tag === "Invalid") {
      tornTailDropped = 1
      validBytes = bytes.lastIndexOf(NEWLINE, terminated - 2) + 1
      break
    }
    return Either.left(recordError(id, i + 1, event.left))
  }
  return Either.right({ header: header.right, events, tornTailDropped, validBytes })
}
