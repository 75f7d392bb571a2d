/**
 * Building an agent (PUB step 2, SPEC §6): its live event feed (every event naming the fiber's
 * initiator), its inbox (fresh, or the replay a resume folded already), its driver, and the `Agent`
 * and `AgentSetup` views over them; its own tool and hook registries are made on first use.
 *
 * @internal
 */
import { Data, Effect, Option, Scope, Stream } from "effect"
import type { Agent, AgentHandle, AgentOptions, AgentSetup, RunOptions, SendOptions, SpawnOptions } from "../../../Agent.js"
import * as AgentError from "../../../AgentError.js"
import { AgentEvent } from "../../../AgentEvent.js"
import type { AgentPublisher } from "../../../AgentRegistry.js"
import { currentInitiatorRef } from "../initiator.js"
import type { InboxChange } from "../../../Inbox.js"
import type * as Message from "../../../Message.js"
import type { SessionId } from "../../../Message.js"
import type * as Session from "../../../Session.js"
import type { InboxTarget } from "../../../SessionEvent.js"
import * as Tool from "../../../Tool.js"
import * as Driver from "../driver/driver.js"
import * as Feed from "../../feed.js"
import * as fiberModule from "../../fiber.js"
import * as internalHooks from "../hooks.js"
import * as internalInbox from "../inbox.js"
import * as internalTools from "../tools.js"
import * as run from "../run.js"
import * as stream from "../stream.js"
import { user } from "../../../Message.js"
import type { Build, Loop } from "./state.js"
import { agentScopeOf, publishingRef } from "./state.js"
import { addAgentSteps } from "./teardownSteps.js"

const noTools: ReadonlyArray<Tool.Any> = []

/** Registrations on an agent's own registries are refused once it is inactive (LIFE-01). */
const isActiveOf = (build: Build) => Effect.sync(() => build.driver === undefined || build.driver.isActive())

const toolsOf = (build: Build): Tool.ToolRegistryShape =>
  build.tools ??= internalTools.makeToolRegistry({ isActive: isActiveOf(build), id: build.id })

const hooksOf = (build: Build): internalHooks.LoopHooksInstance =>
  build.hooks ??= internalHooks.makeLoopHooks({ isActive: isActiveOf(build), id: build.id })

const statusOf = (event: AgentEvent) => event._tag === "AgentStatusChanged" ? Option.some(event.status) : Option.none()

/** An inbox change as the agent's live event. */
const inboxEvent = (agent: SessionId, change: InboxChange): AgentEvent => {
  switch (change._tag) {
    case "Inserted":
      return AgentEvent.InboxInserted({ agent, target: change.target, messages: change.messages, seq: change.seq })
    case "Discarded":
      return AgentEvent.InboxDiscarded({
        agent,
        target: change.target,
        ids: change.ids,
        outcome: change.outcome,
        seq: change.seq
      })
    case "Claimed":
      return AgentEvent.InboxClaimed({ agent, turn: change.turn, messages: change.messages, seq: change.seq })
  }
}

/**
 * The agent's live events: every one names the initiator of the fiber chain that caused it, when
 * there is one (§6), and goes to the agent's feed and to the registry's.
 */
const emitterOf = (feed: Feed.Feed<AgentEvent>, publisher: AgentPublisher) => (event: AgentEvent) =>
  // one step reads the initiator and delivers to the agent's feed; the registry's publish follows (B5)
  Effect.withFiberRuntime<void>((fiber) => {
    const initiator = fiber.getFiberRef(currentInitiatorRef)
    const named = Option.isSome(initiator) && event.initiator === undefined
      ? Data.struct({ ...event, initiator: initiator.value.id })
      : event
    feed.unsafePublish(named)
    return publisher.publish(named)
  })

/** The global tools with the agent's own over them (TOOL), read at each request. */
const allToolsOf = (loop: Loop, build: Build) =>
  Effect.suspend(() => {
    const own = build.tools === undefined ? Effect.succeed(noTools) : build.tools.list
    return Option.isSome(loop.globalTools)
      ? Effect.zipWith(loop.globalTools.value.list, own, internalTools.resolveTools)
      : Effect.map(own, (perAgent) => internalTools.resolveTools([], perAgent))
  })

