/**
 * CORE-06: a teardown is bounded by `teardownTimeout`. One watcher fiber per factory (forked on
 * first use into its FiberSet, CORE-01) releases the owners of each teardown past its deadline,
 * instead of a timer fiber per teardown (51 operations of B1 each); when the factory closes while
 * such a teardown is still stalled, it is abandoned and keeps its writer (PERS-01).
 *
 * @internal
 */
import type { Cause } from "effect"
import { Deferred, Duration, Effect, Exit, FiberId, FiberRefs } from "effect"
import * as AgentError from "../../../AgentError.js"
import type { AgentPublisher } from "../../../AgentRegistry.js"
import * as internalSession from "../../log/session.js"
import type { Build, Loop } from "./state.js"
import { detachAgent, detachSession, settleOutcome } from "./teardownSteps.js"

/**
 * CORE-06: the teardown did not finish within `teardownTimeout` (a durable write stalls). The owners
 * are released with `AgentDisposeError{cause: TeardownTimeout}` and the agent and its session leave
 * the registry and the store; the teardown goes on, and releases the writer once the write settled
 * (PERS-01: a resume meanwhile fails `SessionLocked`).
 */
const timeOut = (loop: Loop, build: Build, publisher: AgentPublisher): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (build.outcome !== undefined) return Effect.void
    loop.timedOut.add(build)
    loop.live.delete(build)
    const timeout = new AgentError.TeardownTimeout({
      id: build.id,
      timeoutMillis: Duration.toMillis(loop.teardownTimeout)
    })
    const released = new AgentError.AgentDisposeError({ id: build.id, cause: timeout })
    // each detach may die (a publisher's bug): logged, and the owners are released whatever happened
    // (LIFE-02: none waits forever); they are released after the detaches, so an owner that wakes
    // finds the entry gone (LIFE-04)
    return Effect.zipRight(
      Effect.zipRight(
        unlessDies(build, "detach from the registry", detachAgent(build, publisher)),
        unlessDies(build, "detach from the session store", detachSession(build))
      ),
      Effect.logWarning(timeout.message)
    ).pipe(Effect.ensuring(Effect.sync(() => settleOutcome(build, Exit.fail(released)))))
  })

/** `step` of a timed-out teardown, its defect logged: the watcher runs on for later teardowns (CORE-06). */
const unlessDies = (build: Build, what: string, step: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.catchAllCause(
    step,
    (cause: Cause.Cause<unknown>) => Effect.logError(`agent ${build.id}: ${what} failed at the teardown timeout`, cause)
  )

/**
 * CORE-06: the factory closes while a teardown is stalled past its timeout. Its session gives up on
 * the stalled write (its callers fail, so the agent's activity converges and the teardown ends) and
 * keeps its writer: the write may still land, so nobody else may write (PERS-01).
 *
 * @internal
 */
export const abandon = (build: Build): void => {
  build.isAbandoned = true
  if (build.agent !== undefined) {
    internalSession.core(build.agent.session).abandon(
      `agent ${build.id}: the runtime was released while a write was stalled past the teardown timeout`
    )
  }
}

/**
 * CORE-06: watches the teardown of `build` for its deadline; the watcher is forked on first use and
 * woken when it waits for a deadline to watch. Deadlines are added in order, so the oldest is first.
 *
 * @internal
 */
export const watchDeadline = (loop: Loop, build: Build, publisher: AgentPublisher): void => {
  loop.deadlines.set(build, {
    at: loop.clock.unsafeCurrentTimeMillis() + Duration.toMillis(loop.teardownTimeout),
    publisher
  })
  if (loop.watcher === undefined) {
    // interruptible whatever the runtime's flags: the FiberSet's close ends it
    loop.watcher = loop.runInTeardowns(Effect.interruptible(Effect.forever(watchOnce(loop))), {
      updateRefs: (_, fiberId) => FiberRefs.forkAs(loop.backgroundRefs, fiberId)
    })
  } else if (loop.watcherWake !== undefined) {
    Deferred.unsafeDone(loop.watcherWake, Exit.void)
    loop.watcherWake = undefined
  }
}

/** Waits for the oldest deadline (or for one to watch), then times out what is past it. */
const watchOnce = (loop: Loop): Effect.Effect<void> =>
  Effect.suspend(() => {
    const oldest = loop.deadlines.entries().next()
    if (oldest.done === true) return Deferred.await(loop.watcherWake = Deferred.unsafeMake<void>(FiberId.none))
    const [build, deadline] = oldest.value
    const left = deadline.at - loop.clock.unsafeCurrentTimeMillis()
    if (left > 0) return Effect.sleep(Duration.millis(left))
    loop.deadlines.delete(build)
    // a defect must not end the single watcher: later teardowns still time out (CORE-06)
    return unlessDies(build, "the teardown timeout", timeOut(loop, build, deadline.publisher))
  })
