/**
 * The AgentRegistry: the service of live agents (its state in `Ref`s, each change one `Ref.modify`: CORE-03),
 * with atomic publication, ownership queries, lifecycle events, the factory slot and the initiator
 * (SPEC §6).
 *
 * @since 0.1.0
 */
import type { Effect, FiberRef, Option, Scope, Stream } from "effect"
import { Context, Layer } from "effect"
import type { Agent, AgentHandle, CreateOptions, ResumeOptions } from "./Agent.js"
import type * as AgentError from "./AgentError.js"
import type { AgentEvent } from "./AgentEvent.js"
import * as internal from "./internal/agent/registry.js"
import type { SessionId } from "./Message.js"

/**
 * An entered (not yet necessarily announced) registry entry.
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentEntry {
  readonly agent: Agent
  /** @internal */
  readonly entry: internal.AgentLifecycleEntry
}

/**
 * What the factory publishes through; handed to it by `setFactory`, not public on the registry.
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentPublisher {
  readonly enter: (agent: Agent, parent: Option.Option<Agent>) => Effect.Effect<AgentEntry, AgentError.AgentAlreadyExists>
  readonly announce: (
    entry: AgentEntry,
    source: "startup" | "resume"
  ) => Effect.Effect<void, AgentError.AgentCreationVetoed>
  /** Idempotent, exact entry, deferred while announcing. */
  readonly detach: (entry: AgentEntry) => Effect.Effect<void>
  /**
   * The live agent of `id` in the registry that handed out this publisher, as `registry.get` finds
   * it but without its span: a factory's cheap check before it builds anything (`enter` stays the
   * authoritative one). Optional: a factory falls back to `registry.get` when it is absent.
   *
   * @since 0.3.0
   */
  readonly lookup?: ((id: SessionId | string) => Effect.Effect<Option.Option<Agent>>) | undefined
  /** Publishes one live event of an agent on the registry feed (the agent's own feed mirrors here). */
  readonly publish: (event: AgentEvent) => Effect.Effect<void>
}

/**
 * What `AgentLoop` (or a user's loop) implements.
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentFactory {
  readonly create: <E, R>(
    options: CreateOptions<E, R>,
    owner: Scope.Scope,
    publisher: AgentPublisher
  ) => Effect.Effect<AgentHandle, AgentError.CreateError | E, Exclude<R, Scope.Scope>>
  readonly resume: <E, R>(
    options: ResumeOptions<E, R>,
    owner: Scope.Scope,
    publisher: AgentPublisher
  ) => Effect.Effect<AgentHandle, AgentError.ResumeError | E, Exclude<R, Scope.Scope>>
}

/**
 * @since 0.1.0
 * @category services
 */
