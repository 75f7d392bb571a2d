/**
 * Scale-out on `@effect/cluster` (SPEC §19, CLU-01..06): every session is an entity of the cluster,
 * addressed by its SessionId and live on exactly one runner (the owner of its shard), where an
 * `AgentHost` runs it. Sends are persisted in the cluster's message storage (Postgres) and
 * deduplicated by MessageId, so an acknowledged send survives the death of its runner; a dead
 * runner's shards move to the others, whose entities resume the sessions (repairing what the
 * crash interrupted) and a cluster `Singleton` wakes every stored session with pending work.
 *
 * This module defines the entity and its protocol ({@link AgentEntity}), the runner side
 * ({@link layer}: the entity's behaviour over an `AgentHost`, and the recovery singleton), and
 * the client side ({@link ClusterClient}, {@link layerClient}). Wiring a cluster (the runners'
 * transport, the message and runner storage) is `@effect/cluster`'s: e.g.
 * `NodeClusterSocket.layer({ storage: "sql" })` of `@effect/platform-node` over a `PgClient`.
 *
 * @since 0.2.0
 */
import type * as Sharding from "@effect/cluster/Sharding"
import type { Effect, Scope, Stream } from "effect"
import { Context, Duration, Layer } from "effect"
import * as AgentHost from "./AgentHost.js"
import type { AgentRegistry } from "./AgentRegistry.js"
import * as clusterClient from "./internal/clusterClient.js"
import * as clusterEntity from "./internal/clusterEntity.js"
import type { AgentFailure, SendMode, SessionStatus, StreamItem } from "./internal/clusterProtocol.js"
import { AgentEntity } from "./internal/clusterProtocol.js"
import * as clusterRecovery from "./internal/clusterRecovery.js"
import type { AgentOptionsSchema } from "./internal/options.js"
import type { SessionId, UserMessage } from "./Message.js"
import type { SessionPersistence } from "./SessionPersistence.js"
import type { JsonRecord, SessionEvent } from "./SessionEvent.js"

// -------------------------------------------------------------------------------------------------
// Protocol (CLU-01)

export {
  /**
   * Everything an entity's request can fail with: the typed errors of the host, the registry, the
   * inbox and the store, as they cross the wire.
   *
   * @since 0.2.0
   * @category protocol
   */
  AgentFailure,
  /**
   * The agent entity (CLU-01): entity id = SessionId. `Send` is persisted in the cluster's message
   * storage with a primary key made of the MessageId, the mode and a digest of the content, so a
   * retried or redelivered send is answered from storage (CLU-03); it is uninterruptible, so a
   * client that goes away does not cut an append in half. Every other request is volatile: a
   * request whose runner dies is re-sent by the cluster to the new owner.
   *
   * @since 0.2.0
   * @category entity
   */
  AgentEntity,
  /**
   * What `Create` did: `created` is false when the session was stored (or live) already.
   *
   * @since 0.2.0
   * @category protocol
   */
  Created,
  /**
   * How a message is sent (PKG-03): `followup` (next turn, waking), `steer` (next step, waking),
   * `inject` (next step, not waking).
   *
   * @since 0.2.0
   * @category protocol
   */
  SendMode,
  /**
   * What `Status` reports about a session (activating it when it is stored and not live).
   *
   * @since 0.2.0
   * @category protocol
   */
  SessionStatus,
  /**
   * One element of an entity's event stream: a durable event of the log (its `seq` is the cursor
   * to resume from), or a live model delta (not durable, no cursor; EVS-01).
   *
   * @since 0.2.0
   * @category protocol
   */
  StreamItem
} from "./internal/clusterProtocol.js"

// -------------------------------------------------------------------------------------------------
// Runner side

/**
 * The options of a runner's {@link layer}.
 *
 * @since 0.2.0
 * @category options
 */
export interface Options<R = never> {
  /**
   * The runner's `AgentHost` (CLU-01). Its `idleTimeout` is off and its `recover` false: the
   * cluster passivates entities (`entityMaxIdleTime`) and recovery is the singleton's.
   */
  readonly host?: Omit<AgentHost.HostOptions<R>, "idleTimeout" | "recover"> | undefined
  /** An entity without requests this long is passivated; default the cluster's `entityMaxIdleTime`. */
  readonly maxIdleTime?: Duration.DurationInput | undefined
  /**
   * How long an activation keeps retrying while the session's previous runner still holds its
   * lease (`SessionLocked`, PERS-06): at least the store's lease ttl. Default 60 seconds.
   */
  readonly leaseWait?: Duration.DurationInput | undefined
  /**
   * How often the recovery singleton looks for stored sessions with pending waking input or an
   * open turn and wakes their entities (CLU-04); it also does at start. Default 1 minute.
   */
  readonly recoveryInterval?: Duration.DurationInput | undefined
  /** How many sessions the recovery wakes at once. Default 16. */
  readonly recoverConcurrency?: number | undefined
}

/**
 * The defaults of {@link Options}.
 *
 * @since 0.2.0
 * @category options
 */
export const defaults = {
  leaseWait: Duration.seconds(60),
  recoveryInterval: Duration.minutes(1),
  recoverConcurrency: 16
} as const

