/**
 * The AgentRegistry implementation: live agents on the one lifecycle registry, the registry-wide
 * event feed, the factory slot and the initiator regions with their drain (SPEC §6). Its state is
 * in `Ref`s, each change one `Ref.modify` (CORE-03): the live entries (in the lifecycle registry),
 * the factory slot, the session-start hooks and the region gate.
 *
 * @internal
 */
import { Context, Deferred, Effect, FiberRef, FiberRefs, Option, Ref, RuntimeFlags, Scope } from "effect"
import type { Fiber, Tracer } from "effect"
import { currentInitiatorRef } from "./initiator.js"
import type { Agent, AgentHandle, CreateOptions, ResumeOptions } from "../../Agent.js"
import * as AgentError from "../../AgentError.js"
import { AgentEvent } from "../../AgentEvent.js"
import type { AgentEntry, AgentFactory, AgentPublisher, AgentRegistry } from "../../AgentRegistry.js"
import type { SessionId } from "../../Message.js"
import * as SessionError from "../../SessionError.js"
import * as Feed from "../feed.js"
import * as finalizer from "../finalizer.js"
import * as lifecycle from "../lifecycle.js"
import * as observability from "../observability.js"

export { currentInitiatorRef } from "./initiator.js"

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

/**
 * OBS-01: what `effect-agent.create`/`effect-agent.resume` say of the agent: its id (as given), its
 * parent, and the initiator of the fiber chain that creates it.
 */
const creationAttributes = (
  span: Tracer.Span,
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  options: { readonly sessionId: string; readonly parentAgent?: Agent | undefined }
): void => {
  span.attribute(observability.attr.agentId, options.sessionId)
  if (options.parentAgent !== undefined) span.attribute(observability.attr.parentId, options.parentAgent.id)
  const initiator = fiber.getFiberRef(currentInitiatorRef)
  if (Option.isSome(initiator)) span.attribute(observability.attr.initiator, initiator.value.id)
}

// the spans without Effect.fn's call-site Error and context acquire/release: ≈25 of the ≈200
// operations of a create+dispose (B1); OBS-01's names and attributes (set in place)
const createSpan = finalizer.withSpanLight("effect-agent.create")
const resumeSpan = finalizer.withSpanLight("effect-agent.resume")

/** @internal */
export interface Options {
  readonly includeModelDeltas?: boolean | undefined
}

/** The registry's state record: its feed, its live entries and its `Ref`s (CORE-03). */
interface RegistryState {
  readonly includeModelDeltas: boolean
  readonly feed: Feed.Feed<AgentEvent>
  readonly entries: lifecycle.LifecycleRegistry<Agent, Option.Option<ParentLink>>
  readonly sessionStartHooks: Ref.Ref<ReadonlyArray<SessionStartHook>>
  readonly slot: Ref.Ref<Option.Option<Installation>>
  /** Changed in one synchronous step at a time (what a `Ref` gives, read without an Effect, B5). */
  gate: RegionGate
  /** This registry's region nesting depth of the current fiber (inherited by forked children). */
  readonly depthRef: FiberRef.FiberRef<number>
}

// -------------------------------------------------------------------------------------------------
// Entries and publication (REG)

const toEntry = (entry: AgentLifecycleEntry): AgentEntry => ({ agent: entry.value, entry })

/** The parent link, resolved against the entries live at enter time (REG-01). */
const linkTo = (parent: Option.Option<Agent>) =>
(live: (key: string) => AgentLifecycleEntry | undefined): Option.Option<ParentLink> => {
  if (Option.isNone(parent)) return Option.none()
  const current = live(parent.value.id)
  return Option.some({
    agent: parent.value,
    entry: current !== undefined && current.value === parent.value ? Option.some(current) : Option.none()
  })
}

