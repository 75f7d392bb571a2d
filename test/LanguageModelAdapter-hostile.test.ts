/**
 * Hostile providers over the real wire protocols on 127.0.0.1 (SEC-02, SEC-08): a reply whose
 * line never ends, or that streams deltas forever, fails `OUTPUT_TOO_LARGE` as soon as it passes
 * `maxEventBytes` (not retried; the request is aborted); a retry header asks for at most
 * `maxRetryDelay`; an error body echoing the API key in any form a provider could echo it in
 * reaches no error message, no log line, no event and no stored record.
 */
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Clock, Duration, Effect, Exit, Fiber, Layer, Logger, LogLevel, Redacted, Stream, TestClock } from "effect"
import type * as AgentEvent from "../src/AgentEvent.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import type * as SessionEvent from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as hostile from "./fixtures/hostileProviders.js"
import type { Provider } from "./fixtures/hostileProviders.js"
import * as wire from "./fixtures/wireServer.js"

/** A key with characters that URL-encoding, base64 (`+`, `/`) and base64url each write differently. */
const secret = "sk-proj-Zx9/Q+w=tT~7!ab?cd&ef>>?"
const apiKey = Redacted.make(secret)

/** The adapter's limit in these tests, and how much a hostile server writes at most: far past it. */
const LIMIT = 64 * 1024
const SERVER_LIMIT = 64 * 1024 * 1024

const providers: ReadonlyArray<Provider> = ["openai", "anthropic"]

const modelLayer = (provider: Provider, server: wire.WireServer, options: LanguageModelAdapter.AdapterOptions = {}) =>
  (provider === "openai"
    ? LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, apiKey, ...options })
    : LanguageModelAdapter.anthropic({ baseUrl: server.baseUrl, apiKey, ...options })).pipe(
      Layer.provide(FetchHttpClient.layer)
    )

const modelOn = (provider: Provider, server: wire.WireServer, options: LanguageModelAdapter.AdapterOptions = {}) =>
  Effect.flatMap(Layer.build(modelLayer(provider, server, options)), (context) => Effect.provide(Model.Model, context))

const request = (provider: Provider): Model.ModelRequest => ({
  sessionId: "s" as SessionId,
  provider,
  model: provider === "openai" ? "gpt-test" : "claude-test",
  messages: [Message.user("hi", { id: "m1" })],
  tools: []
})

const failureOf = (model: Model.Model["Type"], provider: Provider) =>
  Effect.flip(Stream.runDrain(model.stream(request(provider))))

/** Drains the stream, counting the text and argument bytes it delivered before it failed. */
const deliveredUntilFailure = (model: Model.Model["Type"], provider: Provider) =>
  Effect.gen(function*() {
    let delivered = 0
    const error = yield* Effect.flip(Stream.runForEach(model.stream(request(provider)), (chunk) =>
      Effect.sync(() => {
        if (chunk._tag === "TextDelta") delivered += chunk.text.length
        if (chunk._tag === "ToolCall") delivered += chunk.arguments.length
      })))
    return { error, delivered }
  })

const ofType = (events: ReadonlyArray<SessionEvent.SessionEvent>, type: string) =>
  events.filter((event) => event.type === type).map((event) => event.data as Record<string, any>)

