/**
 * The body of an event-stream response (HTTP-01): one queue that the session's events, the
 * heartbeats and the server's close feed, read as a stream of bytes, each pull writing what waits as
 * one piece.
 *
 * B9: live events arrive one publication at a time (a model's deltas, each in the agent's
 * publishing step), and a `Take` per publication, its queue node and the chunk `Queue.takeBetween`
 * builds of them were most of the garbage of the streaming path. So the queue holds pieces of text:
 * a live event's frame joins the last piece offered while the reader has not taken it (the reader
 * marks a piece taken in the same step as it reads its text, so a frame joins a piece before it is
 * read or goes to a new one); every other frame (durable events, heartbeats, errors) is a piece of
 * its own, and a later live frame starts a new piece, so frames are written in the order they came.
 *
 * SEC-01: what a client has not read is bounded in bytes (`maxBytes`), not in pieces. The body holds
 * the pieces that wait (counted in characters: a byte each for the ASCII of JSON) and the last write
 * it handed to the server. The platform's Node server writes a chunk and, when the socket's buffer is
 * full, waits for `drain` before it pulls the next one; so a pull says the last write has left the
 * process (but for the socket's high-water mark), and until then its bytes count. Over the limit the
 * body takes nothing more of the session's events:
 * - a live frame is dropped (live events are best-effort, EVS-02);
 * - a commit offered in the committing step is refused (`tryDurable`), so the host's reader stops
 *   taking commits and reads them from the session's log when it gets there;
 * - the reader's `durable` makes the next frames only when there is room: it waits holding the events
 *   (the log's own objects), never their frames, and goes on from the first one it did not write.
 * So a client's durable events all arrive, once and in order, whatever its pace, and a stalled client
 * costs at most `maxBytes` (or one frame larger than that, which goes alone when nothing else is held).
 * While the reader waits for room, live frames and heartbeats are dropped too: they would keep the
 * body from emptying, which a frame larger than the limit waits for.
 *
 * @internal
 */
import { Cause, Chunk, Deferred, Duration, Effect, Exit, FiberId, Option, Queue, Stream, Take } from "effect"
import type { EventsError, StreamEvent } from "../../SessionGateway.js"
import type { EventSink } from "../gateway/durableAndLive.js"
import { failureOf } from "../gateway/durableAndLive.js"
import * as Feed from "../feed.js"
import * as sse from "./sse.js"

/** The default limit of what a client has not read (SEC-01): 1 MiB. @internal */
export const DEFAULT_MAX_BYTES = 1024 * 1024

/** Text to write; live frames may join it until the reader takes it. */
interface Piece {
  text: string
  taken: boolean
}

/** What the writers of a body and its reader share. */
interface State {
  readonly queue: Queue.Queue<Take.Take<Piece>>
  readonly maxBytes: number
  /** The last piece offered, which live frames may join while it is not taken. */
  open: Piece | undefined
  /** Characters of the pieces not taken. */
  waiting: number
  /** Bytes of the last write, which the server may still hold: until the next pull. */
  written: number
  /** The durable reader waiting for room, and how much it needs (one reader per body). */
  room: { readonly deferred: Deferred.Deferred<void>; readonly needed: number } | undefined
}

const encoder = new TextEncoder()

// -------------------------------------------------------------------------------------------------
// what the bodies of a session share
//
// The readers of a session are handed each publication and each commit in one step, one after the
// other, and their writers often write the same text. The last frame, commit and write made are kept
// for the next body that needs the same (SEC-01: 80 readers of a session make one frame of each event
// and hold one copy of its bytes, not 80). Frames are functions of frozen events, and bytes handed to
// the server are never changed: sharing them is safe. Each keeps one value, the last.

/** The last value made, and what it was made of. */
interface Last<K, V> {
  key: K | undefined
  value: V
}

const lastLive: Last<object, string> = { key: undefined, value: "" }
const lastDurable: Last<object, string> = { key: undefined, value: "" }
const lastCommit: Last<{ readonly first: object; readonly last: object; readonly size: number }, string> = {
  key: undefined,
  value: ""
}
const lastWrite: Last<string, Uint8Array> = { key: undefined, value: new Uint8Array(0) }

