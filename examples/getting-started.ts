/**
 * The README's Getting started: an OpenAI-compatible model, one tool, a streamed reply, and a session that resumes.
 * Run it twice: the second run continues the first conversation (sessions live in ./.sessions).
 *
 *   OPENAI_API_KEY=sk-... npx tsx examples/getting-started.ts "What time is it?"
 *
 * OPENAI_BASE_URL points it at any compatible endpoint (DeepSeek, Ollama, vLLM, LM Studio: the URL
 * includes the version path, e.g. http://127.0.0.1:11434/v1); EFFECT_AGENT_MODEL names the model.
 */
import { FetchHttpClient } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { Clock, Config, Effect, Layer, Schema, Stream } from "effect"
import { AgentRegistry, Message, Model, Tool, TurnPart } from "../src/index.js"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

// A tool: a name, a Schema for its arguments, and an Effect that runs it.
const clock = Tool.make({
  name: "clock",
  description: "Tells the current time (UTC)",
  parameters: Schema.Struct({}),
  run: () => Effect.map(Clock.currentTimeMillis, (now) => Tool.text(new Date(now).toISOString()))
})

const program = Effect.gen(function*() {
  const model = yield* Config.string("EFFECT_AGENT_MODEL").pipe(Config.withDefault("gpt-4o-mini"))
  const registry = yield* AgentRegistry.AgentRegistry
  // Created on the first run, resumed with its whole history on every later one. The agent belongs to
  // this Scope: when the program ends it is disposed, and its session stays on disk.
  const { agent } = yield* registry.resumeOrCreate({
    sessionId: "getting-started",
    options: { provider: "openai", model, system: "You are a brief assistant." },
    setup: (setup) => setup.tools.register(clock)
  })
  // Send one message and print the reply as it streams (the tool call runs in between).
  yield* agent.stream(Message.user(process.argv[2] ?? "What time is it?")).pipe(
    TurnPart.text,
    Stream.runForEach((text) => Effect.sync(() => process.stdout.write(text)))
  )
  const turns = (yield* agent.session.messages).filter((message) => message.role === "user").length
  process.stdout.write(`\n(${turns} message${turns === 1 ? "" : "s"} from you in this session so far)\n`)
})

// The model: OPENAI_API_KEY (and OPENAI_BASE_URL when set) from Config, over fetch.
const ModelLive = Model.layerRouter({ openai: LanguageModelAdapter.openAi() }).pipe(
  Layer.provide(FetchHttpClient.layer)
)

// The runtime: registry, session store, agent loop, and sessions as JSONL files.
const MainLive = NodeFileSessionPersistence.layerRuntime({ directory: "./.sessions" }).pipe(Layer.provide(ModelLive))

NodeRuntime.runMain(program.pipe(Effect.scoped, Effect.provide(MainLive)))
