/**
 * The model seam (SPEC §8.2): what the loop asks a model, and what it streams back.
 *
 * @since 0.1.0
 */
import type { Schema, Scope, Stream } from "effect"
import { Context, Effect, Layer } from "effect"
import type { ModelError } from "./AgentError.js"
import * as scriptedModel from "./internal/scripted.js"
import type { Message, SessionId } from "./Message.js"
import type { FinishReason, JsonRecord, Usage } from "./SessionEvent.js"

export {
  /**
   * @since 0.1.0
   * @category errors
   */
  ModelError
} from "./AgentError.js"

/**
 * A tool as the model sees it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolSchema {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Struct<any>
  readonly jsonSchema: JsonRecord
}

/**
 * One model request, built from the session log alone (REQ-03).
 *
 * @since 0.1.0
 * @category models
 */
export interface ModelRequest {
  readonly sessionId: SessionId
  readonly provider: string
  readonly model: string
  readonly maxTokens?: number | undefined
  readonly system?: string | undefined
  readonly messages: ReadonlyArray<Message>
  readonly tools: ReadonlyArray<ToolSchema>
}

/**
 * What a model streams: text and reasoning deltas, complete tool calls with their raw argument
 * text, and a final `finish`. The driver normalises what it logs (DUR-02): unusable call ids are
 * replaced by minted ones (the provider's kept as `providerCallId`), usage keeps only its known
 * non-negative integer fields, and a reason outside {@link FinishReason} is logged as `"other"`.
 *
 * @since 0.1.0
 * @category models
 */
export type ModelChunk =
  | { readonly _tag: "TextDelta"; readonly text: string }
  | { readonly _tag: "ReasoningDelta"; readonly text: string }
  | { readonly _tag: "ToolCall"; readonly callId: string; readonly name: string; readonly arguments: string }
  | { readonly _tag: "Finish"; readonly reason: FinishReason; readonly usage?: Usage | undefined }

/**
 * The model service.
 *
 * @since 0.1.0
 * @category services
 */
export class Model extends Context.Tag("effect-agent/Model")<Model, {
  readonly stream: (request: ModelRequest) => Stream.Stream<ModelChunk, ModelError>
}>() {}

/**
 * One part of a scripted reply (see {@link scripted}). Build parts with {@link text},
 * {@link reasoning}, {@link toolCall}, {@link maxTokens}, {@link fail} and {@link hang}.
 *
 * @since 0.1.0
 * @category testing
 */
export type ReplyPart =
  | { readonly _tag: "Text"; readonly text: string }
  | { readonly _tag: "Reasoning"; readonly text: string }
  | { readonly _tag: "ToolCall"; readonly callId: string; readonly name: string; readonly arguments: string }
  | { readonly _tag: "MaxTokens"; readonly text: string }
  | { readonly _tag: "Fail"; readonly code: string }
  | { readonly _tag: "Hang"; readonly prefix: string }

/**
 * A scripted reply: one part, or several parts streamed in order
 * (e.g. `[Model.text("…"), Model.toolCall(…), Model.toolCall(…)]`).
 *
 * @since 0.1.0
 * @category testing
 */
export type Reply = ReplyPart | ReadonlyArray<ReplyPart>

/**
 * Replies consumed in request order.
 *
 * @since 0.1.0
 * @category testing
 */
export type Script = ReadonlyArray<Reply>

/**
 * Text, streamed in two deltas (split on a code point boundary) when it has more than one
 * character, so streaming consumers see more than one delta.
 *
 * @since 0.1.0
 * @category testing
 */
export const text = (value: string): ReplyPart => Object.freeze({ _tag: "Text", text: value })

/**
 * Reasoning, streamed as `ReasoningDelta`s the way {@link text} streams text.
 *
 * @since 0.1.0
 * @category testing
 */
export const reasoning = (value: string): ReplyPart => Object.freeze({ _tag: "Reasoning", text: value })

/**
 * A complete tool call with its raw argument text. A reply with a tool call finishes `tool-calls`.
 *
 * @since 0.1.0
 * @category testing
 */
export const toolCall = (callId: string, name: string, argumentsJson: string): ReplyPart =>
  Object.freeze({ _tag: "ToolCall", callId, name, arguments: argumentsJson })

/**
 * Text, then a `max-tokens` finish (unless the reply also has a tool call).
 *
 * @since 0.1.0
 * @category testing
 */
export const maxTokens = (value: string): ReplyPart => Object.freeze({ _tag: "MaxTokens", text: value })

/**
 * The stream fails with `ModelError{code}` (after any earlier parts of the reply).
 *
 * @since 0.1.0
 * @category testing
 */
export const fail = (code: string): ReplyPart => Object.freeze({ _tag: "Fail", code })

/**
 * Streams `prefix` as one `TextDelta` (nothing when it is empty), then waits until interrupted.
 *
 * @since 0.1.0
 * @category testing
 */
export const hang = (prefix: string): ReplyPart => Object.freeze({ _tag: "Hang", prefix })

/**
 * A scripted model and what it was asked.
 *
 * @since 0.1.0
 * @category testing
 */
export interface Scripted {
  readonly layer: Layer.Layer<Model>
  /** Every request so far, in arrival order. */
  readonly requests: Effect.Effect<ReadonlyArray<ModelRequest>>
  /** Completes when the `n`-th request (numbered from 1) has arrived; at once if it already did. */
  readonly awaitRequest: (n: number) => Effect.Effect<ModelRequest>
}

/**
 * The deterministic test model (SPEC §8.2). The script is either
 * - an array of replies, consumed in request order;
 * - a record of arrays by session id, each consumed in that session's request order;
 * - a function of the request and its number (from 1).
 *
 * A request arrives when its stream starts running; requests are numbered from 1 across all
 * sessions. A request beyond its script fails with `ModelError{code: "SCRIPT_EXHAUSTED"}`. Every
 * reply that neither fails nor hangs ends with a `Finish` chunk carrying a deterministic usage
 * (one input token per request message, one output token per streamed character). No timers.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import * as Model from "effect-agent/Model"
 *
 * const program = Effect.gen(function*() {
 *   const model = yield* Model.scripted([
 *     [Model.text("let me look"), Model.toolCall("c1", "read", "{\"path\":\"a.txt\"}")],
 *     Model.text("done")
 *   ])
 *   return model.layer
 * })
 * ```
 *
 * @since 0.1.0
 * @category testing
 */
export const scripted = (
  script: Script | Readonly<Record<string, Script>> | ((request: ModelRequest, n: number) => Reply)
): Effect.Effect<Scripted, never, Scope.Scope> =>
  Effect.map(scriptedModel.make(script), (model) => ({
    layer: Layer.succeed(Model, Model.of({ stream: model.stream })),
    requests: model.requests,
    awaitRequest: model.awaitRequest
  }))
