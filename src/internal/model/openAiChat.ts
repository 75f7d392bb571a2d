/**
 * The OpenAI Chat Completions wire protocol (MOD-03): `POST {baseUrl}/chat/completions` with
 * `stream: true`, answered by SSE `data:` chunks and `[DONE]` — what OpenAI, DeepSeek, vLLM,
 * Ollama and LM Studio all speak.
 *
 * @internal
 */
import type { LanguageModel, Prompt, Response } from "@effect/ai"
import { ModelError } from "./error.js"
import * as providerHttp from "./providerHttp.js"
import type { OutputBudget } from "./providerOutput.js"
import * as wire from "./wireParts.js"
import type { WireOptions } from "./wireParts.js"
import type { WireRequestSettings } from "./wireSettings.js"
import type { ToolChoice } from "../../ModelSettings.js"

/**
 * What one request needs beyond the prompt.
 *
 * @internal
 */
export interface ChatSettings extends WireRequestSettings {
  readonly maxTokensField: "max_tokens" | "max_completion_tokens"
}

type Json = Record<string, unknown>

const textOf = (parts: ReadonlyArray<{ readonly type: string; readonly text?: string }>): string =>
  parts.flatMap((part) => part.type === "text" && part.text !== undefined ? [part.text] : []).join("")

const userContent = (parts: ReadonlyArray<Prompt.UserMessagePart>): unknown => {
  if (parts.length === 1 && parts[0]!.type === "text") return parts[0]!.text
  return parts.map((part) =>
    part.type === "text"
      ? { type: "text", text: part.text }
      : { type: "image_url", image_url: { url: `data:${part.mediaType};base64,${String(part.data)}` } }
  )
}

/** A tool result's content as the text a `tool` message carries (images are named, not sent). */
const resultText = (result: unknown): string => {
  if (typeof result === "string") return result
  if (Array.isArray(result)) {
    return result.map((part) =>
      wire.field(part, "type") === "text"
        ? String(wire.field(part, "text"))
        : `[${String(wire.field(part, "type"))} ${String(wire.field(part, "mediaType") ?? "")}]`.replace(" ]", "]")
    ).join("\n")
  }
  return JSON.stringify(result)
}

const assistantMessage = (message: Prompt.AssistantMessage): Json | undefined => {
  const text = textOf(message.content)
  const calls = message.content.flatMap((part) =>
    part.type === "tool-call"
      ? [{ id: part.id, type: "function", function: { name: part.name, arguments: wire.rawArguments(part) } }]
      : []
  )
  // reasoning is not sent back: compatible endpoints (DeepSeek) refuse it in requests
  if (text === "" && calls.length === 0) return undefined
  return { role: "assistant", content: text === "" ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) }
}

/**
 * The `messages` of a Chat Completions request: system, user (a string for one text part, else
 * parts with images as data URLs), assistant (text and `tool_calls` with the raw argument text;
 * reasoning and empty messages left out) and one `tool` message per result.
 *
 * @internal
 */
export const messagesOf = (prompt: Prompt.Prompt): Array<Json> => {
  const out: Array<Json> = []
  for (const message of prompt.content) {
    switch (message.role) {
      case "system":
        out.push({ role: "system", content: message.content })
        break
      case "user":
        out.push({ role: "user", content: userContent(message.content) })
        break
      case "assistant": {
        const assistant = assistantMessage(message)
        if (assistant !== undefined) out.push(assistant)
        break
      }
      case "tool":
        for (const part of message.content) {
          out.push({ role: "tool", tool_call_id: part.id, content: resultText(part.result) })
        }
        break
    }
  }
  return out
}

const toolChoiceOf = (choice: LanguageModel.ToolChoice<string>): unknown =>
  typeof choice === "string"
    ? choice
    : "tool" in choice
    ? { type: "function", function: { name: choice.tool } }
    : choice.mode === "required"
    ? "required"
    : "auto"

