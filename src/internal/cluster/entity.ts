/**
 * The agent entity's behaviour on a runner (CLU-01..04). The runner's `AgentHost` runs the
 * agents (activation = resume; its own idle timeout is off) and the runner's host gateway
 * (`SessionGateway.layerHost`'s implementation) answers most requests, so a session behaves in a
 * cluster exactly as in one process. What the cluster adds, per activated entity (a {@link Cell},
 * entity id = SessionId, closed when the cluster passivates the entity):
 * - while the previous runner still holds the session's lease (PERS-05), an activation retries
 *   `SessionLocked` for `leaseWait` instead of failing;
 * - sends go through one queue and one fiber per entity: the cluster runs an entity's requests
 *   concurrently (a `WhenIdle` or an event stream never holds up a `Cancel`), the agent keeps
 *   send order; a refused MessageId that repeats the accepted message is a success that appends
 *   nothing (`duplicate: true`), another message under it is `MessageIdConflict` (CLU-03);
 * - while the agent runs, the entity holds `Entity.keepAlive`, so the cluster does not reap it
 *   mid-turn. That keep-alive is a persisted message: when the runner dies, the new owner of the
 *   shard re-activates the entity, and an activated entity whose stored session has an open turn
 *   or pending waking input resumes it at once (repair, then HOST-03), without a new message
 *   (CLU-04; the recovery singleton covers what has no keep-alive);
 * - a fork creates the child through the child's own entity, on the runner that owns it;
 * - the cell's Scope closing (reaped after `maxIdleTime`, shard moved, runner stopping)
 *   passivates the agent (disposed, inbox kept, LIFE-06).
 *
 * @internal
 */
import { Entity } from "@effect/cluster"
import type { Sharding } from "@effect/cluster/Sharding"
import type { Context } from "effect"
import {
  Clock,
  Context as Ctx,
  Deferred,
  Duration,
  Effect,
  Either,
  Option,
  Predicate,
  Queue,
  Schedule,
  Stream
} from "effect"
import type { Agent } from "../../Agent.js"
import * as AgentError from "../../AgentError.js"
import { AgentHost } from "../../AgentHost.js"
import type * as Cluster from "../../Cluster.js"
import { AgentRegistry } from "../../AgentRegistry.js"
import type { InvalidSessionId, SessionId, UserMessage } from "../../Message.js"
import { sessionId as parseSessionId } from "../../Message.js"
import * as Session from "../../Session.js"
import type { SessionEvent } from "../../SessionEvent.js"
import type * as Gateway from "../../SessionGateway.js"
import { MessageIdConflict, sendTarget } from "../gateway/errors.js"
import { SessionPersistence } from "../../SessionPersistence.js"
import { forkSeed } from "../../SessionStore.js"
import { AgentEntity, refailCluster } from "./protocol.js"
import * as gatewayHost from "../gateway/host.js"
import * as summary from "../gateway/summary.js"
import { emptyState, foldEvent, needsRecovery, summaryOf as recoverySummaryOf } from "../log/summary.js"

/** The runner settings, decoded once (defaults of `Cluster.defaults`). @internal */
export interface Settings {
  readonly maxIdleTime: Duration.Duration | undefined
  readonly leaseWait: Duration.Duration
  readonly recoveryInterval: Duration.Duration
  readonly recoverConcurrency: number
}

/** The defaults of `Cluster.Options` (`Cluster.defaults`). @internal */
export const defaults = {
  leaseWait: Duration.seconds(60),
  recoveryInterval: Duration.minutes(1),
  recoverConcurrency: 16
} as const

/** @internal */
export const settingsOf = (options: Cluster.Options<unknown>): Settings => ({
  maxIdleTime: options.maxIdleTime === undefined ? undefined : Duration.decode(options.maxIdleTime),
  leaseWait: Duration.decode(options.leaseWait ?? defaults.leaseWait),
  recoveryInterval: Duration.decode(options.recoveryInterval ?? defaults.recoveryInterval),
  recoverConcurrency: options.recoverConcurrency !== undefined && Number.isSafeInteger(options.recoverConcurrency) &&
      options.recoverConcurrency > 0
    ? options.recoverConcurrency
    : defaults.recoverConcurrency
})

// -------------------------------------------------------------------------------------------------
// the runner

