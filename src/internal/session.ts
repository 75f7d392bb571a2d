/**
 * The Session implementation: an in-memory log with one writer fiber fed by a Queue (SES-02), both
 * started by the first append; events are committed only after the writer acknowledged, published
 * after commit, with the model-visible history and the turn state folded incrementally.
 *
 * @internal
 */
import { Cause, Clock, Deferred, Effect, Either, Fiber, Option, Queue, Runtime } from "effect"
import type { Array as Arr, Chunk, Scope } from "effect"
import type { Message, SessionId } from "../Message.js"
import type { Session, SessionPlan } from "../Session.js"
import * as SessionError from "../SessionError.js"
import type { CoreEvent, CoreEventInput, CustomEventInput, SessionEvent, SessionHeader } from "../SessionEvent.js"
import type { SessionWriter } from "../SessionPersistence.js"
import * as codec from "./eventCodec.js"
import * as Feed from "./feed.js"
import * as finalizer from "./finalizer.js"
import * as history from "./history.js"

/**
 * What only the inbox, the loop and repair may do with a session (SES-00).
 *
 * @internal
 */
export interface SessionCore {
  /** Appends core events as one writer batch. */
  readonly appendCore: (
    events: Arr.NonEmptyReadonlyArray<CoreEventInput>
  ) => Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError>
  /** The highest turn number opened in the log (0 when none). */
  readonly lastTurn: () => number
  /** The turn open at the end of the log, if any. */
  readonly openTurn: () => number | undefined
  /** The log length at the end of the last closed turn (FORK-01's default boundary). */
  readonly closedLength: () => number
  /** The current length of the log. */
  readonly length: () => number
  /** The live log itself (read-only use, no copy). */
  readonly log: () => ReadonlyArray<SessionEvent>
  /** Marks the session closed and stops its writer fiber after what was queued. */
  readonly close: Effect.Effect<void>
}

const cores = new WeakMap<Session, SessionCore>()

/** @internal */
export const core = (session: Session): SessionCore => {
  const found = cores.get(session)
  if (found === undefined) throw new Error("bug: session was not built by effect-agent")
  return found
}

interface Request {
  readonly inputs: Arr.NonEmptyReadonlyArray<{ readonly type: string; readonly data: unknown }>
  readonly done: Deferred.Deferred<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError>
}

type Command = Request | "close"

/**
 * Turn bookkeeping folded one event at a time.
 *
 * @internal
 */
export class TurnState {
  lastTurn = 0
  openTurn: number | undefined = undefined
  closedLength = 0
  fold(event: SessionEvent, lengthAfter: number): void {
    if (event.type === "turn/start") {
      const turn = (event.data as { readonly turn: number }).turn
      this.lastTurn = Math.max(this.lastTurn, turn)
      this.openTurn = turn
    } else if (event.type === "turn/end") {
      this.openTurn = undefined
    }
    if (this.openTurn === undefined) this.closedLength = lengthAfter
  }
}

