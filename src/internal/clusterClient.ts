/**
 * The cluster client (CLU-01): the `AgentEntity`'s RPC client behind the `ClusterClient` shape.
 * Ids are validated here (ID-01) so a bad one never reaches the cluster; the cluster's own
 * failures become `PersistenceError` (`refailCluster`).
 *
 * The event stream (EVS-01) is made resumable on this side: the cluster re-sends a stream request
 * whose runner died to the new owner with its original cursor, and a stream ends when its agent
 * is passivated, so the client keeps the next seq it expects, drops durable events before it, and
 * asks again from it whenever a stream ends.
 *
 * @internal
 */
import { Duration, Effect, Either, Option, Schedule, Stream } from "effect"
import type * as Cluster from "../Cluster.js"
import type { UserMessage } from "../Message.js"
import { sessionId as parseSessionId } from "../Message.js"
import type { SessionEvent } from "../SessionEvent.js"
import type { AgentFailure, SendMode, StreamItem } from "./clusterProtocol.js"
import { AgentEntity, refailCluster } from "./clusterProtocol.js"

/** How long the client waits before asking again for a stream that ended (its agent passivated). */
const streamAgain = Duration.millis(100)

/** @internal */
export const make = Effect.gen(function*() {
  const clientFor = yield* AgentEntity.client

  /** The entity's client for a valid SessionId, else `InvalidSessionId`. */
  const entity = (id: string) => {
    const parsed = parseSessionId(id)
    return Either.isLeft(parsed) ? Effect.fail(parsed.left) : Effect.succeed(clientFor(parsed.right))
  }

  const call = <A, E, R>(id: string, request: (client: ReturnType<typeof clientFor>) => Effect.Effect<A, E, R>) =>
    Effect.flatMap(entity(id), (client) => refailCluster(request(client)))

  const eventsFrom = (id: string, seq: number): Stream.Stream<StreamItem, AgentFailure> =>
    Stream.suspend(() => {
      let next = seq
      const once = Stream.unwrap(
        Effect.map(entity(id), (client) =>
          Stream.suspend(() => client.Events({ from: next })).pipe(
            Stream.catchAll((error) => Stream.fromEffect(refailCluster(Effect.fail(error)))),
            // a stream re-sent by the cluster after a runner died starts again from its cursor
            Stream.filter((item) => item._tag === "Delta" || item.event.seq >= next),
            Stream.tap((item) =>
              Effect.sync(() => {
                if (item._tag === "Durable") next = item.event.seq + 1
              })
            )
          ))
      )
      return Stream.repeat(once, Schedule.spaced(streamAgain))
    })

  const shape: Cluster.ClusterClient["Type"] = {
    create: (id, options) =>
      call(id, (client) => client.Create({ options: options?.options, meta: options?.meta })),
    send: (id, message: UserMessage, mode?: SendMode) =>
      call(id, (client) => client.Send({ message, mode: mode ?? "followup" })),
    cancel: (id, options) => call(id, (client) => client.Cancel({ keepInbox: options?.keepInbox ?? false })),
    status: (id) => call(id, (client) => client.Status()),
    whenIdle: (id) => call(id, (client) => client.WhenIdle()),
    wake: (id) => call(id, (client) => client.Wake()),
    fork: (id, options) =>
      call(id, (client) =>
        client.Fork({ childId: options.childId, upTo: options.upTo, options: options.options, meta: options.meta })),
    passivate: (id) => call(id, (client) => client.Passivate()),
    remove: (id) => call(id, (client) => client.Remove()),
    eventsFrom,
    durableFrom: (id, seq) =>
      Stream.filterMap(eventsFrom(id, seq), (item) =>
        item._tag === "Durable"
          // the runner streams the events of its log, which its codec validated when they were written
          ? Option.some(item.event as SessionEvent)
          : Option.none())
  }
  return shape
})
