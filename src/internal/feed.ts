/**
 * Event fan-out, once for every feed of the library. A publication (one value or a chunk of them)
 * and the feed's end are handed, in the publishing step, to every listener of the feed: synchronous
 * functions that put them where their reader looks (a subscriber's `Queue`, an event cursor's
 * bounded buffer, an HTTP response's queue). A subscriber stream is a listener offering `Take`s to
 * its own unbounded `Queue`, read by `fromTakes`: everything published before the end, then the end,
 * in one chunk per pull of what was waiting. Observers run in their own fibers, so a failing or slow
 * observer never affects the publisher.
 *
 * Why listeners and not a `PubSub` (B9): a reader that needs the events somewhere else than in a
 * subscription of its own (a bounded buffer that drops what the log can give back, a queue shared
 * with other sources, only some of the events) had to copy them there from a fiber of its own: one
 * more fiber woken, and ≈20 Effect operations and a few KB of garbage, for every publication. A
 * listener puts them there at once, and a subscription costs the same as a `PubSub`'s (one
 * `unsafeOffer` per publication).
 *
 * Until someone listens, a publication costs one Effect and nothing more (most agents of a large
 * process are never observed, B2). A feed is one small object: its operations live on the prototype and its streams
 * are built on first use.
 *
 * A feed counts its open subscriptions and listeners (HOST-02: `AgentHost` keeps an agent live while
 * anyone watches it, however they got the agent). The count is a plain field changed in the
 * synchronous steps of a subscription's acquire and release, so publishing costs nothing more, and
 * a reader can check it in the same synchronous step as its own state (a `Ref` would put a yield
 * point between the two).
 *
 * @internal
 */
import { Channel, Chunk, Effect, Exit, Queue, Stream, Take } from "effect"
import type { Cause } from "effect"
import type { Scope } from "effect"

/**
 * A listener: called in the publishing step with each publication (`one` value or `many`), then
 * `end` (once; also at once when it starts listening to a feed that has ended). It must not throw,
 * and it runs no Effect: it puts what it gets where its reader will look.
 *
 * @internal
 */
export interface Listener<A> {
  readonly one: (value: A) => void
  readonly many: (values: Chunk.Chunk<A>) => void
  readonly end: () => void
}

/** @internal */
export interface Feed<A> {
  readonly publish: (value: A) => Effect.Effect<void>
  /** `publish` done now, in the caller's step (a hot path that is already in an Effect, B5). */
  readonly unsafePublish: (value: A) => void
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
  /**
   * `listener` gets every publication from now on, then the end, while the Scope is open; it counts
   * as a subscriber (HOST-02).
   */
  readonly listen: (listener: Listener<A>) => Effect.Effect<void, never, Scope.Scope>
  readonly hasEnded: () => boolean
  /** How many subscriptions are open now (HOST-02). */
  readonly subscribers: () => number
  /**
   * Runs `listener` in the release of the last open subscription, each time the count falls to 0
   * (HOST-02: the host notes the activity and looks again at its capacity). One listener per feed;
   * `undefined` removes it.
   */
  readonly onQuiet: (listener: (() => Effect.Effect<void>) | undefined) => void
}

/** The most `Take`s one pull reads from a queue (`Stream.fromQueue`'s default chunk size). */
const MAX_TAKES = 4096

/**
 * What waits in `queue`; when nothing does, the first to arrive and what arrives while others run once.
 * `onPull` runs after the first look (in its step: no Effect more per pull), before any wait.
 */
const gathered = <T>(queue: Queue.Dequeue<T>, onPull: (() => void) | undefined): Effect.Effect<Chunk.Chunk<T>> =>
  Effect.flatMap(Queue.takeUpTo(queue, MAX_TAKES), (waiting) => {
    onPull?.()
    return Chunk.isNonEmpty(waiting)
      ? Effect.succeed(waiting)
      : Effect.flatMap(Queue.take(queue), (first) =>
        Effect.zipRight(
          Effect.yieldNow(),
          Effect.map(Queue.takeUpTo(queue, MAX_TAKES - 1), (rest) => Chunk.prepend(rest, first))
        ))
  })

