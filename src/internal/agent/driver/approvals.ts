/**
 * People in the loop, at the driver (HIL-01/02/04/05): which calls of a step need approval and their
 * durable requests; decisions (`approve`, `reject`, the deadline's automatic rejection) made under
 * the state lock, idempotent, and handed to the turn that waits for them; what is pending; and the
 * context of a suspended turn rebuilt from the log on resume.
 *
 * @internal
 */
import { Clock, Duration, Effect, Either, FiberRef, Option } from "effect"
import { AgentEvent } from "../../../AgentEvent.js"
import type { SessionId } from "../../../Message.js"
import type * as Pending from "../../../Pending.js"
import type { CoreEvent, CoreEventInput, CoreType, SessionEvent } from "../../../SessionEvent.js"
import type * as Tool from "../../../Tool.js"
import { openStepRequests } from "../../log/pending.js"
import { currentInitiatorRef } from "../initiator.js"
import * as questions from "./questions.js"
import type { DriverState } from "./state.js"
import type { PendingCall } from "./turnContext.js"
import { TurnContext } from "./turnContext.js"

type Core<T extends CoreType> = Extract<CoreEvent, { readonly type: T }>
const narrow = <T extends CoreType>(event: SessionEvent, _type: T): Core<T> => event as Core<T>

/** HIL-01: whether any tool asks for approvals (a plain check: a plain turn pays nothing more, PERF). @internal */
export const anyApproval = (tools: ReadonlyArray<Tool.Any>): boolean => {
  for (const tool of tools) if (tool.approval !== undefined) return true
  return false
}

/** HIL-05: a call's approval timeout: the tool's own, else the agent's. */
const timeoutOf = (state: DriverState, tool: Tool.Any): Duration.Duration | undefined => {
  if (tool.approvalTimeout !== undefined) return tool.approvalTimeout
  const input = state.deps.options.approvalTimeout
  return input === undefined ? undefined : Duration.decode(input)
}

/** HIL-01: whether `call` of `tool` needs approval ("always", or its predicate says so; a predicate that dies: yes). */
const needsApproval = (state: DriverState, ctx: TurnContext, step: number, tool: Tool.Any, call: PendingCall) => {
  const approval = tool.approval
  if (approval === undefined) return Effect.succeed(false)
  if (approval === "always") return Effect.succeed(true)
  const args = state.deps.decodeArguments(tool, call.arguments)
  // arguments that do not decode fail the call with INVALID_ARGUMENTS: nothing to approve
  if (Either.isLeft(args)) return Effect.succeed(false)
  return approval(args.right, { agent: state.deps.agent(), turn: ctx.turn, step, callId: call.callId }).pipe(
    Effect.catchAllCause(() => Effect.succeed(true))
  )
}

/**
 * HIL-01: the `tool/approval-requested` events of the calls of a reply that need approval, in model
 * order; marks those calls as waiting for a decision. Logged with the reply, in one batch.
 *
 * @internal
 */
export const requestsOf = (
  state: DriverState,
  ctx: TurnContext,
  step: number,
  tools: ReadonlyArray<Tool.Any>,
  calls: ReadonlyArray<PendingCall>
) =>
  Effect.gen(function*() {
    const byName = new Map(tools.map((tool) => [tool.name, tool] as const))
    const events: Array<CoreEventInput> = []
    const now = yield* Clock.currentTimeMillis
    for (const call of calls) {
      const tool = byName.get(call.name)
      if (tool === undefined || !(yield* needsApproval(state, ctx, step, tool, call))) continue
      const approvalId = globalThis.crypto.randomUUID()
      const timeout = timeoutOf(state, tool)
      call.approval = { approvalId, decision: undefined, arguments: undefined, message: undefined }
      ctx.hasApprovals = true
      events.push({
        type: "tool/approval-requested",
        data: {
          turn: ctx.turn,
          step,
          callId: call.callId,
          approvalId,
          tool: call.name,
          arguments: call.arguments,
          ...(timeout !== undefined ? { deadline: now + Math.ceil(Duration.toMillis(timeout)) } : {})
        }
      })
    }
    return events
  })

/** HIL-01, HIL-06: the live `ApprovalRequested` of logged requests, and their deadlines armed (HIL-05). @internal */
export const announceRequests = (state: DriverState, logged: ReadonlyArray<SessionEvent>) =>
  Effect.forEach(logged, (event) => {
    if (event.type !== "tool/approval-requested") return Effect.void
    const { approvalId, arguments: args, callId, deadline, step, tool, turn } = narrow(event, "tool/approval-requested")
      .data
    return Effect.zipRight(
      state.deps.emit(AgentEvent.ApprovalRequested({
        agent: state.deps.id,
        turn,
        step,
        callId,
        approvalId,
        tool,
        arguments: args,
        deadline,
        seq: event.seq
      })),
      deadline === undefined || state.armDeadline === undefined ? Effect.void : state.armDeadline(callId, deadline)
    )
  }, { discard: true })

