/**
 * Background fibers of the library (CORE-01): each one is forked into a Scope or a FiberSet, never
 * on a root runtime, and starts with the FiberRefs of the runtime captured when its owner was built
 * — not those of whoever happened to cause the fork (§6.3: the initiator, the parent span and the
 * log annotations of a waker never leak into a drain, a writer or a teardown).
 *
 * @internal
 */
import { Context, Effect, FiberId, FiberRef, FiberRefs, Tracer } from "effect"
import type { Fiber, Runtime, Scope } from "effect"

/**
 * The FiberRefs a background fiber starts with: those of `runtime`, with `reset` back to their
 * initial values, no log annotations or log spans, and no parent span in the context.
 *
 * @internal
 */
export const isolatedRefs = (
  runtime: Runtime.Runtime<never>,
  reset: ReadonlyArray<FiberRef.FiberRef<any>>
): FiberRefs.FiberRefs => {
  let refs = runtime.fiberRefs
  for (const ref of [...reset, FiberRef.currentLogAnnotations, FiberRef.currentLogSpan]) {
    refs = FiberRefs.delete(refs, ref)
  }
  const context = FiberRefs.getOrDefault(refs, FiberRef.currentContext)
  return FiberRefs.updateAs(refs, {
    fiberId: FiberId.none,
    fiberRef: FiberRef.currentContext,
    value: Context.omit(Tracer.ParentSpan)(context) as Context.Context<never>
  })
}

/**
 * `effect`, running with `refs` (forked for the running fiber) instead of the FiberRefs it inherited.
 *
 * @internal
 */
export const withRefs = <A, E, R>(refs: FiberRefs.FiberRefs, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.zipRight(Effect.updateFiberRefs((fiberId) => FiberRefs.forkAs(refs, fiberId)), effect)

/**
 * Forks `effect` into `scope` (CORE-01) with `refs` instead of the caller's FiberRefs. It keeps the
 * caller's interruptibility at the start: forked from an uninterruptible region, it starts
 * uninterruptible (an interruption that comes before its first instruction waits for it).
 *
 * @internal
 */
export const forkIn = <A, E>(
  effect: Effect.Effect<A, E>,
  scope: Scope.Scope,
  refs: FiberRefs.FiberRefs
): Effect.Effect<Fiber.RuntimeFiber<A, E>> => Effect.forkIn(withRefs(refs, effect), scope)
