/**
 * HIL-03: questions from tools (`Tool.ask`, `agent.respond`, `agent.decline`) over the real runtime
 * with the scripted model and memory persistence; timeouts on the TestClock; replay of a call's
 * logged questions over a real session (`driver/questions.ts`).
 */
import { assert, describe, it } from "@effect/vitest"
import type { Duration, Scope } from "effect"
import { Effect, Exit, Fiber, Option, Schema, Stream, TestClock } from "effect"
import type { Agent } from "../src/Agent.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import type { AgentEvent } from "../src/AgentEvent.js"
import * as Model from "../src/Model.js"
import * as Session from "../src/Session.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as Tool from "../src/Tool.js"
import { askHash } from "../src/internal/agent/ask.js"
import { CurrentCall } from "../src/internal/agent/ask.js"
import * as questions from "../src/internal/agent/driver/questions.js"
import { core } from "../src/internal/log/session.js"
import { memoryRuntime, route } from "./fixtures/runtime.js"

const Answer = Schema.Struct({ size: Schema.Int })

/** A tool that asks one question and returns the answer (or how the ask failed) as its text. */
const sizeTool = (options?: { readonly askTimeout?: Duration.DurationInput; readonly timeout?: Duration.DurationInput }) =>
  Tool.make({
    name: "size",
    description: "Asks a person for a size",
    parameters: Schema.Struct({}),
    timeout: options?.timeout,
    run: () =>
      Tool.ask({ question: "How big?", schema: Answer, timeout: options?.askTimeout }).pipe(
        Effect.map((answer) => Tool.text(`size ${answer.size}`)),
        Effect.catchTags({
          QuestionDeclined: (e) => Effect.succeed(Tool.text(`declined ${e.reason ?? "-"}`)),
          QuestionTimedOut: () => Effect.succeed(Tool.text("timed out"))
        })
      )
  })

const script = [Model.toolCall("c1", "size", "{}"), Model.text("done")]

type Requested = Extract<AgentEvent, { readonly _tag: "InputRequested" }>

/** Starts a turn with the tool and waits for its question (listening before the send). */
const askedOf = (agent: Agent) =>
  Effect.gen(function*() {
    const events = yield* agent.subscribe
    const first = yield* Effect.fork(Stream.runHead(Stream.filter(events, (e): e is Requested => e._tag === "InputRequested")))
    const run = yield* Effect.fork(agent.run("go"))
    const requested = Option.getOrThrow(yield* Fiber.join(first))
    return { requested, run }
  })

const typesOf = (events: ReadonlyArray<SessionEvent>) => events.map((e) => e.type)

const dataOf = (events: ReadonlyArray<SessionEvent>, type: string) =>
  events.filter((e) => e.type === type).map((e) => e.data as Record<string, unknown>)

const resultText = (events: ReadonlyArray<SessionEvent>) => {
  const data = dataOf(events, "tool/result")[0] as { readonly message: { readonly content: ReadonlyArray<{ readonly text: string }> } }
  return data.message.content.map((part) => part.text).join("")
}

const withAgent = <A, E>(
  tool: Tool.Tool<any, any, never>,
  body: (agent: Agent) => Effect.Effect<A, E, AgentRegistry | Scope.Scope>,
  steps: Parameters<typeof Model.scripted>[0] = script
) =>
  Effect.gen(function*() {
    const { context } = yield* memoryRuntime(steps)
    return yield* Effect.gen(function*() {
      const registry = yield* AgentRegistry
      const { agent } = yield* registry.create({ sessionId: "asker", options: route, setup: (s) => s.tools.register(tool) })
      return yield* body(agent)
    }).pipe(Effect.provide(context))
  })

