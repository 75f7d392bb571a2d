/**
 * The AgentHost implementation (SPEC §17). State is plain (a `Map` of slots changed only in
 * synchronous steps, as cluster's `Sharding` keeps its maps); every fiber lives in a `FiberSet` or
 * `FiberMap` of the host's Scope:
 * - `activations`: one fiber per id being activated; its callers await the slot's `Deferred`
 *   (HOST-01 single flight: a caller's interruption never cancels the activation for the others);
 * - `timers`: one idle timer per live agent, keyed by id (HOST-02);
 * - `background`: passivations, the start-up recovery (HOST-04) and the registry-event watcher.
 *
 * What keeps a live agent from passivating besides work (HOST-02): the subscribers of its own feed
 * (`agent.events`/`subscribe`/`statusChanges`, however the agent was obtained; read from the feed
 * `AgentLoop` attaches to it) and the holds of `use`. `eventsFrom` readers (`hostEvents.ts`) read
 * the session, not the agent: they watch the id's slot and follow it across passivations (EVS-01).
 *
 * @internal
 */
import type { Scope as ScopeNs } from "effect"
import {
  Cause,
  Clock,
  Deferred,
  Duration,
  Effect,
  Either,
  ExecutionStrategy,
  Exit,
  FiberId,
  FiberMap,
  FiberSet,
  Option,
  Scope,
  Stream
} from "effect"
import type { Agent, AgentHandle, AgentSetup } from "../Agent.js"
import type { AgentEvent } from "../AgentEvent.js"
import * as AgentHost from "../AgentHost.js"
import { AgentRegistry } from "../AgentRegistry.js"
import type { SessionId } from "../Message.js"
import type { SessionEvent } from "../SessionEvent.js"
import { sessionId as parseSessionId } from "../Message.js"
import { SessionPersistence } from "../SessionPersistence.js"
import * as observability from "./observability.js"
import * as Feed from "./feed.js"
import * as hostEvents from "./hostEvents.js"
import * as recovery from "./hostRecovery.js"

/** A live agent of the host. */
interface Hosted {
  readonly id: SessionId
  readonly agent: Agent
  /**
   * What callers get: the agent itself when it counts its own subscribers (its feed is attached,
   * `AgentLoop`'s agents), else a view of it counting the subscriptions made through it (HOST-02).
   */
  readonly view: Agent
  readonly handle: AgentHandle
  /** Owns the agent (a fork of the host's agents Scope). */
  readonly scope: Scope.CloseableScope
  /** The agent's own feed, counting every subscriber of the agent (HOST-02). */
  readonly watched: Feed.Watched | undefined
  /** Live subscriptions through `view` when the agent has no attached feed. */
  subscribers: number
  /** Open `use` regions (HOST-02). */
  holds: number
  /** When the agent last showed activity (an event, a `get`, its last subscriber leaving). */
  lastActive: number
}

type Slot =
  | { readonly _tag: "Activating"; readonly done: Deferred.Deferred<Hosted, AgentHost.GetError> }
  | { readonly _tag: "Live"; readonly hosted: Hosted }
  | { readonly _tag: "Passivating"; readonly hosted: Hosted; readonly done: Deferred.Deferred<void> }
  | { readonly _tag: "Removing"; readonly done: Deferred.Deferred<void> }

interface Settings {
  readonly idleTimeout: Duration.Duration
  readonly maxLive: number
  readonly activationTimeout: Duration.Duration
  readonly drainTimeout: Duration.Duration
  readonly recover: boolean
  readonly recoverConcurrency: number
  readonly wakeOnActivate: boolean
}

const settingsOf = <R>(options: AgentHost.HostOptions<R>): Settings => {
  const d = AgentHost.defaults
  const positive = (n: number | undefined, fallback: number) =>
    n !== undefined && Number.isSafeInteger(n) && n > 0 ? n : fallback
  return {
    idleTimeout: Duration.decode(options.idleTimeout ?? d.idleTimeout),
    maxLive: positive(options.maxLive, d.maxLive),
    activationTimeout: Duration.decode(options.activationTimeout ?? d.activationTimeout),
    drainTimeout: Duration.decode(options.drainTimeout ?? d.drainTimeout),
    recover: options.recover ?? d.recover,
    recoverConcurrency: positive(options.recoverConcurrency, d.recoverConcurrency),
    wakeOnActivate: options.wakeOnActivate ?? d.wakeOnActivate
  }
}