describe("SEC-02 provider output is bounded while it streams", () => {
  for (const provider of providers) {
    it.scoped(`SEC-02 ${provider}: a line that never ends fails OUTPUT_TOO_LARGE at the limit, not retryable, and the request is aborted`, () =>
      Effect.gen(function*() {
        const server = yield* wire.start([hostile.endlessLine(provider, SERVER_LIMIT)])
        const model = yield* modelOn(provider, server, { maxEventBytes: LIMIT })
        const error = yield* failureOf(model, provider)
        assert.strictEqual(error.code, "OUTPUT_TOO_LARGE")
        assert.isFalse(error.retryable)
        assert.include(error.message, `maxEventBytes (${LIMIT} bytes)`)
        assert.include(error.message, "an event")
        // the server saw the connection close before its (64 MiB) reply ended
        yield* (yield* server.awaitRequest(1)).aborted
      }))

    it.scoped(`SEC-02 ${provider}: endless small deltas fail OUTPUT_TOO_LARGE once the message passes the limit (the envelopes do not count)`, () =>
      Effect.gen(function*() {
        const server = yield* wire.start([hostile.endlessDeltas(provider, SERVER_LIMIT)])
        const model = yield* modelOn(provider, server, { maxEventBytes: LIMIT })
        const { delivered, error } = yield* deliveredUntilFailure(model, provider)
        assert.strictEqual(error.code, "OUTPUT_TOO_LARGE")
        assert.isFalse(error.retryable)
        assert.include(error.message, "a reply")
        // the message's text up to the limit (and the one delta that passed it), each delta's JSON
        // envelope not counted
        assert.isAbove(delivered, LIMIT - 100)
        assert.isAtMost(delivered, LIMIT + 100)
        yield* (yield* server.awaitRequest(1)).aborted
      }))

    it.scoped(`SEC-02 ${provider}: a tool call whose argument text never ends fails OUTPUT_TOO_LARGE`, () =>
      Effect.gen(function*() {
        const server = yield* wire.start([hostile.endlessArguments(provider, SERVER_LIMIT)])
        const model = yield* modelOn(provider, server, { maxEventBytes: LIMIT })
        const { delivered, error } = yield* deliveredUntilFailure(model, provider)
        assert.strictEqual(error.code, "OUTPUT_TOO_LARGE")
        // the arguments were held, never delivered: a call closes whole
        assert.strictEqual(delivered, 0)
        yield* (yield* server.awaitRequest(1)).aborted
      }))

    it.scoped(`SEC-02 ${provider}: a reply within the limit streams whole, multi-byte text counted in bytes`, () =>
      Effect.gen(function*() {
        // 40 deltas of 50 "é" (100 bytes each): 4,000 bytes under a 4,096-byte limit, 8,000 over a 2,048-byte one
        const text = "é".repeat(50)
        const deltas = Array.from({ length: 40 }, () => text)
        const reply = provider === "openai"
          ? wire.chatSse([
            ...deltas.map((content) => ({ id: "c", choices: [{ index: 0, delta: { content }, finish_reason: null }] })),
            { id: "c", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }
          ])
          : wire.typedSse([
            { type: "message_start", message: { id: "m", type: "message", role: "assistant", content: [], model: "claude-test", usage: { input_tokens: 1, output_tokens: 0 } } },
            { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
            ...deltas.map((delta) => ({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: delta } })),
            { type: "content_block_stop", index: 0 },
            { type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 40 } },
            { type: "message_stop" }
          ])
        const server = yield* wire.start([reply, reply])
        const fits = yield* modelOn(provider, server, { maxEventBytes: 4096 })
        const chunks = Chunk.toReadonlyArray(yield* Stream.runCollect(fits.stream(request(provider))))
        assert.strictEqual(chunks.flatMap((c) => c._tag === "TextDelta" ? [c.text] : []).join(""), deltas.join(""))
        const over = yield* modelOn(provider, server, { maxEventBytes: 2048 })
        assert.strictEqual((yield* failureOf(over, provider)).code, "OUTPUT_TOO_LARGE")
      }))
  }

  it.scoped("SEC-02 a single event over the limit fails even when it arrives in one piece; events at the limit pass", () =>
    Effect.gen(function*() {
      const big = { id: "c", choices: [{ index: 0, delta: { content: "z".repeat(3000) }, finish_reason: null }] }
      const server = yield* wire.start([
        wire.chatSse([big, { id: "c", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }]),
        wire.chatSse([big, { id: "c", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }])
      ])
      // the event is its data line and its line ending
      const eventBytes = `data: ${JSON.stringify(big)}\n`.length
      const exact = yield* modelOn("openai", server, { maxEventBytes: eventBytes })
      assert.strictEqual(Chunk.size(yield* Stream.runCollect(exact.stream(request("openai")))), 2)
      const under = yield* modelOn("openai", server, { maxEventBytes: eventBytes - 1 })
      const error = yield* failureOf(under, "openai")
      assert.strictEqual(error.code, "OUTPUT_TOO_LARGE")
      assert.include(error.message, "an event")
    }))

  it.effect("SEC-02 a bad maxEventBytes or maxRetryDelay fails the layer with a ConfigError", () =>
    Effect.gen(function*() {
      const bad = [{ maxEventBytes: 0 }, { maxEventBytes: 1.5 }, { maxEventBytes: 2 ** 30 }, { maxRetryDelay: Duration.infinity }]
      for (const options of bad) {
        const exit = yield* Effect.exit(Effect.scoped(Layer.build(
          LanguageModelAdapter.openAi({ baseUrl: "http://127.0.0.1:9/v1", ...options }).pipe(
            Layer.provide(FetchHttpClient.layer)
          )
        )))
        assert.isTrue(Exit.isFailure(exit), JSON.stringify(options))
        if (Exit.isFailure(exit)) assert.include(String(exit.cause), "must be")
      }
    }))
})

