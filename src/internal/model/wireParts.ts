/**
 * What both wire models build their `@effect/ai` output from (MOD-01, MOD-02): the raw
 * argument text of a prompt's tool call, tool definitions as JSON Schema, and the parts that close
 * a tool call without ever failing the stream on bad arguments.
 *
 * @internal
 */
import type { LanguageModel, Prompt, Response, Tool } from "@effect/ai"
import { Tool as AiTool } from "@effect/ai"
import { Cause, Channel, Chunk, Effect, Option, Schema, Stream } from "effect"
import { ModelError } from "./error.js"
import type { RequestWatch } from "./timeouts.js"
import { OutputBudget, outputTooLarge } from "./providerOutput.js"
import * as sse from "./sseReader.js"

/**
 * What the wire models read of `LanguageModel.ProviderOptions`.
 *
 * @internal
 */
export type WireOptions = Pick<LanguageModel.ProviderOptions, "prompt" | "tools" | "toolChoice">

/**
 * The provider-options key under which the adapter passes the log's raw argument text of a
 * prompt's tool call (MOD-02), and under which the wire models report a call's raw text.
 *
 * @internal
 */
export const optionsKey = "effect-agent"

/**
 * The argument text of a prompt's tool call: the raw text the log stored when the adapter passed
 * it, else the JSON of its parameters.
 *
 * @internal
 */
export const rawArguments = (part: Prompt.ToolCallPart): string => {
  const raw = part.options[optionsKey]?.["arguments"]
  if (typeof raw === "string") return raw
  if (typeof part.params === "string") return part.params
  return JSON.stringify(part.params ?? {})
}

/**
 * The JSON object of an argument text, or None when it is not a JSON object.
 *
 * @internal
 */
export const argumentsObject = (text: string): Option.Option<Record<string, unknown>> => {
  try {
    const parsed: unknown = JSON.parse(text)
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
      ? Option.some(parsed as Record<string, unknown>)
      : Option.none()
  } catch {
    return Option.none()
  }
}

/**
 * A tool as the wire sees it: its name, description and JSON Schema.
 *
 * @internal
 */
export interface WireTool {
  readonly name: string
  readonly description: string
  readonly parameters: unknown
}

/**
 * The wire form of `@effect/ai` tools (user-defined ones; provider-defined tools are not part of
 * these protocols).
 *
 * @internal
 */
export const wireTools = (tools: ReadonlyArray<Tool.Any>): ReadonlyArray<WireTool> =>
  tools.filter((tool) => AiTool.isUserDefined(tool)).map((tool) => ({
    name: tool.name,
    description: tool.description ?? "",
    parameters: AiTool.getJsonSchemaFromSchemaAst(tool.parametersSchema.ast)
  }))

/**
 * The parts that close one streamed tool call: `tool-params-start/delta/end` carrying the raw
 * text, then a `tool-call` part only when the call names a tool of the request and its arguments
 * decode with that tool's parameters. A call that would not decode is delivered by its params
 * parts alone, so `LanguageModel`'s decoding never fails the stream on it (MOD-02): the adapter
 * builds calls from the params parts and the loop answers bad arguments `INVALID_ARGUMENTS`.
 *
 * @internal
 */
export const closeCall = (
  call: { readonly id: string; readonly name: string; readonly text: string },
  tools: ReadonlyArray<Tool.Any>
): Array<Response.StreamPartEncoded> => {
  const parts: Array<Response.StreamPartEncoded> = [
    { type: "tool-params-start", id: call.id, name: call.name },
    { type: "tool-params-delta", id: call.id, delta: call.text },
    { type: "tool-params-end", id: call.id }
  ]
  const tool = tools.find((candidate) => candidate.name === call.name)
  const params = argumentsObject(call.text)
  if (tool !== undefined && Option.isSome(params)) {
    const schema = tool.parametersSchema as unknown as Schema.Schema<unknown, unknown>
    if (Option.isSome(Schema.decodeUnknownOption(schema)(params.value))) {
      parts.push({
        type: "tool-call",
        id: call.id,
        name: call.name,
        params: params.value,
        metadata: { [optionsKey]: { arguments: call.text } }
      })
    }
  }
  return parts
}

