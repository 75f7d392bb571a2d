/**
 * Durable-data integrity (SPEC §15): what a live process appends, a reader always accepts — one
 * codec for append and read (DUR-01), normalised model and tool output (DUR-02), prototype-safe
 * data (DUR-03), one validation on every backend (DUR-09), no crash on hostile values (DUR-10).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Exit, FastCheck, Layer, Ref, Schema, Stream } from "effect"
import type { Scope } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as codec from "../src/internal/log/eventCodec.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Session from "../src/Session.js"
import * as SessionEvent from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { type Backend, backends } from "./fixtures/backends.js"

const sid: (id: string) => Message.SessionId = Schema.decodeSync(Message.SessionId)

// -------------------------------------------------------------------------------------------------
// Hostile values

/** `depth` nested arrays around `inner`. */
const nested = (depth: number, inner: unknown = 0): unknown => {
  let value = inner
  for (let i = 0; i < depth; i++) value = [value]
  return value
}

/** A plain object with an own `__proto__` data property, as JSON.parse makes one. */
const withProtoKey = (value: unknown, rest: Record<string, unknown> = {}): Record<string, unknown> => {
  const out: Record<string, unknown> = { ...rest }
  Object.defineProperty(out, "__proto__", { value, enumerable: true, writable: true, configurable: true })
  return out
}

const throwingGetter = (): unknown => {
  const o: Record<string, unknown> = { a: 1 }
  Object.defineProperty(o, "b", {
    enumerable: true,
    get() {
      throw new Error("getter says no")
    }
  })
  return o
}

const throwingProxy = (): unknown =>
  new Proxy({}, {
    ownKeys() {
      throw new Error("ownKeys says no")
    }
  })

const prototypeTrapProxy = (): unknown =>
  new Proxy({}, {
    getPrototypeOf() {
      throw new Error("getPrototypeOf says no")
    }
  })

/** An object whose field `a` is inherited from a null-prototype parent (DUR-10: never silently dropped). */
const nullPrototypeChain = (): unknown => {
  const parent = Object.create(null) as Record<string, unknown>
  parent["a"] = 1
  return Object.create(parent)
}

/** A custom event that the reader would refuse, and why it is in the list. */
const refused: ReadonlyArray<readonly [string, SessionEvent.CustomEventInput]> = [
  ["depth 1001", { type: "test/deep", data: nested(1001) }],
  ["depth 100,000 (no stack overflow)", { type: "test/deep", data: nested(100_000) }],
  ["a throwing getter", { type: "test/hostile", data: throwingGetter() }],
  ["a proxy whose ownKeys throws", { type: "test/hostile", data: { inner: throwingProxy() } }],
  ["a proxy whose getPrototypeOf throws", { type: "test/hostile", data: [prototypeTrapProxy()] }],
  ["a null-prototype chain", { type: "test/hostile", data: nullPrototypeChain() }],
  ["NUL in the type", { type: "test/a\u0000b", data: null }],
  ["a lone surrogate in the type", { type: "test/\ud800", data: null }],
  ["a type over 256 characters", { type: `test/${"x".repeat(260)}`, data: null }],
  ["-0", { type: "test/x", data: { n: -0 } }],
  ["NaN", { type: "test/x", data: [Number.NaN] }],
  ["a BigInt", { type: "test/x", data: { n: 1n } }],
  ["a Date", { type: "test/x", data: { at: new Date(0) } }],
  ["an input whose type getter throws", Object.defineProperty({ data: 1 }, "type", {
    get() {
      throw new Error("type says no")
    }
  }) as unknown as SessionEvent.CustomEventInput]
]

/** Custom events the reader accepts, including the edge cases next to the refused ones. */
const accepted: ReadonlyArray<readonly [string, SessionEvent.CustomEventInput]> = [
  ["depth 1000", { type: "test/deep", data: nested(999, [1]) }],
  ["an own __proto__ key", { type: "test/proto", data: withProtoKey({ polluted: true }, { ok: 1 }) }],
  ["__proto__ and constructor keys deep inside", {
    type: "test/proto",
    data: { list: [withProtoKey([1, 2]), { constructor: { prototype: { x: 1 } } }] }
  }],
  ["a null-prototype object", { type: "test/plain", data: Object.assign(Object.create(null), { a: [1, "b"] }) }],
  ["a lone surrogate in data", { type: "test/text", data: { s: "\ud800 and NUL \u0000" } }],
  ["a type of 256 characters", { type: `t/${"y".repeat(254)}`, data: 0 }]
]

