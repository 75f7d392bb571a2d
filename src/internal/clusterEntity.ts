/**
 * The agent entity's behaviour on a runner (CLU-01..04). One {@link Cell} per activated entity
 * (entity id = SessionId), built when the cluster activates it and closed when it passivates it
 * (idle for `maxIdleTime`, its shard moved, the runner stopping):
 * - the agent comes from the runner's `AgentHost` (activation = resume; the host's own idle
 *   timeout is off): `acquire` is serialized per entity so that an activation without create
 *   options never merges with a `Create`; while the previous runner still holds the session's
 *   lease (PERS-06) it retries `SessionLocked` for `leaseWait`;
 * - the entity resumes its stored session as soon as it is activated, so a send redelivered
 *   after a failover, or a keep-alive (below), brings the agent back, repaired and woken (CLU-04);
 * - sends go through one queue and one fiber per entity: the cluster runs requests concurrently
 *   (a `WhenIdle` or an event stream must never hold up a `Cancel`), the agent keeps send order;
 * - while the agent runs a turn the entity holds `Entity.keepAlive`, so the cluster does not reap
 *   it mid-turn; that keep-alive is itself a persisted message, so after a crash the new owner of
 *   the shard re-activates the entity, which resumes the turn's session without a new message;
 * - the cell's Scope closing passivates the agent (disposed, inbox kept, LIFE-06).
 *
 * @internal
 */
import { Entity } from "@effect/cluster"
import type { Sharding } from "@effect/cluster/Sharding"
import type { Context, Scope } from "effect"
import { Deferred, Duration, Effect, Either, Option, Queue, Schedule, Stream } from "effect"
import type { Agent } from "../Agent.js"
import * as AgentError from "../AgentError.js"
import type { AgentEvent } from "../AgentEvent.js"
import { AgentHost } from "../AgentHost.js"
import type * as AgentHostNs from "../AgentHost.js"
import type * as Cluster from "../Cluster.js"
import type { SessionId, UserMessage } from "../Message.js"
import { sessionId as parseSessionId } from "../Message.js"
import * as Session from "../Session.js"
import type { SessionEvent } from "../SessionEvent.js"
import { SessionPersistence } from "../SessionPersistence.js"
import { forkSeed } from "../SessionStore.js"
import { acceptedMessage, sameMeaning, sendOptionsOf } from "./clusterMessage.js"
import type { AgentFailure, SendMode, StreamItem } from "./clusterProtocol.js"
import { AgentEntity, refailCluster, SessionStatus } from "./clusterProtocol.js"

/** The runner settings, decoded once (defaults of `Cluster.defaults`). @internal */
export interface Settings {
  readonly maxIdleTime: Duration.Duration | undefined
  readonly leaseWait: Duration.Duration
  readonly recoveryInterval: Duration.Duration
  readonly recoverConcurrency: number
}

/** @internal */
export const settingsOf = (options: Cluster.Options<unknown>): Settings => ({
  maxIdleTime: options.maxIdleTime === undefined ? undefined : Duration.decode(options.maxIdleTime),
  leaseWait: Duration.decode(options.leaseWait ?? Duration.seconds(60)),
  recoveryInterval: Duration.decode(options.recoveryInterval ?? Duration.minutes(1)),
  recoverConcurrency: options.recoverConcurrency !== undefined && Number.isSafeInteger(options.recoverConcurrency) &&
      options.recoverConcurrency > 0
    ? options.recoverConcurrency
    : 16
})

/** A send waiting for its turn in the entity's queue. */
interface PendingSend {
  readonly message: UserMessage
  readonly mode: SendMode
  readonly done: Deferred.Deferred<void, AgentFailure>
}

type CreateOptions = {
  readonly options?: AgentHostNs.CreateOptions["options"]
  readonly meta?: AgentHostNs.CreateOptions["meta"]
}

/** One activated entity. */
interface Cell {
  readonly id: SessionId
  readonly host: AgentHost["Type"]
  readonly settings: Settings
  /** The entity's Scope: what the cell starts lives as long as the entity. */
  readonly scope: Scope.Scope
  /** The entity's context (its address and keep-alive latch), for `Entity.keepAlive`. */
  readonly context: Context.Context<Sharding | Entity.CurrentAddress>
  /** Serializes activations (see the module comment). */
  readonly lock: Effect.Semaphore
  readonly sends: Queue.Queue<PendingSend>
  /** The agent whose status the keep-alive follows, if any. */
  watched: Agent | undefined
  /** Whether the entity holds a keep-alive now. */
  keptAlive: boolean
}

// -------------------------------------------------------------------------------------------------
// activation

/** How often an activation looks again while the previous runner holds the lease. */
const leaseRetry = Duration.millis(250)

/** The host's agent for the cell, resumed (or created with `create`), waiting out a held lease. */
const activation = (cell: Cell, create: AgentHostNs.CreateOptions | undefined) =>
  cell.host.get(cell.id, create).pipe(
    Effect.retry({
      schedule: Schedule.spaced(leaseRetry).pipe(Schedule.upTo(cell.settings.leaseWait)),
      while: (error) => error._tag === "SessionLocked"
    })
  )

