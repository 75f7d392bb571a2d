/**
 * The AgentHost: serving many agents from one process (SPEC §17, HOST-00..05). `host.get(id)`
 * returns the live agent, else resumes it, else creates it — one activation per id however many
 * callers ask at once. The host owns what it activates: agents idle for `idleTimeout` are passivated
 * (disposed, inbox kept) and come back on the next `get`; `maxLive` caps live agents, passivating
 * the least recently used idle ones first; an agent resumed with pending waking input runs it
 * (`agent.wake`); with `recover: true` the host brings back, at start, every stored session that a
 * crash left with an open turn or pending waking input; closing the host drains running turns.
 *
 * @since 0.2.0
 */
import type { Chunk, Duration, Scope, Stream } from "effect"
import { Context, Layer } from "effect"
import type { Effect } from "effect"
import type { Agent, AgentOptions, AgentSetup, RunOptions } from "./Agent.js"
import type * as AgentError from "./AgentError.js"
import type { AgentRegistry } from "./AgentRegistry.js"
import { HostAtCapacity, HostClosed, HostSetupFailed, SessionRemoved } from "./internal/host/errors.js"
import * as internal from "./internal/host/host.js"
import type { InvalidSessionId, SessionId, UserMessage } from "./Message.js"
import type * as Pending from "./Pending.js"
import type { JsonRecord, SessionEvent } from "./SessionEvent.js"
import type * as SessionError from "./SessionError.js"
import type { Session } from "./Session.js"
import type { TurnResult } from "./TurnResult.js"

// the errors live in `internal/host/errors.ts`, where the host's internals import them (ARCH-02)
export {
  /** @since 0.2.0 */
  HostAtCapacity,
  /** @since 0.2.0 */
  HostClosed,
  /** @since 0.2.0 */
  HostSetupFailed,
  /** @since 0.2.0 */
  SessionRemoved
}

/**
 * What `host.eventsFrom` can fail with (EVS-01). Before it emits anything: a bad id
 * (`InvalidSessionId`), a closed host (`HostClosed`), a session neither live nor stored
 * (`SessionNotFound`), a cursor outside `0..length` (`InvalidEventCursor`). At any time: the stored
 * log could not be read (`SessionCorrupt`, `SessionFormatUnsupported`, `PersistenceError`), or the
 * session was removed while the client read it (`SessionRemoved`). A client that reconnects with
 * the seq after the last event it saw loses nothing.
 *
 * @since 0.2.0
 * @category errors
 */
export type EventsFromError =
  | InvalidSessionId
  | HostClosed
  | SessionRemoved
  | SessionError.SessionNotFound
  | SessionError.InvalidEventCursor
  | SessionError.SessionCorrupt
  | SessionError.SessionFormatUnsupported
  | SessionError.PersistenceError

/**
 * What `host.remove` can fail with. `SessionLocked`: another process holds the session.
 *
 * @since 0.2.0
 * @category errors
 */
export type RemoveError =
  | InvalidSessionId
  | HostClosed
  | SessionError.SessionLocked
  | SessionError.SessionCorrupt
  | SessionError.PersistenceError

/**
 * What `host.get` can fail with.
 *
 * @since 0.2.0
 * @category errors
 */
export type GetError =
  | HostAtCapacity
  | HostClosed
  | HostSetupFailed
  | AgentError.CreateError
  | AgentError.ResumeError

/**
 * What `host.pending` can fail with (HIL-06): a bad id, a session neither live nor stored, a stored
 * log that cannot be read.
 *
 * @since 0.3.0
 * @category errors
 */
export type PendingError =
  | InvalidSessionId
  | SessionError.SessionNotFound
  | SessionError.SessionCorrupt
  | SessionError.SessionFormatUnsupported
  | SessionError.PersistenceError

/**
 * What `get` creates an agent with when its session is not stored (HOST-01). The host's own
 * `setup` and `agentOptions` apply to every activation, created or resumed, so an agent comes back
 * after passivation exactly as it was set up.
 *
 * @since 0.2.0
 * @category options
 */
export interface CreateOptions {
  /** Else the host's `agentOptions`. */
  readonly options?: AgentOptions | undefined
  /** Stored in the header. */
  readonly meta?: JsonRecord | undefined
  readonly seed?: ReadonlyArray<SessionEvent> | undefined
  readonly fork?: { readonly from: Session; readonly upTo?: number | undefined } | undefined
}

