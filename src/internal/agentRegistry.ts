/**
 * The AgentRegistry implementation: live agents on the one lifecycle registry, the registry-wide
 * event feed, the factory slot and the initiator regions with their drain (SPEC §6).
 *
 * @internal
 */
import { Context, Deferred, Effect, Either, FiberRef, Option, Ref, RuntimeFlags, Scope } from "effect"
import type { Fiber } from "effect"
import type { Stream } from "effect"
import { globalValue } from "effect/GlobalValue"
import type { Agent, AgentHandle, CreateOptions, ResumeOptions } from "../Agent.js"
import * as AgentError from "../AgentError.js"
import { AgentEvent } from "../AgentEvent.js"
import type { AgentEntry, AgentFactory, AgentPublisher, AgentRegistry } from "../AgentRegistry.js"
import type { SessionId } from "../Message.js"
import * as SessionError from "../SessionError.js"
import * as Feed from "./feed.js"
import * as finalizer from "./finalizer.js"
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

/** The initiator of the fiber chain, as the optional field of an event. */
const initiatorIn = (fiber: Fiber.RuntimeFiber<unknown, unknown>): { readonly initiator?: SessionId } => {
  const initiator = fiber.getFiberRef(currentInitiatorRef)
  return Option.isSome(initiator) ? { initiator: initiator.value.id } : {}
}

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
        Effect.withFiberRuntime((fiber) =>
          feed.publish(AgentEvent.AgentCreated({ agent: entry.value.id, ...initiatorIn(fiber) }))
        ),
      disposed: (entry) =>
        Effect.withFiberRuntime((fiber) =>
          feed.publish(AgentEvent.AgentDisposed({ agent: entry.value.id, ...initiatorIn(fiber) }))
        )
    })
    // Plain cells, each read or replaced in one synchronous step (atomic, as a Ref's would be),
    // so that a creation reads them without an operation of its own (B1).
    let sessionStartHooks: ReadonlyArray<SessionStartHook> = []
    let slot = Option.none<Installation>()
    const gate = yield* Ref.make<RegionGate>({ closed: false, active: 0, drain: undefined })
    // This registry's region nesting depth of the current fiber (inherited by forked children).
    const depthRef = FiberRef.unsafeMake(0)

    // ---------------------------------------------------------------------------------------------
    // Entries and publication (REG)

    const toEntry = (entry: AgentLifecycleEntry): AgentEntry => ({ agent: entry.value, entry })

    const enter = (
      agent: Agent,
      parent: Option.Option<Agent>
    ): Effect.Effect<AgentEntry, AgentError.AgentAlreadyExists> =>
      Effect.suspend(() => {
        if (agent.id !== agent.session.id) {
          return Effect.dieMessage(
            `bug: agent id ${JSON.stringify(agent.id)} does not match session id ${JSON.stringify(agent.session.id)}`
          )
        }
        let link = Option.none<ParentLink>()
        if (Option.isSome(parent)) {
          const live = registry.unsafeGet(parent.value.id)
          link = Option.some({
            agent: parent.value,
            entry: live !== undefined && live.value === parent.value ? Option.some(live) : Option.none()
          })
        }
        const entered = registry.unsafeEnter(agent.id, agent, link)
        return Either.isRight(entered)
          ? Effect.succeed(toEntry(entered.right))
          : Effect.fail(new AgentError.AgentAlreadyExists({ id: agent.id, where: "live" }))
      })

    const runSessionStartHooks = Effect.fnUntraced(function*(
      agent: Agent,
      source: Source,
      hooks: ReadonlyArray<SessionStartHook>
    ) {
      for (const hook of hooks) {
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

    /** After `AgentCreated` and the onCreated hooks: `AgentSessionStart` and its hooks. */
    const startSession = (entry: AgentEntry, source: Source) =>
      Effect.withFiberRuntime<void>((fiber) => {
        // A detach requested during the onCreated hooks already removed the entry (with its
        // AgentDisposed): the session start never follows a disposal.
        if (!registry.unsafeIsLive(entry.entry)) return Effect.void
        const started = feed.publish(
          AgentEvent.AgentSessionStart({ agent: entry.agent.id, source, ...initiatorIn(fiber) })
        )
        const hooks = sessionStartHooks
        return hooks.length === 0 ? started : Effect.zipRight(started, runSessionStartHooks(entry.agent, source, hooks))
      })

    const announceNow = (entry: AgentEntry, source: Source): Effect.Effect<void, AgentError.AgentCreationVetoed> =>
      Effect.zipRight(
        registry.announce(entry.entry).pipe(
          Effect.mapError((cause) => new AgentError.AgentCreationVetoed({ id: entry.agent.id, cause }))
        ),
        startSession(entry, source)
      )

    // uninterruptible: a caller that already is (the factory's publication) pays no mask (B1)
    const announce = (entry: AgentEntry, source: Source): Effect.Effect<void, AgentError.AgentCreationVetoed> =>
      Effect.withFiberRuntime((_, status) =>
        RuntimeFlags.interruption(status.runtimeFlags)
          ? Effect.uninterruptible(Effect.suspend(() => announceNow(entry, source)))
          : announceNow(entry, source)
      )

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

    const lookupNow = (id: SessionId | string): Option.Option<Agent> => {
      const live = registry.unsafeGet(id)
      return live === undefined ? Option.none() : Option.some(live.value)
    }

    const lookup = (id: SessionId | string): Effect.Effect<Option.Option<Agent>> => Effect.sync(() => lookupNow(id))

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
        Effect.suspend(() => {
          if (Option.isSome(slot)) return Effect.fail(new AgentError.FactoryAlreadySet())
          slot = Option.some(installation)
          return Effect.void
        }),
        () =>
          Effect.sync(() => {
            if (Option.isSome(slot) && slot.value === installation) slot = Option.none()
          })
      )
    })

    /**
     * Runs `f` with the installed factory and the caller's Scope (the owner), both read in one
     * operation (B1).
     */
    const withFactory = <A, E, R>(
      f: (factory: AgentFactory, owner: Scope.Scope) => Effect.Effect<A, E, R>
    ): Effect.Effect<A, E | AgentError.NoAgentFactory, R | Scope.Scope> =>
      Effect.withFiberRuntime((fiber) =>
        Option.isNone(slot)
          ? Effect.fail(new AgentError.NoAgentFactory())
          : f(slot.value.factory, Context.unsafeGet(fiber.currentContext, Scope.Scope))
      )

    const installedFactory = Effect.suspend(() =>
      Option.isNone(slot) ? Effect.fail(new AgentError.NoAgentFactory()) : Effect.succeed(slot.value.factory)
    )

    // the spans without Effect.fn's call-site Error and context acquire/release: ≈25 of the ≈200
    // operations of a create+dispose (B1)
    const createSpan = finalizer.withSpanLight("AgentRegistry.create")
    const create = <E, R>(options: CreateOptions<E, R>) =>
      createSpan(withFactory((factory, owner) => factory.create(options, owner, publisher)))

    const resumeSpan = finalizer.withSpanLight("AgentRegistry.resume")
    const resume = <E, R>(options: ResumeOptions<E, R>) =>
      resumeSpan(withFactory((factory, owner) => factory.resume(options, owner, publisher)))

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
        Effect.sync((): SessionStartHook => {
          const hook: SessionStartHook = { run }
          sessionStartHooks = [...sessionStartHooks, hook]
          return hook
        }),
        (hook) =>
          Effect.sync(() => {
            sessionStartHooks = sessionStartHooks.filter((h) => h !== hook)
          })
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
    untracedLookups.set(service, lookupNow)
    return { registry: service, publisher }
  })

/** The registries built here, with their untraced `get` (a span per creation costs B1 dearly). */
const untracedLookups = new WeakMap<
  AgentRegistry["Type"],
  (id: SessionId | string) => Option.Option<Agent>
>()

/**
 * `registry.get` without its span, for the factory's collision pre-check; falls back to `get` for
 * a registry built elsewhere.
 *
 * @internal
 */
export const lookup = (registry: AgentRegistry["Type"], id: SessionId | string): Effect.Effect<Option.Option<Agent>> => {
  const untraced = untracedLookups.get(registry)
  return untraced === undefined ? registry.get(id) : Effect.sync(() => untraced(id))
}

/**
 * `lookup` as a synchronous read for a registry built here (`undefined` for one built elsewhere,
 * which only `lookup` can ask).
 *
 * @internal
 */
export const unsafeLookup = (
  registry: AgentRegistry["Type"],
  id: SessionId | string
): Option.Option<Agent> | undefined => untracedLookups.get(registry)?.(id)

/** @internal */
export const make = (options?: Options): Effect.Effect<AgentRegistry["Type"], never, Scope.Scope> =>
  Effect.map(makeWithPublisher(options), ({ registry }) => registry)