/**
 * The encoded usage of `@effect/ai` from token counts (undefined stays undefined).
 *
 * @internal
 */
export const usagePart = (counts: {
  readonly input?: number | undefined
  readonly output?: number | undefined
  readonly reasoning?: number | undefined
  readonly cached?: number | undefined
}): Response.FinishPartEncoded["usage"] => ({
  inputTokens: counts.input,
  outputTokens: counts.output,
  totalTokens: counts.input !== undefined && counts.output !== undefined ? counts.input + counts.output : undefined,
  ...(counts.reasoning !== undefined ? { reasoningTokens: counts.reasoning } : {}),
  ...(counts.cached !== undefined ? { cachedInputTokens: counts.cached } : {})
})

/**
 * A non-negative integer of a provider's JSON, else undefined.
 *
 * @internal
 */
export const count = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : undefined

/**
 * A JSON object's fields (undefined for anything else).
 *
 * @internal
 */
export const asObject = (value: unknown): Record<string, unknown> | undefined =>
  typeof value === "object" && value !== null && !Array.isArray(value) ? value as Record<string, unknown> : undefined

/**
 * A field of a JSON object (undefined for anything else).
 *
 * @internal
 */
export const field = (value: unknown, name: string): unknown => asObject(value)?.[name]

/**
 * The failure of a stream that ended before the provider said the reply was complete: the
 * connection dropped (MOD-04 `NETWORK`, retried).
 *
 * @internal
 */
export const truncated = (provider: string): ModelError =>
  new ModelError({ code: "NETWORK", reason: `${provider}: the stream ended before the reply was complete` })

/**
 * The failure of a data line that is not the JSON the protocol promises (`PROVIDER`).
 *
 * @internal
 */
export const malformed = (provider: string, data: string): ModelError =>
  new ModelError({ code: "PROVIDER", reason: `${provider} sent a malformed stream chunk: ${data.slice(0, 200)}` })

/**
 * `generateText` over a stream: text and reasoning deltas joined per part, tool calls and the
 * finish kept, params parts dropped.
 *
 * @internal
 */
export const collectParts = (parts: ReadonlyArray<Response.StreamPartEncoded>): Array<Response.PartEncoded> => {
  const out: Array<Response.PartEncoded> = []
  const open = new Map<string, { type: "text" | "reasoning"; text: string }>()
  for (const part of parts) {
    switch (part.type) {
      case "text-start":
      case "reasoning-start": {
        const entry = { type: part.type === "text-start" ? "text" as const : "reasoning" as const, text: "" }
        open.set(part.id, entry)
        out.push(entry)
        break
      }
      case "text-delta":
      case "reasoning-delta": {
        const entry = open.get(part.id)
        if (entry !== undefined) entry.text += part.delta
        break
      }
      case "tool-call":
      case "finish":
      case "response-metadata":
        out.push(part)
        break
    }
  }
  return out
}

/**
 * A tool call as a wire reply closes it: its id, name and the model's raw argument text.
 *
 * @internal
 */
export interface ClosedCall {
  readonly id: string
  readonly name: string
  readonly text: string
}

/**
 * What a wire reply says, in the order the provider says it, written into `out` (the output of the
 * stream chunk being read): both the `@effect/ai` parts of our `LanguageModel`s and the adapter's
 * chunks are built from it (B13: building chunks straight from the reply saves a part object and
 * its assembly per delta).
 *
 * @internal
 */
export interface ReplySink<B> {
  out: Array<B>
  textStart(id: string): void
  textDelta(id: string, delta: string): void
  textEnd(id: string): void
  reasoningStart(id: string): void
  reasoningDelta(id: string, delta: string): void
  reasoningEnd(id: string): void
  /** A tool call, closed with the model's raw argument text (MOD-02). */
  toolCall(call: ClosedCall): void
  /** The end of the reply; a reason that stands for a failure (a content filter) fails the stream. */
  finish(reason: Response.FinishReason, usage: Response.FinishPartEncoded["usage"]): ModelError | undefined
}