/**
 * The host's options; every field has the default of HOST-00.
 *
 * @since 0.2.0
 * @category options
 */
export interface HostOptions<R = never> {
  /** An agent idle this long is passivated (HOST-02). Default 5 minutes. */
  readonly idleTimeout?: Duration.DurationInput | undefined
  /** The most agents live at once (HOST-02). Default 10,000. */
  readonly maxLive?: number | undefined
  /** How long `get` waits for a slot when every live agent is busy (HOST-02). Default 30 seconds. */
  readonly activationTimeout?: Duration.DurationInput | undefined
  /** How long closing the host lets running turns finish before it cancels them (HOST-05). Default 30 seconds. */
  readonly drainTimeout?: Duration.DurationInput | undefined
  /** Bring back, at start, every stored session with an open turn or pending waking input (HOST-04). Default false. */
  readonly recover?: boolean | undefined
  /** How many sessions recovery activates at once. Default 16. */
  readonly recoverConcurrency?: number | undefined
  /** Call `agent.wake` on every agent the host resumes (HOST-03). Default true. */
  readonly wakeOnActivate?: boolean | undefined
  /**
   * APP-06: `get`, `use` and `run` of an id that is not stored create it with `agentOptions` (as if
   * given empty create options). Default false: such an id fails `SessionNotFound`, whose message
   * says how to create it.
   *
   * @since 0.3.0
   */
  readonly createOnDemand?: boolean | undefined
  /** The options of every activation (resume: they override the stored route, RES-07). */
  readonly agentOptions?: AgentOptions | undefined
  /** Runs for every activation, created or resumed, like `CreateOptions.setup` (tools, hooks, …). */
  readonly setup?: ((agent: AgentSetup) => Effect.Effect<void, unknown, R | Scope.Scope>) | undefined
}

/**
 * What the start-up recovery did (HOST-04).
 *
 * @since 0.2.0
 * @category models
 */
export interface RecoveryReport {
  /** Sessions that had an open turn or pending waking input, in the order they were found. */
  readonly candidates: ReadonlyArray<SessionId>
  /** Those activated (each was woken: its pending waking input runs). */
  readonly activated: ReadonlyArray<SessionId>
  /** Those that could not be activated, with the reason (they are left as stored). */
  readonly failed: ReadonlyArray<{ readonly id: string; readonly error: unknown }>
}

/**
 * Where `host.eventsInto` hands a session's durable events, in order and each once: `tryDurable` in
 * the committing step (false when it has no room now: those events come again through `durable`),
 * `durable` when the reader reads from the log (it waits for room).
 *
 * @since 0.3.0
 * @category models
 */
export interface EventsSink {
  readonly tryDurable: (events: Chunk.Chunk<SessionEvent>) => boolean
  readonly durable: (events: Chunk.Chunk<SessionEvent>) => Effect.Effect<void>
}

/**
 * The host (HOST-01).
 *
 * @since 0.2.0
 * @category services
 */