/** Events compared as the JSON text they stand for (own `__proto__` keys included). */
const asJson = (events: ReadonlyArray<SessionEvent.SessionEvent>) => events.map((event) => JSON.stringify(event))

const newSession = (id: string) =>
  Effect.gen(function*() {
    const persistence = yield* SessionPersistence
    const planned = Session.plan({ id, createdAt: 0 })
    if (Either.isLeft(planned)) return yield* Effect.die(planned.left)
    const writer = yield* persistence.create(planned.right.header)
    return yield* Session.fromPlan(planned.right, writer)
  })

const provideBackend = (backend: Backend) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, unknown, Exclude<R, SessionPersistence> | Scope.Scope> =>
  Effect.flatMap(backend.make, (layer) => Effect.provide(self, layer))

// -------------------------------------------------------------------------------------------------

describe("one codec for append and read (DUR-01, DUR-09, DUR-10)", () => {
  const typeArbitrary = FastCheck.oneof(
    FastCheck.constantFrom(
      "test/x",
      "a/b/c",
      "noslash",
      "turn/start",
      "agent/new-thing",
      "session/compacted",
      "test/\u0000",
      "test/\udc00x",
      `test/${"z".repeat(300)}`
    ),
    FastCheck.string({ unit: "binary", maxLength: 12 }).map((s) => `p/${s}`),
    FastCheck.string({ maxLength: 8 })
  )
  // JSON texts with `__proto__`/`constructor` keys on purpose, and nesting around the depth limit
  const jsonTextArbitrary = FastCheck.oneof(
    FastCheck.json({ maxDepth: 4 }),
    FastCheck.json({ maxDepth: 2 }).map((inner) => `{"__proto__":${inner},"constructor":${inner}}`),
    FastCheck.integer({ min: 995, max: 1_005 }).map((depth) => "[".repeat(depth) + "]".repeat(depth)),
    FastCheck.constantFrom("-0", "[1e400]", "{\"a\":-0.0}")
  )

  it.prop(
    "DUR-01 DUR-09 a record is accepted at append exactly when the reader accepts it, and reads back unchanged",
    [typeArbitrary, jsonTextArbitrary],
    ([type, text]) => {
      const data: unknown = JSON.parse(text)
      const appended = SessionEvent.isReservedType(type)
        ? codec.coreEvent({ type, data } as SessionEvent.CoreEventInput)
        : codec.customInput({ type, data })
      const record = `{"seq":0,"time":0,"type":${JSON.stringify(type)},"data":${text}}`
      const read = codec.storedEvent(JSON.parse(record), 0)
      assert.strictEqual(Either.isRight(appended), Either.isRight(read), `${type} ${text.slice(0, 80)}`)
      if (Either.isRight(appended) && Either.isRight(read)) {
        assert.strictEqual(JSON.stringify(read.right.data), JSON.stringify(appended.right.data))
        assert.strictEqual(JSON.stringify(appended.right.data), JSON.stringify(JSON.parse(text)))
      }
    },
    { fastCheck: { numRuns: 400 } }
  )

  it("DUR-01 events written without a session (repair closers) are checked by the reader's rules first", () => {
    const valid = { seq: 3, time: 0, type: "turn/end", data: { turn: 1, reason: { kind: "interrupted" } } }
    assert.isTrue(Either.isRight(codec.checkBeforeWrite([valid as SessionEvent.SessionEvent])))
    const refused = codec.checkBeforeWrite([
      valid as SessionEvent.SessionEvent,
      { seq: 4, time: 0, type: "tool/result", data: { turn: 1, step: 1, message: { id: "" } } } as never
    ])
    assert.isTrue(Either.isLeft(refused))
    if (Either.isLeft(refused)) assert.strictEqual(refused.left.type, "tool/result")
  })

  it("DUR-01 the fast path of the reader and the full decode agree on the same record", () => {
    // a record the fast path (acceptParsedEvent) declines is decided by storedEvent, and both agree
    const deep = JSON.parse(`{"seq":0,"time":0,"type":"test/x","data":${"[".repeat(1_001)}${"]".repeat(1_001)}}`)
    assert.isUndefined(codec.acceptParsedEvent(deep, 0))
    assert.isTrue(Either.isLeft(codec.storedEvent(deep, 0)))
    const edge = JSON.parse(`{"seq":0,"time":0,"type":"test/x","data":${"[".repeat(1_000)}${"]".repeat(1_000)}}`)
    assert.isDefined(codec.acceptParsedEvent(edge, 0))
  })
})

