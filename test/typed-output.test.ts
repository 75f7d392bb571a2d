/**
 * OUT-01 typed output and OUT-02 its corrections: the JSON Schema in `request/config` and in the
 * request (the scripted model answers text; Chat Completions gets `response_format`, Anthropic a
 * forced final tool whose input becomes the text), an answer that does not decode gets a durable
 * correction message up to `outputRetries`, then the turn ends `error {code: "OUTPUT_INVALID"}`.
 */
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Schema } from "effect"
import * as AgentError from "../src/AgentError.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as ModelSettings from "../src/ModelSettings.js"
import type * as SessionEvent from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as wire from "./fixtures/wireServer.js"

const Verdict = Schema.Struct({ spam: Schema.Boolean, reason: Schema.String }).annotations({ identifier: "verdict" })
const verdictFormat = ModelSettings.outputFormat(Verdict)

const runtimeWith = <M>(model: Layer.Layer<M | Model.Model, unknown>) =>
  Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const layer = AgentRuntime.layerMemory({ storage }).pipe(Layer.provideMerge(model))
    return yield* Layer.build(layer).pipe(Effect.orDie)
  })

const ofType = (events: ReadonlyArray<SessionEvent.SessionEvent>, type: string) =>
  events.filter((event) => event.type === type).map((event) => event.data as Record<string, any>)

const options = { provider: "scripted", model: "m" } as const

