/**
 * A Server-Sent Events reader (the WHATWG event-stream format) over the bytes of a body, as the
 * Chat Completions and Messages streaming APIs send it (MOD-03).
 *
 * @internal
 */
const LF = 10
const COLON = 58
const SPACE = 32

/**
 * The event-stream parser, fed the body's bytes (or text) as they arrive, cut anywhere: it decodes
 * UTF-8 (`feedBytes`), splits lines
 * (ended by `\n`, `\r\n` or `\r`, the ending possibly split between two pieces) and collects the
 * data of each event a blank line dispatches (its data lines joined by `\n`). Comments (`:`) and
 * other fields are ignored — `event:` too: neither protocol needs the event's name (Messages
 * repeats it in the data); an event without data lines dispatches nothing, and a last event not
 * followed by a blank line is never dispatched (a connection cut mid-event delivers nothing of
 * it), as the format says. No string is cut but the value of a data line (B13).
 *
 * @internal
 */
export class Parser {
  /** The start of a line the last piece did not finish. */
  private rest = ""
  /** The last piece ended with `\r`: a `\n` opening the next one belongs to that line ending. */
  private afterCR = false
  /** The data lines of the event so far, joined by `\n` (undefined: none yet). */
  private data: string | undefined = undefined
  /** The body's bytes as UTF-8 text: a character cut between two network reads is decoded whole. */
  private readonly decoder = new TextDecoder()

  /** Reads one piece of the body's bytes, pushing the data of each event it completes onto `out`. */
  feedBytes(bytes: Uint8Array, out: Array<string>): void {
    this.feed(this.decoder.decode(bytes, { stream: true }), out)
  }

  /** Reads one piece of the body's text, pushing the data of each event it completes onto `out`. */
  feed(text: string, out: Array<string>): void {
    let from = 0
    if (this.afterCR) {
      this.afterCR = false
      if (text.charCodeAt(0) === LF) from = 1
    }
    const length = text.length
    // line ends found with indexOf (native), not character by character
    let lf = text.indexOf("\n", from)
    let cr = text.indexOf("\r", from)
    while (lf !== -1 || cr !== -1) {
      const end = cr === -1 || (lf !== -1 && lf < cr) ? lf : cr
      if (this.rest === "") {
        this.line(text, from, end, out)
      } else {
        const line = this.rest + text.slice(from, end)
        this.rest = ""
        this.line(line, 0, line.length, out)
      }
      from = end + 1
      if (end === cr) {
        if (from === length) this.afterCR = true
        else if (text.charCodeAt(from) === LF) from++
      }
      if (lf !== -1 && lf < from) lf = text.indexOf("\n", from)
      if (cr !== -1 && cr < from) cr = text.indexOf("\r", from)
    }
    if (from < length) this.rest += text.slice(from)
  }

  /** Applies the line `text[start, end)`: a blank one dispatches, a data field adds its value. */
  private line(text: string, start: number, end: number, out: Array<string>): void {
    if (start === end) {
      if (this.data !== undefined) out.push(this.data)
      this.data = undefined
      return
    }
    // "data" alone, or "data:" and a value whose first space is not part of it
    if (!text.startsWith("data", start)) return
    let value: string
    if (end - start === 4) {
      value = ""
    } else if (text.charCodeAt(start + 4) === COLON) {
      const at = start + 5 < end && text.charCodeAt(start + 5) === SPACE ? start + 6 : start + 5
      value = text.slice(at, end)
    } else {
      return
    }
    this.data = this.data === undefined ? value : this.data + "\n" + value
  }
}