/** APP-04: a `toolChoice` setting as Chat Completions' `tool_choice`. */
const settingChoice = (choice: ToolChoice): unknown =>
  typeof choice === "string" ? choice : { type: "function", function: { name: choice.tool } }

/**
 * APP-04: the sampling settings as Chat Completions fields (`topK` never gets here: it is refused).
 */
const samplingOf = (settings: ChatSettings["settings"]): Json => {
  if (settings === undefined) return {}
  return {
    ...(settings.temperature !== undefined ? { temperature: settings.temperature } : {}),
    ...(settings.topP !== undefined ? { top_p: settings.topP } : {}),
    ...(settings.stop !== undefined ? { stop: settings.stop } : {}),
    ...(settings.seed !== undefined ? { seed: settings.seed } : {})
  }
}

/**
 * The tools of a request with its `tool_choice` (the setting's, else the call's when not `auto`)
 * and `parallel_tool_calls`; none of them without tools (they would have nothing to act on, and
 * the API refuses them then).
 */
const toolsOf = (options: WireOptions, settings: ChatSettings): Json => {
  const tools = wire.wireTools(options.tools)
  if (tools.length === 0) return {}
  const choice = settings.settings?.toolChoice
  const parallel = settings.settings?.parallelToolCalls
  return {
    tools: tools.map((tool) => ({
      type: "function",
      function: { name: tool.name, description: tool.description, parameters: tool.parameters }
    })),
    ...(choice !== undefined
      ? { tool_choice: settingChoice(choice) }
      : options.toolChoice !== "auto"
      ? { tool_choice: toolChoiceOf(options.toolChoice) }
      : {}),
    ...(parallel !== undefined ? { parallel_tool_calls: parallel } : {})
  }
}

/**
 * The JSON body of a streaming Chat Completions request (REQ-03 over the wire: everything in it
 * derives from the prompt, the tools and the settings): the settings as their fields (APP-04), the
 * typed output as `response_format: json_schema` (OUT-01).
 *
 * @internal
 */
export const requestBody = (options: WireOptions, settings: ChatSettings): Json => {
  const output = settings.output
  return {
    model: settings.model,
    messages: messagesOf(options.prompt),
    ...(settings.maxTokens !== undefined ? { [settings.maxTokensField]: settings.maxTokens } : {}),
    ...samplingOf(settings.settings),
    ...toolsOf(options, settings),
    ...(output !== undefined
      ? {
        response_format: {
          type: "json_schema",
          json_schema: { name: output.name, schema: output.schema, strict: output.strict }
        }
      }
      : {}),
    stream: true,
    stream_options: { include_usage: true }
  }
}

const finishReason = (reason: string | undefined, hasCalls: boolean): Response.FinishReason => {
  switch (reason) {
    case "stop":
      return hasCalls ? "tool-calls" : "stop"
    case "length":
      return "length"
    case "tool_calls":
    case "function_call":
      return "tool-calls"
    case "content_filter":
      return "content-filter"
    default:
      return hasCalls ? "tool-calls" : "other"
  }
}

/** The state of one streamed reply; what it keeps of the message is charged to `budget` (SEC-02). */
class ChatReply implements wire.SseReply {
  text = false
  reasoning = false
  readonly calls = new Map<number, { id: string; name: string; text: string }>()
  finish: string | undefined = undefined
  finished = false
  usage: unknown = undefined

  constructor(readonly provider: string, private readonly budget: OutputBudget) {}

