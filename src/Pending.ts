/**
 * What a person still has to settle in a session (people in the loop): the approvals and questions of the
 * open step of its open turn, as `agent.pending` (and the host, the gateway and HTTP) report them.
 * Derived from the log alone, so a passive session's pending items are read without activating it.
 *
 * @since 0.3.0
 */
import { Schema } from "effect"
import { SessionId } from "./Message.js"
import { JsonRecord } from "./internal/log/jsonValue.js"

/**
 * An approval request: the call `callId` of tool `tool` waits for `agent.approve` or
 * `agent.reject` (addressed by `callId` or by the minted, URL-safe `approvalId`). `arguments` is the
 * model's raw argument text; `seq` the request's event; `deadline` (epoch milliseconds on the
 * session's Clock) is when it is rejected automatically, if it has one. `sessionId` is the
 * session the item lives in (a child's id for a sub-agent's item).
 *
 * @since 0.3.0
 * @category models
 */
export const Approval = Schema.TaggedStruct("Approval", {
  sessionId: SessionId,
  callId: Schema.String,
  approvalId: Schema.String,
  tool: Schema.String,
  arguments: Schema.String,
  turn: Schema.Number,
  step: Schema.Number,
  seq: Schema.Number,
  deadline: Schema.optionalWith(Schema.Number, { exact: true })
})

/**
 * @since 0.3.0
 * @category models
 */
export interface Approval extends Schema.Schema.Type<typeof Approval> {}

/**
 * A question a running tool asked (`Tool.ask`): answered with `agent.respond(requestId,
 * value)`, where `value` must match `jsonSchema`.
 *
 * @since 0.3.0
 * @category models
 */
export const Question = Schema.TaggedStruct("Question", {
  sessionId: SessionId,
  callId: Schema.String,
  requestId: Schema.String,
  question: Schema.String,
  jsonSchema: JsonRecord,
  turn: Schema.Number,
  step: Schema.Number,
  seq: Schema.Number,
  deadline: Schema.optionalWith(Schema.Number, { exact: true })
})

/**
 * @since 0.3.0
 * @category models
 */
export interface Question extends Schema.Schema.Type<typeof Question> {}

/**
 * A pending item: an approval or a question.
 *
 * @since 0.3.0
 * @category models
 */
export const Item = Schema.Union(Approval, Question)

/**
 * @since 0.3.0
 * @category models
 */
export type Item = Approval | Question

/**
 * What a decision or an answer returns (ruling "Idempotent decisions"): `duplicate` is `true` when the
 * same decision (or answer) was made before, in which case nothing was written.
 *
 * @since 0.3.0
 * @category models
 */
export interface Decision {
  readonly duplicate: boolean
}
