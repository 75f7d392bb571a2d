/**
 * The request and idle-chunk timeouts of the adapter (MOD-04) on a provider stream the test feeds
 * chunk by chunk, under `TestClock`, for both ways a timeout ends a wait: our wire models abort
 * their HTTP request (here: the abort scope's finalizer fails the pending read, as an aborted
 * fetch does), any other `LanguageModel`'s stream is read ahead by a fiber that a timeout
 * interrupts. The idle timer restarts with every chunk and counts only waits for the provider; a
 * timeout ends the stream at once and cuts the provider's stream off (MOD-05); ends, failures and
 * defects pass through unchanged.
 */
import { assert, describe, it } from "@effect/vitest"
import {
  Cause,
  Chunk,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Option,
  Queue,
  Scope,
  Stream,
  Take,
  TestClock
} from "effect"
import { ModelError } from "../src/AgentError.js"
import { watched, withAbortingTimeouts, withTimeouts } from "../src/internal/model/timeouts.js"

const timeouts = { requestTimeout: Duration.minutes(10), idleTimeout: Duration.seconds(30) }

/**
 * A provider stream fed by the test: `send` offers one chunk, `end`, `fail` and `die` finish it;
 * `pulled` receives each element as it is pulled from the provider; `cut` completes when the
 * provider's stream is cut off (closed, or its request aborted).
 */
const feed = Effect.gen(function*() {
  const takes = yield* Queue.unbounded<Take.Take<number, ModelError>>()
  const pulled = yield* Queue.unbounded<number>()
  const cut = yield* Deferred.make<void>()
  const stream = Stream.flattenTake(Stream.fromQueue(takes)).pipe(Stream.tap((n) => Queue.offer(pulled, n)))
  return {
    stream,
    takes,
    pulled,
    cut,
    send: (n: number) => Queue.offer(takes, Take.of(n)),
    end: Queue.offer(takes, Take.end),
    fail: (error: ModelError) => Queue.offer(takes, Take.fail(error)),
    die: (defect: unknown) => Queue.offer(takes, Take.die(defect))
  }
})

type Feed = Effect.Effect.Success<typeof feed>

/** One way of putting the timeouts on a provider's stream. */
interface Mechanism {
  readonly name: string
  readonly timed: (source: Feed) => Stream.Stream<number, ModelError>
  /** Whether the provider's next chunk is read while the consumer is busy. */
  readonly readsAhead: boolean
}

const mechanisms: ReadonlyArray<Mechanism> = [
  {
    name: "our wire models (the HTTP request aborted)",
    timed: (source) =>
      withAbortingTimeouts(
        (watch) =>
          watched(
            Stream.unwrap(Effect.as(
              // an aborted request fails the read waiting for its body
              Scope.addFinalizer(
                watch.abortOn,
                Effect.zipRight(
                  source.fail(new ModelError({ code: "NETWORK", reason: "aborted" })),
                  Deferred.succeed(source.cut, undefined)
                )
              ),
              source.stream
            )),
            watch
          ),
        timeouts
      ),
    readsAhead: false
  },
  {
    name: "any LanguageModel (a reader fiber interrupted)",
    timed: (source) => withTimeouts(Stream.ensuring(source.stream, Deferred.succeed(source.cut, undefined)), timeouts),
    readsAhead: true
  }
]

/**
 * Consumes the timed stream in a fiber: each element goes to `received` (after `gate` opens, for
 * the element `holdAt`), so the test knows what the consumer has seen.
 */
