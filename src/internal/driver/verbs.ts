/**
 * The driver's verbs, each a step of the state machine under its lock: `send` (AGT-04, DLV, PUB-11's
 * gate), `cancel` (CAN-01..04), `whenIdle` (AGT-05, CORE-07), `runMaintenance` (AGT-03), `wake`
 * (HOST-03), `open` (PUB-11) and `stop` (teardown step 1, LIFE-01/06).
 *
 * @internal
 */
import { Cause, Deferred, Effect, Exit, FiberId, Option } from "effect"
import * as AgentError from "../../AgentError.js"
import type { UserMessage } from "../../Message.js"
import type * as SessionError from "../../SessionError.js"
import type { CancelCause, InboxTarget } from "../../SessionEvent.js"
import { currentActivity, interruptActivity, request } from "./activity.js"
import { drain, settle, startDrain, wakeIfIdle } from "./drain.js"
import type { Activity, DriverState, Phase } from "./state.js"
import { awaitGate, ensureUsable, modifyPhase, openGateNow, setStatus, unusable, updatePhase } from "./state.js"

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
        Effect.map((activity): Phase => ({ _tag: "Running", activity, cause: Option.none(), wakeRequested: false }))
      )
    }
    case "Maintenance":
    case "Running": {
      // after a cancel, waking input waits for the next turn and is latched to run when the
      // cancelled activity converges (DLV-06, AGT-04)
      if (Option.isSome(phase.cause) && wake) {
        return Effect.as(inbox.insert("next-turn", message, "end", undefined, true), {
          ...phase,
          wakeRequested: true
        })
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

/**
 * CAN-01..04: sets the cause (first wins, CAN-04) and resets the latch, writes the canceled splices —
 * all under the state lock, so a send that sees the cause is never canceled by it — then requests the
 * interruption, even when the splices could not be written.
 *
 * @internal
 */
export const cancel = (
  state: DriverState,
  cause: CancelCause,
  options?: { readonly keepInbox?: boolean | undefined }
): Effect.Effect<void, SessionError.SessionAppendError> =>
  Effect.gen(function*() {
    if (state.disposing && cause.kind !== "disposed") return
    const keepInbox = options?.keepInbox === true
    type Outcome = readonly [Activity | undefined, Exit.Exit<void, SessionError.SessionAppendError>]
    const [activity, cleared] = yield* modifyPhase(
      state,
      (phase): Effect.Effect<readonly [Outcome, Phase]> =>
        Effect.gen(function*() {
          if (phase._tag !== "Idle" && Option.isNone(phase.cause)) state.cancelCell = Option.some(cause)
          // a wake latched by the creation's own hooks is reset like any other latch (PUB-11)
          state.latchedWake = false
          const cleared = keepInbox ? Exit.void : yield* Effect.exit(state.deps.inbox.clearCanceled)
          if (phase._tag === "Idle") return [[undefined, cleared], phase] as const
          const next: Phase = Option.isNone(phase.cause)
            ? { ...phase, cause: Option.some(cause), wakeRequested: false }
            : { ...phase, wakeRequested: false }
          return [[phase.activity, cleared], next] as const
        })
    )
    if (activity !== undefined) yield* interruptActivity(activity)
    if (Exit.isFailure(cleared)) return yield* Effect.failCause(cleared.cause)
  })

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
    if (phase._tag === "Idle") return Effect.void
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
        const maintenance: Phase = { _tag: "Maintenance", activity, cause: Option.none(), wakeRequested: false }
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
    if (!state.latchedWake) return Effect.void
    state.latchedWake = false
    return wakeIfIdle(state)
  })

/**
 * Teardown step 1 (LIFE-01/06): refuse new work, cancel with `disposed` keeping the inbox, await
 * convergence.
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
      yield* whenIdle(state)
    })
  })