/** REG-01: enters a live entry (not announced yet); a taken id is `AgentAlreadyExists`. */
const enter = (
  s: RegistryState,
  agent: Agent,
  parent: Option.Option<Agent>
): Effect.Effect<AgentEntry, AgentError.AgentAlreadyExists> =>
  agent.id !== agent.session.id
    ? Effect.dieMessage(
      `bug: agent id ${JSON.stringify(agent.id)} does not match session id ${JSON.stringify(agent.session.id)}`
    )
    : s.entries.enter({
      key: agent.id,
      value: agent,
      parentOf: linkTo(parent),
      onEntered: toEntry,
      onTaken: () => new AgentError.AgentAlreadyExists({ id: agent.id, where: "live" })
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
const startSession = (s: RegistryState, entry: AgentEntry, source: Source) =>
  Effect.flatMap(Ref.get(s.sessionStartHooks), (hooks) =>
    Effect.withFiberRuntime<void>((fiber) => {
      const started = s.feed.publish(
        AgentEvent.AgentSessionStart({ agent: entry.agent.id, source, ...initiatorIn(fiber) })
      )
      return hooks.length === 0
        ? started
        : Effect.zipRight(started, runSessionStartHooks(entry.agent, source, hooks))
    }))

/**
 * REG-02: announces the entry (`AgentCreated`, the vetoing onCreated hooks). A detach requested during
 * the onCreated hooks already removed the entry (with its AgentDisposed) when the announcement
 * settled: the session start never follows a disposal.
 */
const announceNow = (
  s: RegistryState,
  entry: AgentEntry,
  source: Source
): Effect.Effect<void, AgentError.AgentCreationVetoed> =>
  Effect.matchEffect(s.entries.announce(entry.entry), {
    onFailure: (cause) => Effect.fail(new AgentError.AgentCreationVetoed({ id: entry.agent.id, cause })),
    onSuccess: (isLive) => isLive ? startSession(s, entry, source) : Effect.void
  })

/** The publisher a factory is handed (REG): uninterruptible announce, model deltas filtered. */
const publisherOf = (s: RegistryState): AgentPublisher => ({
  enter: (agent, parent) => enter(s, agent, parent),
  // uninterruptible: a caller that already is (the factory's publication) pays no mask (B1)
  announce: (entry, source) =>
    Effect.withFiberRuntime((_, status) =>
      RuntimeFlags.interruption(status.runtimeFlags)
        ? Effect.uninterruptible(Effect.suspend(() => announceNow(s, entry, source)))
        : announceNow(s, entry, source)
    ),
  detach: (entry) => s.entries.detach(entry.entry),
  // ARCH-01: the factory's collision pre-check reads the registry that called it, without a span (B1)
  lookup: (id) => lookupIn(s, id),
  publish: (event) => event._tag === "ModelDelta" && !s.includeModelDeltas ? Effect.void : s.feed.publish(event)
})

// -------------------------------------------------------------------------------------------------
// Queries (REG-07, OWN-05)

/** Whether the recorded parent is still live, judged against one snapshot of the live entries. */
const parentIsLive = (link: ParentLink, live: (key: string) => AgentLifecycleEntry | undefined): boolean => {
  const current = live(link.agent.id)
  if (current === undefined) return false
  return Option.isSome(link.entry) ? current === link.entry.value : current.value === link.agent
}

const lookupIn = (s: RegistryState, id: SessionId | string): Effect.Effect<Option.Option<Agent>> =>
  s.entries.withLive((live) => {
    const entry = live(id)
    return Effect.succeed(entry === undefined ? Option.none() : Option.some(entry.value))
  })

/** REG-07: the live agents whose parent is not live (one snapshot of the entries). */
const rootsOf = (s: RegistryState) =>
  Effect.map(s.entries.entries, (entries) => {
    const byKey = new Map(entries.map((entry) => [entry.key, entry] as const))
    const live = (key: string) => byKey.get(key)
    return entries
      .filter((entry) => Option.isNone(entry.parent) || !parentIsLive(entry.parent.value, live))
      .map((entry) => entry.value)
  })

/** REG-07 for every live entry at once, against one snapshot (the inspector's tree, INS-01). */
const ownersOf = (s: RegistryState) =>
  Effect.map(s.entries.entries, (entries) => {
    const byKey = new Map(entries.map((entry) => [entry.key, entry] as const))
    const live = (key: string) => byKey.get(key)
    return entries.map((entry) => ({
      agent: entry.value,
      owner: Option.isSome(entry.parent) && parentIsLive(entry.parent.value, live)
        ? Option.some(entry.parent.value.agent.id)
        : Option.none()
    }))
  })

/** OWN-05: both entries judged against one snapshot of the live entries. */
const isOwnedByIn = (s: RegistryState, id: SessionId | string, parent: Agent) =>
  s.entries.withLive((live) => {
    const child = live(id)
    if (child === undefined || Option.isNone(child.parent)) return Effect.succeed(false)
    const link = child.parent.value
    return Effect.succeed(link.agent === parent && parentIsLive(link, live))
  })

// -------------------------------------------------------------------------------------------------
// Factory slot (FAC-01, FAC-02)

/** FAC-01: installs `factory` until the caller's Scope closes; a second one fails `FactoryAlreadySet`. */
const installFactory = (s: RegistryState, factory: AgentFactory) => {
  const installation: Installation = { factory }
  return Effect.acquireRelease(
    Effect.flatten(Ref.modify(s.slot, (current): [
      Effect.Effect<void, AgentError.FactoryAlreadySet>,
      Option.Option<Installation>
    ] =>
      Option.isSome(current)
        ? [Effect.fail(new AgentError.FactoryAlreadySet()), current]
        : [Effect.void, Option.some(installation)]
    )),
    // exact: a later installation (after this one's release) is never removed
    () =>
      Ref.update(
        s.slot,
        (current) => Option.isSome(current) && current.value === installation ? Option.none() : current
      )
  )
}

const installedFactory = (s: RegistryState) =>
  Effect.flatMap(
    Ref.get(s.slot),
    (current) =>
      Option.isNone(current) ? Effect.fail(new AgentError.NoAgentFactory()) : Effect.succeed(current.value.factory)
  )

/** FAC-02: runs `f` with the installed factory and the caller's Scope (the owner). */
const withFactory = <A, E, R>(
  s: RegistryState,
  f: (factory: AgentFactory, owner: Scope.Scope) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | AgentError.NoAgentFactory, R | Scope.Scope> =>
  Effect.flatMap(Ref.get(s.slot), (current) =>
    Option.isNone(current)
      ? Effect.fail(new AgentError.NoAgentFactory())
      : Effect.withFiberRuntime((fiber) =>
        f(current.value.factory, Context.unsafeGet(fiber.currentContext, Scope.Scope))
      ))

/** PKG-03: resume the stored session, else create it; a concurrent creation that stored it first is resumed. */
const resumeOrCreateWith = <E, R>(s: RegistryState, publisher: AgentPublisher, options: CreateOptions<E, R>) =>
  Effect.gen(function*() {
    const factory = yield* installedFactory(s)
    const owner = yield* Effect.scope
    const resumeOptions: ResumeOptions<E, R> = {
      sessionId: options.sessionId,
      options: options.options,
      parentAgent: options.parentAgent,
      setup: options.setup
    }
    const resumeStored = resumeSpan(
      factory.resume(resumeOptions, owner, publisher),
      (span, fiber) => creationAttributes(span, fiber, options)
    )
    // A concurrent creation stored the session between our resume and create: resume it, once.
    const createFresh = createSpan(
      factory.create(options, owner, publisher),
      (span, fiber) => creationAttributes(span, fiber, options)
    ).pipe(
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

// -------------------------------------------------------------------------------------------------
// Initiator regions (INIT-01..06)

/** Leaves a region: the close's wait ends when the regions it waits for are done (INIT-05). */
const leaveRegion = (s: RegistryState): Effect.Effect<void> => {
  const state = s.gate
  const next: RegionGate = { ...state, active: state.active - 1 }
  s.gate = next
  return state.drain !== undefined && next.active <= state.drain.depth
    ? Deferred.succeed(state.drain.done, undefined)
    : Effect.void
}

/** The initiator and the region depth of the current fiber, both set in one step. */
const setRegionRefs = (
  s: RegistryState,
  initiator: Option.Option<Agent>,
  depth: number
): Effect.Effect<void> =>
  Effect.updateFiberRefs((fiberId, refs) =>
    FiberRefs.updateAs(FiberRefs.updateAs(refs, { fiberId, fiberRef: currentInitiatorRef, value: initiator }), {
      fiberId,
      fiberRef: s.depthRef,
      value: depth
    })
  )

/**
 * INIT-01: `self` as `initiator`'s work, in a region the registry's close awaits (INIT-05): what
 * `acquireUseRelease` with `Effect.locally` of both FiberRefs does — enter (refused once closed), set,
 * run `self` restorably, then restore the two refs and leave whatever its exit — in a few steps
 * instead of ≈60 operations per call (the drain wraps every turn in it, B5).
 */
const regionOf = (s: RegistryState) =>
<A, E, R>(
  initiator: Option.Option<Agent>,
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, E | AgentError.InitiatorScopeClosed, R> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.withFiberRuntime<A, E | AgentError.InitiatorScopeClosed, R>((fiber) => {
      if (s.gate.closed) return Effect.fail(new AgentError.InitiatorScopeClosed())
      s.gate = { ...s.gate, active: s.gate.active + 1 }
      const before = fiber.getFiberRef(currentInitiatorRef)
      const depth = fiber.getFiberRef(s.depthRef)
      return Effect.zipRight(
        setRegionRefs(s, initiator, depth + 1),
        Effect.onExit(restore(self), () => Effect.zipRight(setRegionRefs(s, before, depth), leaveRegion(s)))
      )
    })
  )

/**
 * INIT-05/06: when the registry's Scope closes, refuse new regions and await those in flight, minus
 * the closing fiber's own (a region that closes the registry must not wait for itself).
 */
const closeRegions = (s: RegistryState) =>
  Effect.gen(function*() {
    const depth = yield* FiberRef.get(s.depthRef)
    const done = yield* Deferred.make<void>()
    const mustWait = yield* Effect.sync(() => {
      const state = s.gate
      s.gate = state.active > depth
        ? { closed: true, active: state.active, drain: { depth, done } }
        : { ...state, closed: true }
      return state.active > depth
    })
    if (mustWait) yield* Deferred.await(done)
    yield* s.feed.end
  })

// -------------------------------------------------------------------------------------------------
// The service

/** The service over the state: public methods traced (`Effect.fn`), the create path with a light span. */
const serviceOf = (s: RegistryState, publisher: AgentPublisher): AgentRegistry["Type"] => {
  const lookup = (id: SessionId | string) => lookupIn(s, id)
  const region = regionOf(s)
  const currentInitiator = FiberRef.get(currentInitiatorRef)
  return {
    get: Effect.fn("AgentRegistry.get")(function*(id: SessionId | string) {
      return yield* lookup(id)
    }),
    list: Effect.map(s.entries.entries, (entries) => entries.map((entry) => entry.value)),
    roots: rootsOf(s),
    owners: ownersOf(s),
    isOwnedBy: Effect.fn("AgentRegistry.isOwnedBy")(function*(id: SessionId | string, parent: Agent) {
      return yield* isOwnedByIn(s, id, parent)
    }),
    create: (options) =>
      createSpan(
        withFactory(s, (factory, owner) => factory.create(options, owner, publisher)),
        (span, fiber) => creationAttributes(span, fiber, options)
      ),
    resume: (options) =>
      resumeSpan(
        withFactory(s, (factory, owner) => factory.resume(options, owner, publisher)),
        (span, fiber) => creationAttributes(span, fiber, options)
      ),
    resumeOrCreate: Effect.fn("AgentRegistry.resumeOrCreate")(function*<E, R>(options: CreateOptions<E, R>) {
      return yield* resumeOrCreateWith(s, publisher, options)
    }),
    register: Effect.fn("AgentRegistry.register")(function*(
      agent: Agent,
      options?: { readonly parentAgent?: Agent | undefined }
    ) {
      const entry = yield* Effect.uninterruptible(
        Effect.tap(
          enter(s, agent, Option.fromNullable(options?.parentAgent)),
          (entry) => Effect.addFinalizer(() => publisher.detach(entry))
        )
      )
      yield* publisher.announce(entry, "startup")
    }),
    setFactory: Effect.fn("AgentRegistry.setFactory")(function*(factory: AgentFactory) {
      yield* installFactory(s, factory)
    }),
    events: s.feed.stream,
    subscribe: s.feed.subscribe,
    onCreated: Effect.fn("AgentRegistry.onCreated")(function*(hook: (agent: Agent) => Effect.Effect<void, unknown>) {
      yield* s.entries.addHook(hook)
    }),
    onSessionStart: Effect.fn("AgentRegistry.onSessionStart")(function*(
      run: (agent: Agent, source: Source) => Effect.Effect<void, unknown>
    ) {
      yield* Effect.acquireRelease(
        Ref.modify(s.sessionStartHooks, (hooks): [SessionStartHook, ReadonlyArray<SessionStartHook>] => {
          const hook: SessionStartHook = { run }
          return [hook, [...hooks, hook]]
        }),
        (hook) => Ref.update(s.sessionStartHooks, (hooks) => hooks.filter((h) => h !== hook))
      )
    }),
    currentInitiator,
    requireInitiator: Effect.flatMap(
      currentInitiator,
      Option.match({
        onNone: () => Effect.fail(new AgentError.NoInitiator()),
        onSome: Effect.succeed
      })
    ),
    withInitiator: (agent: Agent) => <A, E, R>(self: Effect.Effect<A, E, R>) => region(Option.some(agent), self),
    withoutInitiator: (self) => region(Option.none(), self)
  }
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
    const registryScope = yield* Effect.scope
    const feed = yield* Feed.make<AgentEvent>()
    const s: RegistryState = {
      includeModelDeltas: options?.includeModelDeltas === true,
      feed,
      entries: yield* lifecycle.make<Agent, Option.Option<ParentLink>>({
        announced: (entry) =>
          Effect.withFiberRuntime((fiber) =>
            feed.publish(AgentEvent.AgentCreated({ agent: entry.value.id, ...initiatorIn(fiber) }))
          ),
        disposed: (entry) =>
          Effect.withFiberRuntime((fiber) =>
            feed.publish(AgentEvent.AgentDisposed({ agent: entry.value.id, ...initiatorIn(fiber) }))
          )
      }),
      sessionStartHooks: yield* Ref.make<ReadonlyArray<SessionStartHook>>([]),
      slot: yield* Ref.make(Option.none<Installation>()),
      gate: { closed: false, active: 0, drain: undefined },
      depthRef: FiberRef.unsafeMake(0)
    }
    const publisher = publisherOf(s)
    // `Scope.addFinalizer` (not `Effect.addFinalizer`) so the finalizer sees the closing fiber's
    // FiberRefs, not those of the fiber that built the registry (INIT-05/06)
    yield* Scope.addFinalizer(registryScope, closeRegions(s))
    return { registry: serviceOf(s, publisher), publisher }
  })

/** @internal */
export const make = (options?: Options): Effect.Effect<AgentRegistry["Type"], never, Scope.Scope> =>
  Effect.map(makeWithPublisher(options), ({ registry }) => registry)
