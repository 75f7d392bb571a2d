/**
 * The steps of an agent's teardown (LIFE-01), each an `Effect<void>` whose failure is recorded for
 * the `AgentDisposeError` (LIFE-03): stop the driver, close the agent Scope, detach the agent, detach
 * the session and release its writer; each added to the agent's lifecycle Scope as a finalizer when
 * the creation acquires what it releases (CORE-02); and the outcome every owner gets (LIFE-02).
 *
 * @internal
 */
import { Cause, Deferred, Effect, Exit, Fiber, Scope } from "effect"
import * as AgentError from "../../../AgentError.js"
import { AgentEvent } from "../../../AgentEvent.js"
import type { AgentPublisher } from "../../../AgentRegistry.js"
import type { Driver } from "../driver/driver.js"
import * as internalSession from "../../log/session.js"
import type { Build } from "./state.js"

/** A step whose failure is kept for the `AgentDisposeError` (LIFE-03) instead of failing its finalizer. @internal */
export const recorded = (build: Build, step: Effect.Effect<void, unknown>): Effect.Effect<void> =>
  Effect.catchAllCause(step, (cause) =>
    Effect.sync(() => {
      ;(build.failures ??= []).push(cause)
    }))

/**
 * LIFE-01 step 1: stop the driver with `disposed` (keep-inbox) and wait until its activity
 * converged. The wait is the one interruptible point of a teardown: only the factory's FiberSet
 * interrupts it, when the runtime is released after the teardown timed out (CORE-06).
 *
 * @internal
 */
export const stopDriver = (driver: Driver, build: Build): Effect.Effect<void> =>
  // a driver that never had an activity has nothing to wait for, and its stop cannot fail (B1)
  driver.neverActive() ? driver.stop : recorded(build, Effect.interruptible(driver.stop))

/** LIFE-01 step 2: setup's resources and child agents are released (OWN-03). @internal */
export const closeAgentScope = (agentScope: Scope.CloseableScope, build: Build) =>
  recorded(build, Scope.close(agentScope, Exit.void))

/**
 * LIFE-01 step 3: the agent leaves the registry (`AgentDisposed` if announced); its feed ends.
 * Idempotent.
 *
 * @internal
 */
export const detachAgent = (build: Build, publisher: AgentPublisher): Effect.Effect<void> => {
  const detached = build.agentEntry === undefined ? Effect.void : publisher.detach(build.agentEntry)
  // the last event and the end in one operation; nothing is built when nobody listens (B1)
  const feed = build.feed
  return feed === undefined
    ? detached
    : Effect.zipRight(detached, feed.endWith(() => AgentEvent.AgentDisposed({ agent: build.id })))
}

/** LIFE-01 step 4: the session leaves the store (`SessionDisposed` if announced). Idempotent. @internal */
export const detachSession = (build: Build): Effect.Effect<void> =>
  build.sessionEntry === undefined ? Effect.void : build.sessionEntry.detach

/**
 * LIFE-01 step 5: an unpublished new session is discarded, and the session Scope closed: the session
 * is closed and its writer released (SES-04).
 *
 * CORE-06: the close runs in a fiber forked into the session Scope itself (CORE-01): `forkIn`'s
 * finalizer skips the fiber that closes the Scope, and nothing else closes it, so the fiber lives
 * exactly until the close is done. The teardown awaits it interruptibly: the runtime's release can
 * abandon a teardown whose close waits on a stalled write (the release stays bounded), and the close
 * goes on by itself; an abandoned teardown does not await it at all. Either way the writer (lock,
 * lease) is held until the stalled write settled, then released (PERS-01).
 *
 * @internal
 */
