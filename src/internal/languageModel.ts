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
import {
  Cause,
  Channel,
  Chunk,
  Clock,
  Context,
  Duration,
  Effect,
  Exit,
  Fiber,
  Option,
  Schema,
  Scope,
  Stream
} from "effect"
import { ModelError } from "../AgentError.js"
import type { ModelChunk, ModelRequest, ToolSchema } from "../Model.js"
import type { FinishReason } from "../SessionEvent.js"
import { normalizeUsage } from "./modelOutput.js"
import * as providerHttp from "./providerHttp.js"
import { mapChunksOrFail, optionsKey } from "./wireParts.js"
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

  /** Pushes the chunks of one part, or returns the failure it stands for. */
  onPart(
    part: Response.StreamPart<AnyTools> | Response.StreamPartEncoded,
    out: Array<ModelChunk>
  ): ModelError | undefined {
    switch (part.type) {
      case "text-delta":
        if (part.delta !== "") out.push({ _tag: "TextDelta", text: part.delta })
        return undefined
      case "reasoning-delta":
        if (part.delta !== "") out.push({ _tag: "ReasoningDelta", text: part.delta })
        return undefined
      case "tool-params-start":
        this.params.set(part.id, { name: part.name, text: "" })
        return undefined
      case "tool-params-delta": {
        const call = this.params.get(part.id)
        if (call !== undefined) call.text += part.delta
        return undefined
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
        const text = typeof raw === "string" ? raw : this.params.get(part.id)?.text ?? JSON.stringify(part.params)
        out.push({ _tag: "ToolCall", callId: part.id, name: part.name, arguments: text })
        return undefined
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

/** What the reader read: a chunk, or undefined at the end. */
type Read<A> = Exit.Exit<Chunk.Chunk<A> | undefined, ModelError>

/** What a pull's failure means: the end of the stream, or its failure. */
const endOrFailure = (cause: Cause.Cause<Option.Option<ModelError>>): Read<never> => {
  const failure = Cause.flipCauseOption(cause)
  return Option.isNone(failure) ? Exit.succeed(undefined) : Exit.failCause(failure.value)
}

/**
 * One request's stream under both timeouts (MOD-04), read one chunk ahead by a reader fiber so
 * that a timer can end a wait for the provider without racing every pull (B13):
 * `Stream.timeoutFail` forks a fiber and a timer per pull and `Stream.interruptWhen` runs the
 * stream in a merge, ≈160 Effect operations per chunk together, where this hand-over costs ≈30 —
 * and a provider streams about one chunk per delta.
 */
class Watched<A> {
  /** What the reader read and no taker has taken yet (an end or a failure stays). */
  private ready: Read<A> | undefined = undefined
  /** The consumer, waiting for the reader. */
  private taker: ((read: Read<A>) => void) | undefined = undefined
  /** The reader, waiting for the consumer to take `ready`. */
  private reader: ((taken: Effect.Effect<void>) => void) | undefined = undefined
  /** The reader's fiber, which a timeout interrupts (closing the provider's stream, MOD-05). */
  readerFiber: Fiber.Fiber<void> | undefined = undefined
  /** Since when the reader has been waiting for the provider; undefined while it waits for the consumer. */
  private waitingSince: number | undefined = undefined
  /** The timeout that ended the stream. */
  private failure: Exit.Exit<never, ModelError> | undefined = undefined

  constructor(private readonly clock: Clock.Clock, private readonly timeouts: Timeouts) {}

  /** The reader fiber: pull, hand over, wait while the handed chunk is not taken; then the end. */
  read<R>(pull: Effect.Effect<Chunk.Chunk<A>, Option.Option<ModelError>, R>): Effect.Effect<void, never, R> {
    const next = (): Effect.Effect<void, never, R> => {
      this.waitingSince = this.clock.unsafeCurrentTimeMillis()
      return Effect.matchCauseEffect(pull, {
        onFailure: (cause) => {
          this.waitingSince = undefined
          this.offer(endOrFailure(cause))
          return Effect.void
        },
        onSuccess: (chunk) => {
          this.waitingSince = undefined
          this.offer(Exit.succeed(chunk))
          return this.ready === undefined ? next() : Effect.flatMap(this.untaken, next)
        }
      })
    }
    return Effect.suspend(next)
  }

  /** Hands what the reader read to a waiting taker, else keeps it for the next take. */
  private offer(read: Read<A>): void {
    const taker = this.taker
    if (taker === undefined) {
      this.ready = read
      return
    }
    this.taker = undefined
    taker(read)
  }

  /** Waits until the consumer takes the chunk the reader holds. */
  private readonly untaken: Effect.Effect<void> = Effect.async((resume) => {
    if (this.ready === undefined) return resume(Effect.void)
    this.reader = resume
    return Effect.sync(() => {
      this.reader = undefined
    })
  })

  /** The consumer's pull: the timeout that fired, else the chunk read ahead, else the next one. */
  private readonly take: Effect.Effect<Chunk.Chunk<A> | undefined, ModelError> = Effect.suspend(() => {
    if (this.failure !== undefined) return this.failure
    const ready = this.ready
    if (ready === undefined) {
      return Effect.async<Chunk.Chunk<A> | undefined, ModelError>((resume) => {
        this.taker = resume
        return Effect.sync(() => {
          this.taker = undefined
        })
      })
    }
    if (Exit.isSuccess(ready) && ready.value !== undefined) {
      this.ready = undefined
      const reader = this.reader
      if (reader !== undefined) {
        this.reader = undefined
        reader(Effect.void)
      }
    }
    return ready
  })

  /** The consumer's side: a channel that writes what it takes until the end. */
  readonly channel: Channel.Channel<Chunk.Chunk<A>, unknown, ModelError, unknown, void, unknown> = Channel.flatMap(
    Channel.fromEffect(this.take),
    (chunk) => chunk === undefined ? Channel.void : Channel.flatMap(Channel.write(chunk), () => this.channel)
  )

  /**
   * Ends the stream with a timeout: a waiting taker fails now, a later take fails at once, and the
   * reader is interrupted, which closes the provider's stream (its HTTP request is aborted, MOD-05)
   * even while the consumer is busy.
   */
  private fail(error: ModelError): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.failure !== undefined) return Effect.void
      const failure = Exit.fail(error)
      this.failure = failure
      const taker = this.taker
      this.taker = undefined
      taker?.(failure)
      return this.readerFiber === undefined ? Effect.void : Fiber.interrupt(this.readerFiber)
    })
  }

  /** Fails the stream when the whole request has taken `requestTimeout`. */
  requestTimer(): Effect.Effect<void> {
    return Effect.flatMap(Effect.sleep(this.timeouts.requestTimeout), () =>
      this.fail(
        new ModelError({
          code: "TIMEOUT",
          reason: `the request took longer than ${Duration.format(this.timeouts.requestTimeout)} (requestTimeout)`
        })
      ))
  }

  /**
   * Fails the stream when one wait for the provider has taken `idleTimeout`: sleeps until the
   * current wait would expire, then looks again (no timer per chunk).
   */
  idleTimer(): Effect.Effect<void> {
    const idle = Duration.toMillis(this.timeouts.idleTimeout)
    const since = this.waitingSince
    const left = since === undefined ? idle : since + idle - this.clock.unsafeCurrentTimeMillis()
    if (left > 0) return Effect.flatMap(Effect.sleep(Duration.millis(left)), () => this.idleTimer())
    return this.fail(
      new ModelError({
        code: "TIMEOUT",
        reason: `no chunk arrived for ${Duration.format(this.timeouts.idleTimeout)} (idleTimeout)`
      })
    )
  }
}

