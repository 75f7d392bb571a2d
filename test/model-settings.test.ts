/**
 * APP-04 model settings: validated with the agent options, stored in `request/config` (REQ-03's
 * rebuild carries them), a message's own for its turn only (durable with the message, restored
 * after), refused at create and send when the provider cannot take one — never at resume — and
 * sent by both wire adapters (local recorded servers on 127.0.0.1, as MOD-07).
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
import type * as SessionEvent from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import * as wire from "./fixtures/wireServer.js"

const secret = "sk-settings-secret-abcdefgh"

const read = Tool.make({
  name: "read",
  description: "Reads a file",
  parameters: Schema.Struct({ path: Schema.String }),
  run: ({ path }) => Effect.succeed(Tool.text(`contents of ${path}`))
})

/** The runtime over memory persistence and `model`, built in the test's Scope. */
const runtimeWith = <M>(model: Layer.Layer<M | Model.Model, unknown>, storage?: SessionPersistence.MemoryStorage) =>
  Effect.gen(function*() {
    const store = storage ?? (yield* SessionPersistence.makeMemoryStorage)
    const layer = AgentRuntime.layerMemory({ storage: store }).pipe(Layer.provideMerge(model))
    return { storage: store, context: yield* Layer.build(layer).pipe(Effect.orDie) }
  })

const ofType = (events: ReadonlyArray<SessionEvent.SessionEvent>, type: string) =>
  events.filter((event) => event.type === type).map((event) => event.data as Record<string, any>)

const chatText = (text: string) =>
  wire.chatSse([
    { id: "c", choices: [{ index: 0, delta: { content: text }, finish_reason: null }] },
    { id: "c", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }
  ])

const messagesText = (text: string) =>
  wire.typedSse([
    { type: "message_start", message: { usage: { input_tokens: 5, output_tokens: 1 } } },
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } },
    { type: "content_block_stop", index: 0 },
    { type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 3 } },
    { type: "message_stop" }
  ])

const openAiOn = (server: wire.WireServer) =>
  LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, apiKey: Redacted.make(secret) }).pipe(
    Layer.provide(FetchHttpClient.layer)
  )

const anthropicOn = (server: wire.WireServer) =>
  LanguageModelAdapter.anthropic({ baseUrl: server.baseUrl, apiKey: Redacted.make(secret) }).pipe(
    Layer.provide(FetchHttpClient.layer)
  )

