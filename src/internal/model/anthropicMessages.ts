/**
 * The Anthropic Messages wire protocol (MOD-03): `POST {baseUrl}/messages` with `stream: true`,
 * answered by typed SSE events (`message_start`, `content_block_*`, `message_delta`,
 * `message_stop`, `ping`, `error`).
 *
 * @internal
 */
import type { LanguageModel, Prompt, Response } from "@effect/ai"
import { Option } from "effect"
import { ModelError } from "./error.js"
import * as providerHttp from "./providerHttp.js"
import type { OutputBudget } from "./providerOutput.js"
import * as wire from "./wireParts.js"
import type { WireOptions } from "./wireParts.js"
import type { WireRequestSettings } from "./wireSettings.js"
import { isObjectSchema } from "./wireSettings.js"

/**
 * What one request needs beyond the prompt. Messages requires `max_tokens`: `defaultMaxTokens`
 * applies when the request sets none.
 *
 * @internal
 */
export interface MessagesSettings extends WireRequestSettings {
  readonly defaultMaxTokens: number
}

type Json = Record<string, unknown>
type Role = "user" | "assistant"

const userBlocks = (parts: ReadonlyArray<Prompt.UserMessagePart>): Array<Json> =>
  parts.flatMap((part): Array<Json> =>
    part.type === "text"
      ? part.text === "" ? [] : [{ type: "text", text: part.text }]
      : [{ type: "image", source: { type: "base64", media_type: part.mediaType, data: String(part.data) } }]
  )

const assistantBlocks = (message: Prompt.AssistantMessage): Array<Json> =>
  message.content.flatMap((part): Array<Json> => {
    switch (part.type) {
      case "text":
        return part.text === "" ? [] : [{ type: "text", text: part.text }]
      case "tool-call":
        // Messages takes `input` as an object: arguments that are not a JSON object are sent as {}
        return [{
          type: "tool_use",
          id: part.id,
          name: part.name,
          input: Option.getOrElse(wire.argumentsObject(wire.rawArguments(part)), () => ({}))
        }]
      default:
        // reasoning is not sent back: a thinking block needs the provider's signature
        return []
    }
  })

const resultBlocks = (result: unknown): Array<Json> => {
  if (!Array.isArray(result)) return [{ type: "text", text: typeof result === "string" ? result : JSON.stringify(result) }]
  return result.flatMap((part): Array<Json> =>
    wire.field(part, "type") === "text"
      ? String(wire.field(part, "text")) === "" ? [] : [{ type: "text", text: String(wire.field(part, "text")) }]
      : wire.field(part, "type") === "image"
      ? [{
        type: "image",
        source: { type: "base64", media_type: String(wire.field(part, "mediaType")), data: String(wire.field(part, "data")) }
      }]
      : []
  )
}

/**
 * The `system` text and `messages` of a Messages request: tool results travel in user turns
 * (`tool_result` blocks), consecutive turns of one role are merged (the API alternates roles),
 * empty text blocks and empty turns are left out.
 *
 * @internal
 */
export const messagesOf = (prompt: Prompt.Prompt): { readonly system: string | undefined; readonly messages: Array<Json> } => {
  const system: Array<string> = []
  const messages: Array<{ role: Role; content: Array<Json> }> = []
  const push = (role: Role, blocks: Array<Json>) => {
    if (blocks.length === 0) return
    const last = messages[messages.length - 1]
    if (last !== undefined && last.role === role) last.content.push(...blocks)
    else messages.push({ role, content: blocks })
  }
  for (const message of prompt.content) {
    switch (message.role) {
      case "system":
        system.push(message.content)
        break
      case "user":
        push("user", userBlocks(message.content))
        break
      case "assistant":
        push("assistant", assistantBlocks(message))
        break
      case "tool":
        push(
          "user",
          message.content.map((part) => ({
            type: "tool_result",
            tool_use_id: part.id,
            content: resultBlocks(part.result),
            ...(part.isFailure ? { is_error: true } : {})
          }))
        )
        break
    }
  }
  return { system: system.length > 0 ? system.join("\n\n") : undefined, messages }
}

const toolChoiceOf = (choice: LanguageModel.ToolChoice<string>): Json | undefined =>
  typeof choice === "string"
    ? choice === "required" ? { type: "any" } : choice === "none" ? { type: "none" } : undefined
    : "tool" in choice
    ? { type: "tool", name: choice.tool }
    : choice.mode === "required"
    ? { type: "any" }
    : undefined

/** APP-04: the sampling settings as Messages fields (`seed` never gets here: it is refused). */
const samplingOf = (settings: MessagesSettings["settings"]): Json => {
  if (settings === undefined) return {}
  return {
    ...(settings.temperature !== undefined ? { temperature: settings.temperature } : {}),
    ...(settings.topP !== undefined ? { top_p: settings.topP } : {}),
    ...(settings.topK !== undefined ? { top_k: settings.topK } : {}),
    ...(settings.stop !== undefined ? { stop_sequences: settings.stop } : {})
  }
}

