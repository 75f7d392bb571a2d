/**
 * Normalisation of what a model, a provider adapter or a tool produced, before the driver logs it
 * (DUR-02): whatever they send, the events the driver writes are ones the reader accepts (DUR-01).
 *
 * @internal
 */
import { Either, ParseResult, Schema } from "effect"
import { ContentPart } from "../../Message.js"
import type { FinishReason, Usage } from "../../SessionEvent.js"
import { isContentPart, isNat, usageFields } from "../log/eventCodec.js"
import { snapshot } from "../json.js"

/** The longest provider call id kept as the `callId` (DUR-02). */
const MAX_CALL_ID_LENGTH = 128

/** Printable ASCII only: a call id travels in URLs, headers and message ids. */
const printableAscii = /^[\x20-\x7e]+$/

/**
 * A tool call as the driver keeps it: `callId` usable everywhere, `providerCallId` only when the
 * provider's id had to be replaced.
 *
 * @internal
 */
export interface NormalizedCall {
  readonly callId: string
  readonly providerCallId?: string | undefined
  readonly name: string
  readonly arguments: string
}

/** A value a provider sent where a string belongs, as text (never throws). */
const asText = (value: unknown): string => {
  if (typeof value === "string") return value
  try {
    const json = JSON.stringify(value)
    return typeof json === "string" ? json : String(value)
  } catch {
    return ""
  }
}

const isUsableCallId = (id: unknown): id is string =>
  typeof id === "string" && id.length <= MAX_CALL_ID_LENGTH && printableAscii.test(id)

/**
 * The calls of one step with ids the log can carry (DUR-02): an id that is empty, over 128
 * characters, not printable ASCII, or one an earlier call of the step already used, is replaced by
 * `call_<turn>_<step>_<n>` (n counts the step's calls from 0) and the provider's value kept as
 * `providerCallId`. Names and argument texts that are not strings become text.
 *
 * @internal
 */
export const normalizeCalls = (
  turn: number,
  step: number,
  calls: ReadonlyArray<{ readonly callId: unknown; readonly name: unknown; readonly arguments: unknown }>
): ReadonlyArray<NormalizedCall> => {
  const seen = new Set<string>()
  const out: Array<NormalizedCall> = []
  for (let n = 0; n < calls.length; n++) {
    const call = calls[n]!
    const name = asText(call.name)
    const args = asText(call.arguments)
    if (isUsableCallId(call.callId) && !seen.has(call.callId)) {
      seen.add(call.callId)
      out.push({ callId: call.callId, name, arguments: args })
      continue
    }
    let minted = `call_${turn}_${step}_${n}`
    // a provider id of the same step may already have this form: count on until it is free
    for (let k = n + calls.length; seen.has(minted); k++) minted = `call_${turn}_${step}_${k}`
    seen.add(minted)
    out.push({ callId: minted, providerCallId: asText(call.callId), name, arguments: args })
  }
  return out
}

/**
 * The usage a provider reported, keeping only the known fields that are integers ≥ 0 (DUR-02);
 * undefined when nothing is left.
 *
 * @internal
 */
export const normalizeUsage = (usage: unknown): Usage | undefined => {
  if (typeof usage !== "object" || usage === null) return undefined
  const out: { -readonly [K in keyof Usage]: Usage[K] } = {}
  let kept = 0
  for (const field of usageFields) {
    let value: unknown
    try {
      value = Object.prototype.hasOwnProperty.call(usage, field) ? (usage as Record<string, unknown>)[field] : undefined
    } catch {
      continue
    }
    if (isNat(value)) {
      out[field] = value
      kept++
    }
  }
  return kept > 0 ? out : undefined
}

/**
 * A provider's finish reason: one of ours, or `"other"` (DUR-02).
 *
 * @internal
 */
export const normalizeFinishReason = (reason: unknown): FinishReason =>
  reason === "stop" || reason === "tool-calls" || reason === "max-tokens" ? reason : "other"

const decodeContent = Schema.decodeUnknownEither(Schema.Array(ContentPart), {
  onExcessProperty: "error",
  errors: "first"
})

/**
 * A tool's result content as the log stores it, or the reason it cannot be (DUR-02: the caller
 * turns that into an `INVALID_TOOL_OUTPUT` error result the model sees).
 *
 * @internal
 */
export const toolContent = (content: unknown): Either.Either<ReadonlyArray<ContentPart>, string> => {
  const copied = snapshot(content)
  if (copied._tag === "Left") return Either.left(`content at ${copied.problem.path}: ${copied.problem.reason}`)
  if (Array.isArray(copied.value) && copied.value.every(isContentPart)) {
    return Either.right(copied.value as unknown as ReadonlyArray<ContentPart>)
  }
  const decoded = decodeContent(copied.value)
  if (Either.isLeft(decoded)) return Either.left(ParseResult.TreeFormatter.formatErrorSync(decoded.left))
  // the copy, not the decoded value: Schema rebuilds records by assignment (DUR-03)
  return Either.right(copied.value as unknown as ReadonlyArray<ContentPart>)
}
