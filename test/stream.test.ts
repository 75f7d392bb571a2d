/**
 * APP-02: `agent.stream`, checked against the durable log, over the real runtime (memory
 * persistence) with the scripted model.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Layer, Option, Schema, Stream, TestClock } from "effect"
import * as AgentError from "../src/AgentError.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { AssistantMessageLogged } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import * as TurnPart from "../src/TurnPart.js"
import { route } from "./fixtures/runtime.js"
import { eventually } from "./fixtures/waiting.js"

type Script = Parameters<typeof Model.layerScripted>[0]

const runtime = (script: Script) =>
  Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const layer = AgentRuntime.layerMemory({ storage }).pipe(Layer.provideMerge(Model.layerScripted(script)))
    return yield* Layer.build(layer).pipe(Effect.orDie)
  })

const echo = Tool.make({
  name: "echo",
  description: "Echoes",
  parameters: Schema.Struct({ x: Schema.Number }),
  run: ({ x }) => Effect.succeed(Tool.text(`x=${x}`))
})

/** The text (or reasoning) of each step's logged assistant message. */
const loggedBySteps = (events: ReadonlyArray<{ readonly type: string; readonly data: unknown }>, kind: "text" | "reasoning") =>
  events.filter((e) => e.type === "assistant/message").map((e) => {
    const data = e.data as typeof AssistantMessageLogged.Type["data"]
    return [data.step, data.message.content.filter((p) => p.type === kind).map((p) => (p as { text: string }).text).join("")] as const
  })

/** The concatenated deltas of each step (after the step's last Retry, which drops what came before). */
const streamedBySteps = (parts: ReadonlyArray<TurnPart.TurnPart>, tag: "TextDelta" | "ReasoningDelta") => {
  const bySteps = new Map<number, string>()
  for (const part of parts) {
    if (part._tag === "Retry") bySteps.set(part.step, "")
    else if (part._tag === tag) bySteps.set(part.step, (bySteps.get(part.step) ?? "") + part.text)
  }
  return bySteps
}

