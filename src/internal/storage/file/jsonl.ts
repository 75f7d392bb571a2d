/**
 * The JSONL session file: the header record on line 1, then one event per line (PERS-05). Reading
 * tells a torn tail (a crash mid-write) from corruption (PERS-03, DUR-11).
 *
 * Files are read by streaming (DUR-05): the reader is fed the file chunk by chunk and never holds
 * more than one chunk and one unfinished line, so a session of any size that was accepted stays
 * readable. Reading is the resume path of every session, so the per-record work stays plain
 * synchronous code: the complete lines of a chunk are decoded at once and split, then each is
 * `JSON.parse`d and validated (the fast path `acceptParsedEvent` first).
 *
 * @internal
 */
import type { FileSystem } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import { Effect, Either } from "effect"
import type { SessionId } from "../../../Message.js"
import type * as SessionError from "../../../SessionError.js"
import type { SessionEvent, SessionHeader } from "../../../SessionEvent.js"
import { acceptParsedEvent, headerOf, recordError, storedEvent } from "../../log/eventCodec.js"

/** @internal */
export interface ParsedLog {
  readonly header: SessionHeader
  readonly events: ReadonlyArray<SessionEvent>
  /** How many trailing records were torn and dropped (0 or 1). */
  readonly tornTailDropped: number
  /** Byte length of the records kept: where the next append goes. */
  readonly validBytes: number
}

/** Why a stored file was refused. @internal */
export type LogError = SessionError.SessionCorrupt | SessionError.SessionFormatUnsupported