/**
 * The values of a queue of `Take`s up to the first `Take.end` (or the failure a `Take` carries),
 * one chunk per pull of every `Take` waiting: `Stream.flattenTake` emits one chunk per `Take`, so a
 * burst of publications (a model's deltas, B9) would cross every stage downstream one by one.
 *
 * With `gather`, a pull that found the queue empty lets the other fibers that are ready run once
 * after the first `Take` arrives, then reads what has arrived meanwhile with it: fewer, larger
 * chunks when many producers are busy (an HTTP response writes each chunk as one piece, B9).
 * `onPull` tells the queue's owner when downstream asks for more: a consumer that waits until a
 * chunk is written (an HTTP response waits for its socket to drain) pulls again only then (SEC-01).
 *
 * @internal
 */
export const fromTakes = <A, E>(
  queue: Queue.Dequeue<Take.Take<A, E>>,
  options?: {
    readonly gather?: boolean | undefined
    /** Called as each pull starts: what the last pull emitted has been handled downstream (SEC-01). */
    readonly onPull?: (() => void) | undefined
  }
): Stream.Stream<A, E> => {
  // made once per stream, not per Take: what a pull gathers, and how a Take adds to it
  let values: Array<A> = []
  const gather: {
    readonly onEnd: () => Channel.Channel<never>
    readonly onFailure: (cause: Cause.Cause<E>) => Channel.Channel<never, unknown, E>
    readonly onSuccess: (chunk: Chunk.Chunk<A>) => undefined
  } = {
    onEnd: () => Channel.void,
    onFailure: (cause) => Channel.failCause(cause),
    onSuccess: (chunk) => {
      for (const value of chunk) values.push(value)
      return undefined
    }
  }
  const onPull = options?.onPull
  const takes = options?.gather === true
    ? gathered(queue, onPull)
    : onPull === undefined
    ? Queue.takeBetween(queue, 1, MAX_TAKES)
    : Effect.zipRight(Effect.sync(onPull), Queue.takeBetween(queue, 1, MAX_TAKES))
  const loop: Channel.Channel<Chunk.Chunk<A>, unknown, E> = Channel.flatMap(
    Channel.fromEffect(takes),
    (takes) => {
      values = []
      let last: Channel.Channel<Chunk.Chunk<A>, unknown, E> | undefined
      for (const take of takes) {
        last = Take.match(take, gather)
        if (last !== undefined) break
      }
      const written = values.length === 0 ? Channel.void : Channel.write(Chunk.unsafeFromArray(values))
      return Channel.zipRight(written, last ?? loop)
    }
  )
  return Stream.fromChannel(loop)
}

/**
 * Runs `self` and then offers its end to `queue`: `Take.end` when it succeeds, its cause when it
 * fails, dies or is interrupted from inside (a reader must end, not wait forever). When the producer
 * itself is interrupted (its reader is gone) the offer is skipped: it is made interruptible, so it
 * returns at once. What a `Mailbox.into` would do, for a queue read by `fromTakes`: a `Queue`'s take
 * registers its waiter and looks again, where a `Mailbox`'s can miss an offer made between its look
 * and its registration and wait for the next one (CORE-09).
 *
 * @internal
 */
export const endInto = <A, E>(queue: Queue.Enqueue<Take.Take<A, E>>) => <X, R>(self: Effect.Effect<X, E, R>) =>
  Effect.onExit(
    self,
    (exit) => Effect.interruptible(Queue.offer(queue, Exit.isSuccess(exit) ? Take.end : Take.failCause(exit.cause)))
  )

const noListeners: ReadonlyArray<never> = []

class FeedImpl<A> implements Feed<A> {
  private ended = false
  private count = 0
  private quietListener: (() => Effect.Effect<void>) | undefined = undefined
  /** Replaced, never changed in place: a publication goes to the listeners there were when it started. */
  private listeners: ReadonlyArray<Listener<A>> = noListeners
  private subscribeEffect: Effect.Effect<Stream.Stream<A>, never, Scope.Scope> | undefined = undefined
  private streamValue: Stream.Stream<A> | undefined = undefined

