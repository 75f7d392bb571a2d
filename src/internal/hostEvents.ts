/**
 * EVS-01 at host level: `host.eventsFrom(id, seq)`, the durable event stream of a session that
 * survives passivation and activation of its agent, without keeping the agent live or activating
 * it (HOST-02).
 *
 * A reader is a sequence of phases, each chosen by looking at the host's slot of the id after
 * watching it (so a change after the look is never missed):
 * - the agent is live: its session's cursor (`session.eventsFrom`) from the reader's next seq,
 *   until the session closes (passivation, drain);
 * - the agent is activating, passivating or being removed: wait for the slot's next change;
 * - nothing is live: the stored log from the next seq (read through `SessionPersistence`), then
 *   wait for the slot's next change (an activation).
 * The reader keeps the seq after the last event it emitted, so every phase goes on from there: no
 * gap, no duplicate. Before going on it checks that the log it finds continues the one it read
 * (same header, at least as long, the same event before the cursor); otherwise the session was
 * removed meanwhile and the reader fails `SessionRemoved`. When the host closes, a reader that fell
 * behind the last incarnation the host released catches up from the stored log, then it ends: it
 * emits everything committed before the close.
 *
 * @internal
 */
import type { Deferred, Option, Scope } from "effect"
import { Deferred as D, Effect, Option as O, Stream } from "effect"
import * as AgentHost from "../AgentHost.js"
import type { SessionId } from "../Message.js"
import type { Session } from "../Session.js"
import * as SessionError from "../SessionError.js"
import type { SessionEvent, SessionHeader } from "../SessionEvent.js"
import type { SessionPersistence } from "../SessionPersistence.js"

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
): Effect.Effect<void, SessionError.InvalidEventCursor | AgentHost.SessionRemoved> => {
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
  return continues ? Effect.void : Effect.fail(new AgentHost.SessionRemoved({ id: reader.id, seq: reader.next }))
}

/** Notes each emitted event as the reader's position. */
const tracked = <E>(reader: Reader, events: Stream.Stream<SessionEvent, E>) =>
  Stream.map(events, (event) => {
    reader.next = event.seq + 1
    reader.before = event
    return event
  })

/** The stored log (not live): `SessionNotFound` before anything was read, `SessionRemoved` after. */
const readStored = (host: ReaderHost, reader: Reader) => {
  const missing = () =>
    reader.header === undefined
      ? new SessionError.SessionNotFound({ id: reader.id })
      : new AgentHost.SessionRemoved({ id: reader.id, seq: reader.next })
  if (O.isNone(host.persistence)) return Effect.fail(missing())
  return host.persistence.value.read(reader.id).pipe(
    Effect.catchTag("SessionNotFound", () => Effect.fail(missing()))
  )
}

/**
 * The host closed: the stored events the reader has not emitted yet when it fell behind the last
 * agent the host released (it was still reading an earlier incarnation), then the end. A log that
 * does not continue the one read, or a store that cannot be read any more, just ends it.
 */
const lastPhase = (host: ReaderHost, reader: Reader, watch: Watch) =>
  Effect.gen(function*() {
    const changed = watch.changed()
    // the drain is still releasing the agent: look again once it is done (`released` is final then)
    if (host.look(reader.id)._tag !== "Absent") return Stream.execute(D.await(changed))
    reader.done = true
    if (watch.released() <= reader.next || O.isNone(host.persistence) || reader.header === undefined) {
      return Stream.empty
    }
    const stored = yield* Effect.option(host.persistence.value.read(reader.id))
    if (O.isNone(stored)) return Stream.empty
    const continues = yield* Effect.either(checkLog(reader, stored.value.header, stored.value.events))
    return continues._tag === "Left" ? Stream.empty : Stream.fromIterable(stored.value.events.slice(reader.next))
  })

/** One phase of a reader: what to emit now, chosen from the host's slot (see the module). */
const phase = (
  host: ReaderHost,
  reader: Reader,
  watch: Watch
): Stream.Stream<SessionEvent, AgentHost.EventsFromError> =>
  Stream.unwrap(Effect.gen(function*() {
    if (host.isClosed()) return yield* lastPhase(host, reader, watch)
    // taken before the look: a change after it completes `changed`
    const changed = watch.changed()
    const waitForChange = Stream.execute(D.await(changed))
    const look = host.look(reader.id)
    if (look._tag === "Moving") return waitForChange
    if (look._tag === "Live") {
      const session = look.session
      // its stream ended but the slot still names it: its passivation (or the drain) is under way
      if (session === reader.streamed) return waitForChange
      yield* checkLog(reader, session.header, yield* session.events)
      reader.streamed = session
      return tracked(reader, session.eventsFrom(reader.next))
    }
    const stored = yield* readStored(host, reader)
    yield* checkLog(reader, stored.header, stored.events)
    reader.streamed = undefined
    return Stream.concat(tracked(reader, Stream.fromIterable(stored.events.slice(reader.next))), waitForChange)
  }))

/**
 * The session's events from `seq` across passivations and activations, until the host closes.
 *
 * @internal
 */
export const eventsFrom = (
  host: ReaderHost,
  id: SessionId,
  seq: number
): Stream.Stream<SessionEvent, AgentHost.EventsFromError> => {
  const reader: Reader = { id, next: seq, header: undefined, before: undefined, streamed: undefined, done: false }
  return Stream.unwrapScoped(Effect.map(host.watch(id), (watch) =>
    Stream.repeatEffectOption(
      Effect.suspend(() => reader.done ? Effect.fail(O.none()) : Effect.succeed(phase(host, reader, watch)))
    ).pipe(Stream.flatten())))
}
