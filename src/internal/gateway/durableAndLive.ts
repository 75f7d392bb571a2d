/**
 * What `SessionGateway.eventsFrom` streams over an `AgentHost` (HTTP-00, EVS-01/02): the durable
 * events of a session through the host, with the live events of each activation of its agent
 * between them.
 *
 * The events go to a sink: the durable ones from a fiber of the caller's Scope that reads them (and
 * waits for room), the live ones from a listener on the agent's feed, in the agent's publishing
 * step; the sink's end comes after the last durable event (or with their failure). The live events
 * of the agent are followed while it is live: from the start when it is live then, and again after
 * an activation, which a durable event arriving while none is followed reveals. Nothing is followed
 * while the agent is passivated, and following never activates it.
 *
 * `durableAndLive` is that sink as a bounded queue read as a stream. The HTTP API's event-stream
 * body is such a sink itself (`eventsInto`), so no fiber copies a gateway stream into it.
 *
 * B9: a `Stream.merge` of the two and a `Stream.flatMap` with `switch` for the activations each
 * cost ≈100 Effect operations per chunk of events, a `Stream.withSpan` around the stream provided its
 * context again to each of its pulls, and a fiber following the live events (or copying the
 * stream into the body) was woken for each publication, ≈20 operations each. Here a chunk costs a
 * few operations, the span is the parent of the durable fiber, and live events wake only the reader.
 *
 * @internal
 */
import { Cause, Chunk, Effect, ExecutionStrategy, Exit, Option, Queue, Scope, Stream, Take } from "effect"
import type { Agent } from "../../Agent.js"
import type { AgentEvent } from "../../AgentEvent.js"
import type { SessionGateway, StreamEvent } from "../../SessionGateway.js"
import type { SessionEvent } from "../../SessionEvent.js"
import { feedOf } from "../agent/loop/agent.js"
import * as Feed from "../feed.js"
import type * as hostEvents from "../host/events.js"
import * as summary from "./summary.js"

/**
 * Publications (or chunks of durable events) a sink's queue may hold before durable events wait for
 * room and live ones are dropped: a reader that far behind has stalled (live events are best-effort,
 * EVS-02; the durable ones are re-read from the log).
 *
 * @internal
 */
export const CAPACITY = 4096

/** Where the events of a session stream go. @internal */
export interface EventSink<E> {
  /** A live event, in the agent's publishing step: put where the reader looks, or dropped. */
  readonly live: (event: StreamEvent) => void
  /** Durable events in the committing step: false when there is no room now (they come again by `durable`). */
  readonly tryDurable: (events: Chunk.Chunk<StreamEvent>) => boolean
  /** Durable events, in order: waits for room. */
  readonly durable: (events: Chunk.Chunk<StreamEvent>) => Effect.Effect<void>
  /** After the last durable event: success, or the durable stream's failure or defect. */
  readonly end: (exit: Exit.Exit<void, E>) => Effect.Effect<void>
}

const durableOf = (event: SessionEvent): StreamEvent => ({ _tag: "Durable", event })

// the last agent event a follower was handed and what a client sees of it: a publication goes to
// every follower of the agent in one step, and one object for all lets their bodies share one frame
// (SEC-01: 80 readers of a session make one frame of each delta, not 80)
let lastAgentEvent: AgentEvent | undefined
let lastLive: StreamEvent | undefined

/** What a client sees of an agent event (EVS-02), the same object for the followers of one publication. */
const liveOf = (event: AgentEvent): StreamEvent | undefined => {
  if (event === lastAgentEvent) return lastLive
  const live = summary.toLive(event)
  lastAgentEvent = event
  lastLive = Option.isSome(live) ? { _tag: "Live", event: live.value } : undefined
  return lastLive
}

/**
 * Follows the live events of one activation of the agent at a time: a listener on its feed (it
 * counts as a subscriber, HOST-02, until the feed ends) hands what a client sees to the sink. The
 * listener's Scope, a child of the stream's, is closed when the next activation is followed. An
 * agent from a user's factory has no feed of ours: a fiber in that Scope reads its `events`.
 */
const makeFollower = <E>(sink: EventSink<E>, scope: Scope.Scope) => {
  // an activation is followed (set when its listener starts, cleared at its feed's end)
  let following = false
  let current: Scope.CloseableScope | undefined
  const listener: Feed.Listener<AgentEvent> = {
    one: (event) => {
      const live = liveOf(event)
      if (live !== undefined) sink.live(live)
    },
    many: (events) => {
      for (const event of events) listener.one(event)
    },
    end: () => {
      following = false
    }
  }
  // an agent from a user's factory has no feed of ours: its `events` are read by a fiber
  const read = (agent: Agent) =>
    agent.events.pipe(
      Stream.runForEach((event) => Effect.sync(() => listener.one(event))),
      Effect.ensuring(Effect.sync(listener.end))
    )
  const start = (agent: Agent) =>
    Effect.gen(function*() {
      if (following) return
      // the last activation's reader (when it is a fiber, its end clears `following`: before it is set)
      if (current !== undefined) yield* Scope.close(current, Exit.void)
      following = true
      const opened = yield* Scope.fork(scope, ExecutionStrategy.sequential)
      current = opened
      const feed = feedOf(agent)
      yield* feed === undefined ? Effect.forkIn(read(agent), opened) : Scope.extend(feed.listen(listener), opened)
    })
  return (liveAgent: Effect.Effect<Option.Option<Agent>>) =>
    Effect.suspend(() =>
      following ? Effect.void : Effect.flatMap(liveAgent, (live) => Option.isNone(live) ? Effect.void : start(live.value))
    )
}

