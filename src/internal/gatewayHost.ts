/**
 * `SessionGateway.layerHost` (HTTP-00): the gateway over the `AgentHost` of this process. Reads
 * (`summary`, `list`) never activate an agent: a live one is read in memory, a stored one from
 * `SessionPersistence`. Writes go through the host, which activates the agent when needed.
 *
 * @internal
 */
import type { Scope } from "effect"
import { Array as Arr, Chunk, Deferred, Effect, Either, Option, Queue, Stream } from "effect"
import type { Agent } from "../Agent.js"
import * as AgentError from "../AgentError.js"
import { AgentHost } from "../AgentHost.js"
import { AgentRegistry } from "../AgentRegistry.js"
import type { SessionId } from "../Message.js"
import * as Message from "../Message.js"
import * as SessionError from "../SessionError.js"
import type * as Gateway from "../SessionGateway.js"
import { InvalidRequest, MessageIdConflict, SessionGateway, sendTarget } from "../SessionGateway.js"
import type { RecoverySummary, SessionSummary, UnreadableSession } from "../SessionPersistence.js"
import { SessionPersistence } from "../SessionPersistence.js"
import * as summary from "./gatewaySummary.js"

type Listed = SessionSummary | RecoverySummary | UnreadableSession

/** The default and largest page of `list`. */
const DEFAULT_PAGE = 100

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

const validId = (id: string): Effect.Effect<SessionId, Message.InvalidSessionId> => Message.sessionId(id)

/** The message a send request describes, or why it cannot be one. */
const messageOf = (request: Gateway.SendRequest): Either.Either<Message.UserMessage, InvalidRequest> => {
  if ((request.text === undefined) === (request.content === undefined)) {
    return Either.left(new InvalidRequest({ reason: "a message has exactly one of text and content" }))
  }
  if (request.id !== undefined && (request.id.length < 1 || request.id.length > 256)) {
    return Either.left(new InvalidRequest({ reason: "a message id is 1-256 characters" }))
  }
  return Either.right(
    Message.user(request.text ?? "", {
      ...(request.id === undefined ? {} : { id: request.id }),
      ...(request.content === undefined ? {} : { content: request.content })
    })
  )
}

