/**
 * APP-01: `agent.run`, `agent.turnResult` and `agent.awaitTurn` over the real runtime (memory
 * persistence, and real files for the restart), with the scripted model.
 */
import { NodeContext } from "@effect/platform-node"
import { FileSystem } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, HashMap, Layer, Logger, LogLevel, Option, Schema } from "effect"
import * as AgentError from "../src/AgentError.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import * as TurnResult from "../src/TurnResult.js"
import { route, runtimeOf } from "./fixtures/runtime.js"
import { eventually } from "./fixtures/waiting.js"

type Script = Parameters<typeof Model.layerScripted>[0]

/** The runtime over memory persistence and the scripted model, built in the test's Scope. */
const runtime = (script: Script) =>
  Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const layer = AgentRuntime.layerMemory({ storage }).pipe(Layer.provideMerge(Model.layerScripted(script)))
    return yield* Layer.build(layer).pipe(Effect.orDie)
  })

/** A tool that waits for `gate`, telling `started` when it began. */
const gateTool = (started: Deferred.Deferred<void>, gate: Deferred.Deferred<void>) =>
  Tool.make({
    name: "gate",
    description: "Waits for the test",
    parameters: Schema.Struct({}),
    run: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.as(Deferred.await(gate), Tool.text("opened")))
  })

const pendingIds = (agent: { readonly inbox: { readonly nextTurn: Effect.Effect<ReadonlyArray<Message.UserMessage>> } }) =>
  Effect.map(agent.inbox.nextTurn, (messages) => messages.map((m): string => m.id))

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (failure === undefined) throw new Error(`expected a plain failure, got ${exit.cause._tag}`)
  return failure
}