describe("HIL-03 questions from tools", () => {
  it.scoped("HIL-03 ask/respond round trip: the question is durable, the answer decoded with the tool's Schema, then the result", () =>
    withAgent(sizeTool(), (agent) =>
      Effect.gen(function*() {
        const events = yield* agent.subscribe
        const provided = yield* Effect.fork(
          Stream.runHead(Stream.filter(events, (e) => e._tag === "InputProvided"))
        )
        const { requested, run } = yield* askedOf(agent)
        assert.strictEqual(requested.question, "How big?")
        assert.strictEqual(requested.callId, "c1")
        assert.match(requested.requestId, /^[A-Za-z0-9._~-]{1,128}$/)
        assert.deepStrictEqual(requested.jsonSchema.required, ["size"])
        const logged = yield* agent.session.events
        assert.strictEqual(logged.find((e) => e.seq === requested.seq)?.type, "tool/input-requested")
        const decision = yield* agent.respond(requested.requestId, { size: 3 })
        assert.deepStrictEqual(decision, { duplicate: false })
        const result = yield* Fiber.join(run)
        assert.strictEqual(result.text, "done")
        const all = yield* agent.session.events
        const types = typesOf(all)
        assert.isTrue(types.indexOf("tool/call") < types.indexOf("tool/input-requested"))
        assert.isTrue(types.indexOf("tool/input-requested") < types.indexOf("tool/input-provided"))
        assert.isTrue(types.indexOf("tool/input-provided") < types.indexOf("tool/result"))
        assert.deepStrictEqual(dataOf(all, "tool/input-provided"), [{
          turn: 1,
          step: 1,
          callId: "c1",
          requestId: requested.requestId,
          outcome: "provided",
          value: { size: 3 }
        }])
        assert.strictEqual(resultText(all), "size 3")
        const live = Option.getOrThrow(yield* Fiber.join(provided))
        assert.strictEqual(live._tag, "InputProvided")
        if (live._tag === "InputProvided") {
          assert.strictEqual(all.find((e) => e.seq === live.seq)?.type, "tool/input-provided")
          assert.strictEqual(live.outcome, "provided")
        }
      })))

  it.scoped("HIL-03 an answer the Schema refuses fails InvalidResponse and writes nothing; the question stays pending", () =>
    withAgent(sizeTool(), (agent) =>
      Effect.gen(function*() {
        const { requested, run } = yield* askedOf(agent)
        const before = (yield* agent.session.events).length
        const refused = yield* Effect.flip(agent.respond(requested.requestId, { size: "big" }))
        assert.strictEqual(refused._tag, "InvalidResponse")
        assert.include(refused.message, "size")
        const notJson = yield* Effect.flip(agent.respond(requested.requestId, { size: 1n }))
        assert.strictEqual(notJson._tag, "InvalidResponse")
        assert.strictEqual((yield* agent.session.events).length, before)
        assert.deepStrictEqual(yield* agent.respond(requested.requestId, { size: 5 }), { duplicate: false })
        yield* Fiber.join(run)
        assert.strictEqual(resultText(yield* agent.session.events), "size 5")
      })))

  it.scoped("HIL-03 idempotent answers: the same again is a duplicate, another fails InputAlreadyProvided, an unknown id InputNotFound — none writes", () =>
    withAgent(sizeTool(), (agent) =>
      Effect.gen(function*() {
        const { requested, run } = yield* askedOf(agent)
        yield* agent.respond(requested.requestId, { size: 2 })
        yield* Fiber.join(run)
        const length = (yield* agent.session.events).length
        assert.deepStrictEqual(yield* agent.respond(requested.requestId, { size: 2 }), { duplicate: true })
        const other = yield* Effect.flip(agent.respond(requested.requestId, { size: 4 }))
        assert.strictEqual(other._tag, "InputAlreadyProvided")
        if (other._tag === "InputAlreadyProvided") assert.strictEqual(other.outcome, "provided")
        const declined = yield* Effect.flip(agent.decline(requested.requestId))
        assert.strictEqual(declined._tag, "InputAlreadyProvided")
        const unknown = yield* Effect.flip(agent.respond("q-nothing", 1))
        assert.strictEqual(unknown._tag, "InputNotFound")
        assert.strictEqual((yield* agent.session.events).length, length)
      })))

  it.scoped("HIL-03 decline: ask fails QuestionDeclined with the reason; declining again is a duplicate", () =>
    withAgent(sizeTool(), (agent) =>
      Effect.gen(function*() {
        const { requested, run } = yield* askedOf(agent)
        assert.deepStrictEqual(yield* agent.decline(requested.requestId, { reason: "not now" }), { duplicate: false })
        yield* Fiber.join(run)
        const all = yield* agent.session.events
        assert.strictEqual(resultText(all), "declined not now")
        assert.strictEqual(dataOf(all, "tool/input-provided")[0]!.outcome, "declined")
        assert.deepStrictEqual(yield* agent.decline(requested.requestId), { duplicate: true })
        const answered = yield* Effect.flip(agent.respond(requested.requestId, { size: 1 }))
        assert.strictEqual(answered._tag, "InputAlreadyProvided")
      })))

  it.scoped("HIL-03 a question's timeout on the TestClock: settled timeout at the logged deadline, ask fails QuestionTimedOut", () =>
    withAgent(sizeTool({ askTimeout: "1 minute" }), (agent) =>
      Effect.gen(function*() {
        const { requested, run } = yield* askedOf(agent)
        assert.strictEqual(requested.deadline, 60_000)
        assert.strictEqual(dataOf(yield* agent.session.events, "tool/input-requested")[0]!.deadline, 60_000)
        yield* TestClock.adjust("59 seconds")
        assert.strictEqual(dataOf(yield* agent.session.events, "tool/input-provided").length, 0)
        yield* TestClock.adjust("1 second")
        yield* Fiber.join(run)
        const all = yield* agent.session.events
        assert.strictEqual(dataOf(all, "tool/input-provided")[0]!.outcome, "timeout")
        assert.strictEqual(resultText(all), "timed out")
        const late = yield* Effect.flip(agent.respond(requested.requestId, { size: 1 }))
        assert.strictEqual(late._tag, "InputAlreadyProvided")
      })))

  it.scoped("HIL-03 a tool's timeout excludes the time it waits in ask", () =>
    withAgent(sizeTool({ timeout: "10 seconds" }), (agent) =>
      Effect.gen(function*() {
        const { requested, run } = yield* askedOf(agent)
        yield* TestClock.adjust("1 hour")
        yield* agent.respond(requested.requestId, { size: 7 })
        yield* Fiber.join(run)
        const all = yield* agent.session.events
        assert.strictEqual(resultText(all), "size 7")
        assert.isUndefined(dataOf(all, "tool/result")[0]!.error)
      })))

  it.scoped("HIL-03 cancel settles a pending question canceled in the turn's closing batch; a later answer fails", () =>
    withAgent(sizeTool(), (agent) =>
      Effect.gen(function*() {
        const { requested, run } = yield* askedOf(agent)
        yield* agent.cancel({ kind: "user" })
        const exit = yield* Fiber.await(run)
        assert.isTrue(Exit.isFailure(exit))
        const all = yield* agent.session.events
        const types = typesOf(all)
        assert.strictEqual(dataOf(all, "tool/input-provided")[0]!.outcome, "canceled")
        assert.isTrue(types.indexOf("tool/input-provided") < types.indexOf("tool/result"))
        assert.deepStrictEqual(dataOf(all, "turn/end")[0]!.reason, { kind: "aborted", cause: { kind: "user" } })
        const late = yield* Effect.flip(agent.respond(requested.requestId, { size: 1 }))
        assert.strictEqual(late._tag, "InputAlreadyProvided")
        if (late._tag === "InputAlreadyProvided") assert.strictEqual(late.outcome, "canceled")
      })))

  it.effect("HIL-03 Tool.ask outside a tool call fails AskUnavailable", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Tool.ask({ question: "anyone?", schema: Schema.String }))
      assert.strictEqual(error._tag, "AskUnavailable")
      assert.include(error.message, "inside a tool's run")
    }))
})

