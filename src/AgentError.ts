/**
 * The typed errors of agents, the inbox, the registry, the loop, tools and the model seam
 * (SPEC §9). Each message says what happened and what to do about it.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import type { InvalidSessionId } from "./Message.js"
import { Item as PendingItem } from "./Pending.js"
import type * as SessionError from "./SessionError.js"
import { TurnEndReason } from "./SessionEvent.js"
import { TurnResult } from "./TurnResult.js"

const CancelCauseSchema = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("user") }),
  Schema.Struct({ kind: Schema.Literal("parent") }),
  Schema.Struct({ kind: Schema.Literal("hook"), reason: Schema.String }),
  Schema.Struct({ kind: Schema.Literal("disposed") })
)

/**
 * A `MessageId` that this session already accepted (INB-01): nothing was written.
 *
 * @since 0.1.0
 * @category errors
 */
export class DuplicateMessage extends Schema.TaggedError<DuplicateMessage>("effect-agent/DuplicateMessage")(
  "DuplicateMessage",
  { id: Schema.String, state: Schema.Literal("pending", "entered", "canceled", "rejected") }
) {
  override get message(): string {
    return `message ${JSON.stringify(this.id)} was already accepted by this session (${this.state}); ` +
      "a message id is accepted once per session, so a retry is safe to drop — use a new id for new input"
  }
}

/**
 * A stored inbox splice does not apply to the replayed inbox (INB-05). The agent was not built;
 * nothing was repaired.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidInboxLog extends Schema.TaggedError<InvalidInboxLog>("effect-agent/InvalidInboxLog")(
  "InvalidInboxLog",
  { id: Schema.String, seq: Schema.Number, reason: Schema.String }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)}: the inbox splice at seq ${this.seq} is invalid (${this.reason}); ` +
      "the log was not changed — inspect it by hand"
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class AgentAlreadyExists extends Schema.TaggedError<AgentAlreadyExists>("effect-agent/AgentAlreadyExists")(
  "AgentAlreadyExists",
  { id: Schema.String, where: Schema.Literal("live", "stored", "locked") }
) {
  override get message(): string {
    const where = this.where === "live"
      ? "is live in this process"
      : this.where === "stored"
      ? "is already stored (resume it instead)"
      : "is held by another writer"
    return `agent ${JSON.stringify(this.id)} ${where}; choose another id`
  }
}

/**
 * An `onCreated` hook failed; the creation was rolled back.
 *
 * @since 0.1.0
 * @category errors
 */
export class AgentCreationVetoed extends Schema.TaggedError<AgentCreationVetoed>(
  "effect-agent/AgentCreationVetoed"
)("AgentCreationVetoed", { id: Schema.String, cause: Schema.Defect }) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} was vetoed by an onCreated hook and rolled back; see the cause`
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class NoAgentFactory extends Schema.TaggedError<NoAgentFactory>("effect-agent/NoAgentFactory")(
  "NoAgentFactory",
  {}
) {
  override get message(): string {
    return "no agent factory is installed; provide AgentLoop.layer (or AgentRuntime.layer*)"
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class FactoryAlreadySet extends Schema.TaggedError<FactoryAlreadySet>("effect-agent/FactoryAlreadySet")(
  "FactoryAlreadySet",
  {}
) {
  override get message(): string {
    return "an agent factory is already installed; close the installer's Scope before installing another"
  }
}

/**
 * The factory is shutting down (its Scope is closing).
 *
 * @since 0.1.0
 * @category errors
 */
export class AgentLoopInactive extends Schema.TaggedError<AgentLoopInactive>("effect-agent/AgentLoopInactive")(
  "AgentLoopInactive",
  {}
) {
  override get message(): string {
    return "the agent loop is shutting down and creates no more agents; retry against the new loop"
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class PersistenceNotConfigured extends Schema.TaggedError<PersistenceNotConfigured>(
  "effect-agent/PersistenceNotConfigured"
)("PersistenceNotConfigured", { id: Schema.String }) {
  override get message(): string {
    return `cannot resume ${JSON.stringify(this.id)}: no SessionPersistence is configured; provide one ` +
      "(AgentRuntime.layerMemory, NodeFileSessionPersistence.layerRuntime, SqlSessionPersistence.layerRuntime)"
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class InvalidAgentOptions extends Schema.TaggedError<InvalidAgentOptions>("effect-agent/InvalidAgentOptions")(
  "InvalidAgentOptions",
  { reason: Schema.String }
) {
  override get message(): string {
    return `invalid agent options: ${this.reason}`
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class AgentBusy extends Schema.TaggedError<AgentBusy>("effect-agent/AgentBusy")(
  "AgentBusy",
  {
    id: Schema.String,
    /**
     * What it is busy with, when it is not the default (maintenance runs only while the agent is
     * idle): e.g. an inbox `onChange` observer writing to its own inbox (CORE-07).
     *
     * @since 0.2.0
     */
    reason: Schema.optional(Schema.String)
  }
) {
  override get message(): string {
    return this.reason !== undefined
      ? `${JSON.stringify(this.id)} is busy: ${this.reason}`
      : `agent ${JSON.stringify(this.id)} is busy; maintenance runs only while it is idle (await whenIdle first)`
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class AgentCanceled extends Schema.TaggedError<AgentCanceled>("effect-agent/AgentCanceled")(
  "AgentCanceled",
  { id: Schema.String, cause: CancelCauseSchema }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)}: the task was canceled (${this.cause.kind})`
  }
}

