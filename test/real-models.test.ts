/**
 * Real models through a real agent (MOD-01..07): `AgentRuntime.layerMemory` with the adapter's
 * model pointed at a local wire server. A tool turn runs end to end; the durable log stores the
 * model's raw argument text and its usage; the request bodies the server received are what the
 * log derives; bad arguments reach the tool loop as `INVALID_ARGUMENTS`; `Model.layerRouter` routes
 * by provider and validates routes at create (PKG-06), never at resume.
 */
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Schema, Stream } from "effect"
import * as AgentError from "../src/AgentError.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type * as SessionEvent from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import * as wire from "./fixtures/wireServer.js"

const secret = "sk-e2e-secret-abcdefghijklmnop"

const read = Tool.make({
  name: "read",
  description: "Reads a file",
  parameters: Schema.Struct({ path: Schema.String }),
  run: ({ path }) => Effect.succeed(Tool.text(`contents of ${path}`))
})

const delta = (d: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-1",
  choices: [{ index: 0, delta: d, finish_reason: finish }]
})
const usage = (prompt: number, completion: number) => ({
  id: "chatcmpl-1",
  choices: [],
  usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
})

/** The runtime over memory persistence and `model`, built in the test's Scope. */
const runtimeWith = (model: Layer.Layer<Model.Model, unknown>, storage?: SessionPersistence.MemoryStorage) =>
  Effect.gen(function*() {
    const store = storage ?? (yield* SessionPersistence.makeMemoryStorage)
    const layer = AgentRuntime.layerMemory({ storage: store }).pipe(Layer.provideMerge(model))
    return { storage: store, context: yield* Layer.build(layer).pipe(Effect.orDie) }
  })

const openAiOn = (server: wire.WireServer) =>
  LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, apiKey: Redacted.make(secret) }).pipe(
    Layer.provide(FetchHttpClient.layer)
  )

const ofType = (events: ReadonlyArray<SessionEvent.SessionEvent>, type: string) =>
  events.filter((event) => event.type === type).map((event) => event.data as Record<string, any>)

