/**
 * The turn/step loop (SPEC §8.1): turn numbering, the step proposal, continuation and stopping,
 * failures, tools (TOOL-01..03), loop hooks, the initiator the loop's work sees (INIT-07) and the
 * rebuild of every model request from the log alone (REQ-03).
 */
import { assert, describe, it } from "@effect/vitest"
import { Data, Deferred, Effect, Either, Exit, FiberRef, Option, Ref, Schema, Scope, Stream } from "effect"
import type { AgentSetup } from "../src/Agent.js"
import * as AgentRegistry from "../src/AgentRegistry.js"
import * as Message from "../src/Message.js"
import type { UserMessage } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Session from "../src/Session.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as Tool from "../src/Tool.js"
import {
  logViolations,
  makeHarness,
  msg,
  ofType,
  recordEvents,
  requestTexts,
  statusesOf,
  stepsOf,
  turnEnds,
  typesOf,
  userTexts
} from "./fixtures/driverHarness.js"

const enter = (messages: ReadonlyArray<UserMessage>): Tool.PreStepDecision => ({ kind: "enter", messages })

const noParams = Schema.Struct({})

/** A tool answering with fixed text. */
const fixed = (
  name: string,
  text: string,
  options?: { readonly mode?: "parallel" | "exclusive"; readonly description?: string }
) =>
  Tool.make({
    name,
    description: options?.description ?? `answers ${text}`,
    parameters: noParams,
    ...(options?.mode !== undefined ? { mode: options.mode } : {}),
    run: () => Effect.succeed(Tool.text(text))
  })

const resultsOf = (events: ReadonlyArray<SessionEvent>) =>
  ofType(events, "tool/result").map((event) => ({
    callId: event.data.message.toolCallId,
    text: Message.textOf(event.data.message.content),
    isError: event.data.message.isError,
    error: event.data.error
  }))

class Nope extends Data.TaggedError("Nope")<{ readonly reason: string }> {}

