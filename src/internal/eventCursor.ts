/**
 * EVS-01: the durable event stream of a session from a cursor — the stored events from `seq`, then
 * the live ones as they commit: no gap, no duplicate, in order, even when it starts while appends
 * are in flight.
 *
 * The live feed is subscribed before the log is read, so an event committed meanwhile is in one of
 * them or both, and `seq` drops the second copy. Each reader has its own bounded buffer, filled by a
 * fiber of the stream's Scope from the feed: a reader that falls behind never slows the writer or
 * the other readers; when its buffer overflows, the oldest events are dropped from it and re-read
 * from the session's log (which holds every event) when the reader gets to them.
 *
 * @internal
 */
import { Chunk, Effect, Queue, Stream, Take } from "effect"
import type { Scope } from "effect"
import * as SessionError from "../SessionError.js"
import type { SessionEvent } from "../SessionEvent.js"
import * as feed from "./feed.js"

/** What a cursor reads: a session's log and its post-commit feed. @internal */
export interface CursorSource {
  readonly id: string
  readonly events: Effect.Effect<ReadonlyArray<SessionEvent>>
  readonly subscribe: Effect.Effect<Stream.Stream<SessionEvent>, never, Scope.Scope>
}

/** Events a reader may have waiting in its buffer before the oldest are re-read from the log. @internal */
export const DEFAULT_BUFFER = 1024

const checkCursor = (source: CursorSource, seq: number, length: number) =>
  Number.isSafeInteger(seq) && seq >= 0 && seq <= length
    ? Effect.void
    : Effect.fail(new SessionError.InvalidEventCursor({ id: source.id, seq, length }))

/** The feed copied into a sliding buffer by a fiber of the current Scope; ends with the feed. */
const buffered = (live: Stream.Stream<SessionEvent>, capacity: number) =>
  Effect.gen(function*() {
    const buffer = yield* Queue.sliding<Take.Take<SessionEvent>>(capacity)
    yield* live.pipe(
      // one Take per event: the buffer's capacity counts events
      Stream.runForEachChunk((chunk) => Queue.offerAll(buffer, Chunk.map(chunk, Take.of))),
      Effect.ensuring(Queue.offer(buffer, Take.end)),
      Effect.forkScoped
    )
    return feed.fromTakes(buffer)
  })

/**
 * The events of a chunk from the buffer that come next: those from `cursor.next` up to the chunk's
 * last one (included). Read from the chunk when it holds all of them in order; when the buffer
 * dropped some, re-read from the log. Events before `cursor.next` were already emitted.
 */
const advance = (source: CursorSource, cursor: { next: number }, chunk: Chunk.Chunk<SessionEvent>) => {
  const events = Chunk.toReadonlyArray(chunk)
  const last = events.length === 0 ? -1 : events[events.length - 1]!.seq
  const from = cursor.next
  if (last < from) return Effect.succeed(Chunk.empty<SessionEvent>())
  cursor.next = last + 1
  const out: Array<SessionEvent> = []
  let expected = from
  for (const event of events) {
    if (event.seq < expected) continue
    if (event.seq > expected) {
      return Effect.map(source.events, (log) => Chunk.unsafeFromArray(log.slice(from, last + 1)))
    }
    out.push(event)
    expected++
  }
  return Effect.succeed(Chunk.unsafeFromArray(out))
}

/**
 * The session's events from `seq`: the stored ones, then the live ones until the session closes.
 * Fails `InvalidEventCursor` (before emitting anything) when `seq` is outside `0..length`.
 *
 * @internal
 */
export const eventsFrom = (
  source: CursorSource,
  seq: number,
  capacity: number = DEFAULT_BUFFER
): Stream.Stream<SessionEvent, SessionError.InvalidEventCursor> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const live = yield* source.subscribe
    const log = yield* source.events
    yield* checkCursor(source, seq, log.length)
    const rest = yield* buffered(live, capacity)
    // in chunks: one chunk of a long log would be emitted as one piece
    const stored = Stream.fromIterable(log.slice(seq))
    const cursor = { next: log.length }
    const fresh = Stream.mapChunksEffect(rest, (chunk) => advance(source, cursor, chunk))
    return Stream.concat(stored, fresh)
  }))
