/**
 * The driver's state record and the one place it changes (§8: one state machine): the phase
 * (`Idle | Maintenance | Running`), changed only under the state lock as a `SynchronizedRef` would be
 * (`modifyPhase`); the status the agent reports (AGT-02); the publication gate (PUB-11); and the
 * broken flag set by a failed durable write (SES-02b).
 *
 * @internal
 */
import type { Either, Fiber, Queue, Schema } from "effect"
import { Cause, Deferred, Effect, Exit, FiberId, FiberRef, Option } from "effect"
import type { Agent, AgentOptions } from "../../../Agent.js"
import * as AgentError from "../../../AgentError.js"
import { AgentEvent, type AgentStatus } from "../../../AgentEvent.js"
import type { SessionId } from "../../../Message.js"
import type { ToolSchema } from "../../../Model.js"
import type { Model } from "../../../Model.js"
import type { OutputFormat } from "../../../ModelSettings.js"
import type { Session } from "../../../Session.js"
import type { CancelCause } from "../../../SessionEvent.js"
import type * as Tool from "../../../Tool.js"
import type { HookRunners } from "../hooks.js"
import type { InboxInternal } from "../inbox.js"
import type { Lock } from "../../lock.js"
import { make as makeLock } from "../../lock.js"
import type { Telemetry } from "../../observability.js"
import type { QuestionBook } from "./questions.js"
import { core, type SessionCore } from "../../log/session.js"
import type { TurnContext } from "./turnContext.js"

/** What the driver is built from: the agent's session, inbox, options and the factory's services. @internal */
export interface DriverDeps {
  readonly id: SessionId
  readonly session: Session
  readonly inbox: InboxInternal
  readonly options: AgentOptions
  readonly model: Model["Type"]
  readonly tools: Effect.Effect<ReadonlyArray<Tool.Any>>
  readonly toSchema: (tool: Tool.Any) => ToolSchema
  readonly decodeArguments: (tool: Tool.Any, raw: string) => Either.Either<unknown, string>
  readonly hooks: HookRunners
  readonly emit: (event: AgentEvent) => Effect.Effect<void>
  readonly withInitiator: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, unknown, R>
  readonly agent: () => Agent
  /**
   * Forks the driver's drain fiber (CORE-01, CORE-04): into the agent's Scope, with the FiberRefs
   * of the factory's runtime, never the builder's or a waker's (§6.3).
   */
  readonly forkDrain: (drain: Effect.Effect<never>) => Effect.Effect<Fiber.RuntimeFiber<never>>
  /** HIL-05: forks a deadline's timer into the agent's Scope, with the factory runtime's FiberRefs (its Clock). */
  readonly forkTimer: (timer: Effect.Effect<void>) => Effect.Effect<void>
  /**
   * The route of the last `request/config` in the log at construction (the last that is not a
   * turn's own, APP-04), with the agent's stored output format (OUT-01).
   */
  readonly storedRoute: Partial<Tool.Route> & { readonly output?: OutputFormat | undefined }
  /** A FiberRef whose value is the id of the agent whose creation hooks are running (PUB-11). */
  readonly publishing: FiberRef.FiberRef<Option.Option<SessionId>>
  /** OBS-01/02: the tracer (when spans are made) and Clock of the factory's background fibers. */
  readonly telemetry: Telemetry
  /** The agent's parent, if it was spawned (a span attribute, OBS-01). */
  readonly parentId: SessionId | undefined
}

/**
 * One activity (a drain or a maintenance task): requested under the state lock, started by the
 * drain fiber when it takes the wake-up (CORE-04), interrupted by a cancel whenever it comes.
 *
 * @internal
 */
export interface Activity {
  readonly work: Effect.Effect<void>
  /** Set by the drain fiber when it starts the activity. */
  fiber: Fiber.RuntimeFiber<void> | undefined
  /** An interruption was requested (a cancel, or the maintenance caller's interruption). */
  interrupted: boolean
  /** CAN-04: the cause of the first cancel called on it, set at that cancel's call (SEC-11). */
  cause: Option.Option<CancelCause>
  /**
   * DLV-06, SEC-11: the inbox mark of the latest cancel called on it. Once it is cancelled, its
   * latched wake is exactly "a message sent waking was inserted at or after this mark and is pending".
   */
  cancelMark: number
}

/**
 * The state machine's phase (§8): `Idle`, `Maintenance` (AGT-03) or `Running`. `wakeRequested` is
 * the latch of an activity that was not cancelled (AGT-04); a cancelled one's latch is read from the
 * inbox (`Activity.cancelMark`).
 *
 * @internal
 */
