/**
 * Finalizers for objects that exist once per session or agent.
 *
 * `Effect.addFinalizer` and `Effect.acquireRelease` keep a copy of the acquiring fiber's FiberRefs
 * (its services, span and log annotations) so that the release can run with them, and diff and
 * patch them back at release time. For a release that only flips library state (end a feed, drop
 * a lock) that costs a retained FiberRefs per object and a diff per close (B1, B2); these helpers
 * register the release on the Scope directly, so it runs with the closing fiber's FiberRefs.
 *
 * @internal
 */
import { Effect, Scope } from "effect"

/**
 * Adds `release` to the current Scope; it runs with the FiberRefs of the fiber that closes it.
 *
 * @internal
 */
export const addFinalizer = (release: Effect.Effect<unknown>): Effect.Effect<void, never, Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, release))

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