/**
 * The agent is being or was torn down.
 *
 * @since 0.1.0
 * @category errors
 */
export class AgentInactive extends Schema.TaggedError<AgentInactive>("effect-agent/AgentInactive")(
  "AgentInactive",
  { id: Schema.String }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} is disposed or being disposed; resume it to continue`
  }
}

/**
 * A durable write of the agent failed; it takes no more input until it is disposed and resumed
 * (SES-02b).
 *
 * @since 0.1.0
 * @category errors
 */
export class AgentBroken extends Schema.TaggedError<AgentBroken>("effect-agent/AgentBroken")(
  "AgentBroken",
  { id: Schema.String, cause: Schema.Defect }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} could not write its log; dispose it and resume the session`
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class DuplicateTool extends Schema.TaggedError<DuplicateTool>("effect-agent/DuplicateTool")(
  "DuplicateTool",
  { name: Schema.String }
) {
  override get message(): string {
    return `a tool named ${JSON.stringify(this.name)} is already registered here; tool names are unique per registry`
  }
}

/**
 * What a tool fails with when what it needs is out of reach for now, e.g. an MCP server that is
 * down or being reconnected (MCP-02). The model sees an error result with the code
 * `TOOL_UNAVAILABLE` and this message; the turn goes on.
 *
 * @since 0.3.0
 * @category errors
 */
export class ToolUnavailable extends Schema.TaggedError<ToolUnavailable>("effect-agent/ToolUnavailable")(
  "ToolUnavailable",
  { tool: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `the tool ${JSON.stringify(this.tool)} is unavailable for now: ${this.reason}; ` +
      "it may work again later: carry on without it or call it again later"
  }
}

/**
 * What a sub-agent tool (`Tool.agent`, SUB-01) fails with when its child could not run the call to
 * completion: the child's turn ended otherwise than `completed` (`reason` says how), or the child
 * could not be started. The model sees an error result with the code `SUBAGENT_FAILED`; the child's
 * session (`child`) keeps what it did.
 *
 * @since 0.3.0
 * @category errors
 */
export class SubAgentFailed extends Schema.TaggedError<SubAgentFailed>("effect-agent/SubAgentFailed")(
  "SubAgentFailed",
  { tool: Schema.String, child: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `the sub-agent ${JSON.stringify(this.child)} of tool ${JSON.stringify(this.tool)} did not finish: ` +
      `${this.reason}; its session keeps what it did: retry with a simpler task or carry on without it`
  }
}