for (const backend of backends) {
  describe(`append and read agree on ${backend.name} (DUR-01, DUR-09, DUR-10)`, () => {
    it.scoped(`DUR-01 DUR-10 on ${backend.name}: hostile data is refused with InvalidEventData before anything is written`, () =>
      Effect.gen(function*() {
        const session = yield* newSession("hostile")
        for (const [why, input] of refused) {
          const exit = yield* Effect.exit(session.append(input))
          assert.isTrue(Exit.isFailure(exit), why)
          if (Exit.isFailure(exit)) {
            const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
            assert.strictEqual(error?._tag, "InvalidEventData", `${why}: ${String(exit.cause)}`)
          }
        }
        for (const [why, input] of accepted) {
          const exit = yield* Effect.exit(session.append(input))
          assert.isTrue(Exit.isSuccess(exit), `${why}: ${Exit.isFailure(exit) ? String(exit.cause) : ""}`)
        }
        const live = yield* session.events
        assert.strictEqual(live.length, accepted.length)
        const stored = yield* Effect.flatMap(SessionPersistence, (persistence) => persistence.read(session.id))
        assert.deepStrictEqual(asJson(stored.events), asJson(live))
        // an own __proto__ key stays an own data property after the round trip (DUR-03)
        const proto = stored.events[1]!.data as Record<string, unknown>
        assert.isTrue(Object.prototype.hasOwnProperty.call(proto, "__proto__"))
        assert.strictEqual(Object.getPrototypeOf(proto), Object.prototype)
        assert.isUndefined((proto as { polluted?: unknown }).polluted)
      }).pipe(provideBackend(backend)))

    it.scoped.prop(
      `DUR-01 on ${backend.name}: for arbitrary values, append succeeds exactly when the stored log reads back`,
      [FastCheck.array(
        FastCheck.record({
          type: FastCheck.constantFrom("test/any", "p/q", "noslash"),
          data: FastCheck.anything({
            withNullPrototype: true,
            withBoxedValues: true,
            withSparseArray: true,
            withBigInt: true,
            withDate: true,
            withMap: true,
            withTypedArray: true,
            withObjectString: true,
            maxDepth: 3
          })
        }),
        { minLength: 1, maxLength: 6 }
      )],
      ([inputs]) =>
        Effect.gen(function*() {
          const session = yield* newSession("any")
          for (const input of inputs) {
            const exit = yield* Effect.exit(session.append(input))
            if (Exit.isFailure(exit)) {
              assert.strictEqual(exit.cause._tag === "Fail" ? exit.cause.error._tag : "not a failure", "InvalidEventData")
            }
          }
          const stored = yield* Effect.flatMap(SessionPersistence, (persistence) => persistence.read(session.id))
          assert.deepStrictEqual(asJson(stored.events), asJson(yield* session.events))
        }).pipe(provideBackend(backend)),
      { fastCheck: { numRuns: 15 } }
    )
  })
}

// -------------------------------------------------------------------------------------------------
// Model and tool output (DUR-02)

/** A model that streams the given replies in request order (then plain text). */
const modelOf = (replies: ReadonlyArray<ReadonlyArray<unknown>>) =>
  Layer.effect(
    Model.Model,
    Effect.map(Ref.make(0), (next) =>
      Model.Model.of({
        stream: () =>
          Stream.unwrap(Effect.map(Ref.getAndUpdate(next, (n) => n + 1), (n) =>
            Stream.fromIterable(
              (replies[n] ?? [{ _tag: "TextDelta", text: "done" }, { _tag: "Finish", reason: "stop" }]) as ReadonlyArray<
                Model.ModelChunk
              >
            )))
      })))

/** A tool with no parameters whose run returns `result` as it is (a tool that breaks its contract). */
const rawTool = (name: string, result: () => unknown) =>
  Tool.make({
    name,
    description: `returns ${name}`,
    parameters: Schema.Struct({}),
    run: () => Effect.sync(() => result() as Tool.ToolResult)
  })

