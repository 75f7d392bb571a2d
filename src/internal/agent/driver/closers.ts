/**
 * CAN-05: the events that land a cancel or a failure safely wherever the turn was: the streamed part
 * of an interrupted assistant message, a result for every call of the open step (`ABORTED` for one
 * that started, `ABORTED_BEFORE_DISPATCH` with its `tool/call` for one that never did), `step/end`,
 * then `turn/end` with the reason.
 *
 * @internal
 */
import type { Array as Arr } from "effect"
import type { AssistantMessage, MessageId } from "../../../Message.js"
import type { CoreEventInput, TurnEndReason } from "../../../SessionEvent.js"
import type { PendingCall, TurnContext } from "./turnContext.js"
import { resultEvent, textResult } from "./turnContext.js"

const ABORTED_TEXT = "The tool was interrupted by a cancellation while it was running. It may have partly run: " +
  "verify its side effects before retrying it."
const ABORTED_BEFORE_DISPATCH_TEXT = "The tool was not started: the turn was cancelled before it was dispatched."

/** The streamed text and reasoning as assistant content (reasoning first, as the model sent it). @internal */
export const streamedContent = (ctx: TurnContext): Array<AssistantMessage["content"][number]> => {
  const content: Array<AssistantMessage["content"][number]> = []
  if (ctx.streamedReasoning !== "") content.push({ type: "reasoning", text: ctx.streamedReasoning })
  if (ctx.streamedText !== "") content.push({ type: "text", text: ctx.streamedText })
  return content
}

/** CAN-05: what an interrupted stream delivered, as an assistant message marked `interrupted`. */
const interruptedMessage = (ctx: TurnContext, step: number): CoreEventInput => ({
  type: "assistant/message",
  data: {
    turn: ctx.turn,
    step,
    message: {
      id: `assistant:${ctx.turn}:${step}` as MessageId,
      role: "assistant",
      content: streamedContent(ctx),
      source: {
        kind: "model",
        provider: ctx.route?.provider ?? "unknown",
        model: ctx.route?.model ?? "unknown"
      }
    },
    interrupted: true
  }
})

const CANCELED_TEXT = "The tool call was canceled before it was approved; it did not run."
const REJECTED_TEXT = "The user rejected this tool call; it did not run."

/**
 * HIL-05: a call that waited for a decision when its turn ended: an undecided one is settled
 * `canceled` (durably); each gets its `tool/call` and its error result (`REJECTED` for a rejected
 * one, `CANCELED` otherwise).
 */
const waitingCallClosers = (ctx: TurnContext, step: number, call: PendingCall, events: Array<CoreEventInput>) => {
  const approval = call.approval!
  if (approval.decision === undefined) {
    events.push({
      type: "tool/approval-decided",
      data: { turn: ctx.turn, step, callId: call.callId, decision: "canceled", initiator: null }
    })
  }
  const rejected = approval.decision === "rejected"
  events.push({
    type: "tool/call",
    data: { turn: ctx.turn, step, callId: call.callId, name: call.name, arguments: approval.arguments ?? call.arguments }
  })
  events.push({
    type: "tool/result",
    data: {
      turn: ctx.turn,
      step,
      message: textResult(call, rejected ? approval.message ?? REJECTED_TEXT : CANCELED_TEXT, true),
      error: rejected ? { name: "ToolRejected", code: "REJECTED" } : { name: "ToolCanceled", code: "CANCELED" }
    }
  })
}

/**
 * HIL-04: what a disposal writes of a step that waits for a person: only the results of its calls
 * that ran (`ABORTED` for one still running, LIFE-06); the step and the turn stay open. The calls
 * are marked as resulted.
 *
 * @internal
 */
export const suspendedClosers = (ctx: TurnContext): Array<CoreEventInput> => {
  const events: Array<CoreEventInput> = []
  const step = ctx.openStep!
  for (let i = ctx.logged; i < ctx.calls.length; i++) {
    const call = ctx.calls[i]!
    if (call.resulted === true || call.state === "waiting") continue
    events.push(
      call.state === "started" || call.result === undefined
        ? abortedResult(ctx.turn, step, call)
        : resultEvent(ctx.turn, step, call.result)
    )
    call.state = "done"
    call.resulted = true
  }
  return events
}

/** The error result of a call interrupted after its `tool/call` (CAN-05). */
const abortedResult = (turn: number, step: number, call: PendingCall): CoreEventInput => ({
  type: "tool/result",
  data: { turn, step, message: textResult(call, ABORTED_TEXT, true), error: { name: "ToolAborted", code: "ABORTED" } }
})

/** CAN-05: the result events of the open step's calls not logged yet. */
const callClosers = (ctx: TurnContext, step: number, events: Array<CoreEventInput>): void => {
  for (let i = ctx.logged; i < ctx.calls.length; i++) {
    const call = ctx.calls[i]!
    if (call.resulted === true) continue
    if (call.state === "waiting" && call.approval !== undefined) {
      waitingCallClosers(ctx, step, call, events)
    } else if (call.state === "waiting") {
      events.push({
        type: "tool/call",
        data: { turn: ctx.turn, step, callId: call.callId, name: call.name, arguments: call.arguments }
      })
      events.push({
        type: "tool/result",
        data: {
          turn: ctx.turn,
          step,
          message: textResult(call, ABORTED_BEFORE_DISPATCH_TEXT, true),
          error: { name: "ToolAbortedBeforeDispatch", code: "ABORTED_BEFORE_DISPATCH" }
        }
      })
    } else if (call.state === "started" || call.result === undefined) {
      events.push(abortedResult(ctx.turn, step, call))
    } else {
      events.push(resultEvent(ctx.turn, step, call.result))
    }
  }
}

/** The events that land a cancel or a failure safely wherever it happened (CAN-05). @internal */
export const closers = (ctx: TurnContext, reason: TurnEndReason): Arr.NonEmptyReadonlyArray<CoreEventInput> => {
  const events: Array<CoreEventInput> = []
  const step = ctx.openStep
  if (step !== undefined) {
    if (ctx.streaming && (ctx.streamedText !== "" || ctx.streamedReasoning !== "")) {
      events.push(interruptedMessage(ctx, step))
    }
    callClosers(ctx, step, events)
    events.push({ type: "step/end", data: { turn: ctx.turn, step } })
  }
  events.push({ type: "turn/end", data: { turn: ctx.turn, reason } })
  return events as unknown as Arr.NonEmptyReadonlyArray<CoreEventInput>
}
