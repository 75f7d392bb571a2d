/**
 * The cluster client (CLU-01): `SessionGateway` (HTTP-00) over the `AgentEntity`'s RPC client.
 * Requests are decoded here by the host gateway's own decoders (`gateway/request.ts`, ARCH-04), so
 * both gateways refuse bad input alike and a bad one never reaches the cluster; a send without an id
 * gets one here, before it is persisted, so a redelivery carries the same id; the cluster's own
 * failures become `PersistenceError` (`refailCluster`).
 *
 * The event stream (EVS-01) is made resumable on this side: the cluster re-sends a stream request
 * whose runner died to the new owner with its original cursor, and a stream ends when its runner
 * stops the entity, so the client keeps the next seq it expects, drops the durable events before
 * it, and asks again from it whenever a stream ends without a failure of the session.
 *
 * @internal
 */
import { Sharding } from "@effect/cluster/Sharding"
import { Array as Arr, Cause, Duration, Effect, Option, Schedule, Stream } from "effect"
import type * as Cluster from "../../Cluster.js"
import type * as Message from "../../Message.js"
import type { SessionId } from "../../Message.js"
import type * as SessionError from "../../SessionError.js"
import type * as Gateway from "../../SessionGateway.js"
import type { RecoverySummary, SessionSummary, UnreadableSession } from "../../SessionPersistence.js"
import { SessionPersistence } from "../../SessionPersistence.js"
import { AgentEntity, refailCluster } from "./protocol.js"
import * as requests from "../gateway/request.js"
import { listedEntry, pageOfIds } from "../gateway/summary.js"

/** How long the client waits before asking again for a stream that ended. */
const streamAgain = Duration.millis(200)

/** How many summaries `list` asks for at once. */
const SUMMARY_CONCURRENCY = 16

type Listed = SessionSummary | RecoverySummary | UnreadableSession

/** The entity's client for one session. */
type EntityClient = ReturnType<Effect.Effect.Success<typeof AgentEntity.client>>

/**
 * APP-05: runs and turn reads, decoded here as the host gateway decodes them (ARCH-04), then run
 * and awaited by the session's entity on the runner that owns it.
 */
const runsOf = (clientFor: (key: SessionId) => EntityClient): Pick<Cluster.ClusterClientShape, "run" | "turn"> => ({
  run: (id, request, options) =>
    Effect.flatMap(requests.runOf(id, request), ({ key, message, output, settings }) =>
      refailCluster(clientFor(key).Run({
        message,
        ...(settings === undefined ? {} : { settings }),
        ...(output === undefined ? {} : { output }),
        wait: requests.runWait(options?.wait)
      }))).pipe(Effect.withSpan("ClusterClient.run")),
  turn: (id, turn, options) =>
    Effect.flatMap(requests.sessionKey(id), (key) =>
      refailCluster(clientFor(key).Turn({ turn, wait: requests.turnWait(options?.wait) }))).pipe(
        Effect.withSpan("ClusterClient.turn")
      )
})

/** The event stream of a session through its entity, asked again from its cursor when a runner stops. */
const eventsOf = (clientFor: (key: SessionId) => EntityClient) =>
(id: string, seq: number): Stream.Stream<Gateway.StreamEvent, Gateway.EventsError> =>
  Stream.unwrap(Effect.map(Effect.map(requests.sessionKey(id), clientFor), (client) => {
    let next = seq
    const once = Stream.suspend(() => client.Events({ from: next })).pipe(
      // a stream re-sent by the cluster after its runner died starts again from its cursor
      Stream.filter((item) => item._tag === "Live" || item.event.seq >= next),
      Stream.tap((item) =>
        Effect.sync(() => {
          if (item._tag === "Durable") next = item.event.seq + 1
        })
      ),
      // the session's failures end the stream; the cluster's (a runner stopping) end this request only
      Stream.catchAllCause((cause) => {
        const failure = Cause.failureOption(cause)
        if (Option.isSome(failure)) return Stream.fromEffect(refailCluster(Effect.fail(failure.value)))
        return Stream.fromEffect(Effect.logDebug("ClusterClient: an event stream ended; asking again", cause)).pipe(
          Stream.drain
        )
      })
    )
    return Stream.repeat(once, Schedule.spaced(streamAgain))
  })).pipe(Stream.withSpan("ClusterClient.eventsFrom"))

