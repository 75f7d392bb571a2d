/**
 * The driver's activities and its one drain fiber (CORE-01, CORE-04): an activity (a drain or a
 * maintenance task) is requested under the state lock, started by the drain fiber when it takes the
 * wake-up from its `Queue`, and observed by it to the end; one that dies leaves the agent broken and
 * idle, never `Running` on a dead fiber. The current activity is known to its own fibers (CORE-07).
 *
 * @internal
 */
import { Cause, Effect, Exit, Fiber, FiberId, FiberRef, Option, Queue } from "effect"
import type { Activity, DriverState, Phase } from "./state.js"
import { activityOf, idle, markBroken, setStatus, updatePhase } from "./state.js"

/**
 * The activity the current fiber belongs to (set in an activity's fiber, inherited by the fibers it
 * forks — tool calls): `whenIdle` from inside it would wait for itself (CORE-07).
 *
 * @internal
 */
export const currentActivity = FiberRef.unsafeMake<Activity | undefined>(undefined)

/** CAN-01: interrupts an activity now if it started, else as soon as the drain fiber starts it. @internal */
export const interruptActivity = (activity: Activity): Effect.Effect<void> => {
  activity.interrupted = true
  return activity.fiber === undefined ? Effect.void : Fiber.interruptFork(activity.fiber)
}

/**
 * Requests an activity (under the state lock): the drain fiber starts it when it takes the wake-up
 * (CORE-04), so it never runs with the FiberRefs of the fiber that requested it (§6.3). The wake-up
 * is offered by `setPhase` once the phase holds the activity, never here: a drain fiber that took it
 * before the requesting transition set its phase (the requester preempted in between) would find
 * nothing to start, and the agent would stay `Running` with nothing running.
 *
 * @internal
 */
export const request = (state: DriverState, work: Effect.Effect<void>): Effect.Effect<Activity> => {
  const activity: Activity = { work, fiber: undefined, interrupted: false, cause: Option.none(), cancelMark: 0 }
  if (state.wakes !== undefined) return Effect.succeed(activity)
  // the drain fiber is forked once, by the agent's first activity: an agent that never had input has
  // none (B1, B2)
  return Effect.flatMap(Queue.dropping<void>(1), (queue) => {
    state.wakes = queue
    return Effect.as(state.deps.forkDrain(drainFiber(state, queue)), activity)
  })
}

/**
 * The drain fiber (CORE-04): forked once (by the agent's first activity), it takes each wake-up from
 * the Queue and starts the activity the phase requested, as its own child, then observes its end
 * (CORE-01). Only the waits are interruptible (the agent's Scope closing ends it); its child
 * activities end with it.
 */
const drainFiber = (state: DriverState, queue: Queue.Queue<void>): Effect.Effect<never> =>
  Effect.uninterruptible(Effect.forever(Effect.flatMap(
    Effect.interruptible(Queue.take(queue)),
    () => Effect.catchAllCause(startRequested(state), (cause) => recoverDead(state, undefined, cause))
  )))

/**
 * Starts the requested activity, if one waits, and observes its end (CORE-01). Without the state
 * lock (turn gate, B5: taking it here cost 30 Effect operations per turn, 808 > 800): only this fiber
 * starts activities and only a started activity settles, so the requested one cannot change
 * meanwhile; a cancel that comes meanwhile records its cause on the activity and marks it
 * `interrupted` (seen below, after the fork).
 */
const startRequested = (state: DriverState): Effect.Effect<void> =>
  Effect.suspend(() => {
    const requested = state.phase
    if (requested._tag === "Idle" || requested._tag === "Suspended" || requested.activity.fiber !== undefined) {
      return Effect.void
    }
    const activity = requested.activity
    // its cancel cause becomes `cancelCell`, readable without effects (the claim guard, INB-06)
    state.started = activity
    // the activity starts uninterruptible (forked from this uninterruptible fiber): an interruption
    // that arrives before its first instruction still lets it write its closers (CAN-05)
    return Effect.flatMap(
      Effect.fork(Effect.zipRight(FiberRef.set(currentActivity, activity), activity.work)),
      (fiber) => {
        activity.fiber = fiber
        if (activity.interrupted) fiber.unsafeInterruptAsFork(FiberId.none)
        return Effect.flatMap(Effect.interruptible(Fiber.await(fiber)), (exit) => afterActivity(state, activity, exit))
      }
    )
  })

/**
 * CORE-01: an activity settles the phase before it ends. One that ended without (it died — a defect
 * in its state update) leaves the agent broken with the cause, and idle: never `Running` on a dead
 * fiber.
 */
const afterActivity = (state: DriverState, activity: Activity, exit: Exit.Exit<void>): Effect.Effect<void> => {
  const phase = state.phase
  return activityOf(phase) === activity
    ? recoverDead(
      state,
      activity,
      Exit.isFailure(exit) ? exit.cause : Cause.die(new Error("the activity ended unsettled"))
    )
    : Effect.void
}

/** CORE-01: the agent broken by a dead background fiber, and idle (whatever the recovery itself runs into). */
const recoverDead = (
  state: DriverState,
  activity: Activity | undefined,
  cause: Cause.Cause<unknown>
): Effect.Effect<void> =>
  updatePhase(state, (current) => {
    if (activity !== undefined && activityOf(current) !== activity) {
      return Effect.succeed(current)
    }
    if (Option.isNone(state.broken)) state.broken = Option.some(Cause.squash(cause))
    return Effect.as(
      Effect.ignore(Effect.catchAllCause(
        Effect.zipRight(markBroken(state, Cause.squash(cause), undefined, true), setStatus(state, "idle")),
        () => Effect.void
      )),
      idle as Phase
    )
  })
