/**
 * An agent's one teardown (LIFE-01..06, CORE-02): started once by whichever owner comes first
 * (`dispose`, the owner Scope's link, the factory's close), run in a fiber of the factory's FiberSet
 * (CORE-01) as `Scope.close` of the agent's lifecycle Scope — made at the creation's step 0, its
 * finalizers the LIFE-01 steps added as their resources were acquired — awaited by every owner
 * (LIFE-02) for at most `teardownTimeout` (CORE-06).
 *
 * @internal
 */
import type { Tracer } from "effect"
import { Deferred, Effect, Exit, Fiber, FiberId, FiberRefs, Scope } from "effect"
import type * as AgentError from "../../../AgentError.js"
import type { AgentPublisher } from "../../../AgentRegistry.js"
import * as observability from "../../observability.js"
import type { Abort, Build, Loop } from "./state.js"
import { inactive, ownRef } from "./state.js"
import { outcomeOf, settleOutcome } from "./teardownSteps.js"
import { watchDeadline } from "./timeout.js"

/** PUB-06, FAC-04: stops a creation that has not entered yet; the first reason wins. @internal */
export const abortCreation = (build: Build, reason: Abort) =>
  Effect.suspend(() => {
    build.aborted ??= reason
    return build.creating === undefined ? Effect.void : Fiber.interruptFork(build.creating)
  })

/**
 * A creation still in flight is stopped if it has not entered yet, and awaited either way: the
 * teardown never runs beside a creation of the same agent (PUB-06, FAC-04). Its setup is interrupted
 * at once; the library's own steps before it finish and are then rolled back.
 */
const awaitCreation = (build: Build): Effect.Effect<void> => {
  if (build.isSettled) return Effect.void
  // made before anything yields, so the attempt settling meanwhile completes it
  const settled = build.settled ??= Deferred.unsafeMake<void>(FiberId.none)
  return Effect.zipRight(abortCreation(build, inactive(build)), Deferred.await(settled))
}

/**
 * The teardown's steps (CORE-02): the close, sequentially, of the agent's lifecycle Scope, whose
 * finalizers are the LIFE-01 steps the creation added as it acquired what they release
 * (`addSessionSteps`, `addAgentSteps`), so only the steps that apply run. From here on an agent
 * Scope made late is made closed (`agentScopeOf`). A step that dies fails the close (every later step
 * still runs); the failures of the stop, scope and writer steps are recorded (LIFE-03). The factory's
 * bookkeeping, the last step, follows the close.
 */
const closeLifecycle = (build: Build): Effect.Effect<void> => {
  build.isAgentScopeClosed = true
  return Scope.close(build.lifecycle, Exit.void)
}

/**
 * The teardown: `Scope.close` of the lifecycle Scope (CORE-02), then the outcome, then the link. With
 * a tracer, in an `effect-agent.dispose` span (OBS-01) under the span of whoever started it.
 */
const runTeardown = (
  loop: Loop,
  build: Build,
  parent: Tracer.AnySpan | undefined
): Effect.Effect<void> =>
  Effect.suspend(() => {
    const span = loop.telemetry.tracer === undefined
      ? undefined
      : observability.startSpan(loop.telemetry, "effect-agent.dispose", parent, {
        [observability.attr.agentId]: build.id
      })
    // one handler for the whole: a step that dies fails the close, and a defect before it (waiting
    // for the creation) leaves no failure recorded, so `outcomeOf` gives it as it is either way (B1)
    const steps = build.isSettled
      ? closeLifecycle(build)
      : Effect.zipRight(awaitCreation(build), Effect.suspend(() => closeLifecycle(build)))
    // LIFE-01's last step: the factory's bookkeeping, whatever the close's exit (one handler, B1)
    const bookkeeping = (result: Exit.Exit<void>) => {
      loop.live.delete(build)
      // OBS-02: no longer live, its inbox no longer counted
      if (build.published) observability.countLive(-1)
      if (build.driver !== undefined) build.driver.unmeter()
      const outcome = outcomeOf(build, result)
      observability.endSpan(loop.telemetry, span, outcome)
      settleOutcome(build, outcome)
      loop.timedOut.delete(build)
      loop.deadlines.delete(build)
      return Scope.close(build.link, Exit.void)
    }
    return Effect.matchCauseEffect(steps, {
      onFailure: (cause) => bookkeeping(Exit.failCause(cause)),
      onSuccess: () => bookkeeping(Exit.void)
    })
  })

/** The FiberRefs of a teardown: the factory's, in its own `ownRef` region for its whole life. */
const teardownRefs = (loop: Loop, build: Build) =>
  FiberRefs.updateAs(loop.backgroundRefs, { fiberId: FiberId.none, fiberRef: ownRef, value: new Set([build.own]) })

/**
 * Runs the single teardown in a fiber of the factory's FiberSet (CORE-01: it outlives no Scope, and
 * the factory's close awaits it), started at once and uninterruptible from its first instruction
 * (LIFE-02), in its own `ownRef` region, with the factory's FiberRefs (never an owner's). One that
 * does not finish at once is watched for its timeout (CORE-06).
 */
const forkTeardown = (
  loop: Loop,
  build: Build,
  publisher: AgentPublisher,
  parent: Tracer.AnySpan | undefined
): void => {
  const refs = teardownRefs(loop, build)
  loop.runInTeardowns(Effect.uninterruptible(runTeardown(loop, build, parent)), {
    immediate: true,
    updateRefs: (_, fiberId) => FiberRefs.forkAs(refs, fiberId)
  })
  if (build.outcome === undefined) watchDeadline(loop, build, publisher)
}

/**
 * Starts the single teardown (once) and awaits its outcome (LIFE-02) — unless this fiber chain runs
 * this agent's own creation or teardown, which the teardown itself awaits: then it only starts it.
 *
 * @internal
 */
export const startTeardown = (
  loop: Loop,
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  build: Build,
  publisher: AgentPublisher
): Effect.Effect<void, AgentError.AgentDisposeError> => {
  if (!build.started) {
    build.started = true
    // OBS-01: the dispose span's parent is the span of the fiber that started it (read only when tracing)
    const parent = loop.telemetry.tracer === undefined ? undefined : observability.currentSpanOf(fiber)
    forkTeardown(loop, build, publisher, parent)
  }
  if (fiber.getFiberRef(ownRef).has(build.own)) return Effect.void
  // the outcome, once known (a teardown with nothing to wait for finished already), is the Exit
  // itself (an Exit is an Effect): no await needed
  if (build.outcome !== undefined) return build.outcome
  return Effect.flatten(Deferred.await(build.done ??= Deferred.unsafeMake(fiber.id())))
}

/** `startTeardown` from the current fiber. @internal */
export const teardown = (loop: Loop, build: Build, publisher: AgentPublisher) =>
  Effect.withFiberRuntime<void, AgentError.AgentDisposeError>((fiber) => startTeardown(loop, fiber, build, publisher))

/** What owners' finalizers run (LIFE-02, FAC-04): they cannot fail, so they log a failed teardown. @internal */
export const ownerFinalizer = (loop: Loop, build: Build, publisher: AgentPublisher): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    const outcome = startTeardown(loop, fiber, build, publisher)
    // nothing to await, or a teardown that already succeeded: no handler needed (B1)
    if (outcome === Effect.void || (Exit.isExit(outcome) && Exit.isSuccess(outcome))) return Effect.void
    // a defect too: the owner's close goes on
    return Effect.catchAllCause(outcome, (cause) => Effect.logWarning(`agent ${build.id}: teardown failed`, cause))
  })
