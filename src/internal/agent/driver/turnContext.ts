/**
 * What a turn has written so far (the record its closers read, CAN-05), and the loop's durable
 * write: one batch of core events, whose failure breaks the agent (SES-02b).
 *
 * @internal
 */
import type { Array as Arr } from "effect"
import type { Tracer } from "effect"
import { Cause, Data, Effect, Option } from "effect"
import type { MessageId, ToolResultMessage } from "../../../Message.js"
import type * as SessionError from "../../../SessionError.js"
import type { CoreEventInput } from "../../../SessionEvent.js"
import type * as Tool from "../../../Tool.js"
import type { Lock } from "../../lock.js"
import type { DriverState } from "./state.js"
import type { LoggedQuestion } from "./questions.js"
import type { TurnAsk } from "./turnOptions.js"
import { emptyAsk } from "./turnOptions.js"

/** A finished call's result, and the error it records (TOOL contracts, DUR-02). @internal */
export interface ToolOutcome {
  readonly message: ToolResultMessage
  readonly error?: { readonly name: string; readonly code: string }
}

/**
 * HIL-01/02: the approval request of a call and, once made, its decision (`arguments`: the edited
 * ones an approval runs with; `message`: what a rejected call's result says).
 *
 * @internal
 */
export interface CallApproval {
  readonly approvalId: string
  decision: "approved" | "rejected" | "canceled" | undefined
  arguments: string | undefined
  message: string | undefined
}

/** One tool call of the current step, in model order. @internal */
export interface PendingCall {
  readonly callId: string
  readonly providerCallId?: string | undefined
  readonly name: string
  readonly arguments: string
  /**
   * HIL-03: a call dispatched before a restart (its `tool/call` is logged) that runs again from its
   * start: its logged questions, which its asks replay. Its `tool/call` is not written again.
   */
  readonly replay?: ReadonlyArray<LoggedQuestion> | undefined
  state: "waiting" | "started" | "done"
  result: ToolOutcome | undefined
  /** HIL-01: the call waits for (or got) a person's decision before its `tool/call`. */
  approval?: CallApproval | undefined
  /** Its `tool/result` is in the log already (a resumed step, or a result written out of order). */
  resulted?: boolean | undefined
}

/** HIL-01: a call that waits for a decision (none made yet). @internal */
export const isUndecided = (call: PendingCall): boolean =>
  call.approval !== undefined && call.approval.decision === undefined && call.state === "waiting"

/** What the current turn has written so far, for landing a cancel safely (CAN-05). @internal */
export class TurnContext {
  /** Steps opened so far: a turn that opened none ends its drain (DLV-09). */
  steps = 0
  openStep: number | undefined = undefined
  /** The route of the current step's request (the source of an interrupted assistant message). */
  route: Tool.Route | undefined = undefined
  streamedText = ""
  streamedReasoning = ""
  streaming = false
  calls: Array<PendingCall> = []
  logged = 0
  /** TOOL-01: the results of the step's calls are logged one flush at a time (made on first use). */
  resultsLock: Lock | undefined = undefined
  /** OBS-01: the turn's span and the current step's, when a tracer is installed; the usage summed for it. */
  span: Tracer.Span | undefined = undefined
  stepSpan: Tracer.Span | undefined = undefined
  inputTokens = 0
  outputTokens = 0
  /** HIL-02: a rejection asked to end the turn once its result is written (`reject(…, {endTurn})`). */
  endTurn = false
  /** HIL-01: the step has calls that wait for approval (the turn may suspend). */
  hasApprovals = false
  /** APP-04, OUT-01/02: the turn's own settings and output, and its correction steps. */
  readonly ask: TurnAsk = emptyAsk()
  constructor(readonly turn: number) {}
}

/**
 * A durable write of the loop failed. The activity ends without writing anything more and the agent
 * is broken until it is resumed, which repairs the open turn (SES-02b).
 *
 * @internal
 */
export class LogWriteFailed extends Data.TaggedError("LogWriteFailed")<{ readonly cause: unknown }> {}

const isInvalidEventData = (error: unknown): error is SessionError.InvalidEventData =>
  typeof error === "object" && error !== null && "_tag" in error && error._tag === "InvalidEventData"

/**
 * A durable write of the loop that failed, or died, breaks the agent (SES-02b, SPEC §9). Invalid data
 * is not a write failure: only a `preStep` hook can supply it (messages it enters), and that ends the
 * turn `error` like any hook failure.
 *
 * @internal
 */
export const asWriteFailure = <A, E>(
  self: Effect.Effect<A, E>
): Effect.Effect<A, LogWriteFailed | SessionError.InvalidEventData> =>
  Effect.catchAllCause(self, (cause): Effect.Effect<never, LogWriteFailed | SessionError.InvalidEventData> => {
    if (Cause.isInterruptedOnly(cause)) return Effect.interrupt
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure) && isInvalidEventData(failure.value)) return Effect.fail(failure.value)
    return Effect.fail(new LogWriteFailed({ cause: Cause.squash(cause) }))
  })

/** Appends core events as one batch (SES-02). @internal */
export const write = (state: DriverState, events: Arr.NonEmptyReadonlyArray<CoreEventInput>) =>
  asWriteFailure(state.sessionCore.appendCore(events))

/** A tool result of text only. @internal */
export const textResult = (
  call: { readonly callId: string; readonly name: string },
  text: string,
  isError: boolean
): ToolResultMessage => ({
  id: `tool:${call.callId}` as MessageId,
  role: "tool",
  toolCallId: call.callId,
  toolName: call.name,
  content: [{ type: "text", text }],
  isError
})

/** The `tool/result` event of a finished call. @internal */
export const resultEvent = (turn: number, step: number, result: ToolOutcome): CoreEventInput => ({
  type: "tool/result",
  data: { turn, step, message: result.message, ...(result.error !== undefined ? { error: result.error } : {}) }
})

/** @internal */
export const isNonEmpty = <A>(as: Array<A>): as is Arr.NonEmptyArray<A> => as.length > 0