describe("OUT-01/02 typed output", () => {
  it.effect("OUT-01 outputFormat: the Schema's JSON Schema, its identifier as the name, strict when every property is required", () =>
    Effect.sync(() => {
      assert.deepStrictEqual(verdictFormat, {
        name: "verdict",
        schema: {
          type: "object",
          required: ["spam", "reason"],
          properties: { spam: { type: "boolean" }, reason: { type: "string" } },
          additionalProperties: false
        },
        strict: true
      })
      const loose = ModelSettings.outputFormat(Schema.Struct({ a: Schema.optional(Schema.String) }))
      assert.strictEqual(loose.name, "output")
      assert.strictEqual(loose.strict, false)
      assert.throws(() => ModelSettings.outputFormat(Verdict, { name: "no spaces allowed" }), /must match/)
    }))

  it.scoped("OUT-01 AgentOptions.output: the JSON Schema in request/config and the request; an answer that decodes completes", () =>
    Effect.gen(function*() {
      const context = yield* runtimeWith(Model.layerScripted([Model.text("{\"spam\": false, \"reason\": \"a friend\"}")]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const scripted = yield* Model.ScriptedModel
        const { agent } = yield* registry.create({ sessionId: "o", options: { ...options, output: Verdict } })
        yield* agent.followup(Message.user("is it spam?", { id: "m1" }))
        yield* agent.whenIdle
        const [request] = yield* scripted.requests
        assert.deepStrictEqual(request!.output, verdictFormat)
        const events = yield* agent.session.events
        assert.deepStrictEqual(ofType(events, "request/config")[0]!["output"], verdictFormat)
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"]), [{ kind: "completed" }])
      }).pipe(Effect.provide(context))
    }))

  it.scoped("OUT-01 a message's own output applies to its turn only and is stored with the message", () =>
    Effect.gen(function*() {
      const context = yield* runtimeWith(Model.layerScripted([
        Model.text("```json\n{\"spam\": true, \"reason\": \"offer\"}\n```"),
        Model.text("plain prose")
      ]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const scripted = yield* Model.ScriptedModel
        const { agent } = yield* registry.create({ sessionId: "o", options })
        yield* agent.followup(Message.user("classify", { id: "m1" }), { output: Verdict })
        yield* agent.followup(Message.user("chat", { id: "m2" }))
        yield* agent.whenIdle
        const requests = yield* scripted.requests
        assert.deepStrictEqual(requests.map((r) => r.output), [verdictFormat, undefined])
        const events = yield* agent.session.events
        assert.deepStrictEqual(
          ofType(events, "request/config").map((c) => [c["output"]?.name, c["turnOnly"]]),
          [["verdict", true], [undefined, undefined]]
        )
        const inserted = ofType(events, "agent/inbox/spliced").flatMap((s) => s["inserted"])
        assert.deepStrictEqual(inserted.find((m) => m.id === "m1")?.turnOptions, { output: verdictFormat })
        // a fenced JSON answer decodes; the untyped turn answers prose
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"].kind), ["completed", "completed"])
      }).pipe(Effect.provide(context))
    }))

  it.scoped("OUT-02 an answer that does not decode adds a correction step with a durable system message; a valid one completes", () =>
    Effect.gen(function*() {
      const context = yield* runtimeWith(Model.layerScripted([
        Model.text("I think it is fine"),
        Model.text("{\"spam\": \"no\", \"reason\": \"x\"}"),
        Model.text("{\"spam\": false, \"reason\": \"x\"}")
      ]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const scripted = yield* Model.ScriptedModel
        const { agent } = yield* registry.create({ sessionId: "c", options: { ...options, output: Verdict } })
        yield* agent.followup(Message.user("is it spam?", { id: "m1" }))
        yield* agent.whenIdle
        const events = yield* agent.session.events
        const entered = ofType(events, "user/message")
        assert.deepStrictEqual(entered.map((e) => [e["step"], e["message"].id, e["message"].source]), [
          [1, "m1", { kind: "user" }],
          [2, "output-invalid:1:1", { kind: "system", reason: "output-invalid" }],
          [3, "output-invalid:1:2", { kind: "system", reason: "output-invalid" }]
        ])
        assert.include(Message.textOf(entered[1]!["message"].content), "the answer is not JSON")
        assert.include(Message.textOf(entered[2]!["message"].content), "does not match the schema")
        assert.include(Message.textOf(entered[2]!["message"].content), "[\"spam\"]")
        // the model saw its answer and the correction
        const third = (yield* scripted.requests)[2]!
        assert.deepStrictEqual(third.messages.map((m) => m.role), ["user", "assistant", "user", "assistant", "user"])
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"]), [{ kind: "completed" }])
      }).pipe(Effect.provide(context))
    }))

  it.scoped("OUT-02 after outputRetries corrections the turn ends error OUTPUT_INVALID", () =>
    Effect.gen(function*() {
      const context = yield* runtimeWith(Model.layerScripted([Model.text("nope"), Model.text("[1, 2]")]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const scripted = yield* Model.ScriptedModel
        const { agent } = yield* registry.create({
          sessionId: "e",
          options: { ...options, output: Verdict, outputRetries: 1 }
        })
        yield* agent.followup(Message.user("is it spam?", { id: "m1" }))
        yield* agent.whenIdle
        assert.strictEqual((yield* scripted.requests).length, 2)
        const [end] = ofType(yield* agent.session.events, "turn/end")
        assert.strictEqual(end!["reason"].kind, "error")
        assert.strictEqual(end!["reason"].error.code, "OUTPUT_INVALID")
        assert.include(end!["reason"].error.message, "after 1 correction(s)")
      }).pipe(Effect.provide(context))
    }))

  it.scoped("OUT-01 APP-01 run(m, {output}) gives the decoded, typed output; turnResult reads it back; OUTPUT_INVALID fails TurnFailed", () =>
    Effect.gen(function*() {
      const context = yield* runtimeWith(Model.layerScripted([
        Model.text("{\"spam\": true, \"reason\": \"offer\"}"),
        Model.text("prose"),
        Model.text("still prose")
      ]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "r", options: { ...options, outputRetries: 1 } })
        const result = yield* agent.run("classify", { output: Verdict, settings: { temperature: 0 } })
        const spam: boolean = result.output.spam
        assert.isTrue(spam)
        assert.deepStrictEqual(result.output, { spam: true, reason: "offer" })
        const again = yield* agent.turnResult(result.turn)
        assert.deepStrictEqual(again._tag === "Some" ? again.value.output : undefined, { spam: true, reason: "offer" })
        const failed = yield* Effect.flip(agent.run("classify again", { output: Verdict }))
        assert.instanceOf(failed, AgentError.TurnFailed)
        if (failed._tag !== "TurnFailed") return
        assert.strictEqual(failed.reason.kind === "error" ? failed.reason.error.code : failed.reason.kind, "OUTPUT_INVALID")
        assert.isUndefined(failed.partial.output)
      }).pipe(Effect.provide(context))
    }))

  it.scoped("OUT-01 an output without a JSON Schema or a bad outputRetries is refused with InvalidAgentOptions", () =>
    Effect.gen(function*() {
      const context = yield* runtimeWith(Model.layerScripted([]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const opaque = Schema.declare((u: unknown): u is Date => u instanceof Date)
        const noJson = yield* Effect.flip(registry.create({ sessionId: "x", options: { ...options, output: opaque } }))
        assert.instanceOf(noJson, AgentError.InvalidAgentOptions)
        assert.include(noJson.message, "output")
        const retries = yield* Effect.flip(registry.create({ sessionId: "y", options: { ...options, outputRetries: -1 } }))
        assert.include(retries.message, "outputRetries must be an integer >= 0, got -1")
        const { agent } = yield* registry.create({ sessionId: "z", options })
        const refused = yield* Effect.flip(agent.followup(Message.user("hi"), { output: opaque }))
        assert.instanceOf(refused, AgentError.InvalidAgentOptions)
      }).pipe(Effect.provide(context))
    }))
})