export const releaseWriter = (build: Build) =>
  Effect.suspend(() => {
    const closing = Effect.forkIn(Scope.close(build.sessionScope, Exit.void), build.sessionScope)
    if (build.isAbandoned) {
      return Effect.zipRight(
        closing,
        Effect.logWarning(
          `agent ${build.id}: teardown abandoned after its timeout; the session stays locked until its write settles`
        )
      )
    }
    // a session sealed before its writer fiber started has no write to wait on: the close runs here
    // (a fork costs B1 ~35 operations)
    const session = build.agent?.session
    const closed = session === undefined || internalSession.core(session).sealIfIdle()
      ? recorded(build, Scope.close(build.sessionScope, Exit.void))
      : recorded(build, Effect.flatMap(closing, (fiber) => Effect.interruptible(Fiber.join(fiber))))
    return build.createMode && !build.published && build.writer !== undefined
      ? Effect.zipRight(recorded(build, build.writer.discard), closed)
      : closed
  })

// -------------------------------------------------------------------------------------------------
// CORE-02: the steps as the lifecycle Scope's finalizers, added as their resources are acquired.
// Closing the Scope runs them last-added first: the session's (added at step 0) runs last, the
// driver's (added when the agent is built) first, which is LIFE-01's order. Each finalizer is a
// function called at the close, so it reads the record as the creation left it (an entry entered
// or not, an agent Scope made or not). `addFinalizerExit`: the steps are `Effect<void>` already
// (`addFinalizer` wraps each in an `asVoid`, an operation more per step, B1).

/**
 * LIFE-01 steps 4–5, added when the creation takes the session Scope (PUB step 0): the session
 * leaves the store (`SessionDisposed` if announced), then its writer is released and it is closed.
 * One finalizer, as LIFE-01 has "detach session (the writer is released and the session closed)" as
 * one step (B1: a finalizer costs ≈8 Effect operations to add and to run).
 *
 * @internal
 */
export const addSessionSteps = (build: Build): Effect.Effect<void> =>
  Scope.addFinalizerExit(
    build.lifecycle,
    () => build.sessionEntry === undefined ? releaseWriter(build) : Effect.zipRight(build.sessionEntry.detach, releaseWriter(build))
  )

/**
 * LIFE-01 steps 1–3, added when the agent is built (its feed and driver made): the driver stopped
 * first; then the agent Scope closed and the agent detached. The agent Scope is made on first use
 * (setup, `spawn`), after the driver, so its close cannot be a finalizer added when it is made (it
 * would run before the driver's stop): it is one finalizer with the detach that follows it, closing
 * the agent Scope if one was made.
 *
 * @internal
 */
export const addAgentSteps = (build: Build, driver: Driver, publisher: AgentPublisher): Effect.Effect<void> =>
  Effect.zipRight(
    Scope.addFinalizerExit(build.lifecycle, () => {
      const agentScope = build.agentScope
      const detached = detachAgent(build, publisher)
      return agentScope === undefined ? detached : Effect.zipRight(closeAgentScope(agentScope, build), detached)
    }),
    Scope.addFinalizerExit(build.lifecycle, () => stopDriver(driver, build))
  )

/**
 * What every owner gets (LIFE-02/03): a dying step as it is; recorded failures in one
 * `AgentDisposeError`.
 *
 * @internal
 */
export const outcomeOf = (
  build: Build,
  closed: Exit.Exit<void>
): Exit.Exit<void, AgentError.AgentDisposeError> => {
  // LIFE-03: every failure is kept, in order, in one Cause
  const failures = build.failures
  const failed = failures === undefined || failures.length === 0
    ? undefined
    : new AgentError.AgentDisposeError({
      id: build.id,
      cause: failures.reduce((acc, next) => Cause.sequential(acc, next))
    })
  if (Exit.isFailure(closed)) {
    // a step that died (a bug, or a publisher that dies) is every owner's outcome too
    return failed === undefined ? closed : Exit.failCause(Cause.sequential(closed.cause, Cause.fail(failed)))
  }
  return failed === undefined ? Exit.void : Exit.fail(failed)
}

/** The owners' outcome, once (first wins: a timeout may have released them already, CORE-06). @internal */
export const settleOutcome = (build: Build, exit: Exit.Exit<void, AgentError.AgentDisposeError>): void => {
  if (build.outcome !== undefined) return
  // the outcome and the owners' wake-up in one synchronous step: none is missed
  build.outcome = exit
  if (build.done !== undefined) Deferred.unsafeDone(build.done, Exit.succeed(exit))
}