/** A send waiting for its turn in the entity's queue. */
interface PendingSend {
  readonly message: UserMessage
  readonly mode: Gateway.SendMode
  readonly done: Deferred.Deferred<Gateway.SendReceipt, Gateway.SendError>
}

/** One activated entity. */
interface Cell {
  readonly id: SessionId
  /** The entity's context (its address and keep-alive latch), for `Entity.keepAlive`. */
  readonly context: Context.Context<Sharding | Entity.CurrentAddress>
  readonly sends: Queue.Queue<PendingSend>
  /** Whether the agent runs now (what the keep-alive should be), set by the runner's watcher. */
  isRunning: boolean
  /** Whether the entity holds a keep-alive now. */
  isKeptAlive: boolean
  /** Opened when `isRunning` changed: the cell's keep-alive fiber looks again. */
  readonly changed: Effect.Latch
}

/** What the runner's entities share. @internal */
export interface Runner {
  readonly settings: Settings
  readonly host: AgentHost["Type"]
  readonly registry: AgentRegistry["Type"]
  readonly persistence: SessionPersistence["Type"]
  /** The gateway over the runner's host: the one-process semantics of every request. */
  readonly gateway: Gateway.SessionGateway["Type"]
  /** The activated entities of this runner. */
  readonly cells: Map<SessionId, Cell>
}

/** @internal */
export class RunnerState extends Ctx.Tag("effect-agent/Cluster/RunnerState")<RunnerState, Runner>() {}

/**
 * One watcher of the registry's events for the whole runner: each agent's status changes set its
 * cell's wanted keep-alive (without waiting for the keep-alive to be stored).
 */
const watchStatuses = (runner: Runner) =>
  Effect.gen(function*() {
    const events = yield* runner.registry.subscribe
    yield* Effect.forkScoped(Effect.interruptible(Stream.runForEach(events, (event) =>
      Effect.sync(() => {
        if (event._tag !== "AgentStatusChanged" && event._tag !== "AgentDisposed") return
        const cell = runner.cells.get(event.agent)
        if (cell === undefined) return
        setRunning(cell, event._tag === "AgentStatusChanged" && event.status === "running")
      }))))
  })

/** @internal */
export const makeRunner = (settings: Settings) =>
  Effect.gen(function*() {
    const runner: Runner = {
      settings,
      host: yield* AgentHost,
      registry: yield* AgentRegistry,
      persistence: yield* SessionPersistence,
      gateway: yield* gatewayHost.make({ readyAfterRecovery: false }),
      cells: new Map()
    }
    yield* watchStatuses(runner)
    return runner
  })

// -------------------------------------------------------------------------------------------------
// keep-alive while running

const setRunning = (cell: Cell, isRunning: boolean) => {
  if (cell.isRunning === isRunning) return
  cell.isRunning = isRunning
  cell.changed.unsafeOpen()
}

/** The cell's keep-alive fiber: brings the entity's keep-alive to the wanted state, in order. */
const keepAliveLoop = (cell: Cell) =>
  Effect.forever(Effect.gen(function*() {
    yield* cell.changed.await
    cell.changed.unsafeClose()
    while (cell.isKeptAlive !== cell.isRunning) {
      const wanted = cell.isRunning
      yield* Effect.provide(Entity.keepAlive(wanted), cell.context)
      cell.isKeptAlive = wanted
    }
  }))

// -------------------------------------------------------------------------------------------------
// activation

/** How often an activation looks again while the previous runner holds the lease. */
const leaseRetry = Duration.millis(250)

/** `effect`, retried while the session's lease is held by its previous runner (PERS-06). */
const waitingOutLease = (runner: Runner) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.retry(effect, {
    schedule: Schedule.spaced(leaseRetry).pipe(Schedule.upTo(runner.settings.leaseWait)),
    while: (error) => Predicate.isTagged(error, "SessionLocked")
  })

/** Runs `f` on the session's agent, activated if needed and held live meanwhile (`host.use`). */
const withAgent = <A, E>(runner: Runner, id: SessionId, f: (agent: Agent) => Effect.Effect<A, E>) =>
  waitingOutLease(runner)(runner.host.use(id, f))

/**
 * CLU-04: an activated entity whose stored session needs the host (an open turn to repair, input
 * sent waking to run) resumes it at once; the host wakes what it resumes (HOST-03). A session
 * with nothing to run is not resumed until a request needs it.
 */
