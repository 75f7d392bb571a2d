/**
 * Real models (README "Real models"): one question that needs a tool, answered by
 *
 * - OpenAI or any compatible endpoint when `OPENAI_API_KEY` is set (`OPENAI_BASE_URL`, e.g.
 *   `https://api.deepseek.com/v1`, and `EFFECT_AGENT_MODEL` pick the endpoint and model),
 * - Anthropic when `ANTHROPIC_API_KEY` is set,
 * - the scripted model otherwise (no network).
 *
 *   npx tsx examples/real-models.ts
 */
import { FetchHttpClient } from "@effect/platform"
import { Config, Console, Effect, Layer, Option, Schema } from "effect"
import { AgentRegistry, AgentRuntime, Message, Model, SessionPersistence, Tool } from "../src/index.js"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import { watch } from "./support/print.js"

const clock = Tool.make({
  name: "clock",
  description: "The current time in a time zone",
  parameters: Schema.Struct({ timeZone: Schema.String }),
  run: ({ timeZone }) =>
    Effect.try(() => new Date().toLocaleTimeString("en-GB", { timeZone })).pipe(
      Effect.map((time) => Tool.text(`${time} in ${timeZone}`)),
      Effect.orElseSucceed(() => Tool.text(`unknown time zone ${JSON.stringify(timeZone)}`, { isError: true }))
    )
})

/** The providers, as the README shows them: each picks its key from Config. */
const RealModels = Model.layerRouter({
  openai: LanguageModelAdapter.openAi(),
  anthropic: LanguageModelAdapter.anthropic()
}).pipe(Layer.provide(FetchHttpClient.layer))

/** The route and the model layer: a real provider when its key is set, else the scripted model. */
const chooseModel = Effect.gen(function*() {
  const openAiKey = yield* Config.option(Config.redacted("OPENAI_API_KEY"))
  const anthropicKey = yield* Config.option(Config.redacted("ANTHROPIC_API_KEY"))
  const modelName = yield* Config.option(Config.string("EFFECT_AGENT_MODEL"))
  if (Option.isSome(openAiKey)) {
    return { provider: "openai", model: Option.getOrElse(modelName, () => "gpt-4o-mini"), layer: RealModels }
  }
  if (Option.isSome(anthropicKey)) {
    return { provider: "anthropic", model: Option.getOrElse(modelName, () => "claude-sonnet-4-5"), layer: RealModels }
  }
  const scripted = Model.layerScripted([
    Model.toolCall("c1", "clock", "{\"timeZone\": \"Asia/Tokyo\"}"),
    Model.text("That is the time in Tokyo (a scripted answer: set OPENAI_API_KEY or ANTHROPIC_API_KEY).")
  ])
  return { provider: "scripted", model: "demo", layer: scripted }
})

const program = Effect.gen(function*() {
  const { layer, model, provider } = yield* chooseModel
  yield* Console.log(`model: ${provider}/${model}`)
  const storage = yield* SessionPersistence.makeMemoryStorage
  const runtime = AgentRuntime.layerMemory({ storage }).pipe(Layer.provideMerge(layer))
  yield* Effect.gen(function*() {
    const registry = yield* AgentRegistry.AgentRegistry
    const { agent } = yield* registry.create({
      sessionId: "real-models",
      options: { provider, model, maxTokens: 512, system: "Answer in one sentence. Use the clock tool for times." },
      setup: (setup) => setup.tools.registerAll([clock])
    })
    const watcher = yield* watch(agent, "agent")
    yield* watcher.settle(agent.followup(Message.user("What time is it in Tokyo?")))
    const usage = (yield* agent.session.events).flatMap((event) =>
      event.type === "assistant/message" ? [JSON.stringify((event.data as { readonly usage?: unknown }).usage ?? {})] : []
    )
    yield* Console.log(`usage per assistant/message: ${usage.join(", ")}`)
  }).pipe(Effect.provide(runtime))
})

Effect.runPromise(Effect.scoped(program)).catch((error: unknown) => {
  process.exitCode = 1
  console.error(String(error))
})