/**
 * Follows the agent's status with the entity's keep-alive (held while it runs, released when it
 * is idle), until the agent is disposed. Subscribed before the status is read, so no transition
 * falls between the two.
 */
const watch = (cell: Cell, agent: Agent) =>
  Effect.scoped(Effect.gen(function*() {
    const events = yield* agent.subscribe
    yield* keepAlive(cell, agent, (yield* agent.status) === "running")
    yield* Stream.runForEach(
      Stream.takeWhile(events, (event: AgentEvent) => event._tag !== "AgentDisposed"),
      (event) => event._tag === "AgentStatusChanged" ? keepAlive(cell, agent, event.status === "running") : Effect.void
    )
  })).pipe(
    Effect.ensuring(Effect.suspend(() => keepAlive(cell, agent, false))),
    Effect.ensuring(Effect.sync(() => {
      if (cell.watched === agent) cell.watched = undefined
    }))
  )

/** Sets the entity's keep-alive, when `agent` is still the one the cell follows. */
const keepAlive = (cell: Cell, agent: Agent, enabled: boolean) =>
  Effect.suspend(() => {
    if (cell.watched !== agent || cell.keptAlive === enabled) return Effect.void
    cell.keptAlive = enabled
    return Effect.provide(Entity.keepAlive(enabled), cell.context)
  })

/** The agent of the cell, activated if needed; its keep-alive watcher is started once per agent. */
const acquire = (cell: Cell, create?: AgentHostNs.CreateOptions | undefined) =>
  Effect.tap(cell.lock.withPermits(1)(activation(cell, create)), (agent) =>
    Effect.suspend(() => {
      if (cell.watched === agent) return Effect.void
      cell.watched = agent
      return Effect.forkIn(watch(cell, agent), cell.scope)
    }))

/**
 * CLU-04: at activation, the stored session is resumed (and woken by the host, HOST-03); a session
 * that is not stored waits for its `Create`.
 */
const resumeStored = (cell: Cell) =>
  acquire(cell).pipe(
    Effect.asVoid,
    Effect.catchTag("SessionNotFound", () => Effect.void),
    Effect.catchAll((error) => Effect.logWarning(`Cluster: could not resume session ${cell.id}`, error))
  )

// -------------------------------------------------------------------------------------------------
// sends (CLU-01 order, CLU-03 deduplication)

/**
 * A refused id (INB-01) is a success when the log accepted the same message under it: a retry or
 * a redelivery appends nothing (CLU-03); another message under a used id stays `DuplicateMessage`.
 */
const resolveDuplicate = (agent: Agent, message: UserMessage, duplicate: AgentError.DuplicateMessage) =>
  Effect.flatMap(agent.session.events, (events) => {
    const accepted = acceptedMessage(events, message.id)
    return accepted !== undefined && sameMeaning(accepted, message) ? Effect.void : Effect.fail(duplicate)
  })

/** Whether an agent's failure means it must be passivated and resumed (SES-02b, LIFE). */
const isStale = (error: AgentFailure) => error._tag === "AgentBroken" || error._tag === "AgentInactive"

/** One send, on the agent of the moment; a broken or disposed agent is replaced once. */
const deliver = (cell: Cell, message: UserMessage, mode: SendMode): Effect.Effect<void, AgentFailure> => {
  const attempt = Effect.flatMap(acquire(cell), (agent) =>
    agent.send(message, sendOptionsOf(mode)).pipe(
      Effect.catchTag("DuplicateMessage", (duplicate) => resolveDuplicate(agent, message, duplicate))
    ))
  return Effect.catchIf(attempt, isStale, () => Effect.zipRight(cell.host.passivate(cell.id), attempt))
}

/** The entity's send fiber: one send at a time, in arrival order. */
const sendLoop = (cell: Cell) =>
  Effect.forever(Effect.flatMap(Queue.take(cell.sends), (pending) =>
    Effect.flatMap(Effect.exit(deliver(cell, pending.message, pending.mode)), (exit) =>
      Deferred.done(pending.done, exit))))

const enqueue = (cell: Cell, message: UserMessage, mode: SendMode) =>
  Effect.flatMap(Deferred.make<void, AgentFailure>(), (done) =>
    Effect.zipRight(Queue.offer(cell.sends, { message, mode, done }), Deferred.await(done)))

// -------------------------------------------------------------------------------------------------
// fork (FORK-01 across entities)

/** The child side of a fork: created from the parent's seed, never over a stored session. */
const createFork = (
  cell: Cell,
  parent: string,
  seed: ReadonlyArray<SessionEvent>,
  create: CreateOptions
) =>
  cell.lock.withPermits(1)(Effect.gen(function*() {
    const persistence = yield* SessionPersistence
    if (yield* persistence.exists(cell.id)) {
      return yield* new AgentError.AgentAlreadyExists({ id: cell.id, where: "stored" })
    }
    // the parent's prefix as an unpersisted session (its codec validates every event), forked whole
    const from = yield* Session.make({ id: parent, seed })
    return yield* activation(cell, { ...create, fork: { from, upTo: seed.length } })
  })).pipe(Effect.scoped)