export type Phase =
  | { readonly _tag: "Idle" }
  | { readonly _tag: "Maintenance"; readonly activity: Activity; readonly wakeRequested: boolean }
  | { readonly _tag: "Running"; readonly activity: Activity; readonly wakeRequested: boolean }
  | Suspended

/**
 * HIL-04 (ruling "The driver's Suspended phase"): the open turn waits for a person and nothing runs.
 * No new turn starts (next-turn input queues behind it), `wake` does nothing, maintenance is busy,
 * `whenIdle` resolves; a decision (or a cancel) starts the activity that continues the turn.
 *
 * @internal
 */
export interface Suspended {
  readonly _tag: "Suspended"
  readonly ctx: TurnContext
}

/** The activity of a phase, if it has one. @internal */
export const activityOf = (phase: Phase): Activity | undefined =>
  phase._tag === "Running" || phase._tag === "Maintenance" ? phase.activity : undefined

/**
 * SEC-11: a cancel called while a phase transition was under way (the state lock held): it also
 * applies to the activity that transition leaves in the phase, as soon as it does.
 *
 * @internal
 */
export interface PendingCancel {
  readonly cause: CancelCause
  readonly mark: number
  /** The activity the transition left (set when it ended; stays unset when it left none or failed). */
  appliedTo: Activity | undefined
  /**
   * The cancel's caller stopped waiting for the transition (it was interrupted): `setPhase` requests
   * the interruption of the activity the transition leaves, which the cancel would have requested.
   */
  interruptOnApply: boolean
}

/** The idle phase: one value shared by every driver (it carries nothing). @internal */
export const idle: Phase = { _tag: "Idle" }

/**
 * The driver's state record. The lock, the gate's Deferred, the wake-up Queue and the idle signal
 * are made on first use: an agent that never had input has none of them (B1, B2).
 *
 * @internal
 */
export class DriverState {
  /** The state machine's phase, changed only under `phaseLock` (`modifyPhase`, `updatePhase`). */
  phase: Phase = idle
  phaseLock: Lock | undefined = undefined
  /** What `agent.status` reports (AGT-02); changes are announced as `AgentStatusChanged`. */
  status: AgentStatus = "idle"
  /** PUB-11: the gate's value once set (first wins), and the Deferred senders wait on before. */
  gateValue: boolean | undefined = undefined
  gateWaiters: Deferred.Deferred<boolean> | undefined = undefined
  /** LIFE-01 step 1 began (or publication was vetoed): new input fails `AgentInactive`. */
  disposing = false
  /** SES-02b: the cause of the failed durable write (or dead fiber) that broke the agent. */
  broken: Option.Option<unknown> = Option.none()
  /** PUB-11: a waking send from the creation's own hooks, started when the gate opens. */
  latchedWake = false
  /** The last `request/config` written (a new one is written only when it changes, SPEC §8). */
  lastConfig: string | undefined = undefined
  /** OUT-01: the Schemas of messages sent with `output`, until their turn takes them (made on first use). */
  outputSchemas: Map<string, Schema.Schema<any, any, never>> | undefined = undefined
  /** OUT-01: the output format of the options' `output`, made on first use. */
  agentOutputFormat: OutputFormat | undefined = undefined
  /** HIL-04: the open turn of the log is suspended at construction (a resumed session): its context. */
  resumedSuspended: TurnContext | undefined = undefined
  /** The activity the drain fiber started last (its cancel cause is `cancelCell`). */
  started: Activity | undefined = undefined
  /** SEC-11: a transition of the phase is under way (its body runs under the state lock). */
  transitioning = false
  /** SEC-11: cancels called during the transition under way, applied to the activity it leaves. */
  pendingCancels: Array<PendingCancel> | undefined = undefined
  /** The drain fiber's wake-ups (CORE-04): one pending is enough, the drain starts what the phase holds. */
  wakes: Queue.Queue<void> | undefined = undefined
  /** HIL-02: the context of the turn the drain runs now (decisions reach its calls through it). */
  turnCtx: TurnContext | undefined = undefined
  /** HIL-05: arms a request's deadline (set by the driver, whose decisions it makes). */
  armDeadline: ((callId: string, deadline: number) => Effect.Effect<void>) | undefined = undefined
  /** HIL-05: the deadline timers armed, by call id (each fiber in the agent's Scope). */
  armed: Set<string> | undefined = undefined
  /** Completed (and cleared) when the phase next becomes `Idle`: what `whenIdle` callers wait on. */
  idleSignal: Deferred.Deferred<void> | undefined = undefined
  /** HIL-03: the questions tools wait on now (made on first use). */
  questions: QuestionBook | undefined = undefined
  readonly sessionCore: SessionCore
  constructor(readonly deps: DriverDeps) {
    this.sessionCore = core(deps.session)
  }
  /**
   * The cancel cause of the started activity, readable without effects (the claim guard, INB-06):
   * set at the cancel's call (SEC-11).
   */
  get cancelCell(): Option.Option<CancelCause> {
    return this.started === undefined ? Option.none() : this.started.cause
  }
}

