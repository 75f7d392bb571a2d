/**
 * Encoding at append and the size limits every persistence layer enforces (DUR-05, DUR-09).
 *
 * All backends count bytes the same way, so that what one refuses, all refuse: an event's size is
 * the UTF-8 length of its record line as the file store writes it (`JSON.stringify(event)` and a
 * newline); a session's size is its header line plus its event lines (on the file store, the
 * file's size). SQL and memory count the same lines without writing the newline.
 *
 * Encoding happens here, per batch and before anything is written (DUR-04): a value that cannot be
 * encoded (a throwing `toJSON` or getter, a BigInt, a cycle, nesting too deep for the encoder, a
 * record longer than a string can hold) or is over `maxEventBytes` fails its own append with
 * `InvalidEventData` and never reaches a shared write.
 *
 * @internal
 */
import { Either } from "effect"
import * as SessionError from "../../SessionError.js"
import type { SessionEvent, SessionHeader } from "../../SessionEvent.js"

/** @internal */
export { defaultMaxEventBytes, defaultMaxSessionBytes } from "../options.js"
/** @internal */
export type { Limits } from "../options.js"

const NEWLINE = 0x0a

const encoder = new TextEncoder()

/**
 * The UTF-8 length of `text`, counted without encoding it (and without `node:buffer`: this module is
 * reachable from the package index, which imports only `effect` and `@effect/platform`, PKG-01). A
 * surrogate pair is 4 bytes; a lone surrogate is written as U+FFFD, 3 bytes, as `TextEncoder` does.
 *
 * @internal
 */
export const utf8Length = (text: string): number => {
  const length = text.length
  let bytes = length
  for (let i = 0; i < length; i++) {
    const unit = text.charCodeAt(i)
    if (unit < 0x80) continue
    if (unit < 0x800) {
      bytes += 1
    } else if ((unit & 0xfc00) === 0xd800 && i + 1 < length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      // The pair's two units count 2; its 4 bytes need 2 more.
      bytes += 2
      i++
    } else {
      bytes += 2
    }
  }
  return bytes
}

/** The UTF-8 length of a record line whose JSON text is `json` (newline included). @internal */
export const lineBytes = (json: string): number => utf8Length(json) + 1

/** The size of the header line (the first line of every session). @internal */
export const headerBytes = (header: SessionHeader): number => lineBytes(JSON.stringify(header))

/** The lines' size of records already encoded. @internal */
export const recordsBytes = (records: ReadonlyArray<string>): number => {
  let bytes = 0
  for (let i = 0; i < records.length; i++) bytes += lineBytes(records[i]!)
  return bytes
}

/** Describes whatever a `toJSON`, getter or proxy threw, without trusting it. */
const describeThrown = (thrown: unknown): string => {
  try {
    if (thrown instanceof Error) return `${thrown.name}: ${thrown.message}`
    return String(thrown)
  } catch {
    return "an exception that cannot be described"
  }
}

/** The event's type for the error, read as defensively as the rest of a value that failed to encode. */
const typeOf = (event: unknown): string => {
  try {
    const type = (event as { readonly type?: unknown } | null)?.type
    return typeof type === "string" ? type : String(type)
  } catch {
    return "(unreadable type)"
  }
}

const invalid = (event: unknown, reason: string) => new SessionError.InvalidEventData({ type: typeOf(event), reason })

const notEncodable = (event: unknown, thrown: unknown, maxEventBytes: number): SessionError.InvalidEventData => {
  const description = describeThrown(thrown)
  if (thrown instanceof RangeError && /invalid string length/i.test(description)) {
    return invalid(
      event,
      `its JSON record is longer than a JavaScript string can hold, far over maxEventBytes (${maxEventBytes} bytes)`
    )
  }
  if (thrown instanceof RangeError && /call stack/i.test(description)) {
    return invalid(event, "it is nested too deeply to be encoded as JSON")
  }
  return invalid(event, `it cannot be encoded as JSON (${description})`)
}

/**
 * Why the fields SQL stores in columns of their own (`event_type`, `event_time`) could not be
 * stored there, if they could not: Postgres refuses NUL in text and a fraction in a `BIGINT`,
 * where a file would take them (DUR-09: refused alike everywhere). The session's codec refuses
 * these before a writer sees them; this guards the writer when it is called directly.
 */
const columnProblem = (event: SessionEvent): string | undefined => {
  const { time, type } = event as { readonly time: unknown; readonly type: unknown }
  if (typeof type !== "string") return "its type is not a string"
  if (type.includes("\u0000")) return "its type contains NUL (\\u0000), which Postgres cannot store"
  if (!Number.isSafeInteger(time) || (time as number) < 0) return "its time is not a non-negative integer"
  return undefined
}

/**
 * The JSON text of one event's record, or why it cannot be stored. UTF-8 takes at most 3 bytes
 * per UTF-16 unit, so only a record within a factor of 3 of the limit is measured exactly.
 *
 * @internal
 */
export const encodeEvent = (
  event: SessionEvent,
  maxEventBytes: number
): string | SessionError.InvalidEventData => {
  let json: unknown
  let problem: string | undefined
  try {
    json = JSON.stringify(event)
    problem = columnProblem(event)
  } catch (thrown) {
    return notEncodable(event, thrown, maxEventBytes)
  }
  if (typeof json !== "string") return invalid(event, "it is not a JSON value")
  if (problem !== undefined) return invalid(event, problem)
  if (json.length * 3 + 1 > maxEventBytes) {
    const bytes = lineBytes(json)
    if (bytes > maxEventBytes) {
      return invalid(
        event,
        `its record is ${bytes} bytes (UTF-8 JSON and its newline), over maxEventBytes (${maxEventBytes} bytes); ` +
          "store large content elsewhere and log a reference to it, or raise maxEventBytes"
      )
    }
  }
  return json
}

/**
 * The JSON text of each event's record, in order, or the first event that cannot be stored.
 *
 * @internal
 */
export const encodeRecords = (
  events: ReadonlyArray<SessionEvent>,
  maxEventBytes: number
): Either.Either<Array<string>, SessionError.InvalidEventData> => {
  const records: Array<string> = new Array(events.length)
  for (let i = 0; i < events.length; i++) {
    const json = encodeEvent(events[i]!, maxEventBytes)
    if (typeof json !== "string") return Either.left(json)
    records[i] = json
  }
  return Either.right(records)
}

/**
 * The lines of records already encoded and measured (`bytes` from {@link recordsBytes}), as the
 * file store writes them: each record's UTF-8 bytes and a newline, in one buffer. Called once the
 * batch is known to fit its session, so a refused batch is never copied.
 *
 * @internal
 */
export const linesOf = (records: ReadonlyArray<string>, bytes: number): Uint8Array => {
  const out = new Uint8Array(bytes)
  let offset = 0
  for (let i = 0; i < records.length; i++) {
    offset += encoder.encodeInto(records[i]!, out.subarray(offset)).written
    out[offset++] = NEWLINE
  }
  if (offset !== bytes) throw new Error(`bug: ${records.length} record lines measured ${bytes} bytes, wrote ${offset}`)
  return out
}

/**
 * `SessionFull` when a batch of `added` bytes would take a session of `size` bytes over `limit`.
 *
 * @internal
 */
export const overLimit = (
  id: string,
  size: number,
  added: number,
  limit: number
): SessionError.SessionFull | undefined =>
  size + added > limit ? new SessionError.SessionFull({ id, size: size + added, limit }) : undefined