describe("APP-01 run", () => {
  it.scoped("APP-01 several follow-ups queued: each run gets its own turn's result, in order", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const context = yield* runtime([
        [Model.text("calling "), Model.toolCall("c1", "gate", "{}")],
        Model.text("one"),
        Model.text("two"),
        [Model.reasoning("thinking"), Model.text("three")]
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "queued",
          options: route,
          setup: (setup) => setup.tools.register(gateTool(started, gate))
        })
        const first = yield* Effect.fork(agent.run("first", { messageId: "m1" }))
        yield* Deferred.await(started)
        const second = yield* Effect.fork(agent.run(Message.user("second", { id: "m2" })))
        yield* eventually(() => Effect.map(pendingIds(agent), (ids) => ids.includes("m2")))
        const third = yield* Effect.fork(agent.run("third", { messageId: "m3" }))
        yield* eventually(() => Effect.map(pendingIds(agent), (ids) => ids.length === 2))
        yield* Deferred.succeed(gate, undefined)
        const [one, two, three] = yield* Fiber.join(Fiber.zip(Fiber.zip(first, second), third)).pipe(
          Effect.map(([[a, b], c]) => [a, b, c] as const)
        )
        assert.deepStrictEqual([one.turn, two.turn, three.turn], [1, 2, 3])
        assert.deepStrictEqual([one.text, two.text, three.text], ["one", "two", "three"])
        assert.isTrue(one instanceof TurnResult.TurnResult)
        assert.deepStrictEqual(one.reason, { kind: "completed" })
        // the first turn: the reply that called the tool, the tool's result, the last reply
        assert.deepStrictEqual(one.messages.map((m) => m.role), ["assistant", "tool", "assistant"])
        assert.deepStrictEqual(
          one.toolCalls.map((c) => ({ ...c })),
          [{ callId: "c1", name: "gate", arguments: "{}", result: "opened", isError: false }]
        )
        // scripted usage: one output token per character; input: the request's message count
        assert.deepStrictEqual(one.usage, { inputTokens: 1 + 3, outputTokens: "calling ".length + 2 + "one".length })
        assert.deepStrictEqual(three.usage, { inputTokens: 7, outputTokens: "thinking".length + "three".length })
        const events = yield* agent.session.events
        assert.strictEqual(events[one.seq.from]!.type, "turn/start")
        assert.strictEqual(events[one.seq.to]!.type, "turn/end")
        assert.isTrue(one.seq.to < two.seq.from && two.seq.to < three.seq.from)
        // what the log says of each turn is what run returned
        for (const result of [one, two, three]) {
          assert.deepStrictEqual(yield* agent.turnResult(result.turn), Option.some(result))
        }
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 text is \"\" when the last assistant message had only tool calls (max-steps), and the run fails TurnFailed with the partial result", () =>
    Effect.gen(function*() {
      const context = yield* runtime([Model.toolCall("c1", "echo", "{\"x\":1}")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const echo = Tool.make({
          name: "echo",
          description: "Echoes",
          parameters: Schema.Struct({ x: Schema.Number }),
          run: ({ x }) => Effect.succeed(Tool.text(`x=${x}`))
        })
        const { agent } = yield* registry.create({
          sessionId: "max-steps",
          options: { ...route, maxStepsPerTurn: 1 },
          setup: (setup) => setup.tools.register(echo)
        })
        const error = failureOf(yield* Effect.exit(agent.run("go")))
        assert.isTrue(error instanceof AgentError.TurnFailed)
        const failed = error as AgentError.TurnFailed
        assert.deepStrictEqual(failed.reason, { kind: "max-steps" })
        assert.strictEqual(failed.turn, 1)
        assert.strictEqual(failed.partial.text, "")
        assert.deepStrictEqual(failed.partial.toolCalls.map((c) => [c.callId, c.result, c.isError]), [["c1", "x=1", false]])
        assert.include(failed.message, "max-steps")
        assert.deepStrictEqual(yield* agent.turnResult(1), Option.some(failed.partial))
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 a turn ending error fails TurnFailed{error} with its code; aborted by a cancel fails TurnFailed{aborted}", () =>
    Effect.gen(function*() {
      const context = yield* runtime([[Model.text("partial "), Model.fail("AUTH")], Model.hang("so far")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "failing", options: route })
        const error = failureOf(yield* Effect.exit(agent.run("one")))
        assert.isTrue(error instanceof AgentError.TurnFailed)
        const failed = error as AgentError.TurnFailed
        assert.strictEqual(failed.reason.kind, "error")
        assert.strictEqual(failed.reason.kind === "error" ? failed.reason.error.code : "", "AUTH")
        assert.include(failed.message, "AUTH")
        const hanging = yield* Effect.fork(agent.run("two"))
        yield* Effect.flatMap(Model.ScriptedModel, (model) => model.awaitRequest(2))
        yield* agent.cancel({ kind: "user" })
        const aborted = failureOf(yield* Fiber.await(hanging))
        assert.isTrue(aborted instanceof AgentError.TurnFailed)
        assert.deepStrictEqual((aborted as AgentError.TurnFailed).reason, { kind: "aborted", cause: { kind: "user" } })
        // the interrupted reply is logged: what it streamed is the partial text
        assert.strictEqual((aborted as AgentError.TurnFailed).partial.text, "so far")
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 a hook's reject fails TurnFailed{blocked}; a hook's replacement still makes its turn the run's", () =>
    Effect.gen(function*() {
      const context = yield* runtime([Model.text("replaced answer")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "hooked",
          options: route,
          setup: (setup) =>
            setup.hooks.preStep(({ messages }) =>
              Effect.succeed(
                messages.some((m) => Message.textOf(m.content) === "forbidden")
                  ? { kind: "reject", reason: "not allowed" } as const
                  : {
                    kind: "enter",
                    messages: messages.map((m) => Message.user(`${Message.textOf(m.content)}!`, { id: `${m.id}-x` }))
                  } as const
              )
            )
        })
        const blocked = failureOf(yield* Effect.exit(agent.run("forbidden", { messageId: "f" })))
        assert.isTrue(blocked instanceof AgentError.TurnFailed)
        assert.deepStrictEqual((blocked as AgentError.TurnFailed).reason, { kind: "blocked", reason: "not allowed" })
        const replaced = yield* agent.run("fine", { messageId: "ok" })
        assert.strictEqual(replaced.turn, 2)
        assert.strictEqual(replaced.text, "replaced answer")
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 a message canceled before a turn claimed it fails MessageDiscarded; one parked by keepInbox keeps waiting", () =>
    Effect.gen(function*() {
      const context = yield* runtime([Model.hang("busy"), Model.hang("held"), Model.text("parked ran")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "discarded", options: route })
        const awaitRequest = (n: number) => Effect.flatMap(Model.ScriptedModel, (model) => model.awaitRequest(n))
        const busy = yield* Effect.fork(agent.run("busy", { messageId: "b" }))
        yield* awaitRequest(1)
        const queued = yield* Effect.fork(agent.run("queued", { messageId: "q" }))
        yield* eventually(() => Effect.map(pendingIds(agent), (ids) => ids.includes("q")))
        yield* agent.cancel({ kind: "user" })
        const discarded = failureOf(yield* Fiber.await(queued))
        assert.isTrue(discarded instanceof AgentError.MessageDiscarded)
        assert.strictEqual((discarded as AgentError.MessageDiscarded).messageId, "q")
        assert.isTrue(failureOf(yield* Fiber.await(busy)) instanceof AgentError.TurnFailed)
        // parked: a cancel keeping the inbox leaves the run waiting for the turn that takes it
        const held = yield* Effect.fork(agent.run("held", { messageId: "h" }))
        yield* awaitRequest(2)
        const parked = yield* Effect.fork(agent.run("parked", { messageId: "p" }))
        yield* eventually(() => Effect.map(pendingIds(agent), (ids) => ids.includes("p")))
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        assert.isTrue(failureOf(yield* Fiber.await(held)) instanceof AgentError.TurnFailed)
        yield* agent.whenIdle
        assert.deepStrictEqual(yield* pendingIds(agent), ["p"])
        assert.isNull(parked.unsafePoll())
        yield* agent.wake
        const ran = yield* Fiber.join(parked)
        assert.strictEqual(ran.text, "parked ran")
        assert.strictEqual(ran.turn, 3)
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 an interrupted caller leaves its turn running; with cancelOnInterrupt it cancels its own turn only", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const context = yield* runtime([
        Model.toolCall("c1", "gate", "{}"),
        Model.text("finished anyway"),
        Model.hang("cut"),
        Model.text("next one ran")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "interrupted",
          options: route,
          setup: (setup) => setup.tools.register(gateTool(started, gate))
        })
        const caller = yield* Effect.fork(agent.run("go"))
        yield* Deferred.await(started)
        yield* Fiber.interrupt(caller)
        yield* Deferred.succeed(gate, undefined)
        yield* agent.whenIdle
        const kept = yield* agent.turnResult(1)
        assert.isTrue(Option.isSome(kept) && kept.value.text === "finished anyway")
        // cancelOnInterrupt: its own running turn is canceled; a run queued behind it still runs
        const own = yield* Effect.fork(agent.run("cut me", { cancelOnInterrupt: true }))
        yield* Effect.flatMap(Model.ScriptedModel, (model) => model.awaitRequest(3))
        const next = yield* Effect.fork(agent.run("after", { messageId: "after" }))
        yield* eventually(() => Effect.map(pendingIds(agent), (ids) => ids.includes("after")))
        yield* Fiber.interrupt(own)
        const ran = yield* Fiber.join(next)
        assert.strictEqual(ran.text, "next one ran")
        const cut = yield* agent.turnResult(2)
        assert.deepStrictEqual(Option.map(cut, (r): unknown => r.reason), Option.some<unknown>({ kind: "aborted", cause: { kind: "user" } }))
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 cancelOnInterrupt withdraws its own pending message (canceled), leaving the running turn alone", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const context = yield* runtime([Model.toolCall("c1", "gate", "{}"), Model.text("first done")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "withdrawn",
          options: route,
          setup: (setup) => setup.tools.register(gateTool(started, gate))
        })
        const first = yield* Effect.fork(agent.run("first"))
        yield* Deferred.await(started)
        const second = yield* Effect.fork(agent.run("second", { messageId: "w", cancelOnInterrupt: true }))
        yield* eventually(() => Effect.map(pendingIds(agent), (ids) => ids.includes("w")))
        yield* Fiber.interrupt(second)
        assert.deepStrictEqual(yield* pendingIds(agent), [])
        yield* Deferred.succeed(gate, undefined)
        assert.strictEqual((yield* Fiber.join(first)).text, "first done")
        const splices = (yield* agent.session.events).filter((e) => e.type === "agent/inbox/spliced")
          .map((e) => e.data as { readonly removed: ReadonlyArray<string>; readonly outcome?: string })
        assert.isTrue(splices.some((d) => d.removed.includes("w") && d.outcome === "canceled"))
        assert.strictEqual(yield* agent.session.events.pipe(Effect.map((es) => es.filter((e) => e.type === "turn/start").length)), 1)
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 a duplicate MessageId fails DuplicateMessage as send does; awaitTurn answers ended, running and unknown turns", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const context = yield* runtime([Model.text("hello"), Model.toolCall("c1", "gate", "{}"), Model.text("done")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "duplicate",
          options: route,
          setup: (setup) => setup.tools.register(gateTool(started, gate))
        })
        const first = yield* agent.run("hi", { messageId: "same" })
        const again = failureOf(yield* Effect.exit(agent.run("hi", { messageId: "same" })))
        assert.isTrue(again instanceof AgentError.DuplicateMessage)
        assert.deepStrictEqual(yield* agent.awaitTurn(1), first)
        const notFound = failureOf(yield* Effect.exit(agent.awaitTurn(7)))
        assert.isTrue(notFound instanceof AgentError.TurnNotFound)
        assert.include(notFound.message, "last turn is 1")
        const running = yield* Effect.fork(agent.run("second"))
        yield* Deferred.await(started)
        assert.isTrue(Option.isNone(yield* agent.turnResult(2)))
        const awaited = yield* Effect.fork(agent.awaitTurn(2))
        yield* Deferred.succeed(gate, undefined)
        const result = yield* Fiber.join(running)
        assert.deepStrictEqual(yield* Fiber.join(awaited), result)
        assert.strictEqual(result.text, "done")
      }).pipe(Effect.provide(context))
    }))

  it.scoped("APP-01 turnResult after a restart (real files) equals what run returned", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-run-" })
      const echo = Tool.make({
        name: "echo",
        description: "Echoes",
        parameters: Schema.Struct({ x: Schema.Number }),
        run: ({ x }) => Effect.succeed(Tool.text(`x=${x}`))
      })
      const layerOf = (script: Script) =>
        NodeFileSessionPersistence.layerRuntime({ directory }).pipe(Layer.provide(Model.layerScripted(script)))
      const first = yield* runtimeOf(layerOf([[Model.text("let me see"), Model.toolCall("c1", "echo", "{\"x\":2}")], Model.text("it is 2")]))
      const returned = yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "restarted",
          options: route,
          setup: (setup) => setup.tools.register(echo)
        })
        return yield* agent.run("what is x?")
      }).pipe(Effect.provide(first.context), Effect.scoped)
      yield* first.close
      const second = yield* runtimeOf(layerOf([]))
      const read = yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.resume({ sessionId: "restarted", options: route })
        return [yield* agent.turnResult(returned.turn), yield* agent.awaitTurn(returned.turn)] as const
      }).pipe(Effect.provide(second.context), Effect.scoped)
      assert.strictEqual(returned.text, "it is 2")
      assert.deepStrictEqual(read[0], Option.some(returned))
      assert.deepStrictEqual(read[1], returned)
      // it survives the wire: encoded and decoded by its Schema, it is the same value
      const encoded = yield* Schema.encode(TurnResult.TurnResult)(returned)
      assert.deepStrictEqual(yield* Schema.decode(TurnResult.TurnResult)(JSON.parse(JSON.stringify(encoded))), returned)
    }).pipe(Effect.provide(NodeContext.layer)))
})