/** @internal */
export const make = Effect.gen(function*() {
  const sharding = yield* Sharding
  const persistence = yield* SessionPersistence
  const clientFor = yield* AgentEntity.client

  /** A request to the entity of a decoded id; the cluster's own failures become `PersistenceError`. */
  const callKey = <A, E>(key: SessionId, request: (client: ReturnType<typeof clientFor>) => Effect.Effect<A, E>) =>
    refailCluster(request(clientFor(key)))

  /** The same for an id decoded here, once (ARCH-04), else `InvalidSessionId`. */
  const call = <A, E>(id: string, request: (client: ReturnType<typeof clientFor>) => Effect.Effect<A, E>) =>
    Effect.flatMap(requests.sessionKey(id), (key) => callKey(key, request))

  // ---------------------------------------------------------------------------------------------
  // list: stored ids from the store, summaries from the entities

  /** A listed entry: its summary, unreadable when it cannot be read, none when it was removed meanwhile. */
  const entryOf = (id: string, problem: string | undefined) => {
    const unreadable = (why: string) =>
      Effect.succeed(Option.some<Gateway.SessionInfo | Gateway.UnreadableSession>({
        _tag: "UnreadableSession",
        id,
        problem: why
      }))
    if (problem !== undefined) return unreadable(problem)
    return call(id, (client) => client.Summary()).pipe(
      Effect.map((info) => Option.some<Gateway.SessionInfo | Gateway.UnreadableSession>(info)),
      Effect.catchAll((error): Effect.Effect<
        Option.Option<Gateway.SessionInfo | Gateway.UnreadableSession>,
        SessionError.PersistenceError
      > =>
        error._tag === "SessionNotFound"
          ? Effect.succeed(Option.none())
          : error._tag === "PersistenceError"
          ? Effect.fail(error)
          : unreadable(error.message)
      )
    )
  }

  const list = (request?: Gateway.ListRequest | undefined) =>
    Effect.gen(function*() {
      const { after, limit, status } = requests.pageOf(request)
      const source: Stream.Stream<Listed, SessionError.PersistenceError> = persistence.summaries ?? persistence.list
      const problems = new Map<string, string>()
      const ids: Array<string> = []
      for (const entry of yield* Stream.runCollect(source)) {
        if (entry._tag === "UnreadableSession") problems.set(entry.id, entry.problem)
        if (after === undefined || entry.id > after) ids.push(entry.id)
      }
      const sorted = Arr.dedupe(ids).sort()
      // HIL-06: a status filter asks each candidate's entity (where it is live, only it knows)
      const page = yield* pageOfIds(
        sorted,
        { limit, status, concurrency: SUMMARY_CONCURRENCY },
        (id) => entryOf(id, problems.get(id))
      )
      const next = page.next
      // SEC-06: the entries as the host gateway lists them (meta only when asked, bounded)
      const listed = page.entries.map((entry) => listedEntry(entry, request))
      return { sessions: listed, ...(next === undefined ? {} : { next }) } satisfies Gateway.SessionPage
    }).pipe(Effect.withSpan("ClusterClient.list"))


  // ---------------------------------------------------------------------------------------------

  const sendDecoded = ({ key, message, mode }: requests.Send) =>
    callKey(key, (client) => client.Send({ message, mode })).pipe(Effect.withSpan("ClusterClient.send"))

  const sendMessage = (id: SessionId | string, message: Message.UserMessage, mode?: Gateway.SendMode | undefined) =>
    Effect.flatMap(requests.sessionKey(id), (key) => sendDecoded({ key, message, mode: mode ?? "followup" }))

  const shape: Cluster.ClusterClientShape = {
    list,
    summary: (id) => call(id, (client) => client.Summary()),
    pending: (id) => call(id, (client) => client.Pending()).pipe(Effect.withSpan("ClusterClient.pending")),
    create: (id, request) =>
      Effect.flatMap(requests.createOf(id, request), ({ key, request }) => callKey(key, (client) => client.Create(request)))
        .pipe(Effect.withSpan("ClusterClient.create")),
    send: (id, request) => Effect.flatMap(requests.sendOf(id, request), sendDecoded),
    sendMessage,
    ...runsOf(clientFor),
    cancel: (id, request) =>
      Effect.flatMap(requests.cancelOf(id, request), ({ keepInbox, key }) =>
        callKey(key, (client) => client.Cancel({ keepInbox }))),
    fork: (id, request) =>
      Effect.flatMap(requests.forkOf(id, request), ({ childId, key, upTo }) =>
        callKey(key, (client) => client.Fork({ childId, ...(upTo === undefined ? {} : { upTo }) })))
        .pipe(Effect.withSpan("ClusterClient.fork")),
    dispose: (id) => call(id, (client) => client.Dispose()),
    remove: (id) => call(id, (client) => client.Remove()),
    eventsFrom: eventsOf(clientFor),
    ready: Effect.map(sharding.isShutdown, (isShutdown) => !isShutdown),
    whenIdle: (id) => call(id, (client) => client.WhenIdle()),
    wake: (id) => call(id, (client) => client.Wake())
  }
  return shape
})

