/**
 * The AgentHost's activation (HOST-01, HOST-03) and its callers `get` and `use` (HOST-02): one
 * activation per id at a time (single flight), in a fiber of the host's `activations` set whose
 * outcome every caller awaits; a resumed agent is woken so that what a crash interrupted runs.
 *
 * @internal
 */
import type { Context, Scope as ScopeNs } from "effect"
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
  Scope
} from "effect"
import type { Agent, AgentHandle, AgentSetup } from "../../Agent.js"
import type * as AgentHost from "../../AgentHost.js"
import * as HostError from "./errors.js"
import type { SessionId } from "../../Message.js"
import { sessionId as parseSessionId } from "../../Message.js"
import * as SessionError from "../../SessionError.js"
import { idleTimer, release, reserve } from "./passivation.js"
import type { Hosted, HostState, SetupFor } from "./state.js"
import { deleteSlot, quiet, setSlot, signalFreed, touch, viewOf, watchers } from "./state.js"
import * as observability from "../observability.js"

/** The host's `setup` for each activation, in the context the host was built in (HOST-01). @internal */
export const setupForOf = <R>(
  hostSetup: AgentHost.HostOptions<R>["setup"],
  setupContext: Context.Context<Exclude<R, ScopeNs.Scope>>
): SetupFor =>
(id) =>
  hostSetup === undefined ? undefined : (agent: AgentSetup) =>
    hostSetup(agent).pipe(
      Effect.mapError((cause) => new HostError.HostSetupFailed({ id, cause })),
      Effect.provide(setupContext)
    ) as Effect.Effect<void, HostError.HostSetupFailed, ScopeNs.Scope>

/** APP-06: what a `SessionNotFound` from the host says to do. */
const howToCreate = "pass create options to host.get/use/run (e.g. `host.get(id, { options })`), or build the " +
  "host with `createOnDemand: true` to create unknown ids with its agentOptions"

/** Resumes (or, with create options or `createOnDemand`, resumes or creates) the agent into `scope`. */
const open = (s: HostState, id: SessionId, given: AgentHost.CreateOptions | undefined, scope: Scope.Scope) => {
  const setup = s.setupFor(id)
  // APP-06: on demand, an unknown id is created with the host's agent options
  const create = given === undefined && s.settings.createOnDemand ? {} : given
  const opened: Effect.Effect<AgentHandle, AgentHost.GetError, ScopeNs.Scope> = create === undefined
    ? s.registry.resume({ sessionId: id, options: s.agentOptions, setup }).pipe(
      Effect.catchTag("SessionNotFound", (error) =>
        Effect.fail(new SessionError.SessionNotFound({ id: error.id, hint: howToCreate })))
    )
    : s.registry.resumeOrCreate({
      sessionId: id,
      options: create.options ?? s.agentOptions,
      meta: create.meta,
      seed: create.seed,
      fork: create.fork,
      setup
    })
  return Scope.extend(opened, scope)
}

/** Whether a handle's agent was resumed (its log held events before this process took it). */
const wasResumed = (agent: Agent) => agent.session.firstLiveSeq > 0

/** HOST-01: a slot, the agent opened in its own Scope, and (HOST-03) a resumed one woken. */
const activate = (s: HostState, id: SessionId, create: AgentHost.CreateOptions | undefined, deadline: number) =>
  Effect.gen(function*() {
    yield* reserve(s, id, deadline)
    const scope = yield* Scope.fork(s.agentsScope, ExecutionStrategy.sequential)
    const opened = yield* Effect.exit(open(s, id, create, scope))
    if (Exit.isFailure(opened)) {
      yield* Scope.close(scope, Exit.void)
      return yield* Effect.failCause(opened.cause)
    }
    const handle = opened.value
    const now = yield* Clock.currentTimeMillis
    // ARCH-01: the handle says who watches the agent (AgentLoop's handles do), else the view counts
    const watched = handle.watchers
    const base = { id, agent: handle.agent, handle, scope, watched, subscribers: 0, holds: 0, lastActive: now }
    const onQuiet = () => quiet(s, hosted)
    const hosted: Hosted = Object.assign(base, {
      view: watched === undefined ? viewOf(base, onQuiet) : handle.agent
    })
    watched?.onQuiet(onQuiet)
    // HOST-03: what a crash interrupted runs without a new message
    if (s.settings.wakeOnActivate && wasResumed(handle.agent)) yield* handle.agent.wake
    return hosted
  }).pipe(observability.hostActivation(id))