/**
 * What a sub-agent tool (`Tool.agent`, SUB-02) fails with when the calling agent is already `depth`
 * levels below its root and its `maxAgentDepth` (`max`) allows no deeper child. No child is made; the
 * model sees an error result with the code `MAX_AGENT_DEPTH`.
 *
 * @since 0.3.0
 * @category errors
 */
export class MaxAgentDepthExceeded extends Schema.TaggedError<MaxAgentDepthExceeded>(
  "effect-agent/MaxAgentDepthExceeded"
)("MaxAgentDepthExceeded", { tool: Schema.String, depth: Schema.Number, max: Schema.Number }) {
  override get message(): string {
    return `the tool ${JSON.stringify(this.tool)} would start a sub-agent ${this.depth + 1} levels deep, ` +
      `beyond maxAgentDepth ${this.max}; do this part of the work yourself instead of delegating it`
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class NoInitiator extends Schema.TaggedError<NoInitiator>("effect-agent/NoInitiator")("NoInitiator", {}) {
  override get message(): string {
    return "no agent initiated this work; run it inside withInitiator(agent)"
  }
}

/**
 * @since 0.1.0
 * @category errors
 */
export class InitiatorScopeClosed extends Schema.TaggedError<InitiatorScopeClosed>(
  "effect-agent/InitiatorScopeClosed"
)("InitiatorScopeClosed", {}) {
  override get message(): string {
    return "the agent registry is closing and accepts no new initiator regions"
  }
}

/**
 * Teardown failures, combined (LIFE-03). The agent was unregistered all the same.
 *
 * @since 0.1.0
 * @category errors
 */
export class AgentDisposeError extends Schema.TaggedError<AgentDisposeError>("effect-agent/AgentDisposeError")(
  "AgentDisposeError",
  { id: Schema.String, cause: Schema.Defect }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} was torn down, but some steps failed; see the cause`
  }
}

/**
 * An agent's teardown did not finish within the AgentLoop's `teardownTimeout` (CORE-06): a durable
 * write stalls (a disk or database that never answers). The owners were released and the agent left
 * the registry; its session stays locked until the stalled write settles, then resuming it works
 * (with repair).
 *
 * @since 0.2.0
 * @category errors
 */
export class TeardownTimeout extends Schema.TaggedError<TeardownTimeout>("effect-agent/TeardownTimeout")(
  "TeardownTimeout",
  { id: Schema.String, timeoutMillis: Schema.Number }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)}: its teardown did not finish within ${this.timeoutMillis} ms (a durable ` +
      "write is stalled); it was released, but its session stays locked until that write settles: resume it then"
  }
}

// they live in `internal/model/error.ts`, where the model adapters import them (ARCH-02)
export {
  /** @since 0.1.0 */
  ModelError,
  /** @since 0.2.0 */
  retryableModelErrorCodes
} from "./internal/model/error.js"
export type {
  /** @since 0.2.0 */
  ModelErrorCode
} from "./internal/model/error.js"

/**
 * What a model's `validateRoute` answers for a route it cannot serve (PKG-06); `create` turns it
 * into `InvalidAgentOptions` before anything is published.
 *
 * @since 0.2.0
 * @category errors
 */
export class RouteRefused extends Schema.TaggedError<RouteRefused>("effect-agent/RouteRefused")(
  "RouteRefused",
  { provider: Schema.String, model: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `the installed model cannot serve provider ${JSON.stringify(this.provider)} model ` +
      `${JSON.stringify(this.model)}: ${this.reason}`
  }
}

/**
 * What creating an agent can fail with.
 *
 * @since 0.1.0
 * @category errors
 */
export type CreateError =
  | InvalidSessionId
  | InvalidAgentOptions
  | SessionError.InvalidEventData
  | SessionError.ForkInsideOpenTurn
  | SessionError.InvalidForkBoundary
  | AgentAlreadyExists
  | AgentCreationVetoed
  | NoAgentFactory
  | AgentLoopInactive
  | AgentInactive
  | SessionError.SessionFull
  | SessionError.SessionConflict
  | SessionError.PersistenceError

