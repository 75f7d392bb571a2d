/**
 * EVS-01 at host level: `host.eventsFrom(id, seq)`, the durable event stream of a session that
 * survives passivation and activation of its agent, without keeping the agent live or activating
 * it (HOST-02).
 *
 * A reader is a sequence of phases, each chosen by looking at the host's slot of the id after
 * watching it (so a change after the look is never missed):
 * - the agent is live: its session's events from the reader's next seq, until the session closes
 *   (passivation, drain) — see below;
 * - the agent is activating, passivating or being removed: wait for the slot's next change;
 * - nothing is live: the stored log from the next seq (read through `SessionPersistence`), then
 *   wait for the slot's next change (an activation).
 * The reader keeps the seq after the last event it handed over, so every phase goes on from there:
 * no gap, no duplicate. Before going on it checks that the log it finds continues the one it read
 * (same header, at least as long, the same event before the cursor); otherwise the session was
 * removed meanwhile and the reader fails `SessionRemoved`. When the host closes, a reader that fell
 * behind the last incarnation the host released catches up from the stored log, then it ends: it
 * emits everything committed before the close.
 *
 * A reader hands its events to a sink. While the agent is live, the reader listens to the session's
 * post-commit feed, then reads what it has not seen from the log; once it has caught up, each commit
 * goes to the sink in the committing step (B9: no fiber wakes per commit). When the sink has no room
 * (a slow reader), or a commit does not follow what the reader has, the listener keeps nothing and
 * wakes the reader's fiber, which reads the rest from the log (which holds every event), waiting for
 * room, until it has caught up again. So a slow reader never blocks the writer, the agent,
 * passivation or other readers, and loses nothing. `eventsFrom` is a reader whose sink is a bounded
 * queue read as a stream.
 *
 * @internal
 */
import type { Deferred, Option, Scope } from "effect"
import { Chunk, Deferred as D, Effect, Exit, FiberId, Option as O, Queue, Stream, Take } from "effect"
import type * as AgentHost from "../../AgentHost.js"
import * as HostError from "./errors.js"
import type { SessionId } from "../../Message.js"
import type { Session } from "../../Session.js"
import * as SessionError from "../../SessionError.js"
import type { SessionEvent, SessionHeader } from "../../SessionEvent.js"
import type { SessionPersistence } from "../../SessionPersistence.js"
import type { CursorSource } from "../log/eventCursor.js"
import type * as feed from "../feed.js"
import * as Feed from "../feed.js"
import { cursorSourceOf } from "../log/session.js"

/** What a reader sees of the host's slot of an id. @internal */
export type Look =
  | { readonly _tag: "Live"; readonly session: Session }
  | { readonly _tag: "Moving" }
  | { readonly _tag: "Absent" }

/** A reader's watch of an id, held for the reader's whole life. @internal */
export interface Watch {
  /** Completed at the id's next slot change, or when the host closes. */
  readonly changed: () => Deferred.Deferred<void>
  /** The log length of the last agent of the id the host released while watched (-1: none). */
  readonly released: () => number
}

/** The host as its readers use it. @internal */
export interface ReaderHost {
  readonly isClosed: () => boolean
  readonly look: (id: SessionId) => Look
  readonly watch: (id: SessionId) => Effect.Effect<Watch, never, Scope.Scope>
  readonly persistence: Option.Option<SessionPersistence["Type"]>
}

/** Where a reader is. */
interface Reader {
  readonly id: SessionId
  /** The seq of the next event to emit. */
  next: number
  /** The header of the log read so far; undefined until the first phase found one. */
  header: SessionHeader | undefined
  /** The event before `next` (undefined at 0). */
  before: SessionEvent | undefined
  /** The live session last streamed: when its stream ended, the reader waits for the slot to change. */
  streamed: Session | undefined
  done: boolean
}

/** Equal JSON values, key order ignored; a key whose value is undefined counts as absent. */
const sameJson = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false
    return a.every((item, i) => sameJson(item, b[i]))
  }
  const left = a as Record<string, unknown>
  const right = b as Record<string, unknown>
  const keys = (record: Record<string, unknown>) => Object.keys(record).filter((key) => record[key] !== undefined)
  const leftKeys = keys(left)
  return leftKeys.length === keys(right).length && leftKeys.every((key) => sameJson(left[key], right[key]))
}

/**
 * The first phase checks the caller's cursor (`InvalidEventCursor`); a later one checks that the
 * log continues the one read so far (`SessionRemoved` otherwise).
 */
const checkLog = (
  reader: Reader,
  header: SessionHeader,
  events: ReadonlyArray<SessionEvent>
): Effect.Effect<void, SessionError.InvalidEventCursor | HostError.SessionRemoved> => {
  if (reader.header === undefined) {
    const seq = reader.next
    if (!(Number.isSafeInteger(seq) && seq >= 0 && seq <= events.length)) {
      return Effect.fail(new SessionError.InvalidEventCursor({ id: reader.id, seq, length: events.length }))
    }
    reader.header = header
    reader.before = seq === 0 ? undefined : events[seq - 1]
    return Effect.void
  }
  const continues = sameJson(reader.header, header) && events.length >= reader.next &&
    (reader.next === 0 || sameJson(events[reader.next - 1], reader.before))
  return continues ? Effect.void : Effect.fail(new HostError.SessionRemoved({ id: reader.id, seq: reader.next }))
}