/** The agent's driver (§8): its activities run as the agent's initiator (§6). */
const driverOf = (
  loop: Loop,
  build: Build,
  session: Session.Session,
  inbox: internalInbox.InboxInternal,
  options: AgentOptions,
  route: Partial<Tool.Route>,
  emit: (event: AgentEvent) => Effect.Effect<void>,
  parentAgent: Agent | undefined
): Driver.Driver =>
  Driver.unsafeMake({
    id: build.id,
    session,
    inbox,
    options,
    model: loop.model,
    tools: allToolsOf(loop, build),
    toSchema: Tool.toSchema,
    decodeArguments: Tool.decodeArguments,
    // the agent's own tool and hook registries are built on first use (B1, B2)
    hooks: internalHooks.lazyRunners(Option.getOrUndefined(loop.globalHooks), () => build.hooks),
    emit,
    withInitiator(self) {
      return loop.registry.withInitiator(build.agent!)(self)
    },
    agent() {
      return build.agent!
    },
    forkDrain(drain) {
      return fiberModule.forkIn(drain, build.sessionScope, loop.backgroundRefs)
    },
    forkTimer(timer) {
      return Effect.asVoid(fiberModule.forkIn(timer, build.sessionScope, loop.backgroundRefs))
    },
    storedRoute: route,
    publishing: publishingRef,
    telemetry: loop.telemetry,
    parentId: parentAgent?.id
  })

type Spawn = <E, R>(
  options: SpawnOptions<E, R> & { readonly resume?: boolean | undefined }
) => Effect.Effect<AgentHandle, AgentError.CreateError | AgentError.ResumeError | E, Exclude<R, Scope.Scope>>

/**
 * OWN-03: the child's owner is this agent's Scope; with `resume: true` a stored child is resumed
 * under the same owner (PKG-03).
 */
const spawnOf = (loop: Loop, build: Build, driver: Driver.Driver): Spawn => ({ resume, ...spawnOptions }) =>
  Effect.suspend(() =>
    driver.isActive()
      ? Effect.flatMap(agentScopeOf(build), (agentScope) => {
        const childOptions = { ...spawnOptions, parentAgent: build.agent! }
        return Scope.extend(
          resume === true ? loop.registry.resumeOrCreate(childOptions) : loop.registry.create(childOptions),
          agentScope
        )
      })
      // built on demand: an Error per agent would cost its stack trace on every create (B1)
      : Effect.fail(new AgentError.AgentInactive({ id: build.id }))
  )

/** FORK-01: a new agent whose session forks this one's log. */
const forkOf = (loop: Loop, build: Build, session: Session.Session, driver: Driver.Driver): Agent["fork"] =>
({ childId, upTo, ...rest }) =>
  Effect.suspend(() =>
    driver.isActive()
      ? loop.registry.create({ ...rest, sessionId: childId, fork: { from: session, upTo } })
      : Effect.fail(new AgentError.AgentInactive({ id: build.id }))
  )

/** Where a `LiveAgent` keeps its parts: symbol keys, not in its enumerable surface. */
const buildKey: unique symbol = Symbol("effect-agent/LiveAgent/build")
const driverKey: unique symbol = Symbol("effect-agent/LiveAgent/driver")
const feedKey: unique symbol = Symbol("effect-agent/LiveAgent/feed")
const statusChangesKey: unique symbol = Symbol("effect-agent/LiveAgent/statusChanges")

/**
 * The feed of an agent built here (or of a view of one), for readers that listen to it without a
 * subscription of their own (B9: the gateway's live events).
 *
 * @internal
 */
export const feedOf = (agent: Agent): Feed.Feed<AgentEvent> | undefined =>
  (agent as Partial<Pick<LiveAgent, typeof feedKey>>)[feedKey]

/**
 * The lifecycle Scope of an agent built here (CORE-02: closing it is the agent's teardown), none
 * for another `Agent` (a view or a user's own): what a test closes to see the LIFE-01 steps run.
 *
 * @internal
 */
