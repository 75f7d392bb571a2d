/**
 * The AgentRegistry implementation: live agents on the one lifecycle registry, the registry-wide
 * event feed, the factory slot and the initiator regions with their drain (SPEC §6).
 *
 * @internal
 */
import { Deferred, Effect, FiberRef, Option, Ref, Scope } from "effect"
import type { Stream } from "effect"
import { globalValue } from "effect/GlobalValue"
import type { Agent, AgentHandle, CreateOptions, ResumeOptions } from "../Agent.js"
import * as AgentError from "../AgentError.js"
import { AgentEvent } from "../AgentEvent.js"
import type { AgentEntry, AgentFactory, AgentPublisher, AgentRegistry } from "../AgentRegistry.js"
import type { SessionId } from "../Message.js"
import * as SessionError from "../SessionError.js"
import * as Feed from "./feed.js"
import * as lifecycle from "./lifecycle.js"

/**
 * The agent that initiated the current work. Only ever set with `Effect.locally` (never
 * `FiberRef.set`), so it is restored when a region ends and inherited by fibers forked inside.
 *
 * @internal
 */
export const currentInitiatorRef: FiberRef.FiberRef<Option.Option<Agent>> = globalValue(
  Symbol.for("effect-agent/AgentRegistry/currentInitiator"),
  () => FiberRef.unsafeMake<Option.Option<Agent>>(Option.none())
)

/**
 * The recorded parent of an entry: the parent agent and, when it was live at enter time, its exact
 * entry. A parent that was not live yet (a child spawned during its parent's setup, before the
 * parent entered) is resolved by object identity when queried.
 *
 * @internal
 */
export interface ParentLink {
  readonly agent: Agent
  readonly entry: Option.Option<AgentLifecycleEntry>
}

/** @internal */
export interface AgentLifecycleEntry extends lifecycle.Entry<Agent, Option.Option<ParentLink>> {}

type Source = "startup" | "resume"

interface SessionStartHook {
  readonly run: (agent: Agent, source: Source) => Effect.Effect<void, unknown>
}

interface Installation {
  readonly factory: AgentFactory
}

/** Open regions of `withInitiator`/`withoutInitiator`, and the drain once the registry's Scope closes. */
interface RegionGate {
  readonly closed: boolean
  readonly active: number
  readonly drain: { readonly depth: number; readonly done: Deferred.Deferred<void> } | undefined
}

const initiatorOf = Effect.map(
  FiberRef.get(currentInitiatorRef),
  (initiator): { readonly initiator?: SessionId } =>
    Option.isSome(initiator) ? { initiator: initiator.value.id } : {}
)

/** @internal */
export interface Options {
  readonly includeModelDeltas?: boolean | undefined
}

/**
 * The registry and the publisher it hands to factories (tests drive the publisher directly).
 *
 * @internal
 */
export const makeWithPublisher = (options?: Options): Effect.Effect<
  { readonly registry: AgentRegistry["Type"]; readonly publisher: AgentPublisher },
  never,
  Scope.Scope