/** Where a reader's events go (`AgentHost.EventsSink`). @internal */
export type DurableSink = AgentHost.EventsSink

/** Notes the last event handed over as the reader's position. */
const track = (reader: Reader, last: SessionEvent): void => {
  reader.next = last.seq + 1
  reader.before = last
}

/** The most events a reader hands over in one piece when it reads them from a log. */
const MAX_CHUNK = 1024

/**
 * Hands `events` (those from `reader.next`) to the sink, waiting for room, in pieces of at most
 * `MAX_CHUNK` (a reader starting at 0 on a long log does not make one piece of it).
 */
const deliver = (reader: Reader, sink: DurableSink, events: ReadonlyArray<SessionEvent>): Effect.Effect<void> => {
  if (events.length === 0) return Effect.void
  const piece = events.length > MAX_CHUNK ? events.slice(0, MAX_CHUNK) : events
  track(reader, piece[piece.length - 1]!)
  const handed = sink.durable(Chunk.unsafeFromArray(piece))
  return piece === events ? handed : Effect.zipRight(handed, deliver(reader, sink, events.slice(MAX_CHUNK)))
}

/** The stored log (not live): `SessionNotFound` before anything was read, `SessionRemoved` after. */
const readStored = (host: ReaderHost, reader: Reader) => {
  const missing = () =>
    reader.header === undefined
      ? new SessionError.SessionNotFound({ id: reader.id })
      : new HostError.SessionRemoved({ id: reader.id, seq: reader.next })
  if (O.isNone(host.persistence)) return Effect.fail(missing())
  return host.persistence.value.read(reader.id).pipe(
    Effect.catchTag("SessionNotFound", () => Effect.fail(missing()))
  )
}

/**
 * The host closed: the stored events the reader has not handed over yet when it fell behind the
 * last agent the host released (it was still reading an earlier incarnation), then the end. A log
 * that does not continue the one read, or a store that cannot be read any more, just ends it.
 */
const lastPhase = ({ host, reader, sink, watch }: Run) =>
  Effect.gen(function*() {
    const changed = watch.changed()
    // the drain is still releasing the agent: look again once it is done (`released` is final then)
    if (host.look(reader.id)._tag !== "Absent") return yield* D.await(changed)
    reader.done = true
    if (watch.released() <= reader.next || O.isNone(host.persistence) || reader.header === undefined) return
    const stored = yield* Effect.option(host.persistence.value.read(reader.id))
    if (O.isNone(stored)) return
    const continues = yield* Effect.either(checkLog(reader, stored.value.header, stored.value.events))
    if (continues._tag === "Right") yield* deliver(reader, sink, stored.value.events.slice(reader.next))
  })

/** What a live phase's listener and the reader's fiber share. */
interface Following {
  readonly reader: Reader
  readonly source: CursorSource
  readonly sink: DurableSink
  /** The listener keeps nothing: the reader reads the log until it has caught up. */
  behind: boolean
  /** The session's feed ended (it closed). */
  ended: boolean
  /** What the reader waits on when it has caught up. */
  wake: Deferred.Deferred<void> | undefined
}

/** The listener of a live phase: each commit to the sink once the reader has caught up (see the module). */
const listenerOf = (state: Following): feed.Listener<SessionEvent> => {
  const { reader, sink } = state
  const signal = () => {
    if (state.wake !== undefined) D.unsafeDone(state.wake, Exit.void)
  }
  const many = (events: Chunk.Chunk<SessionEvent>): void => {
    if (state.behind || state.ended) return signal()
    const all = Chunk.toReadonlyArray(events)
    let first = 0
    while (first < all.length && all[first]!.seq < reader.next) first++
    if (first === all.length) return
    // a commit that does not follow what was handed over, or no room: read from the log
    if (all[first]!.seq !== reader.next || !sink.tryDurable(first === 0 ? events : Chunk.drop(events, first))) {
      state.behind = true
      return signal()
    }
    track(reader, all[all.length - 1]!)
  }
  return {
    one: (event) => many(Chunk.of(event)),
    many,
    end: () => {
      state.ended = true
      signal()
    }
  }
}

/** The log from `reader.next` to the sink until nothing is left; then the listener hands over again. */
const catchUp = (state: Following): Effect.Effect<void> =>
  Effect.suspend(() => {
    const { reader, sink } = state
    const log = state.source.snapshot()
    // looked at and cleared in one step: a commit after it goes through the listener
    if (log.length <= reader.next) {
      state.behind = false
      return Effect.void
    }
    return Effect.zipRight(deliver(reader, sink, log.slice(reader.next)), catchUp(state))
  })

