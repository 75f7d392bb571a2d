/**
 * `SessionGateway.layerHost` (HTTP-00): the gateway over the `AgentHost` of this process. Reads
 * (`summary`, `list`) never activate an agent: a live one is read in memory, a stored one from
 * `SessionPersistence`. Writes go through the host, which activates the agent when needed.
 *
 * @internal
 */
import type { Scope } from "effect"
import { Deferred, Duration, Effect, Exit, Option, Stream } from "effect"
import type { Agent } from "../../Agent.js"
import * as AgentError from "../../AgentError.js"
import { AgentHost } from "../../AgentHost.js"
import { AgentRegistry } from "../../AgentRegistry.js"
import type { SessionId } from "../../Message.js"
import type * as Message from "../../Message.js"
import * as SessionError from "../../SessionError.js"
import type * as Gateway from "../../SessionGateway.js"
import type { SessionEvent } from "../../SessionEvent.js"
import type { SessionGateway } from "../../SessionGateway.js"
import type { TurnResult } from "../../TurnResult.js"
import { MessageIdConflict, sendTarget, TurnRunning } from "./errors.js"
import type { RecoverySummary, SessionSummary, UnreadableSession } from "../../SessionPersistence.js"
import { SessionPersistence } from "../../SessionPersistence.js"
import type { DurableReader, EventsInto } from "./durableAndLive.js"
import { durableAndLive, runInto } from "./durableAndLive.js"
import * as hostEvents from "../host/events.js"
import * as requests from "./request.js"
import * as summary from "./summary.js"

type Listed = SessionSummary | RecoverySummary | UnreadableSession

