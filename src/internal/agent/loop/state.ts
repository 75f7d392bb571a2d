/**
 * The AgentLoop's state records: `Loop`, one per factory (its services, the creations in flight and
 * the live agents it made, FAC-04; its teardowns' FiberSet and deadlines, CORE-01/06), and `Build`,
 * one per creation (what the transaction built and what the teardown releases, PUB, LIFE). Also the
 * FiberRefs that mark a fiber chain's role: publishing (PUB-11), committing, and the creations and
 * teardowns it runs (LIFE-02).
 *
 * @internal
 */
import type { Cause, Clock, Duration, Fiber, FiberRefs, Runtime } from "effect"
import { Deferred, Effect, ExecutionStrategy, Exit, FiberRef, Option, Scope } from "effect"
import type { Agent } from "../../../Agent.js"
import * as AgentError from "../../../AgentError.js"
import type { AgentEvent } from "../../../AgentEvent.js"
import type { AgentEntry, AgentPublisher } from "../../../AgentRegistry.js"
import type { AgentRegistry } from "../../../AgentRegistry.js"
import type { SessionId } from "../../../Message.js"
import type { Model } from "../../../Model.js"
import type { SessionPersistence, SessionWriter } from "../../../SessionPersistence.js"
import type { SessionEntry, SessionStore } from "../../../SessionStore.js"
import type * as Tool from "../../../Tool.js"
import type { Driver } from "../driver/driver.js"
import type * as Feed from "../../feed.js"
import * as finalizer from "../../finalizer.js"
import type * as internalHooks from "../hooks.js"
import type { Lock } from "../../lock.js"
import type { Telemetry } from "../../observability.js"

/**
 * The id of the agent whose creation is publishing in this fiber chain: sends from its own hooks do
 * not wait for publication (PUB-11).
 *
 * @internal
 */
export const publishingRef = FiberRef.unsafeMake<Option.Option<SessionId>>(Option.none())

/** Set while a `commit` runs: a create or dispose from inside it would deadlock, so it dies. @internal */
export const inCommitRef = FiberRef.unsafeMake(false)

/**
 * The creations and teardowns this fiber chain is running. A teardown requested from inside one of
 * them (an owner Scope closed during setup, a `dispose` from the agent's own setup finalizer) starts
 * the teardown but does not await it: it would await itself (LIFE-02).
 *
 * @internal
 */
export const ownRef = FiberRef.unsafeMake<ReadonlySet<object>>(new Set())

/** Runs an effect in the `ownRef` region of `build`. @internal */
export const withOwn = (build: object) => finalizer.locallyWith(ownRef, (own) => new Set([...own, build]))

/**
 * Why a creation stops before it completes: the factory closed before it entered
 * (`AgentLoopInactive`, FAC-04), or its teardown began — an owner closed — before it was published
 * (`AgentCreationVetoed{cause: AgentInactive}`, in both `CreateError` and `ResumeError`).
 *
 * @internal
 */
export type Abort = AgentError.AgentLoopInactive | AgentError.AgentCreationVetoed

/** The `restore` of the transaction's `uninterruptibleMask`. @internal */
export type Restore = <X, EX, RX>(effect: Effect.Effect<X, EX, RX>) => Effect.Effect<X, EX, RX>