/** A stream event's frame: the last one made when it is the same event. */
const frameOf = (last: Last<object, string>, item: StreamEvent): string => {
  if (item.event !== last.key) {
    last.value = sse.frame(item)
    last.key = item.event
  }
  return last.value
}

/** The frames of a commit's events (offered in the committing step), as one piece of text. */
const commitFrames = (events: Chunk.Chunk<StreamEvent>): string => {
  const first = Chunk.unsafeHead(events).event
  const last = Chunk.unsafeLast(events).event
  const size = Chunk.size(events)
  const seen = lastCommit.key
  if (seen === undefined || seen.first !== first || seen.last !== last || seen.size !== size) {
    let text = ""
    for (const event of events) text += sse.frame(event)
    lastCommit.value = text
    lastCommit.key = { first, last, size }
  }
  return lastCommit.value
}

/** The bytes of a write's text: the last write's when it is the same text. */
const encoded = (text: string): Uint8Array => {
  if (text !== lastWrite.key) {
    lastWrite.value = encoder.encode(text)
    lastWrite.key = text
  }
  return lastWrite.value
}

// -------------------------------------------------------------------------------------------------
// one body

/** What the client has not read: the pieces that wait and the last write. */
const held = (state: State): number => state.waiting + state.written

/** Whether `size` more fits beside `extra` not offered yet: within the limit, or alone when nothing is held. */
const fits = (state: State, extra: number, size: number): boolean => {
  const total = held(state) + extra
  return total === 0 || total + size <= state.maxBytes
}

/** Whether the client is behind: over the limit, or the durable reader waits for room. */
const isBehind = (state: State): boolean => state.room !== undefined || held(state) >= state.maxBytes

/** A piece at the end of the queue (a live one may be joined by the next live frames). */
const enqueue = (state: State, text: string, joinable: boolean): void => {
  const piece: Piece = { text, taken: false }
  state.open = joinable ? piece : undefined
  state.waiting += text.length
  state.queue.unsafeOffer(Take.of(piece))
}

/** A live event's frame, joined to the open piece or in a new one; dropped when the client is behind. */
const live = (state: State, event: StreamEvent): void => {
  if (isBehind(state)) return
  const frame = frameOf(lastLive, event)
  if (!fits(state, 0, frame.length)) return
  const open = state.open
  if (open !== undefined && !open.taken) {
    open.text += frame
    state.waiting += frame.length
    return
  }
  enqueue(state, frame, true)
}

/** Durable events in the committing step: false when they do not fit (the reader re-reads them). */
const tryDurable = (state: State, events: Chunk.Chunk<StreamEvent>): boolean => {
  if (Chunk.isEmpty(events)) return true
  if (isBehind(state)) return false
  const text = commitFrames(events)
  if (!fits(state, 0, text.length)) return false
  enqueue(state, text, false)
  return true
}

/** Waits until `needed` more fits (the reader's pulls wake it). */
const room = (state: State, needed: number): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (fits(state, 0, needed)) return Effect.void
    const deferred = Deferred.unsafeMake<void>(FiberId.none)
    state.room = { deferred, needed }
    return Deferred.await(deferred)
  })

/**
 * Durable events in order, as many frames at a time as fit; between them it waits for room. The
 * size of a frame that did not fit is kept (not its text), so a wake-up that brings too little room
 * makes no frame.
 */
const durable = (state: State, events: Chunk.Chunk<StreamEvent>): Effect.Effect<void> => {
  const all = Chunk.toReadonlyArray(events)
  let next = 0
  // the size of the next frame when it did not fit (1 until then: a frame has a character at least)
  let needed = 1
  const more: Effect.Effect<void> = Effect.suspend(() => {
    let text = ""
    while (next < all.length && fits(state, text.length, needed)) {
      const frame = frameOf(lastDurable, all[next]!)
      if (!fits(state, text.length, frame.length)) {
        needed = frame.length
        break
      }
      text += frame
      next++
      needed = 1
    }
    if (text !== "") enqueue(state, text, false)
    return next < all.length ? Effect.zipRight(room(state, needed), more) : Effect.void
  })
  return more
}