/** A lock per key, made on first use and dropped when its last user leaves. */
const makeKeyedLock = () => {
  const locks = new Map<string, { readonly semaphore: Effect.Semaphore; users: number }>()
  return <A, E, R>(key: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.suspend(() => {
      let entry = locks.get(key)
      if (entry === undefined) {
        entry = { semaphore: Effect.unsafeMakeSemaphore(1), users: 0 }
        locks.set(key, entry)
      }
      const held = entry
      held.users++
      return held.semaphore.withPermits(1)(effect).pipe(
        Effect.ensuring(Effect.sync(() => {
          if (--held.users === 0) locks.delete(key)
        }))
      )
    })
}

/** The session a request names, decoded once here (ARCH-04): inward it travels as a `SessionId`. */
const validId = (id: string): Effect.Effect<SessionId, Message.InvalidSessionId> => requests.sessionKey(id)

/** What the gateway's functions share. */
interface GatewayState {
  readonly host: AgentHost["Type"]
  readonly registry: AgentRegistry["Type"]
  readonly persistence: Option.Option<SessionPersistence["Type"]>
  /** One create or fork at a time per id (the existence check and the activation together). */
  readonly exclusive: <A, E, R>(key: string, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Done once the host's start-up recovery finished (HOST-04), unless not waited for. */
  readonly recovered: Deferred.Deferred<void>
}

// -------------------------------------------------------------------------------------------------
// reads: never activate an agent (HTTP-00)

const liveAgent = (g: GatewayState, id: SessionId): Effect.Effect<Option.Option<Agent>> => g.registry.get(id)

const isStored = (g: GatewayState, id: SessionId): Effect.Effect<boolean, SessionError.PersistenceError> =>
  Option.match(g.persistence, { onNone: () => Effect.succeed(false), onSome: (p) => p.exists(id) })

const readStored = (g: GatewayState, id: SessionId) =>
  Option.match(g.persistence, {
    onNone: () => Effect.fail(new SessionError.SessionNotFound({ id })),
    onSome: (p) => p.read(id)
  })

/** The summary of a live agent, read in memory, or of a stored session, read from the store. */
const summaryOf = (g: GatewayState, id: SessionId): Effect.Effect<Gateway.SessionInfo, Gateway.ReadError> =>
  Effect.flatMap(liveAgent(g, id), (live) =>
    Option.isSome(live)
      ? summary.fromLive(live.value)
      : Effect.map(readStored(g, id), (stored) => summary.fromStored(stored.header, stored.events)))

/** Runs `f` on the session's agent, activating it when needed and holding it live meanwhile. */
const withAgent = <A, E>(g: GatewayState, id: SessionId, f: (agent: Agent) => Effect.Effect<A, E>) =>
  g.host.use(id, f)

/** `SessionGateway.list` (HTTP-00): a page of the sessions, stored or live, in id order after `after`. */
const list = (g: GatewayState, listRequest?: Gateway.ListRequest | undefined) =>
  Effect.gen(function*() {
    const { after, limit, status } = requests.pageOf(listRequest)
    const unreadable = new Map<string, string>()
    const ids = new Set<string>()
    // HIL-06: the status of a stored session that is not live, from its cheap summary
    const storedStatus = new Map<string, Gateway.SessionStatus>()
    if (Option.isSome(g.persistence)) {
      const { list, summaries } = g.persistence.value
      // the recovery summaries are the cheap listing where the backend has them (HOST-04)
      const source: Stream.Stream<Listed, SessionError.PersistenceError> = summaries ?? list
      const entries = yield* Stream.runCollect(source)
      for (const entry of entries) {
        if (entry._tag === "UnreadableSession") unreadable.set(entry.id, entry.problem)
        else ids.add(entry.id)
        if (entry._tag === "RecoverySummary") {
          storedStatus.set(entry.id, entry.awaiting === undefined ? "passive" : "awaiting-input")
        }
      }
    }
    const live = new Set<string>()
    for (const agent of yield* g.registry.list) {
      ids.add(agent.id)
      live.add(agent.id)
    }
    for (const id of unreadable.keys()) ids.add(id)
    const sorted = Array.from(ids).filter((id) => after === undefined || id > after).sort()
    const page = yield* summary.pageOfIds(sorted, {
      limit,
      status,
      concurrency: 8,
      known: (id) => live.has(id) ? undefined : storedStatus.get(id)
    }, (id) => entryOf(g, id, unreadable.get(id)))
    return {
      sessions: page.entries.map((entry) => summary.listedEntry(entry, listRequest)),
      ...(page.next === undefined ? {} : { next: page.next })
    } satisfies Gateway.SessionPage
  }).pipe(Effect.withSpan("SessionGateway.list"))

/** A listed entry: its summary, unreadable when it cannot be read, none when it was removed meanwhile. */
const entryOf = (
  g: GatewayState,
  id: string,
  problem: string | undefined
): Effect.Effect<Option.Option<Gateway.SessionInfo | Gateway.UnreadableSession>, SessionError.PersistenceError> => {
  const unreadableEntry = (why: string) =>
    Effect.succeed(Option.some<Gateway.UnreadableSession>({ _tag: "UnreadableSession", id, problem: why }))
  if (problem !== undefined) return unreadableEntry(problem)
  return Effect.suspend(() => summaryOf(g, id as SessionId)).pipe(
    Effect.map((info) => Option.some<Gateway.SessionInfo | Gateway.UnreadableSession>(info)),
    Effect.catchAll((error) =>
      error._tag === "SessionNotFound"
        ? Effect.succeed(Option.none())
        : error._tag === "PersistenceError"
        ? Effect.fail(error)
        : unreadableEntry(error.message)
    )
  )
}

const summaryById = (g: GatewayState, id: string) =>
  Effect.flatMap(validId(id), (key) => summaryOf(g, key)).pipe(Effect.withSpan("SessionGateway.summary"))

// -------------------------------------------------------------------------------------------------
// writes: through the host, which activates the agent when needed (HTTP-00)

/** `SessionGateway.create`: the session created unless it exists, live or stored; its summary. */
const create = (g: GatewayState, id: string, createRequest?: Gateway.CreateRequest | undefined) =>
  Effect.flatMap(requests.createOf(id, createRequest), ({ key, request }) =>
    g.exclusive(
      key,
      Effect.gen(function*() {
        const exists = Option.isSome(yield* liveAgent(g, key)) || (yield* isStored(g, key))
        if (!exists) {
          yield* g.host.get(key, {
            ...(request?.options === undefined ? {} : { options: request.options }),
            ...(request?.meta === undefined ? {} : { meta: request.meta })
          })
        }
        return { created: !exists, session: yield* summaryOf(g, key) }
      })
    )).pipe(Effect.withSpan("SessionGateway.create"))

/** A send refused as a duplicate: idempotent success when it repeats the accepted message. */
const resend = (agent: Agent, message: Message.UserMessage, mode: Gateway.SendMode) =>
  Effect.gen(function*() {
    const events = yield* agent.session.events
    const accepted = summary.findAccepted(events, agent.session.header.seedLength, message.id)
    const { target, wake } = sendTarget(mode)
    if (Option.isSome(accepted) && summary.isRepeat(accepted.value, message.content, target, wake)) {
      return { messageId: message.id, duplicate: true }
    }
    return yield* new MessageIdConflict({ id: agent.id, messageId: message.id })
  })

const send = (g: GatewayState, id: string, sendRequest: Gateway.SendRequest) =>
  Effect.gen(function*() {
    const { key, message, mode } = yield* requests.sendOf(id, sendRequest)
    return yield* withAgent(g, key, (agent) =>
      agent.send(message, sendTarget(mode)).pipe(
        Effect.as<Gateway.SendReceipt>({ messageId: message.id, duplicate: false }),
        Effect.catchIf(
          (error): error is AgentError.DuplicateMessage => error._tag === "DuplicateMessage",
          () => resend(agent, message, mode)
        )
      ))
  }).pipe(Effect.withSpan("SessionGateway.send"))

/** The turn whose step `messageId` entered, from the log (walking back: a run's message is recent). */
const turnOfMessage = (events: ReadonlyArray<SessionEvent>, messageId: string): number | undefined => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type !== "user/message") continue
    const data = event.data as { readonly turn: number; readonly message: Message.UserMessage }
    if (data.message.id === messageId) return data.turn
  }
  return undefined
}