/** What a creation built, for the transaction and the teardown. @internal */
export interface Build {
  readonly id: SessionId
  /**
   * Setup's resources and child agents: made on first use (most agents have neither, B1), closed
   * by the teardown only. Once the teardown passed it, a Scope made late is made closed.
   */
  agentScope: Scope.CloseableScope | undefined
  isAgentScopeClosed: boolean
  /** The writer and the session's resources: closed by the teardown only. */
  readonly sessionScope: Scope.CloseableScope
  /**
   * The agent's lifecycle (CORE-02): each LIFE-01 step is added as its finalizer when the creation
   * acquires what the step releases, so closing it, sequentially, is the teardown.
   */
  readonly lifecycle: Scope.CloseableScope
  /** The failures of the stop, scope and writer steps, for the `AgentDisposeError` (LIFE-03; made on the first). */
  failures: Array<Cause.Cause<unknown>> | undefined
  readonly link: Scope.CloseableScope
  /** What an owner runs to dispose it: the owner Scope's link and the factory's close (FAC-04). */
  release: Effect.Effect<void>
  /** The identity of this creation and its teardown in `ownRef`. */
  readonly own: object
  /** The teardown's outcome once it finished (LIFE-02): what every owner gets. */
  outcome: Exit.Exit<void, AgentError.AgentDisposeError> | undefined
  /**
   * The same outcome for owners that arrive while the teardown runs: made by the first of them,
   * completed when it finishes (a teardown that finishes at once, the usual case, needs none).
   */
  done: Deferred.Deferred<Exit.Exit<void, AgentError.AgentDisposeError>> | undefined
  /** Set (first reason wins) when the creation must stop before it enters (PUB-06, FAC-04). */
  aborted: Abort | undefined
  /** The fiber running steps 1–3 while they run: an abort interrupts it. */
  creating: Fiber.RuntimeFiber<unknown, unknown> | undefined
  /** The creation attempt finished (published, or failed before its rollback). */
  isSettled: boolean
  /** Made by a teardown that must wait for the attempt to settle; completed when it does. */
  settled: Deferred.Deferred<void> | undefined
  /** Both entries were entered: from here the creation completes (PUB-06). */
  entered: boolean
  started: boolean
  /** The factory closed after the teardown timed out: it keeps the writer (CORE-06). */
  isAbandoned: boolean
  writer: SessionWriter | undefined
  createMode: boolean
  driver: Driver | undefined
  agent: Agent | undefined
  feed: Feed.Feed<AgentEvent> | undefined
  sessionEntry: SessionEntry | undefined
  agentEntry: AgentEntry | undefined
  /** The agent stays discoverable for `discard` only while its creation did not complete. */
  published: boolean
  /** The agent's own registries, built on first use. */
  tools: Tool.ToolRegistryShape | undefined
  hooks: internalHooks.LoopHooksInstance | undefined
}

/** A fresh `Build` (nothing acquired but its Scopes). @internal */
export const makeBuildRecord = (
  id: SessionId,
  sessionScope: Scope.CloseableScope,
  lifecycle: Scope.CloseableScope,
  link: Scope.CloseableScope,
  own: object
): Build => ({
  id,
  agentScope: undefined,
  isAgentScopeClosed: false,
  sessionScope,
  lifecycle,
  failures: undefined,
  link,
  release: Effect.void,
  own,
  done: undefined,
  outcome: undefined,
  aborted: undefined,
  creating: undefined,
  isSettled: false,
  settled: undefined,
  entered: false,
  started: false,
  isAbandoned: false,
  writer: undefined,
  createMode: false,
  driver: undefined,
  agent: undefined,
  feed: undefined,
  sessionEntry: undefined,
  agentEntry: undefined,
  published: false,
  tools: undefined,
  hooks: undefined
})

/** A teardown's deadline (CORE-06), with the publisher its timeout detaches the agent from. @internal */
export interface Deadline {
  readonly at: number
  readonly publisher: AgentPublisher
}

/**
 * The factory's state record: its services, and plain cells each changed in one synchronous step.
 *
 * @internal
 */
