/**
 * The driver's verbs, each a step of the state machine under its lock: `send` (AGT-04, DLV, PUB-11's
 * gate), `cancel` (CAN-01..04; its call takes effect at once, without waiting for the lock: SEC-11),
 * `whenIdle` (AGT-05, CORE-07), `runMaintenance` (AGT-03), `wake` (HOST-03), `open` (PUB-11) and
 * `stop` (teardown step 1, LIFE-01/06).
 *
 * @internal
 */
import { Cause, Deferred, Effect, Exit, FiberId, Option } from "effect"
import * as AgentError from "../../../AgentError.js"
import type { UserMessage } from "../../../Message.js"
import type * as SessionError from "../../../SessionError.js"
import type { CancelCause, InboxTarget } from "../../../SessionEvent.js"
import { make as makeLock } from "../../lock.js"
import { currentActivity, interruptActivity, request } from "./activity.js"
import * as decisions from "./decisions.js"
import { drain, settle, startDrain, wakeIfIdle } from "./drain.js"
import type { Activity, DriverState, PendingCancel, Phase } from "./state.js"
import {
  activityOf,
  applyCancel,
  awaitGate,
  ensureUsable,
  modifyPhase,
  openGateNow,
  setStatus,
  unusable,
  updatePhase
} from "./state.js"

/** A send under the state lock: into the inbox, and a drain started or a wake latched (DLV, AGT-04). */
const sendLocked = (
  state: DriverState,
  phase: Phase,
  message: UserMessage,
  target: InboxTarget,
  wake: boolean
): Effect.Effect<Phase, AgentError.SendError> => {
  const reason = unusable(state)
  if (reason !== undefined) return Effect.fail(reason)
  const inbox = state.deps.inbox
  switch (phase._tag) {
    case "Idle": {
      if (!wake) return Effect.as(inbox.insert(target, message, "end"), phase)
      const turn = state.sessionCore.lastTurn() + 1
      return inbox.insert(target, message, "end", () => [{ type: "turn/start", data: { turn } }], true).pipe(
        Effect.zipRight(setStatus(state, "running")),
        Effect.zipRight(Effect.suspend(() => request(state, drain(state, turn)))),
        Effect.map((activity): Phase => ({ _tag: "Running", activity, wakeRequested: false }))
      )
    }
    case "Suspended":
      // HIL-04: input queues behind the suspended turn; next-step input enters when its step resumes
      return Effect.as(inbox.insert(target, message, "end", undefined, wake), phase)
    case "Maintenance":
    case "Running": {
      // after a cancel was called, waking input waits for the next turn; it is latched to run when
      // the cancelled activity converges by being inserted after the cancel's mark (DLV-06, SEC-11)
      if (Option.isSome(phase.activity.cause) && wake) {
        return Effect.as(inbox.insert("next-turn", message, "end", undefined, true), phase)
      }
      // a running drain takes it at its next boundary; maintenance latches it (AGT-04)
      return Effect.as(
        inbox.insert(target, message, "end", undefined, wake),
        wake && phase._tag === "Maintenance" ? { ...phase, wakeRequested: true } : phase
      )
    }
  }
}

/**
 * PUB-11: a send before publication waits at the gate, except one from the creation's own hooks,
 * which goes straight into the inbox and latches its wake for `open`.
 */
const sendBeforePublication = (state: DriverState, message: UserMessage, target: InboxTarget, wake: boolean) =>
  Effect.gen(function*() {
    const passage = yield* awaitGate(state)
    yield* ensureUsable(state)
    if (passage === "own-hook") {
      yield* state.deps.inbox.insert(target, message, "end", undefined, wake)
      if (!wake) return
      // the gate is looked at in the same step as the latch is set: before the creation opens it,
      // the latch is seen by `open`; after (a fiber its hook forked may get here late), this send
      // wakes the agent itself, as `open` would have
      if (state.gateValue === undefined) {
        state.latchedWake = true
        return
      }
      if (state.gateValue) yield* wakeIfIdle(state)
      return
    }
    yield* updatePhase(state, (phase) => sendLocked(state, phase, message, target, wake))
  })

/** AGT-04: a message into the inbox, waking the agent or not. @internal */
export const send = (
  state: DriverState,
  message: UserMessage,
  target: InboxTarget,
  wake: boolean
): Effect.Effect<void, AgentError.SendError> =>
  Effect.suspend((): Effect.Effect<void, AgentError.SendError> => {
    const reason = unusable(state)
    if (reason !== undefined) return Effect.fail(reason)
    // published (the usual case): no gate to wait for, straight to the state lock (B3)
    if (state.gateValue === true) return updatePhase(state, (phase) => sendLocked(state, phase, message, target, wake))
    return sendBeforePublication(state, message, target, wake)
  })

/** What a cancel's call (SEC-11) decided: the activities it interrupts and the splices it writes. */
interface CancelCall {
  /** The activity of the phase at the call. */
  readonly current: Activity | undefined
  /** Set when a transition was under way at the call: it applies to the activity that transition leaves. */
  readonly pending: PendingCancel | undefined
  /** The `canceled` splices of what was pending at the call (none with `keepInbox`, or nothing pending). */
  readonly discard: Effect.Effect<void, SessionError.SessionAppendError> | undefined
}

