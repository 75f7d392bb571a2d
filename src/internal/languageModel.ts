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
import { Chunk, Clock, Context, Duration, Effect, Schema, Stream } from "effect"
import { ModelError } from "../AgentError.js"
import type { ModelChunk, ModelRequest, ToolSchema } from "../Model.js"
import type { FinishReason } from "../SessionEvent.js"
import { normalizeUsage } from "./modelOutput.js"
import * as providerHttp from "./providerHttp.js"
import { optionsKey } from "./wireParts.js"
import type { WireOptions } from "./wireParts.js"

/**
 * The per-request settings the adapter hands to the wire models (MOD-01): the request's model
 * and `maxTokens`, which `LanguageModel.ProviderOptions` has no field for.
 *
 * @internal
 */
export class RequestSettings extends Context.Tag("effect-agent/LanguageModelAdapter/RequestSettings")<
  RequestSettings,
  { readonly model?: string | undefined; readonly maxTokens?: number | undefined }
>() {}

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
 * parameters; a tool result carries our content parts.
 *
 * @internal
 */
export const promptOf = (request: ModelRequest): Array<Prompt.MessageEncoded> => {
  const out: Array<Prompt.MessageEncoded> = []
  if (request.system !== undefined) out.push({ role: "system", content: request.system })
  for (const message of request.messages) {
    switch (message.role) {
      case "user":
        out.push({
          role: "user",
          content: message.content.map((part) =>
            part.type === "text"
              ? { type: "text", text: part.text }
              : { type: "file", mediaType: part.mediaType, data: part.data }
          )
        })
        break
      case "assistant":
        out.push({
          role: "assistant",
          content: message.content.map((part) =>
            part.type === "tool-call"
              ? {
                type: "tool-call",
                id: part.callId,
                name: part.name,
                params: parsedOrText(part.arguments),
                providerExecuted: false,
                options: { [optionsKey]: { arguments: part.arguments } }
              }
              : part
          )
        })
        break
      case "tool":
        out.push({
          role: "tool",
          content: [{
            type: "tool-result",
            id: message.toolCallId,
            name: message.toolName,
            isFailure: message.isError,
            result: message.content,
            providerExecuted: false
          }]
        })
        break
    }
  }
  return out
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
 * cause is the `ModelError`; other providers' errors map by kind and HTTP status.
 *
 * @internal
 */
export const modelErrorOf = (error: AiError.AiError, now: number): ModelError => {
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
        now
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
 * wire model gave it, else the JSON of the decoded parameters: where MOD-02 degrades).
 */
class Assembly {
  private readonly params = new Map<string, { name: string; text: string }>()
  private readonly emitted = new Set<string>()

  onPart(part: Response.StreamPart<AnyTools> | Response.StreamPartEncoded): ReadonlyArray<ModelChunk> | ModelError {
    switch (part.type) {
      case "text-delta":
        return part.delta === "" ? [] : [{ _tag: "TextDelta", text: part.delta }]
      case "reasoning-delta":
        return part.delta === "" ? [] : [{ _tag: "ReasoningDelta", text: part.delta }]
      case "tool-params-start":
        this.params.set(part.id, { name: part.name, text: "" })
        return []
      case "tool-params-delta": {
        const call = this.params.get(part.id)
        if (call !== undefined) call.text += part.delta
        return []
      }
      case "tool-params-end": {
        const call = this.params.get(part.id)
        if (call === undefined || this.emitted.has(part.id)) return []
        this.emitted.add(part.id)
        return [{ _tag: "ToolCall", callId: part.id, name: call.name, arguments: call.text }]
      }
      case "tool-call": {
        if (this.emitted.has(part.id) || part.providerExecuted === true) return []
        this.emitted.add(part.id)
        const raw = part.metadata?.[optionsKey]?.["arguments"]
        const text = typeof raw === "string" ? raw : this.params.get(part.id)?.text ?? JSON.stringify(part.params)
        return [{ _tag: "ToolCall", callId: part.id, name: part.name, arguments: text }]
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
        return [{ _tag: "Finish", reason, ...(usage !== undefined ? { usage } : {}) }]
      }
      case "error":
        return new ModelError({ code: "PROVIDER", reason: `the provider reported an error: ${describe(part.error)}` })
      default:
        return []
    }
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
 * The timeouts of one request (MOD-04): the whole request, and the wait for each next chunk.
 *
 * @internal
 */
export interface Timeouts {
  readonly requestTimeout: Duration.Duration
  readonly idleTimeout: Duration.Duration
}

/**
 * The stream with both timeouts; either fails `TIMEOUT` and interrupts the provider's stream (so
 * the HTTP request is aborted, MOD-05).
 *
 * @internal
 */
export const withTimeouts = <A, R>(
  stream: Stream.Stream<A, ModelError, R>,
  timeouts: Timeouts
): Stream.Stream<A, ModelError, R> =>
  stream.pipe(
    Stream.timeoutFail(
      () =>
        new ModelError({
          code: "TIMEOUT",
          reason: `no chunk arrived for ${Duration.format(timeouts.idleTimeout)} (idleTimeout)`
        }),
      timeouts.idleTimeout
    ),
    Stream.interruptWhen(
      Effect.flatMap(Effect.sleep(timeouts.requestTimeout), () =>
        Effect.fail(
          new ModelError({
            code: "TIMEOUT",
            reason: `the request took longer than ${Duration.format(timeouts.requestTimeout)} (requestTimeout)`
          })
        ))
    )
  )

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
  timeouts: Timeouts
): Stream.Stream<ModelChunk, ModelError> =>
  Stream.suspend(() => {
    const assembly = new Assembly()
    const parts = model.streamText({
      prompt: promptOf(request),
      toolkit: toolkitOf(request.tools),
      disableToolCallResolution: true
    })
    const chunks = parts.pipe(
      Stream.catchAll((error) =>
        Stream.fromEffect(Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.fail(modelErrorOf(error, now))))
      ),
      Stream.mapChunksEffect((chunk) => {
        const out: Array<ModelChunk> = []
        for (const part of chunk) {
          const next = assembly.onPart(part)
          if (next instanceof ModelError) return Effect.fail(next)
          out.push(...next)
        }
        return Effect.succeed(Chunk.unsafeFromArray(out))
      }),
      Stream.provideService(RequestSettings, { model: request.model, maxTokens: request.maxTokens })
    )
    return withTimeouts(chunks, timeouts)
  })

/**
 * The wire models' parts as chunks without `LanguageModel`'s decoding of every part (B13): the
 * same parts, prompt and toolkit as {@link streamOf}, for our own Chat Completions and Messages
 * models, whose parts are built valid.
 *
 * @internal
 */
export const directStreamOf = (
  parts: (options: WireOptions, model: string, maxTokens: number | undefined) => Stream.Stream<
    Response.StreamPartEncoded,
    ModelError
  >,
  request: ModelRequest,
  timeouts: Timeouts
): Stream.Stream<ModelChunk, ModelError> =>
  Stream.suspend(() => {
    const assembly = new Assembly()
    const toolkit = toolkitOf(request.tools)
    const options: WireOptions = {
      prompt: Prompt.make(promptOf(request)),
      tools: Object.values(toolkit.tools),
      toolChoice: "auto"
    }
    const chunks = parts(options, request.model, request.maxTokens).pipe(
      Stream.mapChunksEffect((chunk) => {
        const out: Array<ModelChunk> = []
        for (const part of chunk) {
          const next = assembly.onPart(part)
          if (next instanceof ModelError) return Effect.fail(next)
          for (const item of next) out.push(item)
        }
        return Effect.succeed(Chunk.unsafeFromArray(out))
      })
    )
    return withTimeouts(chunks, timeouts)
  })