export class AgentRegistry extends Context.Tag("effect-agent/AgentRegistry")<AgentRegistry, {
  /** A bare Agent: never the dispose capability (OWN-05). */
  readonly get: (id: SessionId | string) => Effect.Effect<Option.Option<Agent>>
  /** Registration order. */
  readonly list: Effect.Effect<ReadonlyArray<Agent>>
  /** Entries whose parent is unset or no longer live (REG-07). */
  readonly roots: Effect.Effect<ReadonlyArray<Agent>>
  /**
   * Every live agent in registration order with the id of its owner: the recorded parent while both
   * are live (REG-07), none for a root. One snapshot, as `roots` and `isOwnedBy` judge it.
   *
   * @since 0.2.0
   */
  readonly owners: Effect.Effect<ReadonlyArray<{ readonly agent: Agent; readonly owner: Option.Option<SessionId> }>>
  /** True only while both exact entries are live and `parent` is the recorded parent (REG-07). */
  readonly isOwnedBy: (id: SessionId | string, parent: Agent) => Effect.Effect<boolean>
  /** Creates an agent owned by the caller's Scope, through the factory slot. */
  readonly create: <E = never, R = never>(
    options: CreateOptions<E, R>
  ) => Effect.Effect<AgentHandle, AgentError.CreateError | E, Scope.Scope | Exclude<R, Scope.Scope>>
  /**
   * Resumes a stored session (RES), owned by the caller's Scope. With `parentAgent` the agent is a
   * *detached* child of it, as with `create` (OWN-03, REG-07): owned by the parent only while both
   * are live. For a child disposed with its parent, use `parent.spawn({ sessionId, resume: true })`.
   */
  readonly resume: <E = never, R = never>(
    options: ResumeOptions<E, R>
  ) => Effect.Effect<AgentHandle, AgentError.ResumeError | E, Scope.Scope | Exclude<R, Scope.Scope>>
  /**
   * Resumes the session when it is stored (ignoring `seed`, `meta` and `fork`), else creates it;
   * `AgentSessionStart.source` tells which. It never hands out an agent that is live already: a
   * handle carries `dispose`, which only the agent's owner has (OWN-05). So an id live in this
   * process fails `SessionAlreadyLive` (`AgentAlreadyExists{where:"live"}` without persistence)
   * and the live agent is left untouched; `get(id)` gives the bare live agent. A stored session
   * that cannot be read is a loud error, never replaced.
   */
  readonly resumeOrCreate: <E = never, R = never>(
    options: CreateOptions<E, R>
  ) => Effect.Effect<
    AgentHandle,
    AgentError.CreateError | AgentError.ResumeError | E,
    Scope.Scope | Exclude<R, Scope.Scope>
  >
  /** Registers a prebuilt agent until the Scope closes. */
  readonly register: (
    agent: Agent,
    options?: { readonly parentAgent?: Agent | undefined }
  ) => Effect.Effect<void, AgentError.AgentAlreadyExists | AgentError.AgentCreationVetoed, Scope.Scope>
  /** Installs the factory until the Scope closes (FAC-01). */
  readonly setFactory: (factory: AgentFactory) => Effect.Effect<void, AgentError.FactoryAlreadySet, Scope.Scope>
  /** Events of all agents; observers are contained. */
  readonly events: Stream.Stream<AgentEvent>
  /** The eager form of `events`. */
  readonly subscribe: Effect.Effect<Stream.Stream<AgentEvent>, never, Scope.Scope>
  /** Serial; a failure vetoes the creation (REG-02). */
  readonly onCreated: (hook: (agent: Agent) => Effect.Effect<void, unknown>) => Effect.Effect<void, never, Scope.Scope>
  /** Awaited, contained, never a veto. */
  readonly onSessionStart: (
    hook: (agent: Agent, source: "startup" | "resume") => Effect.Effect<void, unknown>
  ) => Effect.Effect<void, never, Scope.Scope>
  readonly currentInitiator: Effect.Effect<Option.Option<Agent>>
  readonly requireInitiator: Effect.Effect<Agent, AgentError.NoInitiator>
  readonly withInitiator: (
    agent: Agent
  ) => <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E | AgentError.InitiatorScopeClosed, R>
  readonly withoutInitiator: <A, E, R>(
    self: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | AgentError.InitiatorScopeClosed, R>
}>() {}

/**
 * Options of {@link make} and {@link layerWith}.
 *
 * @since 0.1.0
 * @category options
 */
export interface RegistryOptions {
  /** Mirror `ModelDelta` events on `events` (off by default: deltas are many and cheap only locally). */
  readonly includeModelDeltas?: boolean | undefined
}

/**
 * Builds a registry that lives as long as the Scope. When the Scope closes, new initiator regions
 * fail `InitiatorScopeClosed`, the close waits for the regions in flight (INIT-05, INIT-06) and
 * then ends `events`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: (options?: RegistryOptions | undefined) => Effect.Effect<AgentRegistry["Type"], never, Scope.Scope> =
  internal.make

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<AgentRegistry> = Layer.scoped(AgentRegistry, internal.make())

/**
 * @since 0.1.0
 * @category layers
 */
export const layerWith = (options: RegistryOptions): Layer.Layer<AgentRegistry> =>
  Layer.scoped(AgentRegistry, internal.make(options))

/**
 * The agent whose work the current fiber does (SPEC §6.3): `None` outside any `withInitiator`.
 * Read it with `FiberRef.get`; it is only ever set by `withInitiator`/`withoutInitiator` (with
 * `Effect.locally`), so it is inherited by forked fibers and restored when a region ends.
 *
 * @since 0.1.0
 * @category initiator
 */
export const currentInitiatorRef: FiberRef.FiberRef<Option.Option<Agent>> = internal.currentInitiatorRef
