/**
 * The AgentLoop factory (FAC-01..04): `create` (PUB, with its checks before the transaction:
 * PUB-10's options, PKG-06's route, collisions) and `resume` (RES-01..08: the exclusive writer, the
 * log read once, repair closers appended, the inbox replayed), installed in the registry's slot; its
 * close stops creations not entered yet, awaits those in flight and disposes every agent it made.
 *
 * @internal
 */
import type { Fiber, Scope } from "effect"
import { Deferred, Duration, Effect, Either, FiberSet, Option } from "effect"
import type { Agent, AgentHandle, AgentOptions, CreateOptions, ResumeOptions } from "../../../Agent.js"
import * as AgentError from "../../../AgentError.js"
import type { AgentFactory, AgentPublisher } from "../../../AgentRegistry.js"
import { AgentRegistry } from "../../../AgentRegistry.js"
import { currentInitiatorRef } from "../initiator.js"
import * as Message from "../../../Message.js"
import type { SessionId } from "../../../Message.js"
import { Model } from "../../../Model.js"
import * as Repair from "../../../Repair.js"
import * as SessionError from "../../../SessionError.js"
import type { SessionEvent } from "../../../SessionEvent.js"
import type * as SessionEventModule from "../../../SessionEvent.js"
import type { SessionWriter } from "../../../SessionPersistence.js"
import { SessionPersistence } from "../../../SessionPersistence.js"
import { SessionStore } from "../../../SessionStore.js"
import * as Tool from "../../../Tool.js"
import * as codec from "../../log/eventCodec.js"
import * as fiberModule from "../../fiber.js"
import * as finalizer from "../../finalizer.js"
import * as internalInbox from "../inbox.js"
import * as subAgent from "../subAgent.js"
import * as lock from "../../lock.js"
import * as observability from "../../observability.js"
import * as internalOptions from "../../options.js"
import * as internalSession from "../../log/session.js"
import { buildAgent } from "./agent.js"
import type { Build, Loop, Restore } from "./state.js"
import { inCommitRef, ownRef, publishingRef, stillWanted, unwanted } from "./state.js"
import { abortCreation } from "./teardown.js"
import { abandon } from "./timeout.js"
import { handleOf, publish, runSetup, transaction } from "./transaction.js"
import * as turnOptions from "../driver/turnOptions.js"

/** CORE-08, PUB-10: the options as their Schema decodes them, or `InvalidAgentOptions` naming each bad field. */
const validateOptions: (
  options: AgentOptions | undefined
) => Either.Either<AgentOptions, AgentError.InvalidAgentOptions> = internalOptions.decodeAgentOptions

/**
 * The route of the last `request/config` of a log (RES-07/08): the last that is not a turn's own
 * (APP-04: a message's settings and output end with its turn), with its settings and output
 * (OUT-01); when every config is a turn's own, only the last one's provider, model and system.
 */
const storedRoute = (events: ReadonlyArray<SessionEvent>): turnOptions.StoredRoute => {
  let turnOnly: (typeof SessionEventModule.RequestConfig.Type)["data"] | undefined
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type !== "request/config") continue
    const data = event.data as (typeof SessionEventModule.RequestConfig.Type)["data"]
    if (data.turnOnly === true) {
      turnOnly ??= data
      continue
    }
    return {
      provider: data.provider,
      model: data.model,
      ...(data.maxTokens !== undefined ? { maxTokens: data.maxTokens } : {}),
      ...(data.system !== undefined ? { system: data.system } : {}),
      ...(data.settings !== undefined ? { settings: data.settings } : {}),
      ...(data.output !== undefined ? { output: data.output } : {})
    }
  }
  if (turnOnly === undefined) return {}
  return {
    provider: turnOnly.provider,
    model: turnOnly.model,
    ...(turnOnly.system !== undefined ? { system: turnOnly.system } : {})
  }
}

/**
 * Why a create or resume is refused before it starts: from inside a commit it would deadlock the
 * registry (a defect), and a closed factory makes nothing (FAC-04). Read in the caller's operation (B1).
 */