/** A pull starts: the last write has left the server, and the durable reader may go on. */
const pulled = (state: State): void => {
  state.written = 0
  const waiter = state.room
  if (waiter !== undefined && fits(state, 0, waiter.needed)) {
    state.room = undefined
    Deferred.unsafeDone(waiter.deferred, Exit.void)
  }
}

/** The pieces of one pull, read and marked taken in one step (a live frame joins a piece before it is read). */
const write = (state: State, pieces: Chunk.Chunk<Piece>): Chunk.Chunk<Uint8Array> => {
  let text = ""
  for (const taken of pieces) {
    taken.taken = true
    text += taken.text
    state.waiting -= taken.text.length
    // the stream keeps the last pull's pieces until the next pull, which a stalled client never makes
    taken.text = ""
  }
  const bytes = encoded(text)
  state.written = bytes.length
  return Chunk.of(bytes)
}

/** The end after the last durable event: a failure becomes a last `error` frame. */
const end = (state: State, errorFrame: (error: EventsError) => Effect.Effect<string>) =>
(exit: Exit.Exit<void, EventsError>): Effect.Effect<void> =>
  Option.match(failureOf(exit), {
    onNone: () =>
      Effect.sync(() => {
        state.open = undefined
        state.queue.unsafeOffer(Exit.isSuccess(exit) ? Take.end : Take.failCause(Cause.stripFailures(exit.cause)))
      }),
    onSome: (error) =>
      Effect.map(errorFrame(error), (frame) => {
        enqueue(state, frame, false)
        state.queue.unsafeOffer(Take.end)
      })
  })

/** A body: its queue of pieces and what its writers share. @internal */
export interface Body {
  /** A piece of its own that always goes (the first `retry` line). */
  readonly offer: (text: string) => Effect.Effect<void>
  /** A heartbeat, unless the client is behind (it has output waiting then). */
  readonly heartbeat: Effect.Effect<void>
  /** The server's close: the end after what waits, or when the client is behind, cut off at once. */
  readonly close: Effect.Effect<void>
  /** The session's events as the body's sink; `errorFrame` makes the last frame of a failure. */
  readonly sink: (errorFrame: (error: EventsError) => Effect.Effect<string>) => EventSink<EventsError>
  /** The bytes to write, one piece of them per pull of what waits. */
  readonly bytes: Stream.Stream<Uint8Array>
}

/** A body holding at most `maxBytes` that the client has not read (SEC-01). @internal */
export const make = (maxBytes: number): Effect.Effect<Body> =>
  Effect.map(Queue.unbounded<Take.Take<Piece>>(), (queue) => {
    const state: State = { queue, maxBytes, open: undefined, waiting: 0, written: 0, room: undefined }
    return {
      offer: (text) => Effect.sync(() => enqueue(state, text, false)),
      heartbeat: Effect.sync(() => {
        if (!isBehind(state) && fits(state, 0, sse.heartbeatFrame.length)) enqueue(state, sse.heartbeatFrame, false)
      }),
      close: Effect.suspend(() => {
        state.open = undefined
        if (isBehind(state)) return Queue.shutdown(queue)
        queue.unsafeOffer(Take.end)
        return Effect.void
      }),
      sink: (errorFrame) => ({
        live: (event) => live(state, event),
        tryDurable: (events) => tryDurable(state, events),
        durable: (events) => durable(state, events),
        end: end(state, errorFrame)
      }),
      bytes: Stream.mapChunks(
        Feed.fromTakes(queue, { gather: true, onPull: () => pulled(state) }),
        (pieces) => write(state, pieces)
      )
    }
  })

/** Offers a heartbeat each `every`, for as long as the connection lasts. @internal */
export const heartbeats = (body: Body, every: Duration.Duration): Effect.Effect<never> =>
  Effect.forever(Effect.zipRight(Effect.sleep(every), body.heartbeat))

/**
 * The server's close (HOST-05: streams end first): the body ends after the frames it holds; when
 * the client is so far behind that it is over its limit, the body is cut off at once (the client
 * reconnects with Last-Event-ID). A response the client does not read at all is the server's to
 * close: `serve` stops accepting and closes the listener first.
 *
 * @internal
 */
export const endOnClose = (body: Body, closing: Deferred.Deferred<void>): Effect.Effect<void> =>
  Effect.zipRight(Deferred.await(closing), body.close)
