/**
 * Event fan-out, once for every feed of the library: an unbounded `PubSub` of `Take`s. A
 * publication is one `Take` of its values, the feed's end is `Take.end`, and each subscriber stream
 * is the subscription flattened (`Stream.flattenTake`): it delivers everything published before the
 * end, then ends. Observers are subscribers running in their own fibers, so a failing or slow
 * observer never affects the publisher.
 *
 * The PubSub is made by the first subscription: until someone listens, publishing costs nothing
 * (most agents of a large process are never observed, B2). A feed is one small object: its
 * operations live on the prototype and its streams are built on first use.
 *
 * @internal
 */
import { Chunk, Effect, PubSub, Stream, Take } from "effect"
import type { Scope } from "effect"

/** @internal */
export interface Feed<A> {
  readonly publish: (value: A) => Effect.Effect<void>
  readonly publishAll: (values: Iterable<A>) => Effect.Effect<void>
  /** Ends every subscriber stream after what was already published; later publications are dropped. */
  readonly end: Effect.Effect<void>
  /**
   * `publish(make())` then `end` in one operation: the value is made only when someone subscribed
   * (a teardown's last event, B1).
   */
  readonly endWith: (make: () => A) => Effect.Effect<void>
  /** Lazy: subscribes when the stream starts. */
  readonly stream: Stream.Stream<A>
  /** Eager: subscribed before it returns. */
  readonly subscribe: Effect.Effect<Stream.Stream<A>, never, Scope.Scope>
  readonly hasEnded: () => boolean
}

const streamOf = <A>(pubsub: PubSub.PubSub<Take.Take<A>>): Effect.Effect<Stream.Stream<A>, never, Scope.Scope> =>
  Effect.map(PubSub.subscribe(pubsub), (subscription) => Stream.flattenTake(Stream.fromQueue(subscription)))

class FeedImpl<A> implements Feed<A> {
  private ended = false
  private pubsub: PubSub.PubSub<Take.Take<A>> | undefined = undefined
  private subscribeEffect: Effect.Effect<Stream.Stream<A>, never, Scope.Scope> | undefined = undefined
  private streamValue: Stream.Stream<A> | undefined = undefined

  publish(value: A): Effect.Effect<void> {
    const pubsub = this.pubsub
    return this.ended || pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publish(pubsub, Take.of(value)))
  }

  publishAll(values: Iterable<A>): Effect.Effect<void> {
    const pubsub = this.pubsub
    return this.ended || pubsub === undefined
      ? Effect.void
      : Effect.asVoid(PubSub.publish(pubsub, Take.chunk(Chunk.fromIterable(values))))
  }

  get end(): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.ended) return Effect.void
      this.ended = true
      return this.pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publish(this.pubsub, Take.end))
    })
  }

  endWith(make: () => A): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.ended) return Effect.void
      this.ended = true
      const pubsub = this.pubsub
      if (pubsub === undefined) return Effect.void
      return Effect.asVoid(PubSub.publishAll(pubsub, [Take.of(make()), Take.end]))
    })
  }

  get subscribe(): Effect.Effect<Stream.Stream<A>, never, Scope.Scope> {
    return this.subscribeEffect ??= Effect.suspend(() => {
      if (this.ended) return Effect.succeed(Stream.empty)
      if (this.pubsub !== undefined) return streamOf(this.pubsub)
      // The first subscription makes the PubSub; one made meanwhile by a concurrent first
      // subscription wins (the check and the assignment run in one step) and this one is dropped.
      return Effect.flatMap(PubSub.unbounded<Take.Take<A>>(), (made) => {
        if (this.ended) return Effect.succeed(Stream.empty)
        return streamOf(this.pubsub ??= made)
      })
    })
  }

  get stream(): Stream.Stream<A> {
    return this.streamValue ??= Stream.unwrapScoped(this.subscribe)
  }

  hasEnded(): boolean {
    return this.ended
  }
}

/** @internal */
export const makeUnsafe = <A>(): Feed<A> => new FeedImpl<A>()

/** @internal */
export const make = <A>(): Effect.Effect<Feed<A>> => Effect.sync(() => new FeedImpl<A>())
