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
 * Bounds: the queue holds `CAPACITY` pieces; durable frames wait for room, and live frames are
 * dropped while more than `LIVE_LIMIT` characters of them wait (the client has stalled; live events
 * are best-effort, EVS-02, and the durable ones are re-read from the session's log).
 *
 * @internal
 */
import { Cause, Chunk, Deferred, Duration, Effect, Exit, Option, Queue, Stream, Take } from "effect"
import type { EventsError, StreamEvent } from "../SessionGateway.js"
import type { EventSink } from "./durableAndLive.js"
import { failureOf } from "./durableAndLive.js"
import * as Feed from "./feed.js"
import * as sse from "./httpSse.js"

/** Pieces the queue holds before durable frames wait for the client. @internal */
export const CAPACITY = 1024

/** Characters of live frames that may wait before more are dropped. @internal */
export const LIVE_LIMIT = 4 * 1024 * 1024

/** Text to write; live frames may join it until the reader takes it. */
interface Piece {
  text: string
  /** Characters of live frames in `text`. */
  live: number
  taken: boolean
}

const encoder = new TextEncoder()

/** The frames of some stream events, as one piece of text. */
const framesOf = (events: Iterable<StreamEvent>): string => {
  let text = ""
  for (const event of events) text += sse.frame(event)
  return text
}

/** A body: its queue of pieces and what its writers share. @internal */
export interface Body {
  /** A piece of its own (durable events, a heartbeat, an error): waits for room. */
  readonly offer: (text: string) => Effect.Effect<void>
  /** The server's close: the end after what waits, or when the body is full, cut off at once. */
  readonly close: Effect.Effect<void>
  /** The session's events as the body's sink; `errorFrame` makes the last frame of a failure. */
  readonly sink: (errorFrame: (error: EventsError) => Effect.Effect<string>) => EventSink<EventsError>
  /** The bytes to write, one piece of them per pull of what waits. */
  readonly bytes: Stream.Stream<Uint8Array>
}

/** @internal */
export const make: Effect.Effect<Body> = Effect.map(Queue.bounded<Take.Take<Piece>>(CAPACITY), (queue) => {
  // the last piece offered, which live frames may join while it is not taken
  let open: Piece | undefined
  // characters of live frames offered and not taken
  let liveWaiting = 0
  const piece = (text: string): Take.Take<Piece> => {
    open = undefined
    return Take.of({ text, live: 0, taken: false })
  }
  const offer = (text: string) => Effect.suspend(() => Queue.offer(queue, piece(text)))
  const live = (event: StreamEvent): void => {
    if (liveWaiting > LIVE_LIMIT) return
    const frame = sse.frame(event)
    if (open !== undefined && !open.taken) {
      open.text += frame
      open.live += frame.length
      liveWaiting += frame.length
      return
    }
    const next: Piece = { text: frame, live: frame.length, taken: false }
    if (queue.unsafeOffer(Take.of(next))) {
      open = next
      liveWaiting += frame.length
    }
  }
  const end = (errorFrame: (error: EventsError) => Effect.Effect<string>) => (exit: Exit.Exit<void, EventsError>) =>
    Option.match(failureOf(exit), {
      onNone: () =>
        Effect.suspend(() => {
          open = undefined
          return Queue.offer(queue, Exit.isSuccess(exit) ? Take.end : Take.failCause(Cause.stripFailures(exit.cause)))
        }),
      onSome: (error) =>
        Effect.flatMap(errorFrame(error), (frame) => Effect.zipRight(offer(frame), Queue.offer(queue, Take.end)))
    })
  // read and marked taken in one step: a live frame joins a piece before it is read, or starts another
  const write = (pieces: Chunk.Chunk<Piece>): Chunk.Chunk<Uint8Array> => {
    let text = ""
    for (const taken of pieces) {
      taken.taken = true
      text += taken.text
      liveWaiting -= taken.live
    }
    return Chunk.of(encoder.encode(text))
  }
  return {
    offer,
    close: Effect.suspend(() => {
      open = undefined
      return queue.unsafeOffer(Take.end) ? Effect.void : Queue.shutdown(queue)
    }),
    sink: (errorFrame) => ({
      live,
      tryDurable: (events) => queue.unsafeOffer(piece(framesOf(events))),
      durable: (events) => offer(framesOf(events)),
      end: end(errorFrame)
    }),
    bytes: Stream.mapChunks(Feed.fromTakes(queue, { gather: true }), write)
  }
})

/** Offers a heartbeat each `every`, for as long as the connection lasts. @internal */
export const heartbeats = (body: Body, every: Duration.Duration): Effect.Effect<never> =>
  Effect.forever(Effect.zipRight(Effect.sleep(every), body.offer(sse.heartbeatFrame)))

/**
 * The server's close (HOST-05: streams end first): the body ends after the frames it holds; when
 * the client is so far behind that the body is full, the body is cut off at once (the client
 * reconnects with Last-Event-ID). A response the client does not read at all is the server's to
 * close: `serve` stops accepting and closes the listener first.
 *
 * @internal
 */
export const endOnClose = (body: Body, closing: Deferred.Deferred<void>): Effect.Effect<void> =>
  Effect.zipRight(Deferred.await(closing), body.close)
