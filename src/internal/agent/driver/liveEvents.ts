/**
 * EVS-02: the live events that mirror what the turn made durable, built from the stamped events the
 * write returned, so each carries the `seq` of the event it mirrors and is published after it.
 *
 * @internal
 */
import { AgentEvent } from "../../../AgentEvent.js"
import type { AssistantToolCall } from "../../../AgentEvent.js"
import { textOf } from "../../../Message.js"
import type { ToolResultMessage } from "../../../Message.js"
import type { CoreEvent, SessionEvent } from "../../../SessionEvent.js"
import type { DriverState } from "./state.js"
import type { TurnContext } from "./turnContext.js"

/** EVS-02: how much of a result's text `ToolCallFinished` carries. @internal */
export const SUMMARY_LENGTH = 2_000

/**
 * EVS-02: a result's text parts joined, its first 2,000 characters (a surrogate pair is never cut
 * in half).
 *
 * @internal
 */
export const summaryOf = (message: ToolResultMessage): string => {
  const text = textOf(message.content)
  if (text.length <= SUMMARY_LENGTH) return text
  const cut = text.charCodeAt(SUMMARY_LENGTH - 1)
  const isHighSurrogate = cut >= 0xd800 && cut <= 0xdbff
  return text.slice(0, isHighSurrogate ? SUMMARY_LENGTH - 1 : SUMMARY_LENGTH)
}

type AssistantLogged = Extract<CoreEvent, { readonly type: "assistant/message" }>
type ResultLogged = Extract<CoreEvent, { readonly type: "tool/result" }>
type DecidedLogged = Extract<CoreEvent, { readonly type: "tool/approval-decided" }>

/** EVS-02: the `AssistantMessage` of a durable `assistant/message`. @internal */
export const assistantMessage = (state: DriverState, logged: SessionEvent): AgentEvent => {
  const { data, seq } = logged as unknown as AssistantLogged
  const toolCalls: Array<AssistantToolCall> = []
  for (const part of data.message.content) {
    if (part.type === "tool-call") toolCalls.push({ callId: part.callId, name: part.name, arguments: part.arguments })
  }
  return AgentEvent.AssistantMessage({
    agent: state.deps.id,
    turn: data.turn,
    step: data.step,
    seq,
    text: textOf(data.message.content),
    toolCalls,
    usage: data.usage,
    finish: data.finish,
    ...(data.interrupted === true ? { interrupted: true } : {})
  })
}

/** EVS-02: the `ToolCallFinished` of a durable `tool/result`. @internal */
export const toolCallFinished = (state: DriverState, logged: SessionEvent): AgentEvent => {
  const { data, seq } = logged as unknown as ResultLogged
  return AgentEvent.ToolCallFinished({
    agent: state.deps.id,
    turn: data.turn,
    step: data.step,
    callId: data.message.toolCallId,
    isError: data.message.isError === true,
    summary: summaryOf(data.message),
    seq
  })
}

/**
 * EVS-02: what the closers' batch (CAN-05) makes durable that the turn had not announced yet: the
 * interrupted assistant message, and the result of every call that announced `ToolCallStarted` (a
 * call that never started gets neither event). Empty for a turn that ended between steps.
 *
 * @internal
 */
export const closerMirrors = (
  state: DriverState,
  ctx: TurnContext,
  written: ReadonlyArray<SessionEvent>
): Array<AgentEvent> => {
  const out: Array<AgentEvent> = []
  for (let i = 0; i < written.length - 1; i++) {
    const event = written[i]!
    if (event.type === "assistant/message") out.push(assistantMessage(state, event))
    else if (event.type === "tool/approval-decided") {
      // HIL-05: a request the cancel settled
      const { callId, decision, step, turn } = (event as unknown as DecidedLogged).data
      out.push(AgentEvent.ApprovalDecided({ agent: state.deps.id, turn, step, callId, decision, seq: event.seq }))
    } else if (event.type === "tool/result") {
      const callId = (event as unknown as ResultLogged).data.message.toolCallId
      const call = ctx.calls.find((c) => c.callId === callId)
      if (call !== undefined && call.state !== "waiting") out.push(toolCallFinished(state, event))
    }
  }
  return out
}