/**
 * The `@effect/ai` stream parts of a reply, tool calls closed by {@link closeCall}.
 *
 * @internal
 */
export class PartsSink implements ReplySink<Response.StreamPartEncoded> {
  out: Array<Response.StreamPartEncoded> = []

  constructor(private readonly tools: ReadonlyArray<Tool.Any>) {}

  textStart(id: string): void {
    this.out.push({ type: "text-start", id })
  }
  textDelta(id: string, delta: string): void {
    this.out.push({ type: "text-delta", id, delta })
  }
  textEnd(id: string): void {
    this.out.push({ type: "text-end", id })
  }
  reasoningStart(id: string): void {
    this.out.push({ type: "reasoning-start", id })
  }
  reasoningDelta(id: string, delta: string): void {
    this.out.push({ type: "reasoning-delta", id, delta })
  }
  reasoningEnd(id: string): void {
    this.out.push({ type: "reasoning-end", id })
  }
  toolCall(call: ClosedCall): void {
    for (const part of closeCall(call, this.tools)) this.out.push(part)
  }
  finish(reason: Response.FinishReason, usage: Response.FinishPartEncoded["usage"]): undefined {
    this.out.push({ type: "finish", reason, usage })
    return undefined
  }
}

/**
 * The state of one streamed reply of a wire protocol: it tells the sink what the data of each SSE
 * event says, then what the reply's end says, or returns the failure (a provider error or a
 * malformed event fails the stream). What it keeps of the message (text, reasoning, tool calls)
 * it charges to the reply's {@link OutputBudget} (SEC-02).
 *
 * @internal
 */
export interface SseReply {
  onEvent<B>(data: string, sink: ReplySink<B>): ModelError | undefined
  end<B>(sink: ReplySink<B>): ModelError | undefined
}

/**
 * A chunk-by-chunk transformation that may fail, with what it adds at the upstream's end: one
 * channel stage (B13: `Stream.mapChunksEffect` costs ≈7 Effect operations per chunk, this ≈2, and
 * a provider streams about one chunk per delta).
 *
 * @internal
 */
export const mapChunksOrFail = <A, B, E, E2, R>(
  stream: Stream.Stream<A, E, R>,
  step: (chunk: Chunk.Chunk<A>, out: Array<B>) => E2 | undefined,
  end: (out: Array<B>) => E2 | undefined
): Stream.Stream<B, E | E2, R> => {
  const emit = (out: Array<B>, next: Channel.Channel<Chunk.Chunk<B>, Chunk.Chunk<A>, E | E2, E, unknown, unknown>) =>
    out.length === 0 ? next : Channel.flatMap(Channel.write(Chunk.unsafeFromArray(out)), () => next)
  const loop: Channel.Channel<Chunk.Chunk<B>, Chunk.Chunk<A>, E | E2, E, unknown, unknown> = Channel.readWithCause({
    onInput: (chunk: Chunk.Chunk<A>) => {
      const out: Array<B> = []
      const error = step(chunk, out)
      return error !== undefined ? emit(out, Channel.fail(error)) : emit(out, loop)
    },
    onFailure: (cause) => Channel.failCause(cause),
    onDone: () => {
      const out: Array<B> = []
      const error = end(out)
      return error !== undefined ? emit(out, Channel.fail(error)) : emit(out, Channel.void)
    }
  })
  return Stream.pipeThroughChannel(stream, loop)
}

/**
 * Where an SSE reply comes from: the body of a streaming request once it answered, what a failure
 * of that body means, what must not leave in an error (the key, MOD-03, SEC-08), how large an
 * event and the reply may grow (SEC-02), and, for our wire models' own requests, the watch of
 * their timeouts (MOD-04).
 *
 * @internal
 */