describe("APP-02 stream", () => {
  it.scoped("APP-02 parts against the durable log: deltas concatenate to the logged text, one Started/Finished per call, StepFinished per step, TurnFinished last", () =>
    Effect.gen(function*() {
      const context = yield* runtime([
        [Model.reasoning("let me think"), Model.text("calling echo"), Model.toolCall("c1", "echo", "{\"x\":3}"), Model.toolCall("c2", "echo", "{\"x\":4}")],
        [Model.text("x is 3 and 4")]
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "streamed", options: route, setup: (s) => s.tools.register(echo) })
        const parts = Chunk.toReadonlyArray(yield* Stream.runCollect(agent.stream("what is x?")))
        const events = yield* agent.session.events
        const text = streamedBySteps(parts, "TextDelta")
        for (const [step, logged] of loggedBySteps(events, "text")) assert.strictEqual(text.get(step) ?? "", logged)
        const reasoning = streamedBySteps(parts, "ReasoningDelta")
        for (const [step, logged] of loggedBySteps(events, "reasoning")) assert.strictEqual(reasoning.get(step) ?? "", logged)
        const tags = parts.map((p) => p._tag)
        assert.deepStrictEqual(parts.filter((p) => p._tag === "ToolCallStarted").map((p) => p.callId), ["c1", "c2"])
        assert.deepStrictEqual(
          parts.filter((p) => p._tag === "ToolCallFinished").map((p) => [p.callId, p.summary, p.isError]),
          [["c1", "x=3", false], ["c2", "x=4", false]]
        )
        assert.deepStrictEqual(parts.filter((p) => p._tag === "StepFinished").map((p) => p.step), [1, 2])
        // each call starts before it finishes; step 1 finishes after its calls, before step 2's text
        assert.isTrue(tags.indexOf("ToolCallStarted") < tags.indexOf("ToolCallFinished"))
        assert.strictEqual(tags.indexOf("StepFinished"), tags.lastIndexOf("ToolCallFinished") + 1)
        const last = parts[parts.length - 1]!
        assert.strictEqual(last._tag, "TurnFinished")
        assert.strictEqual(tags.indexOf("TurnFinished"), parts.length - 1)
        if (last._tag === "TurnFinished") {
          assert.strictEqual(last.result.text, "x is 3 and 4")
          assert.deepStrictEqual(yield* agent.turnResult(1), Option.some(last.result))
        }
        assert.strictEqual(
          (yield* Stream.runCollect(TurnPart.text(agent.stream("again")).pipe(Stream.either))).pipe(Chunk.size),
          1
        )
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-02 a retried model failure is a Retry part, and the retried step's deltas still concatenate to the logged text", () =>
    Effect.gen(function*() {
      const context = yield* runtime([[Model.text("half an ans"), Model.fail("NETWORK")], [Model.text("the whole answer")]])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "retried", options: route })
        const collecting = yield* Effect.fork(Stream.runCollect(agent.stream("ask")))
        yield* TestClock.sleeps().pipe(Effect.repeat({ until: Chunk.isNonEmpty }))
        yield* TestClock.adjust("10 minutes")
        const parts = Chunk.toReadonlyArray(yield* Fiber.join(collecting))
        const retries = parts.filter((p) => p._tag === "Retry")
        assert.deepStrictEqual(retries.map((p) => [p.step, p.attempt, p.code]), [[1, 1, "NETWORK"]])
        const events = yield* agent.session.events
        assert.deepStrictEqual(Array.from(streamedBySteps(parts, "TextDelta")), loggedBySteps(events, "text").map(([s, t]) => [s, t]))
        // the plain text stream has both tries; the first is what the Retry part says to drop
        assert.include(parts.filter((p) => p._tag === "TextDelta").map((p) => p.text).join(""), "half an ans")
        assert.strictEqual(parts[parts.length - 1]!._tag, "TurnFinished")
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-02 two concurrent streams on one agent each see only their own turn; a failed turn fails the stream with TurnFailed", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const gateTool = Tool.make({
        name: "gate",
        description: "Waits",
        parameters: Schema.Struct({}),
        run: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.as(Deferred.await(gate), Tool.text("open")))
      })
      const context = yield* runtime([
        [Model.text("first "), Model.toolCall("g", "gate", "{}")],
        Model.text("first done"),
        Model.text("second done"),
        Model.fail("AUTH")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "two", options: route, setup: (s) => s.tools.register(gateTool) })
        const one = yield* Effect.fork(Stream.runCollect(agent.stream("one")))
        yield* Deferred.await(started)
        const two = yield* Effect.fork(Stream.runCollect(agent.stream(Message.user("two", { id: "two" }))))
        yield* eventually(() => Effect.map(agent.inbox.nextTurn, (ms) => ms.some((m) => m.id === "two")))
        yield* Deferred.succeed(gate, undefined)
        const first = Chunk.toReadonlyArray(yield* Fiber.join(one))
        const second = Chunk.toReadonlyArray(yield* Fiber.join(two))
        const textOf = (parts: ReadonlyArray<TurnPart.TurnPart>) =>
          parts.filter((p) => p._tag === "TextDelta").map((p) => p.text).join("")
        assert.strictEqual(textOf(first), "first first done")
        assert.strictEqual(textOf(second), "second done")
        const resultOf = (parts: ReadonlyArray<TurnPart.TurnPart>) => {
          const last = parts[parts.length - 1]
          return last?._tag === "TurnFinished" ? last.result.turn : undefined
        }
        assert.deepStrictEqual([resultOf(first), resultOf(second)], [1, 2])
        assert.isFalse(second.some((p) => p._tag === "ToolCallStarted"))
        const failed = yield* Effect.exit(Stream.runCollect(agent.stream("fails")))
        assert.isTrue(Exit.isFailure(failed) && failed.cause._tag === "Fail" && failed.cause.error instanceof AgentError.TurnFailed)
      }).pipe(Effect.provide(context))
    }))
})
