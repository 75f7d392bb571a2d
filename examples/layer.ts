/**
 * Agents as Layers (`npx tsx examples/layer.ts`): `Agent.layer(Tag, options)` provides an agent to
 * a service like any other dependency. Building the layer creates the agent in the layer's Scope;
 * releasing it disposes the agent. With `resume: true` it resumes the stored session when there is
 * one (and creates it otherwise), so an application restart continues the same conversation.
 *
 * The application runs twice over one in-memory storage (standing in for a disk): the first start
 * creates the session, the second resumes it.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Context, Effect, Layer, Schema } from "effect"
import type { AgentError } from "../src/index.js"
import { Agent, AgentRuntime, Message, Model, SessionPersistence, Tool } from "../src/index.js"

/** The agent, as a dependency. */
class Assistant extends Context.Tag("examples/Assistant")<Assistant, Agent.Agent>() {}

const orderStatus = Tool.make({
  name: "order_status",
  description: "Looks up the status of an order",
  parameters: Schema.Struct({ order: Schema.String }),
  run: ({ order }) => Effect.succeed(Tool.text(`order ${order}: shipped`))
})

/** Building this layer creates (or resumes) the agent; releasing it disposes the agent. */
const AssistantLive = Agent.layer(Assistant, {
  sessionId: "support-assistant",
  options: { provider: "scripted", model: "demo", system: "You answer questions about orders." },
  resume: true,
  // the tool is registered at every start: tools are live objects, not part of the log
  setup: (agent) => agent.tools.register(orderStatus)
})

/** A service of the application that uses the agent. */
class Support extends Context.Tag("examples/Support")<Support, {
  readonly ask: (question: string) => Effect.Effect<string, AgentError.SendError>
}>() {}

const SupportLive = Layer.effect(
  Support,
  Effect.gen(function*() {
    const assistant = yield* Assistant
    const lastAnswer = Effect.map(assistant.session.messages, (messages) => {
      for (let i = messages.length - 1; i >= 0; i--) {
        const message = messages[i]!
        if (message.role === "assistant") return Message.textOf(message.content)
      }
      return ""
    })
    return Support.of({
      ask: (question) =>
        assistant.followup(Message.user(question)).pipe(
          Effect.zipRight(assistant.whenIdle),
          Effect.zipRight(lastAnswer)
        )
    })
  })
)

/** One start of the application: asks one question and reports what the agent remembers. */
const app = (question: string) =>
  Effect.gen(function*() {
    const assistant = yield* Assistant
    const before = (yield* assistant.session.messages).length
    yield* Console.log(`  the agent starts with ${before} message(s) of history`)
    const support = yield* Support
    yield* Console.log(`  ask ${JSON.stringify(question)}`)
    yield* Console.log(`  answer ${JSON.stringify(yield* support.ask(question))}`)
  })

const main = Effect.gen(function*() {
  const storage = yield* SessionPersistence.makeMemoryStorage
  const model = yield* Model.scripted({
    "support-assistant": [
      [Model.text("Let me check."), Model.toolCall("c1", "order_status", JSON.stringify({ order: "A-17" }))],
      Model.text("Order A-17 has shipped."),
      Model.text("You asked about order A-17: it has shipped.")
    ]
  })
  // Support ← Assistant ← runtime (registry, loop, persistence) ← model
  const AppLive = SupportLive.pipe(
    Layer.provideMerge(AssistantLive),
    Layer.provide(AgentRuntime.layerMemory({ storage })),
    Layer.provide(model.layer)
  )

  yield* Console.log("── first start: the layer creates the agent")
  yield* app("Where is my order A-17?").pipe(Effect.provide(AppLive))
  const stored = (yield* storage.events(yield* Message.sessionId("support-assistant"))) ?? []
  yield* Console.log(`  the layer was released: agent disposed, ${stored.length} events stored`)

  yield* Console.log("── second start: the same layer resumes the stored session")
  yield* app("What did I ask you before?").pipe(Effect.provide(AppLive))
})

NodeRuntime.runMain(Effect.scoped(main))
