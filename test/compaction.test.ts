/**
 * CMP-01, the pure parts: the `session/compacted` event and its codec (format v2), the history a
 * compacted log derives (REQ-03, a property test), token estimates, the decision "compact now? up to
 * where?", the summarizer request and the policy's validation.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, FastCheck as fc, Layer, Option } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Compaction from "../src/Compaction.js"
import * as compaction from "../src/internal/agent/compaction.js"
import * as codec from "../src/internal/log/eventCodec.js"
import { core } from "../src/internal/log/session.js"
import * as Message from "../src/Message.js"
import type { Message as AnyMessage, MessageId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Session from "../src/Session.js"
import type { CoreEventInput, SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { route } from "./fixtures/runtime.js"

// -------------------------------------------------------------------------------------------------
// Logs built by hand

type Input = CoreEventInput

const user = (id: string, text = id): Input => ({
  type: "user/message",
  data: { turn: 1, step: 1, message: Message.user(text, { id }) }
})

/** Stamps inputs as a log (seq = index, time 0); turn and step numbers are fixed up per turn. */
const stamp = (inputs: ReadonlyArray<Input>): ReadonlyArray<SessionEvent> => {
  let turn = 0
  let step = 0
  return inputs.map((input, seq) => {
    if (input.type === "turn/start") {
      turn++
      step = 0
      return { seq, time: 0, type: input.type, data: { turn } } as SessionEvent
    }
    if (input.type === "step/start") step++
    const data = input.data as Record<string, unknown>
    const numbered = "turn" in data ? { ...data, turn, ...("step" in data ? { step } : {}) } : data
    return { seq, time: 0, type: input.type, data: numbered } as SessionEvent
  })
}

const assistant = (id: string, text: string, usage?: Record<string, number>): Input => ({
  type: "assistant/message",
  data: {
    turn: 1,
    step: 1,
    message: {
      id: id as MessageId,
      role: "assistant",
      content: text === "" ? [] : [{ type: "text", text }],
      source: { kind: "model", provider: "p", model: "m" }
    },
    finish: "stop",
    ...(usage !== undefined ? { usage } : {})
  }
})

/** One closed turn: a user message and a reply. */
const turn = (
  n: number,
  options?: { readonly usage?: Record<string, number>; readonly text?: string }
): Array<Input> => [
  { type: "turn/start", data: { turn: 1 } },
  { type: "step/start", data: { turn: 1, step: 1 } },
  user(`q${n}`, options?.text ?? `q${n}`),
  assistant(`a${n}`, `a${n}`, options?.usage),
  { type: "step/end", data: { turn: 1, step: 1 } },
  { type: "turn/end", data: { turn: 1, reason: { kind: "completed" } } }
]

const compacted = (upTo: number, summary: string): Input => ({
  type: "session/compacted",
  data: { upTo, summary, usage: {} }
})

const texts = (messages: ReadonlyArray<AnyMessage>): ReadonlyArray<string> =>
  messages.map((m) => m.id.startsWith("compacted:") ? `summary:${m.id}` : `${m.role}:${Message.textOf(m.content)}`)

// -------------------------------------------------------------------------------------------------
// Arbitrary logs for the property test

interface TurnShape {
  readonly users: ReadonlyArray<string>
  readonly reply: string
  readonly tool: boolean
  readonly end: "completed" | "interrupted" | "disposed" | "error"
}

const TurnArb: fc.Arbitrary<TurnShape> = fc.record({
  users: fc.array(fc.string({ maxLength: 12 }), { maxLength: 2 }),
  reply: fc.string({ maxLength: 12 }),
  tool: fc.boolean(),
  end: fc.constantFrom("completed", "interrupted", "disposed", "error")
})

const CompactionArb = fc.record({ at: fc.nat(), upTo: fc.nat(), summary: fc.string({ maxLength: 12 }) })

