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
import type { Scope } from "effect"
import { Context, Duration, Effect, Layer } from "effect"
import * as AgentHost from "./AgentHost.js"
import type { AgentRegistry } from "./AgentRegistry.js"
import * as clusterClient from "./internal/cluster/client.js"
import * as clusterEntity from "./internal/cluster/entity.js"
import { AgentEntity } from "./internal/cluster/protocol.js"
import * as clusterRecovery from "./internal/cluster/recovery.js"
import type { SessionId, UserMessage } from "./Message.js"
import { SessionGateway } from "./SessionGateway.js"
import type { SendError, SendMode, SendReceipt, WriteError } from "./SessionGateway.js"
import type { SessionPersistence } from "./SessionPersistence.js"

// -------------------------------------------------------------------------------------------------
// Protocol (CLU-01)

export {
  /**
   * Everything a request to the agent entity can fail with: the gateway's errors (HTTP-00,
   * `SessionGateway.GatewayError`), as they cross the wire.
   *
   * @since 0.2.0
   * @category protocol
   */
  AgentFailure,
  /**
   * The agent entity (CLU-01): entity id = SessionId; its protocol carries what `SessionGateway`
   * does (summary, create, send, cancel, fork, dispose, remove, the event stream from a cursor)
   * and `WhenIdle` and `Wake`, over the gateway's schemas. `Send` is persisted in the cluster's
   * message storage (an acknowledged send survives its runner, CLU-03) and uninterruptible;
   * sends are deduplicated by MessageId against the session's log. The other requests are
   * volatile: the cluster re-sends them to the shard's new owner when their runner dies.
   *
   * @since 0.2.0
   * @category entity
   */
  AgentEntity
} from "./internal/cluster/protocol.js"

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
   * lease (`SessionLocked`, PERS-01, PERS-05): at least the store's lease ttl. Default 60 seconds.
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
export const defaults: {
  readonly leaseWait: Duration.Duration
  readonly recoveryInterval: Duration.Duration
  readonly recoverConcurrency: number
} = clusterEntity.defaults

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
  const runner = Layer.scoped(clusterEntity.RunnerState, clusterEntity.makeRunner(settings))
  const entity = AgentEntity.toLayer(clusterEntity.behaviour, {
    concurrency: "unbounded",
    mailboxCapacity: "unbounded",
    maxIdleTime: settings.maxIdleTime
  })
  return Layer.mergeAll(entity, clusterRecovery.layer(settings)).pipe(
    Layer.provide(runner),
    Layer.provide(host)
  )
}

// -------------------------------------------------------------------------------------------------
// Client side

/**
 * What a `SessionGateway` does.
 *
 * @since 0.2.0
 * @category client
 */
export type GatewayShape = SessionGateway["Type"]

/**
 * The cluster seen from any process of it (a runner, or a client-only member such as an HTTP
 * front end): `SessionGateway` (HTTP-00) over the agent entities — each request goes to the
 * runner that owns the session's shard — and what only a cluster client needs. The cluster's own
 * failures (its message storage) surface as `PersistenceError`.
 *
 * @since 0.2.0
 * @category client
 */
export interface ClusterClientShape extends GatewayShape {
  /**
   * Sends a message as it is (its id, content and source; `sendRequest` through `send` makes a
   * user message of a request): once this succeeds the message is durable in the session's log
   * and survives any runner (CLU-03). A retry with the same id, content and mode succeeds with
   * `duplicate: true`, appending nothing; the same id with another message fails `MessageIdConflict`.
   */
  readonly sendMessage: (
    id: SessionId | string,
    message: UserMessage,
    mode?: SendMode | undefined
  ) => Effect.Effect<SendReceipt, SendError>
  /** Resolves when the session's agent has nothing to do (activating it). */
  readonly whenIdle: (id: SessionId | string) => Effect.Effect<void, WriteError>
  /** Starts a turn if pending input was sent waking (HOST-03), activating the agent. */
  readonly wake: (id: SessionId | string) => Effect.Effect<void, WriteError>
}

/**
 * @since 0.2.0
 * @category client
 */
export class ClusterClient extends Context.Tag("effect-agent/Cluster/ClusterClient")<ClusterClient, ClusterClientShape>() {}

/**
 * The cluster client of a process of the cluster, as {@link ClusterClient} and as the
 * `SessionGateway` the HTTP API is written against (CLU-01, CLU-06): `list` reads the stored
 * sessions' ids from the `SessionPersistence` of the context (the cluster's database) and asks
 * each session's entity for its summary.
 *
 * @example
 * ```ts
 * import { NodeClusterSocket } from "@effect/platform-node"
 * import { PgClient } from "@effect/sql-pg"
 * import { Layer, Option, Redacted } from "effect"
 * import * as Cluster from "effect-agent/Cluster"
 * import * as SqlSessionPersistence from "effect-agent/SqlSessionPersistence"
 *
 * const Gateway = Cluster.layerClient.pipe(
 *   Layer.provide(NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: { runnerAddress: Option.none() } })),
 *   Layer.provide(SqlSessionPersistence.layer()),
 *   Layer.provide(PgClient.layer({ url: Redacted.make("postgres://localhost/app") }))
 * )
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layerClient: Layer.Layer<ClusterClient | SessionGateway, never, Sharding.Sharding | SessionPersistence> =
  Layer.effectContext(
    Effect.map(clusterClient.make, (client) =>
      Context.make(ClusterClient, client).pipe(Context.add(SessionGateway, client)))
  )
