/**
 * The loop's retry of model requests through a real agent (MOD-04) over the local wire server, on
 * the TestClock: a 429 with Retry-After is retried after exactly that wait and announced live as
 * `ModelRetry`; a connection dropped mid-stream is retried on the backoff and nothing of the
 * failed attempt is durable; a code that is not retryable ends the turn at once.
 */
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Clock, Duration, Effect, Layer, Redacted, Stream, TestClock } from "effect"
import type * as AgentEvent from "../src/AgentEvent.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import * as Message from "../src/Message.js"
import type * as SessionEvent from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as wire from "./fixtures/wireServer.js"

const delta = (d: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-1",
  choices: [{ index: 0, delta: d, finish_reason: finish }]
})

const runtimeOn = (server: wire.WireServer) =>
  Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const model = LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, apiKey: Redacted.make("sk-retry") }).pipe(
      Layer.provide(FetchHttpClient.layer)
    )
    return yield* Layer.build(AgentRuntime.layerMemory({ storage }).pipe(Layer.provideMerge(model))).pipe(Effect.orDie)
  })

const ofType = (events: ReadonlyArray<SessionEvent.SessionEvent>, type: string) =>
  events.filter((event) => event.type === type).map((event) => event.data as Record<string, any>)

/** Waits until a sleep ends exactly `delay` from now (the retry's backoff; other timers may be pending). */
const waitForSleepOf = (delay: Duration.Duration) =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    TestClock.sleeps().pipe(
      Effect.repeat({ until: (sleeps) => Chunk.some(sleeps, (at) => at === now + Duration.toMillis(delay)) })
    ))

describe("MOD-04 the loop retries model requests", () => {
  it.effect("MOD-04 MOD-07 429 with Retry-After then success: one ModelRetry after exactly that wait, one assistant message", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([
        wire.status(429, { error: { message: "Rate limit reached" } }, { "retry-after": "20" }),
        wire.chatSse([delta({ content: "fine" }), delta({}, "stop")])
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        const events = yield* agent.subscribe
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        const retry = yield* events.pipe(
          Stream.filter((event): event is AgentEvent.AgentEvent & { _tag: "ModelRetry" } => event._tag === "ModelRetry"),
          Stream.runHead
        )
        assert.isTrue(retry._tag === "Some")
        if (retry._tag === "Some") {
          assert.deepStrictEqual(
            [retry.value.turn, retry.value.step, retry.value.attempt, retry.value.code, retry.value.delay],
            [1, 1, 1, "RATE_LIMITED", Duration.seconds(20)]
          )
        }
        yield* waitForSleepOf(Duration.seconds(20))
        yield* TestClock.adjust("19 seconds")
        assert.strictEqual((yield* server.received).length, 1)
        yield* TestClock.adjust("1 second")
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(ofType(log, "assistant/message").map((d) => Message.textOf(d["message"].content)), ["fine"])
        assert.deepStrictEqual(ofType(log, "turn/end").map((d) => d["reason"].kind), ["completed"])
        const [first, second] = yield* server.received
        // REQ-03: the retried request is the same request
        assert.deepStrictEqual(second!.body, first!.body)
      }).pipe(Effect.provide(yield* runtimeOn(server)))
    })))

  it.effect("MOD-04 a stream dropped mid-reply is retried on the backoff; nothing of the failed attempt is durable", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([
        wire.chatSse([delta({ content: "half of a" })], "drop"),
        wire.chatSse([delta({ content: "whole answer" }), delta({}, "stop")])
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        const events = yield* agent.subscribe
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        const seen = yield* events.pipe(
          Stream.filter((event) => event._tag === "ModelDelta" || event._tag === "ModelRetry"),
          Stream.take(2),
          Stream.runCollect
        )
        const [partial, retry] = Chunk.toReadonlyArray(seen)
        assert.strictEqual(partial!._tag === "ModelDelta" && partial!.text, "half of a")
        assert.strictEqual(retry!._tag === "ModelRetry" && retry!.code, "NETWORK")
        const delay = retry!._tag === "ModelRetry" ? retry!.delay : Duration.zero
        yield* waitForSleepOf(delay)
        yield* TestClock.adjust(delay)
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(ofType(log, "assistant/message").map((d) => Message.textOf(d["message"].content)), [
          "whole answer"
        ])
        assert.notInclude(JSON.stringify(log), "half of a")
      }).pipe(Effect.provide(yield* runtimeOn(server)))
    })))

  it.effect("MOD-04 TURN-06 a code that is not retryable ends the turn at once, without ModelRetry", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* wire.start([wire.status(400, { error: { message: "Unknown parameter" } })])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        const events = yield* agent.subscribe
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(ofType(log, "turn/end").map((d) => d["reason"].error?.code), ["BAD_REQUEST"])
        const live = yield* events.pipe(Stream.takeUntil((event) => event._tag === "TurnEnded"), Stream.runCollect)
        assert.isFalse(Chunk.some(live, (event) => event._tag === "ModelRetry"))
        assert.strictEqual((yield* server.received).length, 1)
      }).pipe(Effect.provide(yield* runtimeOn(server)))
    })))
})
