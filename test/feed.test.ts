/**
 * The event fan-out behind every feed (agent, session, store, registry, inbox): synchronous
 * listeners called in the publishing step; a subscription is a listener offering `Take`s to its own
 * `Queue` (CORE-09 library replacements).
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Deferred, Effect, Exit, Fiber, Option, Queue, Ref, Scope, Stream, Take } from "effect"
import * as Feed from "../src/internal/feed.js"
import { eventually } from "./fixtures/waiting.js"

describe("internal feed", () => {
  it.scoped("CORE-09 an eager subscriber gets everything published after it subscribed, in order, then the end", () =>
    Effect.gen(function*() {
      const feed = yield* Feed.make<number>()
      yield* feed.publish(0) // nobody listens yet: dropped
      const stream = yield* feed.subscribe
      yield* feed.publish(1)
      yield* feed.publishAll([2, 3])
      yield* feed.publishAll([])
      yield* feed.endWith(() => 4)
      yield* feed.publish(5) // after the end: dropped
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(stream)), [1, 2, 3, 4])
      assert.isTrue(feed.hasEnded())
    }))

  it.scoped("CORE-09 every subscriber sees the same events; one subscribed after the end gets none", () =>
    Effect.gen(function*() {
      const feed = yield* Feed.make<string>()
      const first = yield* feed.subscribe
      const second = yield* feed.subscribe
      yield* feed.publish("a")
      yield* feed.end
      yield* feed.end // idempotent
      const late = yield* feed.subscribe
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(first)), ["a"])
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(second)), ["a"])
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(late)), [])
    }))

  it.scoped("CORE-09 B9 what was published while a subscriber was busy reaches it as one chunk, up to the end", () =>
    Effect.gen(function*() {
      const feed = yield* Feed.make<number>()
      const stream = yield* feed.subscribe
      // published before the subscriber pulls: one burst (a model's deltas), then the end
      for (let i = 1; i <= 5; i++) yield* feed.publish(i)
      yield* feed.publishAll([6, 7])
      yield* feed.end
      const chunks = yield* Stream.runCollect(
        Stream.mapChunks(stream, (chunk) => Chunk.of(Chunk.toReadonlyArray(chunk)))
      )
      assert.deepStrictEqual(Chunk.toReadonlyArray(chunks), [[1, 2, 3, 4, 5, 6, 7]])
    }))

  it.scoped("CORE-09 endInto ends a queue of Takes as its producer ends: values first, then the end, the failure, the defect or the interruption", () =>
    Effect.gen(function*() {
      const read = <E>(produce: (queue: Queue.Queue<Take.Take<number, E>>) => Effect.Effect<void, E>) =>
        Effect.gen(function*() {
          const queue = yield* Queue.bounded<Take.Take<number, E>>(2)
          yield* Effect.forkScoped(Feed.endInto(queue)(produce(queue)))
          return yield* Effect.exit(Stream.runCollect(Feed.fromTakes(queue)))
        })
      const offer = <E>(queue: Queue.Queue<Take.Take<number, E>>, values: ReadonlyArray<number>) =>
        Effect.forEach(values, (value) => Queue.offer(queue, Take.of(value)), { discard: true })
      // more values than the queue holds: the producer waits for the reader, and the end comes last
      const ended = yield* read<never>((queue) => offer(queue, [1, 2, 3, 4, 5]))
      assert.deepStrictEqual(Exit.map(ended, Chunk.toReadonlyArray), Exit.succeed([1, 2, 3, 4, 5]))
      const failed = yield* read<string>((queue) => Effect.zipRight(offer(queue, [1]), Effect.fail("boom")))
      assert.deepStrictEqual(Exit.isFailure(failed) ? Cause.failureOption(failed.cause) : Option.none(), Option.some("boom"))
      const died = yield* read<never>((queue) => Effect.zipRight(offer(queue, [1]), Effect.dieMessage("bug")))
      assert.isTrue(Exit.isFailure(died) && Cause.isDie(died.cause))
      // interrupted from inside (not by its reader going away): the reader ends interrupted, it does not wait
      const interrupted = yield* read<never>((queue) => Effect.zipRight(offer(queue, [1]), Effect.interrupt))
      assert.isTrue(Exit.isFailure(interrupted) && Cause.isInterruptedOnly(interrupted.cause))
    }))

  it.scoped("CORE-09 endInto offers nothing for an interrupted producer, and its waiting offer stays interruptible", () =>
    Effect.gen(function*() {
      const queue = yield* Queue.bounded<Take.Take<number>>(1)
      yield* Queue.offer(queue, Take.of(0)) // full: a further offer waits
      const started = yield* Deferred.make<void>()
      const producer = yield* Effect.fork(
        Feed.endInto(queue)(Effect.zipRight(Deferred.succeed(started, undefined), Effect.never))
      )
      yield* Deferred.await(started)
      yield* Fiber.interrupt(producer)
      assert.strictEqual(yield* Queue.size(queue), 1)
      // a producer that succeeded while the queue is full waits to offer its end, and can be interrupted there
      const finisher = yield* Effect.fork(Feed.endInto(queue)(Effect.void))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(finisher)
      assert.strictEqual(yield* Queue.size(queue), 1)
    }))

  it.scoped("CORE-09 first subscriptions made at the same time share one PubSub: both get every event", () =>
    Effect.gen(function*() {
      const feed = Feed.makeUnsafe<number>()
      const [a, b] = yield* Effect.all([feed.subscribe, feed.subscribe], { concurrency: "unbounded" })
      yield* feed.publishAll([1, 2])
      yield* feed.end
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(a)), [1, 2])
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(b)), [1, 2])
    }))

  it.scoped("HOST-02 a feed counts its open subscriptions, eager and lazy; the quiet listener runs when the last one closes", () =>
    Effect.gen(function*() {
      const feed = yield* Feed.make<number>()
      const quiet = yield* Ref.make(0)
      feed.onQuiet(() => Ref.update(quiet, (n) => n + 1))
      assert.strictEqual(feed.subscribers(), 0)
      const first = yield* Scope.make()
      const second = yield* Scope.make()
      yield* Scope.extend(feed.subscribe, first)
      yield* Scope.extend(feed.subscribe, second)
      assert.strictEqual(feed.subscribers(), 2)
      yield* Scope.close(first, Exit.void)
      assert.strictEqual(feed.subscribers(), 1)
      assert.strictEqual(yield* Ref.get(quiet), 0)
      yield* Scope.close(second, Exit.void)
      assert.strictEqual(feed.subscribers(), 0)
      assert.strictEqual(yield* Ref.get(quiet), 1)
      // the lazy stream counts while it runs
      const published = yield* Deferred.make<void>()
      const running = yield* Effect.fork(Stream.runForEach(feed.stream, () => Deferred.succeed(published, undefined)))
      yield* eventually(() => Effect.succeed(feed.subscribers() === 1))
      yield* feed.publish(1)
      yield* Deferred.await(published)
      yield* Fiber.interrupt(running)
      assert.strictEqual(feed.subscribers(), 0)
      assert.strictEqual(yield* Ref.get(quiet), 2)
      // an ended feed counts no new subscriber
      yield* feed.end
      yield* Scope.extend(feed.subscribe, yield* Scope.make())
      assert.strictEqual(feed.subscribers(), 0)
    }))

  it.scoped("HOST-02 listeners count while they listen; at the feed's end they stop counting and the quiet listener runs once", () =>
    Effect.gen(function*() {
      const feed = yield* Feed.make<number>()
      const quiet = yield* Ref.make(0)
      feed.onQuiet(() => Ref.update(quiet, (n) => n + 1))
      const got: Array<number | "end"> = []
      const listener: Feed.Listener<number> = {
        one: (value) => got.push(value),
        many: (values) => got.push(...values),
        end: () => got.push("end")
      }
      const listening = yield* Scope.make()
      yield* Scope.extend(feed.listen(listener), listening)
      yield* Scope.extend(feed.subscribe, listening)
      assert.strictEqual(feed.subscribers(), 2)
      yield* feed.publish(1)
      yield* feed.publishAll([2, 3])
      yield* feed.publishAll([])
      yield* feed.endWith(() => 4)
      assert.deepStrictEqual(got, [1, 2, 3, 4, "end"])
      assert.strictEqual(feed.subscribers(), 0)
      assert.strictEqual(yield* Ref.get(quiet), 1)
      // their Scopes close later: nothing is counted twice, the quiet listener does not run again
      yield* Scope.close(listening, Exit.void)
      assert.strictEqual(feed.subscribers(), 0)
      assert.strictEqual(yield* Ref.get(quiet), 1)
      // a listener of a feed that has ended gets the end at once and is not counted
      const late: Array<string> = []
      yield* feed.listen({ one: () => late.push("one"), many: () => late.push("many"), end: () => late.push("end") })
      assert.deepStrictEqual(late, ["end"])
      assert.strictEqual(feed.subscribers(), 0)
    }))

  it.scoped("CORE-09 a listener that starts after a publication's Effect was made, and before it ran, gets it", () =>
    Effect.gen(function*() {
      const feed = yield* Feed.make<string>()
      const publication = feed.publish("made before anyone listened")
      const publications = feed.publishAll(["and", "these"])
      const got: Array<string> = []
      yield* feed.listen({ one: (value) => got.push(value), many: (values) => got.push(...values), end: () => {} })
      yield* publication
      yield* publications
      assert.deepStrictEqual(got, ["made before anyone listened", "and", "these"])
    }))
})
