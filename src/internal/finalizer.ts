/**
 * Finalizers, Scopes and FiberRef regions for objects that exist once per session or agent.
 *
 * `Effect.addFinalizer` and `Effect.acquireRelease` keep a copy of the acquiring fiber's FiberRefs
 * (its services, span and log annotations) so that the release can run with them, and diff and
 * patch them back at release time. For a release that only flips library state (end a feed, drop
 * a lock) that costs a retained FiberRefs per object and a diff per close (B1, B2); these helpers
 * register the release on the Scope directly, so it runs with the closing fiber's FiberRefs.
 *
 * @internal
 */
import type { Fiber } from "effect"
import { Clock, Context, Effect, Exit, FiberRef, RuntimeFlags, Scope, Tracer } from "effect"
import { errorTypeOf } from "./observability.js"

/**
 * Adds `release` to the current Scope; it runs with the FiberRefs of the fiber that closes it.
 *
 * @internal
 */
export const addFinalizer = (release: Effect.Effect<unknown>): Effect.Effect<void, never, Scope.Scope> =>
  // the Scope read from the fiber's context in the same operation (not `Effect.scope` + flatMap, B1)
  Effect.withFiberRuntime((fiber) => Scope.addFinalizer(Context.unsafeGet(fiber.currentContext, Scope.Scope), release))

/**
 * `acquire` uninterruptibly, then register `release(a)` on the current Scope (see `addFinalizer`).
 *
 * @internal
 */
export const acquireRelease = <A, E, R>(
  acquire: Effect.Effect<A, E, R>,
  release: (a: A) => Effect.Effect<unknown>
): Effect.Effect<A, E, R | Scope.Scope> =>
  Effect.uninterruptible(
    Effect.flatMap(acquire, (a) => Effect.as(addFinalizer(release(a)), a))
  )

/**
 * `Effect.locallyWith` in a few operations instead of an acquire/use/release: `ref` is
 * `f(current)` while `effect` runs, and its previous value is restored on any exit, interruption
 * included; `effect` keeps the caller's interruptibility. A caller that is already uninterruptible
 * (the usual case here) needs no mask: nothing can interrupt it between the change and the handler
 * that undoes it.
 *
 * Kept for B1's gate (create+dispose ≤ 240 Effect operations): a create sets FiberRefs this way up to
 * five times (the creations in flight, the publishing agent, the span's parent, the Scope of its
 * first steps and of its setup), and `Effect.locallyWith` (≈16 operations each) took a
 * create+dispose from 229 to 296.
 *
 * @internal
 */
export const locallyWith = <V>(ref: FiberRef.FiberRef<V>, f: (current: V) => V) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime<A, E, R>((fiber, status) => {
    const previous = fiber.getFiberRef(ref)
    const around = (self: Effect.Effect<A, E, R>) =>
      Effect.zipRight(
        FiberRef.set(ref, f(previous)),
        Effect.matchCauseEffect(self, {
          onFailure: (cause) => Effect.zipRight(FiberRef.set(ref, previous), Effect.failCause(cause)),
          // restores and returns the value in one operation
          onSuccess: (value) => FiberRef.modify(ref, (): [A, V] => [value, previous])
        })
      )
    return RuntimeFlags.interruption(status.runtimeFlags)
      ? Effect.uninterruptibleMask((restore) => around(restore(effect)))
      : around(effect)
  })

/**
 * `Scope.extend` in a third of the operations: `scope` is the Scope of `effect` (added to the
 * context with `locallyWith`, so the caller's context is restored on any exit).
 *
 * Kept for B1's gate (create+dispose ≤ 240 Effect operations): with the registry's and the store's
 * state in `Ref`s (CORE-03) a create+dispose runs 229 operations, and `Scope.extend` (≈18 more per
 * create) took it to 247.
 *
 * @internal
 */
export const extendScope = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  scope: Scope.Scope
): Effect.Effect<A, E, Exclude<R, Scope.Scope>> =>
  // the Scope is in the context while `effect` runs: what is left of R is provided by the caller
  locallyWith(FiberRef.currentContext, (context) => Context.add(context, Scope.Scope, scope))(
    effect as Effect.Effect<A, E, Exclude<R, Scope.Scope>>
  )

/**
 * `Effect.withSpan(name)` for the create path (the light variant CORE-09 allows): `self` runs in a
 * new span (`Effect.makeSpan`) that ends with its exit, as with `withSpan`, and is the parent of the
 * spans made inside (the context is changed and restored, ending the span, in one handler, as in
 * `locallyWith`); no call-site stack trace is captured (an `Error` per call).
 *
 * Kept for B1's gate (create+dispose ≤ 240 Effect operations): `Effect.withSpan(self, name,
 * { captureStackTrace: false })` took a create+dispose from 229 to 242; `Effect.useSpan` with
 * `locallyWith` for the parent cost 22 operations per create (251), this 10 (239).
 *
 * @internal
 */
export const withSpanLight = (name: string) =>
<A, E, R>(
  self: Effect.Effect<A, E, R>,
  annotate?: ((span: Tracer.Span, fiber: Fiber.RuntimeFiber<unknown, unknown>) => void) | undefined
): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.makeSpan(name, { captureStackTrace: false }), (span) =>
    Effect.withFiberRuntime<A, E, R>((fiber, status) => {
      const previous = fiber.getFiberRef(FiberRef.currentContext)
      const timed = fiber.getFiberRef(FiberRef.currentTracerTimingEnabled)
      const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
      // OBS-01: attributes set in place, and `error.type` on a failure (no operation added)
      if (annotate !== undefined) annotate(span, fiber as Fiber.RuntimeFiber<unknown, unknown>)
      const end = (exit: Exit.Exit<unknown, unknown>): void => {
        if (span.status._tag === "Ended") return
        if (Exit.isFailure(exit)) span.attribute("error.type", errorTypeOf(exit.cause))
        span.end(timed ? clock.unsafeCurrentTimeNanos() : BigInt(0), exit)
      }
      const around = (effect: Effect.Effect<A, E, R>) =>
        Effect.zipRight(
          FiberRef.set(FiberRef.currentContext, Context.add(previous, Tracer.ParentSpan, span)),
          Effect.matchCauseEffect(effect, {
            onFailure: (cause) => {
              end(Exit.failCause(cause))
              return Effect.zipRight(FiberRef.set(FiberRef.currentContext, previous), Effect.failCause(cause))
            },
            onSuccess: (value) => {
              end(Exit.succeed(value))
              return FiberRef.modify(FiberRef.currentContext, (): [A, Context.Context<never>] => [value, previous])
            }
          })
        )
      return RuntimeFlags.interruption(status.runtimeFlags)
        ? Effect.uninterruptibleMask((restore) => around(restore(self)))
        : around(self)
    }))