/** @internal */
export const make = (options: {
  readonly header: SessionHeader
  /** Events already stored (or validated seed events when there is no writer). */
  readonly events: ReadonlyArray<SessionEvent>
  readonly writer: SessionWriter | undefined
  /**
   * Where the writer fiber is forked from; default the constructing fiber's runtime. A factory
   * passes the runtime it captured once, so no session keeps its creator's FiberRefs and span (B2).
   */
  readonly runtime?: Runtime.Runtime<never> | undefined
}): Effect.Effect<Session, never, Scope.Scope> =>
  Effect.gen(function*() {
    const id: SessionId = options.header.id
    const log: Array<SessionEvent> = options.events.slice()
    const messages: Array<Message> = []
    const turns = new TurnState()
    for (let i = 0; i < log.length; i++) {
      const event = log[i]!
      history.fold(messages, event)
      turns.fold(event, i + 1)
    }
    let eventsSnapshot: ReadonlyArray<SessionEvent> | undefined
    let messagesSnapshot: ReadonlyArray<Message> | undefined
    let isClosed = false

    const feed = yield* Feed.make<SessionEvent>()
    const runtime = options.runtime ?? (yield* Effect.runtime<never>())
    // the writer fiber and its queue are started by the first append (SES-02: still one per session)
    let queue: Queue.Queue<Command> | undefined
    let writerFiber: Fiber.RuntimeFiber<void> | undefined

    /** Per-session helpers as methods (no per-session named closures to build). */
    const w = {
      /** The queue of the writer fiber, starting both on first use. */
      startWriter(): Queue.Queue<Command> {
        if (queue !== undefined) return queue
        const failAll = (requests: ReadonlyArray<Request>, cause: Cause.Cause<SessionError.SessionAppendError>) =>
          Effect.forEach(requests, (r) => Deferred.failCause(r.done, cause), { discard: true })

        const writeBatch = (requests: ReadonlyArray<Request>) =>
          Effect.gen(function*() {
            const time = yield* Clock.currentTimeMillis
            const stamped: Array<SessionEvent> = []
            const perRequest: Array<Arr.NonEmptyReadonlyArray<SessionEvent>> = []
            let seq = log.length
            for (const request of requests) {
              const out: Array<SessionEvent> = []
              for (const input of request.inputs) {
                const event = Object.freeze({ seq: seq++, time, type: input.type, data: input.data }) as SessionEvent
                out.push(event)
                stamped.push(event)
              }
              perRequest.push(out as unknown as Arr.NonEmptyReadonlyArray<SessionEvent>)
            }
            if (options.writer !== undefined) {
              // a defect of the writer reaches the callers as a defect; the writer fiber lives on
              const written = yield* Effect.exit(
                options.writer.append(stamped as unknown as Arr.NonEmptyReadonlyArray<SessionEvent>)
              )
              if (written._tag === "Failure") return yield* failAll(requests, written.cause)
            }
            for (const event of stamped) {
              log.push(event)
              if (history.fold(messages, event)) messagesSnapshot = undefined
              turns.fold(event, log.length)
            }
            eventsSnapshot = undefined
            yield* feed.publishAll(stamped)
            for (let i = 0; i < requests.length; i++) yield* Deferred.succeed(requests[i]!.done, perRequest[i]!)
          })

        /** Handles one batch of commands: whatever was queued behind the first one, in order. */
        const handle = (first: Command, rest: Chunk.Chunk<Command>) =>
          Effect.suspend(() => {
            const requests: Array<Request> = []
            const refused: Array<Request> = []
            let closing = false
            const sort = (command: Command) => {
              if (command === "close") closing = true
              else if (closing) refused.push(command)
              else requests.push(command)
            }
            sort(first)
            for (const command of rest) sort(command)
            const closed = refused.length === 0
              ? Effect.void
              : Effect.forEach(refused, (r) => Deferred.fail(r.done, new SessionError.SessionClosed({ id })), {
                discard: true
              })
            const written = requests.length > 0 ? Effect.zipRight(closed, writeBatch(requests)) : closed
            return Effect.as(written, closing)
          })

        const writerLoop = (q: Queue.Queue<Command>): Effect.Effect<void> => {
          const loop: Effect.Effect<void> = Effect.flatMap(
            Queue.take(q),
            (first) =>
              Effect.flatMap(
                Queue.takeAll(q),
                (rest) => Effect.flatMap(handle(first, rest), (closing) => (closing ? Effect.void : loop))
              )
          )
          return loop
        }

        const q = Effect.runSync(Queue.unbounded<Command>())
        queue = q
        // forked from the runtime captured at construction, as a daemon fiber forked then would be
        writerFiber = Runtime.runFork(runtime)(Effect.uninterruptible(writerLoop(q)))
        return q
      },

      submit(
        inputs: Arr.NonEmptyReadonlyArray<{ readonly type: string; readonly data: unknown }>
      ): Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError> {
        return Effect.suspend(() => {
          if (isClosed) return Effect.fail(new SessionError.SessionClosed({ id }))
          return Effect.withFiberRuntime<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError>(
            (fiber) => {
              const done = Deferred.unsafeMake<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError>(
                fiber.id()
              )
              // a session closed before its first append never starts a writer
              const q = queue ?? (isClosed ? undefined : w.startWriter())
              if (q === undefined || !q.unsafeOffer({ inputs, done })) return Effect.fail(new SessionError.SessionClosed({ id }))
              return Deferred.await(done)
            }
          )
        })
      },

      appendAll(
        events: Arr.NonEmptyReadonlyArray<CustomEventInput>
      ): Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError> {
        return Effect.suspend(() => {
          if (!Array.isArray(events) || events.length === 0) {
            return Effect.fail(new SessionError.InvalidEventData({ type: "(batch)", reason: "appendAll needs at least one event" }))
          }
          const inputs: Array<{ readonly type: string; readonly data: unknown }> = []
          for (const event of events) {
            const checked = codec.customInput(event)
            if (Either.isLeft(checked)) return Effect.fail(checked.left)
            inputs.push(checked.right)
          }
          return w.submit(inputs as unknown as Arr.NonEmptyReadonlyArray<{ readonly type: string; readonly data: unknown }>)
        })
      }
    }

    const close = Effect.suspend(() => {
      if (isClosed) return writerFiber === undefined ? Effect.void : Fiber.await(writerFiber)
      isClosed = true
      if (queue === undefined || writerFiber === undefined) return feed.end
      return Queue.offer(queue, "close").pipe(
        Effect.zipRight(Fiber.await(writerFiber)),
        Effect.zipRight(feed.end),
        Effect.zipRight(Queue.shutdown(queue))
      )
    }).pipe(Effect.asVoid, Effect.uninterruptible)

    yield* finalizer.addFinalizer(close)

    const session: Session = {
      id,
      header: options.header,
      firstLiveSeq: log.length,
      get events() {
        return Effect.sync(() => (eventsSnapshot ??= Object.freeze(log.slice())))
      },
      get messages() {
        return Effect.sync(() => (messagesSnapshot ??= Object.freeze(messages.slice())))
      },
      append(event) {
        return Effect.map(w.appendAll([event]), (events) => events[0])
      },
      appendAll(events) {
        return w.appendAll(events)
      },
      changes: feed.stream,
      subscribe: feed.subscribe
    }

    cores.set(session, {
      appendCore(events) {
        return Effect.suspend(() => {
          const inputs = events.map((event) => {
            const frozen = codec.coreEvent({ ...event, seq: 0, time: 0 } as CoreEvent)
            return { type: frozen.type, data: frozen.data }
          })
          return w.submit(inputs as unknown as Arr.NonEmptyReadonlyArray<{ readonly type: string; readonly data: unknown }>)
        })
      },
      lastTurn() {
        return turns.lastTurn
      },
      openTurn() {
        return turns.openTurn
      },
      closedLength() {
        return turns.closedLength
      },
      length() {
        return log.length
      },
      log() {
        return log
      },
      close
    })
    return session
  })

/**
 * A live session from a plan; with a writer the seed is written through it first.
 *
 * @internal
 */
export const fromPlan = (
  sessionPlan: SessionPlan,
  writer: SessionWriter | undefined,
  runtime?: Runtime.Runtime<never>
): Effect.Effect<Session, SessionError.SessionConflict | SessionError.PersistenceError, Scope.Scope> =>
  Effect.gen(function*() {
    if (writer !== undefined && sessionPlan.seed.length > 0) {
      yield* writer.append(sessionPlan.seed as Arr.NonEmptyReadonlyArray<SessionEvent>)
    }
    return yield* make({ header: sessionPlan.header, events: sessionPlan.seed, writer, runtime })
  })

/** @internal */
export const isOpenAt = (events: ReadonlyArray<SessionEvent>, length: number): Option.Option<number> => {
  const turns = new TurnState()
  for (let i = 0; i < length; i++) turns.fold(events[i]!, i + 1)
  return Option.fromNullable(turns.openTurn)
}