describe("loop", () => {
  // -----------------------------------------------------------------------------------------------
  describe("turns and steps", () => {
    it.scoped("TURN-01 turn = lastTurn + 1 counting the seed; steps restart at 1 per turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "echo", "{}"), Model.text("done"), Model.text("again")])
        const seed: ReadonlyArray<SessionEvent> = [
          { seq: 0, time: 0, type: "turn/start", data: { turn: 1 } },
          { seq: 1, time: 0, type: "turn/end", data: { turn: 1, reason: { kind: "completed" } } },
          { seq: 2, time: 0, type: "turn/start", data: { turn: 2 } },
          { seq: 3, time: 0, type: "turn/end", data: { turn: 2, reason: { kind: "completed" } } }
        ]
        const observed: Array<readonly [number, number]> = []
        const { agent } = yield* h.create("seeded", {
          seed,
          setup: (a) =>
            Effect.all([
              a.tools.register(fixed("echo", "pong")),
              a.hooks.preStep((info) =>
                Effect.sync(() => observed.push([info.turn, info.step])).pipe(Effect.as(enter(info.messages)))
              )
            ], { discard: true })
        })
        yield* agent.followup(msg("first"))
        yield* agent.whenIdle
        yield* agent.followup(msg("second"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(ofType(log, "turn/start").map((e) => e.data.turn), [1, 2, 3, 4])
        assert.deepStrictEqual(stepsOf(log), [[3, 1], [3, 2], [4, 1]])
        assert.deepStrictEqual(observed, [[3, 1], [3, 2], [4, 1]])
        assert.deepStrictEqual(logViolations(log), [])
      }))

    it.scoped("TURN-03 the step proposal: peek → preStep → claim+step/start+user/message → request hooks → request/config → model → assistant → tools", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "echo", "{}"), Model.text("done")])
        const trace: Array<string> = []
        const { agent } = yield* h.create("proposal", {
          setup: (a) =>
            Effect.all([
              a.tools.register(Tool.make({
                name: "echo",
                description: "echoes",
                parameters: noParams,
                run: (_, ctx) =>
                  Effect.gen(function*() {
                    trace.push(`tool ${ctx.turn}.${ctx.step}:${typesOf(yield* ctx.agent.session.events).at(-1)}`)
                    return Tool.text("pong")
                  })
              })),
              a.hooks.preStep((info) =>
                Effect.gen(function*() {
                  const log = yield* info.agent.session.events
                  const pending = (yield* info.agent.inbox.nextTurn).map((m) => m.id)
                  const peeked = info.messages.map((m) => m.id)
                  trace.push(`preStep ${info.step}:${typesOf(log).at(-1)}:[${peeked}]:pending[${pending}]`)
                  return enter(info.messages)
                })
              ),
              a.hooks.request((info) =>
                Effect.gen(function*() {
                  trace.push(`request ${info.step}:${typesOf(yield* info.agent.session.events).at(-1)}`)
                  return info.route
                })
              )
            ], { discard: true })
        })
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        assert.deepStrictEqual(trace, [
          "preStep 1:turn/start:[go]:pending[go]",
          "request 1:user/message",
          "tool 1.1:tool/call",
          "preStep 2:step/end:[]:pending[]",
          "request 2:step/start"
        ])
        assert.deepStrictEqual(typesOf(yield* agent.session.events), [
          "agent/inbox/spliced",
          "turn/start",
          "agent/inbox/spliced",
          "step/start",
          "user/message",
          "request/config",
          "assistant/message",
          "tool/call",
          "tool/result",
          "step/end",
          "step/start",
          "assistant/message",
          "step/end",
          "turn/end"
        ])
      }))

    it.scoped("TURN-04 tool calls → results, then another step whose request carries the result", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([[Model.text("checking"), Model.toolCall("c1", "echo", "{}")], Model.text("done")])
        const { agent } = yield* h.create("tool-step", { setup: (a) => a.tools.register(fixed("echo", "pong")) })
        yield* agent.followup(msg("ping"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.deepStrictEqual(stepsOf(log), [[1, 1], [1, 2]])
        const messages = ofType(log, "assistant/message")
        assert.deepStrictEqual(messages.map((e) => e.data.finish), ["tool-calls", "stop"])
        assert.deepStrictEqual(requestTexts(yield* h.model.awaitRequest(2)), [
          "user:ping",
          "assistant:checking[c1]",
          "tool:c1:pong"
        ])
      }))

    it.scoped("TURN-05 max-tokens ends the turn max-tokens; a turnStopping steer continues it with another step", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          Model.maxTokens("truncated"),
          Model.maxTokens("first half"),
          Model.text("second half")
        ])
        let steerOnce = false
        const { agent } = yield* h.create("max-tokens", {
          setup: (a) =>
            a.hooks.turnStopping((info) =>
              steerOnce
                ? Effect.sync(() => {
                  steerOnce = false
                }).pipe(Effect.zipRight(Effect.orDie(info.agent.steer(msg("continue", "continue after truncation")))))
                : Effect.void
            )
        })
        yield* agent.followup(msg("one"))
        yield* agent.whenIdle
        let log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "max-tokens" }])
        assert.deepStrictEqual(ofType(log, "assistant/message").map((e) => e.data.finish), ["max-tokens"])
        steerOnce = true
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.strictEqual(turnEnds(log).length, 2)
        assert.deepStrictEqual(stepsOf(log).filter(([turn]) => turn === 2), [[2, 1], [2, 2]])
        assert.deepStrictEqual(requestTexts(yield* h.model.awaitRequest(3)).slice(-3), [
          "user:go",
          "assistant:first half",
          "user:continue after truncation"
        ])
      }))

    it.scoped("TURN-05 turnStopping hooks may steer to continue: three steps, three requests, one turn", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("a"), Model.text("b"), Model.text("c")])
        let steps = 0
        const { agent } = yield* h.create("stopping", {
          setup: (a) =>
            a.hooks.turnStopping((info) =>
              ++steps < 3 ? Effect.orDie(info.agent.steer(msg(`more-${steps}`))) : Effect.void
            )
        })
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.deepStrictEqual(stepsOf(log), [[1, 1], [1, 2], [1, 3]])
        assert.deepStrictEqual(userTexts(log), ["go", "more-1", "more-2"])
        assert.strictEqual((yield* h.model.requests).length, 3)
      }))

    it.scoped("TURN-05 TOOL-06 a max-tokens finish never dispatches tools; its tool-call parts are dropped", () =>
      Effect.gen(function*() {
        let runs = 0
        const h = yield* makeHarness([[Model.text("cut"), Model.toolCall("c1", "count", "{}")]], {
          wrapModel: (model) => ({
            stream: (request) =>
              model.stream(request).pipe(
                Stream.map((chunk) => chunk._tag === "Finish" ? { ...chunk, reason: "max-tokens" as const } : chunk)
              )
          })
        })
        const count = Tool.make({
          name: "count",
          description: "counts",
          parameters: noParams,
          run: () => Effect.sync(() => runs++).pipe(Effect.as(Tool.text("n")))
        })
        const { agent } = yield* h.create("max-tokens-tools", { setup: (a) => a.tools.register(count) })
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.strictEqual(runs, 0)
        assert.deepStrictEqual(ofType(log, "tool/call"), [])
        assert.deepStrictEqual(ofType(log, "assistant/message").map((e) => e.data.message.content), [
          [{ type: "text", text: "cut" }]
        ])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "max-tokens" }])
      }))

    it.scoped("TURN-05 maxStepsPerTurn bounds a runaway tool loop: the turn ends max-steps", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness((_, n) => Model.toolCall(`c${n}`, "echo", "{}"))
        const { agent } = yield* h.create("runaway", {
          options: { maxStepsPerTurn: 2 },
          setup: (a) => a.tools.register(fixed("echo", "again"))
        })
        yield* agent.followup(msg("loop"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "max-steps" }])
        assert.deepStrictEqual(stepsOf(log), [[1, 1], [1, 2]])
        assert.strictEqual((yield* h.model.requests).length, 2)
        assert.deepStrictEqual(logViolations(log), [])
      }))

    it.scoped("TURN-06 a model failure ends the turn error with an AgentError event; the agent is idle and usable", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.fail("AUTH"), Model.text("fine")])
        const handle = yield* h.create("model-fails")
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("one"))
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.status, "idle")
        let log = yield* agent.session.events
        const [reason] = turnEnds(log)
        assert.strictEqual(reason?.kind, "error")
        if (reason?.kind === "error") {
          assert.strictEqual(reason.error.code, "AUTH")
          assert.match(reason.error.message, /AUTH/)
        }
        assert.deepStrictEqual(ofType(log, "assistant/message"), [])
        assert.deepStrictEqual(typesOf(log).slice(-2), ["step/end", "turn/end"])
        yield* agent.followup(msg("two"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["error", "completed"])
        yield* handle.dispose
        const all = yield* events
        const errors = all.flatMap((e) => e._tag === "AgentError" ? [[e.turn, e.error.code]] : [])
        assert.deepStrictEqual(errors, [[1, "AUTH"]])
        assert.deepStrictEqual(statusesOf(all), ["running", "idle", "running", "idle"])
      }))

    it.scoped("TURN-06 a stream that fails or dies after some text writes no assistant message; the turn ends error", () =>
      Effect.gen(function*() {
        const script = { failing: [[Model.text("partial"), Model.fail("OVERLOADED")]], dying: [Model.text("partial")] }
        const h = yield* makeHarness(script, {
          wrapModel: (model) => ({
            stream: (request) =>
              request.sessionId === "dying"
                ? model.stream(request).pipe(
                  Stream.filter((chunk) => chunk._tag !== "Finish"),
                  Stream.concat(Stream.dieMessage("adapter bug"))
                )
                : model.stream(request)
          })
        })
        for (const [id, code] of [["failing", "OVERLOADED"], ["dying", "DEFECT"]] as const) {
          const { agent } = yield* h.create(id)
          yield* agent.followup(msg("go"))
          yield* agent.whenIdle
          const log = yield* agent.session.events
          assert.deepStrictEqual(ofType(log, "assistant/message"), [], id)
          const [reason] = turnEnds(log)
          assert.isTrue(reason?.kind === "error" && reason.error.code === code, id)
          assert.deepStrictEqual(logViolations(log), [], id)
          assert.strictEqual(yield* agent.status, "idle")
        }
      }))

    it.scoped("TURN-06 requestError 'retry' retries within the step; the assistant message is the last attempt's", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          [Model.text("lost"), Model.fail("RATE_LIMIT")],
          Model.fail("UNAVAILABLE"),
          Model.text("ok")
        ])
        const seen: Array<string> = []
        const handle = yield* h.create("retry", {
          setup: (a) =>
            a.hooks.requestError((info) =>
              Effect.sync(() => seen.push(`${info.turn}.${info.step}:${info.error.code}:${info.attempt}`)).pipe(
                Effect.as("retry" as const)
              )
            )
        })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        assert.deepStrictEqual(seen, ["1.1:RATE_LIMIT:1", "1.1:UNAVAILABLE:2"])
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.deepStrictEqual(stepsOf(log), [[1, 1]])
        assert.deepStrictEqual(ofType(log, "assistant/message").map((e) => e.data.message.content), [
          [{ type: "text", text: "ok" }]
        ])
        assert.strictEqual((yield* h.model.requests).length, 3)
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle"])
      }))

    it.scoped("TURN-06 requestError retries are capped by maxRequestRetries; without a hook a failure is final", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness({
          capped: [Model.fail("A"), Model.fail("B"), Model.text("never")],
          plain: [Model.fail("C")]
        })
        const seen: Array<number> = []
        const capped = yield* h.create("capped", {
          options: { maxRequestRetries: 1 },
          setup: (a) =>
            a.hooks.requestError((info) => Effect.sync(() => seen.push(info.attempt)).pipe(Effect.as("retry" as const)))
        })
        yield* capped.agent.followup(msg("go"))
        yield* capped.agent.whenIdle
        assert.deepStrictEqual(seen, [1])
        const [reason] = turnEnds(yield* capped.agent.session.events)
        assert.isTrue(reason?.kind === "error" && reason.error.code === "B")
        const plain = yield* h.create("plain")
        yield* plain.agent.followup(msg("go"))
        yield* plain.agent.whenIdle
        const [plainReason] = turnEnds(yield* plain.agent.session.events)
        assert.isTrue(plainReason?.kind === "error" && plainReason.error.code === "C")
        assert.strictEqual((yield* h.model.requests).length, 3)
      }))

    it.scoped("TURN-07 after an error the drain stops and queued work waits for the next wake; after a normal end it runs on", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.fail("BOOM"), Model.text("b"), Model.text("c")])
        const gate = yield* Deferred.make<void>()
        const reached = yield* Deferred.make<void>()
        const handle = yield* h.create("drain-stop", {
          setup: (a) =>
            a.hooks.preStep((info) =>
              info.turn === 1
                ? Deferred.succeed(reached, undefined).pipe(
                  Effect.zipRight(Deferred.await(gate)),
                  Effect.as(enter(info.messages))
                )
                : Effect.succeed(enter(info.messages))
            )
        })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("a"))
        yield* Deferred.await(reached)
        yield* agent.followup(msg("b"))
        yield* Deferred.succeed(gate, undefined)
        yield* agent.whenIdle
        assert.deepStrictEqual(turnEnds(yield* agent.session.events).map((r) => r.kind), ["error"])
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("b")])
        // the next wake runs the queued follow-up, then its own, in one drain
        yield* agent.followup(msg("c"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["error", "completed", "completed"])
        assert.deepStrictEqual(userTexts(log), ["a", "b", "c"])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), ["running", "idle", "running", "idle"])
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("tools", () => {
    it.scoped("TOOL-01 arguments are decoded with the tool's Schema; a decode failure is an error result the model sees", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          [
            Model.toolCall("c1", "add", "{\"a\":1,\"b\":2}"),
            Model.toolCall("c2", "add", "{\"a\":\"x\"}"),
            Model.toolCall("c3", "add", "not json"),
            Model.toolCall("c4", "missing", "{}")
          ],
          Model.text("done")
        ])
        const add = Tool.make({
          name: "add",
          description: "adds two numbers",
          parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
          run: ({ a, b }) => Effect.succeed(Tool.text(String(a + b)))
        })
        const { agent } = yield* h.create("decode", { setup: (a) => a.tools.register(add) })
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        const results = resultsOf(log)
        assert.deepStrictEqual(results.map((r) => [r.callId, r.isError, r.error?.code]), [
          ["c1", false, undefined],
          ["c2", true, "INVALID_ARGUMENTS"],
          ["c3", true, "INVALID_ARGUMENTS"],
          ["c4", true, "TOOL_NOT_FOUND"]
        ])
        assert.strictEqual(results[0]?.text, "3")
        assert.match(results[1]?.text ?? "", /Invalid arguments for tool "add"/)
        assert.match(results[2]?.text ?? "", /not valid JSON/)
        assert.deepStrictEqual(ofType(log, "tool/call").map((e) => e.data.arguments), [
          "{\"a\":1,\"b\":2}",
          "{\"a\":\"x\"}",
          "not json",
          "{}"
        ])
        const second = yield* h.model.awaitRequest(2)
        const toolErrors = second.messages.flatMap((m) => m.role === "tool" ? [m.isError] : [])
        assert.deepStrictEqual(toolErrors, [
          false,
          true,
          true,
          true
        ])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
      }))

    it.scoped("TOOL-01 a typed tool failure is an error result {name: _tag, code: TOOL_FAILED}", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "nope", "{}"), Model.text("ok")])
        const nope = Tool.make({
          name: "nope",
          description: "fails",
          parameters: noParams,
          run: () => Effect.fail(new Nope({ reason: "no" }))
        })
        const { agent } = yield* h.create("typed-failure", { setup: (a) => a.tools.register(nope) })
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(resultsOf(log).map((r) => [r.isError, r.error]), [
          [true, { name: "Nope", code: "TOOL_FAILED" }]
        ])
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
      }))

    it.scoped("TOOL-01 a tool defect ends the turn error (its call still gets a result); the agent stays usable", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.toolCall("c1", "crash", "{}"), Model.text("fine")])
        const crash = Tool.make({
          name: "crash",
          description: "dies",
          parameters: noParams,
          run: () => Effect.dieMessage("kaboom")
        })
        const handle = yield* h.create("defect", { setup: (a) => a.tools.register(crash) })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        let log = yield* agent.session.events
        const [reason] = turnEnds(log)
        assert.isTrue(reason?.kind === "error" && reason.error.code === "DEFECT")
        assert.deepStrictEqual(resultsOf(log).map((r) => [r.callId, r.isError, r.error?.code]), [
          ["c1", true, "TOOL_DEFECT"]
        ])
        assert.deepStrictEqual(logViolations(log), [])
        yield* agent.followup(msg("again"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["error", "completed"])
        yield* handle.dispose
        const errors = (yield* events).flatMap((e) => e._tag === "AgentError" ? [e.error.code] : [])
        assert.deepStrictEqual(errors, ["DEFECT"])
      }))

    it.scoped("TOOL-01 results are logged in model order even when a later call finishes first", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          [Model.toolCall("c1", "first", "{}"), Model.toolCall("c2", "second", "{}")],
          Model.text("ok")
        ])
        const secondDone = yield* Deferred.make<void>()
        const first = Tool.make({
          name: "first",
          description: "waits for the second",
          parameters: noParams,
          run: () => Deferred.await(secondDone).pipe(Effect.as(Tool.text("one")))
        })
        const second = Tool.make({
          name: "second",
          description: "finishes at once",
          parameters: noParams,
          run: () => Deferred.succeed(secondDone, undefined).pipe(Effect.as(Tool.text("two")))
        })
        const handle = yield* h.create("order", {
          setup: (a) => Effect.all([a.tools.register(first), a.tools.register(second)], { discard: true })
        })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        assert.deepStrictEqual(resultsOf(yield* agent.session.events).map((r) => [r.callId, r.text]), [
          ["c1", "one"],
          ["c2", "two"]
        ])
        yield* handle.dispose
        // EVS-02 (v2): ToolCallFinished follows its durable tool/result, so it comes in the log's order
        const finished = (yield* events).flatMap((e) => e._tag === "ToolCallFinished" ? [e.callId] : [])
        assert.deepStrictEqual(finished, ["c1", "c2"])
      }))

    it.scoped("TOOL-02 parallel tools run concurrently (default cap 10): each waits until all have started", () =>
      Effect.gen(function*() {
        const calls = Array.from({ length: 10 }, (_, i) => Model.toolCall(`c${i}`, "rendezvous", "{}"))
        const h = yield* makeHarness([calls, Model.text("ok")])
        const started = yield* Ref.make(0)
        const all = yield* Deferred.make<void>()
        const rendezvous = Tool.make({
          name: "rendezvous",
          description: "waits for every call",
          parameters: noParams,
          run: () =>
            Ref.updateAndGet(started, (n) => n + 1).pipe(
              Effect.flatMap((n) => n === 10 ? Deferred.succeed(all, undefined) : Effect.void),
              Effect.zipRight(Deferred.await(all)),
              Effect.as(Tool.text("met"))
            )
        })
        const { agent } = yield* h.create("parallel", { setup: (a) => a.tools.register(rendezvous) })
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        assert.strictEqual(resultsOf(yield* agent.session.events).filter((r) => r.text === "met").length, 10)
      }))

    it.scoped("TOOL-02 maxParallelToolCalls caps the bodies in flight (a rolling pool)", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          (["a", "b", "c"] as const).map((id) => Model.toolCall(id, "gated", JSON.stringify({ id }))),
          Model.text("ok")
        ])
        const gates = {
          a: { started: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() },
          b: { started: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() },
          c: { started: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() }
        }
        let inFlight = 0
        let maxInFlight = 0
        const gated = Tool.make({
          name: "gated",
          description: "runs until released",
          parameters: Schema.Struct({ id: Schema.Literal("a", "b", "c") }),
          run: ({ id }) =>
            Effect.gen(function*() {
              inFlight++
              maxInFlight = Math.max(maxInFlight, inFlight)
              yield* Deferred.succeed(gates[id].started, undefined)
              yield* Deferred.await(gates[id].release)
              inFlight--
              return Tool.text(id)
            })
        })
        const { agent } = yield* h.create("capped", {
          options: { maxParallelToolCalls: 2 },
          setup: (a) => a.tools.register(gated)
        })
        yield* agent.followup(msg("go"))
        yield* Deferred.await(gates.a.started)
        yield* Deferred.await(gates.b.started)
        yield* Deferred.succeed(gates.a.release, undefined)
        yield* Deferred.await(gates.c.started)
        yield* Deferred.succeed(gates.b.release, undefined)
        yield* Deferred.succeed(gates.c.release, undefined)
        yield* agent.whenIdle
        assert.strictEqual(maxInFlight, 2)
        assert.deepStrictEqual(resultsOf(yield* agent.session.events).map((r) => r.text), ["a", "b", "c"])
      }))

    it.scoped("TOOL-02 an exclusive tool is a barrier: nothing runs beside it", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          [
            Model.toolCall("p1", "par", "{}"),
            Model.toolCall("x", "excl", "{}"),
            Model.toolCall("p2", "par", "{}"),
            Model.toolCall("p3", "par", "{}")
          ],
          Model.text("ok")
        ])
        const gate = yield* Deferred.make<void>()
        const firstStarted = yield* Deferred.make<void>()
        const trace: Array<string> = []
        let inFlight = 0
        const body = (name: string) =>
          Effect.gen(function*() {
            trace.push(`start ${name} (beside ${inFlight})`)
            inFlight++
            yield* Deferred.succeed(firstStarted, undefined)
            yield* Deferred.await(gate)
            yield* Effect.yieldNow()
            inFlight--
            trace.push(`end ${name}`)
            return Tool.text(name)
          })
        const par = Tool.make({
          name: "par",
          description: "parallel",
          parameters: noParams,
          run: (_, ctx) => body(ctx.callId)
        })
        const excl = Tool.make({
          name: "excl",
          description: "exclusive",
          mode: "exclusive",
          parameters: noParams,
          run: (_, ctx) => body(ctx.callId)
        })
        const { agent } = yield* h.create("barrier", {
          setup: (a) => Effect.all([a.tools.register(par), a.tools.register(excl)], { discard: true })
        })
        yield* agent.followup(msg("go"))
        yield* Deferred.await(firstStarted)
        yield* Deferred.succeed(gate, undefined)
        yield* agent.whenIdle
        assert.deepStrictEqual(trace.slice(0, 4), ["start p1 (beside 0)", "end p1", "start x (beside 0)", "end x"])
        // p2 and p3 form one parallel group after the barrier
        assert.deepStrictEqual(trace.slice(4, 6).sort(), ["start p2 (beside 0)", "start p3 (beside 1)"])
        assert.deepStrictEqual(resultsOf(yield* agent.session.events).map((r) => r.callId), ["p1", "x", "p2", "p3"])
      }))

    it.scoped("TOOL-03 concludesTurn ends the turn after this step (after turnStopping), unless next-step input is pending", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness({
          concluding: [Model.toolCall("c1", "finish", "{}")],
          steered: [Model.toolCall("c1", "finish", "{}"), Model.text("saw the steer")]
        })
        let stopping = 0
        const finish = Tool.make({
          name: "finish",
          description: "concludes",
          parameters: noParams,
          run: (_, ctx) =>
            (ctx.agent.id === "steered" ? Effect.orDie(ctx.agent.steer(msg("late news"))) : Effect.void).pipe(
              Effect.as(Tool.text("finished", { concludesTurn: true }))
            )
        })
        const setup = (a: AgentSetup) =>
          Effect.all([a.tools.register(finish), a.hooks.turnStopping(() => Effect.sync(() => stopping++))], {
            discard: true
          })
        const concluding = yield* h.create("concluding", { setup })
        yield* concluding.agent.followup(msg("go"))
        yield* concluding.agent.whenIdle
        let log = yield* concluding.agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.deepStrictEqual(stepsOf(log), [[1, 1]])
        assert.strictEqual(stopping, 1)
        const steered = yield* h.create("steered", { setup })
        yield* steered.agent.followup(msg("go"))
        yield* steered.agent.whenIdle
        log = yield* steered.agent.session.events
        assert.deepStrictEqual(turnEnds(log), [{ kind: "completed" }])
        assert.deepStrictEqual(stepsOf(log), [[1, 1], [1, 2]])
        assert.deepStrictEqual(userTexts(log), ["go", "late news"])
        assert.strictEqual((yield* h.model.requests).length, 3)
      }))

    it.scoped("TOOL-03 per-agent tools exist only for their agent and shadow global ones; global tools come from Tool.ToolRegistry", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness({
          mine: [[Model.toolCall("c1", "lookup", "{}"), Model.toolCall("c2", "private", "{}")], Model.text("ok")],
          other: [[Model.toolCall("c1", "lookup", "{}"), Model.toolCall("c2", "private", "{}")], Model.text("ok")]
        })
        yield* h.globalTools.register(fixed("lookup", "global answer", { description: "global lookup" }))
        yield* h.globalTools.register(fixed("clock", "noon"))
        const mine = yield* h.create("mine", {
          setup: (a) =>
            Effect.all([
              a.tools.register(fixed("lookup", "local answer", { description: "local lookup" })),
              a.tools.register(fixed("private", "secret"))
            ], { discard: true })
        })
        const other = yield* h.create("other")
        yield* mine.agent.followup(msg("go"))
        yield* mine.agent.whenIdle
        yield* other.agent.followup(msg("go"))
        yield* other.agent.whenIdle
        assert.deepStrictEqual(resultsOf(yield* mine.agent.session.events).map((r) => [r.callId, r.text]), [
          ["c1", "local answer"],
          ["c2", "secret"]
        ])
        const otherResults = resultsOf(yield* other.agent.session.events)
        const otherOutcomes = otherResults.map((r) => [r.callId, r.text === "global answer" ? "global" : r.error?.code])
        assert.deepStrictEqual(otherOutcomes, [
          ["c1", "global"],
          ["c2", "TOOL_NOT_FOUND"]
        ])
        const requests = yield* h.model.requests
        const toolsOf = (id: string) =>
          requests.find((r) => r.sessionId === id)?.tools.map((t) => `${t.name}:${t.description}`)
        assert.deepStrictEqual(toolsOf("mine"), ["clock:answers noon", "lookup:local lookup", "private:answers secret"])
        assert.deepStrictEqual(toolsOf("other"), ["lookup:global lookup", "clock:answers noon"])
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("hooks", () => {
    it.scoped("TURN-03 TURN-07 preStep reject: the batch is removed rejected, the turn ends blocked, the drain stops", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("later answer"), Model.text("wake answer")])
        const gate = yield* Deferred.make<void>()
        const reached = yield* Deferred.make<void>()
        const { agent } = yield* h.create("reject", {
          setup: (a) =>
            a.hooks.preStep((info) =>
              info.messages.some((m) => m.id === "blocked")
                ? Deferred.succeed(reached, undefined).pipe(
                  Effect.zipRight(Deferred.await(gate)),
                  Effect.as<Tool.PreStepDecision>({ kind: "reject", reason: "not allowed" })
                )
                : Effect.succeed(enter(info.messages))
            )
        })
        yield* agent.followup(msg("blocked", "blocked prompt"))
        yield* Deferred.await(reached)
        yield* agent.followup(msg("later", "later prompt"))
        yield* Deferred.succeed(gate, undefined)
        yield* agent.whenIdle
        let log = yield* agent.session.events
        assert.deepStrictEqual(typesOf(log), [
          "agent/inbox/spliced",
          "turn/start",
          "agent/inbox/spliced",
          "agent/inbox/spliced",
          "turn/end"
        ])
        assert.deepStrictEqual(ofType(log, "agent/inbox/spliced").at(-1)?.data, {
          target: "next-turn",
          start: 0,
          removed: [msg("blocked").id],
          inserted: [],
          outcome: "rejected"
        })
        assert.deepStrictEqual(turnEnds(log), [{ kind: "blocked", reason: "not allowed" }])
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("later", "later prompt")])
        assert.strictEqual((yield* h.model.requests).length, 0)
        yield* agent.followup(msg("wake"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(userTexts(log), ["later prompt", "wake"])
        const first = yield* h.model.awaitRequest(1)
        assert.deepStrictEqual(requestTexts(first), ["user:later prompt"])
      }))

    it.scoped("TURN-03 INB-07 preStep replaces the entering messages: originals left out are rejected in the claim batch", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const context = Message.user("context", { id: "ctx", source: { kind: "plugin", plugin: "goal" } })
        const rewritten = Message.user("rewritten", { id: "rewritten" })
        const { agent } = yield* h.create("replace", {
          setup: (a) =>
            a.hooks.preStep((info) =>
              Effect.succeed(enter(info.messages.flatMap((m) => m.id === "drop" ? [rewritten] : [m, context])))
            )
        })
        yield* agent.inject(msg("drop"))
        yield* agent.followup(msg("keep"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        const entered = ofType(log, "user/message").map((e): [string, unknown] => [
          e.data.message.id,
          e.data.message.source
        ])
        assert.deepStrictEqual(entered, [
          ["rewritten", { kind: "user" }],
          ["keep", { kind: "user" }],
          ["ctx", { kind: "plugin", plugin: "goal" }]
        ])
        const claimBatch = (yield* h.writes.batches).find((batch) => batch.some((e) => e.type === "step/start"))
        assert.deepStrictEqual(claimBatch?.map((e) => e.type), [
          "agent/inbox/spliced",
          "agent/inbox/spliced",
          "step/start",
          "user/message",
          "user/message",
          "user/message"
        ])
        const splices = ofType(log, "agent/inbox/spliced").slice(-2).map((
          e
        ): [string, ReadonlyArray<string>, unknown] => [e.data.target, e.data.removed, e.data.outcome])
        assert.deepStrictEqual(splices, [
          ["next-step", ["drop"], "rejected"],
          ["next-turn", ["keep"], undefined]
        ])
      }))

    it.scoped("hooks: a preStep hook entering an invalid message ends the turn error; the agent is not broken", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok"), Model.text("ok too")])
        const invalid = { ...Message.user("bad", { id: "bad" }), extra: Number.NaN }
        let once = true
        const { agent } = yield* h.create("invalid-entry", {
          setup: (a) =>
            a.hooks.preStep((info) => {
              const messages = once ? [...info.messages, invalid] : info.messages
              once = false
              return Effect.succeed(enter(messages))
            })
        })
        yield* agent.followup(msg("one"))
        yield* agent.whenIdle
        let log = yield* agent.session.events
        const [reason] = turnEnds(log)
        assert.isTrue(reason?.kind === "error" && reason.error.code === "InvalidEventData")
        assert.deepStrictEqual(stepsOf(log), [])
        yield* agent.followup(msg("two"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["error", "completed", "completed"])
        assert.deepStrictEqual(userTexts(log), ["one", "two"])
      }))

    it.scoped("hooks: a request hook's changed route is used and persists as a new request/config (only when it changes)", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("one"), Model.text("two"), Model.text("three")])
        const useOther = yield* Ref.make(true)
        const { agent } = yield* h.create("route", {
          options: { maxTokens: 256, system: "be brief" },
          setup: (a) =>
            a.hooks.request((info) =>
              Effect.map(Ref.get(useOther), (other) => other ? { ...info.route, model: "other-model" } : info.route)
            )
        })
        yield* agent.followup(msg("a"))
        yield* agent.whenIdle
        yield* agent.followup(msg("b"))
        yield* agent.whenIdle
        yield* Ref.set(useOther, false)
        yield* agent.followup(msg("c"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        const configs = ofType(log, "request/config").map((e) => [e.data.model, e.data.maxTokens, e.data.system])
        assert.deepStrictEqual(configs, [
          ["other-model", 256, "be brief"],
          ["test", 256, "be brief"]
        ])
        const requests = yield* h.model.requests
        assert.deepStrictEqual(requests.map((r) => r.model), ["other-model", "other-model", "test"])
        assert.deepStrictEqual(ofType(log, "assistant/message").map((e) => e.data.message.source.model), [
          "other-model",
          "other-model",
          "test"
        ])
      }))

    it.scoped("hooks: global hooks (Tool.LoopHooks) run before the agent's, each in registration order", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const trace: Array<string> = []
        const record = (label: string) => Effect.sync(() => trace.push(label))
        yield* h.globalHooks.preStep((info) => Effect.as(record("global preStep"), enter(info.messages)))
        yield* h.globalHooks.request((info) => Effect.as(record("global request"), info.route))
        yield* h.globalHooks.turnStopping(() => record("global turnStopping"))
        const { agent } = yield* h.create("order", {
          setup: (a) =>
            Effect.all([
              a.hooks.preStep((info) => Effect.as(record("agent preStep 1"), enter(info.messages))),
              a.hooks.preStep((info) => Effect.as(record("agent preStep 2"), enter(info.messages))),
              a.hooks.request((info) => Effect.as(record("agent request"), info.route)),
              a.hooks.turnStopping(() => record("agent turnStopping"))
            ], { discard: true })
        })
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        assert.deepStrictEqual(trace, [
          "global preStep",
          "agent preStep 1",
          "agent preStep 2",
          "global request",
          "agent request",
          "global turnStopping",
          "agent turnStopping"
        ])
      }))

    it.scoped("hooks: per-agent registrations are scoped: closing their Scope removes them; after dispose they fail AgentInactive", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("one"), Model.text("two")])
        const handle = yield* h.create("scoped-hooks")
        const agent = handle.agent
        const calls = yield* Ref.make(0)
        const scope = yield* Scope.make()
        yield* agent.hooks.turnStopping(() => Ref.update(calls, (n) => n + 1)).pipe(Scope.extend(scope))
        yield* agent.followup(msg("a"))
        yield* agent.whenIdle
        assert.strictEqual(yield* Ref.get(calls), 1)
        yield* Scope.close(scope, Exit.void)
        yield* agent.followup(msg("b"))
        yield* agent.whenIdle
        assert.strictEqual(yield* Ref.get(calls), 1)
        yield* handle.dispose
        const late = yield* Effect.either(
          Effect.scoped(agent.hooks.preStep((info) => Effect.succeed(enter(info.messages))))
        )
        assert.isTrue(Either.isLeft(late) && late.left._tag === "AgentInactive")
        const lateTool = yield* Effect.either(Effect.scoped(agent.tools.register(fixed("late", "x"))))
        assert.isTrue(Either.isLeft(lateTool) && lateTool.left._tag === "AgentInactive")
      }))

    it.scoped("hooks: a failing hook ends the turn error and never wedges the agent (preStep, request, turnStopping)", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("r1"), Model.text("r2"), Model.text("r3"), Model.text("r4")])
        const failing = yield* Ref.make<"preStep" | "request" | "turnStopping" | "none">("preStep")
        const failIf = (point: string) =>
          Effect.flatMap(Ref.get(failing), (current) =>
            current === point ? Effect.fail(`${point} hook broke`) : Effect.void
          )
        const { agent } = yield* h.create("failing-hooks", {
          setup: (a) =>
            Effect.all([
              a.hooks.preStep((info) => Effect.as(failIf("preStep"), enter(info.messages))),
              a.hooks.request((info) => Effect.as(failIf("request"), info.route)),
              a.hooks.turnStopping(() => failIf("turnStopping"))
            ], { discard: true })
        })
        yield* agent.followup(msg("one"))
        yield* agent.whenIdle
        let log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log), [
          { kind: "error", error: { message: "preStep hook broke", code: "HOOK_FAILED" } }
        ])
        assert.deepStrictEqual(stepsOf(log), [])
        // the peeked message was never claimed: it is still pending
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [msg("one")])
        yield* Ref.set(failing, "request")
        yield* agent.followup(msg("two"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log)[1], {
          kind: "error",
          error: { message: "request hook broke", code: "HOOK_FAILED" }
        })
        assert.deepStrictEqual(typesOf(log).slice(-3), ["user/message", "step/end", "turn/end"])
        yield* Ref.set(failing, "turnStopping")
        yield* agent.followup(msg("three"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["error", "error", "error"])
        yield* Ref.set(failing, "none")
        yield* agent.followup(msg("four"))
        yield* agent.whenIdle
        log = yield* agent.session.events
        assert.deepStrictEqual(turnEnds(log).map((r) => r.kind), ["error", "error", "error", "completed", "completed"])
        assert.deepStrictEqual(userTexts(log), ["one", "two", "three", "four"])
        assert.deepStrictEqual(logViolations(log), [])
        assert.strictEqual(yield* agent.status, "idle")
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("initiator", () => {
    it.scoped("INIT-07 model calls, hooks and tool bodies see the driving agent, not whoever woke it", () =>
      Effect.gen(function*() {
        const seen: Array<string> = []
        const idOf = Option.match({ onNone: () => "none", onSome: (agent: { readonly id: string }) => agent.id })
        const observe = (where: string) =>
          Effect.flatMap(FiberRef.get(AgentRegistry.currentInitiatorRef), (initiator) =>
            Effect.sync(() => seen.push(`${where}:${idOf(initiator)}`)))
        const h = yield* makeHarness([Model.toolCall("c1", "who", "{}"), Model.text("done")], {
          wrapModel: (model) => ({
            stream: (request) => Stream.unwrap(Effect.as(observe("model"), model.stream(request)))
          })
        })
        const who = Tool.make({
          name: "who",
          description: "reports the initiator",
          parameters: noParams,
          run: () =>
            Effect.gen(function*() {
              const initiator = yield* h.registry.currentInitiator
              seen.push(`tool:${Option.match(initiator, { onNone: () => "none", onSome: (a) => a.id })}`)
              const required = yield* Effect.either(h.registry.requireInitiator)
              return Tool.text(Either.isRight(required) ? required.right.id : "none")
            })
        })
        const other = yield* h.create("other")
        const { agent } = yield* h.create("driver-agent", {
          setup: (a) =>
            Effect.all([
              a.tools.register(who),
              a.hooks.preStep((info) => Effect.as(observe("preStep"), enter(info.messages))),
              a.hooks.turnStopping(() => observe("turnStopping"))
            ], { discard: true })
        })
        yield* agent.followup(msg("go")).pipe(h.registry.withInitiator(other.agent))
        yield* agent.whenIdle
        assert.deepStrictEqual(seen, [
          "preStep:driver-agent",
          "model:driver-agent",
          "tool:driver-agent",
          "preStep:driver-agent",
          "model:driver-agent",
          "turnStopping:driver-agent"
        ])
        assert.deepStrictEqual(resultsOf(yield* agent.session.events).map((r) => r.text), ["driver-agent"])
        // the caller's own initiator is untouched
        assert.isTrue(Option.isNone(yield* h.registry.currentInitiator))
      }))

    it.scoped("INIT-07 SPEC §6 live events name their initiator when known", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([Model.text("ok")])
        const other = yield* h.create("other")
        const handle = yield* h.create("initiated")
        const events = yield* recordEvents(handle.agent)
        yield* handle.agent.followup(msg("go")).pipe(h.registry.withInitiator(other.agent))
        yield* handle.agent.whenIdle
        yield* handle.dispose
        const initiators = (yield* events).flatMap((e) =>
          e._tag === "InboxInserted" || e._tag === "TurnStarted" || e._tag === "TurnEnded"
            ? [`${e._tag}:${e.initiator}`]
            : []
        )
        assert.deepStrictEqual(initiators, ["InboxInserted:other", "TurnStarted:initiated", "TurnEnded:initiated"])
      }))
  })

  // -----------------------------------------------------------------------------------------------
  describe("requests", () => {
    it.scoped("REQ-03 every model request of a multi-step tool turn is rebuilt byte for byte from the log alone", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          [
            Model.reasoning("plan"),
            Model.text("looking"),
            Model.toolCall("c1", "read", "{\"path\":\"a\"}"),
            Model.toolCall("c2", "read", "{\"path\":\"b\"}")
          ],
          Model.toolCall("c3", "stamp", "{}"),
          Model.text("all done"),
          Model.text("next turn")
        ])
        yield* h.globalTools.register(fixed("stamp", "12:00", { description: "the time" }))
        const read = Tool.make({
          name: "read",
          description: "reads a file",
          parameters: Schema.Struct({ path: Schema.String }),
          run: ({ path }) => Effect.succeed(Tool.text(`contents of ${path}`))
        })
        const { agent } = yield* h.create("rebuild", {
          options: { maxTokens: 512, system: "you are a test" },
          setup: (a) =>
            Effect.all([
              a.tools.register(read),
              // the route changes from step 3 on: a new request/config mid-turn
              a.hooks.request((info) =>
                Effect.succeed(info.step >= 3 ? { ...info.route, model: "bigger" } : info.route)
              )
            ], { discard: true })
        })
        yield* agent.inject(msg("context"))
        yield* agent.followup(msg("go"))
        yield* agent.whenIdle
        yield* agent.followup(msg("more"))
        yield* agent.whenIdle
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        const rebuilt: Array<string> = []
        let config: Extract<SessionEvent, { type: "request/config" }>["data"] | undefined
        for (let i = 0; i < log.length; i++) {
          const event = log[i]!
          if (event.type === "request/config") {
            config = (event as Extract<SessionEvent, { type: "request/config" }>).data
          }
          if (event.type !== "assistant/message" || config === undefined) continue
          rebuilt.push(JSON.stringify({
            sessionId: agent.id,
            provider: config.provider,
            model: config.model,
            ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}),
            ...(config.system !== undefined ? { system: config.system } : {}),
            messages: Session.deriveMessages(log.slice(0, i)),
            tools: config.tools.map((tool) => ({
              name: tool.name,
              description: tool.description,
              jsonSchema: tool.parameters
            }))
          }))
        }
        const requests = yield* h.model.requests
        const actual = requests.map((request) =>
          JSON.stringify({
            ...request,
            tools: request.tools.map((tool) => ({
              name: tool.name,
              description: tool.description,
              jsonSchema: tool.jsonSchema
            }))
          })
        )
        assert.strictEqual(requests.length, 4)
        assert.deepStrictEqual(rebuilt, actual)
        assert.deepStrictEqual(requests.map((r) => r.model), ["test", "test", "bigger", "test"])
        assert.deepStrictEqual(ofType(log, "request/config").map((e) => e.data.model), ["test", "bigger", "test"])
        // and the history a request carried is the session's, at dispatch
        assert.deepStrictEqual(requestTexts(requests[2]!), [
          "user:context",
          "user:go",
          "assistant:looking[c1,c2]",
          "tool:c1:contents of a",
          "tool:c2:contents of b",
          "assistant:[c3]",
          "tool:c3:12:00"
        ])
        assert.deepStrictEqual(Session.deriveMessages(log), yield* agent.session.messages)
      }))
  })
})