describe("SEC-02 retry headers ask for at most maxRetryDelay", () => {
  const limited = (headers: Record<string, string>) =>
    wire.status(429, { error: { message: "Rate limit reached" } }, headers)

  it.scoped("SEC-02 Retry-After: 86400, a 400-digit retry-after-ms, a value that is not a number and a far date wait 60 s; small values are kept", () =>
    Effect.gen(function*() {
      // the TestClock is at 0: an HTTP date two hours after the epoch is two hours ahead
      const inTwoHours = new Date(2 * 60 * 60 * 1000).toUTCString()
      const cases: ReadonlyArray<readonly [Record<string, string>, Duration.Duration]> = [
        [{ "retry-after": "86400" }, Duration.seconds(60)],
        [{ "retry-after-ms": "9".repeat(400) }, Duration.seconds(60)],
        [{ "retry-after": "9".repeat(400) }, Duration.seconds(60)],
        [{ "retry-after": "soon" }, Duration.seconds(60)],
        [{ "retry-after-ms": "-5" }, Duration.seconds(60)],
        [{ "retry-after": inTwoHours }, Duration.seconds(60)],
        [{ "retry-after": "7" }, Duration.seconds(7)],
        [{ "retry-after-ms": "1500" }, Duration.millis(1500)],
        // a value that is not a number does not hide a good one
        [{ "retry-after-ms": "soon", "retry-after": "3" }, Duration.seconds(3)]
      ]
      for (const provider of providers) {
        const server = yield* wire.start(cases.map(([headers]) => limited(headers)))
        const model = yield* modelOn(provider, server)
        for (const [headers, expected] of cases) {
          const error = yield* failureOf(model, provider)
          assert.strictEqual(error.code, "RATE_LIMITED")
          assert.deepStrictEqual(error.retryAfter, expected, `${provider} ${JSON.stringify(headers).slice(0, 80)}`)
        }
      }
      // no header: no retryAfter (the loop's own backoff applies)
      const plain = yield* wire.start([limited({})])
      assert.isUndefined((yield* failureOf(yield* modelOn("openai", plain), "openai")).retryAfter)
    }))

  it.scoped("SEC-02 maxRetryDelay sets the cap", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([
        limited({ "retry-after": "86400" }),
        limited({ "retry-after": "7" }),
        limited({ "retry-after": "2" }),
        limited({ "retry-after-ms": "not a number" })
      ])
      const model = yield* modelOn("openai", server, { maxRetryDelay: "5 seconds" })
      const waits: Array<Duration.Duration | undefined> = []
      for (let i = 0; i < 4; i++) waits.push((yield* failureOf(model, "openai")).retryAfter)
      assert.deepStrictEqual(waits, [Duration.seconds(5), Duration.seconds(5), Duration.seconds(2), Duration.seconds(5)])
    }))
})

// ---------------------------------------------------------------------------------------------
// Through an agent: the turn ends with the code, nothing is retried, the agent stays usable
// ---------------------------------------------------------------------------------------------

const runtimeOn = (model: Layer.Layer<Model.Model, unknown>) =>
  Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    return yield* Layer.build(AgentRuntime.layerMemory({ storage }).pipe(Layer.provideMerge(model))).pipe(Effect.orDie)
  })

/** The live events of `agent` until the end of turn `turn`, collected by a scoped fiber. */
const liveUntilTurnEnds = (events: Stream.Stream<AgentEvent.AgentEvent>, turn: number) =>
  Effect.forkScoped(Stream.runCollect(Stream.takeUntil(events, (event) => event._tag === "TurnEnded" && event.turn === turn)))

