/**
 * The README's quick start (`npx tsx examples/quickstart.ts`). The README imports from
 * "effect-agent"; inside this repository the examples import the sources.
 *
 * Run it twice: the second run resumes the stored session and continues its history.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Clock, Console, Effect, Layer, Schema } from "effect"
import { AgentRegistry, Message, Model, Tool } from "../src/index.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

// A tool: a name, a Schema for its arguments, and an Effect that runs it.
const clock = Tool.make({
  name: "clock",
  description: "Tells the current time (UTC)",
  parameters: Schema.Struct({}),
  run: () => Effect.map(Clock.currentTimeMillis, (now) => Tool.text(new Date(now).toISOString()))
})

const program = Effect.gen(function*() {
  const registry = yield* AgentRegistry.AgentRegistry
  // The agent is owned by the current Scope: closing it disposes the agent (its inbox is kept).
  const { agent } = yield* registry.resumeOrCreate({
    sessionId: "quickstart",
    options: { provider: "scripted", model: "demo" },
    setup: (setup) => setup.tools.register(clock)
  })
  // Durable before it returns: the message is in the log, and turn/start with it.
  yield* agent.followup(Message.user("What time is it?"))
  yield* agent.whenIdle
  for (const message of yield* agent.session.messages) {
    yield* Console.log(`${message.role}: ${Message.textOf(message.content)}`)
  }
})

const main = Effect.gen(function*() {
  // A deterministic model (no network): the first request calls the tool, the second answers.
  const model = yield* Model.scripted([
    [Model.text("Let me look at the clock."), Model.toolCall("c1", "clock", "{}")],
    Model.text("It is time to ship.")
  ])
  // Registry + session store + AgentLoop factory + JSONL files in ./.sessions, over that model.
  const runtime = NodeFileSessionPersistence.layerRuntime({ directory: "./.sessions" }).pipe(Layer.provide(model.layer))
  yield* program.pipe(Effect.scoped, Effect.provide(runtime))
})

NodeRuntime.runMain(Effect.scoped(main))
