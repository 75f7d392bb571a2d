/**
 * SUB-01 / SUB-02: agents as tools (`Tool.agent`) over the real runtime with the scripted model —
 * memory persistence for the in-process cases, real files and a SIGKILLed Node process for the
 * crash cases (`fixtures/subAgentChild.ts`).
 */
import { Command, FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber, Layer, Option, Ref, Schema, Stream } from "effect"
import { fileURLToPath } from "node:url"
import type { Setup } from "../src/Agent.js"
import * as AgentHost from "../src/AgentHost.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { childSessionId } from "../src/internal/agent/subAgent.js"
import { memoryRuntime, route } from "./fixtures/runtime.js"

const delegate = (options?: { readonly setup?: Setup<unknown, AgentRegistry>; readonly maxAgentDepth?: number }) =>
  Tool.agent({
    name: "delegate",
    description: "Hands a task to a sub-agent",
    options: { ...route, ...(options?.maxAgentDepth !== undefined ? { maxAgentDepth: options.maxAgentDepth } : {}) },
    setup: options?.setup
  })

interface ResultData {
  readonly message: { readonly toolCallId: string; readonly content: ReadonlyArray<{ readonly text?: string }>; readonly isError: boolean }
  readonly error?: { readonly code: string }
}

const resultOf = (events: ReadonlyArray<SessionEvent>, callId: string) => {
  const found = events.find((event) =>
    event.type === "tool/result" && (event.data as ResultData).message.toolCallId === callId
  )
  if (found === undefined) throw new Error(`no result for ${callId}`)
  const data = found.data as ResultData
  return { text: data.message.content.map((part) => part.text ?? "").join(""), isError: data.message.isError, code: data.error?.code }
}

const endsOf = (events: ReadonlyArray<SessionEvent>): ReadonlyArray<unknown> =>
  events.filter((event) => event.type === "turn/end").map((event) => (event.data as { reason: unknown }).reason)

const storedEvents = (storage: SessionPersistence.MemoryStorage, id: string) =>
  Effect.map(storage.events(id as SessionId), (events) => events ?? [])

