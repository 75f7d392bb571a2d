/**
 * Real models over real wire protocols without network (MOD-01..07): a node:http server on
 * 127.0.0.1 answers Chat Completions and Messages requests from recorded transcripts; the
 * adapter's chunks, errors and the request bodies the server received are checked.
 */
import type { Response } from "@effect/ai"
import { AiError, LanguageModel, Tool as AiTool } from "@effect/ai"
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import {
  Cause,
  Chunk,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  Logger,
  Option,
  Redacted,
  Schema,
  Stream,
  TestClock
} from "effect"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Tool from "../src/Tool.js"
import * as wire from "./fixtures/wireServer.js"

const secret = "sk-test-0123456789-very-secret"
const apiKey = Redacted.make(secret)

const read = Tool.make({
  name: "read",
  description: "Reads a file",
  parameters: Schema.Struct({ path: Schema.String }),
  run: ({ path }) => Effect.succeed(Tool.text(`contents of ${path}`))
})

const request = (overrides: Partial<Model.ModelRequest> = {}): Model.ModelRequest => ({
  sessionId: "s" as SessionId,
  provider: "openai",
  model: "gpt-test",
  maxTokens: 256,
  system: "be brief",
  messages: [Message.user("hi", { id: "m1" })],
  tools: [Tool.toSchema(read)],
  ...overrides
})

type Provider = "openai" | "anthropic"

/** Our model for `provider` pointed at the server, over the platform's fetch client. */
const modelOn = (
  provider: Provider,
  server: wire.WireServer,
  options: LanguageModelAdapter.AdapterOptions = {}
) =>
  Effect.gen(function*() {
    const layer = provider === "openai"
      ? LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, apiKey, ...options })
      : LanguageModelAdapter.anthropic({ baseUrl: server.baseUrl, apiKey, ...options })
    const context = yield* Layer.build(layer.pipe(Layer.provide(FetchHttpClient.layer)))
    return yield* Effect.provide(Model.Model, context)
  })

const collect = (model: Model.Model["Type"], req: Model.ModelRequest = request()) =>
  Effect.map(Stream.runCollect(model.stream(req)), Chunk.toReadonlyArray)

const failureOf = (model: Model.Model["Type"], req: Model.ModelRequest = request()) =>
  Effect.flip(Stream.runDrain(model.stream(req)))

const textOf = (chunks: ReadonlyArray<Model.ModelChunk>) =>
  chunks.flatMap((chunk) => chunk._tag === "TextDelta" ? [chunk.text] : []).join("")

const callsOf = (chunks: ReadonlyArray<Model.ModelChunk>) =>
  chunks.flatMap((chunk) =>
    chunk._tag === "ToolCall" ? [{ callId: chunk.callId, name: chunk.name, arguments: chunk.arguments }] : []
  )

const finishOf = (chunks: ReadonlyArray<Model.ModelChunk>) => chunks.find((chunk) => chunk._tag === "Finish")

// ---------------------------------------------------------------------------------------------
// Chat Completions transcripts
// ---------------------------------------------------------------------------------------------

const delta = (d: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  model: "gpt-test",
  choices: [{ index: 0, delta: d, finish_reason: finish }]
})

// recorded transcripts (test/fixtures/wire/openai-*.json)
const chatText = wire.transcript("openai-text")[0]!