/** Whoever keeps the agent from passivating besides its work: subscribers and holds (HOST-02). */
const watchers = (hosted: Hosted): number =>
  hosted.subscribers + hosted.holds + (hosted.watched === undefined ? 0 : hosted.watched.subscribers())

/**
 * The host's view of an agent that does not count its own subscribers (one from a user's
 * factory): the agent itself (prototype), with `events`, `subscribe` and `statusChanges` counting
 * their live subscriptions, which keep it from passivating (HOST-02).
 */
const viewOf = (hosted: Omit<Hosted, "view">, onQuiet: () => Effect.Effect<void>): Agent => {
  const agent = hosted.agent
  const enter = Effect.sync(() => {
    ;(hosted as Hosted).subscribers++
  })
  const leave = Effect.suspend(() => {
    ;(hosted as Hosted).subscribers--
    return watchers(hosted as Hosted) === 0 ? onQuiet() : Effect.void
  })
  const counted = Effect.acquireRelease(enter, () => leave)
  const countedStream = <A>(stream: Stream.Stream<A>) => Stream.unwrapScoped(Effect.as(counted, stream))
  return Object.create(agent, {
    events: { get: () => countedStream(agent.events), enumerable: true },
    statusChanges: { get: () => countedStream(agent.statusChanges), enumerable: true },
    subscribe: { get: () => Effect.zipRight(counted, agent.subscribe), enumerable: true }
  }) as Agent
}

/** The watch of an id by its `eventsFrom` readers (EVS-01). */
class WatchEntry implements hostEvents.Watch {
  signal = Deferred.unsafeMake<void>(FiberId.none)
  readers = 0
  releasedLength = -1
  changed(): Deferred.Deferred<void> {
    return this.signal
  }
  released(): number {
    return this.releasedLength
  }
}

