import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Chunk, Effect, Either, Exit, FastCheck, Fiber, Schema, Scope, Stream, TestClock } from "effect"
import * as codec from "../src/internal/log/eventCodec.js"
import { core } from "../src/internal/log/session.js"
import * as Message from "../src/Message.js"
import * as Session from "../src/Session.js"
import * as SessionEvent from "../src/SessionEvent.js"
import { recordingWriter } from "./fixtures/writers.js"

const planFor = (id: string) => {
  const planned = Session.plan({ id, createdAt: 0 })
  if (Either.isLeft(planned)) throw new Error("bad plan")
  return planned.right
}

describe("Message", () => {
  it("ID-01 session ids: safe names accepted, path tricks and bad lengths refused", () => {
    for (const ok of ["a", "A1", "abc.def_g-h", "0", "x".repeat(128)]) {
      assert.isTrue(Either.isRight(Message.sessionId(ok)), ok)
    }
    for (const bad of ["", "a/b", "a\\b", "..", "a..b", "a\u0000b", ".hidden", "-x", "x".repeat(129), "a b"]) {
      const result = Message.sessionId(bad)
      assert.isTrue(Either.isLeft(result), JSON.stringify(bad))
      if (Either.isLeft(result)) assert.strictEqual(result.left._tag, "InvalidSessionId")
    }
  })

  it("ID-02 message ids are non-empty and at most 256 characters", () => {
    const decode = Schema.decodeUnknownEither(Message.MessageId)
    assert.isTrue(Either.isRight(decode("m")))
    assert.isTrue(Either.isRight(decode("m".repeat(256))))
    assert.isTrue(Either.isLeft(decode("")))
    assert.isTrue(Either.isLeft(decode("m".repeat(257))))
  })

  it("MSG-01 Message.user mints a fresh id, defaults the source and returns frozen plain data", () => {
    const a = Message.user("hello")
    const b = Message.user("hello")
    assert.notStrictEqual(a.id, b.id)
    assert.deepStrictEqual(a.source, { kind: "user" })
    assert.deepStrictEqual(a.content, [{ type: "text", text: "hello" }])
    assert.isTrue(Object.isFrozen(a) && Object.isFrozen(a.content) && Object.isFrozen(a.content[0]))
    assert.isTrue(Schema.is(Message.UserMessage)(a))
    assert.deepStrictEqual(JSON.parse(JSON.stringify(a)), a)
    const c = Message.user("x", { id: "fixed", source: { kind: "system" } })
    assert.strictEqual(c.id, "fixed")
    assert.deepStrictEqual(c.source, { kind: "system" })
  })

  // Core events as their schemas generate them, and on purpose some with `__proto__` keys where the
  // vocabulary allows any key (a tool's JSON-schema parameters): Schema's encoder rebuilds records
  // by assignment and would lose such a key, so the stored and the read values are compared.
  const withProtoKeys = FastCheck.tuple(Arbitrary.make(SessionEvent.CoreEvent), FastCheck.json({ maxDepth: 2 })).map(
    ([event, inner]): SessionEvent.CoreEvent => {
      if (event.type !== "request/config") return event
      const parameters = JSON.parse(`{"__proto__":${inner},"type":"object"}`) as SessionEvent.JsonRecord
      return { ...event, data: { ...event.data, tools: [...event.data.tools, { name: "p", description: "", parameters }] } }
    }
  )

  it.prop("MSG-00 every durable schema's Type equals its Encoded form (JSON round trip is identity)", [
    FastCheck.oneof(Arbitrary.make(SessionEvent.CoreEvent), withProtoKeys)
  ], ([event]) => {
    // what an append stores (DUR-01) and what a reader reads back from its JSON text are the same value
    const stored = codec.coreEvent(event)
    assert.isTrue(Either.isRight(stored))
    if (Either.isLeft(stored)) return
    const record = { seq: event.seq, time: event.time, ...stored.right }
    const read = codec.storedEvent(JSON.parse(JSON.stringify(record)), event.seq)
    assert.isTrue(Either.isRight(read))
    if (Either.isLeft(read)) return
    assert.strictEqual(JSON.stringify(read.right), JSON.stringify(event))
    assert.deepStrictEqual(read.right, record as SessionEvent.SessionEvent)
    assert.isTrue(Schema.is(SessionEvent.CoreEvent)(read.right))
  })
})