/**
 * CAN-04, DLV-06, SEC-11: a cancel called on `activity`: the first cause wins; its latched wake is
 * from now on only what is sent waking after `mark`. A plain update, made at the cancel's call.
 *
 * @internal
 */
export const applyCancel = (activity: Activity, cause: CancelCause, mark: number): void => {
  if (Option.isNone(activity.cause)) activity.cause = Option.some(cause)
  if (mark > activity.cancelMark) activity.cancelMark = mark
}

/**
 * `SynchronizedRef.modifyEffect` over the phase: `f` runs under the state lock with the phase
 * current then, and its new phase is set before the lock is released (B3, B5: a fraction of the
 * cost of a `SynchronizedRef`). Only the wait for the lock keeps the caller's interruptibility: `f`
 * runs uninterruptibly, because what it changes (a durable splice with its `turn/start`, a forked
 * activity) must be recorded in the phase it returns, or a drain is lost or orphaned (INB-01b).
 *
 * @internal
 */
export const modifyPhase = <A, E>(
  state: DriverState,
  f: (current: Phase) => Effect.Effect<readonly [A, Phase], E>
): Effect.Effect<A, E> =>
  (state.phaseLock ??= makeLock()).withLockUninterruptibly(
    Effect.matchCauseEffect(Effect.suspend(() => transition(state, f)), {
      onFailure: (cause) => abandonTransition(state, cause),
      onSuccess: (result) => {
        setPhase(state, result[1])
        return Effect.succeed(result[0])
      }
    })
  )

/** `SynchronizedRef.updateEffect` over the phase (see `modifyPhase`). @internal */
export const updatePhase = <E>(
  state: DriverState,
  f: (current: Phase) => Effect.Effect<Phase, E>
): Effect.Effect<void, E> =>
  (state.phaseLock ??= makeLock()).withLockUninterruptibly(
    Effect.matchCauseEffect(Effect.suspend(() => transition(state, f)), {
      onFailure: (cause) => abandonTransition(state, cause),
      onSuccess: (next) => {
        setPhase(state, next)
        return Effect.void
      }
    })
  )

/** A transition's body begins (under the state lock): a cancel called from now on waits for its end (SEC-11). */
const transition = <A>(state: DriverState, f: (current: Phase) => A): A => {
  state.transitioning = true
  return f(state.phase)
}

/** A transition failed: the phase is unchanged, so cancels called meanwhile already applied to its activity. */
const abandonTransition = <E>(state: DriverState, cause: Cause.Cause<E>): Effect.Effect<never, E> => {
  state.transitioning = false
  state.pendingCancels = undefined
  return Effect.failCause(cause)
}

/**
 * The one place the phase changes: a cancel called during the transition applies to the activity it
 * leaves (SEC-11); going idle releases the `whenIdle` callers (AGT-05); a requested activity not
 * started yet gets the drain fiber's wake-up (CORE-04).
 *
 * @internal
 */
export const setPhase = (state: DriverState, next: Phase): void => {
  state.phase = next
  state.transitioning = false
  const pending = state.pendingCancels
  if (pending !== undefined) {
    state.pendingCancels = undefined
    const activity = activityOf(next)
    if (activity !== undefined) {
      for (const cancel of pending) {
        applyCancel(activity, cancel.cause, cancel.mark)
        cancel.appliedTo = activity
        if (cancel.interruptOnApply) {
          // CAN-01 as `interruptActivity`: now if it started, else when the drain fiber starts it
          activity.interrupted = true
          if (activity.fiber !== undefined) activity.fiber.unsafeInterruptAsFork(FiberId.none)
        }
      }
    }
  }
  if (next._tag === "Idle" || next._tag === "Suspended") {
    // HIL-04: a suspended turn has nobody working: `whenIdle` resolves
    if (state.idleSignal !== undefined) {
      Deferred.unsafeDone(state.idleSignal, Exit.void)
      state.idleSignal = undefined
    }
  } else if (next.activity.fiber === undefined && state.wakes !== undefined) {
    // CORE-04: the drain fiber's wake-up for a requested activity, offered once the phase holds it
    // (and its pending cancels): the drain fiber starts what the phase holds, so a wake-up taken
    // before the phase was set would be lost. One pending wake-up is enough (a dropping Queue).
    state.wakes.unsafeOffer(undefined)
  }
}