export class AgentHost extends Context.Tag("effect-agent/AgentHost")<AgentHost, {
  /**
   * The live agent, else the stored session resumed, else (with `create`) a new agent — one
   * activation per id for any number of concurrent callers, who all get the same agent. Agents are
   * owned by the host; what `get` returns is the bare agent (no dispose). A subscriber of its
   * `events`, `subscribe` or `statusChanges` keeps it from passivating (HOST-02), however it got the
   * agent (`get`, `use`, `registry.get`). Between `get` and a later send the host may passivate an
   * idle agent (the send then fails `AgentInactive`): send through `use` instead.
   */
  readonly get: (id: SessionId | string, create?: CreateOptions | undefined) => Effect.Effect<Agent, GetError>
  /**
   * Gets (or activates, as `get`) the agent and holds it live while `f` runs: a hold counts like a
   * subscriber, so neither the idle timer nor `maxLive` passivates the agent meanwhile, and a send
   * made in `f` never fails `AgentInactive` because the host passivated the agent between the get
   * and the send (HOST-02). Only `passivate(id)`, `remove(id)` and the host's close still dispose it.
   *
   * @since 0.2.0
   */
  readonly use: <A, E, R>(
    id: SessionId | string,
    f: (agent: Agent) => Effect.Effect<A, E, R>,
    create?: CreateOptions | undefined
  ) => Effect.Effect<A, E | GetError, R>
  /**
   * The durable event stream of a session from a cursor (EVS-01): its stored events from `seq` (the
   * seq after the last event a client saw; 0 for all), then each event as it commits, whether the
   * agent is live or not: across passivations and activations, no gap, no duplicate, in order.
   * It neither activates the agent nor keeps it live (HOST-02): while the agent is passivated it
   * waits for the next activation. A slow client never blocks the agent or other clients (what its
   * bounded buffer drops is re-read from the log). It ends when the host closes; when the session
   * is removed while a client reads it, it fails `SessionRemoved`.
   *
   * @since 0.2.0
   */
  readonly eventsFrom: (id: SessionId | string, seq: number) => Stream.Stream<SessionEvent, EventsFromError>
  /**
   * `eventsFrom` without a stream between: the same reader, run in the caller's Scope, hands the
   * events to `sink` (the committed ones in the committing step when it has room) and runs `onLive`
   * each time it begins to follow a live incarnation of the agent (the gateway follows its live
   * events from there). It ends when the host closes and fails as `eventsFrom` does. The host of
   * {@link layer} has it; a gateway reads `eventsFrom` from a host without it, and a wrapper that
   * replaces `eventsFrom` should replace or leave out `eventsInto` too (ARCH-01).
   *
   * @since 0.3.0
   */
  readonly eventsInto?: (
    id: SessionId | string,
    seq: number,
    sink: EventsSink,
    onLive: Effect.Effect<void>
  ) => Effect.Effect<void, EventsFromError, Scope.Scope>
  /**
   * Passivates the agent when it is live (whatever it is doing, as `passivate`) and deletes its
   * stored session; no activation of the id starts meanwhile. Clients of `eventsFrom` for it fail
   * `SessionRemoved`. Removing an id that is not stored is not an error.
   *
   * @since 0.2.0
   */
  readonly remove: (id: SessionId | string) => Effect.Effect<void, RemoveError>
  /**
   * `agent.run` through `use` (APP-05): activates the agent (creating it with `create`, or on demand,
   * APP-06), holds it live while its turn runs, and returns that turn's `TurnResult` (or fails
   * `TurnFailed`, as `run` does).
   *
   * @since 0.3.0
   */
  readonly run: (
    id: SessionId | string,
    message: UserMessage | string,
    options?: RunOptions | undefined,
    create?: CreateOptions | undefined
  ) => Effect.Effect<TurnResult, AgentError.RunError | GetError>
  /**
   * HIL-06: what a person still has to settle in the session — the approvals and questions of its
   * suspended turn, oldest first. A live agent answers from memory; a passive session's items are
   * read from its stored log without activating it (a suspended turn needs no agent to be looked at).
   *
   * @since 0.3.0
   */
  readonly pending: (id: SessionId | string) => Effect.Effect<ReadonlyArray<Pending.Item>, PendingError>
  /** Passivates a live agent now, whatever it is doing (inbox kept, LIFE-06); false when it was not live. */
  readonly passivate: (id: SessionId | string) => Effect.Effect<boolean>
  /** The ids of the live agents, least recently used first. */
  readonly live: Effect.Effect<ReadonlyArray<SessionId>>
  /** Completes when the start-up recovery finished (at once without `recover`). */
  readonly recovery: Effect.Effect<RecoveryReport>
}>() {}

/**
 * The host, owned by the layer's Scope: closing it refuses new activations (`HostClosed`), lets
 * running turns finish for `drainTimeout`, then disposes every agent (turns still running end
 * `aborted{disposed}` and the model sees the shutdown note next time, PKG-05; inboxes are kept).
 * Without a `SessionPersistence` in the context agents cannot come back, so the host never
 * passivates them (`maxLive` still caps them).
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { AgentHost, Message } from "effect-agent"
 *
 * const HostLive = AgentHost.layer({ idleTimeout: "10 minutes", maxLive: 1000, recover: true })
 *
 * const handle = (id: string, text: string) =>
 *   Effect.gen(function*() {
 *     const host = yield* AgentHost.AgentHost
 *     const agent = yield* host.get(id, { options: { provider: "openai", model: "gpt-4o-mini" } })
 *     yield* agent.followup(Message.user(text))
 *   })
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = <R = never>(
  options?: HostOptions<R> | undefined
): Layer.Layer<AgentHost, never, AgentRegistry | Exclude<R, Scope.Scope>> =>
  Layer.scoped(AgentHost, internal.make(options ?? {}))

/**
 * The defaults of HOST-00.
 *
 * @since 0.2.0
 * @category options
 */
export { defaults } from "./internal/host/errors.js"