/** A turn's result within `wait` (a failed turn's too; an ended one's at once), else `None`. */
const awaitWithin = (agent: Agent, turn: number, wait: Duration.Duration) =>
  Effect.flatMap(agent.turnResult(turn), (ended) =>
    Option.isSome(ended) ? Effect.succeed(ended) : agent.awaitTurn(turn).pipe(
      Effect.catchTag("TurnFailed", (failed) => Effect.succeed(failed.partial)),
      Effect.timeoutOption(wait)
    ))

/** APP-05: a run's message accepted before: the same text attaches to its turn, other content conflicts. */
const attach = (agent: Agent, message: Message.UserMessage, wait: Duration.Duration) =>
  Effect.gen(function*() {
    const events = yield* agent.session.events
    const accepted = summary.findAccepted(events, agent.session.header.seedLength, message.id)
    if (Option.isNone(accepted) || !summary.isRepeat(accepted.value, message.content, "next-turn", true)) {
      return yield* new MessageIdConflict({ id: agent.id, messageId: message.id })
    }
    const turn = turnOfMessage(events, message.id)
    const accepting: Gateway.RunAccepted = {
      _tag: "RunAccepted",
      messageId: message.id,
      ...(turn === undefined ? {} : { turn })
    }
    if (turn === undefined) return accepting
    const result = yield* awaitWithin(agent, turn, wait)
    return Option.getOrElse(result, (): Gateway.RunOutcome => accepting)
  })

/**
 * APP-05: a decoded run on the host's agent: `agent.run` through `host.use`, its wait bounded; the
 * turn belongs to the agent. What `SessionGateway.run` does after decoding, and what the cluster's
 * entity does on the runner that owns the session (ARCH-04: the client decoded the request).
 *
 * @internal
 */