const refusal = (
  loop: Loop,
  fiber: Fiber.RuntimeFiber<unknown, unknown>
): Effect.Effect<never, AgentError.AgentLoopInactive> | undefined => {
  if (fiber.getFiberRef(inCommitRef)) {
    return Effect.dieMessage("an agent was created from inside a commit, which would deadlock the registry")
  }
  return loop.active ? undefined : Effect.fail(new AgentError.AgentLoopInactive())
}

/**
 * The live agent of `id` in the registry that called the factory: its publisher's `lookup` (no span,
 * B1), else `registry.get` (a publisher built elsewhere). ARCH-01: a wrapped registry changes nothing.
 */
const liveAgent = (loop: Loop, publisher: AgentPublisher, id: SessionId): Effect.Effect<Option.Option<Agent>> =>
  publisher.lookup !== undefined ? publisher.lookup(id) : loop.registry.get(id)

/** Fails with `collision()` when `id` is live in the registry, else runs `then`. */
const unlessLive = <A, E, R, C>(
  loop: Loop,
  publisher: AgentPublisher,
  id: SessionId,
  collision: () => C,
  then: Effect.Effect<A, E, R>
): Effect.Effect<A, E | C, R> =>
  Effect.flatMap(
    liveAgent(loop, publisher, id),
    (found): Effect.Effect<A, E | C, R> => (Option.isSome(found) ? Effect.fail(collision()) : then)
  )

/**
 * PKG-06: a create whose provider and model are both set asks the model, when it can validate routes,
 * before anything is stored or published; a refusal is `InvalidAgentOptions` with the model's reason.
 * A missing route is not refused (RES-07/08: `NO_ROUTE` at the first request).
 */
const routeAccepted = <A, E, R>(
  loop: Loop,
  options: AgentOptions,
  then: Effect.Effect<A, E, R>
): Effect.Effect<A, E | AgentError.InvalidAgentOptions, R> => {
  const model = loop.model
  // APP-04: the provider must take every setting the agent asks for (never dropped)
  const settings = options.settings === undefined
    ? then
    : Effect.zipRight(
      turnOptions.settingsAccepted(
        model,
        options.provider,
        options.model,
        turnOptions.agentSettings(options, {}).settings,
        turnOptions.agentSettings(options, {}).maxTokens
      ),
      then
    )
  if (model.validateRoute === undefined || options.provider === undefined || options.model === undefined) return settings
  return Effect.zipRight(
    Effect.mapError(
      model.validateRoute(options.provider, options.model),
      (refused) => new AgentError.InvalidAgentOptions({ reason: refused.message })
    ),
    settings
  )
}

/**
 * PUB steps 1–3 of a create: the session prepared (seed or fork, PUB-02/FORK), its writer created
 * (PERS), the agent built and set up.
 */
const prepareNew = <E, R>(
  loop: Loop,
  build: Build,
  options: CreateOptions<E, R>,
  agentOptions: AgentOptions,
  collision: () => AgentError.AgentAlreadyExists,
  publisher: AgentPublisher
) =>
  Effect.gen(function*() {
    const id = build.id
    const abort = unwanted(loop, build)
    if (abort !== undefined) return yield* Effect.fail(abort)
    const planned = yield* loop.store.prepare({
      sessionId: id,
      meta: options.meta,
      seed: options.seed,
      fork: options.fork,
      child: options.child
    }).pipe(
      Effect.catchTag("SessionAlreadyLive", () => Effect.fail(collision()))
    )
    let writer: SessionWriter | undefined
    if (Option.isSome(loop.persistence)) {
      writer = yield* loop.persistence.value.create(planned.header).pipe(
        Effect.catchTags({
          SessionAlreadyExists: () => Effect.fail(new AgentError.AgentAlreadyExists({ id, where: "stored" })),
          SessionLocked: () => Effect.fail(new AgentError.AgentAlreadyExists({ id, where: "locked" }))
        })
      )
      build.writer = writer
      build.createMode = true
    }
    // the session's writer fiber starts with the background FiberRefs, not this caller's (B2, §6.3)
    const session = yield* internalSession.fromPlanIn(build.sessionScope, planned, writer, loop.backgroundRefs)
    // a new session has no inbox events after its seed, so its replay cannot fail
    const built = yield* buildAgent(loop, build, session, agentOptions, options.parentAgent, {}, publisher).pipe(
      Effect.catchTag("InvalidInboxLog", Effect.die)
    )
    const commit = yield* runSetup(loop, build, options.setup, built.setupView)
    return { session, commit, parentAgent: built.parentAgent }
  })

