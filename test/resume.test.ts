import { Command, FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Ref, Schema, Stream } from "effect"
import { fileURLToPath } from "node:url"
import * as AgentError from "../src/AgentError.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Repair from "../src/Repair.js"
import * as Session from "../src/Session.js"
import * as SessionEvent from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as SessionPersistenceModule from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { watch } from "./fixtures/lifecycle.js"
import { makeRuntime, makeVolatileRuntime, route } from "./fixtures/runtime.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

const sid = (id: string) => id as SessionId

class Boom extends Schema.TaggedError<Boom>()("Boom", {}) {}

const typesOf = (events: ReadonlyArray<SessionEvent.SessionEvent>) => events.map((e) => e.type)

/** Stores a session `id` with one completed turn (in a runtime of its own over `storage`). */
const storeOneTurn = (
  storage: SessionPersistenceModule.MemoryStorage,
  id: string,
  options?: { readonly options?: typeof route | undefined }
) =>
  Effect.gen(function*() {
    const rt = yield* makeRuntime([Model.text("stored answer")], { storage })
    yield* Effect.gen(function*() {
      const registry = yield* AgentRegistry
      const handle = yield* registry.create({ sessionId: id, options: options?.options ?? route })
      yield* handle.agent.followup(Message.user("stored question", { id: `${id}-m1` }))
      yield* handle.agent.whenIdle
      yield* handle.dispose
    }).pipe(Effect.provide(rt.context))
    yield* rt.closeLoop
    return (yield* storage.events(sid(id))) ?? []
  })