/** How many bytes one read of a session file asks for, unless the layer says otherwise. @internal */
export const DEFAULT_READ_CHUNK_BYTES = 1024 * 1024

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
 * The session a stored header record names, if it is a JSON object with a string `id` — whatever
 * else is wrong with it (DUR-07: a record that names another session is never that session's).
 *
 * @internal
 */
export const namedSession = (text: string): string | undefined => {
  try {
    const json: unknown = JSON.parse(text)
    if (typeof json !== "object" || json === null) return undefined
    const id: unknown = (json as { readonly id?: unknown }).id
    return typeof id === "string" ? id : undefined
  } catch {
    return undefined
  }
}

// -------------------------------------------------------------------------------------------------
// The incremental reader (DUR-05)

/**
 * The state of one read of a session file: what was accepted so far, and the start of the line
 * the chunks fed so far end inside of.
 *
 * @internal
 */
export interface LogReader {
  readonly id: SessionId
  header: SessionHeader | undefined
  readonly events: Array<SessionEvent>
  /** The 1-based number of the next complete line (the header is line 1). */
  line: number
  /** Bytes of the complete lines so far, newlines included: where an unterminated tail starts. */
  terminated: number
  /** The unterminated line so far: copies of the chunk tails since the last newline. */
  carry: Array<Uint8Array>
  carryBytes: number
  /** Set by the first refused record; nothing is accepted after it. */
  failure: LogError | undefined
}

/** @internal */
export const makeReader = (id: SessionId): LogReader => ({
  id,
  header: undefined,
  events: [],
  line: 1,
  terminated: 0,
  carry: [],
  carryBytes: 0,
  failure: undefined
})

/** Decodes one line's bytes; `undefined` for bytes that are not UTF-8. */
const decodeLine = (bytes: Uint8Array): string | undefined => {
  try {
    return strictUtf8.decode(bytes)
  } catch {
    return undefined
  }
}

/** The message of an error JSON.parse threw. */
const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** Validates line 1: the header, naming this session (DUR-07). */
const acceptHeader = (reader: LogReader, text: string | undefined): void => {
  const header = text === undefined
    ? Either.left(recordError(reader.id, 1, { _tag: "Invalid", reason: "not UTF-8" }))
    : headerOf(reader.id, text, "file")
  if (Either.isLeft(header)) reader.failure = header.left
  else reader.header = header.right
}

/**
 * Accepts one complete line. Every complete record is validated: one that fails is corruption,
 * wherever it is (DUR-11) — only an unterminated tail can be torn.
 */
const acceptLine = (reader: LogReader, text: string | undefined): void => {
  const line = reader.line++
  if (line === 1) return acceptHeader(reader, text)
  const seq = line - 2
  // The common case allocates nothing but the parsed record: parse, check by hand, freeze in place.
  let json: unknown
  let notJson: string | undefined
  if (text === undefined) {
    notJson = "not UTF-8"
  } else {
    try {
      json = JSON.parse(text)
    } catch (e) {
      notJson = `not JSON (${messageOf(e)})`
    }
  }
  if (notJson === undefined) {
    const accepted = acceptParsedEvent(json, seq)
    if (accepted !== undefined) {
      reader.events.push(accepted)
      return
    }
  }
  const event = notJson !== undefined
    ? Either.left({ _tag: "Invalid" as const, reason: notJson })
    : storedEvent(json, seq)
  if (Either.isRight(event)) reader.events.push(event.right)
  else reader.failure = recordError(reader.id, line, event.left)
}

/**
 * Accepts the complete lines of `block` (which starts at a line start and ends with a newline).
 * One decode and one split for the whole block; bytes that are not UTF-8 are then located per
 * line, so they report like any other unreadable record.
 */
const acceptBlock = (reader: LogReader, block: Uint8Array): void => {
  let lines: Array<string> | undefined
  try {
    lines = strictUtf8.decode(block).split("\n")
  } catch {
    lines = undefined
  }
  if (lines !== undefined) {
    const count = lines.length - 1
    for (let i = 0; i < count && reader.failure === undefined; i++) acceptLine(reader, lines[i])
    return
  }
  let start = 0
  for (let i = 0; i < block.length && reader.failure === undefined; i++) {
    if (block[i] !== NEWLINE) continue
    acceptLine(reader, decodeLine(block.subarray(start, i)))
    start = i + 1
  }
}

/** The unterminated line so far followed by `head`, as one array. */
const joinCarry = (reader: LogReader, head: Uint8Array): Uint8Array => {
  if (reader.carryBytes === 0) return head
  const joined = new Uint8Array(reader.carryBytes + head.length)
  let at = 0
  for (const part of reader.carry) {
    joined.set(part, at)
    at += part.length
  }
  joined.set(head, at)
  return joined
}

/**
 * Feeds the next bytes of the file. Lines may span chunks, and a chunk may end inside a UTF-8
 * sequence: only bytes up to a newline are ever decoded, and a newline byte never occurs inside a
 * multi-byte sequence. `chunk` may be reused by the caller afterwards: what is kept is copied.
 *
 * @internal
 */
export const feed = (reader: LogReader, chunk: Uint8Array): void => {
  if (reader.failure !== undefined || chunk.length === 0) return
  const first = chunk.indexOf(NEWLINE)
  if (first === -1) {
    reader.carry.push(chunk.slice())
    reader.carryBytes += chunk.length
    return
  }
  // The line that was open when the chunk began ends at `first`.
  acceptLine(reader, decodeLine(joinCarry(reader, chunk.subarray(0, first))))
  reader.terminated += reader.carryBytes + first + 1
  reader.carry = []
  reader.carryBytes = 0
  if (reader.failure !== undefined) return
  const last = chunk.lastIndexOf(NEWLINE)
  if (last > first) {
    acceptBlock(reader, chunk.subarray(first + 1, last + 1))
    reader.terminated += last - first
  }
  if (last + 1 < chunk.length) {
    reader.carry.push(chunk.slice(last + 1))
    reader.carryBytes = chunk.length - last - 1
  }
}

/**
 * The log once the whole file was fed. Bytes after the last newline are an unterminated record:
 * torn by a crash mid-write, dropped (PERS-03). Any refused complete record failed the read:
 * `SessionCorrupt{line}` (1-based, header = 1), or `SessionFormatUnsupported` for a newer header
 * version or an unknown core type, since that record was written on purpose by a newer version.
 *
 * @internal
 */
export const finish = (reader: LogReader): Either.Either<ParsedLog, LogError> => {
  if (reader.failure !== undefined) return Either.left(reader.failure)
  if (reader.header === undefined) {
    return Either.left(recordError(reader.id, 1, {
      _tag: "Invalid",
      reason: reader.carryBytes === 0
        ? "the file is empty: the creation of this session did not complete"
        : "the header record is unterminated: the creation of this session did not complete"
    }))
  }
  return Either.right({
    header: reader.header,
    events: reader.events,
    tornTailDropped: reader.carryBytes > 0 ? 1 : 0,
    validBytes: reader.terminated
  })
}

/**
 * Reads a session file from `file`'s current position to its end, `chunkBytes` at a time
 * (DUR-05: never one read of the whole file). Stops at the first refused record.
 *
 * @internal
 */
export const readLog = (
  id: SessionId,
  file: FileSystem.File,
  chunkBytes: number
): Effect.Effect<Either.Either<ParsedLog, LogError>, PlatformError> =>
  Effect.suspend(() => {
    const reader = makeReader(id)
    const buffer = new Uint8Array(chunkBytes)
    const next: Effect.Effect<Either.Either<ParsedLog, LogError>, PlatformError> = Effect.flatMap(
      file.read(buffer),
      (size) => {
        const read = Number(size)
        if (read === 0) return Effect.succeed(finish(reader))
        feed(reader, buffer.subarray(0, read))
        return reader.failure === undefined ? next : Effect.succeed(Either.left(reader.failure))
      }
    )
    return next
  })

/**
 * The first line of `file` (from its current position), or `undefined` when it has none that is
 * complete and UTF-8 (DUR-07 identity checks read only this much).
 *
 * @internal
 */
export const readFirstLine = (
  file: FileSystem.File,
  chunkBytes: number
): Effect.Effect<string | undefined, PlatformError> =>
  Effect.suspend(() => {
    const parts: Array<Uint8Array> = []
    let total = 0
    const buffer = new Uint8Array(chunkBytes)
    const next: Effect.Effect<string | undefined, PlatformError> = Effect.flatMap(file.read(buffer), (size) => {
      const read = Number(size)
      if (read === 0) return Effect.succeed(undefined)
      const end = buffer.subarray(0, read).indexOf(NEWLINE)
      parts.push(buffer.slice(0, end === -1 ? read : end))
      total += end === -1 ? read : end
      if (end === -1) return next
      const line = new Uint8Array(total)
      let at = 0
      for (const part of parts) {
        line.set(part, at)
        at += part.length
      }
      return Effect.succeed(decodeLine(line))
    })
    return next
  })