describe("SEC-02 through an agent", () => {
  for (const provider of providers) {
    for (const [what, reply] of [["an endless line", hostile.endlessLine], ["endless deltas", hostile.endlessDeltas]] as const) {
      it.scoped(`SEC-02 ${provider}: ${what} ends the turn error OUTPUT_TOO_LARGE without a retry; the next turn runs`, () =>
        Effect.gen(function*() {
          const server = yield* wire.start([reply(provider, SERVER_LIMIT), hostile.normalReply(provider, "fine")])
          const context = yield* runtimeOn(modelLayer(provider, server, { maxEventBytes: LIMIT }))
          yield* Effect.gen(function*() {
            const registry = yield* AgentRegistry
            const { agent } = yield* registry.create({
              sessionId: "s",
              options: { provider, model: provider === "openai" ? "gpt-test" : "claude-test" }
            })
            const live = yield* liveUntilTurnEnds(yield* agent.subscribe, 1)
            yield* agent.followup(Message.user("hi", { id: "m1" }))
            yield* agent.whenIdle
            const seen = Chunk.toReadonlyArray(yield* Fiber.join(live))
            assert.isFalse(seen.some((event) => event._tag === "ModelRetry"), "no retry was announced")
            assert.strictEqual((yield* server.received).length, 1)
            yield* agent.followup(Message.user("again", { id: "m2" }))
            yield* agent.whenIdle
            const events = yield* agent.session.events
            const reasons = ofType(events, "turn/end").map((e) => e["reason"])
            assert.deepStrictEqual(reasons.map((r) => r.kind), ["error", "completed"])
            assert.strictEqual(reasons[0].error.code, "OUTPUT_TOO_LARGE")
            // nothing of the failed attempt is durable: one assistant message, the second turn's
            assert.deepStrictEqual(
              ofType(events, "assistant/message").map((d) => Message.textOf(d["message"].content)),
              ["fine"]
            )
          }).pipe(Effect.provide(context))
        }))
    }
  }

  it.effect("SEC-02 Retry-After: 86400 parks the turn for maxRetryDelay (60 s), not a day", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([
        wire.status(429, { error: { message: "Rate limit reached" } }, { "retry-after": "86400" }),
        hostile.normalReply("openai", "fine")
      ])
      const context = yield* runtimeOn(modelLayer("openai", server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        const retry = yield* Effect.forkScoped((yield* agent.subscribe).pipe(
          Stream.filter((event) => event._tag === "ModelRetry"),
          Stream.runHead
        ))
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        const announced = yield* Fiber.join(retry)
        assert.isTrue(announced._tag === "Some" && announced.value._tag === "ModelRetry")
        if (announced._tag === "Some" && announced.value._tag === "ModelRetry") {
          assert.deepStrictEqual(announced.value.delay, Duration.seconds(60))
        }
        // the backoff's sleep ends 60 s from now
        const now = yield* Clock.currentTimeMillis
        yield* TestClock.sleeps().pipe(Effect.repeat({ until: (sleeps) => Chunk.some(sleeps, (at) => at === now + 60_000) }))
        yield* TestClock.adjust("59 seconds")
        assert.strictEqual((yield* server.received).length, 1)
        yield* TestClock.adjust("1 second")
        yield* agent.whenIdle
        const events = yield* agent.session.events
        assert.deepStrictEqual(ofType(events, "turn/end").map((d) => d["reason"].kind), ["completed"])
        assert.strictEqual((yield* server.received).length, 2)
      }).pipe(Effect.provide(context))
    })))
})

// ---------------------------------------------------------------------------------------------
// SEC-08: the key in any form a provider echoes it
// ---------------------------------------------------------------------------------------------

const base64 = (text: string) => Buffer.from(text).toString("base64")
const base64url = (text: string) => Buffer.from(text).toString("base64url")

/** What the provider echoes, each in its own error body. */
const echoes: ReadonlyArray<readonly [string, string]> = [
  ["plain", `Incorrect API key provided: ${secret}.`],
  ["base64", `Invalid credentials ${base64(secret)} for this project.`],
  ["base64url", `Invalid token ${base64url(secret)}; check your key.`],
  ["URL-encoded", `Request to https://api.example/v1/chat?key=${encodeURIComponent(secret)} was refused.`],
  ["its last 12 characters", `The key ending in ${secret.slice(-12)} was revoked.`],
  ["12 characters from its middle", `Key fragment ${secret.slice(9, 21)} is not valid.`],
  ["Basic auth (base64 after a prefix)", `Bad header: Basic ${base64(`user:${secret}`)}`]
]