describe("APP-04 model settings", () => {
  it.scoped("APP-04 settings are validated by Schema: InvalidAgentOptions names each bad field, nothing is stored", () =>
    Effect.gen(function*() {
      const rt = yield* runtimeWith(Model.layerScripted([]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const bad = yield* Effect.flip(registry.create({
          sessionId: "bad",
          options: {
            provider: "scripted",
            model: "m",
            settings: {
              temperature: 3,
              topK: 0,
              stop: [""],
              toolChoice: "maybe" as never,
              parallelToolCalls: "yes" as never
            }
          }
        }))
        assert.instanceOf(bad, AgentError.InvalidAgentOptions)
        assert.include(bad.message, "settings.temperature must be a number from 0 to 2, got 3")
        assert.include(bad.message, "settings.topK must be a positive integer, got 0")
        assert.include(bad.message, "settings.stop must be an array of at most 16 non-empty strings")
        assert.include(bad.message, "settings.toolChoice must be \"auto\", \"none\", \"required\" or { tool: <a tool name> }")
        assert.include(bad.message, "settings.parallelToolCalls must be a boolean, got \"yes\"")
        // a misspelt setting is refused, not ignored
        const typo = yield* Effect.flip(registry.create({
          sessionId: "typo",
          options: { provider: "scripted", model: "m", settings: { temprature: 1 } as never }
        }))
        assert.include(typo.message, "settings.temprature")
        // maxOutputTokens and maxTokens are one value
        const both = yield* Effect.flip(registry.create({
          sessionId: "both",
          options: { provider: "scripted", model: "m", maxTokens: 10, settings: { maxOutputTokens: 20 } }
        }))
        assert.include(both.message, "settings.maxOutputTokens (20) and maxTokens (10) are one value")
        for (const id of ["bad", "typo", "both"]) {
          assert.isUndefined(yield* rt.storage.events(id as Message.SessionId))
        }
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("APP-04 REQ-03 the agent's settings are in request/config and the request; a message's own apply to its turn only, restored after", () =>
    Effect.gen(function*() {
      const rt = yield* runtimeWith(Model.layerScripted([Model.text("one"), Model.text("two"), Model.text("three")]))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const scripted = yield* Model.ScriptedModel
        const { agent } = yield* registry.create({
          sessionId: "s",
          options: {
            provider: "scripted",
            model: "m",
            settings: { temperature: 0.2, stop: ["END"], maxOutputTokens: 50, toolChoice: "auto" }
          }
        })
        yield* agent.followup(Message.user("first", { id: "m1" }))
        yield* agent.followup(Message.user("second", { id: "m2" }), { settings: { temperature: 0.9, maxOutputTokens: 10 } })
        yield* agent.send(Message.user("third", { id: "m3" }), { target: "next-turn" })
        yield* agent.whenIdle
        const requests = yield* scripted.requests
        assert.deepStrictEqual(requests.map((r) => [r.settings, r.maxTokens]), [
          [{ temperature: 0.2, stop: ["END"], toolChoice: "auto" }, 50],
          [{ temperature: 0.9, stop: ["END"], toolChoice: "auto" }, 10],
          [{ temperature: 0.2, stop: ["END"], toolChoice: "auto" }, 50]
        ])
        const events = yield* agent.session.events
        const configs = ofType(events, "request/config")
        assert.deepStrictEqual(configs.map((c) => [c["settings"], c["maxTokens"], c["turnOnly"]]), [
          [{ temperature: 0.2, stop: ["END"], toolChoice: "auto" }, 50, undefined],
          [{ temperature: 0.9, stop: ["END"], toolChoice: "auto" }, 10, true],
          [{ temperature: 0.2, stop: ["END"], toolChoice: "auto" }, 50, undefined]
        ])
        // the message's own settings are stored with it, in its input event
        const inserted = ofType(events, "agent/inbox/spliced").flatMap((s) => s["inserted"])
        assert.deepStrictEqual(inserted.find((m) => m.id === "m2")?.turnOptions, {
          settings: { temperature: 0.9, maxOutputTokens: 10 }
        })
        assert.isUndefined(inserted.find((m) => m.id === "m1")?.turnOptions)
        assert.deepStrictEqual(ofType(events, "turn/end").map((e) => e["reason"].kind), ["completed", "completed", "completed"])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("APP-04 a message's own settings are durable: sent before a restart, they apply to its turn after resume", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const first = yield* runtimeWith(Model.layerScripted([Model.hang("")]), storage)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const scripted = yield* Model.ScriptedModel
        const handle = yield* registry.create({
          sessionId: "d",
          options: { provider: "scripted", model: "m", settings: { seed: 1 } }
        })
        yield* handle.agent.followup(Message.user("a", { id: "m1" }))
        yield* scripted.awaitRequest(1)
        // queued behind the running turn with its own settings, then the process goes away
        yield* handle.agent.followup(Message.user("b", { id: "m2" }), { settings: { seed: 7, topK: 3 } })
        yield* handle.dispose
      }).pipe(Effect.provide(first.context))
      const second = yield* runtimeWith(Model.layerScripted([Model.text("again")]), storage)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const scripted = yield* Model.ScriptedModel
        // resumed without options: the route and the agent's settings come from the log
        const { agent } = yield* registry.resume({ sessionId: "d" })
        yield* agent.wake
        yield* agent.whenIdle
        const [request] = yield* scripted.requests
        assert.deepStrictEqual(request!.settings, { seed: 7, topK: 3 })
        const configs = ofType(yield* agent.session.events, "request/config")
        assert.deepStrictEqual(configs.map((c) => [c["settings"], c["turnOnly"]]), [
          [{ seed: 1 }, undefined],
          [{ seed: 7, topK: 3 }, true]
        ])
      }).pipe(Effect.provide(second.context))
    }))

  it.scoped("APP-04 a setting the provider cannot take is refused at create and at send, never dropped; resume never refuses", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([chatText("fine")])
      const claude = yield* wire.start([])
      const router = Model.layerRouter({
        openai: LanguageModelAdapter.openAi({ baseUrl: server.baseUrl, apiKey: Redacted.make(secret) }),
        anthropic: LanguageModelAdapter.anthropic({ baseUrl: claude.baseUrl, apiKey: Redacted.make(secret) })
      }).pipe(Layer.provide(FetchHttpClient.layer))
      const rt = yield* runtimeWith(router)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const topK = yield* Effect.flip(registry.create({
          sessionId: "k",
          options: { provider: "openai", model: "gpt-test", settings: { topK: 40 } }
        }))
        assert.instanceOf(topK, AgentError.InvalidAgentOptions)
        assert.include(topK.message, "topK is not a setting of OpenAI Chat Completions")
        const seed = yield* Effect.flip(registry.create({
          sessionId: "s",
          options: { provider: "anthropic", model: "claude-test", settings: { seed: 1 } }
        }))
        assert.include(seed.message, "seed is not a setting of Anthropic Messages")
        const hot = yield* Effect.flip(registry.create({
          sessionId: "t",
          options: { provider: "anthropic", model: "claude-test", settings: { temperature: 1.5 } }
        }))
        assert.include(hot.message, "Anthropic Messages takes a temperature from 0 to 1, got 1.5")
        // a message's own settings are judged the same way, and nothing is written
        const { agent } = yield* registry.create({ sessionId: "o", options: { provider: "openai", model: "gpt-test" } })
        const refused = yield* Effect.flip(agent.followup(Message.user("hi", { id: "m1" }), { settings: { topK: 5 } }))
        assert.instanceOf(refused, AgentError.InvalidAgentOptions)
        assert.include(refused.message, "topK")
        const invalid = yield* Effect.flip(agent.send(Message.user("hi", { id: "m1" }), { settings: { topP: 2 } }))
        assert.include(invalid.message, "settings.topP must be a number from 0 to 1, got 2")
        assert.deepStrictEqual(yield* agent.session.events, [])
        yield* agent.followup(Message.user("hi", { id: "m1" }), { settings: { seed: 3 } })
        yield* agent.whenIdle
        const [received] = yield* server.received
        assert.strictEqual((received!.body as Record<string, unknown>)["seed"], 3)
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("APP-04 resume never refuses: a stored setting the provider cannot take ends the turn error, no request sent", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      // a model that takes every setting wrote a session for provider "openai" with topK
      const first = yield* runtimeWith(Model.layerScripted([Model.text("ok")]), storage)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({
          sessionId: "r",
          options: { provider: "openai", model: "gpt-test", settings: { topK: 5 } }
        })
        yield* handle.agent.followup(Message.user("a", { id: "m1" }))
        yield* handle.agent.whenIdle
        yield* handle.dispose
      }).pipe(Effect.provide(first.context))
      const server = yield* wire.start([])
      const second = yield* runtimeWith(openAiOn(server), storage)
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.resume({ sessionId: "r" })
        yield* agent.followup(Message.user("b", { id: "m2" }))
        yield* agent.whenIdle
        const reasons = ofType(yield* agent.session.events, "turn/end").map((e) => e["reason"])
        assert.deepStrictEqual(reasons.map((r) => r.kind), ["completed", "error"])
        assert.strictEqual(reasons[1].error.code, "BAD_REQUEST")
        assert.include(reasons[1].error.message, "topK is not a setting of OpenAI Chat Completions")
        assert.deepStrictEqual(yield* server.received, [])
      }).pipe(Effect.provide(second.context))
    }))

  it.scoped("APP-04 MOD-07 Chat Completions: every setting on the wire, as the log's request/config says (REQ-03)", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([chatText("one"), chatText("two")])
      const rt = yield* runtimeWith(openAiOn(server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "w",
          options: {
            provider: "openai",
            model: "gpt-test",
            settings: {
              temperature: 0.3,
              topP: 0.9,
              maxOutputTokens: 64,
              stop: ["STOP", "END"],
              seed: 42,
              toolChoice: { tool: "read" },
              parallelToolCalls: false
            }
          },
          setup: (setup) => setup.tools.registerAll([read])
        })
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        yield* agent.followup(Message.user("again", { id: "m2" }), { settings: { toolChoice: "none", temperature: 0 } })
        yield* agent.whenIdle
        const [first, second] = (yield* server.received).map((r) => r.body as Record<string, unknown>)
        assert.deepInclude(first!, {
          model: "gpt-test",
          temperature: 0.3,
          top_p: 0.9,
          max_tokens: 64,
          stop: ["STOP", "END"],
          seed: 42,
          tool_choice: { type: "function", function: { name: "read" } },
          parallel_tool_calls: false
        })
        assert.deepInclude(second!, { temperature: 0, tool_choice: "none", parallel_tool_calls: false, seed: 42 })
        const configs = ofType(yield* agent.session.events, "request/config")
        assert.deepStrictEqual(configs[0]!["settings"], {
          temperature: 0.3,
          topP: 0.9,
          stop: ["STOP", "END"],
          seed: 42,
          toolChoice: { tool: "read" },
          parallelToolCalls: false
        })
        assert.strictEqual(configs[0]!["maxTokens"], first!["max_tokens"])
        assert.strictEqual(configs[1]!["settings"].temperature, second!["temperature"])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("APP-04 MOD-07 Anthropic Messages: every setting on the wire (stop_sequences, tool_choice any, disable_parallel_tool_use)", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([messagesText("one"), messagesText("two"), messagesText("three")])
      const rt = yield* runtimeWith(anthropicOn(server))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "a",
          options: {
            provider: "anthropic",
            model: "claude-test",
            settings: {
              temperature: 0.5,
              topP: 0.8,
              topK: 20,
              maxOutputTokens: 300,
              stop: ["###"],
              toolChoice: "required",
              parallelToolCalls: false
            }
          },
          setup: (setup) => setup.tools.registerAll([read])
        })
        yield* agent.followup(Message.user("hi", { id: "m1" }))
        yield* agent.followup(Message.user("tool?", { id: "m2" }), { settings: { toolChoice: { tool: "read" } } })
        yield* agent.followup(Message.user("none", { id: "m3" }), { settings: { toolChoice: "none" } })
        yield* agent.whenIdle
        const bodies = (yield* server.received).map((r) => r.body as Record<string, unknown>)
        assert.deepInclude(bodies[0]!, {
          model: "claude-test",
          max_tokens: 300,
          temperature: 0.5,
          top_p: 0.8,
          top_k: 20,
          stop_sequences: ["###"],
          tool_choice: { type: "any", disable_parallel_tool_use: true }
        })
        assert.deepStrictEqual(bodies[1]!["tool_choice"], { type: "tool", name: "read", disable_parallel_tool_use: true })
        assert.deepStrictEqual(bodies[2]!["tool_choice"], { type: "none" })
        const configs = ofType(yield* agent.session.events, "request/config")
        assert.deepStrictEqual(configs.map((c) => c["settings"].toolChoice), ["required", { tool: "read" }, "none"])
      }).pipe(Effect.provide(rt.context))
    }))
})
