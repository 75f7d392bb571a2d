/**
 * The AgentLoop: the default agent factory. It creates and resumes agents in one atomic
 * transaction (PUB, RES) and tears each down in one ordered, memoized quiescence that every owner
 * awaits (LIFE, OWN, FAC-04). Installing its layer installs it in the AgentRegistry's factory slot.
 *
 * @since 0.1.0
 */
import {
  Cause,
  Context,
  Data,
  Deferred,
  Duration,
  Effect,
  Either,
  ExecutionStrategy,
  Exit,
  Fiber,
  FiberId,
  FiberRef,
  FiberRefs,
  FiberSet,
  Layer,
  Option,
  Scope,
  Stream
} from "effect"
import type {
  Agent,
  AgentHandle,
  AgentOptions,
  AgentSetup,
  CreateOptions,
  ResumeOptions,
  SendOptions,
  Setup,
  SpawnOptions
} from "./Agent.js"
import * as AgentError from "./AgentError.js"
import { AgentEvent } from "./AgentEvent.js"
import type { AgentEntry, AgentFactory, AgentPublisher } from "./AgentRegistry.js"
import { AgentRegistry, currentInitiatorRef } from "./AgentRegistry.js"
import * as internalRegistry from "./internal/agentRegistry.js"
import * as codec from "./internal/eventCodec.js"
import * as Driver from "./internal/driver.js"
import * as Feed from "./internal/feed.js"
import * as internalInbox from "./internal/inbox.js"
import * as fiberModule from "./internal/fiber.js"
import * as internalOptions from "./internal/options.js"
import * as finalizer from "./internal/finalizer.js"
import * as lock from "./internal/lock.js"
import * as internalHooks from "./internal/hooks.js"
import * as internalSession from "./internal/session.js"
import * as internalTools from "./internal/tools.js"
import * as Message from "./Message.js"
import type { SessionId } from "./Message.js"
import { Model } from "./Model.js"
import * as Repair from "./Repair.js"
import * as Session from "./Session.js"
import * as SessionError from "./SessionError.js"
import type { InboxChange } from "./Inbox.js"
import type { InboxTarget, SessionEvent } from "./SessionEvent.js"
import type { SessionWriter } from "./SessionPersistence.js"
import { SessionPersistence } from "./SessionPersistence.js"
import type { SessionEntry } from "./SessionStore.js"
import { SessionStore } from "./SessionStore.js"
import * as Tool from "./Tool.js"

/**
 * The id of the agent whose creation is publishing in this fiber chain: sends from its own hooks
 * do not wait for publication (PUB-11).
 */
const publishingRef = FiberRef.unsafeMake<Option.Option<SessionId>>(Option.none())

/** Set while a `commit` runs: a create or dispose from inside it would deadlock, so it dies. */
const inCommitRef = FiberRef.unsafeMake(false)

/**
 * The creations and teardowns this fiber chain is running. A teardown requested from inside one of
 * them (an owner Scope closed during setup, a `dispose` from the agent's own setup finalizer) starts
 * the teardown but does not await it: it would await itself.
 */
const ownRef = FiberRef.unsafeMake<ReadonlySet<object>>(new Set())

const withOwn = (build: object) => finalizer.locallyWith(ownRef, (own) => new Set([...own, build]))

/**
 * The AgentLoop service: the factory it installed, for users that want to call it directly.
 *
 * @since 0.1.0
 * @category services
 */
export class AgentLoop extends Context.Tag("effect-agent/AgentLoop")<AgentLoop, AgentFactory>() {}

/** CORE-08, PUB-10: the options as their Schema decodes them, or `InvalidAgentOptions` naming each bad field. */
const validateOptions: (options: AgentOptions | undefined) => Either.Either<AgentOptions, AgentError.InvalidAgentOptions> =
  internalOptions.decodeAgentOptions

/** The route of the last `request/config` of a log (RES-07/08). */
const storedRoute = (events: ReadonlyArray<SessionEvent>): Partial<Tool.Route> => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type === "request/config") {
      const data = event.data as {
        readonly provider: string
        readonly model: string
        readonly maxTokens?: number
        readonly system?: string
      }
      return {
        provider: data.provider,
        model: data.model,
        ...(data.maxTokens !== undefined ? { maxTokens: data.maxTokens } : {}),
        ...(data.system !== undefined ? { system: data.system } : {})
      }
    }
  }
  return {}
}

const statusOf = (event: AgentEvent) =>
  event._tag === "AgentStatusChanged" ? Option.some(event.status) : Option.none()

/** An inbox change as the agent's live event. */
const inboxEvent = (agent: SessionId, change: InboxChange): AgentEvent => {
  switch (change._tag) {
    case "Inserted":
      return AgentEvent.InboxInserted({ agent, target: change.target, messages: change.messages })
    case "Discarded":
      return AgentEvent.InboxDiscarded({ agent, target: change.target, ids: change.ids, outcome: change.outcome })
    case "Claimed":
      return AgentEvent.InboxClaimed({ agent, turn: change.turn, messages: change.messages })
  }
}

/**
 * Why a creation stops before it completes: the factory closed before it entered
 * (`AgentLoopInactive`, FAC-04), or its teardown began — an owner closed — before it was published
 * (`AgentCreationVetoed{cause: AgentInactive}`, in both `CreateError` and `ResumeError`).
 */
type Abort = AgentError.AgentLoopInactive | AgentError.AgentCreationVetoed