export const lifecycleOf = (agent: Agent): Scope.CloseableScope | undefined =>
  agent instanceof LiveAgent ? agent[buildKey].lifecycle : undefined

/**
 * The `Agent` (AGT): its verbs are the driver's, its events the feed's. A class so that its
 * properties stay fast (V8 keeps an object literal with accessors in dictionary mode: 1.6 KB per
 * agent) and its accessors live on the prototype (B2); the verbs are own closures, so a detached
 * `agent.followup` still works. Its parts are symbol-keyed properties, not `#private` fields: a view
 * made with `Object.create(agent)` (the host's, HOST-02) reads them through the prototype.
 */
class LiveAgent implements Agent {
  readonly id: SessionId
  readonly send: Agent["send"]
  readonly followup: Agent["followup"]
  readonly steer: Agent["steer"]
  readonly inject: Agent["inject"]
  readonly cancel: Agent["cancel"]
  readonly runMaintenance: Agent["runMaintenance"]
  readonly compact: Agent["compact"]
  readonly respond: Agent["respond"]
  readonly decline: Agent["decline"]
  readonly [buildKey]: Build
  readonly [driverKey]: Driver.Driver
  readonly [feedKey]: Feed.Feed<AgentEvent>
  [statusChangesKey]: Agent["statusChanges"] | undefined = undefined
  constructor(
    build: Build,
    readonly options: AgentOptions,
    readonly session: Session.Session,
    readonly inbox: internalInbox.InboxInternal,
    driver: Driver.Driver,
    feed: Feed.Feed<AgentEvent>,
    readonly spawn: Spawn,
    readonly fork: Agent["fork"]
  ) {
    this.id = build.id
    this[buildKey] = build
    this[driverKey] = driver
    this[feedKey] = feed
    this.send = (message: Message.UserMessage, second?: SendOptions | InboxTarget | undefined, wake?: boolean) =>
      typeof second === "string"
        ? driver.send(message, second, wake === true)
        : second?.settings !== undefined || second?.output !== undefined
        ? driver.sendWith(message, second.target ?? "next-turn", second.wake ?? true, second)
        : driver.send(message, second?.target ?? "next-turn", second?.wake ?? true)
    this.followup = (message, options) =>
      options?.settings !== undefined || options?.output !== undefined
        ? driver.sendWith(message, "next-turn", true, options)
        : driver.send(message, "next-turn", true)
    this.steer = (message) => driver.send(message, "next-step", true)
    this.inject = (message) => driver.send(message, "next-step", false)
    this.cancel = (cause, cancelOptions) => driver.cancel(cause, cancelOptions)
    this.runMaintenance = (task) => driver.runMaintenance(task)
    // CMP-01 (internal/agent/compaction.ts)
    this.compact = (compactOptions) => driver.compact(compactOptions)
    // HIL-03 (internal/agent/driver/questions.ts)
    this.respond = (requestId, value) => driver.respond(requestId, value)
    this.decline = (requestId, declineOptions) => driver.decline(requestId, declineOptions)
  }
  get status() {
    return this[driverKey].status
  }
  /** Built on first use: most agents are never observed (B2). */
  get statusChanges() {
    return this[statusChangesKey] ??= Stream.filterMap(this[feedKey].stream, statusOf)
  }
  get events() {
    return this[feedKey].stream
  }
  get subscribe() {
    return this[feedKey].subscribe
  }
  /** HOST-03 */
  get wake() {
    return this[driverKey].wake
  }
  get whenIdle() {
    return this[driverKey].whenIdle
  }
  /** APP-01 (internal/agent/run.ts); verbs made when read, so an agent that never runs holds none (B2). */
  get run(): Agent["run"] {
    const deps = runDepsOf(this)
    // one implementation for both signatures: a completed run with `output` has it decoded (OUT-01)
    const runOf = (message: Message.UserMessage | string, runOptions?: RunOptions | undefined) =>
      run.run(
        deps,
        typeof message === "string" ? user(message, { id: runOptions?.messageId }) : message,
        runOptions?.cancelOnInterrupt === true,
        runOptions
      )
    return runOf as Agent["run"]
  }
  /** APP-02 (internal/agent/stream.ts) */
  get stream(): Agent["stream"] {
    const deps = runDepsOf(this)
    return (message, runOptions) =>
      stream.stream(
        deps,
        typeof message === "string" ? user(message, { id: runOptions?.messageId }) : message,
        runOptions?.cancelOnInterrupt === true,
        runOptions
      )
  }
  get turnResult(): Agent["turnResult"] {
    const deps = runDepsOf(this)
    return (turn) => run.resultOf(deps, turn)
  }
  get awaitTurn(): Agent["awaitTurn"] {
    const deps = runDepsOf(this)
    return (turn) => run.awaitTurn(deps, turn)
  }
  /** HIL-02 (internal/agent/driver/decisions.ts) */
  get approve(): Agent["approve"] {
    const driver = this[driverKey]
    return (callId, approveOptions) =>
      driver.decide(callId, { kind: "approve", reason: approveOptions?.reason, arguments: approveOptions?.arguments })
  }
  get reject(): Agent["reject"] {
    const driver = this[driverKey]
    return (callId, rejectOptions) =>
      driver.decideReject(callId, {
        kind: "reject",
        reason: rejectOptions?.reason,
        message: rejectOptions?.message,
        endTurn: rejectOptions?.endTurn
      })
  }
  /** HIL-06 */
  get pending() {
    return this[driverKey].pending
  }
  get tools() {
    return toolsOf(this[buildKey])
  }
  get hooks() {
    return hooksOf(this[buildKey])
  }
}