/**
 * The stream with both timeouts (MOD-04): `requestTimeout` from the start of the request, and
 * `idleTimeout` for each wait for the provider's next chunk (the first included: it covers the
 * wait for the response). Either fails `TIMEOUT` at once. The reader and the two timers are
 * forked into a scope of their own, started uninterruptibly and closed when the consumer's stream
 * ends, fails or is interrupted; closing it interrupts the reader, whose scope aborts the HTTP
 * request (MOD-05). (`Stream.unwrapScoped` would cost ≈200 Effect operations per request more.)
 *
 * @internal
 */
export const withTimeouts = <A, R>(
  stream: Stream.Stream<A, ModelError, R>,
  timeouts: Timeouts
): Stream.Stream<A, ModelError, R> => {
  const start = Effect.flatMap(Scope.make(), (scope) =>
    Effect.clockWith((clock) => {
      const watched = new Watched<A>(clock, timeouts)
      const fork = <X>(effect: Effect.Effect<void, never, X>) => Effect.forkIn(Effect.interruptible(effect), scope)
      const reader = Effect.scoped(Effect.flatMap(Stream.toPull(stream), (pull) => watched.read(pull)))
      return Effect.flatMap(fork(reader), (readerFiber) => {
        watched.readerFiber = readerFiber
        return Effect.as(Effect.zip(fork(watched.requestTimer()), fork(Effect.suspend(() => watched.idleTimer()))), {
          scope,
          watched
        })
      })
    }))
  return Stream.fromChannel(
    Channel.acquireUseRelease(start, ({ watched }) => watched.channel, ({ scope }, exit) => Scope.close(scope, exit))
  )
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
  timeouts: Timeouts
): Stream.Stream<ModelChunk, ModelError> =>
  Stream.suspend(() => {
    const assembly = new Assembly()
    const parts = model.streamText({
      prompt: promptOf(request),
      toolkit: toolkitOf(request.tools),
      disableToolCallResolution: true
    })
    const chunks = mapChunksOrFail(
      Stream.catchAll(parts, (error) =>
        Stream.fromEffect(Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.fail(modelErrorOf(error, now))))),
      (chunk, out: Array<ModelChunk>) => assembly.onParts(chunk, out),
      nothingAtTheEnd
    ).pipe(Stream.provideService(RequestSettings, { model: request.model, maxTokens: request.maxTokens }))
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
      prompt: promptOf(request),
      tools: Object.values(toolkit.tools),
      toolChoice: "auto"
    }
    const chunks = mapChunksOrFail(
      parts(options, request.model, request.maxTokens),
      (chunk, out: Array<ModelChunk>) => assembly.onParts(chunk, out),
      nothingAtTheEnd
    )
    return withTimeouts(chunks, timeouts)
  })
