/**
 * Validation of events at the edges: custom inputs from `Session.append`, seeds, and stored
 * records (files, SQL rows, memory). Durable values are plain frozen data (MSG-00), so decoding is
 * validation only.
 *
 * @internal
 */
import { Either, ParseResult, Schema } from "effect"
import { SessionId } from "../../Message.js"
import * as SessionError from "../../SessionError.js"
import * as SessionEvent from "../../SessionEvent.js"
import { deepFreeze, isLosslessParsedJson, MAX_DEPTH, snapshot } from "../json.js"

const strict = { onExcessProperty: "error", errors: "first" } as const
/** The known fields only: what a record is worth to this version once its unknown fields are set aside. */
const lenient = { onExcessProperty: "ignore", errors: "first" } as const
/** Every unknown field at once, to name them all (used only on a record that is refused anyway). */
const allExcess = { onExcessProperty: "error", errors: "all" } as const
const decodeHeaderStrict = Schema.decodeUnknownEither(SessionEvent.SessionHeader, strict)
const decodeHeaderLenient = Schema.decodeUnknownEither(SessionEvent.SessionHeader, lenient)
const decodeEnvelope = Schema.decodeUnknownEither(SessionEvent.Envelope, strict)
const decodeEnvelopeLenient = Schema.decodeUnknownEither(SessionEvent.Envelope, lenient)

/** The schema of each core type's `data`, taken from the event schemas themselves. */
const coreDataSchemas: { readonly [T in SessionEvent.CoreType]: Schema.Schema<any, any, never> } = {
  "agent/inbox/spliced": SessionEvent.InboxSpliced.fields.data,
  "turn/start": SessionEvent.TurnStart.fields.data,
  "step/start": SessionEvent.StepStart.fields.data,
  "step/end": SessionEvent.StepEnd.fields.data,
  "user/message": SessionEvent.UserMessageEntered.fields.data,
  "assistant/message": SessionEvent.AssistantMessageLogged.fields.data,
  "tool/call": SessionEvent.ToolCallLogged.fields.data,
  "tool/result": SessionEvent.ToolResultLogged.fields.data,
  "turn/end": SessionEvent.TurnEnd.fields.data,
  "request/config": SessionEvent.RequestConfig.fields.data,
  "session/compacted": SessionEvent.SessionCompacted.fields.data,
  "tool/approval-requested": SessionEvent.ApprovalRequested.fields.data,
  "tool/approval-decided": SessionEvent.ApprovalDecided.fields.data,
  "tool/input-requested": SessionEvent.InputRequested.fields.data,
  "tool/input-provided": SessionEvent.InputProvided.fields.data,
  "tool/child": SessionEvent.ToolChild.fields.data
}

type Decoder = (u: unknown) => Either.Either<unknown, ParseResult.ParseError>

const decodersOf = (options: typeof strict | typeof lenient) =>
  Object.fromEntries(
    Object.entries(coreDataSchemas).map(([type, schema]) => [type, Schema.decodeUnknownEither(schema, options)])
  ) as { readonly [T in SessionEvent.CoreType]: Decoder }

const coreDataDecoders = decodersOf(strict)
const coreDataLenientDecoders = decodersOf(lenient)

const formatError = (error: ParseResult.ParseError): string => ParseResult.TreeFormatter.formatErrorSync(error)

