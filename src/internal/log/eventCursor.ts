/**
 * EVS-01: the durable event stream of a session from a cursor — the stored events from `seq`, then
 * the live ones as they commit: no gap, no duplicate, in order, even when it starts while appends
 * are in flight.
 *
 * The reader listens to the session's post-commit feed before it reads the log, so an event
 * committed meanwhile is in one of them or both, and `seq` drops the second copy. Each reader has
 * its own bounded buffer, filled by its listener in the committing step (B9: no fiber copies the
 * feed into it): a reader that falls behind never slows the writer or the other readers. When a
 * commit would take its buffer past its capacity, the listener keeps nothing more and leaves one
 * mark instead; the reader, at the mark, reads what it missed from the session's log (which holds
 * every event) and the listener fills the buffer again.
 *
 * @internal
 */
import { Channel, Chunk, Effect, Queue, Stream } from "effect"
import type { Scope } from "effect"
import * as SessionError from "../../SessionError.js"
import type { SessionEvent } from "../../SessionEvent.js"
import type * as feed from "../feed.js"

/** What a cursor reads: a session's log and its post-commit feed. @internal */
export interface CursorSource {
  readonly id: string
  readonly events: Effect.Effect<ReadonlyArray<SessionEvent>>
  /** The log now, read in the caller's step (not a copy: slice it at once). */
  readonly snapshot: () => ReadonlyArray<SessionEvent>
  readonly listen: (listener: feed.Listener<SessionEvent>) => Effect.Effect<void, never, Scope.Scope>
}

/** Events a reader may have waiting in its buffer before the oldest are re-read from the log. @internal */
export const DEFAULT_BUFFER = 1024

/** The most `Take`s one pull reads from the buffer. */
const MAX_TAKES = 4096

const checkCursor = (source: CursorSource, seq: number, length: number) =>
  Number.isSafeInteger(seq) && seq >= 0 && seq <= length
    ? Effect.void
    : Effect.fail(new SessionError.InvalidEventCursor({ id: source.id, seq, length }))

/** What a buffer holds: a commit's events, the mark of an overflow, or the session's end. */
type Item = Chunk.Chunk<SessionEvent> | "mark" | "end"

/** A reader's buffer and what its listener and its pulls share. */
interface Buffer {
  readonly queue: Queue.Queue<Item>
  readonly capacity: number
  /** Events in the queue. */
  held: number
  /** A commit did not fit: the queue holds a mark, and the listener keeps nothing until the reader reads the log. */
  overflowed: boolean
  /** The seq of the next event to emit. */
  next: number
}

/** The listener: each commit into the buffer, or the mark when it does not fit; then the end. */
const fill = (buffer: Buffer): feed.Listener<SessionEvent> => {
  const many = (events: Chunk.Chunk<SessionEvent>): void => {
    if (buffer.overflowed) return
    const size = Chunk.size(events)
    if (buffer.held + size > buffer.capacity) {
      buffer.overflowed = true
      buffer.queue.unsafeOffer("mark")
      return
    }
    buffer.held += size
    buffer.queue.unsafeOffer(events)
  }
  return {
    one: (event) => many(Chunk.of(event)),
    many,
    end: () => {
      buffer.queue.unsafeOffer("end")
    }
  }
}

/**
 * The events of `events` that come next (from `buffer.next`, in order), or when some are missing
 * (the buffer overflowed), the log from `buffer.next` on. Events before `buffer.next` were emitted.
 */
const advance = (source: CursorSource, buffer: Buffer, events: Array<SessionEvent>, missed: boolean) => {
  const from = buffer.next
  const out: Array<SessionEvent> = []
  let expected = from
  for (const event of events) {
    if (event.seq < expected) continue
    if (event.seq > expected) {
      missed = true
      break
    }
    out.push(event)
    expected++
  }
  if (!missed) {
    buffer.next = expected
    return Effect.succeed(Chunk.unsafeFromArray(out))
  }
  // what the reader missed is in the log; the log is read at once after the mark is cleared, so
  // what commits later is in the buffer again (a copy the log also gave is dropped by its seq)
  return Effect.map(source.events, (log) => {
    const rest = log.slice(from)
    buffer.next = log.length
    return Chunk.unsafeFromArray(rest)
  })
}

/** The buffer's events as a stream: one chunk per pull of what waits, until the session's end. */
const drain = (source: CursorSource, buffer: Buffer): Stream.Stream<SessionEvent> => {
  const loop: Channel.Channel<Chunk.Chunk<SessionEvent>> = Channel.flatMap(
    Channel.fromEffect(Queue.takeBetween(buffer.queue, 1, MAX_TAKES)),
    (takes) => {
      const events: Array<SessionEvent> = []
      let ended = false
      for (const item of takes) {
        if (item === "end") {
          ended = true
          break
        }
        if (item !== "mark") for (const event of item) events.push(event)
      }
      buffer.held -= events.length
      const missed = buffer.overflowed
      buffer.overflowed = false
      const read = Channel.fromEffect(advance(source, buffer, events, missed))
      return Channel.flatMap(read, (chunk) => {
        const written = Chunk.isEmpty(chunk) ? Channel.void : Channel.write(chunk)
        return ended ? written : Channel.zipRight(written, loop)
      })
    }
  )
  return Stream.fromChannel(loop)
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
    const queue = yield* Queue.unbounded<Item>()
    const buffer: Buffer = { queue, capacity, held: 0, overflowed: false, next: 0 }
    yield* source.listen(fill(buffer))
    const log = yield* source.events
    yield* checkCursor(source, seq, log.length)
    buffer.next = log.length
    // in chunks: one chunk of a long log would be emitted as one piece
    return Stream.concat(Stream.fromIterable(log.slice(seq)), drain(source, buffer))
  }))