/** PUB: checks in the caller's operation, then the transaction (B1: plain reads in one operation). */
const create = <E, R>(
  loop: Loop,
  options: CreateOptions<E, R>,
  owner: Scope.Scope,
  publisher: AgentPublisher
): Effect.Effect<AgentHandle, AgentError.CreateError | E, Exclude<R, Scope.Scope>> =>
  Effect.withFiberRuntime((fiber) => {
    const refused = refusal(loop, fiber)
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
    return routeAccepted(
      loop,
      agentOptions,
      unlessLive(
        loop,
        publisher,
        id,
        collision,
        transaction(loop, id, owner, publisher, (build, restore) =>
          Effect.flatMap(
            // steps 1–3 run with the session Scope as their Scope (the writer is acquired into it),
            // entered outside `restore`, where it needs no mask (B1); setup gets the agent Scope
            finalizer.extendScope(
              restore(prepareNew(loop, build, options, agentOptions, collision, publisher)),
              build.sessionScope
            ),
            ({ commit, parentAgent, session }) =>
              Effect.as(
                publish(loop, build, session, commit, parentAgent, "startup", collision, publisher, restore),
                handleOf(loop, build, publisher)
              )
          ))
      )
    )
  })

/**
 * RES-02/03 inside the transaction: the exclusive writer first, reading the log once; the repair
 * closers appended (DUR-01: what the reader accepts, or nothing); the inbox replay-validated on the
 * repaired log, in memory; the agent built and set up.
 */
const openStored = <E, R>(
  loop: Loop,
  build: Build,
  persistence: SessionPersistence["Type"],
  options: ResumeOptions<E, R>,
  agentOptions: AgentOptions,
  publisher: AgentPublisher
) =>
  Effect.gen(function*() {
    const id = build.id
    const opened = yield* finalizer.extendScope(persistence.openWrite(id), build.sessionScope)
    build.writer = opened.writer
    const stored = opened.stored
    // SUB-02: a sub-agent call whose child finished gets the child's result, not TOOL_OUTCOME_UNKNOWN
    const settled = yield* subAgent.settledChildren(persistence, stored.events)
    const closers = Repair.closers(stored.events, { seedLength: stored.header.seedLength, settled })
    const events = closers.length === 0 ? stored.events : [...stored.events, ...closers]
    // the replay is then the agent's inbox: the log is folded once (B4, B8)
    const replayed = yield* internalInbox.replay(id, events, stored.header.seedLength)
    if (closers.length > 0) {
      yield* codec.checkBeforeWrite(closers)
      // OBS-01: the repair is a commit of its own, and the resume span says how many events it wrote
      yield* Effect.annotateCurrentSpan(observability.attr.repairEvents, closers.length)
      yield* observability.spannedHere("effect-agent.persistence.commit", () => ({
        [observability.attr.sessionId]: id,
        [observability.attr.batchSize]: closers.length,
        [observability.attr.repairEvents]: closers.length
      }), () => opened.writer.append(closers as unknown as readonly [SessionEvent, ...Array<SessionEvent>]))
    }
    const session = yield* internalSession.makeIn(build.sessionScope, {
      header: stored.header,
      events,
      writer: opened.writer,
      refs: loop.backgroundRefs
    })
    const built = yield* buildAgent(
      loop,
      build,
      session,
      agentOptions,
      options.parentAgent,
      storedRoute(events),
      publisher,
      replayed
    )
    const commit = yield* runSetup(loop, build, options.setup, built.setupView)
    return { session, commit }
  })