> =>
  Effect.gen(function*() {
    const includeModelDeltas = options?.includeModelDeltas === true
    const registryScope = yield* Effect.scope
    const feed = yield* Feed.make<AgentEvent>()
    const registry = yield* lifecycle.make<Agent, Option.Option<ParentLink>>({
      announced: (entry) =>
        Effect.flatMap(initiatorOf, (initiator) =>
          feed.publish(AgentEvent.AgentCreated({ agent: entry.value.id, ...initiator }))),
      disposed: (entry) =>
        Effect.flatMap(initiatorOf, (initiator) =>
          feed.publish(AgentEvent.AgentDisposed({ agent: entry.value.id, ...initiator })))
    })
    const sessionStartHooks = yield* Ref.make<ReadonlyArray<SessionStartHook>>([])
    const slot = yield* Ref.make(Option.none<Installation>())
    const gate = yield* Ref.make<RegionGate>({ closed: false, active: 0, drain: undefined })
    // This registry's region nesting depth of the current fiber (inherited by forked children).
    const depthRef = FiberRef.unsafeMake(0)

    // ---------------------------------------------------------------------------------------------
    // Entries and publication (REG)

    const toEntry = (entry: AgentLifecycleEntry): AgentEntry => ({ agent: entry.value, entry })

    const enter = Effect.fnUntraced(function*(agent: Agent, parent: Option.Option<Agent>) {
      if (agent.id !== agent.session.id) {
        return yield* Effect.dieMessage(
          `bug: agent id ${JSON.stringify(agent.id)} does not match session id ${JSON.stringify(agent.session.id)}`
        )
      }
      let link = Option.none<ParentLink>()
      if (Option.isSome(parent)) {
        const live = yield* registry.get(parent.value.id)
        link = Option.some({
          agent: parent.value,
          entry: Option.filter(live, (entry) => entry.value === parent.value)
        })
      }
      const entry = yield* registry.enter(agent.id, agent, link).pipe(
        Effect.mapError(() => new AgentError.AgentAlreadyExists({ id: agent.id, where: "live" }))
      )
      return toEntry(entry)
    })

    const runSessionStartHooks = Effect.fnUntraced(function*(agent: Agent, source: Source) {
      for (const hook of yield* Ref.get(sessionStartHooks)) {
        yield* hook.run(agent, source).pipe(
          Effect.catchAllCause((cause) =>
            Effect.logWarning(
              `agent ${JSON.stringify(agent.id)}: an onSessionStart hook failed; the agent started all the same`,
              cause
            )
          )
        )
      }
    })

    const announce = (entry: AgentEntry, source: Source): Effect.Effect<void, AgentError.AgentCreationVetoed> =>
      Effect.gen(function*() {
        yield* registry.announce(entry.entry).pipe(
          Effect.mapError((cause) => new AgentError.AgentCreationVetoed({ id: entry.agent.id, cause }))
        )
        // A detach requested during the onCreated hooks already removed the entry (with its
        // AgentDisposed): the session start never follows a disposal.
        if (!(yield* registry.isLive(entry.entry))) return
        const initiator = yield* initiatorOf
        yield* feed.publish(AgentEvent.AgentSessionStart({ agent: entry.agent.id, source, ...initiator }))
        yield* runSessionStartHooks(entry.agent, source)
      }).pipe(Effect.uninterruptible)

    const detach = (entry: AgentEntry): Effect.Effect<void> => registry.detach(entry.entry)

    const publish = (event: AgentEvent): Effect.Effect<void> =>
      event._tag === "ModelDelta" && !includeModelDeltas ? Effect.void : feed.publish(event)

    const publisher: AgentPublisher = { enter, announce, detach, publish }

    // ---------------------------------------------------------------------------------------------
    // Queries (REG-07, OWN-05)

    /** Whether the recorded parent is still live, judged against one snapshot of the live entries. */
    const parentIsLive = (link: ParentLink, live: (key: string) => AgentLifecycleEntry | undefined): boolean => {
      const current = live(link.agent.id)
      if (current === undefined) return false
      return Option.isSome(link.entry) ? current === link.entry.value : current.value === link.agent
    }

    const lookup = (id: SessionId | string): Effect.Effect<Option.Option<Agent>> =>
      Effect.map(registry.get(id), (live) => Option.map(live, (entry) => entry.value))

    const get = Effect.fn("AgentRegistry.get")(function*(id: SessionId | string) {
      return yield* lookup(id)
    })

    const list = Effect.map(registry.entries, (entries) => entries.map((entry) => entry.value))

    const roots = Effect.map(registry.entries, (entries) => {
      const byKey = new Map(entries.map((entry) => [entry.key, entry] as const))
      const live = (key: string) => byKey.get(key)
      return entries
        .filter((entry) => Option.isNone(entry.parent) || !parentIsLive(entry.parent.value, live))
        .map((entry) => entry.value)
    })

    const isOwnedBy = Effect.fn("AgentRegistry.isOwnedBy")(function*(id: SessionId | string, parent: Agent) {
      const child = yield* registry.get(id)
      if (Option.isNone(child) || Option.isNone(child.value.parent)) return false
      const link = child.value.parent.value
      if (link.agent !== parent) return false
      const current = yield* registry.get(parent.id)
      return parentIsLive(link, (key) => (key === parent.id ? Option.getOrUndefined(current) : undefined))
    })

    const register = Effect.fn("AgentRegistry.register")(function*(
      agent: Agent,
      options?: { readonly parentAgent?: Agent | undefined }
    ) {
      const entry = yield* Effect.uninterruptible(
        Effect.tap(
          enter(agent, Option.fromNullable(options?.parentAgent)),
          (entry) => Effect.addFinalizer(() => detach(entry))
        )
      )
      yield* announce(entry, "startup")
    })

    // ---------------------------------------------------------------------------------------------
    // Factory slot (FAC-01, FAC-02)

    const setFactory = Effect.fn("AgentRegistry.setFactory")(function*(factory: AgentFactory) {
      const installation: Installation = { factory }
      yield* Effect.acquireRelease(
        Ref.modify(slot, (current): [Effect.Effect<void, AgentError.FactoryAlreadySet>, Option.Option<Installation>] =>
          Option.isSome(current)
            ? [Effect.fail(new AgentError.FactoryAlreadySet()), current]
            : [Effect.void, Option.some(installation)]
        ).pipe(Effect.flatten),
        () =>
          Ref.update(slot, (current) =>
            Option.isSome(current) && current.value === installation ? Option.none() : current
          )
      )
    })

    const installedFactory = Effect.flatMap(
      Ref.get(slot),
      Option.match({
        onNone: () => Effect.fail(new AgentError.NoAgentFactory()),
        onSome: (installation) => Effect.succeed(installation.factory)
      })
    )

    const create = Effect.fn("AgentRegistry.create")(function*<E, R>(options: CreateOptions<E, R>) {
      const factory = yield* installedFactory
      const owner = yield* Effect.scope
      return yield* factory.create(options, owner, publisher)
    })

    const resume = Effect.fn("AgentRegistry.resume")(function*<E, R>(options: ResumeOptions<E, R>) {
      const factory = yield* installedFactory
      const owner = yield* Effect.scope
      return yield* factory.resume(options, owner, publisher)
    })

    const resumeOrCreate = Effect.fn("AgentRegistry.resumeOrCreate")(function*<E, R>(options: CreateOptions<E, R>) {
      const factory = yield* installedFactory
      const owner = yield* Effect.scope
      const resumeOptions: ResumeOptions<E, R> = {
        sessionId: options.sessionId,
        options: options.options,
        parentAgent: options.parentAgent,
        setup: options.setup
      }
      const resumeStored = factory.resume(resumeOptions, owner, publisher)
      // A concurrent creation stored the session between our resume and create: resume it, once.
      const createFresh = factory.create(options, owner, publisher).pipe(
        Effect.catchIf(
          (error) => error instanceof AgentError.AgentAlreadyExists && error.where === "stored",
          () => resumeStored
        )
      )
      return yield* resumeStored.pipe(
        Effect.catchIf(
          (error) =>
            error instanceof SessionError.SessionNotFound || error instanceof AgentError.PersistenceNotConfigured,
          (): Effect.Effect<
            AgentHandle,
            AgentError.CreateError | AgentError.ResumeError | E,
            Exclude<R, Scope.Scope>
          > => createFresh
        )
      )
    })

    // ---------------------------------------------------------------------------------------------
    // Hooks

    const onCreated = Effect.fn("AgentRegistry.onCreated")(function*(
      hook: (agent: Agent) => Effect.Effect<void, unknown>
    ) {
      yield* registry.addHook(hook)
    })

    const onSessionStart = Effect.fn("AgentRegistry.onSessionStart")(function*(
      run: (agent: Agent, source: Source) => Effect.Effect<void, unknown>
    ) {
      yield* Effect.acquireRelease(
        Effect.sync((): SessionStartHook => ({ run })).pipe(
          Effect.tap((hook) => Ref.update(sessionStartHooks, (hooks) => [...hooks, hook]))
        ),
        (hook) => Ref.update(sessionStartHooks, (hooks) => hooks.filter((h) => h !== hook))
      )
    })

    // ---------------------------------------------------------------------------------------------
    // Initiator regions (INIT-01..06)

    const enterRegion = Effect.flatten(
      Ref.modify(gate, (state): [Effect.Effect<void, AgentError.InitiatorScopeClosed>, RegionGate] =>
        state.closed
          ? [Effect.fail(new AgentError.InitiatorScopeClosed()), state]
          : [Effect.void, { ...state, active: state.active + 1 }]
      )
    )

    const leaveRegion = Effect.flatMap(
      Ref.modify(gate, (state): [Deferred.Deferred<void> | undefined, RegionGate] => {
        const next: RegionGate = { ...state, active: state.active - 1 }
        return [state.drain !== undefined && next.active <= state.drain.depth ? state.drain.done : undefined, next]
      }),
      (done) => (done === undefined ? Effect.void : Deferred.succeed(done, undefined))
    )

    const region = <A, E, R>(
      initiator: Option.Option<Agent>,
      self: Effect.Effect<A, E, R>
    ): Effect.Effect<A, E | AgentError.InitiatorScopeClosed, R> =>
      Effect.acquireUseRelease(
        enterRegion,
        () => self.pipe(Effect.locally(currentInitiatorRef, initiator), Effect.locallyWith(depthRef, (n) => n + 1)),
        () => leaveRegion
      )

    const withInitiator = (agent: Agent) => <A, E, R>(self: Effect.Effect<A, E, R>) => region(Option.some(agent), self)

    const withoutInitiator = <A, E, R>(self: Effect.Effect<A, E, R>) => region(Option.none(), self)

    const currentInitiator = FiberRef.get(currentInitiatorRef)

    const requireInitiator = Effect.flatMap(
      currentInitiator,
      Option.match({
        onNone: () => Effect.fail(new AgentError.NoInitiator()),
        onSome: Effect.succeed
      })
    )

    // INIT-05/06: when the registry's Scope closes, refuse new regions and await those in flight,
    // minus the closing fiber's own (a region that closes the registry must not wait for itself).
    // `Scope.addFinalizer` (not `Effect.addFinalizer`) so the finalizer sees the closing fiber's
    // FiberRefs, not those of the fiber that built the registry.
    yield* Scope.addFinalizer(
      registryScope,
      Effect.gen(function*() {
        const depth = yield* FiberRef.get(depthRef)
        const done = yield* Deferred.make<void>()
        const mustWait = yield* Ref.modify(gate, (state): [boolean, RegionGate] =>
          state.active > depth
            ? [true, { closed: true, active: state.active, drain: { depth, done } }]
            : [false, { ...state, closed: true }]
        )
        if (mustWait) yield* Deferred.await(done)
        yield* feed.end
      })
    )

    const events: Stream.Stream<AgentEvent> = feed.stream

    const service: AgentRegistry["Type"] = {
      get,
      list,
      roots,
      isOwnedBy,
      create,
      resume,
      resumeOrCreate,
      register,
      setFactory,
      events,
      subscribe: feed.subscribe,
      onCreated,
      onSessionStart,
      currentInitiator,
      requireInitiator,
      withInitiator,
      withoutInitiator
    }
    untracedLookups.set(service, lookup)
    return { registry: service, publisher }
  })

/** The registries built here, with their untraced `get` (a span per creation costs B1 dearly). */
const untracedLookups = new WeakMap<
  AgentRegistry["Type"],
  (id: SessionId | string) => Effect.Effect<Option.Option<Agent>>
>()

/**
 * `registry.get` without its span, for the factory's collision pre-check; falls back to `get` for
 * a registry built elsewhere.
 *
 * @internal
 */
export const lookup = (registry: AgentRegistry["Type"], id: SessionId | string): Effect.Effect<Option.Option<Agent>> => {
  const untraced = untracedLookups.get(registry)
  return untraced === undefined ? registry.get(id) : untraced(id)
}

/** @internal */
export const make = (options?: Options): Effect.Effect<AgentRegistry["Type"], never, Scope.Scope> =>
  Effect.map(makeWithPublisher(options), ({ registry }) => registry)