/** @internal */
export const make = <R>(
  options: AgentHost.HostOptions<R>
): Effect.Effect<AgentHost.AgentHost["Type"], never, AgentRegistry | ScopeNs.Scope | Exclude<R, ScopeNs.Scope>> =>
  Effect.gen(function*() {
    const settings = settingsOf(options)
    const registry = yield* AgentRegistry
    const persistence = yield* Effect.serviceOption(SessionPersistence)
    // without persistence an agent cannot come back: never passivate it
    const canPassivate = Option.isSome(persistence)
    const setupContext = yield* Effect.context<Exclude<R, ScopeNs.Scope>>()
    const hostScope = yield* Effect.scope
    // the agents' owner, forked before the drain finalizer is added: the drain runs first (HOST-05)
    const agentsScope = yield* Scope.fork(hostScope, ExecutionStrategy.sequential)
    const activations = yield* FiberSet.make<unknown, unknown>()
    const background = yield* FiberSet.make<unknown, unknown>()
    const timers = yield* FiberMap.make<SessionId, unknown, unknown>()
    const recovered = yield* Deferred.make<AgentHost.RecoveryReport>()

    const slots = new Map<SessionId, Slot>()
    /** Live agents, least recently used first (a Map keeps insertion order; a touch re-inserts). */
    const lru = new Map<SessionId, Hosted>()
    /** Slots taken: live, activating and passivating agents (HOST-02 `maxLive`). */
    let occupied = 0
    let closed = false
    /** Completed (and replaced) whenever a slot frees, so capacity waiters look again. */
    let freed = Deferred.unsafeMake<void>(FiberId.none)

    const signalFreed = () => {
      const previous = freed
      freed = Deferred.unsafeMake<void>(FiberId.none)
      Deferred.unsafeDone(previous, Exit.void)
    }

    /**
     * The ids `eventsFrom` readers watch (EVS-01), while some reader does: a signal completed (and
     * replaced) at each slot change, and the log length of the last agent released.
     */
    const watches = new Map<SessionId, WatchEntry>()

    const notify = (id: SessionId) => {
      const entry = watches.get(id)
      if (entry === undefined) return
      const previous = entry.signal
      entry.signal = Deferred.unsafeMake<void>(FiberId.none)
      Deferred.unsafeDone(previous, Exit.void)
    }

    /** Every slot change goes through these two, so that readers of the id look again. */
    const setSlot = (id: SessionId, slot: Slot) => {
      slots.set(id, slot)
      notify(id)
    }
    const deleteSlot = (id: SessionId) => {
      slots.delete(id)
      notify(id)
    }

    const watch = (id: SessionId): Effect.Effect<hostEvents.Watch, never, ScopeNs.Scope> =>
      Effect.acquireRelease(
        Effect.sync(() => {
          let entry = watches.get(id)
          if (entry === undefined) {
            entry = new WatchEntry()
            watches.set(id, entry)
          }
          entry.readers++
          return entry
        }),
        (entry) =>
          Effect.sync(() => {
            entry.readers--
            if (entry.readers === 0 && watches.get(id) === entry) watches.delete(id)
          })
      )

    const touch = (hosted: Hosted, now: number) => {
      hosted.lastActive = now
      if (lru.delete(hosted.id)) lru.set(hosted.id, hosted)
    }

    // HOST-02: idle is status idle, no pending input, no live subscriber of the agent and no hold
    const isIdle = (hosted: Hosted): Effect.Effect<boolean> =>
      watchers(hosted) > 0 ? Effect.succeed(false) : Effect.zipWith(
        hosted.agent.status,
        hosted.agent.inbox.hasPending,
        (status, pending) => status === "idle" && !pending && watchers(hosted) === 0
      )

    /** The last subscriber left or the last hold ended: activity now, and maybe a slot to free. */
    const quiet = (hosted: Hosted): Effect.Effect<void> =>
      Effect.flatMap(Clock.currentTimeMillis, (at) =>
        Effect.sync(() => {
          hosted.lastActive = at
          // a capacity waiter may passivate it now (HOST-02)
          signalFreed()
        }))

    // ---------------------------------------------------------------------------------------------
    // passivation (HOST-02)

    /** Disposes a hosted agent (inbox kept, LIFE-06) and frees its slot; failures are logged. */
    const release = (hosted: Hosted): Effect.Effect<void> =>
      Effect.gen(function*() {
        const disposed = yield* Effect.exit(hosted.handle.dispose)
        if (Exit.isFailure(disposed)) {
          yield* Effect.logWarning(`AgentHost: disposing ${hosted.id} failed`, disposed.cause)
        }
        hosted.watched?.onQuiet(undefined)
        yield* Scope.close(hosted.scope, Exit.void)
        const entry = watches.get(hosted.id)
        // EVS-01: a reader still reading an earlier incarnation when the host closes catches up to this
        if (entry !== undefined) entry.releasedLength = (yield* hosted.agent.session.events).length
      })

    /**
     * Passivates `hosted` if it is still the live agent of its id and, unless `force`, still idle:
     * the slot reads Passivating (a `get` meanwhile waits for it, then resumes) until disposed.
     */
    const passivate = (hosted: Hosted, force: boolean): Effect.Effect<boolean> =>
      Effect.uninterruptible(Effect.gen(function*() {
        const slot = slots.get(hosted.id)
        if (slot?._tag !== "Live" || slot.hosted !== hosted) return false
        if (!force && !(yield* isIdle(hosted))) return false
        // the idle check yields: look again before taking the slot, in the same step that takes it
        // (a `use` or a subscriber that came meanwhile keeps the agent, HOST-02)
        const again = slots.get(hosted.id)
        if (again?._tag !== "Live" || again.hosted !== hosted) return false
        if (!force && watchers(hosted) > 0) return false
        const done = Deferred.unsafeMake<void>(FiberId.none)
        setSlot(hosted.id, { _tag: "Passivating", hosted, done })
        lru.delete(hosted.id)
        yield* FiberMap.remove(timers, hosted.id)
        yield* release(hosted)
        deleteSlot(hosted.id)
        occupied--
        signalFreed()
        yield* Deferred.succeed(done, undefined)
        return true
      })).pipe(observability.hostPassivation(hosted.id, force))

    /**
     * The idle timer of a live agent: once it is idle and `idleTimeout` passed since its last
     * activity, it is passivated (in the background set: the timer is removed by the passivation).
     */
    const idleTimer = (hosted: Hosted): Effect.Effect<void> =>
      Effect.gen(function*() {
        const timeout = Duration.toMillis(settings.idleTimeout)
        while (true) {
          yield* hosted.agent.whenIdle
          const now = yield* Clock.currentTimeMillis
          const due = hosted.lastActive + timeout
          if (now < due) {
            yield* Effect.sleep(Duration.millis(due - now))
            continue
          }
          if (yield* isIdle(hosted)) {
            yield* FiberSet.run(background, passivate(hosted, false))
            return
          }
          // pending input or a subscriber keeps it: look again a timeout later
          hosted.lastActive = now
        }
      })

    /** Every event of a live agent counts as activity (one watcher for the whole host). */
    const watchActivity = Effect.gen(function*() {
      const events = yield* registry.subscribe
      // layers are built uninterruptibly: the fibers they fork must be made interruptible
      yield* FiberSet.run(
        background,
        Effect.interruptible(Stream.runForEach(events, (event: AgentEvent) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) =>
            Effect.sync(() => {
              const hosted = lru.get(event.agent)
              if (hosted === undefined) return
              hosted.lastActive = now
              // an agent that went idle may be passivated for a capacity waiter (HOST-02)
              if (event._tag === "AgentStatusChanged" && event.status === "idle") signalFreed()
            }))))
      )
    })

    // ---------------------------------------------------------------------------------------------
    // capacity (HOST-02)

    /** The least recently used idle live agent, if any. */
    const idleCandidate: Effect.Effect<Option.Option<Hosted>> = Effect.suspend(() => {
      const live = Array.from(lru.values())
      return Effect.findFirst(live, isIdle)
    })

    /**
     * Takes a slot: at once when one is free, else by passivating the LRU idle agent, else it waits
     * until `deadline` (fixed when the caller asked, so the wait is `activationTimeout` from then).
     */
    const reserve = (id: SessionId, deadline: number): Effect.Effect<void, AgentHost.HostAtCapacity | AgentHost.HostClosed> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.gen(function*() {
        while (true) {
          if (closed) return yield* new AgentHost.HostClosed({ id })
          if (occupied < settings.maxLive) {
            occupied++
            return
          }
          const waitFor = freed
          if (canPassivate) {
            const candidate = yield* idleCandidate
            if (Option.isSome(candidate) && (yield* passivate(candidate.value, false))) continue
          }
          yield* Deferred.await(waitFor)
        }
      }).pipe(
        Effect.timeoutFail({
          duration: Duration.millis(Math.max(0, deadline - now)),
          onTimeout: () =>
            new AgentHost.HostAtCapacity({
              id,
              maxLive: settings.maxLive,
              waitedMillis: Duration.toMillis(settings.activationTimeout)
            })
        })
      ))

    // ---------------------------------------------------------------------------------------------
    // activation (HOST-01, HOST-03)

    const hostSetup = options.setup
    const setupFor = (id: SessionId) =>
      hostSetup === undefined ? undefined : (agent: AgentSetup) =>
        hostSetup(agent).pipe(
          Effect.mapError((cause) => new AgentHost.HostSetupFailed({ id, cause })),
          Effect.provide(setupContext)
        ) as Effect.Effect<void, AgentHost.HostSetupFailed, ScopeNs.Scope>

    /** Resumes (or, with create options, resumes or creates) the agent into `scope`. */
    const open = (id: SessionId, create: AgentHost.CreateOptions | undefined, scope: Scope.Scope) => {
      const setup = setupFor(id)
      const opened: Effect.Effect<AgentHandle, AgentHost.GetError, ScopeNs.Scope> = create === undefined
        ? registry.resume({ sessionId: id, options: options.agentOptions, setup })
        : registry.resumeOrCreate({
          sessionId: id,
          options: create.options ?? options.agentOptions,
          meta: create.meta,
          seed: create.seed,
          fork: create.fork,
          setup
        })
      return Scope.extend(opened, scope)
    }

    /** Whether a handle's agent was resumed (its log held events before this process took it). */
    const wasResumed = (agent: Agent) => agent.session.firstLiveSeq > 0

    const activate = (id: SessionId, create: AgentHost.CreateOptions | undefined, deadline: number) =>
      Effect.gen(function*() {
        yield* reserve(id, deadline)
        const scope = yield* Scope.fork(agentsScope, ExecutionStrategy.sequential)
        const opened = yield* Effect.exit(open(id, create, scope))
        if (Exit.isFailure(opened)) {
          yield* Scope.close(scope, Exit.void)
          return yield* Effect.failCause(opened.cause)
        }
        const handle = opened.value
        const now = yield* Clock.currentTimeMillis
        const watched = Feed.attachedTo(handle.agent)
        const base = { id, agent: handle.agent, handle, scope, watched, subscribers: 0, holds: 0, lastActive: now }
        const onQuiet = () => quiet(hosted)
        const hosted: Hosted = Object.assign(base, {
          view: watched === undefined ? viewOf(base, onQuiet) : handle.agent
        })
        watched?.onQuiet(onQuiet)
        // HOST-03: what a crash interrupted runs without a new message
        if (settings.wakeOnActivate && wasResumed(handle.agent)) yield* handle.agent.wake
        return hosted
      }).pipe(observability.hostActivation(id))

    /** The activation's outcome, published to its waiters; the slot is Live or gone afterwards. */
    const settleActivation = (
      id: SessionId,
      done: Deferred.Deferred<Hosted, AgentHost.GetError>,
      exit: Exit.Exit<Hosted, AgentHost.GetError>
    ) =>
      Effect.gen(function*() {
        if (Exit.isSuccess(exit)) {
          const hosted = exit.value
          if (closed) {
            // the host began closing while this activation finished: the drain does not know it
            yield* release(hosted)
            deleteSlot(id)
            occupied--
            return yield* Deferred.fail(done, new AgentHost.HostClosed({ id }))
          }
          setSlot(id, { _tag: "Live", hosted })
          lru.set(id, hosted)
          // a new live agent is likely idle: a capacity waiter may passivate it (HOST-02)
          signalFreed()
          // forked from this uninterruptible step: the timer itself must be interruptible
          if (canPassivate) yield* FiberMap.run(timers, id, Effect.interruptible(idleTimer(hosted)))
          return yield* Deferred.succeed(done, hosted)
        }
        deleteSlot(id)
        // a failure before the slot was reserved (capacity, closed) took none
        const reservedNone = Exit.isFailure(exit) && Option.exists(
          Cause.failureOption(exit.cause),
          (error) => error._tag === "HostAtCapacity" || error._tag === "HostClosed"
        )
        if (!reservedNone) {
          occupied--
          signalFreed()
        }
        const outcome = Cause.isInterruptedOnly(exit.cause)
          ? Exit.fail(new AgentHost.HostClosed({ id }))
          : exit
        return yield* Deferred.done(done, outcome)
      })

    const startActivation = (id: SessionId, create: AgentHost.CreateOptions | undefined) =>
      Effect.gen(function*() {
        const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(settings.activationTimeout)
        const done = Deferred.unsafeMake<Hosted, AgentHost.GetError>(FiberId.none)
        setSlot(id, { _tag: "Activating", done })
        // forked from an uninterruptible step: the activation is interruptible (timeout, drain) but
        // always settles its slot
        yield* FiberSet.run(
          activations,
          Effect.interruptible(Effect.uninterruptibleMask((restore) =>
            Effect.flatMap(Effect.exit(restore(activate(id, create, deadline))), (exit) => settleActivation(id, done, exit))
          ))
        )
        return done
      })

    const get = (id: SessionId | string, create?: AgentHost.CreateOptions | undefined) =>
      Effect.gen(function*() {
        const parsed = parseSessionId(id)
        if (Either.isLeft(parsed)) return yield* parsed.left
        const key = parsed.right
        while (true) {
          if (closed) return yield* new AgentHost.HostClosed({ id: key })
          const slot = slots.get(key)
          if (slot === undefined) {
            const done = yield* Effect.uninterruptible(startActivation(key, create))
            return (yield* Deferred.await(done)).view
          }
          switch (slot._tag) {
            case "Live": {
              touch(slot.hosted, yield* Clock.currentTimeMillis)
              return slot.hosted.view
            }
            case "Activating":
              return (yield* Deferred.await(slot.done)).view
            case "Passivating":
            case "Removing":
              yield* Deferred.await(slot.done)
          }
        }
      }).pipe(Effect.withSpan("AgentHost.get"))

    // ---------------------------------------------------------------------------------------------
    // use (HOST-02)

    /**
     * The live agent of `key` with a hold taken in the same step that found it Live, activating it
     * first when needed (the waits are interruptible, the hold is not).
     */
    const acquireHold = (key: SessionId, create: AgentHost.CreateOptions | undefined) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          while (true) {
            if (closed) return yield* new AgentHost.HostClosed({ id: key })
            const slot = slots.get(key)
            if (slot === undefined) {
              const done = yield* startActivation(key, create)
              yield* restore(Deferred.await(done))
            } else if (slot._tag === "Live") {
              slot.hosted.holds++
              touch(slot.hosted, yield* Clock.currentTimeMillis)
              return slot.hosted
            } else if (slot._tag === "Activating") {
              // then look again: the agent may be passivated before this fiber runs
              yield* restore(Deferred.await(slot.done))
            } else {
              yield* restore(Deferred.await(slot.done)) // passivating or removing: then activate it again
            }
          }
        })
      )

    const releaseHold = (hosted: Hosted) =>
      Effect.suspend(() => {
        hosted.holds--
        return watchers(hosted) === 0 ? quiet(hosted) : Effect.void
      })

    const use = <A, E, R>(
      id: SessionId | string,
      f: (agent: Agent) => Effect.Effect<A, E, R>,
      create?: AgentHost.CreateOptions | undefined
    ): Effect.Effect<A, E | AgentHost.GetError, R> =>
      Effect.flatMap(
        Effect.mapError(parseSessionId(id), (error): AgentHost.GetError => error),
        (key) => Effect.acquireUseRelease(acquireHold(key, create), (hosted) => f(hosted.view), releaseHold)
      ).pipe(Effect.withSpan("AgentHost.use"))

    const passivateById = (id: SessionId | string) =>
      Effect.suspend(() => {
        const slot = slots.get(id as SessionId)
        return slot?._tag === "Live" ? passivate(slot.hosted, true) : Effect.succeed(false)
      }).pipe(Effect.withSpan("AgentHost.passivate"))

    // ---------------------------------------------------------------------------------------------
    // remove, eventsFrom (EVS-01)

    /** Waits until nothing is live or moving for `key`, passivating a live agent. */
    const settleToAbsent = (key: SessionId) =>
      Effect.gen(function*() {
        while (true) {
          if (closed) return yield* new AgentHost.HostClosed({ id: key })
          const slot = slots.get(key)
          if (slot === undefined) return
          if (slot._tag === "Live") yield* passivate(slot.hosted, true)
          else if (slot._tag === "Activating") yield* Effect.exit(Deferred.await(slot.done))
          else yield* Deferred.await(slot.done)
        }
      })

    const remove = (id: SessionId | string): Effect.Effect<void, AgentHost.RemoveError> =>
      Effect.gen(function*() {
        const key = yield* parseSessionId(id)
        yield* Effect.uninterruptibleMask((restore) =>
          Effect.gen(function*() {
            yield* restore(settleToAbsent(key))
            // nothing live, and the slot taken in this same step: no activation starts until the
            // removal settled; readers of the id look again at each change
            const done = Deferred.unsafeMake<void>(FiberId.none)
            setSlot(key, { _tag: "Removing", done })
            const removed = yield* Effect.exit(
              Option.isSome(persistence) ? persistence.value.remove(key) : Effect.void
            )
            deleteSlot(key)
            Deferred.unsafeDone(done, Exit.void)
            return yield* removed
          })
        )
      }).pipe(Effect.withSpan("AgentHost.remove"))

    const absent: hostEvents.Look = { _tag: "Absent" }
    const moving: hostEvents.Look = { _tag: "Moving" }
    const readerHost: hostEvents.ReaderHost = {
      isClosed: () => closed,
      look(id) {
        const slot = slots.get(id)
        if (slot === undefined) return absent
        return slot._tag === "Live" ? { _tag: "Live", session: slot.hosted.agent.session } : moving
      },
      watch,
      persistence
    }

    const eventsFrom = (id: SessionId | string, seq: number): Stream.Stream<SessionEvent, AgentHost.EventsFromError> =>
      Stream.unwrap(Effect.suspend((): Effect.Effect<
        Stream.Stream<SessionEvent, AgentHost.EventsFromError>,
        AgentHost.EventsFromError
      > => {
        const parsed = parseSessionId(id)
        if (Either.isLeft(parsed)) return Effect.fail(parsed.left)
        if (closed) return Effect.fail(new AgentHost.HostClosed({ id: parsed.right }))
        return Effect.succeed(hostEvents.eventsFrom(readerHost, parsed.right, seq))
      }))

    // ---------------------------------------------------------------------------------------------
    // drain (HOST-05)

    /** Readers waiting for a change look again (and, the host closed, end). */
    const notifyAll = () => {
      for (const id of Array.from(watches.keys())) notify(id)
    }

    const drain = Effect.gen(function*() {
      closed = true
      signalFreed()
      notifyAll()
      yield* FiberSet.clear(activations)
      for (const [id, slot] of slots) {
        if (slot._tag === "Activating") yield* Deferred.fail(slot.done, new AgentHost.HostClosed({ id }))
      }
      yield* FiberMap.clear(timers)
      // passivations in flight finish (they are uninterruptible); the watcher and recovery stop
      yield* FiberSet.clear(background)
      const live = Array.from(lru.values())
      // finalizers run uninterruptibly: the wait is made interruptible so its timeout can end it
      yield* Effect.forEach(live, (hosted) => hosted.agent.whenIdle, { concurrency: "unbounded", discard: true }).pipe(
        Effect.interruptible,
        Effect.timeoutOption(settings.drainTimeout)
      )
      yield* Effect.forEach(live, release, { concurrency: "unbounded", discard: true })
      lru.clear()
      slots.clear()
      occupied = 0
      notifyAll()
    })
    yield* Effect.addFinalizer(() => drain)

    yield* watchActivity

    // HOST-04: recovery at start, in the background (the layer is ready at once)
    if (settings.recover && Option.isSome(persistence)) {
      yield* FiberSet.run(
        background,
        recovery.recover(persistence.value, settings.recoverConcurrency, (id) =>
          Effect.flatMap(get(id), (agent) => agent.wake)).pipe(
            Effect.flatMap((report) => Deferred.succeed(recovered, report)),
            Effect.interruptible
          )
      )
    } else {
      yield* Deferred.succeed(recovered, { candidates: [], activated: [], failed: [] })
    }

    return AgentHost.AgentHost.of({
      get,
      use,
      eventsFrom,
      remove,
      passivate: passivateById,
      live: Effect.sync(() => Array.from(lru.keys())),
      recovery: Deferred.await(recovered)
    })
  })
