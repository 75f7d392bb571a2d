/**
 * The parts of one turn as `agent.stream` emits them (APP-02): text and reasoning as the model
 * streams it, tool calls as they start and finish, retries, step ends, and last the turn's result.
 *
 * @since 0.3.0
 */
import { Data, Option, Stream } from "effect"
import type { TurnResult } from "./TurnResult.js"

/**
 * One part of a streamed turn. `Retry`: the step's model request failed and is tried again — drop
 * the text and reasoning received since the step's last `StepFinished` (or the turn's start), the
 * retried request streams it afresh. `ToolCallStarted` comes when the call is dispatched (its
 * `tool/call` is durable), `ToolCallFinished` when its result is durable (`summary`: the result's
 * text, its first 2,000 characters). `TurnFinished` is the last part of a turn that completed.
 *
 * @since 0.3.0
 * @category models
 */
export type TurnPart = Data.TaggedEnum<{
  TextDelta: { readonly step: number; readonly text: string }
  ReasoningDelta: { readonly step: number; readonly text: string }
  ToolCallStarted: { readonly step: number; readonly callId: string; readonly name: string; readonly arguments: string }
  ToolCallFinished: { readonly step: number; readonly callId: string; readonly isError: boolean; readonly summary: string }
  Retry: { readonly step: number; readonly attempt: number; readonly code: string }
  StepFinished: { readonly step: number }
  TurnFinished: { readonly result: TurnResult }
}>

/**
 * Constructors and matchers for {@link TurnPart}.
 *
 * @since 0.3.0
 * @category constructors
 */
export const TurnPart = Data.taggedEnum<TurnPart>()

/**
 * The plain text of a streamed turn: its `TextDelta`s, as strings (APP-02). A retried step's text
 * is streamed again by the retry; watch for `Retry` parts on the full stream to drop the first try.
 *
 * @example
 * ```ts
 * import { Effect, Stream } from "effect"
 * import type { Agent } from "effect-agent"
 * import { TurnPart } from "effect-agent"
 *
 * const printAnswer = (agent: Agent.Agent) =>
 *   TurnPart.text(agent.stream("Tell me a joke")).pipe(
 *     Stream.runForEach((text) => Effect.sync(() => process.stdout.write(text)))
 *   )
 * ```
 *
 * @since 0.3.0
 * @category accessors
 */
export const text = <E, R>(stream: Stream.Stream<TurnPart, E, R>): Stream.Stream<string, E, R> =>
  Stream.filterMap(stream, (part) => part._tag === "TextDelta" ? Option.some(part.text) : Option.none())
