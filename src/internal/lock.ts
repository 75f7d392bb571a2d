/**
 * A `Semaphore(1)` for hot paths: held by one fiber at a time, handed to the longest waiter on
 * release, made of a flag and a line of `Deferred`s. Entering it when it is free costs a few Effect
 * operations instead of the thirty of `withPermits(1)` (B1, B3).
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

const identity: Restore = (effect) => effect

/** @internal */
export const make = (): Lock => {
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
