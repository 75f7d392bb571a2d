/**
 * Event fan-out, once for every feed of the library: an unbounded PubSub whose subscriber streams
 * end (after delivering everything published before) when the feed ends. Observers are subscribers
 * running in their own fibers, so a failing or slow observer never affects the publisher.
 *
 * The PubSub is made on the first subscription: until someone listens, publishing costs nothing
 * (most agents of a large process are never observed, B2).
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
  /** Lazy: subscribes when the stream starts. */
  readonly stream: Stream.Stream<A>
  /** Eager: subscribed before it returns. */
  readonly subscribe: Effect.Effect<Stream.Stream<A>, never, Scope.Scope>
  readonly hasEnded: () => boolean
}

/** @internal */
export const make = <A>(): Effect.Effect<Feed<A>> =>
  Effect.sync(() => {
    let ended = false
    let pubsub: PubSub.PubSub<A | typeof END> | undefined
    const subscribe = Effect.suspend(() => {
      if (ended) return Effect.succeed(Stream.empty)
      pubsub ??= Effect.runSync(PubSub.unbounded<A | typeof END>())
      return Effect.map(
        PubSub.subscribe(pubsub),
        (dequeue) => Stream.fromQueue(dequeue).pipe(Stream.takeWhile((value): value is A => value !== END))
      )
    })
    return {
      publish: (value) => (ended || pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publish(pubsub, value))),
      publishAll: (values) =>
        ended || pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publishAll(pubsub, values)),
      end: Effect.suspend(() => {
        if (ended) return Effect.void
        ended = true
        return pubsub === undefined ? Effect.void : Effect.asVoid(PubSub.publish(pubsub, END))
      }),
      stream: Stream.unwrapScoped(subscribe),
      subscribe,
      hasEnded: () => ended
    }
  })
