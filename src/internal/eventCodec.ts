/**
 * Validation of events at the edges: custom inputs from `Session.append`, seeds, and stored
 * records (files, SQL rows, memory). Durable values are plain frozen data (MSG-00), so decoding is
 * validation only.
 *
 * @internal
 */
import { Either, ParseResult, Schema } from "effect"
import type { SessionId } from "../Message.js"
import * as SessionError from "../SessionError.js"
import * as SessionEvent from "../SessionEvent.js"
import { deepFreeze, snapshot } from "./json.js"

const strict = { onExcessProperty: "error", errors: "first" } as const
const decodeCore = Schema.decodeUnknownEither(SessionEvent.CoreEvent, strict)
const decodeHeaderStrict = Schema.decodeUnknownEither(SessionEvent.SessionHeader, strict)
const decodeEnvelope = Schema.decodeUnknownEither(SessionEvent.Envelope, strict)

const formatError = (error: ParseResult.ParseError): string => ParseResult.TreeFormatter.formatErrorSync(error)

/** @internal */
export const customInput = (
  input: SessionEvent.CustomEventInput
): Either.Either<{ readonly type: string; readonly data: SessionEvent.JsonValue }, SessionError.InvalidEventData> => {
  const type: unknown = (input as { readonly type?: unknown } | null)?.type
  if (typeof type !== "string") {
    return Either.left(new SessionError.InvalidEventData({ type: String(type), reason: "the type must be a string" }))
  }
  if (SessionEvent.isReservedType(type)) {
    return Either.left(
      new SessionError.InvalidEventData({
        type,
        reason: "types under the core prefixes (" + SessionEvent.reservedPrefixes.join(", ") +
          ") are written only by the inbox, the loop and repair; use a type of your own such as \"my-plugin/note\""
      })
    )
  }
  if (!type.includes("/") || type.length > 256) {
    return Either.left(
      new SessionError.InvalidEventData({
        type,
        reason: "a custom type contains a \"/\" (namespace it, e.g. \"my-plugin/note\") and is at most 256 characters"
      })
    )
  }
  const data = snapshot(input.data)
  if (data._tag === "Left") {
    return Either.left(
      new SessionError.InvalidEventData({ type, reason: `data at ${data.problem.path}: ${data.problem.reason}` })
    )
  }
  return Either.right({ type, data: data.value })
}

/** Why a stored record was refused. @internal */
export type RecordProblem =
  | { readonly _tag: "Invalid"; readonly reason: string }
  | { readonly _tag: "Unsupported"; readonly reason: string }

/**
 * Validates a stored (or seeded) event whose position in the log is `expectedSeq`. The result is
 * deep-frozen; `raw` must not be used by the caller afterwards when it came from `JSON.parse`.
 *
 * @internal
 */
export const storedEvent = (raw: unknown, expectedSeq: number): Either.Either<SessionEvent.SessionEvent, RecordProblem> => {
  const envelope = decodeEnvelope(raw)
  if (Either.isLeft(envelope)) return Either.left({ _tag: "Invalid", reason: formatError(envelope.left) })
  const { seq, type } = envelope.right
  if (seq !== expectedSeq) {
    return Either.left({ _tag: "Invalid", reason: `seq ${seq} where ${expectedSeq} was expected (seqs are contiguous from 0)` })
  }
  if (SessionEvent.isCoreType(type)) {
    const decoded = decodeCore(raw)
    if (Either.isLeft(decoded)) return Either.left({ _tag: "Invalid", reason: formatError(decoded.left) })
    const checked = snapshot(raw)
    if (checked._tag === "Left") {
      return Either.left({ _tag: "Invalid", reason: `${checked.problem.path}: ${checked.problem.reason}` })
    }
    return Either.right(checked.value as unknown as SessionEvent.SessionEvent)
  }
  if (SessionEvent.isReservedType(type)) {
    return Either.left({ _tag: "Unsupported", reason: `unknown core event type ${JSON.stringify(type)}` })
  }
  if (!type.includes("/")) {
    return Either.left({ _tag: "Invalid", reason: `event type ${JSON.stringify(type)} is neither core nor custom` })
  }
  const checked = snapshot(raw)
  if (checked._tag === "Left") {
    return Either.left({ _tag: "Invalid", reason: `${checked.problem.path}: ${checked.problem.reason}` })
  }
  return Either.right(checked.value as unknown as SessionEvent.SessionEvent)
}

/**
 * Validates a stored header: a higher version of our format is unsupported (EVT-04), anything else
 * that is not a valid version-1 header is invalid.
 *
 * @internal
 */
export const storedHeader = (raw: unknown): Either.Either<SessionEvent.SessionHeader, RecordProblem> => {
  if (typeof raw === "object" && raw !== null) {
    const { format, version } = raw as { readonly format?: unknown; readonly version?: unknown }
    if (format === SessionEvent.FORMAT && typeof version === "number" && version > SessionEvent.VERSION) {
      return Either.left({
        _tag: "Unsupported",
        reason: `format version ${version} is newer than ${SessionEvent.VERSION}`
      })
    }
  }
  const decoded = decodeHeaderStrict(raw)
  if (Either.isLeft(decoded)) return Either.left({ _tag: "Invalid", reason: formatError(decoded.left) })
  const checked = snapshot(raw)
  if (checked._tag === "Left") {
    return Either.left({ _tag: "Invalid", reason: `${checked.problem.path}: ${checked.problem.reason}` })
  }
  return Either.right(checked.value as unknown as SessionEvent.SessionHeader)
}

/**
 * Validates a core event built in process before it is appended (cheap structural check that
 * catches bugs in the writers of the core vocabulary); returns the frozen copy.
 *
 * @internal
 */
export const coreEvent = (event: SessionEvent.CoreEvent): SessionEvent.CoreEvent => {
  const checked = snapshot(event)
  if (checked._tag === "Left") {
    throw new Error(`bug: core event ${event.type} carries non-JSON data at ${checked.problem.path}`)
  }
  return checked.value as unknown as SessionEvent.CoreEvent
}

/**
 * Turns a record problem into the error a reader reports.
 *
 * @internal
 */
export const recordError = (
  id: SessionId | string,
  line: number,
  problem: RecordProblem
): SessionError.SessionCorrupt | SessionError.SessionFormatUnsupported =>
  problem._tag === "Unsupported"
    ? new SessionError.SessionFormatUnsupported({ id, reason: `line ${line}: ${problem.reason}` })
    : new SessionError.SessionCorrupt({ id, line, reason: problem.reason })

/** @internal */
export { deepFreeze }
