/**
 * The event-stream reader both wire protocols stand on (MOD-03): the data each event dispatches,
 * whatever the line endings, the field spellings and where the network cuts the bytes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, FastCheck as fc } from "effect"
import * as sse from "../src/internal/model/sseReader.js"

/** What the parser makes of `text`, its bytes cut into pieces of `size`: the events' data, and whether it stopped (SEC-02). */
const parse = (text: string, size: number, maxEventBytes?: number) => {
  const bytes = new TextEncoder().encode(text)
  const parser = new sse.Parser(maxEventBytes)
  const out: Array<string> = []
  for (let at = 0; at < bytes.length; at += size) parser.feedBytes(bytes.subarray(at, at + size), out)
  return { data: out, tooLarge: parser.tooLarge }
}

/** The data of the events of `text`, its bytes cut into pieces of `size` (all of them at once by default). */
const dataOf = (text: string, size = Number.MAX_SAFE_INTEGER) => Effect.sync(() => parse(text, size).data)

const cases: ReadonlyArray<readonly [string, string, ReadonlyArray<string>]> = [
  ["one event", "data: a\n\n", ["a"]],
  ["no space after the colon", "data:a\n\n", ["a"]],
  ["only the first space is dropped", "data:  a\n\n", [" a"]],
  ["data lines joined by \\n", "data: a\ndata: b\n\n", ["a\nb"]],
  ["a bare data field is an empty line", "data\n\n", [""]],
  ["an empty data line", "data:\n\n", [""]],
  ["comments dispatch nothing", ": keep-alive\n\n", []],
  ["event, id and retry fields are skipped", "event: delta\nid: 7\nretry: 10\ndata: b\n\n", ["b"]],
  ["an event without data dispatches nothing", "event: ping\n\ndata: c\n\n", ["c"]],
  ["a field that only starts with data is not data", "dataX: q\n\n", []],
  ["a last event without its blank line is dropped", "data: a\n\ndata: cut", ["a"]],
  ["CRLF line endings", "data: a\r\n\r\ndata: b\r\n\r\n", ["a", "b"]],
  ["CR line endings", "data: a\r\rdata: b\r\r", ["a", "b"]],
  ["mixed line endings", "data: a\rdata: b\r\n\ndata: c\n\r", ["a\nb", "c"]],
  ["a value holding a colon", "data: {\"a\":1}\n\n", ["{\"a\":1}"]],
  ["a JSON chunk and [DONE]", `data: {"x":"é ✓"}\n\ndata: [DONE]\n\n`, [`{"x":"é ✓"}`, "[DONE]"]]
]