/** AGT-02: the status, announced as `AgentStatusChanged` when it changes. @internal */
export const setStatus = (state: DriverState, next: AgentStatus): Effect.Effect<void> =>
  Effect.suspend(() => {
    const previous = state.status
    state.status = next
    return previous === next
      ? Effect.void
      : state.deps.emit(AgentEvent.AgentStatusChanged({ agent: state.deps.id, status: next }))
  })

/**
 * SES-02b, CORE-01: a durable write failed (or a background fiber died): the agent takes no more
 * input until it is resumed, and says so with `AgentError`.
 *
 * @internal
 */
export const markBroken = (
  state: DriverState,
  cause: unknown,
  turn?: number,
  defect?: boolean
): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (Option.isNone(state.broken)) state.broken = Option.some(cause)
    // HIL-03: a `respond` waiting for a question to become live looks again, and fails AgentBroken
    const book = state.questions
    if (book?.changed !== undefined) {
      Deferred.unsafeDone(book.changed, Exit.void)
      book.changed = undefined
    }
    // SEC-03: the event says what happened in a short message; a defect itself goes to the log
    const logged = defect === true
      ? Effect.logError(`effect-agent: a background fiber of agent ${state.deps.id} died`, Cause.die(cause))
      : Effect.void
    return Effect.zipRight(logged, state.deps.emit(AgentEvent.AgentError({
      agent: state.deps.id,
      turn,
      error: defect === true
        ? {
          message: "a background fiber of the agent died (a defect); it takes no more input until it is resumed",
          code: "DEFECT"
        }
        : {
          message: "a durable write failed; the agent takes no more input until it is resumed",
          code: "PERSISTENCE"
        }
    })))
  })

/** Why the agent takes no input now (disposing, LIFE-01; or broken, SES-02b), if so. @internal */
export const unusable = (state: DriverState): AgentError.AgentInactive | AgentError.AgentBroken | undefined => {
  if (state.disposing) return new AgentError.AgentInactive({ id: state.deps.id })
  if (Option.isSome(state.broken)) return new AgentError.AgentBroken({ id: state.deps.id, cause: state.broken.value })
  return undefined
}

/** `unusable` as an Effect that fails with the reason. @internal */
export const ensureUsable = (
  state: DriverState
): Effect.Effect<void, AgentError.AgentInactive | AgentError.AgentBroken> =>
  Effect.suspend((): Effect.Effect<void, AgentError.AgentInactive | AgentError.AgentBroken> => {
    const reason = unusable(state)
    return reason === undefined ? Effect.void : Effect.fail(reason)
  })

/**
 * PUB-11: sets the gate (first wins) and wakes the senders waiting on it, in one synchronous step:
 * a sender either sees the value or is woken by it.
 *
 * @internal
 */
export const openGateNow = (state: DriverState, published: boolean): void => {
  if (state.gateValue !== undefined) return
  state.gateValue = published
  if (state.gateWaiters !== undefined) Deferred.unsafeDone(state.gateWaiters, Exit.succeed(published))
}

/** PUB-11: sends wait for publication, except those of this creation's own hooks. @internal */
export const awaitGate = (state: DriverState): Effect.Effect<"open" | "own-hook", AgentError.AgentInactive> =>
  Effect.gen(function*() {
    if (state.gateValue !== undefined) {
      if (!state.gateValue) return yield* new AgentError.AgentInactive({ id: state.deps.id })
      return "open" as const
    }
    const publishing = yield* FiberRef.get(state.deps.publishing)
    if (Option.isSome(publishing) && publishing.value === state.deps.id) return "own-hook" as const
    const passed = yield* Effect.suspend(() =>
      state.gateValue !== undefined
        ? Effect.succeed(state.gateValue)
        : Deferred.await(state.gateWaiters ??= Deferred.unsafeMake<boolean>(FiberId.none))
    )
    if (!passed) return yield* new AgentError.AgentInactive({ id: state.deps.id })
    return "open" as const
  })