/** RES-01..08: the same transaction as a create, with `source: "resume"`. */
const resume = <E, R>(loop: Loop, options: ResumeOptions<E, R>, owner: Scope.Scope, publisher: AgentPublisher) =>
  Effect.gen(function*() {
    yield* Effect.withFiberRuntime<void, AgentError.AgentLoopInactive>((fiber) => refusal(loop, fiber) ?? Effect.void)
    const id = yield* Message.sessionId(options.sessionId)
    const agentOptions = yield* validateOptions(options.options)
    const persistence = loop.persistence
    if (Option.isNone(persistence)) return yield* new AgentError.PersistenceNotConfigured({ id })
    if (Option.isSome(yield* liveAgent(loop, publisher, id)) || Option.isSome(yield* loop.store.get(id))) {
      return yield* new SessionError.SessionAlreadyLive({ id })
    }
    return yield* transaction(loop, id, owner, publisher, (build, restore: Restore) =>
      Effect.gen(function*() {
        const { session, commit } = yield* restore(Effect.zipRight(
          stillWanted(loop, build),
          openStored(loop, build, persistence.value, options, agentOptions, publisher)
        ))
        yield* publish(
          loop,
          build,
          session,
          commit,
          options.parentAgent,
          "resume",
          () => new SessionError.SessionAlreadyLive({ id }),
          publisher,
          restore
        )
        return handleOf(loop, build, publisher)
      }))
  })

/**
 * FAC-04: on close, first the slot clears (setFactory's release runs first: it was added last), then
 * creations not entered yet are stopped, those in flight awaited, and every agent this factory made
 * is disposed, whoever created it (each agent's `release`, as its owner would).
 */
const closeFactory = (loop: Loop) =>
  Effect.gen(function*() {
    loop.active = false
    for (const build of loop.live) {
      if (!build.entered && !build.isSettled) yield* abortCreation(build, new AgentError.AgentLoopInactive())
    }
    const waitFor = yield* Deferred.make<void>()
    loop.drained = waitFor
    if (loop.inFlight > 0) yield* Deferred.await(waitFor)
    const disposals = Array.from(loop.live, (build) => build.release)
    // each bounded by the teardown timeout (CORE-06)
    yield* Effect.all(disposals, { discard: true, concurrency: "unbounded" })
    // teardowns still stalled after their timeout are abandoned: the FiberSet's close interrupts their
    // wait, and they keep their writer
    for (const build of loop.timedOut) abandon(build)
  })

/**
 * The factory: its state record over the services of the context, its close, and its installation
 * in the registry's slot (FAC-01).
 *
 * @internal
 */
export const make = (teardownTimeout: Duration.DurationInput | undefined): Effect.Effect<
  AgentFactory,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model | Scope.Scope
> =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry
    const runtime = yield* Effect.runtime<never>()
    /** The teardowns (and their watcher), owned by the factory's Scope (CORE-01). */
    const teardowns = yield* FiberSet.make<unknown, unknown>()
    // what every background fiber starts with: the factory's FiberRefs, never a caller's (§6.3, CORE-01)
    const backgroundRefs = fiberModule.isolatedRefs(runtime, [currentInitiatorRef, publishingRef, inCommitRef, ownRef])
    const loop: Loop = {
      teardownTimeout: Duration.decode(teardownTimeout ?? Duration.seconds(30)),
      registry,
      store: yield* SessionStore,
      model: yield* Model,
      persistence: yield* Effect.serviceOption(SessionPersistence),
      globalTools: yield* Effect.serviceOption(Tool.ToolRegistry),
      globalHooks: yield* Effect.serviceOption(Tool.LoopHooks),
      backgroundRefs,
      // OBS-01/02: read once from those FiberRefs (the tracer of the factory's runtime, its Clock)
      telemetry: observability.fromRefs(backgroundRefs),
      critical: lock.make(),
      runInTeardowns: yield* FiberSet.runtime(teardowns)<never>(),
      clock: yield* Effect.clock,
      inFlight: 0,
      drained: undefined,
      active: true,
      live: new Set(),
      timedOut: new Set(),
      deadlines: new Map(),
      watcher: undefined,
      watcherWake: undefined
    }
    const factory: AgentFactory = {
      create: (options, owner, publisher) => create(loop, options, owner, publisher),
      resume: (options, owner, publisher) => resume(loop, options, owner, publisher)
    }
    yield* Effect.addFinalizer(() => closeFactory(loop))
    yield* registry.setFactory(factory)
    return factory
  })
