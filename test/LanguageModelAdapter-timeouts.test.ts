/**
 * The request and idle-chunk timeouts of the adapter (MOD-04) on a provider stream the test feeds
 * chunk by chunk, under `TestClock`: the idle timer restarts with every chunk and counts only
 * waits for the provider, a timeout ends the stream at once and closes the provider's stream
 * (which aborts its HTTP request, MOD-05), and ends, failures and defects pass through unchanged.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Deferred, Duration, Effect, Exit, Fiber, Option, Queue, Stream, Take, TestClock } from "effect"
import { ModelError } from "../src/AgentError.js"
import { withTimeouts } from "../src/internal/languageModel.js"

const timeouts = { requestTimeout: Duration.minutes(10), idleTimeout: Duration.seconds(30) }

/**
 * A provider stream fed by the test: `send` offers one chunk, `end` and `fail` finish it;
 * `pulled` receives each element as the adapter's reader pulls it, `closed` completes when the
 * stream is closed (its scope's finalizers ran).
 */
const feed = Effect.gen(function*() {
  const takes = yield* Queue.unbounded<Take.Take<number, ModelError>>()
  const pulled = yield* Queue.unbounded<number>()
  const closed = yield* Deferred.make<void>()
  const stream = Stream.flattenTake(Stream.fromQueue(takes)).pipe(
    Stream.tap((n) => Queue.offer(pulled, n)),
    Stream.ensuring(Deferred.succeed(closed, undefined))
  )
  return {
    stream,
    pulled,
    closed,
    send: (n: number) => Queue.offer(takes, Take.of(n)),
    end: Queue.offer(takes, Take.end),
    fail: (error: ModelError) => Queue.offer(takes, Take.fail(error)),
    die: (defect: unknown) => Queue.offer(takes, Take.die(defect))
  }
})

type Feed = Effect.Effect.Success<typeof feed>

/**
 * Consumes the timed stream in a fiber: each element goes to `received` (after `gate` opens, for
 * the element `holdAt`), so the test knows what the consumer has seen.
 */
const consume = (source: Feed, options: { readonly holdAt?: number; readonly gate?: Deferred.Deferred<void> } = {}) =>
  Effect.gen(function*() {
    const received = yield* Queue.unbounded<number>()
    const holding = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(
      Stream.runForEach(withTimeouts(source.stream, timeouts), (n) =>
        n === options.holdAt && options.gate !== undefined
          ? Deferred.succeed(holding, undefined).pipe(
            Effect.zipRight(Deferred.await(options.gate)),
            Effect.zipRight(Queue.offer(received, n))
          )
          : Queue.offer(received, n))
    )
    // both timers (request and idle) are registered before the test moves the clock
    yield* TestClock.sleeps().pipe(Effect.repeat({ until: (sleeps) => Chunk.size(sleeps) >= 2 }))
    return { fiber, received, holding }
  })

/** The next element the consumer received; fails the test at once if the stream ends or fails first. */
const nextOf = (consumer: {
  readonly fiber: Fiber.RuntimeFiber<void, ModelError>
  readonly received: Queue.Queue<number>
}) =>
  Effect.raceFirst(
    Queue.take(consumer.received),
    Effect.flatMap(Fiber.join(consumer.fiber), () => Effect.dieMessage("the stream ended before the next element"))
  )

const timeoutOf = (exit: Exit.Exit<void, ModelError>): ModelError => {
  assert.isTrue(Exit.isFailure(exit), "the stream should have failed")
  const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
  assert.isTrue(Option.isSome(failure), "the stream should have failed with a ModelError")
  return Option.getOrThrow(failure)
}

