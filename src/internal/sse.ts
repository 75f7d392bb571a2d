/**
 * A Server-Sent Events reader (the WHATWG event-stream format) over a byte stream, as the Chat
 * Completions and Messages streaming APIs send it (MOD-03).
 *
 * @internal
 */
import { Chunk, Stream } from "effect"

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

/** The fields of the event being read, between blank lines. */
class Pending {
  event = ""
  data: Array<string> = []
  hasData = false

  /** Applies one non-empty line; comments (`:`) and unknown fields are ignored. */
  field(line: string): void {
    if (line.startsWith(":")) return
    const colon = line.indexOf(":")
    const name = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? "" : line.slice(colon + 1)
    if (value.startsWith(" ")) value = value.slice(1)
    if (name === "data") {
      this.data.push(value)
      this.hasData = true
    } else if (name === "event") {
      this.event = value
    }
  }

  /** The event a blank line dispatches, or undefined when it had no data (per the format). */
  dispatch(): SseEvent | undefined {
    const out = this.hasData ? { event: this.event === "" ? "message" : this.event, data: this.data.join("\n") } : undefined
    this.event = ""
    this.data = []
    this.hasData = false
    return out
  }
}

/**
 * The events of a text/event-stream body. Lines end with `\n`, `\r\n` or `\r`; an event is
 * dispatched at a blank line; a last event not followed by a blank line is dropped, as the
 * format says (a connection cut mid-event delivers nothing of it).
 *
 * @internal
 */
export const events = <E, R>(body: Stream.Stream<Uint8Array, E, R>): Stream.Stream<SseEvent, E, R> =>
  Stream.suspend(() => {
    const pending = new Pending()
    return body.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.mapChunks((lines) => {
        const out: Array<SseEvent> = []
        for (const line of lines) {
          if (line === "") {
            const event = pending.dispatch()
            if (event !== undefined) out.push(event)
          } else {
            pending.field(line)
          }
        }
        return Chunk.unsafeFromArray(out)
      })
    )
  })