describe("Session", () => {
  it.scoped("SES-01 append assigns contiguous seqs and Clock time, returns the committed frozen copy", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(1234)
      const session = yield* Session.make({ id: "s1" })
      const data = { n: 1, nested: { list: [1, 2] } }
      const first = yield* session.append({ type: "test/note", data })
      const second = yield* session.append({ type: "test/note", data: { n: 2 } })
      assert.strictEqual(first.seq, 0)
      assert.strictEqual(second.seq, 1)
      assert.strictEqual(first.time, 1234)
      data.nested.list.push(3)
      const events = yield* session.events
      assert.deepStrictEqual(events[0]!.data, { n: 1, nested: { list: [1, 2] } })
      assert.isTrue(Object.isFrozen(events[0]!.data))
      assert.throws(() => {
        ;(events[0]!.data as { n: number }).n = 5
      })
    }))

  it.scoped("SES-01 events is a frozen snapshot cached until the next append, never grown", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "s1" })
      yield* session.append({ type: "test/a", data: null })
      const a = yield* session.events
      assert.strictEqual(yield* session.events, a)
      assert.isTrue(Object.isFrozen(a))
      yield* session.append({ type: "test/a", data: null })
      const b = yield* session.events
      assert.notStrictEqual(a, b)
      assert.strictEqual(a.length, 1)
      assert.strictEqual(b.length, 2)
    }))

  it.scoped("SES-00 / EVT-03 a core type or non-JSON data through the public append fails InvalidEventData and changes nothing", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "s1" })
      const sparse: Array<number> = []
      sparse[2] = 1
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      class Point {
        constructor(readonly x: number) {}
      }
      const bad: ReadonlyArray<SessionEvent.CustomEventInput> = [
        { type: "turn/start", data: { turn: 1 } },
        { type: "user/message", data: {} },
        { type: "turn/unknown", data: {} },
        { type: "noslash", data: {} },
        { type: "test/x", data: { n: 1n } },
        { type: "test/x", data: { n: Number.NaN } },
        { type: "test/x", data: { n: Number.POSITIVE_INFINITY } },
        { type: "test/x", data: { n: -0 } },
        { type: "test/x", data: { n: undefined } },
        { type: "test/x", data: sparse },
        { type: "test/x", data: cyclic },
        { type: "test/x", data: new Point(1) },
        { type: "test/x", data: new Map() },
        { type: "test/x", data: new Date(0) },
        { type: "test/x", data: () => 1 },
        { type: "test/x", data: Symbol("s") }
      ]
      for (const event of bad) {
        const failure = yield* Effect.flip(session.append(event))
        assert.strictEqual(failure._tag, "InvalidEventData")
      }
      assert.strictEqual((yield* session.events).length, 0)
      const ok = yield* session.append({ type: "test/x", data: { shared: [1], again: [1], nil: null, s: "", b: false } })
      assert.strictEqual(ok.seq, 0)
    }))

  it.scoped("SES-00 appendAll assigns contiguous seqs in one writer batch and is all-or-nothing", () =>
    Effect.gen(function*() {
      const { writer, batches } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("s2"), writer)
      const events = yield* session.appendAll([{ type: "test/a", data: 1 }, { type: "test/b", data: 2 }])
      assert.deepStrictEqual(events.map((e) => e.seq), [0, 1])
      assert.strictEqual((yield* batches).length, 1)
      const failure = yield* Effect.flip(session.appendAll([{ type: "test/a", data: 1 }, { type: "test/b", data: 1n }]))
      assert.strictEqual(failure._tag, "InvalidEventData")
      assert.strictEqual((yield* session.events).length, 2)
    }))

  it.scoped("SES-02 appends queued while a write is in flight go out as one batch, in call order", () =>
    Effect.gen(function*() {
      const { writer, batches, holdNext } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("s3"), writer)
      const held = yield* holdNext
      const first = yield* Effect.fork(session.append({ type: "test/n", data: 0 }))
      yield* held.reached
      const rest = yield* Effect.forEach(
        [1, 2, 3, 4, 5],
        (n) => Effect.fork(session.append({ type: "test/n", data: n })),
        { concurrency: 1 }
      )
      yield* Effect.yieldNow()
      yield* held.open
      yield* Fiber.join(first)
      const results = yield* Effect.forEach(rest, Fiber.join)
      assert.deepStrictEqual(results.map((e) => [e.seq, e.data]), [[1, 1], [2, 2], [3, 3], [4, 4], [5, 5]])
      const written = yield* batches
      assert.deepStrictEqual(written.map((b) => b.length), [1, 5])
    }))

  it.scoped("SES-02 a changes observer may itself append (no re-entrancy error, nothing lost)", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "s4" })
      const feed = yield* session.subscribe
      const observer = yield* feed.pipe(
        Stream.take(2),
        Stream.runForEach((event) =>
          event.type === "test/ping" ? Effect.asVoid(session.append({ type: "test/pong", data: event.seq })) : Effect.void
        ),
        Effect.fork
      )
      yield* session.append({ type: "test/ping", data: null })
      yield* Fiber.join(observer)
      const events = yield* session.events
      assert.deepStrictEqual(events.map((e) => e.type), ["test/ping", "test/pong"])
    }))

  it.scoped("SES-01 subscribe is eager and sees appends in commit order; feeds end when the session closes", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const session = yield* Scope.extend(Session.make({ id: "s5" }), scope)
      const feed = yield* session.subscribe
      yield* session.appendAll([{ type: "test/a", data: 1 }, { type: "test/b", data: 2 }])
      yield* session.append({ type: "test/c", data: 3 })
      const collected = yield* Effect.fork(Stream.runCollect(feed))
      const lazy = yield* Effect.fork(Stream.runCollect(session.changes))
      yield* Scope.close(scope, Exit.void)
      const all = Chunk.toReadonlyArray(yield* Fiber.join(collected))
      assert.deepStrictEqual(all.map((e) => e.type), ["test/a", "test/b", "test/c"])
      yield* Fiber.join(lazy)
      assert.strictEqual(Chunk.size(yield* Stream.runCollect(session.changes)), 0)
    }))

  it.scoped("SES-02b a failed write commits nothing, the caller gets PersistenceError and the seq is reused", () =>
    Effect.gen(function*() {
      const { writer, stored, failNext } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("s6"), writer)
      yield* session.append({ type: "test/a", data: 1 })
      yield* failNext
      const failure = yield* Effect.flip(session.append({ type: "test/a", data: 2 }))
      assert.strictEqual(failure._tag, "PersistenceError")
      assert.strictEqual((yield* session.events).length, 1)
      const next = yield* session.append({ type: "test/a", data: 3 })
      assert.strictEqual(next.seq, 1)
      assert.deepStrictEqual((yield* stored).map((e) => e.data), [1, 3])
    }))

  it.effect("SES-04 a session whose Scope closed is closed: append fails SessionClosed", () =>
    Effect.gen(function*() {
      const session = yield* Effect.scoped(Session.make({ id: "s7" }))
      const failure = yield* Effect.flip(session.append({ type: "test/a", data: 1 }))
      assert.strictEqual(failure._tag, "SessionClosed")
    }))

  it.scoped("SES-03 messages: user, non-empty assistant and tool results in log order, plus a note for an interrupted turn", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "s8" })
      const sessionCore = core(session)
      const user = Message.user("hi", { id: "u1" })
      const assistant: Message.AssistantMessage = {
        id: "a1" as Message.MessageId,
        role: "assistant",
        content: [{ type: "tool-call", callId: "c1", name: "t", arguments: "{}" }],
        source: { kind: "model", provider: "p", model: "m" }
      }
      const empty: Message.AssistantMessage = { ...assistant, id: "a2" as Message.MessageId, content: [] }
      const result: Message.ToolResultMessage = {
        id: "r1" as Message.MessageId,
        role: "tool",
        toolCallId: "c1",
        toolName: "t",
        content: [{ type: "text", text: "ok" }],
        isError: false
      }
      yield* sessionCore.appendCore([
        { type: "turn/start", data: { turn: 1 } },
        { type: "step/start", data: { turn: 1, step: 1 } },
        { type: "user/message", data: { turn: 1, step: 1, message: user } },
        { type: "assistant/message", data: { turn: 1, step: 1, message: assistant, finish: "tool-calls" } },
        { type: "tool/call", data: { turn: 1, step: 1, callId: "c1", name: "t", arguments: "{}" } },
        { type: "tool/result", data: { turn: 1, step: 1, message: result } },
        { type: "step/end", data: { turn: 1, step: 1 } },
        { type: "step/start", data: { turn: 1, step: 2 } },
        { type: "assistant/message", data: { turn: 1, step: 2, message: empty, finish: "stop" } },
        { type: "turn/end", data: { turn: 1, reason: { kind: "interrupted" } } }
      ])
      const messages = yield* session.messages
      assert.deepStrictEqual(messages.map((m) => m.id), ["u1", "a1", "r1", "interrupted:1"])
      const note = messages[3]!
      assert.strictEqual(note.role, "user")
      assert.deepStrictEqual(note.role === "user" ? note.source : undefined, { kind: "system" })
      assert.deepStrictEqual(messages, Session.deriveMessages(yield* session.events))
      assert.strictEqual(sessionCore.lastTurn(), 1)
    }))

  it.effect.prop("SES-03 the incremental history equals a from-scratch derivation for arbitrary logs", [
    FastCheck.array(Arbitrary.make(SessionEvent.CoreEvent), { maxLength: 30 })
  ], ([events]) =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "prop" })
      const sessionCore = core(session)
      for (const event of events) {
        const { seq: _seq, time: _time, ...input } = event
        yield* sessionCore.appendCore([input as SessionEvent.CoreEventInput])
        yield* session.messages
      }
      assert.deepStrictEqual(yield* session.messages, Session.deriveMessages(yield* session.events))
    }).pipe(Effect.scoped))

  it("EVT-01 / EVT-02 seeds are validated like stored events: contiguous seqs, known core shapes", () => {
    const good = [
      { seq: 0, time: 1, type: "turn/start", data: { turn: 1 } },
      { seq: 1, time: 1, type: "turn/end", data: { turn: 1, reason: { kind: "completed" } } },
      { seq: 2, time: 1, type: "my/custom", data: { any: ["json"] } }
    ] as unknown as ReadonlyArray<SessionEvent.SessionEvent>
    const planned = Session.plan({ id: "seeded", seed: good, createdAt: 5 })
    assert.isTrue(Either.isRight(planned))
    if (Either.isRight(planned)) {
      assert.strictEqual(planned.right.header.seedLength, 3)
      assert.strictEqual(planned.right.header.version, SessionEvent.VERSION)
    }
    const gap = [good[0], { ...good[1], seq: 5 }] as unknown as ReadonlyArray<SessionEvent.SessionEvent>
    const extra = [{ ...good[0], extra: 1 }] as unknown as ReadonlyArray<SessionEvent.SessionEvent>
    const wrongShape = [{ seq: 0, time: 1, type: "turn/start", data: { turn: 0 } }] as unknown as ReadonlyArray<
      SessionEvent.SessionEvent
    >
    for (const seed of [gap, extra, wrongShape]) {
      const result = Session.plan({ id: "seeded", seed, createdAt: 5 })
      assert.isTrue(Either.isLeft(result))
      if (Either.isLeft(result)) assert.strictEqual(result.left._tag, "InvalidEventData")
    }
  })
})