/** @internal */
export const make = (
  options: Gateway.HostGatewayOptions
): Effect.Effect<SessionGateway["Type"], never, AgentHost | AgentRegistry | Scope.Scope> =>
  Effect.gen(function*() {
    const host = yield* AgentHost
    const registry = yield* AgentRegistry
    const persistence = yield* Effect.serviceOption(SessionPersistence)
    const exclusive = makeKeyedLock()

    // readiness: after the host's start-up recovery (HOST-04), unless told otherwise
    const recovered = yield* Deferred.make<void>()
    if (options.readyAfterRecovery === false) yield* Deferred.succeed(recovered, undefined)
    else yield* Effect.forkScoped(Effect.interruptible(Effect.zipRight(host.recovery, Deferred.succeed(recovered, undefined))))

    const liveAgent = (id: SessionId): Effect.Effect<Option.Option<Agent>> => registry.get(id)

    const isStored = (id: SessionId): Effect.Effect<boolean, SessionError.PersistenceError> =>
      Option.match(persistence, { onNone: () => Effect.succeed(false), onSome: (p) => p.exists(id) })

    const readStored = (id: SessionId) =>
      Option.match(persistence, {
        onNone: () => Effect.fail(new SessionError.SessionNotFound({ id })),
        onSome: (p) => p.read(id)
      })

    const summaryOf = (id: SessionId): Effect.Effect<Gateway.SessionInfo, Gateway.ReadError> =>
      Effect.flatMap(liveAgent(id), (live) =>
        Option.isSome(live)
          ? summary.fromLive(live.value)
          : Effect.map(readStored(id), (stored) => summary.fromStored(stored.header, stored.events)))

    /** Runs `f` on the session's agent, activating it when needed and holding it live meanwhile. */
    const withAgent = <A, E>(id: SessionId, f: (agent: Agent) => Effect.Effect<A, E>) => host.use(id, f)

    // ---------------------------------------------------------------------------------------------

    const list = (request?: Gateway.ListRequest | undefined) =>
      Effect.gen(function*() {
        const limit = request?.limit ?? DEFAULT_PAGE
        const after = request?.after
        const unreadable = new Map<string, string>()
        const ids = new Set<string>()
        if (Option.isSome(persistence)) {
          const { list, summaries } = persistence.value
          // the recovery summaries are the cheap listing where the backend has them (HOST-04)
          const source: Stream.Stream<Listed, SessionError.PersistenceError> = summaries ?? list
          const entries = yield* Stream.runCollect(source)
          for (const entry of entries) {
            if (entry._tag === "UnreadableSession") unreadable.set(entry.id, entry.problem)
            else ids.add(entry.id)
          }
        }
        for (const agent of yield* registry.list) ids.add(agent.id)
        for (const id of unreadable.keys()) ids.add(id)
        const sorted = Array.from(ids).filter((id) => after === undefined || id > after).sort()
        const page = sorted.slice(0, limit)
        const sessions = yield* Effect.forEach(page, (id) => entryOf(id, unreadable.get(id)), { concurrency: 8 })
        const next = sorted.length > limit ? page[page.length - 1] : undefined
        return {
          sessions: Arr.getSomes(sessions),
          ...(next === undefined ? {} : { next })
        } satisfies Gateway.SessionPage
      }).pipe(Effect.withSpan("SessionGateway.list"))

    /** A listed entry: its summary, unreadable when it cannot be read, none when it was removed meanwhile. */
    const entryOf = (
      id: string,
      problem: string | undefined
    ): Effect.Effect<Option.Option<Gateway.SessionInfo | Gateway.UnreadableSession>, SessionError.PersistenceError> => {
      const unreadableEntry = (why: string) =>
        Effect.succeed(Option.some<Gateway.UnreadableSession>({ _tag: "UnreadableSession", id, problem: why }))
      if (problem !== undefined) return unreadableEntry(problem)
      return Effect.suspend(() => summaryOf(id as SessionId)).pipe(
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

    const summaryById = (id: string) =>
      Effect.flatMap(validId(id), summaryOf).pipe(Effect.withSpan("SessionGateway.summary"))

    const create = (id: string, request?: Gateway.CreateRequest | undefined) =>
      Effect.flatMap(validId(id), (key) =>
        exclusive(
          key,
          Effect.gen(function*() {
            const exists = Option.isSome(yield* liveAgent(key)) || (yield* isStored(key))
            if (!exists) {
              yield* host.get(key, {
                ...(request?.options === undefined ? {} : { options: request.options }),
                ...(request?.meta === undefined ? {} : { meta: request.meta })
              })
            }
            return { created: !exists, session: yield* summaryOf(key) }
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

    const send = (id: string, request: Gateway.SendRequest) =>
      Effect.gen(function*() {
        const key = yield* validId(id)
        const message = yield* messageOf(request)
        const mode = request.mode ?? "followup"
        return yield* withAgent(key, (agent) =>
          agent.send(message, sendTarget(mode)).pipe(
            Effect.as<Gateway.SendReceipt>({ messageId: message.id, duplicate: false }),
            Effect.catchIf(
              (error): error is AgentError.DuplicateMessage => error._tag === "DuplicateMessage",
              () => resend(agent, message, mode)
            )
          ))
      }).pipe(Effect.withSpan("SessionGateway.send"))

    const cancel = (id: string, request?: Gateway.CancelRequest | undefined) =>
      Effect.gen(function*() {
        const key = yield* validId(id)
        const keepInbox = request?.keepInbox ?? false
        const live = yield* liveAgent(key)
        if (Option.isNone(live)) {
          // nothing runs; only pending input to cancel needs the agent
          const info = yield* summaryOf(key)
          if (keepInbox || info.pending.nextTurn + info.pending.nextStep === 0) return
        }
        yield* withAgent(key, (agent) => agent.cancel({ kind: "user" }, { keepInbox }))
      }).pipe(Effect.withSpan("SessionGateway.cancel"))

    const fork = (id: string, request: Gateway.ForkRequest) =>
      Effect.gen(function*() {
        const key = yield* validId(id)
        const childId = yield* validId(request.childId)
        return yield* exclusive(
          childId,
          Effect.gen(function*() {
            if (Option.isSome(yield* liveAgent(childId))) {
              return yield* new AgentError.AgentAlreadyExists({ id: childId, where: "live" })
            }
            if (yield* isStored(childId)) return yield* new AgentError.AgentAlreadyExists({ id: childId, where: "stored" })
            yield* withAgent(key, (source) =>
              host.get(childId, {
                options: source.options,
                fork: { from: source.session, ...(request.upTo === undefined ? {} : { upTo: request.upTo }) }
              }))
            return yield* summaryOf(childId)
          })
        )
      }).pipe(Effect.withSpan("SessionGateway.fork"))

    /** Passivates the live agent; `SessionNotFound` when the session is neither live nor stored. */
    const disposeKey = (key: SessionId) =>
      Effect.gen(function*() {
        if (Option.isSome(yield* liveAgent(key))) {
          yield* host.passivate(key)
          return
        }
        if (!(yield* isStored(key))) return yield* new SessionError.SessionNotFound({ id: key })
      })

    const dispose = (id: string) =>
      Effect.flatMap(validId(id), disposeKey).pipe(Effect.withSpan("SessionGateway.dispose"))

    const remove = (id: string) =>
      Effect.gen(function*() {
        const key = yield* validId(id)
        if (Option.isNone(yield* liveAgent(key)) && !(yield* isStored(key))) {
          return yield* new SessionError.SessionNotFound({ id: key })
        }
        yield* host.remove(key)
      }).pipe(Effect.withSpan("SessionGateway.remove"))

    /**
     * The live events of the agent while it is live (EVS-02), attached when the stream starts and
     * again after an activation (signalled by `attach`); nothing while it is passivated.
     */
    const liveEvents = (key: SessionId, attach: Queue.Queue<void>, attached: { value: boolean }) =>
      Stream.fromQueue(attach).pipe(
        Stream.flatMap(
          () =>
            Stream.unwrap(Effect.map(liveAgent(key), (live) => {
              if (Option.isNone(live)) return Stream.empty
              attached.value = true
              return live.value.events.pipe(
                Stream.filterMap(summary.toLive),
                Stream.map((event): Gateway.StreamEvent => ({ _tag: "Live", event })),
                Stream.ensuring(Effect.sync(() => {
                  attached.value = false
                }))
              )
            })),
          { switch: true }
        )
      )

    /**
     * EVS-01 through the host (no activation, across passivations), and the live events of each
     * activation: a durable event while no live stream is attached means the agent is live again.
     */
    const eventsFrom = (id: string, seq: number): Stream.Stream<Gateway.StreamEvent, Gateway.EventsError> =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const key = yield* validId(id)
        const attach = yield* Effect.acquireRelease(Queue.sliding<void>(1), Queue.shutdown)
        const attached = { value: false }
        const tryAttach = Effect.suspend(() =>
          attached.value
            ? Effect.void
            : Effect.flatMap(liveAgent(key), (live) => Option.isSome(live) ? Queue.offer(attach, undefined) : Effect.void)
        )
        yield* tryAttach
        const durable = host.eventsFrom(key, seq).pipe(
          Stream.mapChunksEffect((chunk) =>
            Effect.as(
              tryAttach,
              Chunk.map(chunk, (event): Gateway.StreamEvent => ({ _tag: "Durable", event }))
            )
          )
        )
        return Stream.merge(durable, liveEvents(key, attach, attached), { haltStrategy: "left" })
      })).pipe(Stream.withSpan("SessionGateway.eventsFrom"))

    return SessionGateway.of({
      list,
      summary: summaryById,
      create,
      send,
      cancel,
      fork,
      dispose,
      remove,
      eventsFrom,
      ready: Effect.map(Deferred.isDone(recovered), (done) => done)
    })
  })