  // who listens is looked at when the publication runs: a listener added after the Effect was made
  // and before it ran gets it
  publish(value: A): Effect.Effect<void> {
    return Effect.sync(() => this.deliverOne(value))
  }

  unsafePublish(value: A): void {
    this.deliverOne(value)
  }

  publishAll(values: Iterable<A>): Effect.Effect<void> {
    return Effect.sync(() => {
      if (this.listeners.length === 0) return
      const chunk = Chunk.fromIterable(values)
      if (Chunk.isNonEmpty(chunk)) this.deliverMany(chunk)
    })
  }

  get end(): Effect.Effect<void> {
    return Effect.suspend(() => this.finish(undefined))
  }

  endWith(make: () => A): Effect.Effect<void> {
    return Effect.suspend(() => this.finish(make))
  }

  /** Hands `value` to every listener (nothing after the end). */
  private deliverOne(value: A): void {
    if (this.ended) return
    const listeners = this.listeners
    for (let i = 0; i < listeners.length; i++) listeners[i]!.one(value)
  }

  private deliverMany(values: Chunk.Chunk<A>): void {
    if (this.ended) return
    const listeners = this.listeners
    for (let i = 0; i < listeners.length; i++) listeners[i]!.many(values)
  }

  /**
   * The end (after `make()`'s value, made only when someone listens); nothing is delivered after it.
   * The listeners stop counting (HOST-02: nothing is left to watch), so the quiet listener runs.
   */
  private finish(make: (() => A) | undefined): Effect.Effect<void> {
    if (this.ended) return Effect.void
    if (make !== undefined && this.listeners.length > 0) this.deliverOne(make())
    this.ended = true
    const listeners = this.listeners
    this.listeners = noListeners
    for (let i = 0; i < listeners.length; i++) listeners[i]!.end()
    if (listeners.length === 0) return Effect.void
    this.count -= listeners.length
    return this.whenQuiet()
  }

  private whenQuiet(): Effect.Effect<void> {
    const quiet = this.quietListener
    return this.count === 0 && quiet !== undefined ? quiet() : Effect.void
  }

  listen(listener: Listener<A>): Effect.Effect<void, never, Scope.Scope> {
    return Effect.acquireRelease(Effect.sync(() => this.add(listener)), () => this.remove(listener))
  }

  /** Counted while listening (HOST-02); a feed that has ended gives its end at once. */
  private add(listener: Listener<A>): void {
    if (this.ended) return listener.end()
    this.count++
    this.listeners = [...this.listeners, listener]
  }

  /** A listener still there stops counting (one the end took out already stopped). */
  private remove(listener: Listener<A>): Effect.Effect<void> {
    return Effect.suspend(() => {
      const at = this.listeners.indexOf(listener)
      if (at < 0) return Effect.void
      this.listeners = this.listeners.filter((_, i) => i !== at)
      this.count--
      return this.whenQuiet()
    })
  }

  get subscribe(): Effect.Effect<Stream.Stream<A>, never, Scope.Scope> {
    return this.subscribeEffect ??= Effect.suspend(() => {
      if (this.ended) return Effect.succeed(Stream.empty)
      return Effect.flatMap(Queue.unbounded<Take.Take<A>>(), (queue) =>
        Effect.as(
          this.listen({
            one: (value) => {
              queue.unsafeOffer(Take.of(value))
            },
            many: (values) => {
              queue.unsafeOffer(Take.chunk(values))
            },
            end: () => {
              queue.unsafeOffer(Take.end)
            }
          }),
          fromTakes(queue)
        ))
    })
  }

  get stream(): Stream.Stream<A> {
    return this.streamValue ??= Stream.unwrapScoped(this.subscribe)
  }

  hasEnded(): boolean {
    return this.ended
  }

  subscribers(): number {
    return this.count
  }

  onQuiet(listener: (() => Effect.Effect<void>) | undefined): void {
    this.quietListener = listener
  }
}

/** @internal */
export const makeUnsafe = <A>(): Feed<A> => new FeedImpl<A>()

/** @internal */
export const make = <A>(): Effect.Effect<Feed<A>> => Effect.sync(() => new FeedImpl<A>())