/** Each 12-character run of each form of the key: none may appear anywhere. */
const forbidden: ReadonlyArray<string> = (() => {
  const forms = [secret, base64(secret).replace(/=+$/, ""), base64url(secret), encodeURIComponent(secret)]
  const runs = new Set<string>()
  for (const form of forms) for (let at = 0; at + 12 <= form.length; at++) runs.add(form.slice(at, at + 12))
  // the key's bytes inside "user:<key>" (5 bytes before it): the groups from byte 6 on are pure key
  const basic = base64(`user:${secret}`)
  for (let at = 8; at + 12 <= basic.length - 4; at++) runs.add(basic.slice(at, at + 12))
  return [...runs]
})()

const leaksIn = (text: string) => forbidden.filter((run) => text.includes(run))

describe("SEC-08 keys never leak through a provider's echo", () => {
  it("SEC-08 the test's own leak check finds every echo (a check that cannot fail proves nothing)", () => {
    for (const [form, body] of echoes) assert.isAbove(leaksIn(body).length, 0, form)
    assert.notStrictEqual(base64(secret), base64url(secret))
    assert.notStrictEqual(encodeURIComponent(secret), secret)
  })

  for (const provider of providers) {
    it.scoped(`SEC-08 ${provider}: an error status or an error event echoing the key in any form leaves nothing of it in the error`, () =>
      Effect.gen(function*() {
        const server = yield* wire.start(echoes.flatMap(([, body]) => [
          wire.status(401, { error: { message: body }, message: body }),
          hostile.streamError(provider, body)
        ]))
        const model = yield* modelOn(provider, server)
        for (const [form] of echoes) {
          for (const where of ["status", "stream"]) {
            const error = yield* failureOf(model, provider)
            assert.strictEqual(error.code, "AUTH", `${form} ${where}`)
            const text = JSON.stringify([error.message, String(error), error.reason, error])
            assert.deepStrictEqual(leaksIn(text), [], `${form} ${where}`)
            assert.include(error.message, "[redacted]", `${form} ${where}`)
          }
        }
      }))
  }

  it.scoped("SEC-08 scrubbing keeps the rest of the provider's words; a long message is cut", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([
        wire.status(401, { error: { message: `The key ending in ${secret.slice(-12)} was revoked.` } }),
        wire.status(400, { error: { message: `Unknown model gpt-9; see the docs. ${"n".repeat(10_000)}` } })
      ])
      const model = yield* modelOn("openai", server)
      assert.include((yield* failureOf(model, "openai")).message, "The key ending in [redacted] was revoked.")
      const long = yield* failureOf(model, "openai")
      assert.include(long.message, "Unknown model gpt-9; see the docs.")
      assert.isBelow(long.reason!.length, 4200)
      assert.isTrue(long.reason!.endsWith("…"))
    }))

  it.scoped("SEC-08 through an agent: no echo reaches the durable log, the live events, the logger or the error's message", () =>
    Effect.gen(function*() {
      const replies = echoes.flatMap(([, body]) => [
        wire.status(401, { error: { message: body } }),
        hostile.streamError("openai", body)
      ])
      const server = yield* wire.start(replies)
      const lines: Array<string> = []
      const capture = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ cause, message }) => {
          lines.push(JSON.stringify(message), String(cause))
        })
      )
      const context = yield* runtimeOn(modelLayer("openai", server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        const live = yield* liveUntilTurnEnds(yield* agent.subscribe, replies.length)
        for (let turn = 1; turn <= replies.length; turn++) {
          yield* agent.followup(Message.user(`try ${turn}`, { id: `m${turn}` }))
          yield* agent.whenIdle
        }
        const events = yield* agent.session.events
        const reasons = ofType(events, "turn/end").map((d) => d["reason"])
        assert.strictEqual(reasons.length, replies.length)
        assert.isTrue(reasons.every((r) => r.kind === "error" && r.error.code === "AUTH"))
        const seen = Chunk.toReadonlyArray(yield* Fiber.join(live))
        assert.isTrue(seen.some((event) => event._tag === "TurnEnded"))
        // what an application logs of the failures: the errors and the turn ends
        yield* Effect.logError("turns failed", ...reasons.map((r) => r.error.message))
        yield* Effect.logError("events", JSON.stringify(seen))
        assert.isAbove(lines.length, 0)
        const everything = JSON.stringify([events, seen, lines])
        assert.deepStrictEqual(leaksIn(everything), [])
        assert.include(everything, "[redacted]")
      }).pipe(Effect.provide(context), Effect.provide(capture), Logger.withMinimumLogLevel(LogLevel.All))
    }))
})