describe("SUB-01 Tool.agent", () => {
  it("SUB-01 the child id is derived purely from the parent id and the call id: stable, distinct, within ID-01", () => {
    const parent = "lead" as SessionId
    const a = childSessionId(parent, "call_1")
    assert.strictEqual(a, childSessionId(parent, "call_1"))
    assert.notStrictEqual(a, childSessionId(parent, "call_2"))
    assert.notStrictEqual(a, childSessionId("lead2" as SessionId, "call_1"))
    assert.match(a, /^lead\.sub-[0-9a-f]{16}$/)
    const long = "x".repeat(128) as SessionId
    const fromLong = childSessionId(long, "c")
    assert.strictEqual(fromLong.length, 128)
    assert.isTrue(Either.isRight(Message.sessionId(fromLong)))
    assert.isTrue(Either.isRight(Message.sessionId(childSessionId(fromLong, "c"))))
    assert.notStrictEqual(childSessionId(fromLong, "c"), fromLong)
  })

  it.scoped("SUB-01 a parent's tool call runs a child: its final text is the result, the header names parent and call, tool/child precedes the child", () =>
    Effect.gen(function*() {
      const { context, model, storage } = yield* memoryRuntime([
        Model.toolCall("c1", "delegate", JSON.stringify({ prompt: "summarise the plan" })),
        Model.text("the plan is short"),
        Model.text("parent done")
      ])
      const childId = childSessionId("lead" as SessionId, "c1")
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const seenAtSetup = yield* Ref.make<ReadonlyArray<string>>([])
        const tool = delegate({
          setup: (child) =>
            Effect.gen(function*() {
              // when the child is being built, the parent's log already records it
              const parent = yield* registry.get("lead")
              const events = Option.isSome(parent) ? yield* parent.value.session.events : []
              yield* Ref.set(seenAtSetup, events.filter((e) => e.type === "tool/child").map((e) => (e.data as { child: string }).child))
              assert.strictEqual(child.id, childId)
            })
        })
        const { agent } = yield* registry.create({ sessionId: "lead", options: route, setup: (s) => s.tools.register(tool) })
        const result = yield* agent.run("plan it")
        assert.strictEqual(result.text, "parent done")
        assert.deepStrictEqual(yield* Ref.get(seenAtSetup), [childId])
        const events = yield* agent.session.events
        const types = events.map((e) => e.type)
        assert.isTrue(types.indexOf("tool/call") < types.indexOf("tool/child"))
        assert.isTrue(types.indexOf("tool/child") < types.indexOf("tool/result"))
        const logged = events.find((e) => e.type === "tool/child")!.data
        assert.deepStrictEqual(logged, { turn: 1, step: 1, callId: "c1", child: childId })
        const outcome = resultOf(events, "c1")
        assert.strictEqual(outcome.text, `[sub-agent ${childId}]\nthe plan is short`)
        assert.isFalse(outcome.isError)
        // the child is disposed after the call; its session stays stored, a child of this call
        assert.isTrue(Option.isNone(yield* registry.get(childId)))
        const persistence = yield* SessionPersistence.SessionPersistence
        const stored = yield* persistence.read(childId)
        assert.deepStrictEqual(stored.header.child, { parent: "lead", callId: "c1" })
        const prompt = stored.events.find((e) => e.type === "user/message")!.data as { message: Message.UserMessage }
        assert.deepStrictEqual(prompt.message.source, { kind: "agent", agent: "lead" as SessionId })
        assert.strictEqual(Message.textOf(prompt.message.content), "summarise the plan")
        assert.deepStrictEqual(endsOf(stored.events), [{ kind: "completed" }])
        assert.strictEqual((yield* model.requests).length, 3)
      }).pipe(Effect.provide(context))
      assert.isDefined(storage)
    }))

  it.scoped("SUB-01 other parameters with a prompt function", () =>
    Effect.gen(function*() {
      const { context } = yield* memoryRuntime([
        Model.toolCall("c1", "translate", JSON.stringify({ text: "hallo", to: "English" })),
        Model.text("hello"),
        Model.text("done")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const translate = Tool.agent({
          name: "translate",
          description: "Translates a text",
          parameters: Schema.Struct({ text: Schema.String, to: Schema.String }),
          prompt: ({ text, to }) => `Translate into ${to}: ${text}`,
          options: route
        })
        const { agent } = yield* registry.create({ sessionId: "p", options: route, setup: (s) => s.tools.register(translate) })
        yield* agent.run("go")
        const childId = childSessionId("p" as SessionId, "c1")
        const stored = yield* (yield* SessionPersistence.SessionPersistence).read(childId)
        const prompt = stored.events.find((e) => e.type === "user/message")!.data as { message: Message.UserMessage }
        assert.strictEqual(Message.textOf(prompt.message.content), "Translate into English: hallo")
        assert.strictEqual(resultOf(yield* agent.session.events, "c1").text, `[sub-agent ${childId}]\nhello`)
      }).pipe(Effect.provide(context))
    }))

  it.scoped("SUB-01 a child turn that fails gives the error result SUBAGENT_FAILED with its reason", () =>
    Effect.gen(function*() {
      const { context, model } = yield* memoryRuntime([
        Model.toolCall("c1", "delegate", JSON.stringify({ prompt: "forbidden work" })),
        Model.text("the sub-agent failed, sorry")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const tool = delegate({
          setup: (child) => child.hooks.preStep(() => Effect.succeed({ kind: "reject", reason: "not allowed here" }))
        })
        const { agent } = yield* registry.create({ sessionId: "lead", options: route, setup: (s) => s.tools.register(tool) })
        const result = yield* agent.run("try")
        assert.strictEqual(result.text, "the sub-agent failed, sorry")
        const outcome = resultOf(yield* agent.session.events, "c1")
        assert.isTrue(outcome.isError)
        assert.strictEqual(outcome.code, "SUBAGENT_FAILED")
        assert.include(outcome.text, "not allowed here")
        assert.include(outcome.text, childSessionId("lead" as SessionId, "c1"))
        assert.strictEqual((yield* model.requests).length, 2)
      }).pipe(Effect.provide(context))
    }))

  it.scoped("SUB-02 cancelling the parent's turn cancels the child's turn with cause parent", () =>
    Effect.gen(function*() {
      const { context, model, storage } = yield* memoryRuntime([
        Model.toolCall("c1", "delegate", JSON.stringify({ prompt: "a long task" })),
        Model.hang("working")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "lead", options: route, setup: (s) => s.tools.register(delegate()) })
        const running = yield* Effect.fork(Effect.either(agent.run("go")))
        yield* model.awaitRequest(2)
        yield* agent.cancel({ kind: "user" })
        const outcome = yield* Fiber.join(running)
        assert.isTrue(Either.isLeft(outcome))
        yield* agent.whenIdle
        const childId = childSessionId("lead" as SessionId, "c1")
        assert.deepStrictEqual(endsOf(yield* storedEvents(storage, childId)), [{ kind: "aborted", cause: { kind: "parent" } }])
        assert.deepStrictEqual(endsOf(yield* agent.session.events), [{ kind: "aborted", cause: { kind: "user" } }])
        assert.isTrue(Option.isNone(yield* registry.get(childId)))
      }).pipe(Effect.provide(context))
    }))

  it.scoped("SUB-02 disposing the parent mid-call cancels the child's turn with cause parent", () =>
    Effect.gen(function*() {
      const { context, model, storage } = yield* memoryRuntime([
        Model.toolCall("c1", "delegate", JSON.stringify({ prompt: "a long task" })),
        Model.hang("working")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "lead", options: route, setup: (s) => s.tools.register(delegate()) })
        yield* handle.agent.followup(Message.user("go"))
        yield* model.awaitRequest(2)
        yield* handle.dispose
        const childId = childSessionId("lead" as SessionId, "c1")
        assert.deepStrictEqual(endsOf(yield* storedEvents(storage, childId)), [{ kind: "aborted", cause: { kind: "parent" } }])
        assert.deepStrictEqual(endsOf(yield* storedEvents(storage, "lead")), [{ kind: "aborted", cause: { kind: "disposed" } }])
        assert.isTrue(Option.isNone(yield* registry.get(childId)))
      }).pipe(Effect.provide(context))
    }))

  it.scoped("SUB-02 maxAgentDepth: a call beyond it is the error result MAX_AGENT_DEPTH and makes no child", () =>
    Effect.gen(function*() {
      const { context, storage } = yield* memoryRuntime([
        Model.toolCall("c1", "delegate", JSON.stringify({ prompt: "go deeper" })),
        Model.toolCall("c2", "delegate", JSON.stringify({ prompt: "deeper still" })),
        Model.text("child stops here"),
        Model.text("lead done")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        // the child has the same tool, but may not go below depth 1
        const inner = delegate()
        const outer = delegate({ maxAgentDepth: 1, setup: (child) => child.tools.register(inner) })
        const { agent } = yield* registry.create({ sessionId: "lead", options: route, setup: (s) => s.tools.register(outer) })
        const result = yield* agent.run("go")
        assert.strictEqual(result.text, "lead done")
        const childId = childSessionId("lead" as SessionId, "c1")
        const childEvents = yield* storedEvents(storage, childId)
        const refused = resultOf(childEvents, "c2")
        assert.strictEqual(refused.code, "MAX_AGENT_DEPTH")
        assert.isTrue(refused.isError)
        assert.isFalse(childEvents.some((e) => e.type === "tool/child"))
        const persistence = yield* SessionPersistence.SessionPersistence
        assert.isFalse(yield* persistence.exists(childSessionId(childId, "c2")))
        assert.strictEqual(resultOf(yield* agent.session.events, "c1").text, `[sub-agent ${childId}]\nchild stops here`)
      }).pipe(Effect.provide(context))
    }))

  it.scoped("SUB-02 maxAgentDepth 0 forbids sub-agents", () =>
    Effect.gen(function*() {
      const { context } = yield* memoryRuntime([
        Model.toolCall("c1", "delegate", JSON.stringify({ prompt: "x" })),
        Model.text("ok")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "lead",
          options: { ...route, maxAgentDepth: 0 },
          setup: (s) => s.tools.register(delegate())
        })
        yield* agent.run("go")
        assert.strictEqual(resultOf(yield* agent.session.events, "c1").code, "MAX_AGENT_DEPTH")
        const persistence = yield* SessionPersistence.SessionPersistence
        assert.isFalse(yield* persistence.exists(childSessionId("lead" as SessionId, "c1")))
      }).pipe(Effect.provide(context))
    }))
})