/** Catches up when behind, else waits for the listener's signal, until the session's feed ends. */
const followLoop = (state: Following): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (state.ended) return catchUp(state)
    if (state.behind) return Effect.zipRight(catchUp(state), followLoop(state))
    // made before the look at the flags ends: a signal after it completes it
    const wake = D.unsafeMake<void>(FiberId.none)
    state.wake = wake
    return Effect.zipRight(D.await(wake), followLoop(state))
  })

/** A live session's events from `reader.next` until it closes (a session not made here: its cursor). */
const followSession = (reader: Reader, session: Session, sink: DurableSink): Effect.Effect<void> => {
  const source = cursorSourceOf(session)
  if (source === undefined) {
    return Stream.runForEachChunk(
      Stream.catchAll(session.eventsFrom(reader.next), () => Stream.empty),
      (chunk) => deliver(reader, sink, Chunk.toReadonlyArray(chunk))
    )
  }
  return Effect.scoped(Effect.suspend(() => {
    // behind until the first catch-up: what the log holds now comes first
    const state: Following = { reader, source, sink, behind: true, ended: false, wake: undefined }
    return Effect.zipRight(source.listen(listenerOf(state)), followLoop(state))
  }))
}

/** A running reader: where it is, what it watches, where its events go. */
interface Run {
  readonly host: ReaderHost
  readonly reader: Reader
  readonly watch: Watch
  readonly sink: DurableSink
  /** Run each time a live incarnation of the agent is followed. */
  readonly onLive: Effect.Effect<void>
}

/** One phase of a reader, chosen from the host's slot (see the module). */
const phase = (run: Run): Effect.Effect<void, AgentHost.EventsFromError> =>
  Effect.gen(function*() {
    const { host, onLive, reader, sink, watch } = run
    if (host.isClosed()) return yield* lastPhase(run)
    // taken before the look: a change after it completes `changed`
    const changed = watch.changed()
    const look = host.look(reader.id)
    if (look._tag === "Moving") return yield* D.await(changed)
    if (look._tag === "Live") {
      const session = look.session
      // its events ended but the slot still names it: its passivation (or the drain) is under way
      if (session === reader.streamed) return yield* D.await(changed)
      yield* checkLog(reader, session.header, yield* session.events)
      reader.streamed = session
      yield* onLive
      return yield* followSession(reader, session, sink)
    }
    const stored = yield* readStored(host, reader)
    yield* checkLog(reader, stored.header, stored.events)
    reader.streamed = undefined
    yield* deliver(reader, sink, stored.events.slice(reader.next))
    return yield* D.await(changed)
  })

const phases = (run: Run): Effect.Effect<void, AgentHost.EventsFromError> =>
  Effect.suspend(() => run.reader.done ? Effect.void : Effect.zipRight(phase(run), phases(run)))

/**
 * Runs a reader of the session's events from `seq` into `sink` until the host closes; `onLive` runs
 * each time a live incarnation of the agent is followed.
 *
 * @internal
 */
export const runInto = (
  host: ReaderHost,
  id: SessionId,
  seq: number,
  sink: DurableSink,
  onLive: Effect.Effect<void>
): Effect.Effect<void, AgentHost.EventsFromError, Scope.Scope> => {
  const reader: Reader = { id, next: seq, header: undefined, before: undefined, streamed: undefined, done: false }
  return Effect.flatMap(host.watch(id), (watch) => phases({ host, reader, watch, sink, onLive }))
}

/** Commits a reader's queue may hold before the reader reads from the log and waits for room. @internal */
export const CAPACITY = 1024

/**
 * The session's events from `seq` across passivations and activations, until the host closes.
 *
 * @internal
 */
export const eventsFrom = (
  host: ReaderHost,
  id: SessionId,
  seq: number
): Stream.Stream<SessionEvent, AgentHost.EventsFromError> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    // a Queue, not a Mailbox: a Mailbox reader can miss a wake-up and hold the last event (CORE-09)
    const queue = yield* Queue.bounded<Take.Take<SessionEvent, AgentHost.EventsFromError>>(CAPACITY)
    const sink: DurableSink = {
      tryDurable: (events) => queue.unsafeOffer(Take.chunk(events)),
      durable: (events) => Queue.offer(queue, Take.chunk(events))
    }
    yield* runInto(host, id, seq, sink, Effect.void).pipe(Effect.scoped, Feed.endInto(queue), Effect.forkScoped)
    return Feed.fromTakes(queue)
  }))

/**
 * How to run a host's readers into a sink (ARCH-01): its own `eventsInto` (the host of
 * `AgentHost.layer`, or a user's), else its `eventsFrom` stream read by the current fiber (every
 * chunk waits for room; `onLive` runs before each chunk: a chunk after an activation reveals it).
 *
 * @internal
 */
export const runIntoOf = (
  host: Pick<AgentHost.AgentHost["Type"], "eventsFrom" | "eventsInto">
): NonNullable<AgentHost.AgentHost["Type"]["eventsInto"]> =>
  host.eventsInto ??
    ((id, seq, sink, onLive) =>
      Stream.runForEachChunk(host.eventsFrom(id, seq), (chunk) => Effect.zipRight(onLive, sink.durable(chunk))))