const badTools = [
  rawTool("extra-key", () => ({ content: [{ type: "text", text: "x", extra: 1 }] })),
  rawTool("unknown-part", () => ({ content: [{ type: "video", url: "u" }] })),
  rawTool("bigint", () => ({ content: [{ type: "text", text: 1n }] })),
  rawTool("throwing", () => ({
    get content() {
      throw new Error("content says no")
    }
  })),
  rawTool("nothing", () => null),
  rawTool("good", () => ({ content: [{ type: "text", text: "fine" }] }))
]

const hostileStep: ReadonlyArray<unknown> = [
  { _tag: "TextDelta", text: "calling" },
  { _tag: "ToolCall", callId: "", name: "extra-key", arguments: "{}" },
  { _tag: "ToolCall", callId: "c".repeat(250), name: "unknown-part", arguments: "{}" },
  { _tag: "ToolCall", callId: "ünïcode", name: "bigint", arguments: "{}" },
  { _tag: "ToolCall", callId: "same", name: "throwing", arguments: "{}" },
  { _tag: "ToolCall", callId: "same", name: "nothing", arguments: "{}" },
  { _tag: "ToolCall", callId: "ok-1", name: "good", arguments: "{}" },
  {
    _tag: "Finish",
    reason: "content-filter",
    usage: { inputTokens: 3, outputTokens: -1, reasoningTokens: 1.5, cachedInputTokens: 2, cachedTokens: 3 }
  }
]

/** The runtime over `backend`'s store with the given model; its services in a context. */
const runtimeOn = (persistence: Layer.Layer<SessionPersistence, unknown>, model: Layer.Layer<Model.Model>) =>
  Layer.build(AgentRuntime.layer.pipe(Layer.provideMerge(persistence), Layer.provide(model)))

for (const backend of backends) {
  describe(`model and tool output on ${backend.name} (DUR-02)`, () => {
    it.scoped(`DUR-01 DUR-02 on ${backend.name}: hostile model output and tool results are normalised; the session stays readable`, () =>
      Effect.gen(function*() {
        // one store for the live agent, the reader and the resume (an in-memory SQLite is per build)
        const persistence = Layer.succeedContext(yield* Layer.build(yield* backend.make))
        const first = yield* runtimeOn(persistence, modelOf([hostileStep, [{ _tag: "Finish", reason: "stop", usage: { cachedTokens: 3 } }]]))
        const live = yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({
            sessionId: "hostile-model",
            options: { provider: "test", model: "m" },
            setup: (agent) => Effect.forEach(badTools, (tool) => agent.tools.register(tool), { discard: true })
          })
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          yield* handle.agent.whenIdle
          // never AgentBroken: the next input is accepted and runs
          yield* handle.agent.followup(Message.user("again", { id: "m2" }))
          yield* handle.agent.whenIdle
          const events = yield* handle.agent.session.events
          yield* handle.dispose
          return events
        }).pipe(Effect.provide(first))

        const assistant = live.filter(SessionEvent.is("assistant/message"))
        assert.strictEqual(assistant[0]!.data.finish, "other")
        assert.deepStrictEqual(assistant[0]!.data.usage, { inputTokens: 3, cachedInputTokens: 2 })
        assert.isUndefined(assistant[1]!.data.usage, "usage with no known field is dropped")
        const parts = assistant[0]!.data.message.content.filter((part) => part.type === "tool-call")
        assert.deepStrictEqual(parts.map((part) => [part.callId, part.providerCallId]), [
          ["call_1_1_0", ""],
          ["call_1_1_1", "c".repeat(250)],
          ["call_1_1_2", "ünïcode"],
          ["same", undefined],
          ["call_1_1_4", "same"],
          ["ok-1", undefined]
        ])
        const results = live.filter(SessionEvent.is("tool/result"))
        assert.deepStrictEqual(results.map((event) => [event.data.message.toolCallId, event.data.error?.code]), [
          ["call_1_1_0", "INVALID_TOOL_OUTPUT"],
          ["call_1_1_1", "INVALID_TOOL_OUTPUT"],
          ["call_1_1_2", "INVALID_TOOL_OUTPUT"],
          ["same", "INVALID_TOOL_OUTPUT"],
          ["call_1_1_4", "INVALID_TOOL_OUTPUT"],
          ["ok-1", undefined]
        ])
        assert.isTrue(results.slice(0, 5).every((event) => event.data.message.isError))

        // a reader and a resume in a fresh runtime accept every event the live agent wrote
        const stored = yield* Effect.flatMap(SessionPersistence, (p) => p.read(sid("hostile-model"))).pipe(
          Effect.provide(persistence)
        )
        assert.deepStrictEqual(asJson(stored.events), asJson(live))
        const second = yield* runtimeOn(persistence, modelOf([]))
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.resume({ sessionId: "hostile-model", options: { provider: "test", model: "m" } })
          assert.deepStrictEqual(asJson(yield* handle.agent.session.events), asJson(live))
          yield* handle.dispose
        }).pipe(Effect.provide(second))
      }))
  })
}