/** Runs `fixtures/subAgentChild.ts` over `directory` until it is ready, then SIGKILLs it. */
const crashMidChild = (directory: string, mode: "finished" | "unfinished") =>
  Effect.gen(function*() {
    const fixture = fileURLToPath(new URL("./fixtures/subAgentChild.ts", import.meta.url))
    const repository = fileURLToPath(new URL("..", import.meta.url))
    const child = yield* Command.make(process.execPath, "--import", "tsx", fixture, directory, mode).pipe(
      Command.workingDirectory(repository),
      Command.start
    )
    const ready = yield* child.stdout.pipe(
      Stream.decodeText(),
      Stream.takeUntil((text) => text.includes("ready")),
      Stream.mkString
    )
    assert.include(ready, "ready")
    yield* child.kill("SIGKILL")
    yield* child.exitCode.pipe(Effect.ignore)
  })

/** A host with recovery over the files of `directory`, and a scripted model that must not be asked. */
const recoveringHost = (directory: string) =>
  Effect.gen(function*() {
    const model = yield* Model.scripted([Model.text("nobody should ask")])
    const files = NodeFileSessionPersistence.layer({ directory })
    const runtime = AgentRuntime.layer.pipe(Layer.provideMerge(files), Layer.provide(model.layer))
    const context = yield* Layer.build(AgentHost.layer({ recover: true }).pipe(Layer.provideMerge(runtime)))
    return { model, context }
  })

