/**
 * The event-stream reader both wire protocols stand on (MOD-03): the data each event dispatches,
 * whatever the line endings, the field spellings and where the network cuts the bytes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect } from "effect"
import * as sse from "../src/internal/sse.js"

/** The data of the events of `text`, its bytes cut into pieces of `size` (all of them at once by default). */
const dataOf = (text: string, size = Number.MAX_SAFE_INTEGER) =>
  Effect.sync(() => {
    const bytes = new TextEncoder().encode(text)
    const pieces: Array<Uint8Array> = []
    for (let at = 0; at < bytes.length; at += size) pieces.push(bytes.subarray(at, at + size))
    const parser = new sse.Parser()
    const out: Array<string> = []
    for (const piece of pieces) parser.feedBytes(piece, out)
    return out
  })

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
})