// ---------------------------------------------------------------------------------------------
// Both wires (local recorded servers on 127.0.0.1, as MOD-07)
// ---------------------------------------------------------------------------------------------

const secret = "sk-output-secret-abcdefgh"

const chatText = (text: string) =>
  wire.chatSse([
    { id: "c", choices: [{ index: 0, delta: { content: text }, finish_reason: null }] },
    { id: "c", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }
  ])

/** A Messages reply that calls `name` with `json`, streamed in two fragments. */
const messagesTool = (name: string, json: string) =>
  wire.typedSse([
    { type: "message_start", message: { usage: { input_tokens: 5, output_tokens: 1 } } },
    { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_1", name, input: {} } },
    { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: json.slice(0, 5) } },
    { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: json.slice(5) } },
    { type: "content_block_stop", index: 0 },
    { type: "message_delta", delta: { stop_reason: "tool_use" }, usage: { output_tokens: 9 } },
    { type: "message_stop" }
  ])

describe("OUT-01/02 on the wire", () => {
  it.scoped("OUT-01 OUT-02 MOD-07 Chat Completions: response_format json_schema; an invalid answer is corrected in the next request", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([chatText("{\"spam\": 1}"), chatText("{\"spam\": true, \"reason\": \"ad\"}")])
      const model = LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, apiKey: Redacted.make(secret) }).pipe(
        Layer.provide(FetchHttpClient.layer)
      )
      const context = yield* runtimeWith(model)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "w", options: { provider: "openai", model: "gpt-test" } })
        yield* agent.followup(Message.user("classify", { id: "m1" }), { output: Verdict })
        yield* agent.whenIdle
        const bodies = (yield* server.received).map((r) => r.body as Record<string, any>)
        assert.strictEqual(bodies.length, 2)
        assert.deepStrictEqual(bodies[0]!["response_format"], {
          type: "json_schema",
          json_schema: { name: "verdict", schema: verdictFormat.schema, strict: true }
        })
        assert.deepStrictEqual(bodies[1]!["response_format"], bodies[0]!["response_format"])
        const messages = bodies[1]!["messages"] as Array<Record<string, any>>
        assert.deepStrictEqual(messages.map((m) => m["role"]), ["user", "assistant", "user"])
        assert.include(messages[2]!["content"], "not valid verdict output")
        const events = yield* agent.session.events
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"]), [{ kind: "completed" }])
        const answers = ofType(events, "assistant/message").map((e) => Message.textOf(e["message"].content))
        assert.deepStrictEqual(answers, ["{\"spam\": 1}", "{\"spam\": true, \"reason\": \"ad\"}"])
      }).pipe(Effect.provide(context))
    }))

  it.scoped("OUT-01 OUT-02 MOD-07 Anthropic: a forced final tool whose input is the answer's text; an invalid one is corrected", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([
        messagesTool("verdict", "{\"spam\": \"maybe\", \"reason\": \"?\"}"),
        messagesTool("verdict", "{\"spam\": false, \"reason\": \"friend\"}")
      ])
      const model = LanguageModelAdapter.anthropic({ baseUrl: server.baseUrl, apiKey: Redacted.make(secret) }).pipe(
        Layer.provide(FetchHttpClient.layer)
      )
      const context = yield* runtimeWith(model)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "a",
          options: { provider: "anthropic", model: "claude-test", output: Verdict }
        })
        yield* agent.followup(Message.user("classify", { id: "m1" }))
        yield* agent.whenIdle
        const bodies = (yield* server.received).map((r) => r.body as Record<string, any>)
        assert.strictEqual(bodies.length, 2)
        assert.deepStrictEqual(bodies[0]!["tools"], [{
          name: "verdict",
          description: "Give your final answer: call this tool once, with the answer as its input.",
          input_schema: verdictFormat.schema
        }])
        assert.deepStrictEqual(bodies[0]!["tool_choice"], { type: "tool", name: "verdict" })
        // the answer travelled as text: the next request carries it, then the correction
        const messages = bodies[1]!["messages"] as Array<Record<string, any>>
        assert.deepStrictEqual(messages[1], {
          role: "assistant",
          content: [{ type: "text", text: "{\"spam\": \"maybe\", \"reason\": \"?\"}" }]
        })
        assert.include(messages[2]!["content"][0].text, "not valid verdict output")
        const events = yield* agent.session.events
        const last = ofType(events, "assistant/message").at(-1)!
        assert.deepStrictEqual(last["message"].content, [{ type: "text", text: "{\"spam\": false, \"reason\": \"friend\"}" }])
        assert.strictEqual(last["finish"], "stop")
        assert.deepStrictEqual(ofType(events, "tool/call"), [])
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"]), [{ kind: "completed" }])
      }).pipe(Effect.provide(context))
    }))
})