/**
 * What resuming an agent can fail with.
 *
 * @since 0.1.0
 * @category errors
 */
export type ResumeError =
  | InvalidSessionId
  | InvalidAgentOptions
  | PersistenceNotConfigured
  | SessionError.SessionAlreadyLive
  | SessionError.SessionNotFound
  | SessionError.SessionLocked
  | SessionError.SessionCorrupt
  | SessionError.SessionFormatUnsupported
  | InvalidInboxLog
  | AgentCreationVetoed
  | NoAgentFactory
  | AgentLoopInactive
  | SessionError.InvalidEventData
  | SessionError.SessionFull
  | SessionError.SessionConflict
  | SessionError.PersistenceError

/**
 * What a send (`followup`, `steer`, `inject`, `send`) can fail with: `InvalidAgentOptions` when the
 * message's own `settings` or `output` are invalid or its provider cannot take one (APP-04).
 *
 * @since 0.1.0
 * @category errors
 */
export type SendError =
  | DuplicateMessage
  | InvalidAgentOptions
  | SessionError.InvalidEventData
  | AgentInactive
  | AgentBroken
  | SessionError.SessionAppendError

/** An end reason in a few words, for a message. */
const describeReason = (reason: TurnEndReason): string => {
  switch (reason.kind) {
    case "error":
      return `error (${reason.error.code}: ${reason.error.message})`
    case "blocked":
      return `blocked by a preStep hook (${reason.reason})`
    case "aborted":
      return `aborted (canceled: ${reason.cause.kind})`
    default:
      return reason.kind
  }
}

/**
 * The turn that `run` (or `stream`, `awaitTurn`) waited for ended otherwise than `completed`
 * (APP-01): `reason` is its end reason, `partial` what it produced up to its end, as
 * `agent.turnResult(turn)` derives it from the log.
 *
 * @since 0.3.0
 * @category errors
 */
export class TurnFailed extends Schema.TaggedError<TurnFailed>("effect-agent/TurnFailed")(
  "TurnFailed",
  { id: Schema.String, turn: Schema.Number, reason: TurnEndReason, partial: TurnResult }
) {
  override get message(): string {
    return `turn ${this.turn} of agent ${JSON.stringify(this.id)} ended ${describeReason(this.reason)}; ` +
      "what it produced is in `partial`, and the session is usable: send the next message when ready"
  }
}

/**
 * The message `run` (or `stream`) sent was removed from the inbox before a turn claimed it (APP-01):
 * a cancel discarded it (`agent.cancel` without `keepInbox`, or `inbox.remove`). Nothing ran for it.
 *
 * @since 0.3.0
 * @category errors
 */
export class MessageDiscarded extends Schema.TaggedError<MessageDiscarded>("effect-agent/MessageDiscarded")(
  "MessageDiscarded",
  { id: Schema.String, messageId: Schema.String }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)}: message ${JSON.stringify(this.messageId)} was canceled before a ` +
      "turn took it, so no turn ran for it; send it again (with a new message id) to run it"
  }
}

/**
 * `awaitTurn` (or `GET /sessions/:id/turns/:turn`) named a turn the session's log does not have
 * (APP-01).
 *
 * @since 0.3.0
 * @category errors
 */
export class TurnNotFound extends Schema.TaggedError<TurnNotFound>("effect-agent/TurnNotFound")(
  "TurnNotFound",
  { id: Schema.String, turn: Schema.Number, lastTurn: Schema.Number }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} has no turn ${this.turn} (its last turn is ${this.lastTurn}); ` +
      "use the turn number a TurnResult or the 202 of POST /runs gave"
  }
}

/**
 * `approve` or `reject` named a call (or `approvalId`) that has no approval request in the session's
 * open step: nothing was written.
 *
 * @since 0.3.0
 * @category errors
 */