export interface SseSource<E> {
  readonly provider: string
  /** The largest SSE event and the largest assistant message, in UTF-8 bytes (SEC-02). */
  readonly maxEventBytes: number
  readonly open: Effect.Effect<Stream.Stream<Uint8Array, E>, ModelError>
  /** The failure of a body that broke off (a transport error mid-stream). */
  readonly dropped: (error: E) => ModelError
  /** An error the reply reports, as it may leave (the API key redacted). */
  readonly redact: (error: ModelError) => ModelError
  readonly watch?: RequestWatch | undefined
}

/** The channel reading an SSE body: decode, parse, reply and sink in one stage. */
type SseChannel<B, E> = Channel.Channel<Chunk.Chunk<B>, Chunk.Chunk<Uint8Array>, ModelError, E, unknown, unknown>

/**
 * What an SSE body says, as the sink builds it: a fresh parser, `SseReply` and sink per run, and
 * one channel stage from the body's bytes to the sink's output (B13: no stage for decoding, for
 * mapping errors or for the timeouts' watch, each of which cost Effect operations per network
 * read and per request). With a watch, it is told when each wait for the provider starts — when
 * the consumer asks for more, not while it is busy — and ends; once a timeout fired (aborting the
 * request), what follows fails with it. An event or a reply over `maxEventBytes` fails the stream
 * `OUTPUT_TOO_LARGE` with the network read that took it over (SEC-02); ending the stream aborts
 * the request.
 *
 * @internal
 */
export const sseStream = <B, E>(
  source: SseSource<E>,
  makeReply: (budget: OutputBudget) => SseReply,
  makeSink: () => ReplySink<B>
): Stream.Stream<B, ModelError> =>
  // Channel.flatMap over the opening, not Stream.unwrap (≈140 Effect operations per request more)
  Stream.fromChannel(Channel.flatMap(Channel.fromEffect(source.open), (body) => {
    const parser = new sse.Parser(source.maxEventBytes)
    const budget = new OutputBudget(source.provider, source.maxEventBytes)
    const reply = makeReply(budget)
    const sink = makeSink()
    const events: Array<string> = []
    const watch = source.watch
    const fail = (error: ModelError): SseChannel<B, E> => Channel.fail(watch?.failure ?? source.redact(error))
    const onBytes = (chunk: Chunk.Chunk<Uint8Array>, out: Array<B>): ModelError | undefined => {
      sink.out = out
      for (const bytes of chunk) {
        events.length = 0
        parser.feedBytes(bytes, events)
        for (const data of events) {
          const error = reply.onEvent(data, sink)
          if (error !== undefined) return error
          if (budget.failure !== undefined) return budget.failure
        }
        if (parser.tooLarge) return outputTooLarge(source.provider, "an event", source.maxEventBytes)
      }
      return undefined
    }
    // after a write, the consumer's next pull starts the next wait
    const next = (): SseChannel<B, E> => {
      if (watch === undefined) return read
      if (watch.failure !== undefined) return Channel.fail(watch.failure)
      watch.waiting()
      return read
    }
    const read: SseChannel<B, E> = Channel.readWithCause({
      onInput: (chunk: Chunk.Chunk<Uint8Array>) => {
        const out: Array<B> = []
        const error = onBytes(chunk, out)
        if (error !== undefined) return emit(out, fail(error))
        if (out.length === 0) return next()
        watch?.received()
        return Channel.flatMap(Channel.write(Chunk.unsafeFromArray(out)), next)
      },
      onFailure: (cause) => {
        watch?.received()
        return watch?.failure !== undefined
          ? Channel.fail(watch.failure)
          : Channel.failCause(Cause.map(cause, source.dropped))
      },
      onDone: () => {
        watch?.received()
        if (watch?.failure !== undefined) return Channel.fail(watch.failure)
        const out: Array<B> = []
        sink.out = out
        const error = reply.end(sink)
        return emit(out, error !== undefined ? fail(error) : Channel.void)
      }
    })
    return Channel.pipeTo(Stream.toChannel(body), read)
  }))

/** Writes `out` (when not empty), then goes on with `next`. */
const emit = <B, E>(out: Array<B>, next: SseChannel<B, E>): SseChannel<B, E> =>
  out.length === 0 ? next : Channel.flatMap(Channel.write(Chunk.unsafeFromArray(out)), () => next)
