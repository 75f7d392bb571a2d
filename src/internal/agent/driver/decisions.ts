/**
 * Decisions on approval requests (HIL-02, HIL-05): made under the state lock, idempotent, durable
 * before the waiting call learns them; a suspended turn goes on as a new activity; deadlines are
 * timers in the agent's Scope.
 *
 * @internal
 */
import { Clock, Effect, Either, Option } from "effect"
import * as AgentError from "../../../AgentError.js"
import { AgentEvent } from "../../../AgentEvent.js"
import type { SessionId } from "../../../Message.js"
import type * as Pending from "../../../Pending.js"
import type * as SessionError from "../../../SessionError.js"
import type { CancelCause, CoreEvent, CoreType, SessionEvent } from "../../../SessionEvent.js"
import { openStepRequests } from "../../log/pending.js"
import { request } from "./activity.js"
import { timeoutMessage } from "./approvals.js"
import { drain } from "./drain.js"
import type { DriverState, Phase } from "./state.js"
import { applyCancel, modifyPhase, setStatus, unusable, updatePhase } from "./state.js"
import type { TurnContext } from "./turnContext.js"

type Core<T extends CoreType> = Extract<CoreEvent, { readonly type: T }>
const narrow = <T extends CoreType>(event: SessionEvent, _type: T): Core<T> => event as Core<T>

/**
 * HIL-05: at `deadline` (the Clock's time), the request of `callId` is rejected with reason
 * `"timeout"` unless it was decided before. A fiber in the agent's Scope, armed once per call.
 *
 * @internal
 */
export const armDeadline = (state: DriverState, callId: string, deadline: number): Effect.Effect<void> =>
  Effect.suspend(() => {
    const armed = state.armed ??= new Set()
    if (armed.has(callId)) return Effect.void
    armed.add(callId)
    const timer = Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sleep(Math.max(0, deadline - now))).pipe(
      Effect.zipRight(decide(state, callId, { kind: "reject", reason: "timeout" }, null)),
      Effect.ignore
    )
    return state.deps.forkTimer(timer)
  })

/** What a decision says (HIL-02). @internal */
export type DecisionInput =
  | { readonly kind: "approve"; readonly reason?: string | undefined; readonly arguments?: string | undefined }
  | {
    readonly kind: "reject"
    readonly reason?: string | undefined
    readonly message?: string | undefined
    readonly endTurn?: boolean | undefined
  }

/** The request addressed by a call id or an approval id, and its decision if any: the log's last request wins. */
const findRequest = (events: ReadonlyArray<SessionEvent>, ref: string) => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type !== "tool/approval-requested") continue
    const requested = narrow(event, "tool/approval-requested")
    if (requested.data.callId !== ref && requested.data.approvalId !== ref) continue
    for (let j = i + 1; j < events.length; j++) {
      const later = events[j]!
      if (later.type === "tool/approval-decided" && narrow(later, "tool/approval-decided").data.callId === requested.data.callId) {
        return { requested, decided: narrow(later, "tool/approval-decided") }
      }
    }
    return { requested, decided: undefined }
  }
  return undefined
}

/** The context of the turn a decision goes to: the suspended one, or the one running now. */
const ctxOf = (state: DriverState, phase: Phase): TurnContext | undefined =>
  phase._tag === "Suspended" ? phase.ctx : state.turnCtx

type DecideError =
  | AgentError.ApprovalNotFound
  | AgentError.ApprovalAlreadyDecided
  | AgentError.InvalidApprovalArguments
  | AgentError.AgentInactive
  | SessionError.SessionAppendError

/**
 * HIL-02 (ruling "Idempotent decisions"): decides the request `ref` (call id or approval id) under
 * the state lock: the same decision again is `{duplicate: true}`, another fails
 * `ApprovalAlreadyDecided`, an unknown one `ApprovalNotFound`, edited arguments that do not decode
 * `InvalidApprovalArguments` — none of these writes anything. Otherwise `tool/approval-decided` is
 * logged, the waiting call learns it, and a suspended turn continues.
 *
 * @internal
 */