describe("real models through an agent", () => {
  it.scoped("MOD-01 MOD-02 MOD-06 MOD-07 a tool turn over Chat Completions: raw arguments and usage in the log, bodies derived from it", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([
        wire.chatSse([
          delta({ role: "assistant", content: "let me look" }),
          delta({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "read", arguments: "{\"path\"" } }] }),
          delta({ tool_calls: [{ index: 0, function: { arguments: ": \"a.txt\" }" } }] }),
          delta({ tool_calls: [{ index: 1, id: "call_2", type: "function", function: { name: "read", arguments: "{\"path\": 7" } }] }),
          delta({}, "tool_calls"),
          usage(30, 12)
        ]),
        wire.chatSse([delta({ content: "a.txt says hello" }), delta({}, "stop"), usage(60, 5)])
      ])
      const rt = yield* runtimeWith(openAiOn(server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "chat",
          options: { provider: "openai", model: "gpt-test", maxTokens: 100, system: "be brief" },
          setup: (setup) => setup.tools.registerAll([read])
        })
        yield* agent.followup(Message.user("what is in a.txt?", { id: "m1" }))
        yield* agent.whenIdle
        const events = yield* agent.session.events
        // MOD-02: the log stores exactly what the model wrote, bad arguments included
        const [first, second] = ofType(events, "assistant/message")
        assert.deepStrictEqual(first!["message"].content, [
          { type: "text", text: "let me look" },
          { type: "tool-call", callId: "call_1", name: "read", arguments: "{\"path\": \"a.txt\" }" },
          { type: "tool-call", callId: "call_2", name: "read", arguments: "{\"path\": 7" }
        ])
        // MOD-06: usage per assistant/message
        assert.deepStrictEqual(first!["usage"], { inputTokens: 30, outputTokens: 12 })
        assert.deepStrictEqual(second!["usage"], { inputTokens: 60, outputTokens: 5 })
        // the bad call got INVALID_ARGUMENTS and the turn went on to a second step
        const results = ofType(events, "tool/result")
        assert.deepStrictEqual(results.map((r) => r["error"]?.code), [undefined, "INVALID_ARGUMENTS"])
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"].kind), ["completed"])
        // REQ-03 over the wire: the second body is the log's history as Chat Completions messages
        const received = yield* server.received
        assert.strictEqual(received.length, 2)
        const body = received[1]!.body as Record<string, unknown>
        assert.deepStrictEqual(body["messages"], [
          { role: "system", content: "be brief" },
          { role: "user", content: "what is in a.txt?" },
          {
            role: "assistant",
            content: "let me look",
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "read", arguments: "{\"path\": \"a.txt\" }" } },
              { id: "call_2", type: "function", function: { name: "read", arguments: "{\"path\": 7" } }
            ]
          },
          { role: "tool", tool_call_id: "call_1", content: "contents of a.txt" },
          { role: "tool", tool_call_id: "call_2", content: Message.textOf(results[1]!["message"].content) }
        ])
        const config = ofType(events, "request/config")[0]!
        assert.deepStrictEqual(body["tools"], config["tools"].map((t: Record<string, unknown>) => ({
          type: "function",
          function: { name: t["name"], description: t["description"], parameters: t["parameters"] }
        })))
        assert.strictEqual(body["max_tokens"], config["maxTokens"])
        assert.strictEqual(body["model"], config["model"])
        // MOD-03: the key reached the server and nothing stored
        assert.strictEqual(received[0]!.headers["authorization"], `Bearer ${secret}`)
        assert.notInclude(JSON.stringify(events), secret)
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("MOD-04 TURN-06 a provider failure ends the turn error with its code and no key; the agent stays usable", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([
        wire.status(401, { error: { message: `Incorrect API key provided: ${secret}` } }),
        wire.chatSse([delta({ content: "back" }), delta({}, "stop")])
      ])
      const rt = yield* runtimeWith(openAiOn(server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        yield* agent.whenIdle
        yield* agent.followup(Message.user("again", { id: "m2" }))
        yield* agent.whenIdle
        const events = yield* agent.session.events
        const reasons = ofType(events, "turn/end").map((e) => e["reason"])
        assert.strictEqual(reasons[0].kind, "error")
        assert.strictEqual(reasons[0].error.code, "AUTH")
        assert.strictEqual(reasons[1].kind, "completed")
        assert.notInclude(JSON.stringify(events), secret)
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("MOD-03 PKG-06 Model.layerRouter routes by provider, refuses unknown routes at create and never at resume", () =>
    Effect.gen(function*() {
      const openai = yield* wire.start([wire.chatSse([delta({ content: "from openai" }), delta({}, "stop")])])
      const claude = yield* wire.start(wire.transcript("anthropic-text"))
      const router = Model.layerRouter({
        openai: LanguageModelAdapter.openAi({ baseUrl: openai.baseUrl, apiKey: Redacted.make(secret) }),
        anthropic: LanguageModelAdapter.anthropic({
          baseUrl: claude.baseUrl,
          apiKey: Redacted.make(secret),
          models: ["claude-test"]
        })
      }).pipe(Layer.provide(FetchHttpClient.layer))
      const rt = yield* runtimeWith(router)
      const storage = rt.storage
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const unknown = yield* Effect.flip(registry.create({ sessionId: "x", options: { provider: "mistral", model: "m" } }))
        assert.instanceOf(unknown, AgentError.InvalidAgentOptions)
        assert.include(unknown.message, "\"openai\", \"anthropic\"")
        const model = yield* Effect.flip(registry.create({ sessionId: "y", options: { provider: "anthropic", model: "other" } }))
        assert.instanceOf(model, AgentError.InvalidAgentOptions)
        assert.include(model.message, "serves only \"claude-test\"")

        const a = yield* registry.create({ sessionId: "a", options: { provider: "openai", model: "gpt-test" } })
        const b = yield* registry.create({ sessionId: "b", options: { provider: "anthropic", model: "claude-test" } })
        yield* a.agent.followup(Message.user("hi", { id: "m1" }))
        yield* b.agent.followup(Message.user("hi", { id: "m1" }))
        yield* a.agent.whenIdle
        yield* b.agent.whenIdle
        const lastText = (events: ReadonlyArray<SessionEvent.SessionEvent>) =>
          Message.textOf(ofType(events, "assistant/message")[0]!["message"].content)
        assert.strictEqual(lastText(yield* a.agent.session.events), "from openai")
        assert.strictEqual(lastText(yield* b.agent.session.events), "Hello")
        yield* a.dispose
      }).pipe(Effect.provide(rt.context))

      // a stored session whose provider the router no longer serves: resumed, readable, NO_ROUTE at its next request
      const later = yield* runtimeWith(
        Model.layerRouter({ anthropic: LanguageModelAdapter.anthropic({ baseUrl: claude.baseUrl }) }).pipe(
          Layer.provide(FetchHttpClient.layer)
        ),
        storage
      )
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.resume({ sessionId: "a" })
        yield* agent.followup(Message.user("still there?", { id: "m2" }))
        yield* agent.whenIdle
        const reasons = ofType(yield* agent.session.events, "turn/end").map((e) => e["reason"])
        assert.deepStrictEqual(reasons.map((r) => r.kind), ["completed", "error"])
        assert.strictEqual(reasons[1].error.code, "NO_ROUTE")
        assert.include(reasons[1].error.message, "\"openai\"")
      }).pipe(Effect.provide(later.context))
    }))

  it.scoped("MOD-05 CAN-05 MOD-07 cancel during a stalled stream aborts the HTTP request and keeps the text delivered so far", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([wire.chatSse([delta({ content: "partial answer" })], "hang")])
      const rt = yield* runtimeWith(openAiOn(server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        const deltas = yield* agent.subscribe
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        const received = yield* server.awaitRequest(1)
        // the delta reached the agent before the cancel
        yield* deltas.pipe(Stream.filter((event) => event._tag === "ModelDelta"), Stream.take(1), Stream.runDrain)
        yield* agent.cancel({ kind: "user" })
        yield* received.aborted
        yield* agent.whenIdle
        const events = yield* agent.session.events
        const [assistant] = ofType(events, "assistant/message")
        assert.isTrue(assistant!["interrupted"])
        assert.deepStrictEqual(assistant!["message"].content, [{ type: "text", text: "partial answer" }])
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"]), [
          { kind: "aborted", cause: { kind: "user" } }
        ])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("MOD-05 disposing the agent mid-stream aborts the HTTP request", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([wire.chatSse([delta({ content: "partial" })], "hang")])
      const rt = yield* runtimeWith(openAiOn(server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "s", options: { provider: "openai", model: "gpt-test" } })
        yield* handle.agent.followup(Message.user("hi", { id: "m1" }))
        const received = yield* server.awaitRequest(1)
        yield* handle.dispose
        yield* received.aborted
      }).pipe(Effect.provide(rt.context))
    }))
})