describe("resume (RES)", () => {
  it.scoped("RES-01 without persistence resume fails PersistenceNotConfigured, never a silent create", () =>
    Effect.gen(function*() {
      const rt = yield* makeVolatileRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const error = yield* Effect.flip(registry.resume({ sessionId: "a", setup: () => Effect.die("never runs") }))
        assert.instanceOf(error, AgentError.PersistenceNotConfigured)
        assert.deepStrictEqual(yield* registry.list, [])
        // resumeOrCreate creates instead, and says so
        const handle = yield* registry.resumeOrCreate({ sessionId: "a" })
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:a:startup"), [
          "AgentCreated:a",
          "AgentSessionStart:a:startup"
        ])
        yield* handle.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("RES-02 RES-04 resuming a live id fails SessionAlreadyLive before opening the writer; the live turn is untouched", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.hang("working")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "a", options: route })
        yield* handle.agent.followup(Message.user("go", { id: "m1" }))
        yield* rt.model.awaitRequest(1)
        const before = yield* handle.agent.session.events
        const error = yield* Effect.flip(registry.resume({ sessionId: "a" }))
        assert.strictEqual(error._tag, "SessionAlreadyLive")
        assert.deepStrictEqual(yield* rt.trace, [], "no writer was opened")
        assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), handle.agent)
        assert.strictEqual(yield* handle.agent.status, "running")
        assert.deepStrictEqual(yield* handle.agent.session.events, before)
        yield* handle.agent.cancel({ kind: "user" })
        yield* handle.agent.whenIdle
        const ends = (yield* handle.agent.session.events).filter(SessionEvent.is("turn/end"))
        assert.deepStrictEqual(ends.map((e) => e.data.reason), [{ kind: "aborted", cause: { kind: "user" } }])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("RES-02 the writer comes first: a concurrent resume of the same id fails SessionLocked", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistenceModule.makeMemoryStorage
      yield* storeOneTurn(storage, "s")
      const rt = yield* makeRuntime([], { storage })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const inSetup = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const first = yield* registry.resume({
          sessionId: "s",
          setup: () => Effect.zipRight(Deferred.succeed(inSetup, undefined), Deferred.await(release))
        }).pipe(Effect.fork)
        yield* Deferred.await(inSetup)
        const second = yield* Effect.flip(registry.resume({ sessionId: "s", setup: () => Effect.die("never runs") }))
        assert.strictEqual(second._tag, "SessionLocked")
        yield* Deferred.succeed(release, undefined)
        const handle = yield* Fiber.join(first)
        assert.strictEqual(Option.getOrThrow(yield* registry.get("s")), handle.agent)
        yield* handle.dispose
        assert.deepStrictEqual(yield* rt.trace, [
          // the second resume's failed open: the first still held the writer
          "writer-released s session-live=false locked",
          "session-detach s agent-live=false",
          "writer-released s session-live=false free"
        ])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("RES-02 a writer that arrives after the resume was interrupted is released and never publishes", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistenceModule.makeMemoryStorage
      const stored = yield* storeOneTurn(storage, "s")
      const gate = yield* Deferred.make<void>()
      const rt = yield* makeRuntime([], { storage, openWriteGate: gate })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const setupRan = yield* Ref.make(false)
        const resuming = yield* registry.resume({ sessionId: "s", setup: () => Ref.set(setupRan, true) }).pipe(
          Effect.fork
        )
        yield* rt.openWriteCalled
        const interrupting = yield* Effect.fork(Fiber.interrupt(resuming))
        yield* Deferred.succeed(gate, undefined)
        assert.isTrue(Exit.isInterrupted(yield* Fiber.join(interrupting)))
        assert.isFalse(yield* Ref.get(setupRan))
        assert.deepStrictEqual(yield* rt.trace, ["writer-released s session-live=false free"])
        assert.deepStrictEqual(yield* registry.list, [])
        assert.deepStrictEqual(yield* storage.events(sid("s")), stored)
        // the id is resumable, and nothing was published before this resume's events
        const handle = yield* registry.resume({ sessionId: "s" })
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:s:resume"), [
          "AgentCreated:s",
          "AgentSessionStart:s:resume"
        ])
        yield* handle.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("RES-03 an interrupted final turn is closed durably before publication; the next turn number follows it", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistenceModule.makeMemoryStorage
      const toolStarted = yield* Deferred.make<void>()
      const slow = Tool.make({
        name: "slow",
        description: "never finishes",
        parameters: Schema.Struct({}),
        run: () => Effect.zipRight(Deferred.succeed(toolStarted, undefined), Effect.never)
      })
      // "process" p1 runs a turn whose tool never finishes, then crashes
      const p1 = yield* makeRuntime([Model.text("first"), Model.toolCall("c1", "slow", "{}")], {
        storage,
        instanceId: "p1"
      })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({
          sessionId: "s",
          options: route,
          setup: (agent) => agent.tools.register(slow)
        })
        yield* handle.agent.followup(Message.user("one", { id: "m1" }))
        yield* handle.agent.whenIdle
        yield* handle.agent.followup(Message.user("two", { id: "m2" }))
        yield* Deferred.await(toolStarted)
      }).pipe(Effect.provide(p1.context))
      yield* storage.crash("p1")
      const crashed = (yield* storage.events(sid("s"))) ?? []
      assert.deepStrictEqual(typesOf(crashed).slice(-2), ["assistant/message", "tool/call"])

      // a fresh "process" p2 over the same storage
      const p2 = yield* makeRuntime([Model.text("after repair")], { storage, instanceId: "p2" })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const storedAtPublication = yield* Ref.make<ReadonlyArray<string>>([])
        yield* registry.onCreated(() =>
          Effect.flatMap(storage.events(sid("s")), (events) => Ref.set(storedAtPublication, typesOf(events ?? [])))
        )
        const handle = yield* registry.resume({ sessionId: "s", options: route })
        const events = yield* handle.agent.session.events
        const closers = events.slice(crashed.length)
        assert.deepStrictEqual(typesOf(closers), ["tool/result", "step/end", "turn/end"])
        assert.deepStrictEqual(
          yield* Ref.get(storedAtPublication),
          typesOf(events),
          "the closers were durable before publication"
        )
        const result = closers.filter(SessionEvent.is("tool/result"))
        assert.deepStrictEqual(result.map((e) => [e.data.message.toolCallId, e.data.error?.code]), [
          ["c1", Repair.ToolOutcomeUnknown.code]
        ])
        assert.deepStrictEqual(closers.filter(SessionEvent.is("turn/end")).map((e) => e.data), [
          { turn: 2, reason: { kind: "interrupted" } }
        ])
        assert.strictEqual(handle.agent.session.firstLiveSeq, events.length)

        yield* handle.agent.followup(Message.user("three", { id: "m3" }))
        yield* handle.agent.whenIdle
        const after = yield* handle.agent.session.events
        assert.deepStrictEqual(after.filter(SessionEvent.is("turn/start")).map((e) => e.data.turn), [1, 2, 3])
        const request = yield* p2.model.awaitRequest(1)
        const toolResults = request.messages.filter((m) => m.role === "tool")
        assert.deepStrictEqual(toolResults.map((m) => (m.role === "tool" ? [m.toolCallId, m.isError] : [])), [
          ["c1", true]
        ])
        assert.isTrue(
          request.messages.some((m) =>
            m.role === "user" && m.source.kind === "system" && Message.textOf(m.content) === Repair.interruptedNote
          ),
          "the model sees that the previous turn was interrupted"
        )
        assert.deepStrictEqual(yield* storage.events(sid("s")), after)
        yield* handle.dispose
      }).pipe(Effect.provide(p2.context))
    }))

  it.scoped("RES-07 RES-08 history, numbering, pending inbox and header come back exactly; the route comes from options, else the log", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistenceModule.makeMemoryStorage
      const p1 = yield* makeRuntime([Model.text("one")], { storage })
      const options = { ...route, maxTokens: 100, system: "be brief" }
      const header = yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "s", options, meta: { project: "x" } })
        yield* handle.agent.followup(Message.user("first", { id: "m1" }))
        yield* handle.agent.whenIdle
        yield* handle.agent.inbox.append("next-turn", Message.user("pending turn", { id: "m2" }))
        yield* handle.agent.inject(Message.user("pending step", { id: "m3" }))
        yield* handle.dispose
        return handle.agent.session.header
      }).pipe(Effect.provide(p1.context))
      const stored = (yield* storage.events(sid("s"))) ?? []

      const p2 = yield* makeRuntime([Model.text("two"), Model.text("three"), Model.text("four")], { storage })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.resume({ sessionId: "s" })
        const agent = handle.agent
        assert.deepStrictEqual(agent.session.header, header)
        assert.deepStrictEqual(agent.session.header.meta, { project: "x" })
        assert.deepStrictEqual(yield* agent.session.events, stored)
        assert.strictEqual(agent.session.firstLiveSeq, stored.length)
        assert.deepStrictEqual(yield* agent.session.messages, Session.deriveMessages(stored))
        assert.deepStrictEqual((yield* agent.inbox.nextTurn).map((m) => m.id), ["m2"])
        assert.deepStrictEqual((yield* agent.inbox.nextStep).map((m) => m.id), ["m3"])
        // the inbox replayed on resume knows every id the log accepted, entered and pending alike
        for (const id of ["m1", "m2", "m3"]) {
          const duplicate = yield* Effect.flip(agent.inbox.append("next-turn", Message.user("again", { id })))
          assert.instanceOf(duplicate, AgentError.DuplicateMessage)
        }
        assert.deepStrictEqual(yield* agent.session.events, stored, "a refused insert writes nothing")
        assert.deepStrictEqual((yield* registry.roots).map((a) => a.id), ["s"], "a resumed agent is a root")

        yield* agent.followup(Message.user("second", { id: "m4" }))
        yield* agent.whenIdle
        const first = yield* p2.model.awaitRequest(1)
        assert.deepStrictEqual(
          [first.provider, first.model, first.maxTokens, first.system],
          ["scripted", "test", 100, "be brief"],
          "the route of the last request/config"
        )
        assert.deepStrictEqual(first.messages.filter((m) => m.role === "user").map((m) => m.id), ["m1", "m3", "m2"])
        const second = yield* p2.model.awaitRequest(2)
        assert.deepStrictEqual(second.messages.filter((m) => m.role === "user").map((m) => m.id), [
          "m1",
          "m3",
          "m2",
          "m4"
        ])
        const events = yield* agent.session.events
        assert.deepStrictEqual(events.filter(SessionEvent.is("turn/start")).map((e) => e.data.turn), [1, 2, 3])
        assert.deepStrictEqual(events.map((e) => e.seq), events.map((_, i) => i))
        yield* handle.dispose

        // route fields given in options win over the log
        const again = yield* registry.resume({ sessionId: "s", options: { model: "override", system: "new" } })
        yield* again.agent.followup(Message.user("third", { id: "m5" }))
        yield* again.agent.whenIdle
        const third = yield* p2.model.awaitRequest(3)
        assert.deepStrictEqual(
          [third.provider, third.model, third.maxTokens, third.system],
          ["scripted", "override", 100, "new"]
        )
        yield* again.dispose
      }).pipe(Effect.provide(p2.context))
    }))

  it.scoped("RES-07/08 without provider or model the turn ends error NO_ROUTE, on create and on resume", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.text("routed")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const reasons = (handle: { readonly agent: { readonly session: Session.Session } }) =>
          Effect.map(handle.agent.session.events, (events) =>
            events.filter(SessionEvent.is("turn/end")).map((e) =>
              e.data.reason.kind === "error" ? e.data.reason.error.code : e.data.reason.kind
            ))
        const created = yield* registry.create({ sessionId: "n", options: { provider: "scripted" } })
        yield* created.agent.followup(Message.user("one", { id: "m1" }))
        yield* created.agent.whenIdle
        assert.deepStrictEqual(yield* reasons(created), ["NO_ROUTE"])
        yield* created.dispose
        const resumed = yield* registry.resume({ sessionId: "n" })
        yield* resumed.agent.followup(Message.user("two", { id: "m2" }))
        yield* resumed.agent.whenIdle
        assert.deepStrictEqual(yield* reasons(resumed), ["NO_ROUTE", "NO_ROUTE"])
        assert.deepStrictEqual(yield* rt.model.requests, [], "no request was sent")
        yield* resumed.dispose
        const routed = yield* registry.resume({ sessionId: "n", options: route })
        yield* routed.agent.followup(Message.user("three", { id: "m3" }))
        yield* routed.agent.whenIdle
        assert.deepStrictEqual(yield* reasons(routed), ["NO_ROUTE", "NO_ROUTE", "completed"])
        yield* routed.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("RES-11 a failed resume (vetoing hook, failing setup) leaves the stored session resumable, its writer released", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistenceModule.makeMemoryStorage
      const stored = yield* storeOneTurn(storage, "s")
      const rt = yield* makeRuntime([], { storage })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const veto = yield* Ref.make(true)
        yield* registry.onCreated(() =>
          Effect.flatMap(Ref.get(veto), (v) => (v ? Effect.fail("not now") : Effect.void))
        )
        const vetoed = yield* Effect.flip(registry.resume({ sessionId: "s" }))
        assert.instanceOf(vetoed, AgentError.AgentCreationVetoed)
        yield* Ref.set(veto, false)
        const failed = yield* Effect.flip(registry.resume({ sessionId: "s", setup: () => new Boom() }))
        assert.instanceOf(failed, Boom)
        assert.deepStrictEqual(yield* rt.trace, [
          "session-detach s agent-live=false",
          "writer-released s session-live=false free",
          "writer-released s session-live=false free"
        ])
        assert.deepStrictEqual(yield* storage.events(sid("s")), stored, "a failed resume writes nothing")
        assert.deepStrictEqual(yield* registry.list, [])
        const handle = yield* registry.resume({ sessionId: "s" })
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:s:resume"), [
          "AgentCreated:s",
          "AgentDisposed:s",
          "AgentCreated:s",
          "AgentSessionStart:s:resume"
        ])
        yield* handle.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("resumeOrCreate creates when nothing is stored, else resumes (ignoring seed and meta); AgentSessionStart.source tells which", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const created = yield* registry.resumeOrCreate({ sessionId: "x", meta: { first: true } })
        yield* created.dispose
        const resumed = yield* registry.resumeOrCreate({
          sessionId: "x",
          meta: { first: false },
          seed: [{ seq: 0, time: 0, type: "test/ignored", data: null }]
        })
        assert.deepStrictEqual(resumed.agent.session.header.meta, { first: true })
        assert.deepStrictEqual(yield* resumed.agent.session.events, [])
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:x:resume"), [
          "AgentCreated:x",
          "AgentSessionStart:x:startup",
          "AgentDisposed:x",
          "AgentCreated:x",
          "AgentSessionStart:x:resume"
        ])
        yield* resumed.dispose
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("resume over files", () => {
  /** `NodeFileSessionPersistence.layerRuntime` over `directory`, built in the current Scope. */
  const fileRuntime = (directory: string, script: Model.Script) =>
    Effect.gen(function*() {
      const model = yield* Model.scripted(script)
      const context = yield* Layer.build(
        NodeFileSessionPersistence.layerRuntime({ directory, durability: "buffered" }).pipe(
          Layer.provide(model.layer)
        )
      )
      return { model, context }
    })

  it.scoped("resumeOrCreate: a stored but unreadable session is a loud error and is never replaced", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-resume-" })
      const first = yield* fileRuntime(directory, [Model.text("stored")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "f", options: route })
        yield* handle.agent.followup(Message.user("hello", { id: "m1" }))
        yield* handle.agent.whenIdle
        yield* handle.dispose
      }).pipe(Effect.scoped, Effect.provide(first.context))
      const file = `${directory}/f.jsonl`
      const lines = (yield* fs.readFileString(file)).split("\n")
      lines[2] = "{ this is not json"
      const corrupt = lines.join("\n")
      yield* fs.writeFileString(file, corrupt)

      const second = yield* fileRuntime(directory, [])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const error = yield* Effect.flip(registry.resumeOrCreate({ sessionId: "f" }))
        assert.strictEqual(error._tag, "SessionCorrupt")
        if (error._tag === "SessionCorrupt") assert.strictEqual(error.line, 3)
        assert.deepStrictEqual(yield* registry.list, [])
      }).pipe(Effect.scoped, Effect.provide(second.context))
      assert.strictEqual(yield* fs.readFileString(file), corrupt, "the stored session was not replaced")
      const exists = Effect.flatMap(SessionPersistence, (p) => p.exists(sid("f")))
      assert.isTrue(yield* Effect.provide(exists, second.context))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("RES-07 NodeFileSessionPersistence.layerRuntime: an agent another process created resumes with its history", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-child-" })
      const fixture = fileURLToPath(new URL("./fixtures/childAgent.ts", import.meta.url))
      const repository = fileURLToPath(new URL("..", import.meta.url))
      const child = yield* Command.make(process.execPath, "--import", "tsx", fixture, directory, "from-child").pipe(
        Command.workingDirectory(repository),
        Command.start
      )
      const [output, errors, exitCode] = yield* Effect.all([
        child.stdout.pipe(Stream.decodeText(), Stream.mkString),
        child.stderr.pipe(Stream.decodeText(), Stream.mkString),
        child.exitCode
      ], { concurrency: "unbounded" })
      assert.strictEqual(exitCode, 0, errors)
      assert.isTrue(output.startsWith("done "), output)
      const childPid = Number(output.trim().slice("done ".length))
      assert.notStrictEqual(childPid, process.pid)

      const here = yield* fileRuntime(directory, [Model.text("answer from the parent process")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.resume({ sessionId: "from-child" })
        const messages = yield* handle.agent.session.messages
        assert.deepStrictEqual(
          messages.map((m) => `${m.role}:${Message.textOf(m.content)}`),
          ["user:hello from the child process", "assistant:answer from the child process"]
        )
        yield* handle.agent.followup(Message.user("hello from the parent", { id: "parent-m1" }))
        yield* handle.agent.whenIdle
        const events = yield* handle.agent.session.events
        assert.deepStrictEqual(events.filter(SessionEvent.is("turn/start")).map((e) => e.data.turn), [1, 2])
        // the route comes from the child's last request/config
        const request = yield* here.model.awaitRequest(1)
        assert.deepStrictEqual([request.provider, request.model], ["scripted", "child"])
        yield* handle.dispose
      }).pipe(Effect.scoped, Effect.provide(here.context))
      const stored = (yield* fs.readFileString(`${directory}/from-child.jsonl`)).trim().split("\n")
      assert.include(stored[stored.length - 1], "turn/end")
    }).pipe(Effect.provide(NodeContext.layer)))
})