describe("LanguageModelAdapter.openAi (Chat Completions)", () => {
  it.scoped("MOD-01 MOD-03 MOD-06 MOD-07 streamed text, usage, and the request body the log derives (REQ-03 over the wire)", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([chatText])
      const model = yield* modelOn("openai", server)
      const chunks = yield* collect(model)
      assert.deepStrictEqual(chunks.filter((c) => c._tag === "TextDelta"), [
        { _tag: "TextDelta", text: "Hel" },
        { _tag: "TextDelta", text: "lo" }
      ])
      assert.deepStrictEqual(finishOf(chunks), {
        _tag: "Finish",
        reason: "stop",
        usage: { inputTokens: 12, outputTokens: 5, reasoningTokens: 2, cachedInputTokens: 4 }
      })
      const [received] = yield* server.received
      assert.strictEqual(received!.method, "POST")
      assert.strictEqual(received!.path, "/v1/chat/completions")
      assert.strictEqual(received!.headers["authorization"], `Bearer ${secret}`)
      assert.deepStrictEqual(received!.body, {
        model: "gpt-test",
        messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }],
        max_tokens: 256,
        tools: [{
          type: "function",
          function: { name: "read", description: "Reads a file", parameters: Tool.toSchema(read).jsonSchema }
        }],
        stream: true,
        stream_options: { include_usage: true }
      })
    }))

  it.scoped("MOD-02 MOD-07 a tool call whose arguments arrive in several chunks keeps the model's raw text", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("openai-tool-fragments"))
      const chunks = yield* collect(yield* modelOn("openai", server))
      assert.strictEqual(textOf(chunks), "let me look")
      assert.deepStrictEqual(callsOf(chunks), [{ callId: "call_a", name: "read", arguments: "{\"path\": \"a.txt\"}" }])
      assert.strictEqual(finishOf(chunks)?._tag === "Finish" && finishOf(chunks)?.reason, "tool-calls")
    }))

  it.scoped("MOD-07 two parallel tool calls with interleaved fragments come out in index order", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("openai-parallel-tools"))
      const chunks = yield* collect(yield* modelOn("openai", server))
      assert.deepStrictEqual(callsOf(chunks), [
        { callId: "call_a", name: "read", arguments: "{\"path\": \"a\"}" },
        { callId: "call_b", name: "read", arguments: "{\"path\":\"b\"}" }
      ])
    }))

  it.scoped("MOD-02 MOD-07 invalid JSON, an unknown tool and undecodable arguments never fail the stream", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("openai-invalid-arguments"))
      const chunks = yield* collect(yield* modelOn("openai", server))
      assert.deepStrictEqual(callsOf(chunks), [
        { callId: "call_bad", name: "read", arguments: "{\"path\": " },
        { callId: "call_unknown", name: "nope", arguments: "{}" },
        { callId: "call_num", name: "read", arguments: "{\"path\": 1}" }
      ])
    }))

  it.scoped("MOD-04 MOD-07 429 with Retry-After is RATE_LIMITED with retryAfter; 500 PROVIDER; 401 AUTH; context length", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("openai-errors"))
      const model = yield* modelOn("openai", server)
      const limited = yield* failureOf(model)
      assert.strictEqual(limited.code, "RATE_LIMITED")
      assert.isTrue(limited.retryable)
      assert.deepStrictEqual(limited.retryAfter, Duration.seconds(7))
      assert.strictEqual(limited.status, 429)
      const provider = yield* failureOf(model)
      assert.strictEqual(provider.code, "PROVIDER")
      assert.include(provider.message, "boom")
      const auth = yield* failureOf(model)
      assert.strictEqual(auth.code, "AUTH")
      assert.isFalse(auth.retryable)
      assert.notInclude(auth.message, secret.slice(0, 8))
      assert.include(auth.message, "[redacted]")
      assert.strictEqual((yield* failureOf(model)).code, "CONTEXT_LENGTH")
      assert.strictEqual((yield* failureOf(model)).code, "BAD_REQUEST")
    }))

  it.scoped("MOD-04 MOD-07 a connection dropped mid-stream fails NETWORK; a malformed chunk fails PROVIDER", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("openai-broken-streams"))
      const model = yield* modelOn("openai", server)
      assert.strictEqual((yield* failureOf(model)).code, "NETWORK")
      const malformed = yield* failureOf(model)
      assert.strictEqual(malformed.code, "PROVIDER")
      assert.include(malformed.message, "malformed")
      // a body that ends without finish_reason or [DONE] was cut short
      assert.strictEqual((yield* failureOf(model)).code, "NETWORK")
      assert.strictEqual((yield* failureOf(model)).code, "PROVIDER")
    }))

  it.effect("MOD-04 MOD-05 MOD-07 a stalled stream fails TIMEOUT after idleTimeout and the server sees the connection closed", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([wire.chatSse([delta({ content: "thinking" })], "hang")])
      const model = yield* modelOn("openai", server, { idleTimeout: "30 seconds" })
      const fiber = yield* Effect.fork(failureOf(model))
      const received = yield* server.awaitRequest(1)
      // the timer (one for both timeouts) is registered before the clock moves
      yield* TestClock.sleeps().pipe(Effect.repeat({ until: (sleeps) => Chunk.size(sleeps) >= 1 }))
      yield* TestClock.adjust("30 seconds")
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.code, "TIMEOUT")
      assert.include(error.message, "idleTimeout")
      yield* received.aborted
    })))

  it.effect("MOD-04 the request timeout fails TIMEOUT even while chunks keep coming", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([wire.chatSse([delta({ content: "a" })], "hang")])
      const model = yield* modelOn("openai", server, { requestTimeout: "1 minute", idleTimeout: "5 minutes" })
      const fiber = yield* Effect.fork(failureOf(model))
      const received = yield* server.awaitRequest(1)
      yield* TestClock.sleeps().pipe(Effect.repeat({ until: (sleeps) => Chunk.size(sleeps) >= 1 }))
      yield* TestClock.adjust("1 minute")
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.code, "TIMEOUT")
      assert.include(error.message, "requestTimeout")
      yield* received.aborted
    })))

  it.effect("MOD-04 idleTimeout counts only waits for the provider: a consumer busy past it on a wire reply does not time out", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([wire.chatSse([delta({ content: "a" }), delta({ content: "b" }, "stop")])])
      const model = yield* modelOn("openai", server, { idleTimeout: "30 seconds" })
      const holding = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const texts: Array<string> = []
      const fiber = yield* Effect.fork(Stream.runForEach(model.stream(request()), (chunk) =>
        chunk._tag !== "TextDelta" ? Effect.void : Effect.zipRight(
          texts.length === 0 ? Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(gate)) : Effect.void,
          Effect.sync(() => texts.push(chunk.text))
        )))
      yield* Deferred.await(holding)
      yield* TestClock.sleeps().pipe(Effect.repeat({ until: (sleeps) => Chunk.size(sleeps) >= 1 }))
      // three idle timeouts while the consumer holds the first delta: the reader waits for nobody
      yield* TestClock.adjust("90 seconds")
      yield* Deferred.succeed(gate, undefined)
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(fiber)))
      assert.deepStrictEqual(texts, ["a", "b"])
    })))

  it.effect("MOD-04 MOD-05 requestTimeout aborts a wire request while the consumer is busy; its next pull fails TIMEOUT", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([wire.chatSse([delta({ content: "a" })], "hang")])
      const model = yield* modelOn("openai", server, { requestTimeout: "1 minute", idleTimeout: "5 minutes" })
      const holding = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const texts: Array<string> = []
      const fiber = yield* Effect.fork(Stream.runForEach(model.stream(request()), (chunk) =>
        chunk._tag !== "TextDelta" ? Effect.void : Effect.zipRight(
          Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(gate)),
          Effect.sync(() => texts.push(chunk.text))
        )))
      const received = yield* server.awaitRequest(1)
      yield* Deferred.await(holding)
      yield* TestClock.sleeps().pipe(Effect.repeat({ until: (sleeps) => Chunk.size(sleeps) >= 1 }))
      yield* TestClock.adjust("1 minute")
      // the request is aborted at once, though nobody is reading its body
      yield* received.aborted
      yield* Deferred.succeed(gate, undefined)
      const exit = yield* Fiber.await(fiber)
      const error = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      assert.isTrue(Option.isSome(error) && error.value.code === "TIMEOUT", "the stream should fail TIMEOUT")
      assert.include(Option.getOrThrow(error).message, "requestTimeout")
      assert.deepStrictEqual(texts, ["a"])
    })))

  it.scoped("MOD-05 MOD-07 interrupting a stream mid-reply aborts the HTTP request: the server sees the connection closed", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([wire.chatSse([delta({ content: "first" })], "hang")])
      const model = yield* modelOn("openai", server)
      const fiber = yield* Effect.fork(Stream.runDrain(model.stream(request())))
      const received = yield* server.awaitRequest(1)
      yield* Fiber.interrupt(fiber)
      yield* received.aborted
      assert.isTrue(Exit.isInterrupted(yield* Fiber.await(fiber)))
    }))

  it.scoped("MOD-01 maxTokens and the model are per request; max_completion_tokens on request; no key, no Authorization", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([chatText, chatText])
      const context = yield* Layer.build(
        LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, maxTokensField: "max_completion_tokens" }).pipe(
          Layer.provide(FetchHttpClient.layer)
        )
      )
      const model = yield* Effect.provide(Model.Model, context)
      yield* collect(model, request({ model: "one", maxTokens: 10 }))
      yield* collect(model, request({ model: "two", maxTokens: undefined, system: undefined }))
      const [first, second] = yield* server.received
      const body1 = first!.body as Record<string, unknown>
      const body2 = second!.body as Record<string, unknown>
      assert.strictEqual(body1["model"], "one")
      assert.strictEqual(body1["max_completion_tokens"], 10)
      assert.strictEqual(body2["model"], "two")
      assert.notProperty(body2, "max_completion_tokens")
      assert.notProperty(body2, "max_tokens")
      assert.deepStrictEqual(body2["messages"], [{ role: "user", content: "hi" }])
      // no OPENAI_API_KEY in this test's Config: no Authorization header at all
      assert.isUndefined(first!.headers["authorization"])
    }))

  it.scoped("MOD-03 the API key is never in an error, a log line or a chunk (Redacted)", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([
        wire.status(401, { error: { message: `Incorrect API key provided: ${secret}` } }),
        { _tag: "Sse", pieces: [`data: {"error": {"message": "bad key ${secret}"}}\n\n`], end: "end" },
        chatText
      ])
      const lines: Array<string> = []
      const capture = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ message }) => {
          lines.push(JSON.stringify(message))
        })
      )
      const model = yield* modelOn("openai", server)
      const errors = yield* Effect.all([failureOf(model), failureOf(model)]).pipe(
        Effect.tap((es) => Effect.logError("model failed", ...es)),
        Effect.provide(capture)
      )
      const chunks = yield* collect(model).pipe(Effect.tap((c) => Effect.log(c)), Effect.provide(capture))
      const everything = JSON.stringify([errors, errors.map((e) => e.message), chunks, lines, String(errors[0])])
      assert.notInclude(everything, secret)
      assert.isAbove(lines.length, 0)
      // the key did reach the server, where it belongs
      const received = yield* server.received
      assert.isTrue(received.every((r) => r.headers["authorization"] === `Bearer ${secret}`))
    }))

  it.scoped("MOD-01 the history maps to Chat Completions messages: tool calls with raw text, tool results, images", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([chatText])
      const model = yield* modelOn("openai", server)
      const history: ReadonlyArray<Message.Message> = [
        Message.user("look", {
          id: "m1",
          content: [{ type: "text", text: "look" }, { type: "image", mediaType: "image/png", data: "AAAA" }]
        }),
        {
          id: "a1" as Message.MessageId,
          role: "assistant",
          content: [
            { type: "reasoning", text: "hmm" },
            { type: "text", text: "reading" },
            { type: "tool-call", callId: "c1", name: "read", arguments: "{\"path\": \"a\" }" },
            { type: "tool-call", callId: "c2", name: "read", arguments: "{\"path\": " }
          ],
          source: { kind: "model", provider: "openai", model: "gpt-test" }
        },
        {
          id: "t1" as Message.MessageId,
          role: "tool",
          toolCallId: "c1",
          toolName: "read",
          content: [{ type: "text", text: "A" }],
          isError: false
        },
        {
          id: "t2" as Message.MessageId,
          role: "tool",
          toolCallId: "c2",
          toolName: "read",
          content: [{ type: "text", text: "invalid arguments" }],
          isError: true
        }
      ]
      yield* collect(model, request({ messages: history, system: undefined }))
      const [received] = yield* server.received
      assert.deepStrictEqual((received!.body as Record<string, unknown>)["messages"], [
        {
          role: "user",
          content: [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }]
        },
        {
          role: "assistant",
          content: "reading",
          tool_calls: [
            { id: "c1", type: "function", function: { name: "read", arguments: "{\"path\": \"a\" }" } },
            { id: "c2", type: "function", function: { name: "read", arguments: "{\"path\": " } }
          ]
        },
        { role: "tool", tool_call_id: "c1", content: "A" },
        { role: "tool", tool_call_id: "c2", content: "invalid arguments" }
      ])
    }))
})