/**
 * A runner's part of the cluster: the {@link AgentEntity} behaviour over an `AgentHost` built for
 * it (host idle timeout off, no start-up recovery; unbounded entity concurrency, so a `WhenIdle` or
 * an event stream never holds up a `Cancel`), and the recovery `Singleton` (CLU-04). Provide it
 * with the cluster (`Sharding`), the runtime (`AgentRegistry`, e.g. `AgentRuntime.layer`) and a
 * shared `SessionPersistence` (Postgres: its lease fences a runner that lost a shard, CLU-02).
 *
 * @example
 * ```ts
 * import { NodeClusterSocket } from "@effect/platform-node"
 * import { PgClient } from "@effect/sql-pg"
 * import { Layer, Redacted } from "effect"
 * import { AgentRuntime, Model } from "effect-agent"
 * import * as Cluster from "effect-agent/Cluster"
 * import * as SqlSessionPersistence from "effect-agent/SqlSessionPersistence"
 *
 * const Pg = PgClient.layer({ url: Redacted.make("postgres://localhost/app") })
 * const Runner = Cluster.layer().pipe(
 *   Layer.provide(NodeClusterSocket.layer({ storage: "sql" })),
 *   Layer.provide(AgentRuntime.layer),
 *   Layer.provide(SqlSessionPersistence.layer()),
 *   Layer.provide(Model.layerScripted([Model.text("hello")])),
 *   Layer.provide(Pg)
 * )
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = <R = never>(
  options?: Options<R> | undefined
): Layer.Layer<never, never, Sharding.Sharding | AgentRegistry | SessionPersistence | Exclude<R, Scope.Scope>> => {
  const settings = clusterEntity.settingsOf(options ?? {})
  const host = AgentHost.layer<R>({ ...options?.host, idleTimeout: Duration.infinity, recover: false })
  const entity = AgentEntity.toLayer(clusterEntity.behaviour(settings), {
    concurrency: "unbounded",
    mailboxCapacity: "unbounded",
    maxIdleTime: settings.maxIdleTime
  })
  return Layer.mergeAll(entity, clusterRecovery.layer(settings)).pipe(Layer.provide(host))
}

// -------------------------------------------------------------------------------------------------
// Client side

/**
 * The cluster's entities seen from any process of the cluster (a runner or a client-only one):
 * each call goes to the runner that owns the session's shard. Failures of the cluster itself
 * (its message storage) surface as `PersistenceError`.
 *
 * @since 0.2.0
 * @category client
 */
export class ClusterClient extends Context.Tag("effect-agent/Cluster/ClusterClient")<ClusterClient, {
  /** Resumes the session, else creates it (`created: true`). */
  readonly create: (
    id: SessionId | string,
    options?: {
      readonly options?: typeof AgentOptionsSchema.Type | undefined
      readonly meta?: JsonRecord | undefined
    } | undefined
  ) => Effect.Effect<{ readonly created: boolean }, AgentFailure>
  /**
   * Sends `message` (CLU-03): once this succeeds the message is durable in the session's log (in
   * `user/message` once a turn takes it). A retry with the same id and content succeeds and
   * appends nothing; the same id with other content fails `DuplicateMessage`.
   */
  readonly send: (
    id: SessionId | string,
    message: UserMessage,
    mode?: SendMode | undefined
  ) => Effect.Effect<void, AgentFailure>
  readonly cancel: (
    id: SessionId | string,
    options?: { readonly keepInbox?: boolean | undefined } | undefined
  ) => Effect.Effect<void, AgentFailure>
  readonly status: (id: SessionId | string) => Effect.Effect<SessionStatus, AgentFailure>
  readonly whenIdle: (id: SessionId | string) => Effect.Effect<void, AgentFailure>
  readonly wake: (id: SessionId | string) => Effect.Effect<void, AgentFailure>
  readonly fork: (
    id: SessionId | string,
    options: {
      readonly childId: SessionId | string
      readonly upTo?: number | undefined
      readonly options?: typeof AgentOptionsSchema.Type | undefined
      readonly meta?: JsonRecord | undefined
    }
  ) => Effect.Effect<void, AgentFailure>
  readonly passivate: (id: SessionId | string) => Effect.Effect<boolean, AgentFailure>
  readonly remove: (id: SessionId | string) => Effect.Effect<void, AgentFailure>
  /**
   * The durable events from `seq`, then each one as it commits, with live deltas (EVS-01): no gap,
   * no duplicate, across passivations and moves of the session between runners (the stream is
   * re-requested from the next seq). Ends only with an error or when interrupted.
   */
  readonly eventsFrom: (id: SessionId | string, seq: number) => Stream.Stream<StreamItem, AgentFailure>
  /** The durable events alone, as {@link SessionEvent}s (decoded by the store's codec on the runner). */
  readonly durableFrom: (id: SessionId | string, seq: number) => Stream.Stream<SessionEvent, AgentFailure>
}>() {}

/**
 * The {@link ClusterClient} of a process of the cluster.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerClient: Layer.Layer<ClusterClient, never, Sharding.Sharding> = Layer.effect(
  ClusterClient,
  clusterClient.make
)
