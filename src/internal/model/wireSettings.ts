/**
 * Model settings and typed output on the wire (APP-04, OUT-01): which settings each protocol
 * takes — a setting it cannot take is refused, never dropped — and what a request carries of them.
 *
 * @internal
 */
import type { ModelSettings, OutputFormat } from "../../ModelSettings.js"
import type { RequestSettings } from "../../SessionEvent.js"

/**
 * What one wire request needs beyond the prompt and tools: its model, token limit, settings and
 * output format.
 *
 * @internal
 */
export interface WireRequestSettings {
  readonly model: string
  readonly maxTokens?: number | undefined
  readonly settings?: RequestSettings | undefined
  readonly output?: OutputFormat | undefined
}

/** A setting a protocol cannot take, and why, or undefined. */
export type Refusal = (settings: ModelSettings) => string | undefined

/**
 * OpenAI Chat Completions: every setting but `topK`; at most 4 stop sequences.
 *
 * @internal
 */
export const openAiRefusal: Refusal = (settings) => {
  if (settings.topK !== undefined) {
    return "topK is not a setting of OpenAI Chat Completions (it has top_p: use topP); remove it"
  }
  if (settings.stop !== undefined && settings.stop.length > 4) {
    return `OpenAI Chat Completions takes at most 4 stop sequences, got ${settings.stop.length}`
  }
  return undefined
}

/**
 * Anthropic Messages: every setting but `seed`; a temperature of at most 1.
 *
 * @internal
 */
export const anthropicRefusal: Refusal = (settings) => {
  if (settings.seed !== undefined) return "seed is not a setting of Anthropic Messages; remove it"
  if (settings.temperature !== undefined && settings.temperature > 1) {
    return `Anthropic Messages takes a temperature from 0 to 1, got ${settings.temperature}`
  }
  return undefined
}

/**
 * The settings of a request as the refusals read them (`maxTokens` as `maxOutputTokens`).
 *
 * @internal
 */
export const asModelSettings = (request: WireRequestSettings): ModelSettings => ({
  ...request.settings,
  ...(request.maxTokens !== undefined ? { maxOutputTokens: request.maxTokens } : {})
})

/**
 * Whether a JSON Schema describes an object (Anthropic's tool input must be one: any other answer
 * travels wrapped as `{value}`).
 *
 * @internal
 */
export const isObjectSchema = (schema: Readonly<Record<string, unknown>>): boolean => schema["type"] === "object"