/** A logger that keeps each line's level, message and annotations. */
const captured = () => {
  const lines: Array<{ readonly level: string; readonly message: string; readonly annotations: Record<string, unknown> }> = []
  const logger = Logger.make(({ annotations, logLevel, message }) => {
    lines.push({
      level: logLevel.label,
      message: Array.isArray(message) ? message.join(" ") : String(message),
      annotations: Object.fromEntries(HashMap.toEntries(annotations))
    })
  })
  return { lines, layer: Logger.replace(Logger.defaultLogger, logger) }
}

describe("APP-03 failures are visible", () => {
  it.scoped("APP-03 a turn error nobody receives is one Warning line (session, turn, code, message); a run caller's is not logged; logTurnErrors: false silences it", () =>
    Effect.gen(function*() {
      const logs = captured()
      yield* Effect.gen(function*() {
        const context = yield* runtime([Model.fail("AUTH"), Model.fail("BAD_REQUEST"), Model.fail("AUTH")])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const { agent } = yield* registry.create({ sessionId: "noisy", options: route })
          // a follow-up nobody waits on: the error is logged once
          yield* agent.followup(Message.user("unheard"))
          yield* agent.whenIdle
          // a run caller receives it: nothing logged
          const exit = yield* Effect.exit(agent.run("heard"))
          assert.isTrue(Exit.isFailure(exit))
          const quiet = yield* registry.create({ sessionId: "quiet", options: { ...route, logTurnErrors: false } })
          yield* quiet.agent.followup(Message.user("silenced"))
          yield* quiet.agent.whenIdle
          assert.deepStrictEqual(
            (yield* quiet.agent.session.events).filter((e) => e.type === "turn/end").map((e) => (e.data as { readonly reason: { readonly kind: string } }).reason.kind),
            ["error"]
          )
        }).pipe(Effect.provide(context))
      }).pipe(Effect.provide(logs.layer), Logger.withMinimumLogLevel(LogLevel.Debug))
      const warnings = logs.lines.filter((line) => line.level === "WARN")
      assert.strictEqual(warnings.length, 1, JSON.stringify(logs.lines))
      assert.include(warnings[0]!.message, "turn 1")
      assert.include(warnings[0]!.message, "\"noisy\"")
      assert.include(warnings[0]!.message, "AUTH")
      assert.deepStrictEqual(warnings[0]!.annotations, { sessionId: "noisy", turn: 1, code: "AUTH" })
    }))
})
