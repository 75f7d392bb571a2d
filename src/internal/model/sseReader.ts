/**
 * A Server-Sent Events reader (the WHATWG event-stream format) over the bytes of a body, as the
 * Chat Completions and Messages streaming APIs send it (MOD-03).
 *
 * @internal
 */
import { utf8Length } from "../log/recordSize.js"

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
 * SEC-02: an event (everything from the blank line before it to the blank line that ends it: its
 * lines and their endings) may be at most `maxEventBytes` UTF-8 bytes. The count runs while the
 * bytes arrive — a line that never ends is caught by the piece that takes it over the limit —
 * and once over, the parser sets {@link tooLarge}, dispatches nothing of that event and reads no
 * more.
 *
 * @internal
 */
export class Parser {
  /** The start of a line the last piece did not finish. */
  private rest = ""
  /** The last piece ended with `\r`: a `\n` opening the next one belongs to that line ending. */
  private afterCR = false
  /** That `\r` ended a blank line: its `\n` is not part of the next event. */
  private afterBlank = false
  /** The data lines of the event so far, joined by `\n` (undefined: none yet). */
  private data: string | undefined = undefined
  /** The body's bytes as UTF-8 text: a character cut between two network reads is decoded whole. */
  private readonly decoder = new TextDecoder()
  /** The UTF-8 bytes the event being read got from earlier pieces (a character they cut included). */
  private held = 0
  /** The bytes of a character the last piece cut, which the decoder holds (0 to 3), and its full length. */
  private cut = 0
  private cutLength = 0
  /** The event being read went over `maxEventBytes`: nothing more is parsed (SEC-02). */
  tooLarge = false

  constructor(private readonly maxEventBytes: number = Number.POSITIVE_INFINITY) {}

  /** Reads one piece of the body's bytes, pushing the data of each event it completes onto `out`. */
  feedBytes(bytes: Uint8Array, out: Array<string>): void {
    const before = this.cut
    this.cutAfter(bytes)
    this.read(this.decoder.decode(bytes, { stream: true }), out, bytes.length, before)
  }

  /** Reads one piece of the body's text, pushing the data of each event it completes onto `out`. */
  feed(text: string, out: Array<string>): void {
    this.read(text, out, undefined, 0)
  }

  /**
   * Notes the bytes of a character `bytes` leaves unfinished (its text comes with the next piece):
   * counted with the piece that brought them, not again with the text of the next one.
   */
  private cutAfter(bytes: Uint8Array): void {
    const length = bytes.length
    let back = 0
    while (back < 3 && back < length && (bytes[length - 1 - back]! & 0xc0) === 0x80) back++
    if (back === length) {
      // continuation bytes only: they go on the character the last piece cut
      const have = this.cut + length
      this.cut = this.cut > 0 && have < this.cutLength ? have : 0
      return
    }
    const lead = bytes[length - 1 - back]!
    const need = lead >= 0xf0 && lead < 0xf8 ? 4 : lead >= 0xe0 && lead < 0xf0 ? 3 : lead >= 0xc0 && lead < 0xe0 ? 2 : 1
    this.cut = need > back + 1 ? back + 1 : 0
    this.cutLength = need
  }

  /**
   * Reads one piece's text; `byteLength` is the piece's size in bytes when it came as bytes, and
   * `carried` the bytes of its first character that the last piece brought (counted then).
   */
  private read(text: string, out: Array<string>, byteLength: number | undefined, carried: number): void {
    if (this.tooLarge) return
    let from = 0
    // where the event being read starts in this piece (0: in an earlier one, whose bytes are `held`)
    let eventStart = 0
    if (this.afterCR) {
      this.afterCR = false
      if (text.charCodeAt(0) === LF) {
        from = 1
        if (this.afterBlank) eventStart = 1
      }
    }
    const length = text.length
    // line ends found with indexOf (native), not character by character
    let lf = text.indexOf("\n", from)
    let cr = text.indexOf("\r", from)
    while (lf !== -1 || cr !== -1) {
      const end = cr === -1 || (lf !== -1 && lf < cr) ? lf : cr
      const blank = this.rest === "" && end === from
      if (blank) {
        if (!this.fits(text, eventStart, end, eventStart === 0 ? carried : 0)) return
        if (this.data !== undefined) out.push(this.data)
        this.data = undefined
      } else if (this.rest === "") {
        this.line(text, from, end)
      } else {
        const line = this.rest + text.slice(from, end)
        this.rest = ""
        this.line(line, 0, line.length)
      }
      from = end + 1
      if (end === cr) {
        if (from === length) {
          this.afterCR = true
          this.afterBlank = blank
        } else if (text.charCodeAt(from) === LF) {
          from++
        }
      }
      if (blank) {
        eventStart = from
        this.held = 0
      }
      if (lf !== -1 && lf < from) lf = text.indexOf("\n", from)
      if (cr !== -1 && cr < from) cr = text.indexOf("\r", from)
    }
    if (from < length) this.rest += text.slice(from)
    if (eventStart === 0) {
      this.held += byteLength ?? utf8Length(text)
    } else {
      // the event that starts in this piece: its text, and the bytes of a character cut at the end
      const tail = eventStart < length ? utf8Length(text.slice(eventStart)) : 0
      this.held = tail + (byteLength === undefined ? 0 : this.cut)
    }
    if (this.held > this.maxEventBytes) this.tooLarge = true
  }

  /**
   * Whether the event ending at `text[end]` is within the limit: what earlier pieces brought and
   * its part of this piece (less the `carried` bytes of a cut character, counted before), measured
   * exactly only when it could be over (a UTF-16 unit is at most 3 bytes).
   */
  private fits(text: string, eventStart: number, end: number, carried: number): boolean {
    if (this.held + 3 * (end - eventStart) <= this.maxEventBytes) return true
    if (this.held + utf8Length(text.slice(eventStart, end)) - carried <= this.maxEventBytes) return true
    this.tooLarge = true
    return false
  }

  /** Applies the non-blank line `text[start, end)`: a data field adds its value. */
  private line(text: string, start: number, end: number): void {
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