/** `data.message.content[0].mood`: a path as a reader of the record would write it. */
const pathText = (root: string, path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>(
    (text, key) => typeof key === "number" ? `${text}[${key}]` : `${text}.${String(key)}`,
    root
  )

/**
 * The fields `schema` does not know in `value`, a value it accepts once they are ignored: every
 * path strict decoding reports as unexpected (DUR-00, "newer, not corrupt").
 */
const unknownFields = (schema: Schema.Schema<any, any, never>, value: unknown, root: string): ReadonlyArray<string> => {
  const decoded = Schema.decodeUnknownEither(schema, allExcess)(value)
  if (Either.isRight(decoded)) return []
  const paths = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
    .filter((issue) => issue._tag === "Unexpected")
    .map((issue) => pathText(root, issue.path))
  return [...new Set(paths)]
}

/** The wording of a record refused for fields this version does not know. */
const unknownFieldsReason = (fields: ReadonlyArray<string>): string =>
  `${fields.length === 1 ? "field" : "fields"} ${fields.join(", ")} unknown to this version: a newer ` +
  "effect-agent wrote it (the record is otherwise valid: it is not corrupt)"

/** Why an event's type or data was refused. @internal */
export type RecordProblem =
  | { readonly _tag: "Invalid"; readonly reason: string }
  | { readonly _tag: "Unsupported"; readonly reason: string }

const invalid = (reason: string): Either.Either<never, RecordProblem> => Either.left({ _tag: "Invalid", reason })

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** The longest custom event type. */
const MAX_CUSTOM_TYPE_LENGTH = 256

/**
 * Why a custom type is refused, or undefined (DUR-09: the rule every backend shares — a NUL or a
 * lone surrogate cannot be stored in a Postgres text column, so no backend takes one).
 */
const customTypeProblem = (type: string): string | undefined => {
  if (!type.includes("/") || type.length > MAX_CUSTOM_TYPE_LENGTH) {
    return `a custom type contains a "/" (namespace it, e.g. "my-plugin/note") and is at most ${MAX_CUSTOM_TYPE_LENGTH} characters`
  }
  if (type.includes("\u0000")) return "an event type may not contain NUL (\\u0000)"
  if (loneSurrogate.test(type)) return "an event type may not contain a lone surrogate (it is not valid Unicode)"
  return undefined
}

/**
 * DUR-01: the one rule for an event's type and data, applied at append (custom, core, repair
 * closers, anything a model or tool produced) and at read. Returns the frozen data.
 */
const eventData = (type: string, data: unknown): Either.Either<SessionEvent.JsonValue, RecordProblem> => {
  const copied = snapshot(data, MAX_DEPTH)
  if (copied._tag === "Left") {
    const where = "$.data" + copied.problem.path.slice(1)
    return invalid(`${where}: ${copied.problem.reason}`)
  }
  if (SessionEvent.isCoreType(type)) {
    if (isCoreData(type, copied.value)) return Either.right(copied.value)
    const decoded = coreDataDecoders[type](copied.value)
    if (Either.isLeft(decoded)) return coreDataProblem(type, copied.value, decoded.left)
    return Either.right(copied.value)
  }
  if (SessionEvent.isReservedType(type)) return Either.left({ _tag: "Unsupported", reason: `unknown core event type ${JSON.stringify(type)}` })
  const problem = customTypeProblem(type)
  if (problem !== undefined) return invalid(`event type ${JSON.stringify(type)}: ${problem}`)
  return Either.right(copied.value)
}

/**
 * Why strictly decoded core data was refused: invalid when its known fields are (that is damage,
 * whatever else it holds), unsupported when only fields this version does not know stand in the
 * way (DUR-00, "newer, not corrupt": a newer version added them on purpose).
 */
const coreDataProblem = (
  type: SessionEvent.CoreType,
  data: SessionEvent.JsonValue,
  error: ParseResult.ParseError
): Either.Either<never, RecordProblem> => {
  if (Either.isLeft(coreDataLenientDecoders[type](data))) return invalid(`data of ${type}: ${formatError(error)}`)
  const fields = unknownFields(coreDataSchemas[type], data, "$.data")
  // an unexpected issue is the only way strict can refuse what lenient accepts; should a later
  // Schema find another, the record is still refused, as invalid
  if (fields.length === 0) return invalid(`data of ${type}: ${formatError(error)}`)
  return Either.left({ _tag: "Unsupported", reason: `${type}: ${unknownFieldsReason(fields)}` })
}

/** @internal */
export const customInput = (
  input: SessionEvent.CustomEventInput
): Either.Either<{ readonly type: string; readonly data: SessionEvent.JsonValue }, SessionError.InvalidEventData> => {
  let type: unknown
  let data: unknown
  try {
    type = (input as { readonly type?: unknown } | null)?.type
    data = (input as { readonly data?: unknown }).data
  } catch (e) {
    // DUR-10: a hostile input object refuses itself instead of crashing the caller
    return Either.left(new SessionError.InvalidEventData({ type: "(unreadable)", reason: `reading the input threw (${String(e)})` }))
  }
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
  const checked = eventData(type, data)
  if (Either.isLeft(checked)) return Either.left(new SessionError.InvalidEventData({ type, reason: checked.left.reason }))
  return Either.right({ type, data: checked.right })
}

/**
 * Validates a core event built in process before it is appended, with the same rules the reader
 * applies (DUR-01): an event the reader would refuse fails `InvalidEventData` and is never written.
 * Returns the frozen `{type, data}`.
 *
 * @internal
 */
export const coreEvent = (
  event: SessionEvent.CoreEventInput
): Either.Either<{ readonly type: string; readonly data: SessionEvent.JsonValue }, SessionError.InvalidEventData> => {
  const type = event.type
  const checked = eventData(type, event.data)
  if (Either.isLeft(checked)) return Either.left(new SessionError.InvalidEventData({ type, reason: checked.left.reason }))
  return Either.right({ type, data: checked.right })
}

/**
 * Validates a stored (or seeded) event whose position in the log is `expectedSeq`: its envelope,
 * then its type and data by the append rule (DUR-01). The result is frozen; `raw` must not be used
 * by the caller afterwards when it came from `JSON.parse`.
 *
 * @internal
 */
export const storedEvent = (raw: unknown, expectedSeq: number): Either.Either<SessionEvent.SessionEvent, RecordProblem> => {
  let envelope: Either.Either<typeof SessionEvent.Envelope.Type, ParseResult.ParseError>
  // DUR-00: fields beside seq, time, type and data are a newer version's, once the four are valid
  let unknownTop: ReadonlyArray<string> = []
  try {
    envelope = decodeEnvelope(raw)
    if (Either.isLeft(envelope)) {
      const known = decodeEnvelopeLenient(raw)
      if (Either.isLeft(known)) return invalid(formatError(envelope.left))
      unknownTop = unknownFields(SessionEvent.Envelope, raw, "$")
      if (unknownTop.length === 0) return invalid(formatError(envelope.left))
      envelope = known
    }
  } catch (e) {
    return invalid(`reading the record threw (${String(e)})`)
  }
  const { data, seq, time, type } = envelope.right
  if (seq !== expectedSeq) {
    return invalid(`seq ${seq} where ${expectedSeq} was expected (seqs are contiguous from 0)`)
  }
  const checked = eventData(type, data)
  if (Either.isLeft(checked)) {
    return checked.left._tag === "Unsupported"
      ? Either.left({ _tag: "Unsupported", reason: `the event of seq ${seq}, ${checked.left.reason}` })
      : Either.left(checked.left)
  }
  if (unknownTop.length > 0) {
    return Either.left({ _tag: "Unsupported", reason: `the event of seq ${seq}, ${type}: ${unknownFieldsReason(unknownTop)}` })
  }
  return Either.right(Object.freeze({ seq, time, type, data: checked.right }) as SessionEvent.SessionEvent)
}

/**
 * DUR-01 for events built in process and written without a session (repair closers at resume):
 * each must be one the reader accepts at its position, or nothing is written.
 *
 * @internal
 */
export const checkBeforeWrite = (
  events: ReadonlyArray<SessionEvent.SessionEvent>
): Either.Either<void, SessionError.InvalidEventData> => {
  for (const event of events) {
    const checked = storedEvent(event, event.seq)
    if (Either.isLeft(checked)) {
      return Either.left(new SessionError.InvalidEventData({ type: event.type, reason: checked.left.reason }))
    }
  }
  return Either.void
}

// -------------------------------------------------------------------------------------------------
// The fast path for records that `JSON.parse` just produced (the resume path of every session).
//
// Each check below accepts a value only if the Schema decoders above (and `snapshot`) accept it:
// anything it is unsure of (a shape it does not know, a `-0`, a prototype-polluted object) is
// simply not accepted here, and `storedEvent` then decides and words the error. So the fast path
// changes what a record costs, never whether it is accepted or what its error says.

type Fields = { readonly [key: string]: unknown }

const isFields = (u: unknown): u is Fields => typeof u === "object" && u !== null && !Array.isArray(u)

/** The number of enumerable keys (own, and inherited if someone polluted a prototype: then no match). */
const keyCount = (o: Fields): number => {
  let n = 0
  for (const _ in o) n++
  return n
}

/**
 * A count the log stores: a safe integer ≥ 0 (never `-0`).
 *
 * @internal
 */
export const isNat = (u: unknown): u is number => Number.isSafeInteger(u) && (u as number) >= 0 && !Object.is(u, -0)
const isPositive = (u: unknown): boolean => Number.isSafeInteger(u) && (u as number) >= 1
const isString = (u: unknown): u is string => typeof u === "string"
const isNonEmpty = (u: unknown): boolean => typeof u === "string" && u.length >= 1
const isMessageId = (u: unknown): boolean => typeof u === "string" && u.length >= 1 && u.length <= 256
const isSessionId = Schema.is(SessionId)

const isArrayOf = (u: unknown, item: (u: unknown) => boolean): boolean => {
  if (!Array.isArray(u)) return false
  for (let i = 0; i < u.length; i++) if (!item(u[i])) return false
  return true
}

const isTextLike = (o: Fields, type: string): boolean => o.type === type && isString(o.text) && keyCount(o) === 2

/**
 * Whether a plain JSON value surely decodes as a `ContentPart` under strict decoding.
 *
 * @internal
 */
export const isContentPart = (u: unknown): boolean =>
  isFields(u) &&
  (isTextLike(u, "text") || (u.type === "image" && isString(u.mediaType) && isString(u.data) && keyCount(u) === 3))

const isAssistantPart = (u: unknown): boolean =>
  isFields(u) &&
  (isTextLike(u, "text") || isTextLike(u, "reasoning") ||
    (u.type === "tool-call" && isNonEmpty(u.callId) && isString(u.name) && isString(u.arguments) &&
      (u.providerCallId === undefined ? keyCount(u) === 4 : isString(u.providerCallId) && keyCount(u) === 5)))

const isMessageSource = (u: unknown): boolean => {
  if (!isFields(u)) return false
  switch (u.kind) {
    case "user":
      return keyCount(u) === 1
    case "system":
      // OUT-02 (format v3): the library's own messages say why they were written
      return u.reason === undefined ? keyCount(u) === 1 : isString(u.reason) && keyCount(u) === 2
    case "agent":
      return isSessionId(u.agent) && keyCount(u) === 2
    case "plugin":
      return isString(u.plugin) && keyCount(u) === 2
    default:
      return false
  }
}

/**
 * Whether a plain JSON value (a `snapshot` copy or `JSON.parse` output) surely decodes as a
 * `UserMessage` under strict decoding (false: decode it to know, and for the error).
 *
 * @internal
 */
export const isUserMessage = (u: unknown): boolean =>
  isFields(u) && isMessageId(u.id) && u.role === "user" && isArrayOf(u.content, isContentPart) &&
  isMessageSource(u.source) && keyCount(u) === 4

const isAssistantMessage = (u: unknown): boolean => {
  if (!isFields(u) || !isMessageId(u.id) || u.role !== "assistant" || !isArrayOf(u.content, isAssistantPart)) {
    return false
  }
  const source = u.source
  return isFields(source) && source.kind === "model" && isString(source.provider) && isString(source.model) &&
    keyCount(source) === 3 && keyCount(u) === 4
}

const isToolResultMessage = (u: unknown): boolean =>
  isFields(u) && isMessageId(u.id) && u.role === "tool" && isNonEmpty(u.toolCallId) && isString(u.toolName) &&
  isArrayOf(u.content, isContentPart) && typeof u.isError === "boolean" && keyCount(u) === 6

const isCancelCause = (u: unknown): boolean => {
  if (!isFields(u)) return false
  switch (u.kind) {
    case "user":
    case "parent":
    case "disposed":
      return keyCount(u) === 1
    case "hook":
      return isString(u.reason) && keyCount(u) === 2
    default:
      return false
  }
}

const isTurnEndReason = (u: unknown): boolean => {
  if (!isFields(u)) return false
  switch (u.kind) {
    case "completed":
    case "max-tokens":
    case "max-steps":
    case "interrupted":
      return keyCount(u) === 1
    case "blocked":
      return isString(u.reason) && keyCount(u) === 2
    case "aborted":
      return isCancelCause(u.cause) && keyCount(u) === 2
    case "error": {
      const error = u.error
      return isFields(error) && isString(error.message) && isString(error.code) && keyCount(error) === 2 &&
        keyCount(u) === 2
    }
    default:
      return false
  }
}

/**
 * The fields of `Usage` (DUR-02: a provider's other usage fields are dropped).
 *
 * @internal
 */
export const usageFields = ["inputTokens", "outputTokens", "reasoningTokens", "cachedInputTokens"] as const

const isUsage = (u: unknown): boolean => {
  if (!isFields(u)) return false
  let n = 0
  for (const field of usageFields) {
    const value = u[field]
    if (value !== undefined) {
      if (!isNat(value)) return false
      n++
    }
  }
  return keyCount(u) === n
}

const isFinishReason = (u: unknown): boolean =>
  u === "stop" || u === "tool-calls" || u === "max-tokens" || u === "other"

const isToolDescription = (u: unknown): boolean =>
  isFields(u) && isString(u.name) && isString(u.description) && isFields(u.parameters) &&
  // the parameters are three levels below the event's data (data.tools[i].parameters)
  isLosslessParsedJson(u.parameters, MAX_DEPTH - 3) && keyCount(u) === 3

/** The data of a core event of `type`, checked as strictly as `CoreEvent` with excess keys refused. */
const isCoreData = (type: SessionEvent.CoreType, d: unknown): boolean => {
  if (!isFields(d)) return false
  switch (type) {
    case "turn/start":
      return isPositive(d.turn) && keyCount(d) === 1
    case "step/start":
    case "step/end":
      return isPositive(d.turn) && isPositive(d.step) && keyCount(d) === 2
    case "user/message":
      return isPositive(d.turn) && isPositive(d.step) && isUserMessage(d.message) && keyCount(d) === 3
    case "agent/inbox/spliced": {
      if (d.target !== "next-turn" && d.target !== "next-step") return false
      if (!isNat(d.start) || !isArrayOf(d.removed, isMessageId) || !isArrayOf(d.inserted, isUserMessage)) return false
      const outcome = d.outcome
      // HOST-03: the optional `wake` flag (format v2)
      const keys = d.wake === undefined ? 4 : typeof d.wake === "boolean" ? 5 : -1
      if (outcome === undefined) return keyCount(d) === keys
      return (outcome === "canceled" || outcome === "rejected" || outcome === "restored") && keyCount(d) === keys + 1
    }
    case "assistant/message": {
      if (!isPositive(d.turn) || !isPositive(d.step) || !isAssistantMessage(d.message)) return false
      let n = 3
      if (d.usage !== undefined) {
        if (!isUsage(d.usage)) return false
        n++
      }
      const finish = d.finish
      if (finish !== undefined) {
        if (!isFinishReason(finish)) return false
        n++
      }
      const interrupted = d.interrupted
      if (interrupted !== undefined) {
        if (interrupted !== true) return false
        n++
      }
      if (keyCount(d) !== n) return false
      // the two refinements of AssistantMessageLogged
      if ((finish === undefined) !== (interrupted === true)) return false
      if (finish === "max-tokens" || interrupted === true) {
        const content = (d.message as Fields).content as ReadonlyArray<Fields>
        for (const part of content) if (part.type === "tool-call") return false
      }
      return true
    }
    case "tool/call":
      return isPositive(d.turn) && isPositive(d.step) && isNonEmpty(d.callId) && isString(d.name) &&
        isString(d.arguments) && keyCount(d) === 5
    case "tool/result": {
      if (!isPositive(d.turn) || !isPositive(d.step) || !isToolResultMessage(d.message)) return false
      const error = d.error
      if (error === undefined) return keyCount(d) === 3
      return isFields(error) && isString(error.name) && isString(error.code) && keyCount(error) === 2 &&
        keyCount(d) === 4
    }
    case "turn/end":
      return isPositive(d.turn) && isTurnEndReason(d.reason) && keyCount(d) === 2
    case "request/config": {
      if (!isString(d.provider) || !isString(d.model) || !isArrayOf(d.tools, isToolDescription)) return false
      let n = 3
      if (d.maxTokens !== undefined) {
        if (!isPositive(d.maxTokens)) return false
        n++
      }
      if (d.system !== undefined) {
        if (!isString(d.system)) return false
        n++
      }
      return keyCount(d) === n
    }
    case "session/compacted":
      // CMP-01 (format v2)
      return isNat(d.upTo) && isString(d.summary) && isUsage(d.usage) && keyCount(d) === 3
    // the rarer v3 events (approvals, questions, children) are left to the Schema decoders
    case "tool/approval-requested":
    case "tool/approval-decided":
    case "tool/input-requested":
    case "tool/input-provided":
    case "tool/child":
      return false
  }
}

/** Whether `storedEvent(raw, expectedSeq)` would surely accept `raw` (false: it may or may not). */
const isSurelyValid = (raw: unknown, expectedSeq: number): raw is SessionEvent.SessionEvent => {
  if (!isFields(raw)) return false
  const { data, seq, time, type } = raw
  if (seq !== expectedSeq || !isNat(seq) || !isNat(time) || typeof type !== "string" || keyCount(raw) !== 4) {
    return false
  }
  if (SessionEvent.isCoreType(type)) return isCoreData(type, data)
  return !SessionEvent.isReservedType(type) && customTypeProblem(type) === undefined &&
    isLosslessParsedJson(data, MAX_DEPTH)
}

/**
 * `storedEvent` for a record that `JSON.parse` has just produced and nothing else references: the
 * same acceptance and the same errors, but a valid record is checked by hand and frozen in place
 * instead of decoded and copied (the resume path of every stored session reads each record once).
 *
 * @internal
 */
export const parsedEvent = (
  raw: unknown,
  expectedSeq: number
): Either.Either<SessionEvent.SessionEvent, RecordProblem> => {
  const event = acceptParsedEvent(raw, expectedSeq)
  return event !== undefined ? Either.right(event) : storedEvent(raw, expectedSeq)
}

/**
 * The allocation-free half of {@link parsedEvent}: the record frozen in place when it is surely
 * valid, `undefined` when `storedEvent` must decide (and word the error).
 *
 * @internal
 */
export const acceptParsedEvent = (raw: unknown, expectedSeq: number): SessionEvent.SessionEvent | undefined =>
  isSurelyValid(raw, expectedSeq) ? deepFreeze(raw) : undefined

/**
 * Validates a stored header: a higher version of our format is unsupported (EVT-04), and so is a
 * valid header with fields this version does not know (DUR-00); anything else that is not a valid
 * header is invalid.
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
  // the header's meta is one level below the header (DUR-10's depth counts from the meta)
  const checked = snapshot(raw, MAX_DEPTH + 1)
  if (checked._tag === "Left") {
    return Either.left({ _tag: "Invalid", reason: `${checked.problem.path}: ${checked.problem.reason}` })
  }
  const decoded = decodeHeaderStrict(checked.value)
  if (Either.isLeft(decoded)) {
    // DUR-00: a header whose known fields are valid refuses only for fields a newer version added
    const fields = Either.isRight(decodeHeaderLenient(checked.value))
      ? unknownFields(SessionEvent.SessionHeader, checked.value, "$")
      : []
    return fields.length > 0
      ? Either.left({ _tag: "Unsupported", reason: `the header: ${unknownFieldsReason(fields)}` })
      : Either.left({ _tag: "Invalid", reason: formatError(decoded.left) })
  }
  return Either.right(checked.value as unknown as SessionEvent.SessionHeader)
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

/**
 * Parses one stored record's JSON text.
 *
 * @internal
 */
export const parseJson = (text: unknown): Either.Either<unknown, string> => {
  if (typeof text !== "string") return Either.left(`not JSON text (a ${typeof text})`)
  try {
    return Either.right(JSON.parse(text))
  } catch (e) {
    return Either.left(`not JSON (${e instanceof Error ? e.message : String(e)})`)
  }
}

/**
 * Validates the stored header record of session `id` (line 1): JSON, a supported version, and the
 * session's own id (`where` names the record's container in the error: "file", "row").
 *
 * @internal
 */
export const headerOf = (
  id: SessionId | string,
  text: unknown,
  where: string
): Either.Either<SessionEvent.SessionHeader, SessionError.SessionCorrupt | SessionError.SessionFormatUnsupported> => {
  const json = parseJson(text)
  if (Either.isLeft(json)) return Either.left(recordError(id, 1, { _tag: "Invalid", reason: json.left }))
  const header = storedHeader(json.right)
  if (Either.isLeft(header)) return Either.left(recordError(id, 1, header.left))
  if (header.right.id !== id) {
    return Either.left(recordError(id, 1, {
      _tag: "Invalid",
      reason: `the header names session ${JSON.stringify(header.right.id)}, not the ${where}'s`
    }))
  }
  return Either.right(header.right)
}