describe("LanguageModelAdapter event-stream reader", () => {
  it.effect("MOD-03 SSE events: the data each dispatches, whole or cut into bytes anywhere", () =>
    Effect.gen(function*() {
      for (const [name, text, expected] of cases) {
        assert.deepStrictEqual(yield* dataOf(text), expected, name)
        // every cut, including inside "\r\n" and inside a multi-byte character
        for (const size of [1, 2, 3, 5]) {
          assert.deepStrictEqual(yield* dataOf(text, size), expected, `${name}, ${size}-byte pieces`)
        }
      }
    }))

  it.effect("MOD-03 SSE events: many events in one network read come out in order", () =>
    Effect.gen(function*() {
      const text = Array.from({ length: 500 }, (_, i) => `data: {"i":${i}}\n\n`).join("")
      const data = yield* dataOf(text, 4096)
      assert.deepStrictEqual(data, Array.from({ length: 500 }, (_, i) => `{"i":${i}}`))
      assert.strictEqual(Chunk.size(Chunk.fromIterable(data)), 500)
    }))

  it.effect("SEC-02 an event is counted in UTF-8 bytes as it arrives: at the limit it passes, one byte over stops the parser, however the body is cut", () =>
    Effect.sync(() => {
      // the event's size is its lines and their endings: "data: é✓\r\n" is 6 + 2 + 3 + 2 = 13 bytes
      const cases: ReadonlyArray<readonly [string, string, number]> = [
        ["LF", "data: ab\n\ndata: é✓\n\ndata: c\n\n", 12],
        ["CRLF", "data: ab\r\n\r\ndata: é✓\r\n\r\ndata: c\r\n\r\n", 13],
        ["CR", "data: ab\r\rdata: é✓\r\rdata: c\r\r", 12],
        ["two data lines and a comment", ": hi\ndata: é\ndata: ✓\n\n", 4 + 1 + 9 + 10]
      ]
      for (const [name, text, size] of cases) {
        for (const piece of [1, 2, 3, 5, 7, 1000]) {
          const at = parse(text, piece, size)
          assert.isFalse(at.tooLarge, `${name}, ${piece}-byte pieces, at the limit`)
          assert.strictEqual(at.data.length, name.startsWith("two") ? 1 : 3, `${name}, ${piece}-byte pieces`)
          const over = parse(text, piece, size - 1)
          assert.isTrue(over.tooLarge, `${name}, ${piece}-byte pieces, one byte over`)
          // nothing of the event over the limit, nor after it, is dispatched
          assert.deepStrictEqual(over.data, name.startsWith("two") ? [] : ["ab"], `${name}, ${piece}-byte pieces`)
        }
      }
    }))

  it.effect("SEC-02 a line that never ends stops the parser once it passes the limit, holding no more than a piece beyond it", () =>
    Effect.sync(() => {
      const parser = new sse.Parser(10_000)
      const out: Array<string> = []
      const piece = new TextEncoder().encode("x".repeat(4096))
      parser.feedBytes(new TextEncoder().encode("data: ok\n\ndata: "), out)
      let fed = 0
      while (!parser.tooLarge && fed < 100) {
        parser.feedBytes(piece, out)
        fed++
      }
      assert.isTrue(parser.tooLarge)
      // 6 bytes of "data: " and two pieces are under 10,000; the third takes it over
      assert.strictEqual(fed, 3)
      assert.deepStrictEqual(out, ["ok"])
      // and it reads nothing more
      parser.feedBytes(new TextEncoder().encode("\n\ndata: late\n\n"), out)
      assert.deepStrictEqual(out, ["ok"])
    }))

  /** Events of data lines (no line ending inside a value), each line and blank line with its own ending. */
  const EventsArb = fc.array(
    fc.record({
      lines: fc.array(fc.string({ unit: "binary", maxLength: 12 }).map((v) => v.replace(/[\r\n]/g, "")), {
        minLength: 1,
        maxLength: 3
      }),
      endings: fc.array(fc.constantFrom("\n", "\r\n", "\r"), { minLength: 4, maxLength: 4 })
    }),
    { minLength: 1, maxLength: 5 }
  )

  it.prop(
    "SEC-02 for any events and any cuts, the parser's count is each event's UTF-8 size: the largest passes at its size and stops one byte under",
    [EventsArb, fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 20 })],
    ([events, cuts]) => {
      const bytes = (text: string) => new TextEncoder().encode(text).length
      let text = ""
      let largest = 0
      for (const { endings, lines } of events) {
        // an event is its lines with their endings; the blank line that ends it is not counted
        const body = lines.map((line, i) => `data: ${line}${endings[i]!}`).join("")
        largest = Math.max(largest, bytes(body))
        // a CR ending followed by a blank line's LF would read as one CRLF: keep each blank line apart
        text += body + (endings[lines.length - 1] === "\r" && endings[3] === "\n" ? "\r\n" : endings[3]!)
      }
      const encoded = new TextEncoder().encode(text)
      const run = (limit: number) => {
        const parser = new sse.Parser(limit)
        const out: Array<string> = []
        let at = 0
        for (let i = 0; at < encoded.length; i++) {
          const size = cuts[i % cuts.length]!
          parser.feedBytes(encoded.subarray(at, at + size), out)
          at += size
        }
        return { tooLarge: parser.tooLarge, data: out }
      }
      const fits = run(largest)
      assert.isFalse(fits.tooLarge)
      assert.strictEqual(fits.data.length, events.length)
      assert.isTrue(run(largest - 1).tooLarge)
    },
    { fastCheck: { numRuns: 300 } }
  )
})
