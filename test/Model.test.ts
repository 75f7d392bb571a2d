import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Option, Stream } from "effect"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"

const request = (sessionId: string, text = "hi"): Model.ModelRequest => ({
  sessionId: Message.SessionId.make(sessionId),
  provider: "test",
  model: "scripted",
  messages: [Message.user(text, { id: `m-${text}` })],
  tools: []
})

/** Runs one request through the scripted model's layer (the `Model` tag), collecting the chunks. */
const collect = (scripted: Model.Scripted, req: Model.ModelRequest) =>
  Effect.flatMap(Model.Model, (model) => Stream.runCollect(model.stream(req))).pipe(
    Effect.map(Chunk.toReadonlyArray),
    Effect.provide(scripted.layer)
  )

const failureOf = (scripted: Model.Scripted, req: Model.ModelRequest) => Effect.flip(collect(scripted, req))

describe("Model.scripted", () => {
  it.scoped("text streams in two deltas, then finishes stop with a deterministic usage", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.text("hello")])
      const chunks = yield* collect(model, request("s"))
      assert.deepStrictEqual(chunks, [
        { _tag: "TextDelta", text: "hel" },
        { _tag: "TextDelta", text: "lo" },
        { _tag: "Finish", reason: "stop", usage: { inputTokens: 1, outputTokens: 5 } }
      ])
    }))

  it.scoped("text splits on code points and a one-character text is one delta", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.text("a😀b😀"), Model.text("x"), Model.text("")])
      const deltas = (chunks: ReadonlyArray<Model.ModelChunk>) =>
        chunks.flatMap((c) => (c._tag === "TextDelta" ? [c.text] : []))
      assert.deepStrictEqual(deltas(yield* collect(model, request("s"))), ["a😀", "b😀"])
      assert.deepStrictEqual(deltas(yield* collect(model, request("s"))), ["x"])
      const empty = yield* collect(model, request("s"))
      assert.deepStrictEqual(empty, [{ _tag: "Finish", reason: "stop", usage: { inputTokens: 1, outputTokens: 0 } }])
    }))

  it.scoped("reasoning streams reasoning deltas", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.reasoning("think")])
      assert.deepStrictEqual(yield* collect(model, request("s")), [
        { _tag: "ReasoningDelta", text: "thi" },
        { _tag: "ReasoningDelta", text: "nk" },
        { _tag: "Finish", reason: "stop", usage: { inputTokens: 1, outputTokens: 5 } }
      ])
    }))

  it.scoped("a tool call is one complete chunk and finishes tool-calls", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.toolCall("c1", "read", "{\"path\":\"a\"}")])
      assert.deepStrictEqual(yield* collect(model, request("s")), [
        { _tag: "ToolCall", callId: "c1", name: "read", arguments: "{\"path\":\"a\"}" },
        { _tag: "Finish", reason: "tool-calls", usage: { inputTokens: 1, outputTokens: 12 } }
      ])
    }))

  it.scoped("maxTokens streams its text and finishes max-tokens", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.maxTokens("trunc")])
      assert.deepStrictEqual(yield* collect(model, request("s")), [
        { _tag: "TextDelta", text: "tru" },
        { _tag: "TextDelta", text: "nc" },
        { _tag: "Finish", reason: "max-tokens", usage: { inputTokens: 1, outputTokens: 5 } }
      ])
    }))

  it.scoped("fail(code) fails the stream with ModelError{code}, after the parts before it", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.fail("OVERLOADED"), [Model.text("ab"), Model.fail("RESET")]])
      const error = yield* failureOf(model, request("s"))
      assert.strictEqual(error._tag, "ModelError")
      assert.strictEqual(error.code, "OVERLOADED")

      const seen: Array<Model.ModelChunk> = []
      const later = yield* Effect.flatMap(Model.Model, (m) =>
        Stream.runForEach(m.stream(request("s")), (chunk) => Effect.sync(() => seen.push(chunk)))).pipe(
          Effect.provide(model.layer),
          Effect.flip
        )
      assert.deepStrictEqual(seen, [{ _tag: "TextDelta", text: "a" }, { _tag: "TextDelta", text: "b" }])
      assert.strictEqual(later.code, "RESET")
    }))

  it.scoped("an array of parts streams in order and finishes tool-calls", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([
        [Model.reasoning("r"), Model.text("look"), Model.toolCall("c1", "a", "{}"), Model.toolCall("c2", "b", "{}")]
      ])
      const chunks = yield* collect(model, request("s"))
      assert.deepStrictEqual(chunks.map((c) => c._tag), [
        "ReasoningDelta",
        "TextDelta",
        "TextDelta",
        "ToolCall",
        "ToolCall",
        "Finish"
      ])
      assert.deepStrictEqual(
        chunks.flatMap((c) => (c._tag === "ToolCall" ? [c.callId] : [])),
        ["c1", "c2"]
      )
      assert.deepStrictEqual(chunks.at(-1), {
        _tag: "Finish",
        reason: "tool-calls",
        usage: { inputTokens: 1, outputTokens: 9 }
      })
    }))

  it.scoped("a Record script is consumed per session; an unknown session is exhausted", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted({
        a: [Model.text("a1"), Model.text("a2")],
        b: [Model.text("b1")]
      })
      const textOf = (chunks: ReadonlyArray<Model.ModelChunk>) =>
        chunks.flatMap((c) => (c._tag === "TextDelta" ? [c.text] : [])).join("")
      assert.strictEqual(textOf(yield* collect(model, request("a"))), "a1")
      assert.strictEqual(textOf(yield* collect(model, request("b"))), "b1")
      assert.strictEqual(textOf(yield* collect(model, request("a"))), "a2")
      const beyond = yield* failureOf(model, request("b"))
      assert.strictEqual(beyond.code, "SCRIPT_EXHAUSTED")
      const unknown = yield* failureOf(model, request("c"))
      assert.strictEqual(unknown.code, "SCRIPT_EXHAUSTED")
      const seen = yield* model.requests
      assert.deepStrictEqual(seen.map((r) => r.sessionId), ["a", "b", "a", "b", "c"])
    }))

  it.scoped("a function script gets each request and its number from 1", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted((req, n) => Model.text(`${req.sessionId}#${n}`))
      const textOf = (chunks: ReadonlyArray<Model.ModelChunk>) =>
        chunks.flatMap((c) => (c._tag === "TextDelta" ? [c.text] : [])).join("")
      assert.strictEqual(textOf(yield* collect(model, request("x"))), "x#1")
      assert.strictEqual(textOf(yield* collect(model, request("y"))), "y#2")
    }))

  it.scoped("requests are recorded in arrival order, when their stream runs", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.text("1"), Model.text("2")])
      const first = request("s", "one")
      const second = request("s", "two")
      const stream = yield* Effect.map(Model.Model, (m) => m.stream(first)).pipe(Effect.provide(model.layer))
      assert.deepStrictEqual(yield* model.requests, [], "building a stream is not a request")
      yield* Stream.runDrain(stream)
      yield* collect(model, second)
      const seen = yield* model.requests
      assert.strictEqual(seen.length, 2)
      assert.strictEqual(seen[0], first)
      assert.strictEqual(seen[1], second)
    }))

  it.scoped("awaitRequest(n) waits for the n-th request, and completes at once after it arrived", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.text("1"), Model.text("2")])
      const waiting = yield* Effect.fork(model.awaitRequest(2))
      yield* collect(model, request("s", "one"))
      yield* Effect.yieldNow()
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)), "one request is not two")
      const second = request("s", "two")
      yield* collect(model, second)
      assert.strictEqual(yield* Fiber.join(waiting), second)
      assert.strictEqual((yield* model.awaitRequest(1)).messages[0]?.id, "m-one")
      assert.strictEqual(yield* model.awaitRequest(2), second)
    }))

  it.scoped("hang streams its prefix, then waits until interrupted", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([[Model.text("ab"), Model.hang("partial")]])
      const seen: Array<Model.ModelChunk> = []
      const prefixArrived = yield* Deferred.make<void>()
      const fiber = yield* Effect.flatMap(Model.Model, (m) =>
        Stream.runForEach(m.stream(request("s")), (chunk) =>
          Effect.sync(() => seen.push(chunk)).pipe(
            Effect.zipRight(
              chunk._tag === "TextDelta" && chunk.text === "partial" ? Deferred.succeed(prefixArrived, undefined) : Effect.void
            )
          ))).pipe(Effect.provide(model.layer), Effect.fork)
      yield* Deferred.await(prefixArrived)
      yield* model.awaitRequest(1)
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)), "a hanging reply does not finish")
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.deepStrictEqual(seen, [
        { _tag: "TextDelta", text: "a" },
        { _tag: "TextDelta", text: "b" },
        { _tag: "TextDelta", text: "partial" }
      ])
    }))

  it.scoped("a request beyond the script fails SCRIPT_EXHAUSTED, and is still recorded", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([Model.text("only")])
      yield* collect(model, request("s"))
      const error = yield* failureOf(model, request("s"))
      assert.strictEqual(error._tag, "ModelError")
      assert.strictEqual(error.code, "SCRIPT_EXHAUSTED")
      assert.strictEqual((yield* model.requests).length, 2)
      assert.strictEqual((yield* model.awaitRequest(2)).sessionId, "s")
    }))
})