/** A question host over a real session: what a driver gives its calls' channels. */
const hostOver = (session: Session.Session) => {
  const emitted: Array<AgentEvent> = []
  const host: questions.QuestionHost = {
    sessionCore: core(session),
    deps: { id: session.id, emit: (event) => Effect.sync(() => void emitted.push(event)) },
    questions: undefined
  }
  return { host, emitted }
}

const openStep = [
  { type: "turn/start", data: { turn: 1 } },
  { type: "step/start", data: { turn: 1, step: 1 } },
  { type: "tool/call", data: { turn: 1, step: 1, callId: "c1", name: "size", arguments: "{}" } }
] as const

const Color = Schema.Literal("red", "blue")

/** A tool body that asks two questions and reports the answers (and how often it ran). */
const twoAsks = (runs: { count: number }) =>
  Effect.gen(function*() {
    runs.count++
    const size = yield* Tool.ask({ question: "How big?", schema: Answer })
    const color = yield* Tool.ask({ question: "Which color?", schema: Color })
    return `${size.size} ${color}`
  })

describe("HIL-03 replay of a call's logged questions", () => {
  it.scoped("HIL-03 a call run again returns its logged answers at once, in order, and waits for its pending one without asking again", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "replayed" })
      const { emitted, host } = hostOver(session)
      const sessionCore = core(session)
      yield* sessionCore.appendCore(openStep)
      // the first run asked both questions; the first was answered before the process ended
      const first = questions.makeChannel(host, 1, 1, "c1", [])
      const runs = { count: 0 }
      const original = yield* Effect.fork(Effect.provideService(twoAsks(runs), CurrentCall, first))
      const firstId = yield* waitForQuestion(host, 1)
      yield* questions.answerWith(host, firstId, { kind: "respond", value: { size: 9 } }, () => undefined)
      yield* waitForQuestion(host, 2)
      yield* Fiber.interrupt(original)
      const requestedBefore = dataOf(yield* session.events, "tool/input-requested").length
      assert.strictEqual(requestedBefore, 2)
      // the run again: given the logged questions, nothing is asked twice
      const replay = questions.loggedQuestions(yield* session.events, "c1")
      assert.deepStrictEqual(replay.map((q) => q.settled?.outcome), ["provided", undefined])
      const fresh = hostOver(session)
      const again = questions.makeChannel(fresh.host, 1, 1, "c1", replay)
      const rerun = yield* Effect.fork(Effect.provideService(twoAsks(runs), CurrentCall, again))
      // `respond` to the pending question waits for the replay to reach its ask, then decodes with the live Schema
      const refused = yield* Effect.flip(
        questions.answerWith(fresh.host, replay[1]!.requestId, { kind: "respond", value: "green" }, () => undefined)
      )
      assert.strictEqual(refused._tag, "InvalidResponse")
      yield* questions.answerWith(fresh.host, replay[1]!.requestId, { kind: "respond", value: "blue" }, () => undefined)
      assert.strictEqual(yield* Fiber.join(rerun), "9 blue")
      // the tool's work before its asks ran twice (what a tool before an ask must tolerate)
      assert.strictEqual(runs.count, 2)
      const events = yield* session.events
      assert.strictEqual(dataOf(events, "tool/input-requested").length, 2)
      assert.deepStrictEqual(dataOf(events, "tool/input-provided").map((d) => d.value), [{ size: 9 }, "blue"])
      assert.isFalse(fresh.emitted.some((e) => e._tag === "InputRequested"))
      assert.strictEqual(emitted.filter((e) => e._tag === "InputRequested").length, 2)
    }))

  it.scoped("HIL-03 a replayed ask whose question or schema changed ends the call ASK_REPLAY_MISMATCH and asks nothing", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "mismatch" })
      const { host } = hostOver(session)
      yield* core(session).appendCore(openStep)
      const first = questions.makeChannel(host, 1, 1, "c1", [])
      const original = yield* Effect.fork(
        Effect.provideService(Tool.ask({ question: "How big?", schema: Answer }), CurrentCall, first)
      )
      const id = yield* waitForQuestion(host, 1)
      yield* questions.answerWith(host, id, { kind: "respond", value: { size: 1 } }, () => undefined)
      yield* Fiber.join(original)
      const replay = questions.loggedQuestions(yield* session.events, "c1")
      const changedAsks: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
        Tool.ask({ question: "How large?", schema: Answer }),
        Tool.ask({ question: "How big?", schema: Color })
      ]
      for (const changed of changedAsks) {
        const channel = questions.makeChannel(hostOver(session).host, 1, 1, "c1", replay)
        const exit = yield* Effect.exit(Effect.provideService(changed, CurrentCall, channel))
        assert.isTrue(Exit.isInterrupted(exit))
        assert.strictEqual(channel.abort?.code, "ASK_REPLAY_MISMATCH")
      }
      assert.strictEqual(dataOf(yield* session.events, "tool/input-requested").length, 1)
      assert.notStrictEqual(askHash("How big?", { type: "string" }), askHash("How big?", { type: "number" }))
      assert.strictEqual(askHash("q", { a: 1, b: 2 }), askHash("q", { b: 2, a: 1 }))
    }))

  it.scoped("HIL-03 a replayed question keeps its logged deadline: one already past is settled timeout at once", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "deadline" })
      const { host } = hostOver(session)
      yield* core(session).appendCore(openStep)
      const first = questions.makeChannel(host, 1, 1, "c1", [])
      const original = yield* Effect.fork(Effect.provideService(
        Tool.ask({ question: "How big?", schema: Answer, timeout: "1 minute" }),
        CurrentCall,
        first
      ))
      yield* waitForQuestion(host, 1)
      yield* Fiber.interrupt(original)
      yield* TestClock.adjust("2 minutes")
      const replay = questions.loggedQuestions(yield* session.events, "c1")
      const channel = questions.makeChannel(hostOver(session).host, 1, 1, "c1", replay)
      const error = yield* Effect.flip(Effect.provideService(
        Tool.ask({ question: "How big?", schema: Answer, timeout: "1 minute" }),
        CurrentCall,
        channel
      ))
      assert.strictEqual(error._tag, "QuestionTimedOut")
      const events = yield* session.events
      assert.strictEqual(dataOf(events, "tool/input-requested").length, 1)
      assert.strictEqual(dataOf(events, "tool/input-provided")[0]!.outcome, "timeout")
    }))
})

/** Waits (yielding, no sleep) until the session logged `count` questions; the id of the last. */
const waitForQuestion = (host: questions.QuestionHost, count: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 10_000; i++) {
      const asked = host.sessionCore.log().filter((e) => e.type === "tool/input-requested")
      if (asked.length >= count && host.questions?.live.has((asked[count - 1]!.data as { requestId: string }).requestId)) {
        return (asked[count - 1]!.data as { requestId: string }).requestId
      }
      yield* Effect.yieldNow()
    }
    return yield* Effect.dieMessage("the question was never asked")
  })