describe("arbitrary model output (DUR-01, DUR-02)", () => {
  const chunk = FastCheck.oneof(
    FastCheck.record({ _tag: FastCheck.constant("TextDelta"), text: FastCheck.string({ unit: "binary" }) }),
    FastCheck.record({
      _tag: FastCheck.constant("ToolCall"),
      callId: FastCheck.oneof(FastCheck.string({ unit: "binary", maxLength: 200 }), FastCheck.anything()),
      name: FastCheck.oneof(FastCheck.constantFrom("good", "extra-key", "missing"), FastCheck.anything()),
      arguments: FastCheck.oneof(FastCheck.json(), FastCheck.anything())
    }),
    FastCheck.record({
      _tag: FastCheck.constant("Finish"),
      reason: FastCheck.oneof(FastCheck.constantFrom("stop", "tool-calls", "max-tokens"), FastCheck.anything()),
      usage: FastCheck.oneof(
        FastCheck.anything(),
        FastCheck.record({
          inputTokens: FastCheck.oneof(FastCheck.integer(), FastCheck.double()),
          cachedInputTokens: FastCheck.anything(),
          other: FastCheck.anything()
        }, { requiredKeys: [] })
      )
    }, { requiredKeys: ["_tag"] })
  )

  for (const backend of backends) {
    it.scoped.prop(
      `DUR-01 DUR-02 on ${backend.name}: whatever the model streams, the agent is never broken and the log reads back`,
      [FastCheck.array(FastCheck.array(chunk, { maxLength: 5 }), { minLength: 1, maxLength: 3 })],
      ([replies]) =>
        Effect.gen(function*() {
          const persistence = yield* backend.make
          const services = yield* runtimeOn(persistence, modelOf(replies))
          const live = yield* Effect.gen(function*() {
            const registry = yield* AgentRegistry
            const handle = yield* registry.create({
              sessionId: "arbitrary",
              options: { provider: "test", model: "m", maxStepsPerTurn: 3 },
              setup: (agent) => Effect.forEach(badTools, (tool) => agent.tools.register(tool), { discard: true })
            })
            yield* handle.agent.followup(Message.user("go", { id: "m1" }))
            yield* handle.agent.whenIdle
            // never AgentBroken: the next input is accepted and runs
            yield* handle.agent.followup(Message.user("again", { id: "m2" }))
            yield* handle.agent.whenIdle
            return yield* handle.agent.session.events
          }).pipe(Effect.provide(services))
          const stored = yield* Effect.flatMap(SessionPersistence, (p) => p.read(sid("arbitrary"))).pipe(
            Effect.provide(services)
          )
          assert.deepStrictEqual(asJson(stored.events), asJson(live))
        }),
      { fastCheck: { numRuns: 10 } }
    )
  }
})

// -------------------------------------------------------------------------------------------------
// Prototype-safe decoding of tool arguments (DUR-03)

/** Every object in `output` has the prototype of its kind and exactly the own keys of `input`. */
const assertSameShape = (input: unknown, output: unknown, where = "$"): void => {
  if (typeof input !== "object" || input === null) {
    assert.strictEqual(output, input, where)
    return
  }
  assert.isTrue(typeof output === "object" && output !== null, where)
  const expectedProto = Array.isArray(input) ? Array.prototype : Object.prototype
  assert.strictEqual(Object.getPrototypeOf(output), expectedProto, `${where}: prototype`)
  assert.deepStrictEqual(Object.keys(output as object), Object.keys(input), `${where}: own keys`)
  for (const key of Object.keys(input)) {
    assertSameShape((input as Record<string, unknown>)[key], (output as Record<string, unknown>)[key], `${where}.${key}`)
  }
}