const resumeIfPending = (runner: Runner, id: SessionId) =>
  Effect.gen(function*() {
    const stored = yield* runner.persistence.read(id)
    const state = emptyState(stored.header.child?.parent)
    for (const event of stored.events) foldEvent(state, event.seq, event.type, event.data, stored.header.seedLength)
    if (!needsRecovery(recoverySummaryOf(id, state), yield* Clock.currentTimeMillis)) return
    yield* waitingOutLease(runner)(runner.host.get(id))
  }).pipe(
    Effect.catchTag("SessionNotFound", () => Effect.void),
    Effect.catchAll((error) => Effect.logWarning(`Cluster: could not resume session ${id}`, error))
  )

// -------------------------------------------------------------------------------------------------
// sends (CLU-01 order, CLU-03 deduplication)

/**
 * One send. A MessageId the inbox refuses (INB-01) is a success when the log accepted the same
 * message under it, with the same mode (a retry or a redelivery: nothing is appended); another
 * message under it is `MessageIdConflict`.
 */
const deliver = (runner: Runner, id: SessionId, message: UserMessage, mode: Gateway.SendMode) =>
  withAgent(runner, id, (agent): Effect.Effect<Gateway.SendReceipt, Gateway.SendError> => {
    const { target, wake } = sendTarget(mode)
    return agent.send(message, { target, wake }).pipe(
      Effect.as({ messageId: message.id, duplicate: false }),
      Effect.catchIf(
        (error): error is AgentError.DuplicateMessage => error._tag === "DuplicateMessage",
        () =>
          Effect.flatMap(agent.session.events, (events) => {
            const accepted = summary.findAccepted(events, agent.session.header.seedLength, message.id)
            return Option.isSome(accepted) && summary.isRepeat(accepted.value, message.content, target, wake)
              ? Effect.succeed({ messageId: message.id, duplicate: true })
              : Effect.fail(new MessageIdConflict({ id, messageId: message.id }))
          })
      )
    )
  })

/** The entity's send fiber: one send at a time, in arrival order. */
const sendLoop = (runner: Runner, cell: Cell) =>
  Effect.forever(Effect.flatMap(Queue.take(cell.sends), (pending) =>
    Effect.flatMap(Effect.exit(deliver(runner, cell.id, pending.message, pending.mode)), (exit) =>
      Deferred.done(pending.done, exit))))

const enqueue = (cell: Cell, message: UserMessage, mode: Gateway.SendMode) =>
  Effect.flatMap(Deferred.make<Gateway.SendReceipt, Gateway.SendError>(), (done) =>
    Effect.zipRight(Queue.offer(cell.sends, { message, mode, done }), Deferred.await(done)))

// -------------------------------------------------------------------------------------------------
// fork (FORK-01 across entities)

/** The parent side: its seed, sent to the child's entity (wherever its shard is). */
const fork = (
  runner: Runner,
  id: SessionId,
  request: { readonly childId: SessionId; readonly upTo?: number | undefined },
  clientFor: Effect.Effect.Success<typeof AgentEntity.client>
) =>
  Effect.gen(function*() {
    const childId = request.childId
    const { options, seed } = yield* withAgent(runner, id, (agent) =>
      Effect.map(forkSeed(agent.session, request.upTo), (seed) => ({ options: agent.options, seed })))
    return yield* refailCluster(clientFor(childId).CreateFork({ parent: id, seed, options: definedOptions(options) }))
  })

/** Agent options as the wire takes them: the fields that are set. */
const definedOptions = (options: Agent["options"]): typeof Gateway.AgentOptions.Type => {
  const defined: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(options)) if (value !== undefined) defined[key] = value
  return defined as typeof Gateway.AgentOptions.Type
}

