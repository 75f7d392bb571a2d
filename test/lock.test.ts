/**
 * The internal locks (CORE-05) behind the registry's critical section (PUB-04 step 4), the driver's
 * state and each inbox (INB-02): the `Semaphore` one and the light one run the same suite —
 * exclusion, order, release on every exit, and waits that can be interrupted without losing or
 * leaking the lock.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Ref } from "effect"
import * as lock from "../src/internal/lock.js"
import { allSuspended, eventually } from "./fixtures/waiting.js"

const kinds = [["Semaphore", lock.make], ["light", lock.makeLight]] as const

for (const [kind, makeLock] of kinds) {
  describe(`internal lock (${kind})`, () => {
    it.effect(`CORE-05 PUB-04 INB-02 one holder at a time, in the order the fibers arrived (${kind})`, () =>
      Effect.gen(function*() {
        const l = makeLock()
        const inside = yield* Ref.make(0)
        const entered = yield* Ref.make<ReadonlyArray<number>>([])
        const overlaps = yield* Ref.make(0)
        const gate = yield* Deferred.make<void>()
        const first = yield* Effect.fork(l.withLock(Deferred.await(gate)))
        yield* eventually(allSuspended([first]))
        const body = (i: number) =>
          Effect.gen(function*() {
            const now = yield* Ref.updateAndGet(inside, (n) => n + 1)
            if (now > 1) yield* Ref.update(overlaps, (n) => n + 1)
            yield* Ref.update(entered, (list) => [...list, i])
            yield* Effect.yieldNow()
            yield* Ref.update(inside, (n) => n - 1)
          })
        const waiters: Array<Fiber.RuntimeFiber<void>> = []
        for (let i = 0; i < 8; i++) {
          waiters.push(yield* Effect.fork(l.withLock(body(i))))
          yield* eventually(allSuspended(waiters))
        }
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(first)
        yield* Effect.forEach(waiters, Fiber.join, { discard: true })
        assert.strictEqual(yield* Ref.get(overlaps), 0)
        assert.deepStrictEqual(yield* Ref.get(entered), [0, 1, 2, 3, 4, 5, 6, 7])
      }))

    it.effect(`CORE-05 PUB-04 a holder that fails, dies or is interrupted releases the lock (${kind})`, () =>
      Effect.gen(function*() {
        const l = makeLock()
        assert.isTrue(Exit.isFailure(yield* Effect.exit(l.withLock(Effect.fail("no")))))
        assert.isTrue(Exit.isFailure(yield* Effect.exit(l.withLock(Effect.die("bug")))))
        // an interruptible caller's body stays interruptible (as with withPermits)
        const started = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(
          l.withLock(Effect.zipRight(Deferred.succeed(started, undefined), Effect.never))
        )
        yield* Deferred.await(started)
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(holder)))
        assert.strictEqual(yield* l.withLock(Effect.succeed(1)), 1)
      }))

    it.effect(`CORE-05 PUB-06 a waiter interrupted in line leaves it; the next one gets the lock (${kind})`, () =>
      Effect.gen(function*() {
        const l = makeLock()
        const gate = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(l.withLock(Deferred.await(gate)))
        yield* eventually(allSuspended([holder]))
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const leaving = yield* Effect.fork(l.withLock(Ref.update(ran, (list) => [...list, "leaving"])))
        const next = yield* Effect.fork(l.withLock(Ref.update(ran, (list) => [...list, "next"])))
        yield* eventually(allSuspended([leaving, next]))
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(leaving)))
        assert.isTrue(Option.isNone(yield* Fiber.poll(next)), "next still waits for the holder")
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(holder)
        yield* Fiber.join(next)
        assert.deepStrictEqual(yield* Ref.get(ran), ["next"])
        // and the lock is free again
        assert.strictEqual(yield* l.withLock(Effect.succeed("free")), "free")
      }))

    it.effect(`CORE-05 PUB-06 from a mask, only the wait is interruptible; the body is not (${kind})`, () =>
      Effect.gen(function*() {
        const l = makeLock()
        const inBody = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const finished = yield* Ref.make(false)
        const holder = yield* Effect.fork(Effect.uninterruptibleMask((restore) =>
          l.withLockFromMask(
            Deferred.succeed(inBody, undefined).pipe(
              Effect.zipRight(Deferred.await(release)),
              Effect.zipRight(Ref.set(finished, true))
            ),
            restore
          )
        ))
        yield* Deferred.await(inBody)
        const waiter = yield* Effect.fork(Effect.uninterruptibleMask((restore) =>
          l.withLockFromMask(Effect.void, restore)
        ))
        yield* eventually(allSuspended([waiter]))
        // the waiter can be interrupted while it waits
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(waiter)))
        // the holder's body cannot: its interruption waits for the body to finish
        const interrupting = yield* Effect.fork(Fiber.interrupt(holder))
        yield* eventually(allSuspended([interrupting]))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(interrupting)
        assert.isTrue(yield* Ref.get(finished))
        assert.strictEqual(yield* l.withLock(Effect.succeed("free")), "free")
      }))

    it.effect(`CORE-05 INB-02 withLockUninterruptibly: the wait is interruptible, the body is not (${kind})`, () =>
      Effect.gen(function*() {
        const l = makeLock()
        const inBody = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const finished = yield* Ref.make(false)
        const holder = yield* Effect.fork(l.withLockUninterruptibly(
          Deferred.succeed(inBody, undefined).pipe(
            Effect.zipRight(Deferred.await(release)),
            Effect.zipRight(Ref.set(finished, true))
          )
        ))
        yield* Deferred.await(inBody)
        const waiter = yield* Effect.fork(l.withLockUninterruptibly(Effect.void))
        yield* eventually(allSuspended([waiter]))
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(waiter)))
        const interrupting = yield* Effect.fork(Fiber.interrupt(holder))
        yield* eventually(allSuspended([interrupting]))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(interrupting)
        assert.isTrue(yield* Ref.get(finished))
        assert.strictEqual(yield* l.withLock(Effect.succeed("free")), "free")
      }))
  })
}
