/**
 * The loop's retry policy for failed model requests (MOD-04), on the TestClock: retryable codes
 * back off exponentially with jitter or wait exactly the provider's Retry-After, up to
 * maxRequestRetries; other codes retry only when the requestError hooks say so.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Duration, Effect, Exit, Fiber, Queue, Ref, TestClock } from "effect"
import { ModelError } from "../src/AgentError.js"
import * as modelRetry from "../src/internal/model/retry.js"

/** An attempt that fails with the errors given in order, then succeeds with its number. */
const scripted = (errors: ReadonlyArray<ModelError>) =>
  Effect.gen(function*() {
    const started = yield* Ref.make<ReadonlyArray<number>>([])
    const attempt = (n: number) =>
      Effect.flatMap(Ref.update(started, (all) => [...all, n]), () =>
        n <= errors.length ? Effect.fail(errors[n - 1]!) : Effect.succeed(`ok after ${n}`))
    return { started, attempt }
  })

const waitForSleep = TestClock.sleeps().pipe(Effect.repeat({ until: Chunk.isNonEmpty }))

describe("modelRetry", () => {
  it.effect("MOD-04 retryable codes retry on an exponential jittered backoff, each retry announced before its wait", () =>
    Effect.gen(function*() {
      const { attempt, started } = yield* scripted([
        new ModelError({ code: "PROVIDER" }),
        new ModelError({ code: "NETWORK" }),
        new ModelError({ code: "TIMEOUT" })
      ])
      const retries = yield* Queue.unbounded<modelRetry.RetryInfo>()
      const fiber = yield* Effect.fork(modelRetry.retrying(attempt, {
        policy: { maxRetries: 3 },
        onRetry: (info) => Queue.offer(retries, info)
      }))
      const expected = [1, 2, 4]
      for (let k = 0; k < 3; k++) {
        const info = yield* Queue.take(retries)
        assert.strictEqual(info.attempt, k + 1)
        assert.strictEqual(info.error.code, ["PROVIDER", "NETWORK", "TIMEOUT"][k])
        // whole milliseconds, so clocks stay integral (event times are integers)
        assert.isTrue(Number.isInteger(Duration.toMillis(info.delay)))
        const seconds = Duration.toMillis(info.delay) / 1000
        assert.isAtLeast(seconds, expected[k]! * 0.8)
        assert.isAtMost(seconds, expected[k]! * 1.2)
        yield* waitForSleep
        // the next attempt waits for the delay
        assert.deepStrictEqual(yield* Ref.get(started), Array.from({ length: k + 1 }, (_, i) => i + 1))
        yield* TestClock.adjust(info.delay)
      }
      assert.strictEqual(yield* Fiber.join(fiber), "ok after 4")
    }))

  it.effect("MOD-04 a RATE_LIMITED error's retryAfter is waited exactly, longer than the backoff cap", () =>
    Effect.gen(function*() {
      const { attempt, started } = yield* scripted([
        new ModelError({ code: "RATE_LIMITED", retryAfter: Duration.seconds(90) })
      ])
      const retries = yield* Queue.unbounded<modelRetry.RetryInfo>()
      const fiber = yield* Effect.fork(modelRetry.retrying(attempt, {
        policy: { maxRetries: 2, maxDelay: "30 seconds" },
        onRetry: (info) => Queue.offer(retries, info)
      }))
      const info = yield* Queue.take(retries)
      assert.deepStrictEqual(info.delay, Duration.seconds(90))
      yield* waitForSleep
      yield* TestClock.adjust("89 seconds")
      assert.deepStrictEqual(yield* Ref.get(started), [1])
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* Fiber.join(fiber), "ok after 2")
    }))

  it.effect("MOD-04 retries stop at maxRetries: the last attempt's error fails", () =>
    Effect.gen(function*() {
      const errors = [1, 2, 3].map((n) => new ModelError({ code: "PROVIDER", reason: `attempt ${n}` }))
      const { attempt, started } = yield* scripted(errors)
      const retries = yield* Queue.unbounded<modelRetry.RetryInfo>()
      const fiber = yield* Effect.fork(modelRetry.retrying(attempt, {
        policy: { maxRetries: 2 },
        onRetry: (info) => Queue.offer(retries, info)
      }))
      for (let k = 0; k < 2; k++) {
        const info = yield* Queue.take(retries)
        yield* waitForSleep
        yield* TestClock.adjust(info.delay)
      }
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit))
      assert.deepStrictEqual(exit, Exit.fail(errors[2]!))
      assert.deepStrictEqual(yield* Ref.get(started), [1, 2, 3])
    }))

  it.effect("MOD-04 TURN-06 a code that is not retryable is final unless decide says retry, which retries at once and counts", () =>
    Effect.gen(function*() {
      const auth = new ModelError({ code: "AUTH" })
      const plain = yield* scripted([auth])
      assert.deepStrictEqual(
        yield* Effect.exit(modelRetry.retrying(plain.attempt, { policy: { maxRetries: 3 }, onRetry: () => Effect.void })),
        Exit.fail(auth)
      )
      assert.deepStrictEqual(yield* Ref.get(plain.started), [1])

      const asked = yield* scripted([new ModelError({ code: "OVERLOADED" }), new ModelError({ code: "OVERLOADED" })])
      const seen: Array<modelRetry.RetryInfo> = []
      const result = yield* modelRetry.retrying(asked.attempt, {
        policy: { maxRetries: 3 },
        decide: ({ attempt }) => Effect.succeed(attempt < 3 ? "retry" as const : "fail" as const),
        onRetry: (info) => Effect.sync(() => seen.push(info))
      })
      // no clock moved: hook-driven retries do not wait
      assert.strictEqual(result, "ok after 3")
      assert.deepStrictEqual(seen.map((info) => [info.attempt, Duration.toMillis(info.delay)]), [[1, 0], [2, 0]])

      const capped = yield* scripted([1, 2, 3].map(() => new ModelError({ code: "OVERLOADED" })))
      const exit = yield* Effect.exit(modelRetry.retrying(capped.attempt, {
        policy: { maxRetries: 1 },
        decide: () => Effect.succeed("retry" as const),
        onRetry: () => Effect.void
      }))
      assert.isTrue(Exit.isFailure(exit))
      assert.deepStrictEqual(yield* Ref.get(capped.started), [1, 2])
    }))

  it.effect("MOD-04 other failures, defects and interruptions are never retried; an interrupted wait starts no attempt", () =>
    Effect.gen(function*() {
      let runs = 0
      const other = yield* Effect.exit(modelRetry.retrying(() => Effect.sync(() => runs++).pipe(Effect.zipRight(Effect.fail("not a model error" as const))), {
        policy: { maxRetries: 3 },
        onRetry: () => Effect.void
      }))
      assert.deepStrictEqual(other, Exit.fail("not a model error"))
      assert.strictEqual(runs, 1)

      const { attempt, started } = yield* scripted([new ModelError({ code: "NETWORK" })])
      const fiber = yield* Effect.fork(modelRetry.retrying(attempt, { policy: { maxRetries: 3 }, onRetry: () => Effect.void }))
      yield* waitForSleep
      yield* Fiber.interrupt(fiber)
      yield* TestClock.adjust("1 minute")
      assert.deepStrictEqual(yield* Ref.get(started), [1])
    }))
})