/** What a creation built, for the transaction and the teardown. */
interface Build {
  readonly id: SessionId
  /**
   * Setup's resources and child agents: made on first use (most agents have neither, B1), closed
   * by the teardown only. Once the teardown passed it, a Scope made late is made closed.
   */
  agentScope: Scope.CloseableScope | undefined
  isAgentScopeClosed: boolean
  /** The writer and the session's resources: closed by the teardown only. */
  readonly sessionScope: Scope.CloseableScope
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
  driver: Driver.Driver | undefined
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

const noTools: ReadonlyArray<Tool.Any> = []

/** Registrations on an agent's own registries are refused once it is inactive. */
const isActiveOf = (build: Build) => Effect.sync(() => build.driver === undefined || build.driver.isActive())

const toolsOf = (build: Build): Tool.ToolRegistryShape =>
  build.tools ??= internalTools.makeToolRegistry({ isActive: isActiveOf(build), id: build.id })

const hooksOf = (build: Build): internalHooks.LoopHooksInstance =>
  build.hooks ??= internalHooks.makeLoopHooks({ isActive: isActiveOf(build), id: build.id })

/**
 * Options of the AgentLoop layer ({@link layerWith}).
 *
 * @since 0.2.0
 * @category models
 */
export interface AgentLoopOptions {
  /**
   * How long a teardown (`dispose`, an owner Scope closing, the layer's release) may take before its
   * owners are released with `AgentDisposeError{cause: TeardownTimeout}` (CORE-06): a persistence
   * whose write stalls forever cannot hang them. The agent leaves the registry then; its session
   * stays locked until the stalled write settles. Default 30 seconds.
   */
  readonly teardownTimeout?: Duration.DurationInput | undefined
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<
  AgentFactory,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model | Scope.Scope
> = Effect.suspend(() => makeWith({}))

/**
 * `make` with options.
 *
 * @since 0.2.0
 * @category constructors
 */
export const makeWith = (options: AgentLoopOptions): Effect.Effect<
  AgentFactory,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model | Scope.Scope
> => Effect.gen(function*() {
  const teardownTimeout = Duration.decode(options.teardownTimeout ?? Duration.seconds(30))
  const registry = yield* AgentRegistry
  const store = yield* SessionStore
  const model = yield* Model
  const persistence = yield* Effect.serviceOption(SessionPersistence)
  const globalTools = yield* Effect.serviceOption(Tool.ToolRegistry)
  const globalHooks = yield* Effect.serviceOption(Tool.LoopHooks)
  const runtime = yield* Effect.runtime<never>()
  // what every background fiber starts with: the factory's FiberRefs, never a caller's (§6.3, CORE-01)
  const backgroundRefs = fiberModule.isolatedRefs(runtime, [currentInitiatorRef, publishingRef, inCommitRef, ownRef])
  // the registry-wide critical section of PUB step 4: entered from the transaction's uninterruptible
  // region; only the wait for it is interruptible (PUB-06), by the transaction's restore
  const critical = lock.make()
  // creations in flight, and what the factory's finalizer awaits until none is left (plain cells:
  // each change is one synchronous step)
  let inFlight = 0
  let drained: Deferred.Deferred<void> | undefined = undefined
  let active = true
  const live = new Set<Build>()
  /** The teardowns (and their watcher), owned by the factory's Scope (CORE-01). */
  const teardowns = yield* FiberSet.make<unknown, unknown>()
  const runInTeardowns = yield* FiberSet.runtime(teardowns)<never>()
  const clock = yield* Effect.clock
  /** Teardowns that timed out and still run (CORE-06). */
  const timedOut = new Set<Build>()

  // ---------------------------------------------------------------------------------------------
  // teardown (LIFE-01..06)

  /** Stops a creation that has not entered yet; the first reason wins. */
  const abortCreation = (build: Build, reason: Abort) =>
    Effect.suspend(() => {
      build.aborted ??= reason
      return build.creating === undefined ? Effect.void : Fiber.interruptFork(build.creating)
    })

  /** The error of a creation whose teardown began before it was published. */
  const inactive = (build: Build): Abort =>
    new AgentError.AgentCreationVetoed({ id: build.id, cause: new AgentError.AgentInactive({ id: build.id }) })

  /**
   * A creation still in flight is stopped if it has not entered yet, and awaited either way: the
   * teardown never runs beside a creation of the same agent (PUB-06, FAC-04). Its setup is
   * interrupted at once; the library's own steps before it finish and are then rolled back.
   */
  const awaitCreation = (build: Build): Effect.Effect<void> => {
    if (build.isSettled) return Effect.void
    // made before anything yields, so the attempt settling meanwhile completes it
    const settled = build.settled ??= Deferred.unsafeMake<void>(FiberId.none)
    return Effect.zipRight(abortCreation(build, inactive(build)), Deferred.await(settled))
  }

  /** A step whose failure is kept for the `AgentDisposeError` (LIFE-03) instead of failing its finalizer. */
  const recorded = (failures: Array<Cause.Cause<unknown>>, step: Effect.Effect<void, unknown>): Effect.Effect<void> =>
    Effect.catchAllCause(step, (cause) =>
      Effect.sync(() => {
        failures.push(cause)
      }))

  /**
   * LIFE-01 step 1: stop the driver with `disposed` (keep-inbox) and wait until its activity
   * converged. The wait is the one interruptible point of a teardown: only the factory's FiberSet
   * interrupts it, when the runtime is released after the teardown timed out (CORE-06).
   */
  const stopDriver = (driver: Driver.Driver, failures: Array<Cause.Cause<unknown>>) =>
    Effect.suspend(() =>
      // a driver that never had an activity has nothing to wait for, and its stop cannot fail (B1)
      driver.neverActive() ? driver.stop : recorded(failures, Effect.interruptible(driver.stop))
    )

  /** LIFE-01 step 2: setup's resources and child agents are released. */
  const closeAgentScope = (agentScope: Scope.CloseableScope, failures: Array<Cause.Cause<unknown>>) =>
    recorded(failures, Scope.close(agentScope, Exit.void))

  /** LIFE-01 step 3: the agent leaves the registry (`AgentDisposed` if announced); its feed ends. Idempotent. */
  const detachAgent = (build: Build, publisher: AgentPublisher): Effect.Effect<void> => {
    const detached = build.agentEntry === undefined ? Effect.void : publisher.detach(build.agentEntry)
    // the last event and the end in one operation; nothing is built when nobody listens (B1)
    const feed = build.feed
    return feed === undefined
      ? detached
      : Effect.zipRight(detached, feed.endWith(() => AgentEvent.AgentDisposed({ agent: build.id })))
  }

  /** LIFE-01 step 4: the session leaves the store (`SessionDisposed` if announced). Idempotent. */
  const detachSession = (build: Build): Effect.Effect<void> =>
    build.sessionEntry === undefined ? Effect.void : build.sessionEntry.detach

  /**
   * LIFE-01 step 5: an unpublished new session is discarded, and the session Scope closed: the
   * session is closed and its writer released (SES-04).
   *
   * CORE-06: the close runs in a fiber forked into the session Scope itself (CORE-01): `forkIn`'s
   * finalizer skips the fiber that closes the Scope, and nothing else closes it, so the fiber lives
   * exactly until the close is done. The teardown awaits it interruptibly: the runtime's release
   * can abandon a teardown whose close waits on a stalled write (the release stays bounded), and
   * the close goes on by itself; an abandoned teardown does not await it at all. Either way the
   * writer (lock, lease) is held until the stalled write settled, then released (PERS-01).
   */
  const releaseWriter = (build: Build, failures: Array<Cause.Cause<unknown>>) =>
    Effect.suspend(() => {
      const closing = Effect.forkIn(Scope.close(build.sessionScope, Exit.void), build.sessionScope)
      if (build.isAbandoned) {
        return Effect.zipRight(
          closing,
          Effect.logWarning(
            `agent ${build.id}: teardown abandoned after its timeout; the session stays locked until its write settles`
          )
        )
      }
      // a session sealed before its writer fiber started has no write to wait on: the close runs
      // here (a fork costs B1 ~35 operations)
      const session = build.agent?.session
      const closed = session === undefined || internalSession.core(session).sealIfIdle()
        ? recorded(failures, Scope.close(build.sessionScope, Exit.void))
        : recorded(failures, Effect.flatMap(closing, (fiber) => Effect.interruptible(Fiber.join(fiber))))
      return build.createMode && !build.published && build.writer !== undefined
        ? Effect.zipRight(recorded(failures, build.writer.discard), closed)
        : closed
    })

  /**
   * The agent's lifecycle Scope (CORE-02): the LIFE-01 steps are its finalizers, added in reverse
   * order, so that closing it — sequentially — runs them in order. Made when the teardown starts
   * (after its creation settled), so an idle agent holds none (B2) and only the steps that apply
   * are added (B1). A step that dies fails the close (every later step still runs); the failures of
   * the stop, scope and writer steps are recorded (LIFE-03). The factory's bookkeeping, the last
   * step, follows the close. Makes the Scope, adds the steps and closes it.
   */
  const closeLifecycle = (build: Build, publisher: AgentPublisher, failures: Array<Cause.Cause<unknown>>) => {
    const inOrder: Array<Effect.Effect<void>> = []
    if (build.driver !== undefined) inOrder.push(stopDriver(build.driver, failures))
    const agentScope = build.agentScope
    // from here on a late agent Scope is made closed (`agentScopeOf`)
    build.isAgentScopeClosed = true
    if (agentScope !== undefined) inOrder.push(closeAgentScope(agentScope, failures))
    inOrder.push(detachAgent(build, publisher))
    // LIFE-01's "detach session (the writer is released and the session closed)" is one step, so one
    // finalizer (B1: a finalizer costs ≈8 Effect operations to add and to run)
    const writerReleased = releaseWriter(build, failures)
    inOrder.push(build.sessionEntry === undefined ? writerReleased : Effect.zipRight(build.sessionEntry.detach, writerReleased))
    return Effect.flatMap(Scope.make(ExecutionStrategy.sequential), (lifecycle) => {
      // `addFinalizerExit` (`addFinalizer` wraps each step in an `asVoid`, an operation more per step
      // when the Scope closes; the steps are `Effect<void>` already; B1), from the last step to the first
      const last = inOrder[inOrder.length - 1]!
      let added: Effect.Effect<void> = Scope.addFinalizerExit(lifecycle, () => last)
      for (let i = inOrder.length - 2; i >= 0; i--) {
        const step = inOrder[i]!
        added = Effect.zipRight(added, Scope.addFinalizerExit(lifecycle, () => step))
      }
      return Effect.zipRight(added, Scope.close(lifecycle, Exit.void))
    })
  }

  /** What every owner gets (LIFE-02/03): a dying step as it is; recorded failures in one `AgentDisposeError`. */
  const outcomeOf = (
    build: Build,
    closed: Exit.Exit<void>,
    failures: ReadonlyArray<Cause.Cause<unknown>>
  ): Exit.Exit<void, AgentError.AgentDisposeError> => {
    // LIFE-03: every failure is kept, in order, in one Cause
    const failed = failures.length === 0
      ? undefined
      : new AgentError.AgentDisposeError({
        id: build.id,
        cause: failures.reduce((acc, next) => Cause.sequential(acc, next))
      })
    if (Exit.isFailure(closed)) {
      // a step that died (a bug, or a publisher that dies) is every owner's outcome too
      return failed === undefined ? closed : Exit.failCause(Cause.sequential(closed.cause, Cause.fail(failed)))
    }
    return failed === undefined ? Exit.void : Exit.fail(failed)
  }

  /** The owners' outcome, once (first wins: a timeout may have released them already, CORE-06). */
  const settleOutcome = (build: Build, exit: Exit.Exit<void, AgentError.AgentDisposeError>): void => {
    if (build.outcome !== undefined) return
    // the outcome and the owners' wake-up in one synchronous step: none is missed
    build.outcome = exit
    if (build.done !== undefined) Deferred.unsafeDone(build.done, Exit.succeed(exit))
  }

  /** The teardown: `Scope.close` of the lifecycle Scope (CORE-02), then the outcome, then the link. */
  const runTeardown = (build: Build, publisher: AgentPublisher): Effect.Effect<void> =>
    Effect.suspend(() => {
      const failures: Array<Cause.Cause<unknown>> = []
      // one `Effect.exit` for the whole: a step that dies fails the close, and a defect before it
      // (waiting for the creation, making the Scope) leaves `failures` empty, so `outcomeOf` gives it
      // as it is either way (B1)
      const steps = build.isSettled
        ? closeLifecycle(build, publisher, failures)
        : Effect.zipRight(awaitCreation(build), Effect.suspend(() => closeLifecycle(build, publisher, failures)))
      // LIFE-01's last step: the factory's bookkeeping, whatever the close's exit (one handler, B1)
      const bookkeeping = (result: Exit.Exit<void>) => {
        live.delete(build)
        settleOutcome(build, outcomeOf(build, result, failures))
        timedOut.delete(build)
        deadlines.delete(build)
        return Scope.close(build.link, Exit.void)
      }
      return Effect.matchCauseEffect(steps, {
        onFailure: (cause) => bookkeeping(Exit.failCause(cause)),
        onSuccess: () => bookkeeping(Exit.void)
      })
    })

  /**
   * CORE-06: the teardown did not finish within `teardownTimeout` (a durable write stalls). The
   * owners are released with `AgentDisposeError{cause: TeardownTimeout}` and the agent and its
   * session leave the registry and the store; the teardown goes on, and releases the writer once the
   * write settled (PERS-01: a resume meanwhile fails `SessionLocked`).
   */
  const timeOut = (build: Build, publisher: AgentPublisher): Effect.Effect<void> =>
    Effect.suspend(() => {
      if (build.outcome !== undefined) return Effect.void
      timedOut.add(build)
      live.delete(build)
      const timeout = new AgentError.TeardownTimeout({
        id: build.id,
        timeoutMillis: Duration.toMillis(teardownTimeout)
      })
      const released = new AgentError.AgentDisposeError({ id: build.id, cause: timeout })
      // each detach may die (a publisher's bug): logged, and the owners are released whatever
      // happened (LIFE-02: none waits forever); they are released after the detaches, so an owner
      // that wakes finds the entry gone (LIFE-04)
      return Effect.zipRight(
        Effect.zipRight(
          unlessDies(build, "detach from the registry", detachAgent(build, publisher)),
          unlessDies(build, "detach from the session store", detachSession(build))
        ),
        Effect.logWarning(timeout.message)
      ).pipe(Effect.ensuring(Effect.sync(() => settleOutcome(build, Exit.fail(released)))))
    })

  /** `step` of a timed-out teardown, its defect logged: the watcher runs on for later teardowns (CORE-06). */
  const unlessDies = (build: Build, what: string, step: Effect.Effect<void>): Effect.Effect<void> =>
    Effect.catchAllCause(
      step,
      (cause) => Effect.logError(`agent ${build.id}: ${what} failed at the teardown timeout`, cause)
    )

  /**
   * CORE-06: the factory closes while a teardown is stalled past its timeout. Its session gives up
   * on the stalled write (its callers fail, so the agent's activity converges and the teardown ends)
   * and keeps its writer: the write may still land, so nobody else may write (PERS-01).
   */
  const abandon = (build: Build): void => {
    build.isAbandoned = true
    if (build.agent !== undefined) {
      internalSession.core(build.agent.session).abandon(
        `agent ${build.id}: the runtime was released while a write was stalled past the teardown timeout`
      )
    }
  }

  /** The FiberRefs of a teardown: the factory's, in its own `ownRef` region for its whole life. */
  const teardownRefs = (build: Build) =>
    FiberRefs.updateAs(backgroundRefs, { fiberId: FiberId.none, fiberRef: ownRef, value: new Set([build.own]) })

  /**
   * Runs the single teardown in a fiber of the factory's FiberSet (CORE-01: it outlives no Scope,
   * and the factory's close awaits it), started at once and uninterruptible from its first
   * instruction (LIFE-02), in its own `ownRef` region, with the factory's FiberRefs (never an
   * owner's). One that does not finish at once is watched for its timeout (CORE-06).
   */
  const forkTeardown = (build: Build, publisher: AgentPublisher): void => {
    const refs = teardownRefs(build)
    runInTeardowns(Effect.uninterruptible(runTeardown(build, publisher)), {
      immediate: true,
      updateRefs: (_, fiberId) => FiberRefs.forkAs(refs, fiberId)
    })
    if (build.outcome === undefined) watchDeadline(build, publisher)
  }

  // CORE-06: one watcher fiber per factory (forked on first use) releases the owners of each
  // teardown that outlives `teardownTimeout`. Deadlines are added in order, so the oldest is first.
  const deadlines = new Map<Build, { readonly at: number; readonly publisher: AgentPublisher }>()
  let watcher: Fiber.RuntimeFiber<unknown, unknown> | undefined
  /** Set while the watcher waits for a deadline to watch. */
  let watcherWake: Deferred.Deferred<void> | undefined

  const watchDeadline = (build: Build, publisher: AgentPublisher): void => {
    deadlines.set(build, { at: clock.unsafeCurrentTimeMillis() + Duration.toMillis(teardownTimeout), publisher })
    if (watcher === undefined) {
      // interruptible whatever the runtime's flags: the FiberSet's close ends it
      watcher = runInTeardowns(Effect.interruptible(Effect.forever(watchOnce)), {
        updateRefs: (_, fiberId) => FiberRefs.forkAs(backgroundRefs, fiberId)
      })
    } else if (watcherWake !== undefined) {
      Deferred.unsafeDone(watcherWake, Exit.void)
      watcherWake = undefined
    }
  }

  /** Waits for the oldest deadline (or for one to watch), then times out what is past it. */
  const watchOnce: Effect.Effect<void> = Effect.suspend(() => {
    const oldest = deadlines.entries().next()
    if (oldest.done === true) return Deferred.await(watcherWake = Deferred.unsafeMake<void>(FiberId.none))
    const [build, deadline] = oldest.value
    const left = deadline.at - clock.unsafeCurrentTimeMillis()
    if (left > 0) return Effect.sleep(Duration.millis(left))
    deadlines.delete(build)
    // a defect must not end the single watcher: later teardowns still time out (CORE-06)
    return unlessDies(build, "the teardown timeout", timeOut(build, deadline.publisher))
  })

  /**
   * Starts the single teardown (once) and awaits its outcome (LIFE-02) — unless this fiber chain
   * runs this agent's own creation or teardown, which the teardown itself awaits: then it only
   * starts it.
   */
  const startTeardown = (
    fiber: Fiber.RuntimeFiber<unknown, unknown>,
    build: Build,
    publisher: AgentPublisher
  ): Effect.Effect<void, AgentError.AgentDisposeError> => {
    if (!build.started) {
      build.started = true
      forkTeardown(build, publisher)
    }
    if (fiber.getFiberRef(ownRef).has(build.own)) return Effect.void
    // the outcome, once known (a teardown with nothing to wait for finished already), is the Exit
    // itself (an Exit is an Effect): no await needed
    if (build.outcome !== undefined) return build.outcome
    return Effect.flatten(Deferred.await(build.done ??= Deferred.unsafeMake(fiber.id())))
  }

  const teardown = (build: Build, publisher: AgentPublisher) =>
    Effect.withFiberRuntime<void, AgentError.AgentDisposeError>((fiber) => startTeardown(fiber, build, publisher))

  /** What owners' finalizers run: they cannot fail, so they log a failed teardown. */
  const ownerFinalizer = (build: Build, publisher: AgentPublisher): Effect.Effect<void> =>
    Effect.withFiberRuntime((fiber) => {
      const outcome = startTeardown(fiber, build, publisher)
      // nothing to await, or a teardown that already succeeded: no handler needed (B1)
      if (outcome === Effect.void || (Exit.isExit(outcome) && Exit.isSuccess(outcome))) return Effect.void
      // a defect too: the owner's close goes on
      return Effect.catchAllCause(outcome, (cause) => Effect.logWarning(`agent ${build.id}: teardown failed`, cause))
    })

  // ---------------------------------------------------------------------------------------------
  // building an agent

  const buildAgent = (
    build: Build,
    session: Session.Session,
    options: AgentOptions,
    parentAgent: Agent | undefined,
    route: Partial<Tool.Route>,
    publisher: AgentPublisher,
    replayed?: internalInbox.Projection
  ) =>
    // no generator: plain constructors around the inbox's one operation (B1)
    Effect.suspend(() => {
      // plain constructors: the feed and the driver only allocate (B1)
      const feed = Feed.makeUnsafe<AgentEvent>()
      build.feed = feed
      // every live event names the initiator of the fiber chain that caused it, when there is one (§6)
      const emit = (event: AgentEvent) =>
        Effect.flatMap(FiberRef.get(currentInitiatorRef), (initiator) => {
          const named = Option.isSome(initiator) && event.initiator === undefined
            ? Data.struct({ ...event, initiator: initiator.value.id })
            : event
          return Effect.zipRight(feed.publish(named), publisher.publish(named))
        })
      const inboxOptions: internalInbox.InboxOptions = {
        onChange(change) {
          return emit(inboxEvent(build.id, change))
        },
        // publication only: it never writes to the inbox (CORE-07's guard is for users' observers)
        trustedObserver: true
      }
      const finish = (inbox: internalInbox.InboxInternal) => {
        // the agent's own tool and hook registries are built on first use (B1, B2)
        const runners = internalHooks.lazyRunners(Option.getOrUndefined(globalHooks), () => build.hooks)
        const allTools = Effect.suspend(() => {
          const own = build.tools === undefined ? Effect.succeed(noTools) : build.tools.list
          return Option.isSome(globalTools)
            ? Effect.zipWith(globalTools.value.list, own, internalTools.resolveTools)
            : Effect.map(own, (perAgent) => internalTools.resolveTools([], perAgent))
        })
        let agent: Agent | undefined
        const driver = Driver.unsafeMake({
          id: build.id,
          session,
          inbox,
          options,
          model,
          tools: allTools,
          toSchema: Tool.toSchema,
          decodeArguments: Tool.decodeArguments,
          hooks: runners,
          emit,
          withInitiator(self) {
            return registry.withInitiator(agent!)(self)
          },
          agent() {
            return agent!
          },
          forkDrain(drain) {
            return fiberModule.forkIn(drain, build.sessionScope, backgroundRefs)
          },
          storedRoute: route,
          publishing: publishingRef
        })
        build.driver = driver
        // built on demand: an Error per agent would cost its stack trace on every create (B1)
        const inactiveError = () => new AgentError.AgentInactive({ id: build.id })
        // OWN-03: the child's owner is this agent's Scope; with `resume: true` a stored child is
        // resumed under the same owner (PKG-03)
        const spawn = <E, R>(
          { resume, ...spawnOptions }: SpawnOptions<E, R> & { readonly resume?: boolean | undefined }
        ): Effect.Effect<AgentHandle, AgentError.CreateError | AgentError.ResumeError | E, Exclude<R, Scope.Scope>> =>
          Effect.suspend(() =>
            driver.isActive()
              ? Effect.flatMap(agentScopeOf(build), (agentScope) => {
                const childOptions = { ...spawnOptions, parentAgent: agent! }
                return Scope.extend(
                  resume === true ? registry.resumeOrCreate(childOptions) : registry.create(childOptions),
                  agentScope
                )
              })
              : Effect.fail(inactiveError())
          )
        const fork: Agent["fork"] = ({ childId, upTo, ...rest }) =>
          Effect.suspend(() =>
            driver.isActive()
              ? registry.create({ ...rest, sessionId: childId, fork: { from: session, upTo } })
              : Effect.fail(inactiveError())
          )
        let statusChanges: Agent["statusChanges"] | undefined
        agent = {
          id: build.id,
          options,
          session,
          inbox,
          status: driver.status,
          // built on first use: most agents are never observed (B2)
          get statusChanges() {
            return statusChanges ??= Stream.filterMap(feed.stream, statusOf)
          },
          get events() {
            return feed.stream
          },
          get subscribe() {
            return feed.subscribe
          },
          send(message: Message.UserMessage, second?: SendOptions | InboxTarget | undefined, wake?: boolean) {
            return typeof second === "string"
              ? driver.send(message, second, wake === true)
              : driver.send(message, second?.target ?? "next-turn", second?.wake ?? true)
          },
          followup(message) {
            return driver.send(message, "next-turn", true)
          },
          steer(message) {
            return driver.send(message, "next-step", true)
          },
          // HOST-03
          get wake() {
            return driver.wake
          },
          inject(message) {
            return driver.send(message, "next-step", false)
          },
          cancel(cause, cancelOptions) {
            return driver.cancel(cause, cancelOptions)
          },
          whenIdle: driver.whenIdle,
          runMaintenance: driver.runMaintenance,
          spawn,
          fork,
          get tools() {
            return toolsOf(build)
          },
          get hooks() {
            return hooksOf(build)
          }
        }
        // HOST-02: whoever hosts the agent reads how many watch it, however they got it
        Feed.attach(agent, feed)
        const setupView: AgentSetup = {
          id: build.id,
          session,
          get tools() {
            return toolsOf(build)
          },
          get hooks() {
            return hooksOf(build)
          },
          spawn,
          inbox: { append: inbox.append, prepend: inbox.prepend }
        }
        build.agent = agent
        return { agent, setupView, parentAgent } as const
      }
      // a resumed session's log was replayed already (B4); a new one has nothing to replay (B1):
      // either way its inbox is built in this operation
      if (replayed !== undefined) {
        return Effect.succeed(finish(internalInbox.unsafeMakeReplayed(session, replayed, inboxOptions)))
      }
      const fresh = internalInbox.unsafeMakeFresh(session, inboxOptions)
      return fresh !== undefined
        ? Effect.succeed(finish(fresh))
        : Effect.map(internalInbox.make(session, inboxOptions), finish)
    })

  /**
   * Steps 4–6 of the transaction (PUB): critical section, then uninterruptible publication.
   * Runs inside `uninterruptibleMask`; `restore` is used only around `commit`.
   */
  const publish = <E, C>(
    build: Build,
    session: Session.Session,
    commit: Effect.Effect<void, E> | undefined,
    parentAgent: Agent | undefined,
    source: "startup" | "resume",
    collision: () => C,
    publisher: AgentPublisher,
    restore: <A, E2, R>(effect: Effect.Effect<A, E2, R>) => Effect.Effect<A, E2, R>
  ): Effect.Effect<void, E | C | Abort | AgentError.AgentCreationVetoed> => {
    const agent = build.agent!
    const enterBoth = Effect.matchEffect(store.enter(session), {
      onFailure: () => Effect.fail(collision()),
      onSuccess: (sessionEntry) => {
        build.sessionEntry = sessionEntry
        return Effect.matchEffect(publisher.enter(agent, Option.fromNullable(parentAgent)), {
          onFailure: () => Effect.fail(collision()),
          onSuccess: (agentEntry) => {
            build.agentEntry = agentEntry
            build.entered = true
            return Effect.void
          }
        })
      }
    })
    // the abort checks are plain reads; without a commit nothing runs between them, so one is enough
    const section = Effect.suspend((): Effect.Effect<void, E | C | Abort> => {
      const before = unwanted(build)
      if (before !== undefined) return Effect.fail(before)
      if (commit === undefined) return enterBoth
      return Effect.zipRight(
        restore(Effect.locally(commit, inCommitRef, true)),
        Effect.suspend((): Effect.Effect<void, C | Abort> => {
          const after = unwanted(build)
          return after === undefined ? enterBoth : Effect.fail(after)
        })
      )
    })
    // publication: uninterruptible from here on (PUB-06); a teardown requested meanwhile waits for it
    const announce = (sessionEntry: SessionEntry, agentEntry: AgentEntry) =>
      Effect.zipRight(
        store.announce(sessionEntry).pipe(
          Effect.mapError((error) => new AgentError.AgentCreationVetoed({ id: build.id, cause: error.cause }))
        ),
        publisher.announce(agentEntry, source)
      ).pipe(finalizer.locallyWith(publishingRef, () => Option.some(build.id)))
    return Effect.flatMap(critical.withLockFromMask(section, restore), () =>
      Effect.matchCauseEffect(announce(build.sessionEntry!, build.agentEntry!), {
        onFailure: (cause) => Effect.zipRight(build.driver!.open(false), Effect.failCause(cause)),
        onSuccess: () => {
          if (build.started) {
            // an owner closed while the hooks ran: the creation rolls back instead of returning a dead agent
            return Effect.zipRight(build.driver!.open(false), Effect.fail(inactive(build)))
          }
          build.published = true
          return build.driver!.open(true)
        }
      }))
  }

  /** Why the creation must stop: the factory closed, or the creation was aborted (its teardown began). */
  const unwanted = (build: Build): Abort | undefined =>
    build.aborted ?? (active ? undefined : new AgentError.AgentLoopInactive())

  /** Fails when the factory closed or the creation was aborted (its teardown began). */
  const stillWanted = (build: Build): Effect.Effect<void, Abort> =>
    Effect.suspend(() => {
      const abort = unwanted(build)
      return abort === undefined ? Effect.void : Effect.fail(abort)
    })

  /** Runs `effect` in one child fiber that an abort interrupts, and fails with the abort's reason. */
  const abortable = <A, E, R>(build: Build, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | Abort, R> =>
    Effect.zipRight(
      stillWanted(build),
      Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(Effect.fork(restore(effect)), (child) => {
          build.creating = child
          // an abort that came between the fork and here found no fiber to interrupt
          const awaited = build.aborted === undefined
            ? Fiber.await(child)
            : Effect.zipRight(Fiber.interruptFork(child), Fiber.await(child))
          return restore(awaited).pipe(
            Effect.onInterrupt(() => Fiber.interrupt(child)),
            Effect.flatMap((exit): Effect.Effect<A, E | Abort> => {
              build.creating = undefined
              if (Exit.isSuccess(exit)) return Effect.succeed(exit.value)
              return build.aborted !== undefined && Cause.isInterruptedOnly(exit.cause)
                ? Effect.fail(build.aborted)
                : Effect.failCause(exit.cause)
            })
          )
        })
      )
    )

  /**
   * Step 0 of the transaction: the session Scope, and the `link` forked from the owner, whose only
   * finalizer starts or awaits the teardown; the factory keeps the agent in `live` for its own
   * close. The session and agent Scopes are not forked from the owner: only the teardown closes
   * them, in LIFE-01 order, whatever the owner's finalization strategy (an owner closing forks in
   * parallel would otherwise close them beside the teardown), and a closed fork of the owner costs
   * its removal from the owner (B1). The owner's close reaches them through the link, first.
   * Runs in the creation's `ownRef` region: if the owner is already closed, the link's finalizer
   * runs at once (the creation is aborted before it acquires anything) and must not await the
   * teardown.
   */
  const makeBuild = (
    id: SessionId,
    owner: Scope.Scope,
    publisher: AgentPublisher,
    own: object
  ) =>
    // no generator (B1)
    Effect.flatMap(Scope.make(ExecutionStrategy.sequential), (sessionScope) =>
      Effect.flatMap(Scope.fork(owner, ExecutionStrategy.sequential), (link) => {
        const build: Build = {
          id,
          agentScope: undefined,
          isAgentScopeClosed: false,
          sessionScope,
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
        }
        live.add(build)
        // one finalizer value serves the owner's link and the factory's close (an Effect is a
        // description: it runs once per owner, and the teardown it starts is memoized)
        build.release = ownerFinalizer(build, publisher)
        // `addFinalizerExit`: the release is `Effect<void>` already (`addFinalizer` adds an `asVoid`, B1)
        const release = build.release
        return Effect.as(Scope.addFinalizerExit(link, () => release), build)
      }))

  /**
   * The agent Scope, made on first use (setup, `spawn`). Once the teardown passed it, the Scope is
   * made closed, so what is acquired into it is released at once (as in a closed fork).
   */
  const agentScopeOf = (build: Build): Effect.Effect<Scope.Scope> =>
    Effect.suspend(() => {
      if (build.agentScope !== undefined) return Effect.succeed(build.agentScope)
      return Effect.flatMap(Scope.make(ExecutionStrategy.sequential), (made) => {
        // another fiber made one meanwhile: keep that one
        if (build.agentScope !== undefined) return Effect.as(Scope.close(made, Exit.void), build.agentScope)
        build.agentScope = made
        return build.isAgentScopeClosed ? Effect.as(Scope.close(made, Exit.void), made) : Effect.succeed(made)
      })
    })

  /** Leaves the count of creations in flight; the last one out wakes the factory's close (FAC-04). */
  const leaveInFlight = (): void => {
    inFlight--
    if (inFlight === 0 && drained !== undefined) Deferred.unsafeDone(drained, Exit.void)
  }

  /** The attempt finished: a teardown waiting for it may proceed. */
  const settle = (build: Build): void => {
    build.isSettled = true
    if (build.settled !== undefined) Deferred.unsafeDone(build.settled, Exit.void)
  }

  /**
   * Why a create or resume is refused before it starts: from inside a commit it would deadlock the
   * registry (a defect), and a closed factory makes nothing. Read in the caller's operation (B1).
   */
  const refusal = (
    fiber: Fiber.RuntimeFiber<unknown, unknown>
  ): Effect.Effect<never, AgentError.AgentLoopInactive> | undefined => {
    if (fiber.getFiberRef(inCommitRef)) {
      return Effect.dieMessage("an agent was created from inside a commit, which would deadlock the registry")
    }
    return active ? undefined : Effect.fail(new AgentError.AgentLoopInactive())
  }

  /**
   * Runs the user's setup so that an abort stops it at once (it may wait on anything). The steps
   * before it are the library's own and finite: an abort during them is seen right after them
   * (B1: no fiber is forked for a creation without setup, whose next check is the critical section's).
   */
  const runSetup = <E, R>(build: Build, setup: Setup<E, R> | undefined, view: AgentSetup) =>
    setup === undefined ? Effect.succeed(undefined) : Effect.zipRight(
      stillWanted(build),
      abortable(
        build,
        Effect.flatMap(agentScopeOf(build), (agentScope) =>
          Effect.map(
            finalizer.extendScope(setup(view), agentScope),
            (result) => (result === undefined ? undefined : result.commit)
          ))
      )
    )

  const handleOf = (build: Build, publisher: AgentPublisher): AgentHandle => ({
    agent: build.agent!,
    dispose: Effect.withFiberRuntime((fiber) =>
      fiber.getFiberRef(inCommitRef)
        ? Effect.dieMessage("an agent was disposed from inside a commit, which would deadlock the registry")
        : startTeardown(fiber, build, publisher)
    )
  })

  /**
   * Runs a creation; rolls back on failure or interruption before publication completed. The whole
   * attempt runs in the creation's `ownRef` region; it is settled before the rollback awaits the
   * teardown (which waits for the attempt to settle).
   */
  const transaction = <A, E, R>(
    id: SessionId,
    owner: Scope.Scope,
    publisher: AgentPublisher,
    body: (
      build: Build,
      restore: <X, EX, RX>(effect: Effect.Effect<X, EX, RX>) => Effect.Effect<X, EX, RX>
    ) => Effect.Effect<A, E, R>
  ) =>
    // the mask's body runs when the effect runs, already uninterruptible: no suspend needed (B1)
    Effect.uninterruptibleMask((restore): Effect.Effect<A, E | AgentError.AgentLoopInactive, R> => {
      if (!active) return Effect.fail(new AgentError.AgentLoopInactive())
      inFlight++
      const own = {}
      let build: Build | undefined
      // uninterruptible throughout, so leaving the count needs no acquire/release (B1)
      return Effect.matchCauseEffect(
        withOwn(own)(Effect.flatMap(makeBuild(id, owner, publisher, own), (made) => {
          build = made
          return body(made, restore)
        })),
        {
          onFailure: (cause) => {
            if (build === undefined) {
              leaveInFlight()
              return Effect.failCause(cause)
            }
            settle(build)
            return Effect.zipRight(
              Effect.ignore(teardown(build, publisher)),
              Effect.suspend(() => {
                leaveInFlight()
                return Effect.failCause(cause)
              })
            )
          },
          onSuccess: (value) => {
            settle(build!)
            leaveInFlight()
            return Effect.succeed(value)
          }
        }
      )
    })

  // ---------------------------------------------------------------------------------------------
  // create (PUB) and resume (RES)

  /**
   * Fails with `collision()` when `id` is live in the registry, else runs `then`: a plain read for
   * a registry built here (B1), an effect for one built elsewhere.
   */
  const unlessLive = <A, E, R, C>(
    id: SessionId,
    collision: () => C,
    then: Effect.Effect<A, E, R>
  ): Effect.Effect<A, E | C, R> =>
    Effect.flatMap(
      internalRegistry.lookup(registry, id),
      (found): Effect.Effect<A, E | C, R> => (Option.isSome(found) ? Effect.fail(collision()) : then)
    )

  /**
   * PKG-06: a create whose provider and model are both set asks the model, when it can validate
   * routes, before anything is stored or published; a refusal is `InvalidAgentOptions` with the
   * model's reason. A missing route is not refused (RES-07/08: `NO_ROUTE` at the first request).
   */
  const routeAccepted = <A, E, R>(
    options: AgentOptions,
    then: Effect.Effect<A, E, R>
  ): Effect.Effect<A, E | AgentError.InvalidAgentOptions, R> => {
    if (model.validateRoute === undefined || options.provider === undefined || options.model === undefined) return then
    return Effect.zipRight(
      Effect.mapError(
        model.validateRoute(options.provider, options.model),
        (refused) => new AgentError.InvalidAgentOptions({ reason: refused.message })
      ),
      then
    )
  }

  const create = <E, R>(
    options: CreateOptions<E, R>,
    owner: Scope.Scope,
    publisher: AgentPublisher
  ): Effect.Effect<AgentHandle, AgentError.CreateError | E, Exclude<R, Scope.Scope>> =>
    // the checks before the transaction are plain reads in one operation (B1)
    Effect.withFiberRuntime((fiber) => {
      const refused = refusal(fiber)
      if (refused !== undefined) return refused
      const parsedId = Message.sessionId(options.sessionId)
      if (Either.isLeft(parsedId)) return Effect.fail(parsedId.left)
      const id = parsedId.right
      const validated = validateOptions(options.options)
      if (Either.isLeft(validated)) return Effect.fail(validated.left)
      const agentOptions = validated.right
      if (options.seed !== undefined && options.fork !== undefined) {
        return Effect.fail(new AgentError.InvalidAgentOptions({ reason: "give either a seed or a fork, not both" }))
      }
      if (options.seed !== undefined && Option.isSome(Repair.isInsideOpenTurn(options.seed, options.seed.length))) {
        return Effect.fail(new AgentError.InvalidAgentOptions({ reason: "the seed ends inside an open turn" }))
      }
      const collision = () => new AgentError.AgentAlreadyExists({ id, where: "live" })
      return routeAccepted(agentOptions, unlessLive(
        id,
        collision,
        transaction(id, owner, publisher, (build, restore) =>
          Effect.flatMap(
            // steps 1–3 run with the session Scope as their Scope (the writer is acquired into it),
            // entered outside `restore`, where it needs no mask (B1); setup gets the agent Scope
            finalizer.extendScope(restore(Effect.gen(function*() {
              const abort = unwanted(build)
              if (abort !== undefined) return yield* Effect.fail(abort)
              const planned = yield* store.prepare({
                sessionId: id,
                meta: options.meta,
                seed: options.seed,
                fork: options.fork
              }).pipe(
                Effect.catchTag("SessionAlreadyLive", () => Effect.fail(collision()))
              )
              let writer: SessionWriter | undefined
              if (Option.isSome(persistence)) {
                writer = yield* persistence.value.create(planned.header).pipe(
                  Effect.catchTags({
                    SessionAlreadyExists: () => Effect.fail(new AgentError.AgentAlreadyExists({ id, where: "stored" })),
                    SessionLocked: () => Effect.fail(new AgentError.AgentAlreadyExists({ id, where: "locked" }))
                  })
                )
                build.writer = writer
                build.createMode = true
              }
              // the session's writer fiber starts with the background FiberRefs, not this caller's (B2, §6.3)
              const session = yield* internalSession.fromPlanIn(build.sessionScope, planned, writer, backgroundRefs)
              // a new session has no inbox events after its seed, so its replay cannot fail
              const built = yield* buildAgent(build, session, agentOptions, options.parentAgent, {}, publisher).pipe(
                Effect.catchTag("InvalidInboxLog", Effect.die)
              )
              const commit = yield* runSetup(build, options.setup, built.setupView)
              return { session, commit, parentAgent: built.parentAgent }
            })), build.sessionScope),
            ({ commit, parentAgent, session }) =>
              Effect.as(
                publish(build, session, commit, parentAgent, "startup", collision, publisher, restore),
                handleOf(build, publisher)
              )
          )
        )
      ))
    })

  const resume = <E, R>(options: ResumeOptions<E, R>, owner: Scope.Scope, publisher: AgentPublisher) =>
    Effect.gen(function*() {
      yield* Effect.withFiberRuntime<void, AgentError.AgentLoopInactive>((fiber) => refusal(fiber) ?? Effect.void)
      const id = yield* Message.sessionId(options.sessionId)
      const agentOptions = yield* validateOptions(options.options)
      if (Option.isNone(persistence)) return yield* new AgentError.PersistenceNotConfigured({ id })
      if (Option.isSome(yield* internalRegistry.lookup(registry, id)) || Option.isSome(yield* store.get(id))) {
        return yield* new SessionError.SessionAlreadyLive({ id })
      }
      return yield* transaction(id, owner, publisher, (build, restore) =>
        Effect.gen(function*() {
          const { session, commit } = yield* restore(Effect.zipRight(
            stillWanted(build),
            Effect.gen(function*() {
              // RES-02: the exclusive writer first, reading the log once
              const opened = yield* finalizer.extendScope(persistence.value.openWrite(id), build.sessionScope)
              build.writer = opened.writer
              const stored = opened.stored
              // RES-03: repair closers, then replay-validate the inbox on the repaired log, in memory
              const closers = Repair.closers(stored.events, { seedLength: stored.header.seedLength })
              const events = closers.length === 0 ? stored.events : [...stored.events, ...closers]
              // the replay is then the agent's inbox: the log is folded once (B4, B8)
              const replayed = yield* internalInbox.replay(id, events, stored.header.seedLength)
              if (closers.length > 0) {
                yield* codec.checkBeforeWrite(closers) // DUR-01: what the reader accepts, or nothing
                yield* opened.writer.append(closers as unknown as readonly [SessionEvent, ...Array<SessionEvent>])
              }
              const session = yield* internalSession.makeIn(build.sessionScope, {
                header: stored.header,
                events,
                writer: opened.writer,
                refs: backgroundRefs
              })
              const built = yield* buildAgent(
                build,
                session,
                agentOptions,
                options.parentAgent,
                storedRoute(events),
                publisher,
                replayed
              )
              const commit = yield* runSetup(build, options.setup, built.setupView)
              return { session, commit }
            })
          ))
          yield* publish(
            build,
            session,
            commit,
            options.parentAgent,
            "resume",
            () => new SessionError.SessionAlreadyLive({ id }),
            publisher,
            restore
          )
          return handleOf(build, publisher)
        })
      )
    })

  const factory: AgentFactory = {
    create: (options, owner, publisher) => create(options, owner, publisher),
    resume: (options, owner, publisher) => resume(options, owner, publisher)
  }

  // FAC-04: on close, first the slot clears (setFactory's release runs first: it was added last),
  // then creations not entered yet are stopped, those in flight awaited, and every agent this
  // factory made is disposed, whoever created it (each agent's `release`, as its owner would).
  yield* Effect.addFinalizer(() =>
    Effect.gen(function*() {
      active = false
      for (const build of live) {
        if (!build.entered && !build.isSettled) yield* abortCreation(build, new AgentError.AgentLoopInactive())
      }
      const waitFor = yield* Deferred.make<void>()
      drained = waitFor
      if (inFlight > 0) yield* Deferred.await(waitFor)
      const disposals = Array.from(live, (build) => build.release)
      // each bounded by the teardown timeout (CORE-06)
      yield* Effect.all(disposals, { discard: true, concurrency: "unbounded" })
      // teardowns still stalled after their timeout are abandoned: the FiberSet's close interrupts
      // their wait, and they keep their writer
      for (const build of timedOut) abandon(build)
    })
  )
  yield* registry.setFactory(factory)
  return factory
})

/**
 * The default factory as a layer: installs itself in the registry's factory slot; closing it
 * disposes every agent it made (FAC-04).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<
  AgentLoop,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model
> = Layer.scoped(AgentLoop, make)

/**
 * The default factory as a layer, with options (e.g. `teardownTimeout`, CORE-06).
 *
 * @example
 * ```ts
 * import { AgentLoop } from "effect-agent"
 *
 * const loop = AgentLoop.layerWith({ teardownTimeout: "10 seconds" })
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layerWith = (options: AgentLoopOptions): Layer.Layer<
  AgentLoop,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model
> => Layer.scoped(AgentLoop, makeWith(options))
