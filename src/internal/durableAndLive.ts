/**
 * What `SessionGateway.eventsFrom` streams over an `AgentHost` (HTTP-00, EVS-01/02): the durable
 * events of a session through the host, with the live events of each activation of its agent
 * between them.
 *
 * The durable events and the live ones of the agent feed one bounded queue of `Take`s from fibers of the
 * stream's Scope; the stream ends (or fails) with the durable events, after what was offered before.
 * The live events of the agent are followed while it is live: from the start when it is live then,
 * and again after an activation, which a durable event arriving while no live stream runs reveals.
 * Nothing is followed while the agent is passivated, and following never activates it.
 *
 * B9: a `Stream.merge` of the two and a `Stream.flatMap` with `switch` for the activations each
 * cost ≈100 Effect operations per chunk of events, and a `Stream.withSpan` around the stream
 * provided its context again to each of its pulls. Here a chunk costs a few operations, and the
 * span is the parent of the two fibers.
 *
 * @internal
 */
import { Chunk, Effect, Option, Queue, Stream, Take } from "effect"
import type { Agent } from "../Agent.js"
import type { AgentEvent } from "../AgentEvent.js"
import type { StreamEvent } from "../SessionGateway.js"
import type { SessionEvent } from "../SessionEvent.js"
import * as Feed from "./feed.js"
import * as summary from "./gatewaySummary.js"

/** Stream events a reader may have waiting before the fibers that feed it wait for it. */
const CAPACITY = 1024

const durableOf = (event: SessionEvent): StreamEvent => ({ _tag: "Durable", event })

/** The live events of a chunk of agent events (those a client sees, EVS-02). */
const liveOf = (chunk: Chunk.Chunk<AgentEvent>): Array<StreamEvent> => {
  const out: Array<StreamEvent> = []
  for (const event of chunk) {
    const live = summary.toLive(event)
    if (Option.isSome(live)) out.push({ _tag: "Live", event: live.value })
  }
  return out
}

/**
 * `durable` with the live events of the agent `liveAgent` finds between them, in a span named
 * `spanName`.
 *
 * @internal
 */
export const durableAndLive = <E>(
  durable: Stream.Stream<SessionEvent, E>,
  liveAgent: Effect.Effect<Option.Option<Agent>>,
  spanName: string
): Stream.Stream<StreamEvent, E> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const span = yield* Effect.makeSpanScoped(spanName)
    const scope = yield* Effect.scope
    // a Queue, not a Mailbox: a Mailbox reader can miss a wake-up and hold the last event (CORE-09)
    const queue = yield* Queue.bounded<Take.Take<StreamEvent, E>>(CAPACITY)
    // a live stream of the agent runs (set when it is forked, cleared when it ends)
    let following = false
    const follow = (agent: Agent) =>
      agent.events.pipe(
        Stream.runForEachChunk((chunk) => {
          const live = liveOf(chunk)
          return live.length === 0 ? Effect.void : Queue.offer(queue, Take.chunk(Chunk.unsafeFromArray(live)))
        }),
        Effect.ensuring(Effect.sync(() => {
          following = false
        })),
        Effect.withParentSpan(span)
      )
    const tryFollow = Effect.suspend(() =>
      following ? Effect.void : Effect.flatMap(liveAgent, (live) => {
        if (Option.isNone(live) || following) return Effect.void
        following = true
        return Effect.asVoid(Effect.forkIn(follow(live.value), scope))
      })
    )
    yield* tryFollow
    yield* durable.pipe(
      Stream.runForEachChunk((chunk) => Effect.zipRight(tryFollow, Queue.offer(queue, Take.chunk(Chunk.map(chunk, durableOf))))),
      Effect.withParentSpan(span),
      Feed.endInto(queue),
      Effect.forkScoped
    )
    return Feed.fromTakes(queue)
  }))