/**
 * OUT-01: the forced final tool of a typed answer: its input is the answer (an answer that is not
 * an object travels as `{value}`).
 */
const outputTool = (output: NonNullable<MessagesSettings["output"]>): Json => ({
  name: output.name,
  description: "Give your final answer: call this tool once, with the answer as its input.",
  input_schema: isObjectSchema(output.schema)
    ? output.schema
    : { type: "object", properties: { value: output.schema }, required: ["value"], additionalProperties: false }
})

/**
 * The `tool_choice` of a request: the `toolChoice` setting's (APP-04), else the call's; with a typed
 * output (OUT-01) the model must call a tool — the final answer's alone when it has no other tool
 * or `toolChoice` is `"none"`; `parallelToolCalls: false` as `disable_parallel_tool_use`.
 */
const choiceOf = (options: WireOptions, settings: MessagesSettings, toolCount: number): Json | undefined => {
  const setting = settings.settings?.toolChoice
  const output = settings.output
  let choice: Json | undefined
  if (output !== undefined) {
    choice = typeof setting === "object"
      ? { type: "tool", name: setting.tool }
      : setting === "none" || toolCount === 0
      ? { type: "tool", name: output.name }
      : { type: "any" }
  } else if (setting !== undefined) {
    choice = typeof setting === "object"
      ? { type: "tool", name: setting.tool }
      : { type: setting === "required" ? "any" : setting }
  } else {
    choice = toolCount > 0 ? toolChoiceOf(options.toolChoice) : undefined
  }
  if (toolCount === 0 && output === undefined) return undefined
  if (settings.settings?.parallelToolCalls !== false || choice?.["type"] === "none") return choice
  return { ...(choice ?? { type: "auto" }), disable_parallel_tool_use: true }
}

/**
 * The JSON body of a streaming Messages request (REQ-03 over the wire): the settings as their
 * fields (APP-04), a typed output as a forced final tool (OUT-01).
 *
 * @internal
 */
export const requestBody = (options: WireOptions, settings: MessagesSettings): Json => {
  const { messages, system } = messagesOf(options.prompt)
  const tools: Array<Json> = wire.wireTools(options.tools).map((tool) => ({
    name: tool.name,
    description: tool.description,
    input_schema: tool.parameters
  }))
  const choice = choiceOf(options, settings, tools.length)
  if (settings.output !== undefined) tools.push(outputTool(settings.output))
  return {
    model: settings.model,
    max_tokens: settings.maxTokens ?? settings.defaultMaxTokens,
    ...(system !== undefined ? { system } : {}),
    messages,
    ...samplingOf(settings.settings),
    ...(tools.length > 0 ? { tools } : {}),
    ...(choice !== undefined ? { tool_choice: choice } : {}),
    stream: true
  }
}

const finishReason = (reason: string | undefined): Response.FinishReason => {
  switch (reason) {
    case "end_turn":
    case "stop_sequence":
      return "stop"
    case "tool_use":
      return "tool-calls"
    case "max_tokens":
      return "length"
    case "refusal":
      return "content-filter"
    case "pause_turn":
      return "pause"
    default:
      return "other"
  }
}

type Block =
  | { readonly kind: "text"; readonly id: string }
  | { readonly kind: "reasoning"; readonly id: string }
  | { readonly kind: "tool"; readonly id: string; readonly name: string; text: string; readonly input: string }
  | { readonly kind: "other" }

/** The state of one streamed reply; what it keeps of the message is charged to `budget` (SEC-02). */
class MessagesReply implements wire.SseReply {
  readonly blocks = new Map<number, Block>()
  /** The calls of tools other than the final answer's. */
  calls = 0
  stop: string | undefined = undefined
  stopped = false
  input: number | undefined = undefined
  cached: number | undefined = undefined
  output: number | undefined = undefined

  constructor(
    readonly provider: string,
    private readonly budget: OutputBudget,
    private readonly answer: AnswerTool | undefined
  ) {}

  /** Tells the sink what the data of one SSE event says, or returns the failure it reports. */
  onEvent<B>(text: string, sink: wire.ReplySink<B>): ModelError | undefined {
    const data = providerHttp.parseJsonObject(text)
    if (data === undefined || typeof data["type"] !== "string") return wire.malformed(this.provider, text)
    switch (data["type"]) {
      case "message_start":
        this.usage(wire.field(data["message"], "usage"))
        break
      case "content_block_start":
        this.onStart(wire.count(data["index"]) ?? 0, data["content_block"], sink)
        break
      case "content_block_delta":
        this.onDelta(wire.count(data["index"]) ?? 0, data["delta"], sink)
        break
      case "content_block_stop":
        this.onStop(wire.count(data["index"]) ?? 0, sink)
        break
      case "message_delta": {
        const reason = wire.field(data["delta"], "stop_reason")
        if (typeof reason === "string") this.stop = reason
        this.usage(data["usage"])
        break
      }
      case "message_stop":
        this.stopped = true
        break
      case "error": {
        const error = data["error"]
        const message = String(wire.field(error, "message") ?? text)
        const code = providerHttp.streamErrorCode(String(wire.field(error, "type") ?? ""), message)
        return new ModelError({ code, reason: `${this.provider}: ${message}` })
      }
    }
    return undefined
  }