const turnInputs = (shape: TurnShape, n: number): Array<Input> => {
  const inputs: Array<Input> = [
    { type: "turn/start", data: { turn: 1 } },
    { type: "step/start", data: { turn: 1, step: 1 } }
  ]
  shape.users.forEach((text, i) => inputs.push(user(`u${n}-${i}`, text)))
  const callId = `c${n}`
  inputs.push({
    type: "assistant/message",
    data: {
      turn: 1,
      step: 1,
      message: {
        id: `a${n}` as MessageId,
        role: "assistant",
        content: [
          ...(shape.reply === "" ? [] : [{ type: "text" as const, text: shape.reply }]),
          ...(shape.tool ? [{ type: "tool-call" as const, callId, name: "t", arguments: "{}" }] : [])
        ],
        source: { kind: "model", provider: "p", model: "m" }
      },
      finish: shape.tool ? "tool-calls" : "stop"
    }
  })
  if (shape.tool) {
    inputs.push({ type: "tool/call", data: { turn: 1, step: 1, callId, name: "t", arguments: "{}" } })
    inputs.push({
      type: "tool/result",
      data: {
        turn: 1,
        step: 1,
        message: {
          id: `tool:${callId}` as MessageId,
          role: "tool",
          toolCallId: callId,
          toolName: "t",
          content: [{ type: "text", text: `result ${n}` }],
          isError: false
        }
      }
    })
  }
  inputs.push({ type: "step/end", data: { turn: 1, step: 1 } })
  const reason = shape.end === "disposed"
    ? { kind: "aborted" as const, cause: { kind: "disposed" as const } }
    : shape.end === "error"
    ? { kind: "error" as const, error: { message: "boom", code: "X" } }
    : { kind: shape.end }
  inputs.push({ type: "turn/end", data: { turn: 1, reason } })
  return inputs
}

/** A log of the turns with compactions inserted anywhere (inside turns too), `upTo` anywhere up to past itself. */
const LogArb = fc.tuple(fc.array(TurnArb, { maxLength: 6 }), fc.array(CompactionArb, { maxLength: 3 })).map(
  ([turns, compactionsToInsert]) => {
    const inputs: Array<Input> = turns.flatMap((shape, n) => turnInputs(shape, n + 1))
    for (const c of compactionsToInsert) {
      const at = c.at % (inputs.length + 1)
      inputs.splice(at, 0, compacted(c.upTo % (at + 4), c.summary))
    }
    return stamp(inputs)
  }
)

/** The history the property expects: the latest summary, then the history of the uncompacted suffix. */
const summaryPlusSuffix = (log: ReadonlyArray<SessionEvent>): ReadonlyArray<AnyMessage> => {
  const latest = compaction.latestCompaction(log)
  if (latest === undefined) return Session.deriveMessages(log)
  const event = log[latest]! as Extract<SessionEvent, { type: "session/compacted" }>
  const suffix = log.slice(Math.min(event.data.upTo, event.seq)).filter((e) => e.type !== "session/compacted")
  const summary = Message.user(`${Compaction.summaryPreamble}\n\n${event.data.summary}`, {
    id: `compacted:${event.seq}`,
    source: { kind: "system" }
  })
  return [summary, ...Session.deriveMessages(suffix)]
}

