/**
 * The event fan-out behind every feed (agent, session, store, registry, inbox): a `PubSub` of
 * `Take`s (CORE-09 library replacements), made by the first subscription.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Ref, Scope, Stream } from "effect"
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
      // attached to an object, it is found from the object (and from one that inherits from it)
      const owner = {}
      Feed.attach(owner, feed)
      assert.strictEqual(Feed.attachedTo(Object.create(owner))?.subscribers(), 0)
      assert.isUndefined(Feed.attachedTo({}))
      // an ended feed counts no new subscriber
      yield* feed.end
      yield* Scope.extend(feed.subscribe, yield* Scope.make())
      assert.strictEqual(feed.subscribers(), 0)
    }))
})