describe("SUB-02 a crash mid-child (real files, a SIGKILLed process)", () => {
  const childId = childSessionId("lead" as SessionId, "c1")

  it.scoped(
    "SUB-02 crash after the child finished: the parent's resume gives the child's result without running it again",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-sub-" })
        yield* crashMidChild(directory, "finished")
        const { context, model } = yield* recoveringHost(directory)
        yield* Effect.gen(function*() {
          const host = yield* AgentHost.AgentHost
          const report = yield* host.recovery
          assert.deepStrictEqual<ReadonlyArray<string>>(report.activated, ["lead"])
          const lead = yield* host.get("lead")
          yield* lead.whenIdle
          const events = yield* lead.session.events
          const c1 = resultOf(events, "c1")
          assert.strictEqual(c1.text, `[sub-agent ${childId}]\nthere are 3 files`)
          assert.isFalse(c1.isError)
          assert.isUndefined(c1.code)
          assert.strictEqual(resultOf(events, "c0").code, "TOOL_OUTCOME_UNKNOWN")
          assert.deepStrictEqual(endsOf(events), [{ kind: "interrupted" }])
          // neither the child nor the parent asked the model again
          assert.strictEqual((yield* model.requests).length, 0)
          const stored = yield* (yield* SessionPersistence.SessionPersistence).read(childId)
          assert.strictEqual(stored.events.filter((e) => e.type === "assistant/message").length, 1)
          assert.deepStrictEqual(endsOf(stored.events), [{ kind: "completed" }])
        }).pipe(Effect.provide(context))
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )

  it.scoped(
    "SUB-02 crash while the child runs: the call gets TOOL_OUTCOME_UNKNOWN and host recovery does not activate the child",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-sub-" })
        yield* crashMidChild(directory, "unfinished")
        const { context, model } = yield* recoveringHost(directory)
        yield* Effect.gen(function*() {
          const host = yield* AgentHost.AgentHost
          const report = yield* host.recovery
          // the child's turn is open too, but a child is never activated as a root
          assert.deepStrictEqual<ReadonlyArray<string>>(report.candidates, ["lead"])
          assert.deepStrictEqual<ReadonlyArray<string>>(report.activated, ["lead"])
          const lead = yield* host.get("lead")
          yield* lead.whenIdle
          const events = yield* lead.session.events
          assert.strictEqual(resultOf(events, "c1").code, "TOOL_OUTCOME_UNKNOWN")
          assert.strictEqual((yield* model.requests).length, 0)
          assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["lead"])
          const registry = yield* AgentRegistry
          assert.isTrue(Option.isNone(yield* registry.get(childId)))
          const stored = yield* (yield* SessionPersistence.SessionPersistence).read(childId)
          assert.deepStrictEqual(stored.header.child, { parent: "lead", callId: "c1" })
          assert.deepStrictEqual(endsOf(stored.events), [])
        }).pipe(Effect.provide(context))
      }).pipe(Effect.provide(NodeContext.layer)),
    120_000
  )
})