describe("compaction, pure parts (CMP-01)", () => {
  describe("the event (DUR-00, DUR-01)", () => {
    it("CMP-01 DUR-00 DUR-01 session/compacted is a core event: accepted at append exactly as the reader accepts it", () => {
      const good = { upTo: 3, summary: "the story so far", usage: { inputTokens: 10, outputTokens: 2 } }
      const bad: ReadonlyArray<unknown> = [
        { upTo: -1, summary: "s", usage: {} },
        { upTo: 1.5, summary: "s", usage: {} },
        { upTo: 1, summary: 3, usage: {} },
        { upTo: 1, summary: "s" },
        { upTo: 1, summary: "s", usage: { inputTokens: -1 } },
        { upTo: -1, summary: "s", usage: {}, extra: true }
      ]
      assert.isTrue(Either.isRight(codec.coreEvent({ type: "session/compacted", data: good })))
      const read = codec.storedEvent({ seq: 7, time: 0, type: "session/compacted", data: good }, 7)
      assert.isTrue(Either.isRight(read))
      // the resume path's fast check agrees with the decoder
      const record = (seq: number, data: unknown) =>
        JSON.parse(JSON.stringify({ seq, time: 0, type: "session/compacted", data }))
      assert.isDefined(codec.acceptParsedEvent(record(7, good), 7))
      for (const data of bad) {
        const appended = codec.coreEvent({ type: "session/compacted", data } as never)
        assert.isTrue(Either.isLeft(appended), JSON.stringify(data))
        const stored = codec.storedEvent({ seq: 0, time: 0, type: "session/compacted", data }, 0)
        assert.isTrue(Either.isLeft(stored) && stored.left._tag === "Invalid", JSON.stringify(data))
        assert.isUndefined(codec.acceptParsedEvent(record(0, data), 0))
      }
      // DUR-00: valid but for a field this version does not know: refused at append, a newer version's at read
      const newer = { upTo: 1, summary: "s", usage: {}, extra: true }
      assert.isTrue(Either.isLeft(codec.coreEvent({ type: "session/compacted", data: newer } as never)))
      const read2 = codec.storedEvent({ seq: 0, time: 0, type: "session/compacted", data: newer }, 0)
      assert.isTrue(Either.isLeft(read2) && read2.left._tag === "Unsupported")
      // custom appends may not use it (SES-00): only the loop and agent.compact write it
      assert.isTrue(Either.isLeft(codec.customInput({ type: "session/compacted", data: good })))
    })
  })

  describe("the history of a compacted log (REQ-03, SES-03)", () => {
    it("CMP-01 REQ-03 the history is the summary, then what the events from upTo on contribute; the log keeps everything", () => {
      const log = stamp([...turn(1), ...turn(2), compacted(6, "turn 1 was about q1"), ...turn(3)])
      assert.deepStrictEqual(texts(Session.deriveMessages(log)), [
        "summary:compacted:12",
        "user:q2",
        "assistant:a2",
        "user:q3",
        "assistant:a3"
      ])
      const summary = Session.deriveMessages(log)[0]!
      assert.deepStrictEqual(summary, Message.user(`${Compaction.summaryPreamble}\n\nturn 1 was about q1`, {
        id: "compacted:12",
        source: { kind: "system" }
      }))
      // a later compaction replaces the earlier one
      const again = stamp([...log, compacted(19, "turns 1-3")].map(({ data, type }) => ({ data, type }) as Input))
      assert.deepStrictEqual(texts(Session.deriveMessages(again)), ["summary:compacted:19"])
    })

    it.prop(
      "CMP-01 REQ-03 the request derived from a compacted log equals the latest summary + the uncompacted suffix",
      [LogArb],
      ([log]) => {
        assert.deepStrictEqual(Session.deriveMessages(log), summaryPlusSuffix(log))
      },
      { fastCheck: { numRuns: 300 } }
    )

    it.effect.prop(
      "CMP-01 SES-03 a session's incremental history equals the derived one, whether compactions were seeded or appended",
      [LogArb, fc.nat()],
      ([log, cut]) =>
        Effect.scoped(Effect.gen(function*() {
          const k = log.length === 0 ? 0 : cut % (log.length + 1)
          const session = yield* Session.make({ id: "incremental", seed: log.slice(0, k) })
          for (const event of log.slice(k)) {
            yield* core(session).appendCore([{ type: event.type, data: event.data } as Input])
          }
          assert.deepStrictEqual(yield* session.messages, Session.deriveMessages(log))
          assert.deepStrictEqual(yield* session.messages, summaryPlusSuffix(log))
        })),
      { fastCheck: { numRuns: 100 } }
    )

    it.effect("CMP-01 MOD-06 session.usage adds the summarizer usage a session/compacted recorded", () =>
      Effect.scoped(Effect.gen(function*() {
        const session = yield* Session.make({
          id: "usage",
          seed: stamp([
            ...turn(1, { usage: { inputTokens: 10, outputTokens: 3 } }),
            { type: "session/compacted", data: { upTo: 6, summary: "s", usage: { inputTokens: 7, outputTokens: 2 } } }
          ])
        })
        assert.deepStrictEqual(yield* session.usage, { inputTokens: 17, outputTokens: 5 })
      })))
  })

  describe("token estimates", () => {
    it("CMP-01 the byte heuristic: UTF-8 bytes / 4 for text, system and tools, a fixed count per image and message", () => {
      assert.strictEqual(compaction.textTokens("abcd".repeat(10)), 10)
      assert.strictEqual(compaction.textTokens("é"), 1) // 2 bytes
      assert.strictEqual(compaction.textTokens("éé"), 1) // 4 bytes
      assert.strictEqual(compaction.textTokens("ééé"), 2) // 6 bytes
      const text = Message.user("abcd".repeat(10), { id: "t" })
      const image = Message.user("", {
        id: "i",
        content: [{ type: "image", mediaType: "image/png", data: "A".repeat(4000) }]
      })
      assert.strictEqual(compaction.messageTokens(text), compaction.MESSAGE_TOKENS + 10)
      assert.strictEqual(compaction.messageTokens(image), compaction.MESSAGE_TOKENS + compaction.IMAGE_TOKENS)
      const log = stamp(turn(1, { text: "abcd".repeat(10) }))
      const estimate = compaction.estimatePrompt({
        log,
        messages: Session.deriveMessages(log),
        system: "abcdefgh",
        tools: [{ name: "tool", description: "abcd", jsonSchema: { type: "object" } }]
      })
      // system 2 + tool (1 + 1 + 5) + user (4 + 10) + assistant "a1" (4 + 1)
      assert.deepStrictEqual(estimate, { tokens: 2 + 7 + 14 + 5, source: "bytes" })
    })

    it("CMP-01 provider usage when known: the latest reported prompt and output, plus the bytes of what followed", () => {
      assert.strictEqual(compaction.promptTokensOf({ inputTokens: 100 }), 100)
      assert.strictEqual(compaction.promptTokensOf({ inputTokens: 100, cachedInputTokens: 80 }), 100)
      assert.strictEqual(compaction.promptTokensOf({ inputTokens: 10, cachedInputTokens: 500 }), 510)
      assert.isUndefined(compaction.promptTokensOf({ outputTokens: 5 }))
      const inputs = [
        ...turn(1, { usage: { inputTokens: 5, outputTokens: 1 } }),
        ...turn(2, { usage: { inputTokens: 1000, outputTokens: 50 } }),
        { type: "turn/start", data: { turn: 1 } },
        { type: "step/start", data: { turn: 1, step: 1 } },
        user("q3", "abcd".repeat(10))
      ] as Array<Input>
      const log = stamp(inputs)
      const estimate = compaction.estimatePrompt({ log, messages: Session.deriveMessages(log), tools: [] })
      assert.deepStrictEqual(estimate, { tokens: 1000 + 50 + 14, source: "usage" })
      // usage from before a compaction measured another history: bytes again
      const afterCompaction = stamp([...inputs.slice(0, 12), compacted(6, "s"), ...inputs.slice(12)])
      const messages = Session.deriveMessages(afterCompaction)
      assert.strictEqual(compaction.estimatePrompt({ log: afterCompaction, messages, tools: [] }).source, "bytes")
    })
  })

  describe("the decision: compact now? up to where?", () => {
    it("CMP-01 over the threshold only; the last keepLastTurns closed turns and an open turn are kept", () => {
      assert.isTrue(compaction.exceedsThreshold(81, 100, 0.8))
      assert.isFalse(compaction.exceedsThreshold(80, 100, 0.8))
      const open: Array<Input> = [
        { type: "turn/start", data: { turn: 1 } },
        { type: "step/start", data: { turn: 1, step: 1 } },
        user("q4")
      ]
      const log = stamp([...turn(1), ...turn(2), ...turn(3), ...open])
      assert.strictEqual(compaction.keptTurnsBoundary(log, 0), 18)
      assert.strictEqual(compaction.keptTurnsBoundary(log, 2), 6)
      assert.isUndefined(compaction.keptTurnsBoundary(log, 3))
      const plan = compaction.planCompaction(log, 1)
      assert.isTrue(Option.isSome(plan))
      if (Option.isSome(plan)) {
        assert.strictEqual(plan.value.upTo, 12)
        assert.deepStrictEqual(texts(plan.value.history), ["user:q1", "assistant:a1", "user:q2", "assistant:a2"])
      }
      assert.isTrue(Option.isNone(compaction.planCompaction(log, 3)))
    })

    it("CMP-01 a later compaction folds the previous summary and what came after it, and nothing twice", () => {
      const log = stamp([...turn(1), ...turn(2), compacted(6, "about q1"), ...turn(3)])
      // keeping 2 closed turns would fold only turn 1: folded already
      assert.isTrue(Option.isNone(compaction.planCompaction(log, 2)))
      const plan = compaction.planCompaction(log, 1)
      assert.isTrue(Option.isSome(plan))
      if (Option.isSome(plan)) {
        // the log length at the end of turn 2: the earlier compaction after it is superseded (it contributes nothing)
        assert.strictEqual(plan.value.upTo, 12)
        assert.deepStrictEqual(texts(plan.value.history), ["summary:compacted:12", "user:q2", "assistant:a2"])
      }
      // turns that contributed nothing to the history leave nothing to fold
      const empty = stamp([
        { type: "turn/start", data: { turn: 1 } },
        { type: "turn/end", data: { turn: 1, reason: { kind: "completed" } } },
        ...turn(2)
      ] as Array<Input>)
      assert.isTrue(Option.isNone(compaction.planCompaction(empty, 1)))
    })

    it("CMP-01 the summarizer request: the route, the tools, the folded history, then the prompt", () => {
      const log = stamp([...turn(1), ...turn(2)])
      const plan = Option.getOrThrow(compaction.planCompaction(log, 1))
      const tool = { name: "t", description: "d", parameters: undefined as never, jsonSchema: { type: "object" } }
      const request = compaction.summarizerRequest({
        sessionId: Message.sessionId("s").pipe(Either.getOrThrow),
        route: { provider: "p", model: "m", maxTokens: 100, system: "be brief" },
        tools: [tool],
        plan,
        prompt: "summarise"
      })
      assert.deepStrictEqual(
        { ...request, messages: texts(request.messages) },
        {
          sessionId: "s",
          provider: "p",
          model: "m",
          maxTokens: 100,
          system: "be brief",
          messages: ["user:q1", "assistant:a1", "user:summarise"],
          tools: [tool]
        } as never
      )
      assert.deepStrictEqual(request.messages.at(-1), compaction.promptMessage(6, "summarise"))
      assert.deepStrictEqual(request.messages.at(-1)?.id, "compaction-prompt:6")
    })
  })

  describe("the policy (CORE-08)", () => {
    it.scoped("CMP-01 CORE-08 PUB-10 a bad policy fails InvalidAgentOptions naming each field; nothing is stored", () =>
      Effect.gen(function*() {
        const storage = yield* SessionPersistence.makeMemoryStorage
        const model = yield* Model.scripted([])
        const context = yield* Layer.build(AgentRuntime.layerMemory({ storage }).pipe(Layer.provide(model.layer)))
        const registry = yield* Effect.provide(AgentRegistry, context)
        const refused = yield* Effect.flip(registry.create({
          sessionId: "bad-policy",
          options: {
            ...route,
            contextWindow: 0,
            compaction: { threshold: 1.5, keepLastTurns: -1, prompt: "", onFailure: "retry" as never }
          }
        }))
        assert.strictEqual(refused._tag, "InvalidAgentOptions")
        assert.strictEqual(
          refused.message,
          "invalid agent options: contextWindow must be a positive integer number of tokens, got 0; " +
            "compaction.threshold must be a number above 0 and at most 1 (a fraction of contextWindow), got 1.5; " +
            "compaction.keepLastTurns must be an integer >= 0, got -1; compaction.prompt must be a non-empty string, " +
            "got \"\"; compaction.onFailure must be \"continue\" or \"fail\", got \"retry\""
        )
        const notAnObject = yield* Effect.flip(
          registry.create({ sessionId: "bad-policy", options: { ...route, compaction: 3 as never } })
        )
        assert.strictEqual(
          notAnObject.message,
          "invalid agent options: compaction must be an object (a compaction policy), got 3"
        )
        const persistence = yield* Effect.provide(SessionPersistence.SessionPersistence, context)
        assert.isFalse(yield* persistence.exists(Message.sessionId("bad-policy").pipe(Either.getOrThrow)))
        // the defaults, when the policy leaves them out
        assert.deepStrictEqual(compaction.resolvePolicy(undefined), {
          threshold: 0.8,
          keepLastTurns: 2,
          prompt: Compaction.defaultPrompt,
          onFailure: "continue"
        })
      }))
  })
})
