/**
 * The adapter from an `@effect/ai` `LanguageModel` to the model seam (MOD-01, MOD-02, MOD-04):
 * requests become prompts and a toolkit whose tools carry the log's JSON Schemas; stream parts
 * become `ModelChunk`s with the raw argument text; `AiError`s become `ModelError` codes; the
 * request and idle-chunk timeouts apply to any provider.
 *
 * @internal
 */
import type { Toolkit } from "@effect/ai"
import { Prompt } from "@effect/ai"
import type { AiError, LanguageModel, Response } from "@effect/ai"
import { Tool as AiTool } from "@effect/ai"
import { Clock, Context, Effect, Schema, Stream } from "effect"
import type { Duration } from "effect"
import { ModelError } from "./error.js"
import type { ModelChunk, ModelRequest, ToolSchema } from "../../Model.js"
import type { OutputFormat } from "../../ModelSettings.js"
import type { FinishReason, RequestSettings as SessionRequestSettings } from "../../SessionEvent.js"
import { normalizeUsage } from "./output.js"
import * as providerHttp from "./providerHttp.js"
import { OutputBudget } from "./providerOutput.js"
import type { Limits } from "./providerOutput.js"
import type { RequestWatch, Timeouts } from "./timeouts.js"
import { withAbortingTimeouts, withTimeouts } from "./timeouts.js"
import { mapChunksOrFail, optionsKey } from "./wireParts.js"
import type { ClosedCall, ReplySink, WireOptions } from "./wireParts.js"

/**
 * The per-request settings the adapter hands to the wire models (MOD-01): the request's model
 * and `maxTokens`, which `LanguageModel.ProviderOptions` has no field for.
 *
 * @internal
 */
export class RequestSettings extends Context.Tag("effect-agent/LanguageModelAdapter/RequestSettings")<
  RequestSettings,
  {
    readonly model?: string | undefined
    readonly maxTokens?: number | undefined
    /** APP-04: the request's model settings (but `maxOutputTokens`, which is `maxTokens`). */
    readonly settings?: SessionRequestSettings | undefined
    /** OUT-01: the typed output the request asks for. */
    readonly output?: OutputFormat | undefined
  }
>() {}

/** What a request asks beyond its prompt and tools (MOD-01, APP-04, OUT-01). */
const requestSettingsOf = (request: ModelRequest): RequestSettings["Type"] => ({
  model: request.model,
  maxTokens: request.maxTokens,
  ...(request.settings !== undefined ? { settings: request.settings } : {}),
  ...(request.output !== undefined ? { output: request.output } : {})
})

/** Objects with any keys: what the toolkit decodes arguments with, so nothing is dropped or refused. */
const anyObject = Schema.Struct({}, Schema.Record({ key: Schema.String, value: Schema.Unknown }))

/**
 * Our tool as an `@effect/ai` tool: the description and the JSON Schema the log records
 * (`request/config`), arguments accepted as any object (the loop decodes them, MOD-02).
 *
 * @internal
 */
export const aiTool = (schema: ToolSchema) =>
  AiTool.make(schema.name, { description: schema.description }).setParameters(
    anyObject.annotations({ jsonSchema: schema.jsonSchema })
  )

type AnyTools = Record<string, AiTool.Any>

/**
 * The toolkit of a request. Its handler is never called: tool-call resolution is disabled, the
 * loop runs the tools.
 *
 * @internal
 */
export const toolkitOf = (tools: ReadonlyArray<ToolSchema>): Toolkit.WithHandler<AnyTools> => {
  const byName: AnyTools = {}
  for (const tool of tools) byName[tool.name] = aiTool(tool)
  return {
    tools: byName,
    handle: (name) => Effect.dieMessage(`effect-agent: tool ${String(name)} must be run by the agent loop, not @effect/ai`)
  }
}

/**
 * The prompt of a request: the system text, then the log's messages. A tool call carries the
 * log's raw argument text in its provider options (`"effect-agent".arguments`) beside the parsed
 * parameters; a tool result carries our content parts. Built with `@effect/ai`'s constructors, not
 * decoded through its schemas: the log's messages are valid by construction, and decoding the
 * prompt cost more per request than the whole reply's parsing (B13).
 *
 * @internal
 */
export const promptOf = (request: ModelRequest): Prompt.Prompt => {
  const out: Array<Prompt.Message> = []
  if (request.system !== undefined) out.push(Prompt.makeMessage("system", { content: request.system }))
  for (const message of request.messages) {
    switch (message.role) {
      case "user":
        out.push(Prompt.makeMessage("user", {
          content: message.content.map((part) =>
            part.type === "text"
              ? Prompt.makePart("text", { text: part.text })
              : Prompt.makePart("file", { mediaType: part.mediaType, data: part.data })
          )
        }))
        break
      case "assistant":
        out.push(Prompt.makeMessage("assistant", {
          content: message.content.map((part) =>
            part.type === "tool-call"
              ? Prompt.makePart("tool-call", {
                id: part.callId,
                name: part.name,
                params: parsedOrText(part.arguments),
                providerExecuted: false,
                options: { [optionsKey]: { arguments: part.arguments } }
              })
              : Prompt.makePart(part.type, { text: part.text })
          )
        }))
        break
      case "tool":
        out.push(Prompt.makeMessage("tool", {
          content: [Prompt.makePart("tool-result", {
            id: message.toolCallId,
            name: message.toolName,
            isFailure: message.isError,
            result: message.content,
            providerExecuted: false
          })]
        }))
        break
    }
  }
  return Prompt.fromMessages(out)
}

