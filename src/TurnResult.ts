/**
 * The outcome of one turn, derived from the session's log (APP-01): what `agent.run` returns, what
 * `agent.turnResult` reads back for any past turn, and what `TurnFailed` carries as its partial
 * result. It is plain data decoded from the log, so a caller that lost its fiber (a crash, a
 * restart) reads the same value later.
 *
 * @since 0.3.0
 */
import { Schema } from "effect"
import { AssistantMessage, ToolResultMessage } from "./Message.js"
import { TurnEndReason, Usage } from "./SessionEvent.js"

/**
 * One tool call of a turn with its result: `arguments` is the raw argument text the model sent,
 * `result` the text parts of the result joined.
 *
 * @since 0.3.0
 * @category models
 */
export class ToolCallOutcome extends Schema.Class<ToolCallOutcome>("effect-agent/ToolCallOutcome")({
  callId: Schema.String,
  name: Schema.String,
  arguments: Schema.String,
  result: Schema.String,
  isError: Schema.Boolean
}) {}

/**
 * The seqs of a turn's `turn/start` and `turn/end` in its session's log.
 *
 * @since 0.3.0
 * @category models
 */
export const TurnSeqs = Schema.Struct({ from: Schema.NonNegativeInt, to: Schema.NonNegativeInt })

/**
 * @since 0.3.0
 * @category models
 */
export type TurnSeqs = typeof TurnSeqs.Type

/**
 * A message a turn produced: the model's replies and the tools' results, in log order.
 *
 * @since 0.3.0
 * @category models
 */
export const TurnMessage = Schema.Union(AssistantMessage, ToolResultMessage)

/**
 * @since 0.3.0
 * @category models
 */
export type TurnMessage = typeof TurnMessage.Type

/**
 * How one turn ended (APP-01): `reason` from its `turn/end`; `text` the text of its last assistant
 * message (`""` when that message had only tool calls, or when the turn had none); `messages` its
 * assistant and tool messages in log order; `toolCalls` every call with its result; `usage` the sum
 * over its assistant messages and the compactions it ran (not its children's); `seq` where it sits
 * in the log. `output` is the decoded typed output of a turn that asked for one.
 *
 * @since 0.3.0
 * @category models
 */
export class TurnResult extends Schema.Class<TurnResult>("effect-agent/TurnResult")({
  turn: Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)),
  reason: TurnEndReason,
  text: Schema.String,
  output: Schema.optionalWith(Schema.Unknown, { exact: true }),
  messages: Schema.Array(TurnMessage),
  toolCalls: Schema.Array(ToolCallOutcome),
  usage: Usage,
  seq: TurnSeqs
}) {
  /**
   * Whether the turn ended `completed` (what `run` succeeds with).
   *
   * @since 0.3.0
   */
  get isCompleted(): boolean {
    return this.reason.kind === "completed"
  }
}

/**
 * A {@link TurnResult} whose `output` was decoded with the Schema of `run(m, { output })` (OUT-01).
 *
 * @since 0.3.0
 * @category models
 */
export type TypedTurnResult<A> = TurnResult & { readonly output: A }
