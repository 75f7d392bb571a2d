/**
 * Event fan-out, once for every feed of the library: an unbounded PubSub whose subscriber streams
 * end (after delivering everything published before) when the feed ends. Observers are subscribers
 * running in their own fibers, so a failing or slow observer never affects the publisher.
 *
 * The PubSub is made on the first subscription: until someone listens, publishing costs nothing
 * (most agents of a large process are never observed, B2). A feed is one small object: its
 * operations live on the prototype and its streams are built on first use.
 *
 * @internal
 */
import { Effect, PubSub, Stream } from "effect"
import type { Scope } from "effect"

const END: unique symbol = Symbol.for("effect-agent/feed/end")

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

class FeedImpl<A> implements Feed<A> {
  private ended = false
  private pubsub: PubSub.PubSub<A | typeof END> | undefined = undefined
  private subscribeEffect: Effect.Effect<Stream.Stream<A>, never, Scope.Scope> | undefined = undefined
  private streamValue: Stream.Stream<A> | undefined = undefined

  publish(value: A): Effect.Effect<void> {
    const pubsub = this.pubsub
    return this.ended || pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publish(pubsub, value))
  }

  publishAll(values: Iterable<A>): Effect.Effect<void> {
    const pubsub = this.pubsub
    return this.ended || pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publishAll(pubsub, values))
  }

  get end(): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.ended) return Effect.void
      this.ended = true
      return this.pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publish(this.pubsub, END))
    })
  }

  endWith(make: () => A): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.ended) return Effect.void
      this.ended = true
      const pubsub = this.pubsub
      if (pubsub === undefined) return Effect.void
      const last: Array<A | typeof END> = [make(), END]
      return Effect.asVoid(PubSub.publishAll(pubsub, last))
    })
  }

  get subscribe(): Effect.Effect<Stream.Stream<A>, never, Scope.Scope> {
    return this.subscribeEffect ??= Effect.suspend(() => {
      if (this.ended) return Effect.succeed(Stream.empty)
      this.pubsub ??= Effect.runSync(PubSub.unbounded<A | typeof END>())
      return Effect.map(
        PubSub.subscribe(this.pubsub),
        (dequeue) => Stream.fromQueue(dequeue).pipe(Stream.takeWhile((value): value is A => value !== END))
      )
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