const parsedOrText = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/**
 * The `ModelError` of an `AiError` (MOD-04). The wire models fail with an `UnknownError` whose
 * cause is the `ModelError`; other providers' errors map by kind and HTTP status (a retry header
 * asks for at most `maxRetryDelay`, SEC-02).
 *
 * @internal
 */
export const modelErrorOf = (error: AiError.AiError, now: number, maxRetryDelay: Duration.Duration): ModelError => {
  switch (error._tag) {
    case "UnknownError":
      return error.cause instanceof ModelError
        ? error.cause
        : new ModelError({ code: "PROVIDER", reason: error.description ?? "the provider failed" })
    case "HttpResponseError":
      return providerHttp.statusError(
        `${error.module}`,
        error.response.status,
        error.response.headers,
        error.body ?? error.description ?? "",
        undefined,
        now,
        maxRetryDelay
      )
    case "HttpRequestError":
      return new ModelError({ code: "NETWORK", reason: `${error.module}: ${error.description ?? error.reason}` })
    case "MalformedInput":
      return new ModelError({ code: "BAD_REQUEST", reason: `${error.module}: ${error.description ?? "malformed input"}` })
    case "MalformedOutput":
      return new ModelError({
        code: "PROVIDER",
        reason: `${error.module}: the provider's output did not decode (${error.description ?? "malformed output"})`
      })
  }
}

/** The part of a provider's finish reason the log can carry, or the failure it stands for. */
const finishOf = (reason: Response.FinishReason): FinishReason | ModelError => {
  switch (reason) {
    case "stop":
      return "stop"
    case "length":
      return "max-tokens"
    case "tool-calls":
      return "tool-calls"
    case "content-filter":
      return new ModelError({ code: "CONTENT_FILTER", reason: "the provider stopped the reply by its content policy" })
    case "error":
      return new ModelError({ code: "PROVIDER", reason: "the provider ended the reply with an error" })
    default:
      return "other"
  }
}

/**
 * Stream parts to chunks. Tool calls are built from `tool-params-*` parts (the model's raw text,
 * MOD-02) when the provider streams them, else from the `tool-call` part (its raw text when a
 * wire model gave it, else the JSON of the decoded parameters: where MOD-02 degrades). What the
 * message grows by is charged to `budget` (SEC-02).
 */
class Assembly {
  private readonly params = new Map<string, { name: string; text: string }>()
  private readonly emitted = new Set<string>()

  constructor(private readonly budget: OutputBudget) {}

  /** Pushes the chunks of one part, or returns the failure it stands for. */
  onPart(
    part: Response.StreamPart<AnyTools> | Response.StreamPartEncoded,
    out: Array<ModelChunk>
  ): ModelError | undefined {
    switch (part.type) {
      case "text-delta":
        this.budget.text(part.delta)
        if (part.delta !== "") out.push({ _tag: "TextDelta", text: part.delta })
        return this.budget.failure
      case "reasoning-delta":
        this.budget.text(part.delta)
        if (part.delta !== "") out.push({ _tag: "ReasoningDelta", text: part.delta })
        return this.budget.failure
      case "tool-params-start":
        this.budget.part()
        this.params.set(part.id, { name: part.name, text: "" })
        return this.budget.failure
      case "tool-params-delta": {
        const call = this.params.get(part.id)
        if (call === undefined) return undefined
        this.budget.text(part.delta)
        call.text += part.delta
        return this.budget.failure
      }
      case "tool-params-end": {
        const call = this.params.get(part.id)
        if (call === undefined || this.emitted.has(part.id)) return undefined
        this.emitted.add(part.id)
        out.push({ _tag: "ToolCall", callId: part.id, name: call.name, arguments: call.text })
        return undefined
      }
      case "tool-call": {
        if (this.emitted.has(part.id) || part.providerExecuted === true) return undefined
        this.emitted.add(part.id)
        const raw = part.metadata?.[optionsKey]?.["arguments"]
        const params = this.params.get(part.id)
        const text = typeof raw === "string" ? raw : params?.text ?? JSON.stringify(part.params)
        // a call without params parts was not charged yet
        if (params === undefined) {
          this.budget.part()
          this.budget.text(text)
        }
        out.push({ _tag: "ToolCall", callId: part.id, name: part.name, arguments: text })
        return this.budget.failure
      }
      case "finish": {
        const reason = finishOf(part.reason)
        if (reason instanceof ModelError) return reason
        const usage = normalizeUsage({
          inputTokens: part.usage.inputTokens,
          outputTokens: part.usage.outputTokens,
          reasoningTokens: part.usage.reasoningTokens,
          cachedInputTokens: part.usage.cachedInputTokens
        })
        out.push({ _tag: "Finish", reason, ...(usage !== undefined ? { usage } : {}) })
        return undefined
      }
      case "error":
        return new ModelError({ code: "PROVIDER", reason: `the provider reported an error: ${describe(part.error)}` })
      default:
        return undefined
    }
  }