// ---------------------------------------------------------------------------------------------
// Messages transcripts (test/fixtures/wire/anthropic-*.json)
// ---------------------------------------------------------------------------------------------

const claude = (overrides: Partial<Model.ModelRequest> = {}) =>
  request({ provider: "anthropic", model: "claude-test", ...overrides })

describe("LanguageModelAdapter.anthropic (Messages)", () => {
  it.scoped("MOD-01 MOD-03 MOD-06 MOD-07 streamed text, usage, and the request body the log derives (REQ-03 over the wire)", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("anthropic-text"))
      const chunks = yield* collect(yield* modelOn("anthropic", server), claude())
      assert.strictEqual(textOf(chunks), "Hello")
      assert.deepStrictEqual(finishOf(chunks), {
        _tag: "Finish",
        reason: "stop",
        usage: { inputTokens: 20, outputTokens: 7, cachedInputTokens: 6 }
      })
      const [received] = yield* server.received
      assert.strictEqual(received!.path, "/v1/messages")
      assert.strictEqual(received!.headers["x-api-key"], secret)
      assert.strictEqual(received!.headers["anthropic-version"], "2023-06-01")
      assert.isUndefined(received!.headers["authorization"])
      assert.deepStrictEqual(received!.body, {
        model: "claude-test",
        max_tokens: 256,
        system: "be brief",
        messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }],
        tools: [{ name: "read", description: "Reads a file", input_schema: Tool.toSchema(read).jsonSchema }],
        stream: true
      })
    }))

  it.scoped("MOD-02 MOD-07 reasoning, text and two tool calls whose JSON arrives in fragments keep the raw text", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("anthropic-tools"))
      const chunks = yield* collect(yield* modelOn("anthropic", server), claude())
      assert.deepStrictEqual(chunks.filter((c) => c._tag === "ReasoningDelta"), [{ _tag: "ReasoningDelta", text: "need files" }])
      assert.strictEqual(textOf(chunks), "reading both")
      assert.deepStrictEqual(callsOf(chunks), [
        { callId: "toolu_a", name: "read", arguments: "{\"path\": \"a.txt\"}" },
        { callId: "toolu_b", name: "read", arguments: "{\"path\":\"b.txt\"}" }
      ])
      assert.deepStrictEqual(finishOf(chunks), {
        _tag: "Finish",
        reason: "tool-calls",
        usage: { inputTokens: 20, outputTokens: 30, cachedInputTokens: 6 }
      })
    }))

  it.scoped("MOD-02 MOD-07 invalid arguments and a call without arguments never fail the stream", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("anthropic-invalid-arguments"))
      const chunks = yield* collect(yield* modelOn("anthropic", server), claude())
      assert.deepStrictEqual(callsOf(chunks), [
        { callId: "toolu_bad", name: "read", arguments: "{\"path\": 1" },
        { callId: "toolu_none", name: "list", arguments: "{}" }
      ])
    }))

  it.scoped("MOD-04 MOD-07 429 Retry-After, 529 overloaded, 401, prompt too long, an error event, a dropped connection", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("anthropic-errors"))
      const model = yield* modelOn("anthropic", server)
      const limited = yield* failureOf(model, claude())
      assert.strictEqual(limited.code, "RATE_LIMITED")
      assert.deepStrictEqual(limited.retryAfter, Duration.seconds(12))
      assert.strictEqual((yield* failureOf(model, claude())).code, "PROVIDER")
      assert.strictEqual((yield* failureOf(model, claude())).code, "AUTH")
      assert.strictEqual((yield* failureOf(model, claude())).code, "CONTEXT_LENGTH")
      const event = yield* failureOf(model, claude())
      assert.strictEqual(event.code, "PROVIDER")
      assert.include(event.message, "Overloaded")
      assert.strictEqual((yield* failureOf(model, claude())).code, "NETWORK")
    }))

  it.scoped("MOD-01 the history maps to Messages turns: tool_use with parsed input, tool_result blocks, merged user turns", () =>
    Effect.gen(function*() {
      const server = yield* wire.start(wire.transcript("anthropic-text"))
      const model = yield* modelOn("anthropic", server, {})
      const history: ReadonlyArray<Message.Message> = [
        Message.user("look", { id: "m1" }),
        {
          id: "a1" as Message.MessageId,
          role: "assistant",
          content: [
            { type: "reasoning", text: "hmm" },
            { type: "text", text: "reading" },
            { type: "tool-call", callId: "c1", name: "read", arguments: "{\"path\": \"a\"}" },
            { type: "tool-call", callId: "c2", name: "read", arguments: "{\"path\": " }
          ],
          source: { kind: "model", provider: "anthropic", model: "claude-test" }
        },
        {
          id: "t1" as Message.MessageId,
          role: "tool",
          toolCallId: "c1",
          toolName: "read",
          content: [{ type: "text", text: "A" }],
          isError: false
        },
        {
          id: "t2" as Message.MessageId,
          role: "tool",
          toolCallId: "c2",
          toolName: "read",
          content: [{ type: "text", text: "invalid arguments" }],
          isError: true
        },
        Message.user("and now?", { id: "m2" })
      ]
      yield* collect(model, claude({ messages: history, system: undefined, maxTokens: undefined }))
      const [received] = yield* server.received
      const body = received!.body as Record<string, unknown>
      assert.strictEqual(body["max_tokens"], 4096)
      assert.notProperty(body, "system")
      assert.deepStrictEqual(body["messages"], [
        { role: "user", content: [{ type: "text", text: "look" }] },
        {
          role: "assistant",
          content: [
            { type: "text", text: "reading" },
            { type: "tool_use", id: "c1", name: "read", input: { path: "a" } },
            { type: "tool_use", id: "c2", name: "read", input: {} }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "c1", content: [{ type: "text", text: "A" }] },
            { type: "tool_result", tool_use_id: "c2", content: [{ type: "text", text: "invalid arguments" }], is_error: true },
            { type: "text", text: "and now?" }
          ]
        }
      ])
    }))
})