/**
 * A reader of durable events: runs them into its sink until they end (`hostEvents.runInto`), and
 * `onLive` each time it follows a live incarnation of the agent.
 *
 * @internal
 */
export type DurableReader<E> = (
  sink: hostEvents.DurableSink,
  onLive: Effect.Effect<void>
) => Effect.Effect<void, E, Scope.Scope>

/**
 * Runs the durable events of `reader`, with the live events of the agent `liveAgent` finds between
 * them, into `sink` from the current Scope (a fiber for the reader, in a span named `spanName`).
 *
 * @internal
 */
export const runInto = <E>(
  reader: DurableReader<E>,
  liveAgent: Effect.Effect<Option.Option<Agent>>,
  spanName: string,
  sink: EventSink<E>
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    const span = yield* Effect.makeSpanScoped(spanName)
    const follow = makeFollower(sink, yield* Effect.scope)
    yield* follow(liveAgent)
    const durable: hostEvents.DurableSink = {
      tryDurable: (events) => sink.tryDurable(Chunk.map(events, durableOf)),
      durable: (events) => sink.durable(Chunk.map(events, durableOf))
    }
    yield* reader(durable, follow(liveAgent)).pipe(
      Effect.scoped,
      Effect.withParentSpan(span),
      // a reader that is gone (the fiber interrupted from outside) is not told; otherwise it must end
      (self) => Effect.onExit(self, (exit) => Effect.interruptible(sink.end(exit))),
      Effect.forkScoped
    )
  })

/** A sink that is a bounded queue of `Take`s (a Queue, not a Mailbox: CORE-09). */
const queueSink = <E>(queue: Queue.Queue<Take.Take<StreamEvent, E>>): EventSink<E> => ({
  live: (event) => {
    queue.unsafeOffer(Take.of(event))
  },
  tryDurable: (events) => queue.unsafeOffer(Take.chunk(events)),
  durable: (events) => Queue.offer(queue, Take.chunk(events)),
  end: (exit) => Queue.offer(queue, Exit.isSuccess(exit) ? Take.end : Take.failCause(exit.cause))
})

/**
 * The durable events of `reader` with the live events of the agent `liveAgent` finds between
 * them, in a span named `spanName`.
 *
 * @internal
 */
export const durableAndLive = <E>(
  reader: DurableReader<E>,
  liveAgent: Effect.Effect<Option.Option<Agent>>,
  spanName: string
): Stream.Stream<StreamEvent, E> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const queue = yield* Queue.bounded<Take.Take<StreamEvent, E>>(CAPACITY)
    yield* runInto(reader, liveAgent, spanName, queueSink(queue))
    return Feed.fromTakes(queue)
  }))

/**
 * A gateway's way to run a session's events into a sink without a stream between
 * (`SessionGateway.eventsInto`).
 *
 * @internal
 */
export type EventsInto = NonNullable<SessionGateway["Type"]["eventsInto"]>

/**
 * A chunk of a gateway's stream into a sink, in order: the durable events wait for room, the live
 * ones between them go to `live` (dropped when the sink has none, SEC-01).
 */
const handOver = <E>(sink: EventSink<E>, events: Chunk.Chunk<StreamEvent>): Effect.Effect<void> => {
  const all = Chunk.toReadonlyArray(events)
  let next = 0
  const more: Effect.Effect<void> = Effect.suspend(() => {
    while (next < all.length && all[next]!._tag === "Live") sink.live(all[next++]!)
    const first = next
    while (next < all.length && all[next]!._tag === "Durable") next++
    if (first === next) return Effect.void
    return Effect.zipRight(sink.durable(Chunk.unsafeFromArray(all.slice(first, next))), more)
  })
  return more
}

/**
 * How to run a gateway's events into a sink (ARCH-01): its own `eventsInto` (the gateway of
 * `SessionGateway.layerHost`, or a user's), else its stream read by a fiber of the current Scope
 * (every durable event waits for room; a live one is dropped when there is none).
 *
 * @internal
 */
export const eventsInto = (gateway: Pick<SessionGateway["Type"], "eventsFrom" | "eventsInto">): EventsInto =>
  gateway.eventsInto ??
    ((id, seq, sink) =>
      gateway.eventsFrom(id, seq).pipe(
        Stream.runForEachChunk((events) => handOver(sink, events)),
        (self) => Effect.onExit(self, (exit) => Effect.interruptible(sink.end(exit))),
        Effect.forkScoped,
        Effect.asVoid
      ))

/** The typed failure of an exit, if it failed with one (as `Effect.catchAll` would see it). @internal */
export const failureOf = <E>(exit: Exit.Exit<void, E>): Option.Option<E> =>
  Exit.isSuccess(exit) ? Option.none() : Option.getLeft(Cause.failureOrCause(exit.cause))
