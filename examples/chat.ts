/**
 * An interactive terminal chat (issue 16, SPEC §12): replies stream as they arrive; a line typed
 * while the agent runs steers it; sessions live on disk and resume across runs.
 *
 *   npx tsx examples/chat.ts [--dir ./.chat] [--session chat]
 *
 * Commands: `/queue text` (a follow-up: the next turn), `/inject text` (enters the next step, wakes
 * nothing), `/cancel`, `/cancel keep` (keep the pending inbox), `/fork name`, `/sessions`,
 * `/usage`, `/quit`. Any other line is a follow-up when the agent is idle and a steer while it
 * runs.
 *
 * The model: OpenAI or a compatible endpoint when `OPENAI_API_KEY` is set (`OPENAI_BASE_URL`,
 * `EFFECT_AGENT_MODEL`), Anthropic when `ANTHROPIC_API_KEY` is set, else a scripted model that
 * echoes (a line starting with "wait" makes it stream a little and then hang, to try `/cancel`).
 */
import { Console, Effect, Layer, Stream } from "effect"
import * as readline from "node:readline"
import { AgentRegistry, Message, SessionPersistence } from "../src/index.js"
import type { AgentEvent } from "../src/index.js"
import type { Agent } from "../src/Agent.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import { reasonText } from "./support/print.js"
import { argument, chooseModel } from "./support/models.js"

/** What the terminal shows of a live event (deltas inline, the rest on their own lines). */
const show = (event: AgentEvent.AgentEvent): string | undefined => {
  switch (event._tag) {
    case "ModelDelta":
      return event.kind === "text" ? event.text : undefined
    case "ModelRetry":
      return `\n[retry ${event.attempt} after ${event.code}]\n`
    case "ToolCallStarted":
      return `\n[tool ${event.name}]\n`
    case "InboxClaimed":
      return `[turn ${event.turn}] `
    case "TurnEnded":
      return `\n[turn ${event.turn} ${reasonText(event.reason)}]\n`
    case "AgentError":
      return `\n[error ${event.error.code}: ${event.error.message}]\n`
    default:
      return undefined
  }
}

/** The lines of stdin, ending when stdin closes. */
const lines = Stream.asyncPush<string>((emit) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const reader = readline.createInterface({ input: process.stdin, terminal: false })
      reader.on("line", (line) => emit.single(line))
      reader.on("close", () => emit.end())
      return reader
    }),
    (reader) => Effect.sync(() => reader.close())
  )
)

/** Usage summed over the session's assistant messages. */
const usageOf = (agent: Agent) =>
  Effect.map(agent.session.events, (events) => {
    const total = { inputTokens: 0, outputTokens: 0, reasoningTokens: 0, cachedInputTokens: 0 }
    for (const event of events) {
      if (event.type !== "assistant/message") continue
      const usage = (event.data as { readonly usage?: Partial<typeof total> }).usage ?? {}
      for (const key of Object.keys(total) as Array<keyof typeof total>) total[key] += usage[key] ?? 0
    }
    return total
  })

const command = (agent: Agent, line: string) =>
  Effect.gen(function*() {
    const [head, ...rest] = line.trim().split(/\s+/)
    const text = line.trim().slice((head ?? "").length).trim()
    switch (head) {
      case "/queue":
        return yield* agent.followup(Message.user(text))
      case "/inject":
        return yield* agent.inject(Message.user(text))
      case "/cancel":
        return yield* agent.cancel({ kind: "user" }, { keepInbox: rest[0] === "keep" })
      case "/fork": {
        const child = yield* agent.fork({ childId: text })
        yield* child.dispose
        return yield* Console.log(`[forked into ${text}: run with --session ${text}]`)
      }
      case "/sessions": {
        const persistence = yield* SessionPersistence.SessionPersistence
        const listed = yield* Stream.runCollect(persistence.list)
        for (const entry of listed) {
          yield* Console.log(
            entry._tag === "SessionSummary" ? `[session ${entry.id}: ${entry.eventCount} events]` : `[unreadable ${entry.id}: ${entry.problem}]`
          )
        }
        return
      }
      case "/usage":
        return yield* Console.log(`[usage ${JSON.stringify(yield* usageOf(agent))}]`)
      default: {
        const status = yield* agent.status
        return yield* status === "running" ? agent.steer(Message.user(line)) : agent.followup(Message.user(line))
      }
    }
  })

const program = Effect.gen(function*() {
  const directory = argument("dir", "./.chat")
  const sessionId = argument("session", "chat")
  const { layer, route } = yield* chooseModel
  const runtime = NodeFileSessionPersistence.layerRuntime({ directory }).pipe(Layer.provideMerge(layer))
  yield* Effect.gen(function*() {
    const registry = yield* AgentRegistry.AgentRegistry
    const { agent } = yield* registry.resumeOrCreate({ sessionId, options: route })
    const events = yield* agent.subscribe
    const stored = (yield* agent.session.messages).length
    yield* Console.log(`[${route.provider}/${route.model} · session ${sessionId} · ${stored} messages · /quit to leave]`)
    yield* events.pipe(
      Stream.runForEach((event) => {
        const out = show(event)
        return out === undefined ? Effect.void : Effect.sync(() => process.stdout.write(out))
      }),
      Effect.forkScoped
    )
    let quit = false
    yield* lines.pipe(
      Stream.takeWhile((line) => {
        quit = line.trim() === "/quit"
        return !quit
      }),
      Stream.filter((line) => line.trim() !== ""),
      Stream.runForEach((line) =>
        command(agent, line).pipe(Effect.catchAll((error) => Console.log(`[${error._tag}: ${error.message}]`)))
      )
    )
    // end of input: let the running turn finish; /quit leaves at once (disposing keeps the inbox)
    if (!quit) yield* agent.whenIdle
    yield* Console.log("[bye]")
  }).pipe(Effect.scoped, Effect.provide(runtime))
})

Effect.runPromise(program).catch((error: unknown) => {
  process.exitCode = 1
  console.error(String(error))
})
