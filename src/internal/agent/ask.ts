/**
 * HIL-03: how `Tool.ask` reaches the call it runs in. The tool runner (`driver/tools.ts`) provides
 * each call's question channel as a service around the tool's body, so `ask` needs nothing in the
 * tool's requirements: outside a call it fails `AskUnavailable`. The channel itself (the durable
 * request, the wait, replay after a restart) is `driver/questions.ts`.
 *
 * @internal
 */
import type { Duration, Schema } from "effect"
import { Context, Effect, JSONSchema, Option } from "effect"
import type { QuestionDeclined, QuestionTimedOut } from "../../AgentError.js"
import { AskUnavailable } from "../../AgentError.js"
import type { JsonRecord } from "../../SessionEvent.js"

/** What a tool asks (`Tool.ask`'s options). @internal */
export interface AskRequest<A, I> {
  readonly question: string
  readonly schema: Schema.Schema<A, I, never>
  readonly timeout?: Duration.DurationInput | undefined
}

/** One call's way to ask a person. @internal */
export interface QuestionChannel {
  readonly ask: <A, I>(request: AskRequest<A, I>) => Effect.Effect<A, QuestionDeclined | QuestionTimedOut>
}

/**
 * The question channel of the tool call running on this fiber, provided by the tool runner.
 *
 * @internal
 */
export class CurrentCall extends Context.Tag("effect-agent/internal/CurrentCall")<CurrentCall, QuestionChannel>() {}

/** `Tool.ask` (HIL-03). @internal */
export const ask = <A, I>(
  request: AskRequest<A, I>
): Effect.Effect<A, QuestionDeclined | QuestionTimedOut | AskUnavailable> =>
  Effect.flatMap(
    Effect.serviceOption(CurrentCall),
    (channel): Effect.Effect<A, QuestionDeclined | QuestionTimedOut | AskUnavailable> =>
      Option.isSome(channel)
        ? channel.value.ask(request)
        : Effect.fail(new AskUnavailable({ question: String(request.question) }))
  )

const jsonSchemas = new WeakMap<object, JsonRecord>()

/**
 * The JSON Schema a question's answer must match, as plain JSON without `$schema` (what the log
 * stores and replay compares). Memoized per Schema.
 *
 * @internal
 */
export const answerJsonSchema = (schema: Schema.Schema<any, any, never>): JsonRecord => {
  const known = jsonSchemas.get(schema)
  if (known !== undefined) return known
  const { $schema: _, ...rest } = JSON.parse(JSON.stringify(JSONSchema.make(schema))) as Record<string, unknown>
  const json = rest as JsonRecord
  jsonSchemas.set(schema, json)
  return json
}

/**
 * JSON text with object keys sorted: two values are the same answer (or the same schema) exactly
 * when their canonical texts are equal (the idempotency ruling; replay's match, HIL-03).
 *
 * @internal
 */
export const canonicalJson = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return v
    // a null prototype, so a `__proto__` key stays an own property
    const sorted: Record<string, unknown> = Object.create(null)
    for (const key of Object.keys(v).sort()) sorted[key] = (v as Record<string, unknown>)[key]
    return sorted
  })

/**
 * What replay compares for one `ask`: a hash (FNV-1a, 8 hex digits) of its question and canonical
 * JSON Schema. Replay matches the n-th `ask` of a call with its n-th logged question by this hash.
 *
 * @internal
 */
export const askHash = (question: string, jsonSchema: JsonRecord): string => {
  const text = `${question}\u0000${canonicalJson(jsonSchema)}`
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0).toString(16).padStart(8, "0")
}