  private usage(usage: unknown): void {
    this.input = wire.count(wire.field(usage, "input_tokens")) ?? this.input
    this.cached = wire.count(wire.field(usage, "cache_read_input_tokens")) ?? this.cached
    this.output = wire.count(wire.field(usage, "output_tokens")) ?? this.output
  }

  private onStart<B>(index: number, block: unknown, sink: wire.ReplySink<B>): void {
    this.budget.part()
    switch (wire.field(block, "type")) {
      case "text": {
        const id = `text-${index}`
        this.blocks.set(index, { kind: "text", id })
        sink.textStart(id)
        const text = wire.field(block, "text")
        if (typeof text === "string" && text !== "") {
          this.budget.text(text)
          sink.textDelta(id, text)
        }
        break
      }
      case "thinking": {
        const id = `reasoning-${index}`
        this.blocks.set(index, { kind: "reasoning", id })
        sink.reasoningStart(id)
        break
      }
      case "tool_use": {
        const tool = {
          kind: "tool" as const,
          id: String(wire.field(block, "id") ?? `toolu_${index}`),
          name: String(wire.field(block, "name") ?? ""),
          text: "",
          // a call without arguments streams no JSON: its text is the (empty) input it started with
          input: JSON.stringify(wire.field(block, "input") ?? {})
        }
        this.budget.text(tool.id)
        this.budget.text(tool.name)
        this.budget.text(tool.input)
        this.blocks.set(index, tool)
        break
      }
      default:
        this.blocks.set(index, { kind: "other" })
    }
  }

  private onDelta<B>(index: number, delta: unknown, sink: wire.ReplySink<B>): void {
    const block = this.blocks.get(index)
    const type = wire.field(delta, "type")
    if (block?.kind === "text" && type === "text_delta") {
      const text = String(wire.field(delta, "text") ?? "")
      this.budget.text(text)
      sink.textDelta(block.id, text)
    } else if (block?.kind === "reasoning" && type === "thinking_delta") {
      const thinking = String(wire.field(delta, "thinking") ?? "")
      this.budget.text(thinking)
      sink.reasoningDelta(block.id, thinking)
    } else if (block?.kind === "tool" && type === "input_json_delta") {
      const json = String(wire.field(delta, "partial_json") ?? "")
      this.budget.text(json)
      block.text += json
    }
  }

  private onStop<B>(index: number, sink: wire.ReplySink<B>): void {
    const block = this.blocks.get(index)
    if (block === undefined) return
    this.blocks.delete(index)
    if (block.kind === "text") sink.textEnd(block.id)
    else if (block.kind === "reasoning") sink.reasoningEnd(block.id)
    else if (block.kind === "tool") {
      const text = block.text === "" ? block.input : block.text
      if (this.answer !== undefined && block.name === this.answer.name) {
        // OUT-01: the final answer's tool call is the reply's text
        const id = `text-${index}`
        sink.textStart(id)
        sink.textDelta(id, this.answer.wrapped ? unwrapped(text) : text)
        sink.textEnd(id)
        return
      }
      this.calls++
      sink.toolCall({ id: block.id, name: block.name, text })
    }
  }

  /** Tells the sink how the reply closes, or returns `NETWORK` when it never said it was complete. */
  end<B>(sink: wire.ReplySink<B>): ModelError | undefined {
    if (!this.stopped && this.stop === undefined) return wire.truncated(this.provider)
    // OUT-01: a reply that only gave the final answer stopped, whatever the API calls it
    const stop = this.stop === "tool_use" && this.calls === 0 && this.answer !== undefined ? "end_turn" : this.stop
    return sink.finish(
      finishReason(stop),
      wire.usagePart({ input: this.input, output: this.output, cached: this.cached })
    )
  }
}

/**
 * The state of one streamed Messages reply: each tool call closes with its block, with its raw
 * argument text (MOD-02).
 *
 * @internal
 */
export const reply = (provider: string, budget: OutputBudget, output?: AnswerTool | undefined): wire.SseReply =>
  new MessagesReply(provider, budget, output)

/**
 * OUT-01: the final answer's tool of a typed request, and whether its input wraps the answer as
 * `{value}`.
 *
 * @internal
 */
export interface AnswerTool {
  readonly name: string
  readonly wrapped: boolean
}

/** @internal */
export const answerToolOf = (output: MessagesSettings["output"]): AnswerTool | undefined =>
  output === undefined ? undefined : { name: output.name, wrapped: !isObjectSchema(output.schema) }

/** The answer inside a wrapped input (`{value}`), as JSON text; the text itself when it is not one. */
const unwrapped = (text: string): string => {
  const parsed = wire.argumentsObject(text)
  return Option.isSome(parsed) && "value" in parsed.value ? JSON.stringify(parsed.value["value"]) : text
}