/** The child side: created from the parent's seed, never over a live or stored session. */
const createFork = (
  runner: Runner,
  id: SessionId,
  payload: { readonly parent: SessionId; readonly seed: ReadonlyArray<SessionEvent> } & Gateway.CreateRequest
) =>
  Effect.gen(function*() {
    if (Option.isSome(yield* runner.registry.get(id))) {
      return yield* new AgentError.AgentAlreadyExists({ id, where: "live" })
    }
    if (yield* runner.persistence.exists(id)) return yield* new AgentError.AgentAlreadyExists({ id, where: "stored" })
    // the parent's prefix as an unpersisted session (its events were decoded by the store's codec)
    const from = yield* Session.make({ id: payload.parent, seed: payload.seed })
    yield* waitingOutLease(runner)(runner.host.get(id, {
      ...(payload.options === undefined ? {} : { options: payload.options }),
      ...(payload.meta === undefined ? {} : { meta: payload.meta }),
      fork: { from, upTo: payload.seed.length }
    }))
    return yield* runner.gateway.summary(id)
  }).pipe(Effect.scoped)

// -------------------------------------------------------------------------------------------------
// the entity

/** @internal */
export const behaviour = Effect.gen(function*() {
  const runner = yield* RunnerState
  const address = yield* Entity.CurrentAddress
  const clientFor = yield* AgentEntity.client
  const parsed = parseSessionId(address.entityId)
  if (Either.isLeft(parsed)) return invalidEntity(parsed.left)
  const id = parsed.right
  const cell: Cell = {
    id,
    context: yield* Effect.context<Sharding | Entity.CurrentAddress>(),
    sends: yield* Queue.unbounded<PendingSend>(),
    isRunning: false,
    isKeptAlive: false,
    changed: yield* Effect.makeLatch(false)
  }
  runner.cells.set(id, cell)
  // the entity's Scope closing (reaped, shard moved, runner stopping) passivates the agent
  yield* Effect.addFinalizer(() =>
    Effect.zipRight(
      Effect.sync(() => {
        if (runner.cells.get(id) === cell) runner.cells.delete(id)
      }),
      runner.host.passivate(id)
    )
  )
  const live = yield* runner.registry.get(id)
  if (Option.isSome(live)) setRunning(cell, (yield* live.value.status) === "running")
  // a keep-alive redelivered after a failover lands here without a request: release it once idle
  else cell.isKeptAlive = true
  cell.changed.unsafeOpen()
  yield* Effect.forkScoped(keepAliveLoop(cell))
  yield* Effect.forkScoped(sendLoop(runner, cell))
  yield* Effect.forkScoped(resumeIfPending(runner, id))
  const lease = waitingOutLease(runner)

  return AgentEntity.of({
    Summary: () => runner.gateway.summary(id),
    Pending: () => runner.host.pending(id),
    Create: ({ payload }) => lease(runner.gateway.create(id, payload)),
    Send: ({ payload }) => enqueue(cell, payload.message, payload.mode),
    // APP-05: the request was decoded by the client (ARCH-04); the run and the read happen here, on the owner
    Run: ({ payload }) =>
      lease(gatewayHost.runDecoded(runner.host, {
        key: id,
        message: payload.message,
        settings: payload.settings,
        output: payload.output
      }, payload.wait)),
    Turn: ({ payload }) => lease(gatewayHost.turnDecoded(runner.host, id, payload.turn, payload.wait)),
    Cancel: ({ payload }) => lease(runner.gateway.cancel(id, { keepInbox: payload.keepInbox })),
    WhenIdle: () => withAgent(runner, id, (agent) => agent.whenIdle),
    Wake: () => withAgent(runner, id, (agent) => agent.wake),
    Fork: ({ payload }) => fork(runner, id, payload, clientFor),
    CreateFork: ({ payload }) => createFork(runner, id, payload),
    Dispose: () => runner.gateway.dispose(id),
    Remove: () => runner.gateway.remove(id),
    Events: ({ payload }) => runner.gateway.eventsFrom(id, payload.from)
  })
})

/** An entity whose id is not a SessionId: every request fails with why (ID-01). */
const invalidEntity = (error: InvalidSessionId) =>
  AgentEntity.of({
    Summary: () => Effect.fail(error),
    Pending: () => Effect.fail(error),
    Create: () => Effect.fail(error),
    Send: () => Effect.fail(error),
    Run: () => Effect.fail(error),
    Turn: () => Effect.fail(error),
    Cancel: () => Effect.fail(error),
    WhenIdle: () => Effect.fail(error),
    Wake: () => Effect.fail(error),
    Fork: () => Effect.fail(error),
    CreateFork: () => Effect.fail(error),
    Dispose: () => Effect.fail(error),
    Remove: () => Effect.fail(error),
    Events: () => Stream.fail(error)
  })