export class ApprovalNotFound extends Schema.TaggedError<ApprovalNotFound>("effect-agent/ApprovalNotFound")(
  "ApprovalNotFound",
  { sessionId: Schema.String, callId: Schema.String }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.sessionId)} has no approval request ${JSON.stringify(this.callId)} in ` +
      "its open step; list what waits with `agent.pending` and decide by its callId or approvalId"
  }
}

/**
 * `approve` or `reject` of a request that was decided otherwise before: nothing was written.
 * The same decision again is no error (it returns `{duplicate: true}`).
 *
 * @since 0.3.0
 * @category errors
 */
export class ApprovalAlreadyDecided extends Schema.TaggedError<ApprovalAlreadyDecided>(
  "effect-agent/ApprovalAlreadyDecided"
)(
  "ApprovalAlreadyDecided",
  { sessionId: Schema.String, callId: Schema.String, decision: Schema.Literal("approved", "rejected", "canceled") }
) {
  override get message(): string {
    return `the approval request ${JSON.stringify(this.callId)} of session ${JSON.stringify(this.sessionId)} ` +
      `was already ${this.decision}; a decision is final, so nothing was written`
  }
}

/**
 * `approve(callId, {arguments})` with argument text the tool's parameters do not decode:
 * nothing was written and the request still waits.
 *
 * @since 0.3.0
 * @category errors
 */
export class InvalidApprovalArguments extends Schema.TaggedError<InvalidApprovalArguments>(
  "effect-agent/InvalidApprovalArguments"
)(
  "InvalidApprovalArguments",
  { callId: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `the edited arguments of call ${JSON.stringify(this.callId)} do not match the tool's parameters ` +
      `(${this.reason}); nothing was written: approve again with valid JSON arguments, or without them`
  }
}

/**
 * The turn that `run` (or `stream`) waited for is suspended: it waits for a person to
 * decide `pending` (`agent.approve`, `agent.reject`, `agent.respond`). The turn stays open and
 * durable; `awaitTurn(turn)` waits for its end, or run with `{waitForInput: true}` to wait.
 *
 * @since 0.3.0
 * @category errors
 */
export class TurnSuspended extends Schema.TaggedError<TurnSuspended>("effect-agent/TurnSuspended")(
  "TurnSuspended",
  { sessionId: Schema.String, turn: Schema.Number, pending: Schema.Array(PendingItem) }
) {
  override get message(): string {
    return `turn ${this.turn} of session ${JSON.stringify(this.sessionId)} waits for ${this.pending.length} ` +
      "decision(s) or answer(s) (see `pending`); settle them with approve/reject/respond, then awaitTurn(turn) — " +
      "or run with { waitForInput: true } to wait"
  }
}

/**
 * What `agent.approve` can fail with.
 *
 * @since 0.3.0
 * @category errors
 */
export type ApproveError =
  | ApprovalNotFound
  | ApprovalAlreadyDecided
  | InvalidApprovalArguments
  | AgentInactive
  | SessionError.SessionAppendError

/**
 * What `agent.reject` can fail with.
 *
 * @since 0.3.0
 * @category errors
 */
export type RejectError = ApprovalNotFound | ApprovalAlreadyDecided | AgentInactive | SessionError.SessionAppendError

/**
 * What `agent.run` can fail with (APP-01): the errors of a send, the turn's own failure, or the
 * message discarded before a turn took it.
 *
 * @since 0.3.0
 * @category errors
 */
export type RunError = SendError | TurnFailed | MessageDiscarded

/**
 * What `agent.awaitTurn` can fail with (APP-01).
 *
 * @since 0.3.0
 * @category errors
 */
export type AwaitTurnError = TurnFailed | TurnNotFound | AgentInactive | AgentBroken

/**
 * `respond` or `decline` named a question this session never asked (HIL-03): nothing was written.
 *
 * @since 0.3.0
 * @category errors
 */
