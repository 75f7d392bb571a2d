/**
 * CMP-01 in a live agent: compaction at a step boundary inside the running turn (no extra turn),
 * the requests it changes (REQ-03 byte for byte, the summarizer's too), what a failed or cancelled
 * summarizer does (the `onFailure` policy), `agent.compact` between turns (claiming the agent like
 * `runMaintenance`), forks before and after a compaction (FORK-01), resume (RES) and a version-1
 * session that gets the version-2 event (DUR-00).
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"
import type { Agent } from "../src/Agent.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Compaction from "../src/Compaction.js"
import * as Message from "../src/Message.js"
import type { Message as AnyMessage } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as Session from "../src/Session.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as Tool from "../src/Tool.js"
import {
  compactions,
  isSummarizerRequest,
  lastUserText,
  lastUserWord,
  long,
  reportingUsage,
  summarizingScript,
  withoutUsage
} from "./fixtures/compaction.js"
import {
  hasType,
  logViolations,
  makeHarness,
  msg,
  nextEvent,
  ofType,
  tagged,
  turnEnds
} from "./fixtures/driverHarness.js"
import { withLogs } from "./fixtures/logs.js"
import { route, runtimeOf } from "./fixtures/runtime.js"

/** A window of 200 tokens compacting above half of it, keeping the last closed turn. */
const compacting = { contextWindow: 200, compaction: { threshold: 0.5, keepLastTurns: 1 } } as const

/** A request's message ids (a summary is `compacted:<seq>`, the summarizer prompt `compaction-prompt:<upTo>`). */
const idsOf = (request: Model.ModelRequest): ReadonlyArray<string> => request.messages.map((m) => m.id)

/** Sends each follow-up (80 characters: 24 tokens by the byte estimate) and waits for its turn. */
const followups = (agent: Agent, ids: ReadonlyArray<string>) =>
  Effect.forEach(ids, (id) => Effect.zipRight(agent.followup(long(id, 80)), agent.whenIdle), { discard: true })

/** The index of the `turn/end` of `turn` in a log. */
const turnEndIndex = (log: ReadonlyArray<SessionEvent>, turn: number) =>
  log.findIndex((e) => e.type === "turn/end" && (e.data as { readonly turn: number }).turn === turn)

/** What a request is, as JSON (tools by name, description and JSON Schema: what a provider receives). */
const requestJson = (request: Model.ModelRequest) =>
  JSON.stringify({
    ...request,
    tools: request.tools.map(({ description, jsonSchema, name }) => ({ name, description, jsonSchema }))
  })

const read = Tool.make({
  name: "read",
  description: "reads a file",
  parameters: Schema.Struct({ path: Schema.String }),
  run: ({ path }) => Effect.succeed(Tool.text(`contents of ${path}: ${"y".repeat(120)}`))
})

