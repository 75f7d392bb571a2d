/**
 * Stored records read back through the fast path (`parsedEvent`, used by the JSONL reader) are
 * accepted and refused exactly as the schema path (`storedEvent`) accepts and refuses them, with
 * the same errors (EVT-01..03): valid events of every core type and custom events, and the same
 * events damaged in every way a file can damage them (missing and extra keys, wrong types, `-0`,
 * numbers that overflow to Infinity, wrong seq).
 */
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Either, FastCheck as fc, Schema } from "effect"
import { parsedEvent, storedEvent } from "../src/internal/log/eventCodec.js"
import * as SessionEvent from "../src/SessionEvent.js"

const Custom = Schema.Struct({
  seq: Schema.NonNegativeInt,
  time: Schema.NonNegativeInt,
  type: Schema.Literal("test/note", "plugin/record", "x/y/z", "nocustom", "turn/unknown"),
  data: SessionEvent.JsonValue
})

const anyEvent = fc.oneof(
  Arbitrary.make(SessionEvent.CoreEvent),
  Arbitrary.make(SessionEvent.RequestConfig),
  Arbitrary.make(SessionEvent.AssistantMessageLogged),
  Arbitrary.make(SessionEvent.ToolResultLogged),
  Arbitrary.make(SessionEvent.TurnEnd),
  Arbitrary.make(SessionEvent.InboxSpliced),
  Arbitrary.make(Custom)
)

const jsonValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -3, max: 300 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom("", "x", "text", "user", "agent", "tool-call", "next-turn", "canceled", "stop", "a".repeat(257)),
  fc.constant([]),
  fc.constant({}),
  fc.constant({ kind: "user" })
)

/** One change to a record: at the `at`-th place of the tree, delete the key, add one, or replace the value. */
interface Damage {
  readonly at: number
  readonly kind: "delete" | "add" | "replace"
  readonly key: string
  readonly value: unknown
}

const Damage: fc.Arbitrary<Damage> = fc.record({
  at: fc.nat(),
  kind: fc.constantFrom("delete", "add", "replace"),
  key: fc.constantFrom("extra", "type", "kind", "id", "turn", "finish", "interrupted", "outcome", "__proto__"),
  value: jsonValue
})

const places = (value: unknown, out: Array<{ readonly parent: Record<string, unknown>; readonly key: string }>) => {
  if (typeof value !== "object" || value === null) return
  for (const key of Object.keys(value)) {
    out.push({ parent: value as Record<string, unknown>, key })
    places((value as Record<string, unknown>)[key], out)
  }
}

const damage = (record: unknown, changes: ReadonlyArray<Damage>): void => {
  for (const change of changes) {
    const all: Array<{ readonly parent: Record<string, unknown>; readonly key: string }> = []
    places(record, all)
    const place = all[change.at % Math.max(all.length, 1)]
    if (place === undefined) return
    // a fresh copy: the arbitrary's constants are shared between runs and must never be linked into a record
    const value: unknown = JSON.parse(JSON.stringify(change.value))
    if (change.kind === "delete") delete place.parent[place.key]
    else if (change.kind === "replace") place.parent[place.key] = value
    else {
      const target = place.parent[place.key]
      const into = typeof target === "object" && target !== null && !Array.isArray(target) ? target : place.parent
      const property = { value, enumerable: true, writable: true, configurable: true }
      Object.defineProperty(into, change.key, property)
    }
  }
}

/** Both paths on two separately parsed copies of the same text. */
const agree = (text: string, seq: number) => {
  const fast = parsedEvent(JSON.parse(text), seq)
  const slow = storedEvent(JSON.parse(text), seq)
  assert.deepStrictEqual(fast, slow, text)
  if (Either.isRight(fast)) {
    const frozen = (value: unknown): boolean =>
      typeof value !== "object" || value === null ||
      (Object.isFrozen(value) && Object.values(value).every(frozen))
    assert.isTrue(frozen(fast.right), "accepted records are deep-frozen")
  }
}

describe("stored records", () => {
  it.prop(
    "CORE-08 EVT-01..03 the fast path accepts exactly the valid records, as the schema path does",
    [anyEvent],
    ([event]) => {
      agree(JSON.stringify(event), event.seq)
      agree(JSON.stringify(event), event.seq + 1)
    }
  )

  it.prop(
    "CORE-08 EVT-01..03 damaged records are refused by the fast path exactly as by the schema path, with the same error",
    [anyEvent, fc.array(Damage, { minLength: 1, maxLength: 3 })],
    ([event, changes]) => {
      const record: unknown = JSON.parse(JSON.stringify(event))
      damage(record, changes)
      agree(JSON.stringify(record), event.seq)
    },
    { fastCheck: { numRuns: 500 } }
  )

  it.prop(
    "EVT-03 a -0 or a number too large for a double anywhere in a record is refused by both paths alike",
    [anyEvent, fc.nat(), fc.constantFrom("-0", "-0.0", "1e400", "-1e400")],
    ([event, at, literal]) => {
      const text = JSON.stringify(event)
      const numbers = [...text.matchAll(/(?<=[:\[,])-?\d+(\.\d+)?([eE][+-]?\d+)?(?=[,\]}])/g)]
      const hit = numbers[at % Math.max(numbers.length, 1)]
      if (hit === undefined || hit.index === undefined) return
      agree(text.slice(0, hit.index) + literal + text.slice(hit.index + hit[0].length), event.seq)
    },
    { fastCheck: { numRuns: 300 } }
  )
})