export interface Loop {
  readonly teardownTimeout: Duration.Duration
  readonly registry: AgentRegistry["Type"]
  readonly store: SessionStore["Type"]
  readonly model: Model["Type"]
  readonly persistence: Option.Option<SessionPersistence["Type"]>
  readonly globalTools: Option.Option<Tool.ToolRegistryShape>
  readonly globalHooks: Option.Option<Tool.LoopHooks["Type"]>
  /** What every background fiber starts with: the factory's FiberRefs, never a caller's (§6.3, CORE-01). */
  readonly backgroundRefs: FiberRefs.FiberRefs
  /** OBS-01/02: the tracer (when spans are made) and Clock of those background fibers. */
  readonly telemetry: Telemetry
  /**
   * The registry-wide critical section of PUB step 4: entered from the transaction's uninterruptible
   * region; only the wait for it is interruptible (PUB-06), by the transaction's restore.
   */
  readonly critical: Lock
  /** Starts a fiber in the factory's FiberSet (its teardowns and their watcher, CORE-01). */
  readonly runInTeardowns: (
    effect: Effect.Effect<unknown, unknown>,
    options?: Runtime.RunForkOptions | undefined
  ) => Fiber.RuntimeFiber<unknown, unknown>
  readonly clock: Clock.Clock
  /** Creations in flight, and what the factory's finalizer awaits until none is left (FAC-04). */
  inFlight: number
  drained: Deferred.Deferred<void> | undefined
  active: boolean
  /** The agents this factory made that were not torn down yet (FAC-04). */
  readonly live: Set<Build>
  /** Teardowns that timed out and still run (CORE-06). */
  readonly timedOut: Set<Build>
  /** CORE-06: the deadlines of running teardowns, oldest first (added in order). */
  readonly deadlines: Map<Build, Deadline>
  /** The one watcher fiber of the deadlines (forked on first use). */
  watcher: Fiber.RuntimeFiber<unknown, unknown> | undefined
  /** Set while the watcher waits for a deadline to watch. */
  watcherWake: Deferred.Deferred<void> | undefined
}

/** The error of a creation whose teardown began before it was published. @internal */
export const inactive = (build: Build): Abort =>
  new AgentError.AgentCreationVetoed({ id: build.id, cause: new AgentError.AgentInactive({ id: build.id }) })

/** Why the creation must stop: the factory closed, or the creation was aborted (its teardown began). @internal */
export const unwanted = (loop: Loop, build: Build): Abort | undefined =>
  build.aborted ?? (loop.active ? undefined : new AgentError.AgentLoopInactive())

/** Fails when the factory closed or the creation was aborted (its teardown began). @internal */
export const stillWanted = (loop: Loop, build: Build): Effect.Effect<void, Abort> =>
  Effect.suspend(() => {
    const abort = unwanted(loop, build)
    return abort === undefined ? Effect.void : Effect.fail(abort)
  })

/** Leaves the count of creations in flight; the last one out wakes the factory's close (FAC-04). @internal */
export const leaveInFlight = (loop: Loop): void => {
  loop.inFlight--
  if (loop.inFlight === 0 && loop.drained !== undefined) Deferred.unsafeDone(loop.drained, Exit.void)
}

/** The attempt finished: a teardown waiting for it may proceed (PUB-06). @internal */
export const settleCreation = (build: Build): void => {
  build.isSettled = true
  if (build.settled !== undefined) Deferred.unsafeDone(build.settled, Exit.void)
}

/**
 * The agent Scope, made on first use (setup, `spawn`, OWN-03). Once the teardown passed it, the
 * Scope is made closed, so what is acquired into it is released at once (as in a closed fork).
 *
 * @internal
 */
export const agentScopeOf = (build: Build): Effect.Effect<Scope.Scope> =>
  Effect.suspend(() => {
    if (build.agentScope !== undefined) return Effect.succeed(build.agentScope)
    return Effect.flatMap(Scope.make(ExecutionStrategy.sequential), (made) => {
      // another fiber made one meanwhile: keep that one
      if (build.agentScope !== undefined) return Effect.as(Scope.close(made, Exit.void), build.agentScope)
      build.agentScope = made
      return build.isAgentScopeClosed ? Effect.as(Scope.close(made, Exit.void), made) : Effect.succeed(made)
    })
  })