// ---------------------------------------------------------------------------------------------
// Any @effect/ai LanguageModel (a provider package's): where MOD-02 degrades
// ---------------------------------------------------------------------------------------------

describe("LanguageModelAdapter.layer (any LanguageModel)", () => {
  /** A provider like the packages: it decodes tool arguments itself and streams no params parts. */
  const foreign = (parts: ReadonlyArray<Response.StreamPartEncoded>, error?: AiError.AiError) =>
    LanguageModel.make({
      generateText: () => Effect.succeed([]),
      streamText: (options) => {
        seen.push(options)
        const out = Stream.fromIterable(parts)
        return error === undefined ? out : Stream.concat(out, Stream.fail(error))
      }
    })
  const seen: Array<LanguageModel.ProviderOptions> = []
  const adapted = (model: Effect.Effect<LanguageModel.Service>) =>
    Effect.flatMap(
      Layer.build(LanguageModelAdapter.layer().pipe(Layer.provide(Layer.effect(LanguageModel.LanguageModel, model)))),
      (context) => Effect.provide(Model.Model, context)
    )

  it.scoped("MOD-01 the LanguageModel in context becomes our Model: prompt, tools with the log's JSON Schema, no tool resolution", () =>
    Effect.gen(function*() {
      const model = yield* adapted(foreign([
        { type: "text-delta", id: "t", delta: "ok" },
        { type: "tool-call", id: "c1", name: "read", params: { path: "x" } },
        { type: "finish", reason: "tool-calls", usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 } }
      ]))
      const chunks = yield* collect(model)
      assert.strictEqual(textOf(chunks), "ok")
      // no raw text from this provider: the JSON of its parsed parameters (MOD-02 degrades)
      assert.deepStrictEqual(callsOf(chunks), [{ callId: "c1", name: "read", arguments: "{\"path\":\"x\"}" }])
      assert.deepStrictEqual(finishOf(chunks), { _tag: "Finish", reason: "tool-calls", usage: { inputTokens: 3, outputTokens: 4 } })
      const options = seen[seen.length - 1]!
      const tools: ReadonlyArray<readonly [string, unknown]> = options.tools.map((tool) => [
        tool.name,
        AiTool.getJsonSchemaFromSchemaAst(tool.parametersSchema.ast)
      ])
      assert.deepStrictEqual(tools, [["read", Tool.toSchema(read).jsonSchema]])
      assert.deepStrictEqual(options.prompt.content.map((message) => message.role), ["system", "user"])
    }))

  it.scoped("MOD-01 MOD-02 our Chat Completions and Messages LanguageModels through layer() give the same chunks as openAi()/anthropic()", () =>
    Effect.gen(function*() {
      for (const [provider, name] of [["openai", "openai-invalid-arguments"], ["anthropic", "anthropic-tools"]] as const) {
        const direct = yield* wire.start(wire.transcript(name))
        const viaLayer = yield* wire.start(wire.transcript(name))
        const req = provider === "openai" ? request() : claude()
        const expected = yield* collect(yield* modelOn(provider, direct), req)
        const languageModel = provider === "openai"
          ? LanguageModelAdapter.makeOpenAiLanguageModel({ baseUrl: viaLayer.baseUrl, apiKey })
          : LanguageModelAdapter.makeAnthropicLanguageModel({ baseUrl: viaLayer.baseUrl, apiKey })
        const context = yield* Layer.build(
          LanguageModelAdapter.layer().pipe(
            Layer.provide(Layer.effect(LanguageModel.LanguageModel, languageModel)),
            Layer.provide(FetchHttpClient.layer)
          )
        )
        const adapted = yield* Effect.provide(Model.Model, context)
        assert.deepStrictEqual(yield* collect(adapted, req), expected)
        // the same request went over the wire, model and maxTokens from the request (RequestSettings)
        assert.deepStrictEqual((yield* viaLayer.received)[0]!.body, (yield* direct.received)[0]!.body)
      }
    }))

  it.scoped("MOD-02 MOD-04 a provider that fails on malformed arguments degrades to PROVIDER; HTTP errors keep their codes", () =>
    Effect.gen(function*() {
      const malformed = yield* adapted(foreign([], new AiError.MalformedOutput({ module: "OpenAiLanguageModel", method: "streamText", description: "bad JSON" })))
      const error = yield* failureOf(malformed)
      assert.strictEqual(error.code, "PROVIDER")
      assert.include(error.message, "did not decode")
      const limited = yield* adapted(foreign([], new AiError.HttpResponseError({
        module: "OpenAiClient",
        method: "streamRequest",
        reason: "StatusCode",
        request: { method: "POST", url: "https://api.example/v1", urlParams: [], hash: Option.none(), headers: {} },
        response: { status: 429, headers: { "retry-after": "3" } },
        body: "{\"error\":{\"message\":\"slow down\"}}"
      })))
      const rate = yield* failureOf(limited)
      assert.strictEqual(rate.code, "RATE_LIMITED")
      assert.deepStrictEqual(rate.retryAfter, Duration.seconds(3))
      const filtered = yield* adapted(foreign([
        { type: "text-delta", id: "t", delta: "no" },
        { type: "finish", reason: "content-filter", usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 } }
      ]))
      assert.strictEqual((yield* failureOf(filtered)).code, "CONTENT_FILTER")
    }))
})
