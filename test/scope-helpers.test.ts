/**
 * The internal Scope helpers the factory uses instead of `Scope.extend` / `Effect.addFinalizer`
 * (src/internal/finalizer.ts): same observable behaviour, fewer operations.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Option, Ref, Scope } from "effect"
import { acquireRelease, addFinalizer, extendScope } from "../src/internal/finalizer.js"

class Marker extends Context.Tag("test/Marker")<Marker, string>() {}

describe("Scope helpers", () => {
  it.effect("extendScope gives the effect the Scope and restores the caller's context on success and failure", () =>
    Effect.gen(function*() {
      const released = yield* Ref.make<Array<string>>([])
      const scope = yield* Scope.make()
      const value = yield* extendScope(
        Effect.zipRight(addFinalizer(Ref.update(released, (r) => [...r, "a"])), Effect.succeed(1)),
        scope
      ).pipe(Effect.provideService(Marker, "outer"))
      assert.strictEqual(value, 1)
      const failed = yield* Effect.exit(
        extendScope(Effect.zipRight(addFinalizer(Ref.update(released, (r) => [...r, "b"])), Effect.fail("no")), scope)
      )
      assert.deepStrictEqual(failed, Exit.fail("no"))
      // the caller never sees the Scope in its own context
      assert.isTrue(Option.isNone(Context.getOption(yield* Effect.context<never>(), Scope.Scope)))
      assert.deepStrictEqual(yield* Ref.get(released), [])
      yield* Scope.close(scope, Exit.void)
      assert.deepStrictEqual(yield* Ref.get(released), ["b", "a"])
    }))

  it.effect("extendScope leaves the effect interruptible; what it added to the Scope is released with it", () =>
    Effect.gen(function*() {
      const released = yield* Ref.make(false)
      const scope = yield* Scope.make()
      const entered = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        extendScope(
          Effect.zipRight(
            addFinalizer(Ref.set(released, true)),
            Effect.zipRight(Deferred.succeed(entered, undefined), Effect.never)
          ),
          scope
        )
      )
      yield* Deferred.await(entered)
      assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(fiber)))
      assert.isFalse(yield* Ref.get(released))
      yield* Scope.close(scope, Exit.void)
      assert.isTrue(yield* Ref.get(released))
    }))

  it.effect("acquireRelease releases on the Scope it was acquired in, in reverse order", () =>
    Effect.gen(function*() {
      const log = yield* Ref.make<Array<string>>([])
      const scope = yield* Scope.make()
      const a = yield* Scope.extend(acquireRelease(Effect.succeed("a"), (x) => Ref.update(log, (l) => [...l, x])), scope)
      const b = yield* Scope.extend(acquireRelease(Effect.succeed("b"), (x) => Ref.update(log, (l) => [...l, x])), scope)
      assert.deepStrictEqual([a, b], ["a", "b"])
      yield* Scope.close(scope, Exit.void)
      assert.deepStrictEqual(yield* Ref.get(log), ["b", "a"])
    }))
})