/**
 * SEC-11: a cancel's call, its linearization point, in one synchronous step. The input pending now
 * is discarded for every reader from here on (its splices are written next), the activity gets its
 * cause (first wins, CAN-04) so the claim guard and later sends see it at once (INB-06, DLV-06), and
 * its latch is reset: what was sent waking before stays parked; what is sent after is latched. When
 * a transition is under way (the state lock held, e.g. a send opening a turn), the cancel also
 * applies to the activity that transition leaves, the moment it sets the phase. Nothing waits for a
 * lock, so no send that comes later can get ahead of the cancel, and none is discarded by it.
 */
const callCancel = (state: DriverState, cause: CancelCause, keepInbox: boolean, keepLatch: boolean): CancelCall => {
  const inbox = state.deps.inbox
  // APP-01: a cancel of one turn keeps the latch of the input pending at its call (mark 0: all of it)
  const mark = keepLatch ? 0 : inbox.mark()
  // a wake latched by the creation's own hooks is reset like any other latch (PUB-11)
  if (!keepLatch) state.latchedWake = false
  const phase = state.phase
  const current = activityOf(phase)
  if (current !== undefined) applyCancel(current, cause, mark)
  let pending: PendingCancel | undefined
  if (state.transitioning) {
    pending = { cause, mark, appliedTo: undefined, interruptOnApply: false }
    const queued = state.pendingCancels ??= []
    queued.push(pending)
  }
  const discard = keepInbox ? undefined : inbox.discardBefore(mark)
  // a teardown skips an agent that never took the state lock (`neverActive`, B1): this one must
  // wait for the splices (`stop`)
  if (discard !== undefined) state.phaseLock ??= makeLock()
  return { current, pending, discard }
}

/**
 * SEC-11: interrupts the activity a transition under way at a cancel's call left (unless the cancel
 * interrupted it already as the current one); when the transition has not ended yet, `setPhase` does
 * it as it applies the cancel.
 */
const interruptLeft = (pending: PendingCancel, current: Activity | undefined): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (pending.appliedTo === undefined) {
      pending.interruptOnApply = true
      return Effect.void
    }
    return pending.appliedTo === current ? Effect.void : interruptActivity(pending.appliedTo)
  })

/**
 * CAN-01..04, SEC-11: called (see `callCancel`), then the canceled splices of what was pending at
 * the call are written (next-step first), then the interruption is requested — also when the
 * splices could not be written. Once called, it runs to its end: a caller's interruption only stops
 * its wait for a transition under way at the call (whose activity already has the cause, so it
 * claims nothing; `setPhase` requests its interruption as it applies the cancel).
 *
 * @internal
 */
export const cancel = (
  state: DriverState,
  cause: CancelCause,
  options?: { readonly keepInbox?: boolean | undefined },
  onlyTurn?: number | undefined
): Effect.Effect<void, SessionError.SessionAppendError> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.suspend(() => {
      if (state.disposing && cause.kind !== "disposed") return Effect.void
      // APP-01: a cancel of one turn applies only while that turn is the open one, in this same step
      if (onlyTurn !== undefined && state.sessionCore.openTurn() !== onlyTurn) return Effect.void
      const call = callCancel(state, cause, options?.keepInbox === true, onlyTurn !== undefined)
      return Effect.gen(function*() {
        const cleared = call.discard === undefined ? Exit.void : yield* Effect.exit(call.discard)
        // HIL-05: a suspended turn is settled by an activity of its own (a disposal leaves it open, HIL-04)
        if (state.phase._tag === "Suspended" && cause.kind !== "disposed") yield* decisions.cancelSuspended(state, cause)
        if (call.current !== undefined) yield* interruptActivity(call.current)
        const pending = call.pending
        if (pending !== undefined) {
          // the transition under way at the call has ended once the state lock is free; a caller
          // that stops waiting still gets its interruption: the cancel took effect at its call
          yield* restore(state.phaseLock!.withLock(Effect.void)).pipe(
            Effect.onInterrupt(() => interruptLeft(pending, call.current))
          )
          yield* interruptLeft(pending, call.current)
        }
        if (Exit.isFailure(cleared)) return yield* Effect.failCause(cleared.cause)
      })
    })
  )

/**
 * APP-01 (`cancelOnInterrupt`): cancels turn `turn` when it is the open one at the call, keeping the
 * inbox; the waking input pending at the call stays latched, so the turns queued behind it still
 * run once it has converged. A no-op when another turn (or none) is open.
 *
 * @internal
 */
export const cancelTurn = (state: DriverState, turn: number): Effect.Effect<void, SessionError.SessionAppendError> =>
  cancel(state, { kind: "user" }, { keepInbox: true }, turn)