describe("prototype-safe tool arguments (DUR-03)", () => {
  const Options = Schema.Struct({
    options: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
    items: Schema.Array(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
  })
  const options = Tool.make({ name: "options", description: "", parameters: Options, run: () => Effect.succeed(Tool.text("")) })
  const protoObject = FastCheck.json({ maxDepth: 3 }).map((inner) => `{"__proto__":${inner},"constructor":${inner},"k":1}`)
  const record = FastCheck.oneof(protoObject, FastCheck.constant("{}"), FastCheck.constant("{\"__proto__\":null}"))

  it.prop(
    "DUR-03 __proto__ and constructor keys in a model's arguments stay own data properties; no prototype changes",
    [record, FastCheck.array(record, { maxLength: 3 })],
    ([first, rest]) => {
      const text = `{"options":${first},"items":[${rest.join(",")}]}`
      const decoded = Tool.decodeArguments(options, text)
      assert.isTrue(Either.isRight(decoded), text)
      if (Either.isRight(decoded)) {
        assertSameShape(JSON.parse(text), decoded.right)
        assert.isUndefined((decoded.right.options as { isAdmin?: unknown }).isAdmin)
      }
    },
    { fastCheck: { numRuns: 200 } }
  )

  it("DUR-03 a parameter named __proto__ keeps its JSON schema and decodes as an own property", () => {
    const Proto = Schema.Struct({ ["__proto__"]: Schema.String, limit: Schema.Number })
    const tool = Tool.make({ name: "proto", description: "", parameters: Proto, run: () => Effect.succeed(Tool.text("")) })
    const schema = Tool.toSchema(tool).jsonSchema as {
      readonly properties: Record<string, unknown>
      readonly required: ReadonlyArray<string>
    }
    assert.isTrue(Object.prototype.hasOwnProperty.call(schema.properties, "__proto__"))
    assert.deepStrictEqual(Object.getOwnPropertyDescriptor(schema.properties, "__proto__")?.value, { type: "string" })
    assert.deepStrictEqual(schema.required, ["__proto__", "limit"])
    const decoded = Tool.decodeArguments(tool, "{\"__proto__\":\"x\",\"limit\":2}")
    assert.isTrue(Either.isRight(decoded))
    if (Either.isRight(decoded)) {
      assert.deepStrictEqual(Object.getOwnPropertyDescriptor(decoded.right, "__proto__")?.value, "x")
      assert.strictEqual(Object.getPrototypeOf(decoded.right), Object.prototype)
    }
    const refused = Tool.decodeArguments(tool, "{\"__proto__\":5,\"limit\":2}")
    assert.isTrue(Either.isLeft(refused))
    if (Either.isLeft(refused)) {
      assert.include(refused.left, "[\"__proto__\"]")
      assert.notInclude(refused.left, "effect_agent")
    }
  })

  it.scoped("DUR-03 a tool run by an agent receives a __proto__ key as data, never as a prototype", () =>
    Effect.gen(function*() {
      const seen: Array<unknown> = []
      const spy = Tool.make({
        name: "options",
        description: "",
        parameters: Options,
        run: (args) => Effect.sync(() => seen.push(args)).pipe(Effect.as(Tool.text("ok")))
      })
      const argumentsText = "{\"options\":{\"__proto__\":{\"isAdmin\":true}},\"items\":[]}"
      const model = modelOf([[
        { _tag: "ToolCall", callId: "c1", name: "options", arguments: argumentsText },
        { _tag: "Finish", reason: "tool-calls" }
      ]])
      const persistence = yield* backends[0]!.make
      const services = yield* runtimeOn(persistence, model)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({
          sessionId: "proto",
          options: { provider: "test", model: "m" },
          setup: (agent) => agent.tools.register(spy)
        })
        yield* handle.agent.followup(Message.user("go", { id: "m1" }))
        yield* handle.agent.whenIdle
        const calls = (yield* handle.agent.session.events).filter(SessionEvent.is("tool/call"))
        assert.strictEqual(calls[0]!.data.arguments, argumentsText, "the log keeps the model's text")
      }).pipe(Effect.provide(services))
      assert.strictEqual(seen.length, 1)
      const received = seen[0] as { readonly options: Record<string, unknown> }
      assert.isUndefined(received.options["isAdmin"])
      assert.deepStrictEqual(Object.getOwnPropertyDescriptor(received.options, "__proto__")?.value, { isAdmin: true })
    }))
})