export class InputNotFound extends Schema.TaggedError<InputNotFound>("effect-agent/InputNotFound")(
  "InputNotFound",
  { sessionId: Schema.String, requestId: Schema.String }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.sessionId)} has no question ${JSON.stringify(this.requestId)}; ` +
      "use a requestId from agent.pending or an InputRequested event of this session"
  }
}

/**
 * The value given to `respond` does not decode with the question's Schema (HIL-03): nothing was
 * written and the question is still pending.
 *
 * @since 0.3.0
 * @category errors
 */
export class InvalidResponse extends Schema.TaggedError<InvalidResponse>("effect-agent/InvalidResponse")(
  "InvalidResponse",
  { sessionId: Schema.String, requestId: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `the answer to question ${JSON.stringify(this.requestId)} of session ${JSON.stringify(this.sessionId)} ` +
      `does not match its schema: ${this.reason}; the question is still pending: answer again with a value its ` +
      "jsonSchema accepts"
  }
}

/**
 * The question was settled already, otherwise than this call asks (HIL-03, the idempotency ruling):
 * answered with another value, declined, timed out or canceled (`outcome`). Nothing was written; the
 * same answer again would have succeeded as a duplicate.
 *
 * @since 0.3.0
 * @category errors
 */
export class InputAlreadyProvided extends Schema.TaggedError<InputAlreadyProvided>("effect-agent/InputAlreadyProvided")(
  "InputAlreadyProvided",
  {
    sessionId: Schema.String,
    requestId: Schema.String,
    outcome: Schema.Literal("provided", "declined", "canceled", "timeout")
  }
) {
  override get message(): string {
    return `question ${JSON.stringify(this.requestId)} of session ${JSON.stringify(this.sessionId)} is settled ` +
      `already (${this.outcome}); a question takes one answer: read the session's log for the one it got`
  }
}

/**
 * What `Tool.ask` fails with when the person declined to answer (`decline`, HIL-03). The tool may
 * carry on without the answer or fail; the model sees what the tool returns.
 *
 * @since 0.3.0
 * @category errors
 */
export class QuestionDeclined extends Schema.TaggedError<QuestionDeclined>("effect-agent/QuestionDeclined")(
  "QuestionDeclined",
  { requestId: Schema.String, reason: Schema.optional(Schema.String) }
) {
  override get message(): string {
    return `question ${JSON.stringify(this.requestId)} was declined` +
      (this.reason !== undefined ? ` (${this.reason})` : "") + "; carry on without the answer or ask differently"
  }
}

/**
 * What `Tool.ask` fails with when its `timeout` passed without an answer (HIL-03): the question is
 * settled as `timeout` in the log, and a later answer fails `InputAlreadyProvided`.
 *
 * @since 0.3.0
 * @category errors
 */
export class QuestionTimedOut extends Schema.TaggedError<QuestionTimedOut>("effect-agent/QuestionTimedOut")(
  "QuestionTimedOut",
  { requestId: Schema.String }
) {
  override get message(): string {
    return `question ${JSON.stringify(this.requestId)} got no answer before its timeout; ` +
      "carry on without the answer, or ask again with a longer timeout"
  }
}

/**
 * `Tool.ask` was used outside a tool call an agent runs (HIL-03): only a tool's `run`, while the
 * agent's loop runs it, can ask a person.
 *
 * @since 0.3.0
 * @category errors
 */
export class AskUnavailable extends Schema.TaggedError<AskUnavailable>("effect-agent/AskUnavailable")(
  "AskUnavailable",
  { question: Schema.String }
) {
  override get message(): string {
    return `Tool.ask(${JSON.stringify(this.question.slice(0, 80))}) ran outside a tool call of an agent; ` +
      "call it inside a tool's run (on the fiber the agent runs it on, or one it forks)"
  }
}

/**
 * What `agent.respond` can fail with (HIL-03).
 *
 * @since 0.3.0
 * @category errors
 */
export type RespondError =
  | InputNotFound
  | InvalidResponse
  | InputAlreadyProvided
  | AgentInactive
  | AgentBroken
  | SessionError.SessionAppendError

/**
 * What `agent.decline` can fail with (HIL-03).
 *
 * @since 0.3.0
 * @category errors
 */
export type DeclineError = Exclude<RespondError, InvalidResponse>
