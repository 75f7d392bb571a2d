/**
 * The AgentHost's state record (SPEC §17) and the synchronous steps that change it. State is plain
 * (a `Map` of slots changed only in synchronous steps, as cluster's `Sharding` keeps its maps); every
 * fiber lives in a `FiberSet` or `FiberMap` of the host's Scope:
 * - `activations`: one fiber per id being activated; its callers await the slot's `Deferred`
 *   (HOST-01 single flight: a caller's interruption never cancels the activation for the others);
 * - `timers`: one idle timer per live agent, keyed by id (HOST-02);
 * - `background`: passivations, the start-up recovery (HOST-04) and the registry-event watcher.
 *
 * What keeps a live agent from passivating besides work (HOST-02): the subscribers of its own feed
 * (`agent.events`/`subscribe`/`statusChanges`, however the agent was obtained; read from the feed
 * `AgentLoop` attaches to it) and the holds of `use`. `eventsFrom` readers (`host/events.ts`) read
 * the session, not the agent: they watch the id's slot and follow it across passivations (EVS-01).
 *
 * @internal
 */
import type { Scope as ScopeNs } from "effect"
import {
  Clock,
  Deferred,
  Duration,
  Effect,
  ExecutionStrategy,
  Exit,
  FiberId,
  FiberMap,
  FiberSet,
  Option,
  Scope,
  Stream
} from "effect"
import type { Agent, AgentHandle, AgentOptions, AgentSetup, AgentWatchers } from "../../Agent.js"
import type * as AgentHost from "../../AgentHost.js"
import * as HostError from "./errors.js"
import type { AgentRegistry } from "../../AgentRegistry.js"
import type { SessionId } from "../../Message.js"
import type { SessionPersistence } from "../../SessionPersistence.js"
import type * as hostEvents from "./events.js"

/** A live agent of the host. @internal */
export interface Hosted {
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
  readonly watched: AgentWatchers | undefined
  /** Live subscriptions through `view` when the agent has no attached feed. */
  subscribers: number
  /** Open `use` regions (HOST-02). */
  holds: number
  /** When the agent last showed activity (an event, a `get`, its last subscriber leaving). */
  lastActive: number
}

/** What the host knows of an id: nothing (absent), or one of these (HOST-01). @internal */
export type Slot =
  | { readonly _tag: "Activating"; readonly done: Deferred.Deferred<Hosted, AgentHost.GetError> }
  | { readonly _tag: "Live"; readonly hosted: Hosted }
  | { readonly _tag: "Passivating"; readonly hosted: Hosted; readonly done: Deferred.Deferred<void> }
  | { readonly _tag: "Removing"; readonly done: Deferred.Deferred<void> }

/** The host's options with their defaults (HOST-00). @internal */
export interface Settings {
  readonly idleTimeout: Duration.Duration
  readonly maxLive: number
  readonly activationTimeout: Duration.Duration
  readonly drainTimeout: Duration.Duration
  readonly recover: boolean
  readonly recoverConcurrency: number
  readonly wakeOnActivate: boolean
  readonly createOnDemand: boolean
}

/** HOST-00: the options given, each defaulted (a count that is not a positive integer too). @internal */
export const settingsOf = <R>(options: AgentHost.HostOptions<R>): Settings => {
  const d = HostError.defaults
  const positive = (n: number | undefined, fallback: number) =>
    n !== undefined && Number.isSafeInteger(n) && n > 0 ? n : fallback
  return {
    idleTimeout: Duration.decode(options.idleTimeout ?? d.idleTimeout),
    maxLive: positive(options.maxLive, d.maxLive),
    activationTimeout: Duration.decode(options.activationTimeout ?? d.activationTimeout),
    drainTimeout: Duration.decode(options.drainTimeout ?? d.drainTimeout),
    recover: options.recover ?? d.recover,
    recoverConcurrency: positive(options.recoverConcurrency, d.recoverConcurrency),
    wakeOnActivate: options.wakeOnActivate ?? d.wakeOnActivate,
    createOnDemand: options.createOnDemand ?? d.createOnDemand
  }
}

/** The host's `setup` for one activation, its errors tagged with the id (HOST-01). @internal */
export type SetupFor = (
  id: SessionId
) => ((agent: AgentSetup) => Effect.Effect<void, HostError.HostSetupFailed, ScopeNs.Scope>) | undefined

