/**
 * The library's critical sections (CORE-05), behind one `Semaphore`-shaped interface with the three
 * ways the library enters them.
 *
 * - `make`: an Effect `Semaphore` with one permit. The registry-wide critical section (PUB-04 step 4),
 *   the driver's state (its `SynchronizedRef`-shaped `modifyPhase`) and the SQL writer use it.
 * - `makeLight`: the same contract made of a flag and a line of `Deferred`s, for each inbox (INB-02)
 *   only. Entering a free `Semaphore` costs ≈27 Effect operations more; an inject takes the inbox's
 *   and the driver's lock, a turn several of each, and with a `Semaphore` in both an inject ran 100
 *   operations (gate ≤ 80) and a turn 808 (gate ≤ 800). With the inbox on this lock: 70 and 748.
 *
 * @internal
 */
import { Deferred, Effect, Exit, FiberId, RuntimeFlags } from "effect"

type Restore = <X, EX, RX>(effect: Effect.Effect<X, EX, RX>) => Effect.Effect<X, EX, RX>

/** @internal */
export interface Lock {
  /**
   * Runs `self` holding the lock, as `withPermits(1)` does: the wait and `self` keep the caller's
   * interruptibility, and the lock is released on every exit.
   */
  readonly withLock: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /**
   * Runs `self` holding the lock and uninterruptibly: only the wait keeps the caller's
   * interruptibility. For a critical section whose changes must not be cut off from each other
   * (a durable write and the state that records it).
   */
  readonly withLockUninterruptibly: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /**
   * The same for a caller that is uninterruptible: only the wait is made interruptible, by the
   * caller's `restoreWait`; `self` runs as it is (it restores what it needs itself).
   */
  readonly withLockFromMask: <A, E, R>(self: Effect.Effect<A, E, R>, restoreWait: Restore) => Effect.Effect<A, E, R>
}

/**
 * A lock on an Effect `Semaphore(1)` (CORE-05).
 *
 * @internal
 */
export const make = (): Lock => {
  const semaphore = Effect.unsafeMakeSemaphore(1)
  const withPermit = semaphore.withPermits(1)
  const take = semaphore.take(1)
  const release = semaphore.release(1)
  return {
    withLock: withPermit,
    // the wait keeps the caller's interruptibility, the body cannot be cut off
    withLockUninterruptibly: (self) => withPermit(Effect.uninterruptible(self)),
    // `withPermits` here would make the wait uninterruptible (its mask restores the caller's), and
    // wrapping it in `restoreWait` would let an interruption land after the body, losing its
    // result: the permit is taken under `restoreWait` and released on every exit of the body.
    // the caller is uninterruptible, so the release needs no mask of its own (`ensuring` would add
    // one: 4 Effect operations per create, B1)
    withLockFromMask: (self, restoreWait) =>
      Effect.flatMap(restoreWait(take), () =>
        Effect.matchCauseEffect(self, {
          onFailure: (cause) => Effect.zipRight(release, Effect.failCause(cause)),
          onSuccess: (value) => Effect.as(release, value)
        }))
  }
}

const identity: Restore = (effect) => effect

/**
 * The light lock (see the module's comment for the gates that keep it): held by one fiber at a
 * time, handed to the longest waiter on release; a few operations to enter when free.
 *
 * @internal
 */
export const makeLight = (): Lock => {
  let held = false
  const waiting: Array<Deferred.Deferred<void>> = []
  const release = (): void => {
    const next = waiting.shift()
    if (next === undefined) held = false
    else Deferred.unsafeDone(next, Exit.void)
  }
  // from taking the lock to installing its release nothing can interrupt: the caller is masked
  const holding = <A, E, R>(self: Effect.Effect<A, E, R>) =>
    Effect.matchCauseEffect(self, {
      onFailure: (cause) => {
        release()
        return Effect.failCause(cause)
      },
      onSuccess: (value) => {
        release()
        return Effect.succeed(value)
      }
    })
  const enter = <A, E, R>(self: Effect.Effect<A, E, R>, restoreWait: Restore): Effect.Effect<A, E, R> => {
    if (!held) {
      held = true
      return holding(self)
    }
    const turn = Deferred.unsafeMake<void>(FiberId.none)
    waiting.push(turn)
    return Effect.zipRight(
      restoreWait(Deferred.await(turn)).pipe(
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            const at = waiting.indexOf(turn)
            // still in line: leave it; already handed the lock: pass it on
            if (at >= 0) waiting.splice(at, 1)
            else release()
          })
        )
      ),
      holding(self)
    )
  }
  return {
    withLock: (self) =>
      Effect.withFiberRuntime((_, status) =>
        RuntimeFlags.interruption(status.runtimeFlags)
          ? Effect.uninterruptibleMask((restore) => enter(restore(self), restore))
          : enter(self, identity)
      ),
    withLockUninterruptibly: (self) =>
      Effect.withFiberRuntime((_, status) =>
        RuntimeFlags.interruption(status.runtimeFlags)
          ? Effect.uninterruptibleMask((restore) => enter(self, restore))
          : enter(self, identity)
      ),
    withLockFromMask: (self, restoreWait) => Effect.suspend(() => enter(self, restoreWait))
  }
}