const consume = (
  stream: Stream.Stream<number, ModelError>,
  options: { readonly holdAt?: number; readonly gate?: Deferred.Deferred<void> } = {}
) =>
  Effect.gen(function*() {
    const received = yield* Queue.unbounded<number>()
    const holding = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(
      Stream.runForEach(stream, (n) =>
        n === options.holdAt && options.gate !== undefined
          ? Deferred.succeed(holding, undefined).pipe(
            Effect.zipRight(Deferred.await(options.gate)),
            Effect.zipRight(Queue.offer(received, n))
          )
          : Queue.offer(received, n))
    )
    // the timer (one for both timeouts) is registered before the test moves the clock
    yield* TestClock.sleeps().pipe(Effect.repeat({ until: (sleeps) => Chunk.size(sleeps) >= 1 }))
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

const failureOf = (exit: Exit.Exit<void, ModelError>): ModelError => {
  assert.isTrue(Exit.isFailure(exit), "the stream should have failed")
  const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
  assert.isTrue(Option.isSome(failure), "the stream should have failed with a ModelError")
  return Option.getOrThrow(failure)
}

/** Sends 1, lets the consumer hold it, then sends 2 while the consumer is busy. */
const busyWithNextSent = (mechanism: Mechanism, source: Feed, holding: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    yield* source.send(1)
    yield* Deferred.await(holding)
    yield* source.send(2)
    assert.strictEqual(yield* Queue.take(source.pulled), 1)
    // a reader fiber reads the provider's next chunk while the consumer is busy
    if (mechanism.readsAhead) assert.strictEqual(yield* Queue.take(source.pulled), 2)
  })

describe.each(mechanisms)("LanguageModelAdapter timeouts: $name", (mechanism) => {
  it.scoped("MOD-04 the idle timer restarts with every chunk: waits shorter than idleTimeout never time out, however long the reply", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const consumer = yield* consume(mechanism.timed(source))
      for (let n = 1; n <= 5; n++) {
        yield* source.send(n)
        assert.strictEqual(yield* nextOf(consumer), n)
        // 5 × 20 s: far past one idleTimeout in total, never one wait of 30 s
        yield* TestClock.adjust("20 seconds")
      }
      yield* source.end
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(consumer.fiber)))
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(consumer.received)), [])
    }))

  it.scoped("MOD-04 idleTimeout counts only waits for the provider: a consumer busy past it does not time out", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const gate = yield* Deferred.make<void>()
      const consumer = yield* consume(mechanism.timed(source), { holdAt: 1, gate })
      yield* busyWithNextSent(mechanism, source, consumer.holding)
      yield* TestClock.adjust("90 seconds")
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* nextOf(consumer), 1)
      assert.strictEqual(yield* nextOf(consumer), 2)
      yield* source.end
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(consumer.fiber)))
    }))

  it.scoped("MOD-04 MOD-05 an idle wait of idleTimeout fails TIMEOUT at once, after the chunks before it, and cuts the provider off", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const consumer = yield* consume(mechanism.timed(source))
      yield* source.send(1)
      assert.strictEqual(yield* nextOf(consumer), 1)
      yield* TestClock.adjust("29 seconds")
      assert.isTrue(Option.isNone(yield* Fiber.poll(consumer.fiber)), "29 s of 30 s is not a timeout")
      yield* TestClock.adjust("1 second")
      const error = failureOf(yield* Fiber.await(consumer.fiber))
      assert.strictEqual(error.code, "TIMEOUT")
      assert.include(error.message, "idleTimeout")
      yield* Deferred.await(source.cut)
    }))

  it.scoped("MOD-04 MOD-05 requestTimeout cuts the provider off at once even while the consumer is busy, then fails TIMEOUT", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const gate = yield* Deferred.make<void>()
      const consumer = yield* consume(mechanism.timed(source), { holdAt: 1, gate })
      yield* busyWithNextSent(mechanism, source, consumer.holding)
      yield* TestClock.adjust("10 minutes")
      yield* Deferred.await(source.cut)
      yield* Deferred.succeed(gate, undefined)
      const error = failureOf(yield* Fiber.await(consumer.fiber))
      assert.strictEqual(error.code, "TIMEOUT")
      assert.include(error.message, "requestTimeout")
      // the chunk in the consumer's hands was delivered; the next one was not
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(consumer.received)), [1])
    }))

  it.scoped("MOD-04 the provider's failures and defects reach the consumer unchanged, after the chunks before them", () =>
    Effect.gen(function*() {
      const failing = yield* feed
      const first = yield* consume(mechanism.timed(failing))
      yield* failing.send(1)
      yield* failing.fail(new ModelError({ code: "NETWORK", reason: "dropped" }))
      const error = failureOf(yield* Fiber.await(first.fiber))
      assert.strictEqual(error.code, "NETWORK")
      assert.strictEqual(error.reason, "dropped")
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Queue.takeAll(first.received)), [1])
      yield* Deferred.await(failing.cut)

      const dying = yield* feed
      const second = yield* consume(mechanism.timed(dying))
      yield* dying.die("boom")
      const exit = yield* Fiber.await(second.fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      assert.deepStrictEqual(Exit.isFailure(exit) ? Chunk.toReadonlyArray(Cause.defects(exit.cause)) : [], ["boom"])
    }))

  it.scoped("MOD-05 interrupting the consumer cuts the provider off", () =>
    Effect.gen(function*() {
      const source = yield* feed
      const consumer = yield* consume(mechanism.timed(source))
      yield* source.send(1)
      assert.strictEqual(yield* nextOf(consumer), 1)
      assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(consumer.fiber)))
      yield* Deferred.await(source.cut)
    }))
})