export const decide = (
  state: DriverState,
  ref: string,
  input: DecisionInput,
  initiator: SessionId | null
): Effect.Effect<Pending.Decision, DecideError> =>
  modifyPhase(state, (phase) =>
    Effect.gen(function*() {
      const id = state.deps.id
      if (unusable(state) !== undefined) return yield* new AgentError.AgentInactive({ id })
      const events = state.sessionCore.log()
      const found = findRequest(events, ref)
      if (found === undefined) return yield* new AgentError.ApprovalNotFound({ sessionId: id, callId: ref })
      const { decided, requested } = found
      const decision = input.kind === "approve" ? "approved" as const : "rejected" as const
      const callId = requested.data.callId
      if (decided !== undefined) {
        if (decided.data.decision === decision) return decided_(true, phase)
        return yield* new AgentError.ApprovalAlreadyDecided({ sessionId: id, callId, decision: decided.data.decision })
      }
      const open = openStepRequests(events)
      if (Option.isNone(open) || !open.value.pending.some((item) => item.callId === callId)) {
        return yield* new AgentError.ApprovalNotFound({ sessionId: id, callId: ref })
      }
      if (input.kind === "approve" && input.arguments !== undefined) {
        const tool = (yield* state.deps.tools).find((t) => t.name === requested.data.tool)
        const decoded = tool === undefined ? undefined : state.deps.decodeArguments(tool, input.arguments)
        if (decoded !== undefined && Either.isLeft(decoded)) {
          return yield* new AgentError.InvalidApprovalArguments({ callId, reason: decoded.left })
        }
      }
      const { step, turn } = requested.data
      const [logged] = yield* state.sessionCore.appendCore([{
        type: "tool/approval-decided",
        data: {
          turn,
          step,
          callId,
          decision,
          ...(input.reason !== undefined ? { reason: input.reason } : {}),
          ...(input.kind === "reject" && input.message !== undefined ? { message: input.message } : {}),
          ...(input.kind === "approve" && input.arguments !== undefined ? { arguments: input.arguments } : {}),
          initiator
        }
      }])
      const ctx = ctxOf(state, phase)
      const call = ctx?.calls.find((c) => c.callId === callId)
      if (ctx !== undefined && call?.approval !== undefined) {
        call.approval.decision = decision
        call.approval.arguments = input.kind === "approve" ? input.arguments : undefined
        call.approval.message = input.kind === "reject" ? input.message ?? timeoutMessage(input.reason) : undefined
        if (input.kind === "reject" && input.endTurn === true) ctx.endTurn = true
      }
      yield* state.deps.emit(AgentEvent.ApprovalDecided({
        agent: id,
        turn,
        step,
        callId,
        decision,
        reason: input.reason,
        seq: logged.seq
      }))
      if (phase._tag !== "Suspended" || state.disposing) return decided_(false, phase)
      return decided_(false, yield* continueSuspended(state, phase.ctx))
    }))

const decided_ = (duplicate: boolean, phase: Phase): readonly [Pending.Decision, Phase] => [{ duplicate }, phase]

/** HIL-02/04: the suspended turn goes on, as the drain of a new activity (under the state lock). @internal */
export const continueSuspended = (state: DriverState, ctx: TurnContext) =>
  Effect.gen(function*() {
    yield* setStatus(state, "running")
    const activity = yield* request(state, drain(state, ctx.turn, ctx))
    return { _tag: "Running", activity, wakeRequested: false } as Phase
  })


/**
 * HIL-05: a cancel of a suspended turn: the turn goes on as an activity that the cancel already
 * reached, so its closers settle every pending item `canceled` and end the turn `aborted`.
 *
 * @internal
 */
export const cancelSuspended = (state: DriverState, cause: CancelCause): Effect.Effect<void> =>
  updatePhase(state, (phase) => {
    if (phase._tag !== "Suspended" || state.disposing) return Effect.succeed(phase)
    return Effect.map(continueSuspended(state, phase.ctx), (next) => {
      if (next._tag === "Running") applyCancel(next.activity, cause, state.deps.inbox.mark())
      return next
    })
  })

/**
 * HIL-04/05: a resumed agent whose turn is suspended, once published: the deadlines of its pending
 * requests are armed, and decided calls that were never dispatched (or never got their result) go on.
 *
 * @internal
 */
export const resumeSuspended = (state: DriverState): Effect.Effect<void> =>
  Effect.suspend(() => {
    const phase = state.phase
    if (phase._tag !== "Suspended") return Effect.void
    const open = openStepRequests(state.sessionCore.log())
    const arm = Option.isNone(open) ? Effect.void : Effect.forEach(open.value.pending, (item) =>
      item._tag === "Approval" && item.deadline !== undefined
        ? armDeadline(state, item.callId, item.deadline)
        : Effect.void, { discard: true })
    const runnable = phase.ctx.calls.some((call) =>
      call.state === "waiting" && (call.approval?.decision !== undefined || call.replay !== undefined)
    )
    return Effect.zipRight(
      arm,
      runnable
        ? updatePhase(state, (current) =>
          current._tag === "Suspended" && !state.disposing ? continueSuspended(state, current.ctx) : Effect.succeed(current))
        : Effect.void
    )
  })