describe("compaction in a live agent (CMP-01)", () => {
  describe("at a step boundary inside the running turn", () => {
    it.scoped("CMP-01 a step over the threshold compacts first: one session/compacted, no extra turn, the request carries summary + kept turns", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(summarizingScript(), { wrapModel: withoutUsage })
        const { agent } = yield* h.create("auto", { options: compacting })
        // 24 + 6 tokens per turn: the third turn's request (84 tokens) fits, the fourth's (114) does not
        yield* followups(agent, ["q1", "q2", "q3"])
        assert.deepStrictEqual(compactions(yield* agent.session.events), [])
        yield* followups(agent, ["q4"])
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        const [event] = compactions(log)
        assert.isDefined(event)
        // inside turn 4, in its step, right before the request: no turn of its own
        assert.strictEqual(ofType(log, "turn/start").length, 4)
        const turn4 = log.findIndex((e) => e.type === "turn/start" && (e.data as { readonly turn: number }).turn === 4)
        assert.deepStrictEqual(log.slice(turn4).map((e) => e.type), [
          "turn/start",
          "agent/inbox/spliced",
          "step/start",
          "user/message",
          "session/compacted",
          "assistant/message",
          "step/end",
          "turn/end"
        ])
        // turns 1 and 2 were folded; turn 3 (keepLastTurns 1) and the running turn stay verbatim
        assert.deepStrictEqual(event!.data, { upTo: turnEndIndex(log, 2) + 1, summary: "summary 1", usage: {} })
        const requests = yield* h.model.requests
        assert.deepStrictEqual(requests.map(isSummarizerRequest), [false, false, false, true, false])
        assert.deepStrictEqual(idsOf(requests[3]!), [
          "q1",
          "assistant:1:1",
          "q2",
          "assistant:2:1",
          `compaction-prompt:${event!.data.upTo}`
        ])
        assert.deepStrictEqual(idsOf(requests[4]!), [`compacted:${event!.seq}`, "q3", "assistant:3:1", "q4"])
        assert.deepStrictEqual(requests[4]!.messages, (yield* agent.session.messages).slice(0, 4))
        // the full log stays
        assert.strictEqual(ofType(log, "user/message").length, 4)
      }))

    it.scoped("CMP-01 EVS-02 the live Compacted event carries the durable event's seq, turn and step", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(summarizingScript(), { wrapModel: withoutUsage })
        const { agent } = yield* h.create("live", { options: compacting })
        yield* followups(agent, ["q1", "q2", "q3"])
        const compacted = yield* nextEvent(agent, tagged("Compacted"))
        yield* followups(agent, ["q4"])
        const event = yield* compacted
        const [durable] = compactions(yield* agent.session.events)
        assert.deepStrictEqual(
          {
            seq: event.seq,
            upTo: event.upTo,
            summary: event.summary,
            usage: event.usage,
            turn: event.turn,
            step: event.step
          },
          { seq: durable!.seq, upTo: durable!.data.upTo, summary: "summary 1", usage: {}, turn: 4, step: 1 }
        )
      }))

    it.scoped("CMP-01 MOD-06 provider usage decides when it is known, and the summarizer's usage is recorded and summed", () =>
      Effect.gen(function*() {
        // the byte estimate of these short turns stays far below the window; the reported usage does not
        const h = yield* makeHarness(summarizingScript(), {
          wrapModel: (model) =>
            reportingUsage(model, (request) => ({ inputTokens: 500 * request.messages.length, outputTokens: 7 }))
        })
        const { agent } = yield* h.create("usage", {
          options: { contextWindow: 1000, compaction: { keepLastTurns: 0 } }
        })
        // request 1 reported 500: the next prompt (500 + 7 + the bytes of q2) fits under 800
        yield* agent.followup(msg("q1"))
        yield* agent.whenIdle
        yield* agent.followup(msg("q2"))
        yield* agent.whenIdle
        assert.deepStrictEqual(compactions(yield* agent.session.events), [])
        // request 2 reported 1,500 (3 messages): the third turn compacts first
        yield* agent.followup(msg("q3"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        const [event] = compactions(log)
        assert.isDefined(event)
        // the summarizer saw q1, a1, q2, a2 and the prompt
        assert.deepStrictEqual(event!.data.usage, { inputTokens: 2500, outputTokens: 7 })
        // the turns' requests (1, 3 and 2 messages) and the summarizer's, 7 output tokens each
        assert.deepStrictEqual(yield* agent.session.usage, { inputTokens: 500 + 1500 + 2500 + 1000, outputTokens: 28 })
        // keepLastTurns 0: everything closed was folded
        assert.strictEqual(event!.data.upTo, turnEndIndex(log, 2) + 1)
      }))

    it.scoped("CMP-01 without contextWindow an agent never compacts on its own", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(summarizingScript(), { wrapModel: withoutUsage })
        const { agent } = yield* h.create("unbounded", {
          options: { compaction: { threshold: 0.1, keepLastTurns: 0 } }
        })
        yield* followups(agent, ["q1", "q2", "q3", "q4", "q5", "q6"])
        assert.deepStrictEqual(compactions(yield* agent.session.events), [])
        assert.isFalse((yield* h.model.requests).some(isSummarizerRequest))
        assert.strictEqual((yield* agent.session.messages).length, 12)
      }))

    it.scoped("CMP-01 REQ-03 every request of a compacting session, the summarizer's too, is rebuilt byte for byte from the log", () =>
      Effect.gen(function*() {
        const prompt = "Summarise for later."
        const script = summarizingScript()
        // a follow-up starting with "t" gets a tool call first, then a reply
        const wantsTool = (request: Model.ModelRequest) =>
          !isSummarizerRequest(request) && lastUserText(request).startsWith("t") &&
          request.messages.at(-1)?.role === "user"
        const h = yield* makeHarness(
          (request, n) =>
            wantsTool(request) ? Model.toolCall(`c${n}`, "read", JSON.stringify({ path: `f${n}` })) : script(request),
          { wrapModel: withoutUsage }
        )
        const { agent } = yield* h.create("rebuild", {
          options: {
            maxTokens: 256,
            system: "you are a test",
            contextWindow: 400,
            compaction: { threshold: 0.5, keepLastTurns: 1, prompt }
          },
          setup: (a) => a.tools.register(read)
        })
        yield* followups(agent, ["q1", "t2", "q3", "t4", "q5", "t6", "q7"])
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        // compactions both inside a tool turn's later step and at a turn's first step
        const compacted = compactions(log)
        assert.isAtLeast(compacted.length, 2)
        const stepOf = (index: number) => {
          for (let i = index; i >= 0; i--) {
            if (log[i]!.type === "step/start") return (log[i]!.data as { readonly step: number }).step
          }
          return 0
        }
        assert.isTrue(compacted.some((e) => stepOf(e.seq) > 1), "a compaction at a later step of a turn")

        const rebuilt: Array<string> = []
        let config: Extract<SessionEvent, { type: "request/config" }>["data"] | undefined
        for (let i = 0; i < log.length; i++) {
          const event = log[i]!
          if (event.type === "request/config") {
            config = (event as Extract<SessionEvent, { type: "request/config" }>).data
          }
          const isRequest = event.type === "assistant/message" || event.type === "session/compacted"
          if (!isRequest || config === undefined) continue
          let messages: ReadonlyArray<AnyMessage> = Session.deriveMessages(log.slice(0, i))
          if (event.type === "session/compacted") {
            // the summarizer saw the history at that point without what the kept events contribute, then the prompt
            const upTo = (event.data as { readonly upTo: number }).upTo
            const kept = Session.deriveMessages(log.slice(upTo, i).filter((e) => e.type !== "session/compacted"))
            messages = [
              ...messages.slice(0, messages.length - kept.length),
              Message.user(prompt, { id: `compaction-prompt:${upTo}`, source: { kind: "system" } })
            ]
          }
          rebuilt.push(JSON.stringify({
            sessionId: agent.id,
            provider: config.provider,
            model: config.model,
            ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}),
            ...(config.system !== undefined ? { system: config.system } : {}),
            messages,
            tools: config.tools.map(({ description, name, parameters }) => ({
              name,
              description,
              jsonSchema: parameters
            }))
          }))
        }
        const requests = yield* h.model.requests
        assert.strictEqual(requests.length, rebuilt.length)
        assert.deepStrictEqual(rebuilt, requests.map(requestJson))
        assert.deepStrictEqual(Session.deriveMessages(log), yield* agent.session.messages)
      }))
  })

  describe("a summarizer that fails or is cancelled", () => {
    it.scoped("CMP-01 onFailure \"continue\" (the default): a warning is logged, the request goes out uncompacted, the turn completes", () =>
      Effect.gen(function*() {
        const [requests, lines] = yield* withLogs(Effect.gen(function*() {
          const h = yield* makeHarness(
            (request) =>
              isSummarizerRequest(request) ? Model.fail("CONTEXT_LENGTH") : Model.text(`re ${lastUserWord(request)}`),
            { wrapModel: withoutUsage }
          )
          const { agent } = yield* h.create("continues", { options: compacting })
          yield* followups(agent, ["q1", "q2", "q3", "q4"])
          const log = yield* agent.session.events
          assert.deepStrictEqual(compactions(log), [])
          assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["completed", "completed", "completed", "completed"])
          assert.deepStrictEqual(logViolations(log), [])
          return yield* h.model.requests
        }))
        assert.deepStrictEqual(requests.map(isSummarizerRequest), [false, false, false, true, false])
        // the request after the failed summary carries the whole history
        assert.deepStrictEqual(idsOf(requests[4]!), [
          "q1",
          "assistant:1:1",
          "q2",
          "assistant:2:1",
          "q3",
          "assistant:3:1",
          "q4"
        ])
        assert.isTrue(
          lines.some((line) =>
            line.startsWith("WARN compaction: the summarizer request failed") && line.includes("CONTEXT_LENGTH") &&
            line.includes("uncompacted")
          ),
          lines.join("\n")
        )
      }))

    it.scoped("CMP-01 TURN-06 onFailure \"fail\": the turn ends error with the summarizer's code, nothing is written, the agent stays usable", () =>
      Effect.gen(function*() {
        let fail = true
        const h = yield* makeHarness(
          (request) =>
            isSummarizerRequest(request)
              ? fail ? Model.text("  ") : Model.text("summary")
              : Model.text(`re ${lastUserWord(request)}`),
          { wrapModel: withoutUsage }
        )
        const { agent } = yield* h.create("fails", {
          options: { ...compacting, compaction: { ...compacting.compaction, onFailure: "fail" } }
        })
        yield* followups(agent, ["q1", "q2", "q3"])
        const agentError = yield* nextEvent(agent, tagged("AgentError"))
        yield* followups(agent, ["q4"])
        assert.deepStrictEqual((yield* agentError).error.code, "EMPTY_SUMMARY")
        const log = yield* agent.session.events
        assert.deepStrictEqual(compactions(log), [])
        const last = turnEnds(log).at(-1)
        assert.deepStrictEqual(last, {
          kind: "error",
          error: {
            code: "EMPTY_SUMMARY",
            message: "model call failed (EMPTY_SUMMARY): the summarizer answered without text"
          }
        })
        // no request of its own was sent for that step
        assert.deepStrictEqual((yield* h.model.requests).map(isSummarizerRequest), [false, false, false, true])
        assert.deepStrictEqual(logViolations(log), [])
        fail = false
        yield* followups(agent, ["q5"])
        assert.strictEqual(compactions(yield* agent.session.events).length, 1)
        assert.strictEqual(turnEnds(yield* agent.session.events).at(-1)?.kind, "completed")
      }))

    it.scoped("CMP-01 SES-02b a compaction whose append fails breaks the agent like any loop write; resume repairs the turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(summarizingScript(), { wrapModel: withoutUsage })
        const { agent, dispose } = yield* h.create("append-fails", { options: compacting })
        yield* followups(agent, ["q1", "q2", "q3"])
        yield* h.writes.failNext(hasType("session/compacted"))
        yield* followups(agent, ["q4"])
        const log = yield* agent.session.events
        assert.deepStrictEqual(compactions(log), [])
        // the summarizer was asked, the step's request never went out
        assert.deepStrictEqual((yield* h.model.requests).map(isSummarizerRequest), [false, false, false, true])
        assert.strictEqual((yield* Effect.flip(agent.followup(msg("q5"))))._tag, "AgentBroken")
        yield* dispose
        const resumed = yield* h.registry.resume({ sessionId: "append-fails", options: { ...route, ...compacting } })
        const repaired = yield* resumed.agent.session.events
        assert.deepStrictEqual(turnEnds(repaired).at(-1), { kind: "interrupted" })
        assert.deepStrictEqual(logViolations(repaired), [])
        // the next turn compacts (still over the threshold) and completes
        yield* followups(resumed.agent, ["q5"])
        assert.strictEqual(compactions(yield* resumed.agent.session.events).length, 1)
        assert.strictEqual(turnEnds(yield* resumed.agent.session.events).at(-1)?.kind, "completed")
      }))

    it.scoped("CMP-01 CAN-05 a cancel during the summarizer request aborts the turn; nothing of the compaction is written", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(
          (request) => isSummarizerRequest(request) ? Model.hang("") : Model.text(`re ${lastUserWord(request)}`),
          { wrapModel: withoutUsage }
        )
        const { agent } = yield* h.create("cancelled", { options: compacting })
        yield* followups(agent, ["q1", "q2", "q3"])
        yield* agent.followup(long("q4", 80))
        const summarizer = yield* h.model.awaitRequest(4)
        assert.isTrue(isSummarizerRequest(summarizer))
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(compactions(log), [])
        assert.deepStrictEqual(turnEnds(log).at(-1), { kind: "aborted", cause: { kind: "user" } })
        assert.deepStrictEqual(logViolations(log), [])
        assert.strictEqual((yield* h.model.requests).length, 4)
      }))
  })

  describe("agent.compact between turns", () => {
    it.scoped("CMP-01 AGT-03 agent.compact compacts an idle agent: the event, Compacted without a turn, None when nothing is new", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(
          (request) =>
            isSummarizerRequest(request)
              ? Model.text(`summary of ${request.messages.length - 1}`)
              : Model.text(`re ${lastUserWord(request)}`)
        )
        const { agent } = yield* h.create("manual")
        yield* followups(agent, ["q1", "q2", "q3"])
        const live = yield* nextEvent(agent, tagged("Compacted"))
        const result = yield* agent.compact()
        const log = yield* agent.session.events
        const [event] = compactions(log)
        assert.isDefined(event)
        // the default policy keeps the last 2 closed turns
        const upTo = turnEndIndex(log, 1) + 1
        // the scripted model reports one input token per message and one output token per character
        const usage = { inputTokens: 3, outputTokens: "summary of 2".length }
        assert.deepStrictEqual(result, Option.some({ seq: event!.seq, upTo, summary: "summary of 2", usage }))
        assert.deepStrictEqual(event!.data, { upTo, summary: "summary of 2", usage })
        assert.strictEqual(event!.seq, log.length - 1)
        const announced = yield* live
        assert.deepStrictEqual([announced.seq, announced.turn, announced.step], [event!.seq, undefined, undefined])
        // maintenance: no turn, status stays idle
        assert.strictEqual(ofType(log, "turn/start").length, 3)
        assert.strictEqual(yield* agent.status, "idle")
        // the summarizer used the route and the default prompt
        const summarizer = (yield* h.model.requests).at(-1)!
        assert.deepStrictEqual(idsOf(summarizer), ["q1", "assistant:1:1", `compaction-prompt:${upTo}`])
        assert.strictEqual(Message.textOf(summarizer.messages.at(-1)!.content), Compaction.defaultPrompt)
        assert.deepStrictEqual([summarizer.provider, summarizer.model], [route.provider, route.model])
        // nothing new to fold now
        assert.deepStrictEqual(yield* agent.compact(), Option.none())
        // the next request carries the summary; keepLastTurns can be overridden per call
        yield* followups(agent, ["q4"])
        assert.deepStrictEqual(idsOf((yield* h.model.requests).at(-1)!), [
          `compacted:${event!.seq}`,
          "q2",
          "assistant:2:1",
          "q3",
          "assistant:3:1",
          "q4"
        ])
        const all = yield* agent.compact({ keepLastTurns: 0, prompt: "everything" })
        assert.isTrue(Option.isSome(all))
        assert.deepStrictEqual(idsOf((yield* h.model.requests).at(-1)!), [
          `compacted:${event!.seq}`,
          "q2",
          "assistant:2:1",
          "q3",
          "assistant:3:1",
          "q4",
          "assistant:4:1",
          `compaction-prompt:${(yield* agent.session.events).length - 1}`
        ])
        assert.deepStrictEqual(
          (yield* agent.session.messages).map((m) => m.id),
          [`compacted:${Option.getOrThrow(all).seq}`]
        )
      }))

    it.scoped("CMP-01 AGT-03 agent.compact: AgentBusy while running, AgentCanceled by cancel, InvalidAgentOptions and NO_ROUTE; nothing written", () =>
      Effect.gen(function*() {
        let hangSummaries = false
        const h = yield* makeHarness((request) =>
          isSummarizerRequest(request)
            ? hangSummaries ? Model.hang("") : Model.text("summary")
            : lastUserText(request) === "hang"
            ? Model.hang("")
            : Model.text(`re ${lastUserWord(request)}`)
        )
        const { agent } = yield* h.create("claims")
        yield* followups(agent, ["q1", "q2", "q3"])
        const before = (yield* agent.session.events).length

        const invalid = yield* Effect.flip(agent.compact({ keepLastTurns: -1 }))
        assert.strictEqual(invalid._tag, "InvalidAgentOptions")
        assert.strictEqual(invalid.message, "invalid agent options: keepLastTurns must be an integer >= 0, got -1")

        yield* agent.followup(msg("hang"))
        yield* h.model.awaitRequest(4)
        const busy = yield* Effect.flip(agent.compact())
        assert.strictEqual(busy._tag, "AgentBusy")
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        const afterCancel = (yield* agent.session.events).length

        hangSummaries = true
        const compacting = yield* Effect.fork(agent.compact())
        yield* h.model.awaitRequest(5)
        yield* agent.cancel({ kind: "user" })
        const canceled = yield* Effect.flip(compacting.await.pipe(Effect.flatten))
        assert.strictEqual(canceled._tag, "AgentCanceled")
        const log = yield* agent.session.events
        assert.strictEqual(log.length, afterCancel)
        assert.deepStrictEqual(compactions(log), [])
        assert.isAbove(afterCancel, before)

        // an agent without a route cannot summarise (a created agent takes its route from its options only)
        const seeded = yield* h.registry.create({ sessionId: "no-route", seed: log })
        const noRoute = yield* Effect.flip(seeded.agent.compact())
        assert.strictEqual(noRoute._tag, "ModelError")
        if (noRoute._tag === "ModelError") assert.strictEqual(noRoute.code, "NO_ROUTE")
        assert.strictEqual((yield* seeded.agent.session.events).length, afterCancel)
      }))
  })

  describe("fork, resume and repair honour it (FORK-01, RES)", () => {
    it.scoped("CMP-01 FORK-01 a fork before the compaction has the whole history; one after has the summary and the kept turns", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(summarizingScript())
        const parent = (yield* h.create("parent")).agent
        yield* followups(parent, ["q1", "q2", "q3"])
        const compacted = Option.getOrThrow(yield* parent.compact({ keepLastTurns: 1 }))
        const parentLog = yield* parent.session.events

        // a fork inherits no options: each child is given the route
        const before = (yield* parent.fork({ childId: "before", upTo: compacted.seq, options: route })).agent
        const after = (yield* parent.fork({ childId: "after", options: route })).agent
        assert.deepStrictEqual(yield* before.session.events, parentLog.slice(0, compacted.seq))
        assert.deepStrictEqual(yield* after.session.events, parentLog)
        assert.deepStrictEqual(
          (yield* before.session.messages).map((m) => m.id),
          ["q1", "assistant:1:1", "q2", "assistant:2:1", "q3", "assistant:3:1"]
        )
        assert.deepStrictEqual(yield* after.session.messages, yield* parent.session.messages)
        assert.deepStrictEqual(
          (yield* after.session.messages).map((m) => m.id),
          [`compacted:${compacted.seq}`, "q3", "assistant:3:1"]
        )

        // each child's next request carries its own history
        yield* before.followup(msg("b1"))
        yield* before.whenIdle
        const beforeRequest = (yield* h.model.requests).at(-1)!
        assert.deepStrictEqual(idsOf(beforeRequest).slice(0, 2), ["q1", "assistant:1:1"])
        yield* after.followup(msg("a1"))
        yield* after.whenIdle
        const afterRequest = (yield* h.model.requests).at(-1)!
        assert.deepStrictEqual(idsOf(afterRequest), [`compacted:${compacted.seq}`, "q3", "assistant:3:1", "a1"])
        // the child compacts on its own from there, folding the inherited summary
        const childCompaction = Option.getOrThrow(yield* after.compact({ keepLastTurns: 0 }))
        assert.deepStrictEqual(idsOf((yield* h.model.requests).at(-1)!), [
          `compacted:${compacted.seq}`,
          "q3",
          "assistant:3:1",
          "a1",
          "assistant:4:1",
          `compaction-prompt:${childCompaction.upTo}`
        ])
        // the parent is untouched
        assert.deepStrictEqual(yield* parent.session.events, parentLog)
      }))

    it.scoped("CMP-01 RES-07 a resumed compacted session derives the same history and its next request carries the summary", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(summarizingScript(), { wrapModel: withoutUsage })
        const first = yield* h.create("resumed", { options: compacting })
        yield* followups(first.agent, ["q1", "q2", "q3", "q4"])
        const messages = yield* first.agent.session.messages
        const [event] = compactions(yield* first.agent.session.events)
        assert.isDefined(event)
        yield* first.dispose
        const resumed = yield* h.registry.resume({ sessionId: "resumed", options: { ...route, ...compacting } })
        assert.deepStrictEqual(yield* resumed.agent.session.messages, messages)
        yield* followups(resumed.agent, ["q5"])
        const request = (yield* h.model.requests).filter((r) => !isSummarizerRequest(r)).at(-1)!
        assert.strictEqual(request.messages[0]!.id.startsWith("compacted:"), true)
        assert.strictEqual(lastUserText(request).startsWith("q5"), true)
      }))

    it.scoped("CMP-01 DUR-00 a version-1 session file gets the version-2 event appended, and reads back", () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-cmp-v1-" })
        const model = yield* Model.scripted(summarizingScript())
        const layer = NodeFileSessionPersistence.layerRuntime({ directory, durability: "buffered" }).pipe(
          Layer.provide(model.layer)
        )
        const turns = (n: number): ReadonlyArray<Record<string, unknown>> => [
          { type: "turn/start", data: { turn: n } },
          { type: "step/start", data: { turn: n, step: 1 } },
          { type: "user/message", data: { turn: n, step: 1, message: Message.user(`q${n}`, { id: `q${n}` }) } },
          {
            type: "assistant/message",
            data: {
              turn: n,
              step: 1,
              message: {
                id: `a${n}`,
                role: "assistant",
                content: [{ type: "text", text: `a${n}` }],
                source: { kind: "model", provider: "scripted", model: "test" }
              },
              finish: "stop"
            }
          },
          { type: "step/end", data: { turn: n, step: 1 } },
          { type: "turn/end", data: { turn: n, reason: { kind: "completed" } } }
        ]
        const events = [...turns(1), ...turns(2), ...turns(3)].map((e, seq) => ({ seq, time: 0, ...e }))
        const header = { format: "effect-agent/session", version: 1, id: "v1", createdAt: 0, seedLength: 0, meta: {} }
        const lines = [header, ...events].map((record) => JSON.stringify(record) + "\n")
        yield* fs.writeFileString(`${directory}/v1.jsonl`, lines.join(""))
        const runtime = yield* runtimeOf(layer)
        const compacted = yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const { agent, dispose } = yield* registry.resume({ sessionId: "v1", options: route })
          const result = yield* agent.compact()
          yield* dispose
          return result
        }).pipe(Effect.provide(runtime.context), Effect.scoped)
        assert.deepStrictEqual(Option.map(compacted, (c) => c.upTo), Option.some(6))
        const reread = yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const { agent, dispose } = yield* registry.resume({ sessionId: "v1", options: route })
          const ids = (yield* agent.session.messages).map((m): string => m.id)
          const result = [agent.session.header.version, ids] as const
          yield* dispose
          return result
        }).pipe(Effect.provide(runtime.context), Effect.scoped)
        assert.deepStrictEqual(reread, [1, [`compacted:18`, "q2", "a2", "q3", "a3"]])
        yield* runtime.close
      }).pipe(Effect.provide(NodeContext.layer)))
  })
})