/** The activation's outcome, published to its waiters; the slot is Live or gone afterwards (HOST-01). */
const settleActivation = (
  s: HostState,
  id: SessionId,
  done: Deferred.Deferred<Hosted, AgentHost.GetError>,
  exit: Exit.Exit<Hosted, AgentHost.GetError>
) =>
  Effect.gen(function*() {
    if (Exit.isSuccess(exit)) {
      const hosted = exit.value
      if (s.closed) {
        // the host began closing while this activation finished: the drain does not know it (HOST-05)
        yield* release(s, hosted)
        deleteSlot(s, id)
        s.occupied--
        return yield* Deferred.fail(done, new HostError.HostClosed({ id }))
      }
      setSlot(s, id, { _tag: "Live", hosted })
      s.lru.set(id, hosted)
      // a new live agent is likely idle: a capacity waiter may passivate it (HOST-02)
      signalFreed(s)
      // forked from this uninterruptible step: the timer itself must be interruptible
      if (s.canPassivate) yield* FiberMap.run(s.timers, id, Effect.interruptible(idleTimer(s, hosted)))
      return yield* Deferred.succeed(done, hosted)
    }
    deleteSlot(s, id)
    // a failure before the slot was reserved (capacity, closed) took none
    const reservedNone = Exit.isFailure(exit) && Option.exists(
      Cause.failureOption(exit.cause),
      (error) => error._tag === "HostAtCapacity" || error._tag === "HostClosed"
    )
    if (!reservedNone) {
      s.occupied--
      signalFreed(s)
    }
    const outcome = Cause.isInterruptedOnly(exit.cause)
      ? Exit.fail(new HostError.HostClosed({ id }))
      : exit
    return yield* Deferred.done(done, outcome)
  })

/** HOST-01 single flight: the slot reads Activating, and the activation runs in the host's set. */
const startActivation = (s: HostState, id: SessionId, create: AgentHost.CreateOptions | undefined) =>
  Effect.gen(function*() {
    const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(s.settings.activationTimeout)
    const done = Deferred.unsafeMake<Hosted, AgentHost.GetError>(FiberId.none)
    setSlot(s, id, { _tag: "Activating", done })
    // forked from an uninterruptible step: the activation is interruptible (timeout, drain) but
    // always settles its slot
    yield* FiberSet.run(
      s.activations,
      Effect.interruptible(Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(
          Effect.exit(restore(activate(s, id, create, deadline))),
          (exit) => settleActivation(s, id, done, exit)
        )
      ))
    )
    return done
  })

/** `AgentHost.get` (HOST-01): the live agent, activating it when needed. @internal */
export const get = (s: HostState, id: SessionId | string, create?: AgentHost.CreateOptions | undefined) =>
  Effect.gen(function*() {
    const parsed = parseSessionId(id)
    if (Either.isLeft(parsed)) return yield* parsed.left
    const key = parsed.right
    while (true) {
      if (s.closed) return yield* new HostError.HostClosed({ id: key })
      const slot = s.slots.get(key)
      if (slot === undefined) {
        const done = yield* Effect.uninterruptible(startActivation(s, key, create))
        return (yield* Deferred.await(done)).view
      }
      switch (slot._tag) {
        case "Live": {
          touch(s, slot.hosted, yield* Clock.currentTimeMillis)
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

/**
 * The live agent of `key` with a hold taken in the same step that found it Live, activating it
 * first when needed (the waits are interruptible, the hold is not; HOST-02).
 */
const acquireHold = (s: HostState, key: SessionId, create: AgentHost.CreateOptions | undefined) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      while (true) {
        if (s.closed) return yield* new HostError.HostClosed({ id: key })
        const slot = s.slots.get(key)
        if (slot === undefined) {
          const done = yield* startActivation(s, key, create)
          yield* restore(Deferred.await(done))
        } else if (slot._tag === "Live") {
          slot.hosted.holds++
          touch(s, slot.hosted, yield* Clock.currentTimeMillis)
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

const releaseHold = (s: HostState, hosted: Hosted) =>
  Effect.suspend(() => {
    hosted.holds--
    return watchers(hosted) === 0 ? quiet(s, hosted) : Effect.void
  })

/** `AgentHost.use` (HOST-02): `f` on the live agent, which does not passivate meanwhile. @internal */
export const use = <A, E, R>(
  s: HostState,
  id: SessionId | string,
  f: (agent: Agent) => Effect.Effect<A, E, R>,
  create?: AgentHost.CreateOptions | undefined
): Effect.Effect<A, E | AgentHost.GetError, R> =>
  Effect.flatMap(
    Effect.mapError(parseSessionId(id), (error): AgentHost.GetError => error),
    (key) =>
      Effect.acquireUseRelease(acquireHold(s, key, create), (hosted) => f(hosted.view), (hosted) =>
        releaseHold(s, hosted))
  ).pipe(Effect.withSpan("AgentHost.use"))