/** HIL-02: the initiator of a decision: the agent whose work made it, `null` from outside any agent. @internal */
export const currentInitiator: Effect.Effect<SessionId | null> = Effect.map(
  FiberRef.get(currentInitiatorRef),
  (agent) => Option.isSome(agent) ? agent.value.id : null
)

/** HIL-05: what the model sees of a call rejected at its deadline. @internal */
export const timeoutMessage = (reason: string | undefined): string | undefined =>
  reason === "timeout" ? "Nobody approved this tool call in time; it did not run." : undefined

/** HIL-06: the pending items of the open step, from the log. @internal */
export const pendingOf = (id: SessionId, events: ReadonlyArray<SessionEvent>): ReadonlyArray<Pending.Item> => {
  const open = openStepRequests(events)
  if (Option.isNone(open)) return []
  return open.value.pending.map((item) => ({ ...item, sessionId: id }))
}

/**
 * HIL-04: the context of the suspended open step of a log (resume): its calls from the step's reply,
 * with what the log says of each (its request and decision, its dispatch, its result).
 *
 * @internal
 */
export const resumeContext = (events: ReadonlyArray<SessionEvent>): TurnContext | undefined => {
  const open = openStepRequests(events)
  if (Option.isNone(open) || !open.value.suspended) return undefined
  const { step, turn } = open.value
  let start = events.length - 1
  while (start >= 0 && events[start]!.type !== "step/start") start--
  const ctx = new TurnContext(turn)
  ctx.openStep = step
  ctx.steps = 1
  ctx.hasApprovals = true
  const byId = new Map<string, PendingCall>()
  for (let i = start + 1; i < events.length; i++) {
    const event = events[i]!
    switch (event.type) {
      case "assistant/message": {
        for (const part of narrow(event, "assistant/message").data.message.content) {
          if (part.type !== "tool-call") continue
          const call: PendingCall = { callId: part.callId, name: part.name, arguments: part.arguments, state: "waiting", result: undefined }
          ctx.calls.push(call)
          byId.set(call.callId, call)
        }
        break
      }
      case "tool/approval-requested": {
        const call = byId.get(narrow(event, "tool/approval-requested").data.callId)
        if (call !== undefined) {
          call.approval = {
            approvalId: narrow(event, "tool/approval-requested").data.approvalId,
            decision: undefined,
            arguments: undefined,
            message: undefined
          }
        }
        break
      }
      case "tool/approval-decided": {
        const { arguments: args, callId, decision, message, reason } = narrow(event, "tool/approval-decided").data
        const approval = byId.get(callId)?.approval
        if (approval !== undefined && approval.decision === undefined) {
          approval.decision = decision
          approval.arguments = args
          approval.message = message ?? timeoutMessage(reason)
        }
        break
      }
      case "tool/call": {
        const call = byId.get(narrow(event, "tool/call").data.callId)
        if (call !== undefined) call.state = "started"
        break
      }
      case "tool/result": {
        const call = byId.get(narrow(event, "tool/result").data.message.toolCallId)
        if (call !== undefined) {
          call.state = "done"
          call.resulted = true
        }
        break
      }
    }
  }
  replayAsking(ctx, events, open.value.pending)
  return ctx
}

/**
 * HIL-03: a dispatched call without a result that waits in `Tool.ask` (its question is pending) runs
 * again from its start when the turn goes on, its logged answers replayed and its `tool/call` not
 * written again; repair left it open for this.
 */
const replayAsking = (
  ctx: TurnContext,
  events: ReadonlyArray<SessionEvent>,
  pending: ReadonlyArray<{ readonly _tag: string; readonly callId: string }>
): void => {
  const asking = new Set(pending.flatMap((item) => item._tag === "Question" ? [item.callId] : []))
  ctx.calls.forEach((call, index) => {
    if (call.state !== "started" || call.resulted === true || !asking.has(call.callId)) return
    ctx.calls[index] = { ...call, state: "waiting", replay: questions.loggedQuestions(events, call.callId) }
  })
}

/**
 * HIL-02: the decisions the log holds for calls of `ctx`'s open step that the context still counts
 * as undecided, applied to them. A decision that landed after the step last looked at its calls
 * (while the drain went from the step to the suspended phase, so it found no context to record it
 * in) is durable; this makes the step act on it rather than suspend with nothing pending.
 *
 * @internal
 */
export const applyLoggedDecisions = (events: ReadonlyArray<SessionEvent>, ctx: TurnContext): void => {
  if (!ctx.calls.some((call) => call.approval !== undefined && call.approval.decision === undefined)) return
  const decided = new Map<string, Core<"tool/approval-decided">>()
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type === "step/start") break
    if (event.type === "tool/approval-decided") decided.set(narrow(event, "tool/approval-decided").data.callId, narrow(event, "tool/approval-decided"))
  }
  for (const call of ctx.calls) {
    const approval = call.approval
    const found = approval?.decision === undefined ? decided.get(call.callId) : undefined
    if (approval === undefined || found === undefined) continue
    approval.decision = found.data.decision
    approval.arguments = found.data.arguments
    approval.message = found.data.message ?? timeoutMessage(found.data.reason)
  }
}