export const runDecoded = (
  host: AgentHost["Type"],
  { key, message, output, settings }: requests.Run,
  wait: Duration.Duration
): Effect.Effect<Gateway.RunOutcome, Gateway.RunError> =>
  host.use(key, (agent) =>
    // APP-04, OUT-01: the run's own settings and output are stored with its message (durable)
    agent.run(message, { ...(settings === undefined ? {} : { settings }), ...(output === undefined ? {} : { output }) }).pipe(
      Effect.catchTag("TurnFailed", (failed) => Effect.succeed(failed.partial)),
      Effect.timeoutOption(wait),
      Effect.flatMap(Option.match({
        onSome: (result): Effect.Effect<Gateway.RunOutcome> => Effect.succeed(result),
        onNone: () =>
          Effect.map(agent.session.events, (events): Gateway.RunOutcome => {
            const turn = turnOfMessage(events, message.id)
            return { _tag: "RunAccepted", messageId: message.id, ...(turn === undefined ? {} : { turn }) }
          })
      })),
      Effect.catchTag("DuplicateMessage", () => attach(agent, message, wait))
    ))

/** `SessionGateway.run` (APP-05): decoded by the shared request module (ARCH-04), then {@link runDecoded}. */
const runOf = (g: GatewayState) =>
(
  id: string,
  request: Gateway.RunRequest,
  options?: { readonly wait?: Duration.DurationInput | undefined } | undefined
): Effect.Effect<Gateway.RunOutcome, Gateway.RunError> =>
  Effect.flatMap(requests.runOf(id, request), (run) => runDecoded(g.host, run, requests.runWait(options?.wait))).pipe(
    Effect.withSpan("SessionGateway.run")
  )

/**
 * APP-05: turn `turn`'s result, waiting up to `wait` for a running one (then `TurnRunning`): what
 * `SessionGateway.turn` does after decoding, and what the cluster's entity does.
 *
 * @internal
 */
export const turnDecoded = (
  host: AgentHost["Type"],
  key: SessionId,
  turn: number,
  wait: Duration.Duration
): Effect.Effect<TurnResult, Gateway.TurnError> =>
  host.use(key, (agent) =>
    Effect.flatMap(
      awaitWithin(agent, turn, wait),
      Option.match({
        onSome: Effect.succeed,
        onNone: () => Effect.fail(new TurnRunning({ id: key, turn }))
      })
    ))

/** `SessionGateway.turn` (APP-05). */
const turnOf = (g: GatewayState) =>
(
  id: string,
  turn: number,
  options?: { readonly wait?: Duration.DurationInput | undefined } | undefined
): Effect.Effect<TurnResult, Gateway.TurnError> =>
  Effect.flatMap(validId(id), (key) => turnDecoded(g.host, key, turn, requests.turnWait(options?.wait))).pipe(
    Effect.withSpan("SessionGateway.turn")
  )

const cancel = (g: GatewayState, id: string, cancelRequest?: Gateway.CancelRequest | undefined) =>
  Effect.gen(function*() {
    const { keepInbox, key } = yield* requests.cancelOf(id, cancelRequest)
    const live = yield* liveAgent(g, key)
    if (Option.isNone(live)) {
      // nothing runs; only pending input to cancel needs the agent
      const info = yield* summaryOf(g, key)
      if (keepInbox || info.pending.nextTurn + info.pending.nextStep === 0) return
    }
    yield* withAgent(g, key, (agent) => agent.cancel({ kind: "user" }, { keepInbox }))
  }).pipe(Effect.withSpan("SessionGateway.cancel"))

const fork = (g: GatewayState, id: string, forkRequest: Gateway.ForkRequest) =>
  Effect.gen(function*() {
    const { childId, key, upTo } = yield* requests.forkOf(id, forkRequest)
    return yield* g.exclusive(
      childId,
      Effect.gen(function*() {
        if (Option.isSome(yield* liveAgent(g, childId))) {
          return yield* new AgentError.AgentAlreadyExists({ id: childId, where: "live" })
        }
        if (yield* isStored(g, childId)) {
          return yield* new AgentError.AgentAlreadyExists({ id: childId, where: "stored" })
        }
        yield* withAgent(g, key, (source) =>
          g.host.get(childId, {
            options: source.options,
            fork: { from: source.session, ...(upTo === undefined ? {} : { upTo }) }
          }))
        return yield* summaryOf(g, childId)
      })
    )
  }).pipe(Effect.withSpan("SessionGateway.fork"))

