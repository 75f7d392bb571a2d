/**
 * A Server-Sent Events reader (the WHATWG event-stream format) over a byte stream, as the Chat
 * Completions and Messages streaming APIs send it (MOD-03).
 *
 * @internal
 */
import { Stream } from "effect"

/**
 * One dispatched event: its `event` field (`"message"` when absent) and its data lines joined by
 * `\n`.
 *
 * @internal
 */
export interface SseEvent {
  readonly event: string
  readonly data: string
}

/**
 * The event-stream parser: fed one line at a time (without its line ending), it returns the event
 * a blank line dispatches. Comments (`:`) and unknown fields are ignored; an event without data
 * lines dispatches nothing, as the format says.
 *
 * @internal
 */
export class Parser {
  private event = ""
  /** The data lines so far, joined by `\n` (undefined: none yet). */
  private data: string | undefined = undefined

  /** Applies one line; a blank line dispatches the event read since the last one. */
  line(line: string): SseEvent | undefined {
    if (line === "") return this.dispatch()
    if (line.charCodeAt(0) === 58) return undefined // ":" starts a comment
    const colon = line.indexOf(":")
    if (colon === -1) {
      this.field(line, "")
      return undefined
    }
    // one space after the colon is not part of the value
    const start = line.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1
    this.field(line.slice(0, colon), line.slice(start))
    return undefined
  }

  private field(name: string, value: string): void {
    if (name === "data") this.data = this.data === undefined ? value : this.data + "\n" + value
    else if (name === "event") this.event = value
  }

  private dispatch(): SseEvent | undefined {
    const data = this.data
    const event = this.event
    this.data = undefined
    this.event = ""
    return data === undefined ? undefined : { event: event === "" ? "message" : event, data }
  }
}

/**
 * The lines of a text/event-stream body, decoded as UTF-8, for a {@link Parser}. Lines end with
 * `\n`, `\r\n` or `\r`. A last event not followed by a blank line is never dispatched, as the
 * format says (a connection cut mid-event delivers nothing of it).
 *
 * @internal
 */
export const lines = <E, R>(body: Stream.Stream<Uint8Array, E, R>): Stream.Stream<string, E, R> =>
  body.pipe(Stream.decodeText(), Stream.splitLines)