  /** Pushes the chunks of the parts of one stream chunk, or returns the failure one stands for. */
  onParts(
    parts: Iterable<Response.StreamPart<AnyTools> | Response.StreamPartEncoded>,
    out: Array<ModelChunk>
  ): ModelError | undefined {
    for (const part of parts) {
      const error = this.onPart(part, out)
      if (error !== undefined) return error
    }
    return undefined
  }
}

const nothingAtTheEnd = () => undefined

/**
 * The chunks of one of our wire replies (B13): what {@link Assembly} makes of the parts the same
 * reply gives a `PartsSink` (tool calls with their raw text, the finish with the usage the log can
 * carry), without the parts.
 *
 * @internal
 */
export class ChunkSink implements ReplySink<ModelChunk> {
  out: Array<ModelChunk> = []

  textStart(): void {}
  textDelta(_id: string, delta: string): void {
    if (delta !== "") this.out.push({ _tag: "TextDelta", text: delta })
  }
  textEnd(): void {}
  reasoningStart(): void {}
  reasoningDelta(_id: string, delta: string): void {
    if (delta !== "") this.out.push({ _tag: "ReasoningDelta", text: delta })
  }
  reasoningEnd(): void {}
  toolCall(call: ClosedCall): void {
    this.out.push({ _tag: "ToolCall", callId: call.id, name: call.name, arguments: call.text })
  }
  finish(reason: Response.FinishReason, usage: Response.FinishPartEncoded["usage"]): ModelError | undefined {
    const finish = finishOf(reason)
    if (finish instanceof ModelError) return finish
    const normalized = normalizeUsage({
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      reasoningTokens: usage.reasoningTokens,
      cachedInputTokens: usage.cachedInputTokens
    })
    this.out.push({ _tag: "Finish", reason: finish, ...(normalized !== undefined ? { usage: normalized } : {}) })
    return undefined
  }
}

const describe = (error: unknown): string => {
  if (typeof error === "string") return error
  if (error instanceof Error) return error.message
  try {
    return JSON.stringify(error)
  } catch {
    return String(error)
  }
}

/**
 * Our `Model` stream over a `LanguageModel` (MOD-01): `streamText` with the request's prompt and
 * toolkit, tool-call resolution disabled (the loop runs tools), the request's model and
 * `maxTokens` in {@link RequestSettings}.
 *
 * @internal
 */
export const streamOf = (
  model: LanguageModel.Service,
  request: ModelRequest,
  timeouts: Timeouts,
  limits: Limits
): Stream.Stream<ModelChunk, ModelError> =>
  Stream.suspend(() => {
    const assembly = new Assembly(new OutputBudget(request.provider, limits.maxEventBytes))
    const choice = request.settings?.toolChoice
    const parts = model.streamText({
      prompt: promptOf(request),
      toolkit: toolkitOf(request.tools),
      disableToolCallResolution: true,
      // APP-04: the one setting `@effect/ai` carries itself; the rest travel in RequestSettings
      ...(choice !== undefined ? { toolChoice: choice } : {})
    })
    const chunks = mapChunksOrFail(
      Stream.catchAll(parts, (error) =>
        Stream.fromEffect(
          Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.fail(modelErrorOf(error, now, limits.maxRetryDelay)))
        )),
      (chunk, out: Array<ModelChunk>) => assembly.onParts(chunk, out),
      nothingAtTheEnd
    ).pipe(Stream.provideService(RequestSettings, requestSettingsOf(request)))
    return withTimeouts(chunks, timeouts)
  })

/**
 * Our wire models' chunks (B13): the same prompt and toolkit as {@link streamOf}, the chunks built
 * straight from the reply by a {@link ChunkSink}, without `LanguageModel`'s decoding of every part.
 *
 * @internal
 */
export const directStreamOf = (
  chunks: (
    options: WireOptions,
    requested: RequestSettings["Type"],
    watch: RequestWatch
  ) => Stream.Stream<ModelChunk, ModelError>,
  request: ModelRequest,
  timeouts: Timeouts
): Stream.Stream<ModelChunk, ModelError> =>
  Stream.suspend(() => {
    const toolkit = toolkitOf(request.tools)
    const options: WireOptions = {
      prompt: promptOf(request),
      tools: Object.values(toolkit.tools),
      toolChoice: "auto"
    }
    return withAbortingTimeouts((watch) => chunks(options, requestSettingsOf(request), watch), timeouts)
  })