  /** Tells the sink what the data of one SSE event says, or returns the failure it reports. */
  onEvent<B>(data: string, sink: wire.ReplySink<B>): ModelError | undefined {
    if (data === "[DONE]") {
      this.finished = true
      return undefined
    }
    const chunk = providerHttp.parseJsonObject(data)
    if (chunk === undefined) return wire.malformed(this.provider, data)
    const error = chunk["error"]
    if (error !== undefined) {
      const message = String(wire.field(error, "message") ?? JSON.stringify(error))
      const kind = String(wire.field(error, "code") ?? wire.field(error, "type") ?? "")
      const code = providerHttp.streamErrorCode(kind, message)
      return new ModelError({ code, reason: `${this.provider}: ${message}` })
    }
    const usage = chunk["usage"]
    if (usage !== undefined && usage !== null) this.usage = usage
    const choices = chunk["choices"]
    const choice = Array.isArray(choices) ? choices[0] : undefined
    if (choice !== undefined) this.onChoice(choice, sink)
    return undefined
  }

  private onChoice<B>(choice: unknown, sink: wire.ReplySink<B>): void {
    const fields = wire.asObject(choice)
    if (fields === undefined) return
    const delta = wire.asObject(fields["delta"])
    if (delta !== undefined) {
      const reasoning = delta["reasoning_content"] ?? delta["reasoning"]
      if (typeof reasoning === "string" && reasoning !== "") {
        if (!this.reasoning) sink.reasoningStart("reasoning-0")
        this.reasoning = true
        this.budget.text(reasoning)
        sink.reasoningDelta("reasoning-0", reasoning)
      }
      const content = delta["content"]
      if (typeof content === "string" && content !== "") {
        this.budget.text(content)
        if (!this.text) sink.textStart("text-0")
        this.text = true
        sink.textDelta("text-0", content)
      }
      const toolCalls = delta["tool_calls"]
      if (Array.isArray(toolCalls)) for (const fragment of toolCalls) this.onFragment(fragment)
    }
    const reason = fields["finish_reason"]
    if (typeof reason === "string") this.finish = reason
  }

  /** Argument text arrives in fragments keyed by `index`; id and name come with the first. */
  private onFragment(fragment: unknown): void {
    const index = wire.count(wire.field(fragment, "index")) ?? this.calls.size
    let call = this.calls.get(index)
    if (call === undefined) {
      call = { id: "", name: "", text: "" }
      this.calls.set(index, call)
      this.budget.part()
    }
    const id = wire.field(fragment, "id")
    if (typeof id === "string" && id !== "") call.id = id
    const fn = wire.field(fragment, "function")
    const name = wire.field(fn, "name")
    if (typeof name === "string" && call.name !== name) {
      this.budget.text(name)
      call.name += name
    }
    const args = wire.field(fn, "arguments")
    if (typeof args === "string") {
      this.budget.text(args)
      call.text += args
    }
  }

  /** Tells the sink how the reply closes, or returns `NETWORK` when it never said it was complete. */
  end<B>(sink: wire.ReplySink<B>): ModelError | undefined {
    if (!this.finished && this.finish === undefined) return wire.truncated(this.provider)
    if (this.reasoning) sink.reasoningEnd("reasoning-0")
    if (this.text) sink.textEnd("text-0")
    const indexes = [...this.calls.keys()].sort((a, b) => a - b)
    for (const index of indexes) {
      const call = this.calls.get(index)!
      sink.toolCall({ id: call.id === "" ? `call_${index}` : call.id, name: call.name, text: call.text })
    }
    const usage = this.usage
    return sink.finish(
      finishReason(this.finish, this.calls.size > 0),
      wire.usagePart({
        input: wire.count(wire.field(usage, "prompt_tokens")),
        output: wire.count(wire.field(usage, "completion_tokens")),
        reasoning: wire.count(wire.field(wire.field(usage, "completion_tokens_details"), "reasoning_tokens")),
        cached: wire.count(wire.field(wire.field(usage, "prompt_tokens_details"), "cached_tokens")) ??
          wire.count(wire.field(usage, "prompt_cache_hit_tokens"))
      })
    )
  }
}

/**
 * The state of one streamed Chat Completions reply: tool calls close at the end of the reply, in
 * `index` order, with their raw argument text (MOD-02).
 *
 * @internal
 */
export const reply = (provider: string, budget: OutputBudget): wire.SseReply => new ChatReply(provider, budget)
