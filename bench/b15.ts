/**
 * B15 (APP-01): the `run` round trip (send → `TurnResult`) against what a caller did before it:
 * `followup`, `whenIdle`, then reading the turn's outcome from the log (`session.events`, its last
 * `turn/end` and `assistant/message`). Sequential turns on one agent, a model that answers at once;
 * the two ways alternate in blocks on the same agent so both see the same log sizes. Target: `run`
 * ≤ 1.2× the manual way.
 */
import { Effect } from "effect"
import type { Agent } from "../src/Agent.js"
import { AgentRegistry } from "../src/index.js"
import type { AssistantMessage } from "../src/Message.js"
import { memoryRuntime, route, userMessage } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, ratios, settle, stat } from "./harness.js"

const BLOCK = 100

/** The manual way: follow-up, wait, read the outcome from the log. */
const manual = (agent: Agent, text: string) =>
  Effect.gen(function*() {
    yield* agent.followup(userMessage(`m-${text}`, text))
    yield* agent.whenIdle
    const events = yield* agent.session.events
    let reason: unknown
    let answer = ""
    for (let i = events.length - 1; i >= 0; i--) {
      const event = events[i]!
      if (event.type === "turn/end" && reason === undefined) reason = (event.data as { reason: unknown }).reason
      if (event.type === "assistant/message") {
        answer = (event.data as { message: AssistantMessage }).message.content.map((p) => p.type === "text" ? p.text : "").join("")
        break
      }
    }
    return [reason, answer] as const
  })

const rounds = (blocks: number) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* memoryRuntime
    return yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      const { agent } = yield* registry.create({ sessionId: "b15", options: route })
      const runUs: Array<number> = []
      const manualUs: Array<number> = []
      for (let b = 0; b < blocks; b++) {
        let start = now()
        for (let i = 0; i < BLOCK; i++) yield* agent.run(userMessage(`r-${b}-${i}`, "next question, please"))
        runUs.push(((now() - start) * 1000) / BLOCK)
        start = now()
        for (let i = 0; i < BLOCK; i++) yield* manual(agent, `${b}-${i}`)
        manualUs.push(((now() - start) * 1000) / BLOCK)
      }
      return { runUs, manualUs }
    })).pipe(Effect.provide(context))
  })).pipe(Effect.orDie)

export const scenario: Scenario = {
  id: "B15",
  title: "run round trip vs followup + whenIdle + reading the log",
  run: async ({ quick, log }) => {
    await Effect.runPromise(rounds(2))
    await settle()
    const { manualUs, runUs } = await Effect.runPromise(rounds(quick ? 6 : 20))
    const ratio = ratios(runUs, manualUs)
    log(`B15: run ${fmt(stat(runUs).median)} µs/turn, manual ${fmt(stat(manualUs).median)} µs/turn, ` +
      `ratio ${fmt(ratio.median)}×`)
    const row: Row = {
      id: "B15",
      scenario: "run round trip, one agent, memory, model answers at once",
      ours: stat(runUs),
      unit: "µs/turn",
      raw: { label: "followup + whenIdle + reading the log", value: stat(manualUs) },
      costRatio: ratio,
      notes: `run ≤ 1.2× the manual way (target); blocks of ${BLOCK} turns alternate on one agent`,
      extra: { ratio: ratio.median }
    }
    return [row]
  }
}
