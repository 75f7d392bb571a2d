/**
 * Sub-agents (`npx tsx examples/subagents.ts`): owned and detached children.
 *
 * - `lead` has a `delegate` tool that calls `agent.spawn`: the child `lead.researcher` is created
 *   with the lead's agent Scope as its owner, so it is disposed before the lead leaves the registry
 *   (OWN-03). Its creation runs in the lead's tool, so its events name `lead` as their initiator.
 * - `auditor` is created with `parentAgent: lead` but owned by the program's Scope: a detached child.
 *   It is owned by the lead while both are live (`isOwnedBy`), survives the lead's disposal and then
 *   becomes a root (REG-07).
 *
 * Sessions live in memory only here (`AgentRuntime.layer` without a `SessionPersistence`).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Layer, Option, Schema } from "effect"
import type { Agent } from "../src/index.js"
import { AgentRegistry, AgentRuntime, Message, Model, Tool } from "../src/index.js"
import { watchFeed } from "./support/print.js"

const route = { provider: "scripted", model: "demo" } as const

/** The text of the last assistant message of an agent's history. */
const lastAnswer = (agent: Agent.Agent) =>
  Effect.map(agent.session.messages, (messages) => {
    for (let i = messages.length - 1; i >= 0; i--) {
      const message = messages[i]!
      if (message.role === "assistant") return Message.textOf(message.content)
    }
    return ""
  })

const program = Effect.gen(function*() {
  const registry = yield* AgentRegistry.AgentRegistry

  /** Prints who is live, who is a root, and who owns whom. */
  const census = (lead: Agent.Agent) =>
    Effect.gen(function*() {
      const ids = (agents: ReadonlyArray<Agent.Agent>) => agents.map((agent) => agent.id).join(", ")
      yield* Console.log(`  registry.list:  ${ids(yield* registry.list)}`)
      yield* Console.log(`  registry.roots: ${ids(yield* registry.roots)}`)
      for (const id of ["lead.researcher", "auditor"]) {
        yield* Console.log(`  isOwnedBy(${JSON.stringify(id)}, lead): ${yield* registry.isOwnedBy(id, lead)}`)
      }
    })

  // Every agent's live events on one feed (model deltas are left out unless the registry opts in).
  const feed = yield* watchFeed(registry.subscribe, (event) => event.agent)

  // A tool that delegates to an owned child. The child outlives the call: it belongs to the lead.
  let seenInitiator = "none"
  const delegate = Tool.make({
    name: "delegate",
    description: "Hands a task to a research sub-agent and returns its answer",
    parameters: Schema.Struct({ task: Schema.String }),
    run: ({ task }, { agent }) =>
      Effect.gen(function*() {
        // tool bodies run inside withInitiator(agent): attribution, never authorization (INIT-07)
        seenInitiator = Option.match(yield* registry.currentInitiator, { onNone: () => "none", onSome: (a) => a.id })
        const child = yield* agent.spawn({ sessionId: `${agent.id}.researcher`, options: route })
        yield* child.agent.followup(Message.user(task, { id: "r1" }))
        yield* child.agent.whenIdle
        return Tool.text(yield* lastAnswer(child.agent))
      })
  })

  yield* Console.log("── 1. lead delegates to an owned child (agent.spawn from its tool)")
  const lead = yield* registry.create({
    sessionId: "lead",
    options: route,
    setup: (agent) => agent.tools.register(delegate)
  })
  let mark = yield* feed.mark
  yield* lead.agent.followup(Message.user("How do Scopes close?", { id: "m1" }))
  yield* lead.agent.whenIdle
  yield* feed.printed(
    mark,
    (event) => event._tag === "AgentStatusChanged" && event.agent === "lead" && event.status === "idle"
  )
  yield* Console.log(`  the delegate tool ran with initiator ${seenInitiator}`)
  yield* Console.log(`  lead answered: ${JSON.stringify(yield* lastAnswer(lead.agent))}`)
  mark = yield* feed.mark

  yield* Console.log("── 2. a detached child: parentAgent is lead, but the program's Scope owns it")
  const auditor = yield* registry.create({ sessionId: "auditor", options: route, parentAgent: lead.agent })
  yield* feed.printed(mark, (event) => event._tag === "AgentSessionStart" && event.agent === "auditor")
  yield* census(lead.agent)

  yield* Console.log("── 3. dispose the lead: its owned child goes first, the detached one stays")
  mark = yield* feed.mark
  yield* lead.dispose
  yield* feed.printed(mark, (event) => event._tag === "AgentDisposed" && event.agent === "lead")
  yield* census(lead.agent)

  yield* Console.log("── 4. the detached child still works, now as a root")
  mark = yield* feed.mark
  yield* auditor.agent.followup(Message.user("Check the lead's answer.", { id: "a1" }))
  yield* auditor.agent.whenIdle
  yield* feed.printed(mark, (event) => event._tag === "AgentStatusChanged" && event.status === "idle")
  yield* Console.log(`  auditor answered: ${JSON.stringify(yield* lastAnswer(auditor.agent))}`)
  yield* Console.log("── 5. dispose the auditor (had we not, closing the program's Scope would have)")
  mark = yield* feed.mark
  yield* auditor.dispose
  yield* feed.printed(mark, (event) => event._tag === "AgentDisposed" && event.agent === "auditor")
  yield* Console.log(`  registry.list: ${(yield* registry.list).length} agents`)
})

const main = Effect.gen(function*() {
  const model = yield* Model.scripted({
    lead: [
      [
        Model.text("I will delegate this."),
        Model.toolCall("c1", "delegate", JSON.stringify({ task: "How do Scopes close?" }))
      ],
      Model.text("The researcher says: finalizers run in reverse order of acquisition.")
    ],
    "lead.researcher": [Model.text("Finalizers run in reverse order of acquisition.")],
    auditor: [Model.text("Checked: the lead's answer matches the Effect docs.")]
  })
  yield* program.pipe(Effect.scoped, Effect.provide(AgentRuntime.layer.pipe(Layer.provide(model.layer))))
})

NodeRuntime.runMain(Effect.scoped(main))
