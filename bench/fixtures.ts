/**
 * What the scenarios share: a model that answers at once, runtimes over memory or files, and
 * stored session files of a given size written the way the runtime writes them.
 */
import { Effect, Layer, Stream } from "effect"
import type { Context, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { AgentRuntime, SessionPersistence } from "../src/index.js"
import { eventLines, headerLine } from "../src/internal/storage/file/jsonl.js"
import type { MessageId, SessionId, UserMessage } from "../src/Message.js"
import { Model } from "../src/Model.js"
import type { ModelChunk } from "../src/Model.js"
import type { SessionEvent, SessionHeader } from "../src/SessionEvent.js"
import { FORMAT, VERSION } from "../src/SessionEvent.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

/** The route every bench agent uses. */
export const route = { provider: "bench", model: "immediate" } as const

const reply: ReadonlyArray<ModelChunk> = [
  { _tag: "TextDelta", text: "done" },
  { _tag: "Finish", reason: "stop", usage: { inputTokens: 1, outputTokens: 4 } }
]

/**
 * A scripted model that answers every request at once with one text delta and a finish. (The test
 * model `Model.scripted` records every request for assertions, which a benchmark must not pay.)
 */
export const immediateModel: Layer.Layer<Model> = Layer.succeed(
  Model,
  Model.of({ stream: () => Stream.fromIterable(reply) })
)

export type Runtime = Context.Context<AgentRuntime.Services | SessionPersistence.SessionPersistence>

/** The runtime over fresh memory persistence, built in the current Scope. */
export const memoryRuntime: Effect.Effect<Runtime, never, Scope.Scope> = Effect.gen(function*() {
  const storage = yield* SessionPersistence.makeMemoryStorage
  const layer = AgentRuntime.layerMemory({ storage }).pipe(Layer.provide(immediateModel))
  return yield* Layer.build(layer).pipe(Effect.orDie)
})

/** The runtime over JSONL files in `directory`. */
export const fileRuntime = (
  directory: string,
  durability: "fsync" | "buffered"
): Effect.Effect<Runtime, never, Scope.Scope> =>
  Layer.build(
    NodeFileSessionPersistence.layerRuntime({ directory, durability }).pipe(Layer.provide(immediateModel))
  ).pipe(Effect.orDie)

/** A fresh temporary directory, removed when the Scope closes. */
export const tempDirectory = (prefix: string): Effect.Effect<string, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), `effect-agent-bench-${prefix}-`))),
    (directory) => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true }))
  )

export const userMessage = (id: string, text: string): UserMessage => ({
  id: id as MessageId,
  role: "user",
  content: [{ type: "text", text }],
  source: { kind: "user" }
})

const userText = "Please look at the attached report and summarise the three main findings in plain words."
const assistantText = "Here are the three main findings: the error rate fell by half after the change, latency is " +
  "flat across regions, and the remaining failures all come from one client that retries too eagerly."

const header = (id: string): SessionHeader => ({
  format: FORMAT,
  version: VERSION,
  id: id as SessionId,
  createdAt: 1_700_000_000_000,
  seedLength: 0,
  meta: { bench: true }
})

/**
 * The events of a session that ran turns (each: follow-up inserted, turn/start, claim, step/start,
 * user/message, [request/config on the first], assistant/message, step/end, turn/end), padded with
 * custom events to exactly `count`, ending outside any turn, so a resume writes nothing.
 */
export const turnLog = (count: number): Array<SessionEvent> => {
  const events: Array<{ readonly type: string; readonly data: unknown }> = []
  let turn = 0
  while (true) {
    const next = turn + 1
    const perTurn = next === 1 ? 9 : 8
    if (events.length + perTurn > count) break
    turn = next
    const id = `m${turn}`
    const message = userMessage(id, userText)
    events.push({
      type: "agent/inbox/spliced",
      data: { target: "next-turn", start: 0, removed: [], inserted: [message] }
    })
    events.push({ type: "turn/start", data: { turn } })
    events.push({ type: "agent/inbox/spliced", data: { target: "next-turn", start: 0, removed: [id], inserted: [] } })
    events.push({ type: "step/start", data: { turn, step: 1 } })
    events.push({ type: "user/message", data: { turn, step: 1, message } })
    if (turn === 1) {
      events.push({ type: "request/config", data: { provider: route.provider, model: route.model, tools: [] } })
    }
    events.push({
      type: "assistant/message",
      data: {
        turn,
        step: 1,
        message: {
          id: `assistant:${turn}:1`,
          role: "assistant",
          content: [{ type: "text", text: assistantText }],
          source: { kind: "model", provider: route.provider, model: route.model }
        },
        finish: "stop",
        usage: { inputTokens: 2 * turn - 1, outputTokens: assistantText.length }
      }
    })
    events.push({ type: "step/end", data: { turn, step: 1 } })
    events.push({ type: "turn/end", data: { turn, reason: { kind: "completed" } } })
  }
  while (events.length < count) events.push({ type: "bench/note", data: { index: events.length, text: "a note" } })
  return events.map((event, seq) => ({ seq, time: 1_700_000_000_000 + seq, ...event }) as SessionEvent)
}

/** The events of a session holding `count` pending follow-ups (one insert each), nothing claimed. */
export const pendingLog = (count: number): Array<SessionEvent> => {
  const events: Array<SessionEvent> = []
  for (let i = 0; i < count; i++) {
    events.push({
      seq: i,
      time: 1_700_000_000_000 + i,
      type: "agent/inbox/spliced",
      data: { target: "next-turn", start: i, removed: [], inserted: [userMessage(`p${i}`, userText)] }
    } as SessionEvent)
  }
  return events
}

/** Writes `<id>.jsonl` the way file persistence does; returns its path. */
export const writeSessionFile = (directory: string, id: string, events: ReadonlyArray<SessionEvent>): string => {
  const file = path.join(directory, `${id}.jsonl`)
  const chunks: Array<string> = [headerLine(header(id))]
  for (let i = 0; i < events.length; i += 1000) chunks.push(eventLines(events.slice(i, i + 1000)))
  fs.writeFileSync(file, chunks.join(""))
  return file
}