/** @internal */
export const behaviour = (settings: Settings) =>
  Effect.gen(function*() {
    const address = yield* Entity.CurrentAddress
    const host = yield* AgentHost
    const persistence = yield* SessionPersistence
    const clientFor = yield* AgentEntity.client
    const parsed = parseSessionId(address.entityId)
    if (Either.isLeft(parsed)) return invalidEntity(parsed.left)
    const cell: Cell = {
      id: parsed.right,
      host,
      settings,
      scope: yield* Effect.scope,
      context: yield* Effect.context<Sharding | Entity.CurrentAddress>(),
      lock: yield* Effect.makeSemaphore(1),
      sends: yield* Queue.unbounded<PendingSend>(),
      watched: undefined,
      keptAlive: false
    }
    // the entity's Scope closing (reaped, shard moved, runner stopping) passivates the agent
    yield* Effect.addFinalizer(() => host.passivate(cell.id))
    yield* Effect.forkScoped(sendLoop(cell))
    yield* Effect.forkScoped(resumeStored(cell))

    return AgentEntity.of({
      Create: ({ payload }) =>
        Effect.gen(function*() {
          const existed = cell.watched !== undefined || (yield* persistence.exists(cell.id))
          yield* acquire(cell, { options: payload.options, meta: payload.meta })
          return { created: !existed }
        }),
      Send: ({ payload }) => enqueue(cell, payload.message, payload.mode),
      Cancel: ({ payload }) =>
        Effect.flatMap(acquire(cell), (agent) => agent.cancel({ kind: "user" }, { keepInbox: payload.keepInbox })),
      Status: () => Effect.flatMap(acquire(cell), (agent) => statusOf(cell.id, agent)),
      WhenIdle: () => Effect.flatMap(acquire(cell), (agent) => agent.whenIdle),
      Wake: () => Effect.flatMap(acquire(cell), (agent) => agent.wake),
      Fork: ({ payload }) =>
        Effect.gen(function*() {
          const agent = yield* acquire(cell)
          const seed = yield* forkSeed(agent.session, payload.upTo)
          yield* clientFor(payload.childId).CreateFork({
            parent: cell.id,
            seed,
            options: payload.options,
            meta: payload.meta
          }).pipe(refailCluster)
        }),
      CreateFork: ({ payload }) =>
        Effect.asVoid(createFork(cell, payload.parent, asEvents(payload.seed), {
          options: payload.options,
          meta: payload.meta
        })),
      Passivate: () => cell.lock.withPermits(1)(host.passivate(cell.id)),
      Remove: () =>
        cell.lock.withPermits(1)(Effect.zipRight(host.passivate(cell.id), persistence.remove(cell.id))),
      Events: ({ payload }) => Stream.unwrap(Effect.map(acquire(cell), (agent) => itemsFrom(agent, payload.from)))
    })
  })

/**
 * The events of a seed as they crossed the wire (`{seq, time, type, data}`): `Session.make`
 * validates each one with the store's codec before anything is built from it.
 */
const asEvents = (seed: ReadonlyArray<{ readonly seq: number }>): ReadonlyArray<SessionEvent> =>
  seed as ReadonlyArray<SessionEvent>

/** An entity whose id is not a SessionId: every request fails with why (ID-01). */
const invalidEntity = (error: AgentFailure) =>
  AgentEntity.of({
    Create: () => Effect.fail(error),
    Send: () => Effect.fail(error),
    Cancel: () => Effect.fail(error),
    Status: () => Effect.fail(error),
    WhenIdle: () => Effect.fail(error),
    Wake: () => Effect.fail(error),
    Fork: () => Effect.fail(error),
    CreateFork: () => Effect.fail(error),
    Passivate: () => Effect.fail(error),
    Remove: () => Effect.fail(error),
    Events: () => Stream.fail(error)
  })

const statusOf = (id: SessionId, agent: Agent) =>
  Effect.all([agent.status, agent.inbox.nextTurn, agent.inbox.nextStep, agent.session.events, agent.session.usage])
    .pipe(Effect.map(([status, nextTurn, nextStep, events, usage]) =>
      new SessionStatus({ id, status, pending: nextTurn.length + nextStep.length, length: events.length, usage })
    ))

/** EVS-01 over the wire: the durable events from `from`, merged with the live model deltas. */
const itemsFrom = (agent: Agent, from: number): Stream.Stream<StreamItem, AgentFailure> => {
  const durable = Stream.map(agent.session.eventsFrom(from), (event): StreamItem => ({ _tag: "Durable", event }))
  const deltas = Stream.filterMap(agent.events, (event): Option.Option<StreamItem> =>
    event._tag === "ModelDelta"
      ? Option.some({ _tag: "Delta", turn: event.turn, step: event.step, kind: event.kind, text: event.text })
      : Option.none())
  return Stream.merge(durable, deltas, { haltStrategy: "left" })
}