/** What a run needs of a live agent (or of a view of one, HOST-02). */
const runDepsOf = (agent: LiveAgent): run.RunDeps => ({
  id: agent.id,
  driver: agent[driverKey],
  feed: agent[feedKey],
  inbox: agent.inbox
})

/** What `setup` sees (PUB step 3): registration, spawning and the inbox, not the verbs. */
const setupViewOf = (
  build: Build,
  session: Session.Session,
  inbox: internalInbox.InboxInternal,
  spawn: Spawn
): AgentSetup => ({
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
})

/**
 * PUB step 2: the feed, the inbox, the driver and the agent. A resumed session's log was replayed
 * already (B4); a new one has nothing to replay (B1): either way its inbox is built in this
 * operation. No generator: plain constructors around the inbox's one operation (B1).
 *
 * @internal
 */
export const buildAgent = (
  loop: Loop,
  build: Build,
  session: Session.Session,
  options: AgentOptions,
  parentAgent: Agent | undefined,
  route: Partial<Tool.Route>,
  publisher: AgentPublisher,
  replayed?: internalInbox.Projection
) =>
  Effect.suspend(() => {
    // plain constructors: the feed and the driver only allocate (B1)
    const feed = Feed.makeUnsafe<AgentEvent>()
    build.feed = feed
    const emit = emitterOf(feed, publisher)
    const inboxOptions: internalInbox.InboxOptions = {
      onChange(change) {
        return emit(inboxEvent(build.id, change))
      },
      // publication only: it never writes to the inbox (CORE-07's guard is for users' observers)
      trustedObserver: true,
      // OBS-02: counted in the inbox depth until the teardown (`driver.unmeter`)
      metered: true
    }
    const finish = (inbox: internalInbox.InboxInternal) => {
      const driver = driverOf(loop, build, session, inbox, options, route, emit, parentAgent)
      build.driver = driver
      const spawn = spawnOf(loop, build, driver)
      const agent = new LiveAgent(build, options, session, inbox, driver, feed, spawn, forkOf(loop, build, session, driver))
      build.agent = agent
      // CORE-02: the agent and its driver are made: their LIFE-01 steps join the lifecycle
      return Effect.as(
        addAgentSteps(build, driver, publisher),
        { agent, setupView: setupViewOf(build, session, inbox, spawn), parentAgent } as const
      )
    }
    if (replayed !== undefined) return finish(internalInbox.unsafeMakeReplayed(session, replayed, inboxOptions))
    const fresh = internalInbox.unsafeMakeFresh(session, inboxOptions)
    return fresh !== undefined ? finish(fresh) : Effect.flatMap(internalInbox.make(session, inboxOptions), finish)
  })