const whenIdleFromOwnActivity = (state: DriverState) =>
  Effect.dieMessage(
    `whenIdle of agent ${JSON.stringify(state.deps.id)} was awaited from inside that agent's own activity (a ` +
      "tool, a hook or a maintenance task): it waits for the activity to end, so it would wait for itself. Await " +
      "whenIdle from outside the agent (CORE-07)."
  )

/** AGT-05 stays infallible: awaiting it from the agent's own activity is a defect (CORE-07). @internal */
export const whenIdle = (state: DriverState): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    const phase = state.phase
    // HIL-04: a suspended turn has nobody working
    if (phase._tag === "Idle" || phase._tag === "Suspended") return Effect.void
    if (fiber.getFiberRef(currentActivity) === phase.activity) return whenIdleFromOwnActivity(state)
    return Deferred.await(state.idleSignal ??= Deferred.unsafeMake<void>(FiberId.none))
  })

/**
 * AGT-03: runs `task` as the agent's activity when it is idle (`AgentBusy` otherwise); a cancel
 * interrupts it (`AgentCanceled`), and so does its caller's interruption.
 *
 * @internal
 */
export const runMaintenance = <A, E, R>(state: DriverState, task: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    yield* ensureUsable(state)
    const context = yield* Effect.context<R>()
    // the task's exit with the activity's cause, read before a latched wake forks the next one
    const done = yield* Deferred.make<readonly [Exit.Exit<A, E>, Option.Option<CancelCause>]>()
    const start = modifyPhase(state, (phase) =>
      Effect.gen(function*() {
        yield* ensureUsable(state)
        if (phase._tag !== "Idle") return yield* new AgentError.AgentBusy({ id: state.deps.id })
        const work = Effect.interruptible(state.deps.withInitiator(Effect.provide(task, context))).pipe(
          Effect.exit,
          Effect.flatMap((exit) => Deferred.succeed(done, [exit as Exit.Exit<A, E>, state.cancelCell] as const)),
          Effect.zipRight(updatePhase(state, (phase) => Effect.map(settle(state, phase), ([, next]) => next)))
        )
        const activity = yield* request(state, work)
        const maintenance: Phase = { _tag: "Maintenance", activity, wakeRequested: false }
        return [activity, maintenance] as const
      }))
    // the activity is forked and the handler that interrupts it with its caller installed in one
    // uninterruptible stretch: an interrupted caller never leaves its task running
    const [exit, cause] = yield* Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(start, (activity) =>
        restore(Deferred.await(done)).pipe(Effect.onInterrupt(() => interruptActivity(activity))))
    )
    if (Exit.isSuccess(exit)) return exit.value
    if (Cause.isInterruptedOnly(exit.cause)) {
      return yield* new AgentError.AgentCanceled({
        id: state.deps.id,
        cause: Option.getOrElse(cause, (): CancelCause => ({ kind: "user" }))
      })
    }
    return yield* Effect.failCause(exit.cause)
  })

/** HOST-03: starts a drain when idle and some pending message was sent waking; a no-op otherwise. @internal */
export const wake = (state: DriverState): Effect.Effect<void> =>
  Effect.suspend(() =>
    state.disposing || Option.isSome(state.broken) || state.gateValue !== true ||
      !state.deps.inbox.hasPendingWaking()
      ? Effect.void
      : updatePhase(state, (phase) =>
        phase._tag !== "Idle" || !state.deps.inbox.hasPendingWaking()
          ? Effect.succeed(phase)
          : Effect.map(startDrain(state), Option.getOrElse(() => phase)))
  )

/** PUB-11: publication finished (`true`) or was vetoed (`false`): releases gated senders. @internal */
export const open = (state: DriverState, published: boolean): Effect.Effect<void> =>
  // one operation unless a send from the creation's own hooks latched a wake (B1)
  Effect.suspend((): Effect.Effect<void> => {
    openGateNow(state, published)
    if (!published) {
      // inactive, the waiting senders told in the same step
      state.disposing = true
      return Effect.void
    }
    // HIL-04/05: a resumed suspended turn: its deadlines armed, its decided calls go on
    const resumed = state.phase._tag === "Suspended" ? decisions.resumeSuspended(state) : Effect.void
    if (!state.latchedWake) return resumed
    state.latchedWake = false
    return Effect.zipRight(resumed, wakeIfIdle(state))
  })

/**
 * Teardown step 1 (LIFE-01/06): refuse new work, cancel with `disposed` keeping the inbox, await
 * the splices of cancels called before (SEC-11: they discard what was pending at their call, before
 * the session closes) and convergence.
 *
 * @internal
 */
export const stop = (state: DriverState): Effect.Effect<void> =>
  Effect.suspend(() => {
    state.disposing = true
    if (state.phaseLock === undefined) {
      // never active: Idle, nothing to cancel or await; only a latched wake to reset (B1)
      state.latchedWake = false
      openGateNow(state, false)
      return Effect.void
    }
    openGateNow(state, false)
    return Effect.gen(function*() {
      yield* cancel(state, { kind: "disposed" }, { keepInbox: true }).pipe(Effect.ignore)
      yield* state.deps.inbox.awaitDiscards
      yield* whenIdle(state)
    })
  })