describe("LanguageModelAdapter timeouts", () => {
  it.scoped("MOD-04 the idle timer restarts with every chunk: waits shorter than idleTimeout never time out, however long the reply", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const consumer = yield* consume(source)
      const { fiber, received } = consumer
      for (let n = 1; n <= 5; n++) {
        yield* source.send(n)
        assert.strictEqual(yield* nextOf(consumer), n)
        // 5 × 20 s: far past one idleTimeout in total, never one wait of 30 s
        yield* TestClock.adjust("20 seconds")
      }
      yield* source.end
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(fiber)))
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(received)), [])
    }))

  it.scoped("MOD-04 idleTimeout counts only waits for the provider: a consumer busy past it with a chunk read ahead does not time out", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const gate = yield* Deferred.make<void>()
      const consumer = yield* consume(source, { holdAt: 1, gate })
      const { fiber, holding } = consumer
      yield* source.send(1)
      yield* Deferred.await(holding)
      // the provider sends the next chunk at once: the reader holds it while the consumer is busy
      yield* source.send(2)
      assert.strictEqual(yield* Queue.take(source.pulled), 1)
      assert.strictEqual(yield* Queue.take(source.pulled), 2)
      yield* TestClock.adjust("90 seconds")
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* nextOf(consumer), 1)
      assert.strictEqual(yield* nextOf(consumer), 2)
      yield* source.end
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(fiber)))
    }))

  it.scoped("MOD-04 MOD-05 an idle wait of idleTimeout fails TIMEOUT at once, after the chunks before it, and closes the provider's stream", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const { fiber, received } = yield* consume(source)
      yield* source.send(1)
      assert.strictEqual(yield* Queue.take(received), 1)
      yield* TestClock.adjust("29 seconds")
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)), "29 s of 30 s is not a timeout")
      yield* TestClock.adjust("1 second")
      const error = timeoutOf(yield* Fiber.await(fiber))
      assert.strictEqual(error.code, "TIMEOUT")
      assert.include(error.message, "idleTimeout")
      yield* Deferred.await(source.closed)
    }))

  it.scoped("MOD-04 MOD-05 requestTimeout fails TIMEOUT even with a chunk read ahead for a busy consumer, and closes the provider's stream", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const gate = yield* Deferred.make<void>()
      const { fiber, holding, received } = yield* consume(source, { holdAt: 1, gate })
      yield* source.send(1)
      yield* Deferred.await(holding)
      yield* source.send(2)
      assert.strictEqual(yield* Queue.take(source.pulled), 1)
      assert.strictEqual(yield* Queue.take(source.pulled), 2)
      yield* TestClock.adjust("10 minutes")
      yield* Deferred.await(source.closed)
      yield* Deferred.succeed(gate, undefined)
      const error = timeoutOf(yield* Fiber.await(fiber))
      assert.strictEqual(error.code, "TIMEOUT")
      assert.include(error.message, "requestTimeout")
      // the chunk in the consumer's hands was delivered; the one read ahead was not
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(received)), [1])
    }))

  it.scoped("MOD-04 the provider's failures and defects reach the consumer unchanged, after the chunks before them", () =>
    Effect.gen(function*() {
      const failing = yield* feed
      const first = yield* consume(failing)
      yield* failing.send(1)
      yield* failing.fail(new ModelError({ code: "NETWORK", reason: "dropped" }))
      const error = timeoutOf(yield* Fiber.await(first.fiber))
      assert.strictEqual(error.code, "NETWORK")
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(first.received)), [1])
      yield* Deferred.await(failing.closed)

      const dying = yield* feed
      const second = yield* consume(dying)
      yield* dying.die("boom")
      const exit = yield* Fiber.await(second.fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      assert.deepStrictEqual(Exit.isFailure(exit) ? Chunk.toReadonlyArray(Cause.defects(exit.cause)) : [], ["boom"])
    }))

  it.scoped("MOD-05 interrupting the consumer closes the provider's stream", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const { fiber, received } = yield* consume(source)
      yield* source.send(1)
      assert.strictEqual(yield* Queue.take(received), 1)
      assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(fiber)))
      yield* Deferred.await(source.closed)
    }))
})