/** The watch of an id by its `eventsFrom` readers (EVS-01). @internal */
export class WatchEntry implements hostEvents.Watch {
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

/** Everything the host's functions share. @internal */
export interface HostState {
  readonly settings: Settings
  readonly registry: AgentRegistry["Type"]
  readonly persistence: Option.Option<SessionPersistence["Type"]>
  /** Without persistence an agent cannot come back: never passivate it. */
  readonly canPassivate: boolean
  readonly agentOptions: AgentOptions | undefined
  readonly setupFor: SetupFor
  /** The agents' owner, closed after the drain (HOST-05). */
  readonly agentsScope: Scope.Scope
  readonly activations: FiberSet.FiberSet<unknown, unknown>
  readonly background: FiberSet.FiberSet<unknown, unknown>
  readonly timers: FiberMap.FiberMap<SessionId, unknown, unknown>
  readonly recovered: Deferred.Deferred<AgentHost.RecoveryReport>
  readonly slots: Map<SessionId, Slot>
  /** Live agents, least recently used first (a Map keeps insertion order; a touch re-inserts). */
  readonly lru: Map<SessionId, Hosted>
  /**
   * The ids `eventsFrom` readers watch (EVS-01), while some reader does: a signal completed (and
   * replaced) at each slot change, and the log length of the last agent released.
   */
  readonly watches: Map<SessionId, WatchEntry>
  /** Slots taken: live, activating and passivating agents (HOST-02 `maxLive`). */
  occupied: number
  closed: boolean
  /** Completed (and replaced) whenever a slot frees, so capacity waiters look again. */
  freed: Deferred.Deferred<void>
}

/**
 * The host's state in the current Scope: its fiber sets, and the agents' Scope forked from it before
 * the drain finalizer is added, so that the drain runs first (HOST-05).
 *
 * @internal
 */
export const makeState = (fixed: {
  readonly settings: Settings
  readonly registry: AgentRegistry["Type"]
  readonly persistence: Option.Option<SessionPersistence["Type"]>
  readonly agentOptions: AgentOptions | undefined
  readonly setupFor: SetupFor
}): Effect.Effect<HostState, never, ScopeNs.Scope> =>
  Effect.gen(function*() {
    const hostScope = yield* Effect.scope
    return {
      ...fixed,
      canPassivate: Option.isSome(fixed.persistence),
      agentsScope: yield* Scope.fork(hostScope, ExecutionStrategy.sequential),
      activations: yield* FiberSet.make<unknown, unknown>(),
      background: yield* FiberSet.make<unknown, unknown>(),
      timers: yield* FiberMap.make<SessionId, unknown, unknown>(),
      recovered: yield* Deferred.make<AgentHost.RecoveryReport>(),
      slots: new Map(),
      lru: new Map(),
      watches: new Map(),
      occupied: 0,
      closed: false,
      freed: Deferred.unsafeMake<void>(FiberId.none)
    }
  })

// -------------------------------------------------------------------------------------------------
// slot changes (HOST-01) and their readers (EVS-01)

/** Capacity waiters look again (HOST-02). @internal */
export const signalFreed = (s: HostState): void => {
  const previous = s.freed
  s.freed = Deferred.unsafeMake<void>(FiberId.none)
  Deferred.unsafeDone(previous, Exit.void)
}

/** The readers of `id` look again (EVS-01). @internal */
export const notify = (s: HostState, id: SessionId): void => {
  const entry = s.watches.get(id)
  if (entry === undefined) return
  const previous = entry.signal
  entry.signal = Deferred.unsafeMake<void>(FiberId.none)
  Deferred.unsafeDone(previous, Exit.void)
}

/** Readers waiting for a change look again (and, the host closed, end). @internal */
export const notifyAll = (s: HostState): void => {
  for (const id of Array.from(s.watches.keys())) notify(s, id)
}

/** Every slot change goes through `setSlot` and `deleteSlot`, so that readers of the id look again. @internal */
export const setSlot = (s: HostState, id: SessionId, slot: Slot): void => {
  s.slots.set(id, slot)
  notify(s, id)
}

/** @internal */
export const deleteSlot = (s: HostState, id: SessionId): void => {
  s.slots.delete(id)
  notify(s, id)
}

/** A reader's watch of `id` for its Scope (EVS-01). @internal */
export const watch = (s: HostState, id: SessionId): Effect.Effect<hostEvents.Watch, never, ScopeNs.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      let entry = s.watches.get(id)
      if (entry === undefined) {
        entry = new WatchEntry()
        s.watches.set(id, entry)
      }
      entry.readers++
      return entry
    }),
    (entry) =>
      Effect.sync(() => {
        entry.readers--
        if (entry.readers === 0 && s.watches.get(id) === entry) s.watches.delete(id)
      })
  )

// -------------------------------------------------------------------------------------------------
// activity and idleness (HOST-02)

/** Whoever keeps the agent from passivating besides its work: subscribers and holds (HOST-02). @internal */
export const watchers = (hosted: Hosted): number =>
  hosted.subscribers + hosted.holds + (hosted.watched === undefined ? 0 : hosted.watched.subscribers())

/** A `get` or a hold: activity now, and the most recently used (HOST-02). @internal */
export const touch = (s: HostState, hosted: Hosted, now: number): void => {
  hosted.lastActive = now
  if (s.lru.delete(hosted.id)) s.lru.set(hosted.id, hosted)
}

/** HOST-02: idle is status idle, no pending input, no live subscriber of the agent and no hold. @internal */
export const isIdle = (hosted: Hosted): Effect.Effect<boolean> =>
  watchers(hosted) > 0 ? Effect.succeed(false) : Effect.zipWith(
    hosted.agent.status,
    hosted.agent.inbox.hasPending,
    (status, pending) => status === "idle" && !pending && watchers(hosted) === 0
  )

/** The last subscriber left or the last hold ended: activity now, and maybe a slot to free. @internal */
export const quiet = (s: HostState, hosted: Hosted): Effect.Effect<void> =>
  Effect.flatMap(Clock.currentTimeMillis, (at) =>
    Effect.sync(() => {
      hosted.lastActive = at
      // a capacity waiter may passivate it now (HOST-02)
      signalFreed(s)
    }))

/**
 * The host's view of an agent that does not count its own subscribers (one from a user's
 * factory): the agent itself (prototype), with `events`, `subscribe` and `statusChanges` counting
 * their live subscriptions, which keep it from passivating (HOST-02).
 *
 * @internal
 */
export const viewOf = (hosted: Omit<Hosted, "view">, onQuiet: () => Effect.Effect<void>): Agent => {
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