/** Passivates the live agent; `SessionNotFound` when the session is neither live nor stored. */
const disposeKey = (g: GatewayState, key: SessionId) =>
  Effect.gen(function*() {
    if (Option.isSome(yield* liveAgent(g, key))) {
      yield* g.host.passivate(key)
      return
    }
    if (!(yield* isStored(g, key))) return yield* new SessionError.SessionNotFound({ id: key })
  })

const dispose = (g: GatewayState, id: string) =>
  Effect.flatMap(validId(id), (key) => disposeKey(g, key)).pipe(Effect.withSpan("SessionGateway.dispose"))

const remove = (g: GatewayState, id: string) =>
  Effect.gen(function*() {
    const key = yield* validId(id)
    if (Option.isNone(yield* liveAgent(g, key)) && !(yield* isStored(g, key))) {
      return yield* new SessionError.SessionNotFound({ id: key })
    }
    yield* g.host.remove(key)
  }).pipe(Effect.withSpan("SessionGateway.remove"))

// -------------------------------------------------------------------------------------------------
// events (EVS-01, EVS-02)

/** The host's reader of a session's durable events (EVS-01: no activation, across passivations). */
const hostReader = (g: GatewayState, key: SessionId, seq: number): DurableReader<Gateway.EventsError> => {
  const run = hostEvents.runIntoOf(g.host)
  return (sink, onLive) => run(key, seq, sink, onLive)
}

/** EVS-01 through the host (no activation, across passivations), with the live events of each activation. */
const eventsFrom = (
  g: GatewayState,
  id: string,
  seq: number
): Stream.Stream<Gateway.StreamEvent, Gateway.EventsError> =>
  Stream.unwrap(Effect.map(validId(id), (key) =>
    durableAndLive(hostReader(g, key, seq), liveAgent(g, key), "SessionGateway.eventsFrom")))

/** The same events run into a sink (the HTTP API's event-stream body, B9). */
const eventsIntoSink = (g: GatewayState): EventsInto => (id, seq, sink) =>
  Effect.matchEffect(validId(id), {
    onFailure: (error) => sink.end(Exit.fail(error)),
    onSuccess: (key) => runInto(hostReader(g, key, seq), liveAgent(g, key), "SessionGateway.eventsFrom", sink)
  })

/** HIL-06: the host's answer, which reads a passive session's log without activating it. */
const pendingOf = (g: GatewayState, id: string) =>
  Effect.flatMap(validId(id), (key) => g.host.pending(key)).pipe(Effect.withSpan("SessionGateway.pending"))

const serviceOf = (g: GatewayState): SessionGateway["Type"] => ({
  list: (request) => list(g, request),
  summary: (id) => summaryById(g, id),
  create: (id, request) => create(g, id, request),
  send: (id, request) => send(g, id, request),
  run: runOf(g),
  turn: turnOf(g),
  cancel: (id, request) => cancel(g, id, request),
  fork: (id, request) => fork(g, id, request),
  dispose: (id) => dispose(g, id),
  remove: (id) => remove(g, id),
  eventsFrom: (id, seq) => eventsFrom(g, id, seq),
  eventsInto: eventsIntoSink(g),
  pending: (id) => pendingOf(g, id),
  ready: Effect.map(Deferred.isDone(g.recovered), (done) => done)
})

/** @internal */
export const make = (
  options: Gateway.HostGatewayOptions
): Effect.Effect<SessionGateway["Type"], never, AgentHost | AgentRegistry | Scope.Scope> =>
  Effect.gen(function*() {
    const g: GatewayState = {
      host: yield* AgentHost,
      registry: yield* AgentRegistry,
      persistence: yield* Effect.serviceOption(SessionPersistence),
      exclusive: makeKeyedLock(),
      recovered: yield* Deferred.make<void>()
    }
    // readiness: after the host's start-up recovery (HOST-04), unless told otherwise
    if (options.readyAfterRecovery === false) {
      yield* Deferred.succeed(g.recovered, undefined)
    } else {
      yield* Effect.forkScoped(
        Effect.interruptible(Effect.zipRight(g.host.recovery, Deferred.succeed(g.recovered, undefined)))
      )
    }
    return serviceOf(g)
  })
