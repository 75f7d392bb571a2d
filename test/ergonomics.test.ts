/**
 * API ergonomics (PKG-03), the shutdown note (PKG-05) and route validation at create (PKG-06),
 * over the real runtime layers, memory persistence and the scripted model.
 */
import { assert, describe, it } from "@effect/vitest"
import {
  Chunk,
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  Layer,
  Option,
  Ref,
  Schema,
  Scope,
  Stream,
  TestClock
} from "effect"
import * as AgentError from "../src/AgentError.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Repair from "../src/Repair.js"
import * as Session from "../src/Session.js"
import type * as SessionEvent from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { watch } from "./fixtures/lifecycle.js"
import { route } from "./fixtures/runtime.js"

const sid = (id: string) => id as SessionId

type Script = Parameters<typeof Model.layerScripted>[0]

/**
 * The runtime over memory persistence (a fresh storage, or the given one) and `Model.layerScripted`,
 * built in the test's Scope: its context also holds `Model.ScriptedModel`.
 */
const runtime = (
  script: Script,
  options?: {
    readonly storage?: SessionPersistence.MemoryStorage | undefined
    readonly routes?: ReadonlyArray<Model.RouteName> | undefined
    readonly around?: Layer.Layer<Tool.ToolRegistry | Tool.LoopHooks, unknown> | undefined
  }
) =>
  Effect.gen(function*() {
    const storage = options?.storage ?? (yield* SessionPersistence.makeMemoryStorage)
    const model = Model.layerScripted(script, { routes: options?.routes })
    const outer = options?.around === undefined ? model : Layer.merge(model, options.around)
    const layer = AgentRuntime.layerMemory({ storage }).pipe(Layer.provideMerge(outer))
    const context = yield* Layer.build(layer).pipe(Effect.orDie)
    return { storage, context }
  })

const requestsOf = Effect.flatMap(Model.ScriptedModel, (model) => model.requests)
const awaitRequest = (n: number) => Effect.flatMap(Model.ScriptedModel, (model) => model.awaitRequest(n))

const eventsOfType = (events: ReadonlyArray<SessionEvent.SessionEvent>, type: string) =>
  events.filter((event) => event.type === type)

const textOfLast = (messages: ReadonlyArray<Message.Message>) => Message.textOf(messages[messages.length - 1]!.content)

const read = Tool.make({
  name: "read",
  description: "Reads a file",
  parameters: Schema.Struct({ path: Schema.String }),
  run: ({ path }) => Effect.succeed(Tool.text(`contents of ${path}`))
})

const count = Tool.make({
  name: "count",
  description: "Counts to n",
  parameters: Schema.Struct({ n: Schema.Number, label: Schema.optional(Schema.String) }),
  run: ({ n }) => Effect.succeed(Tool.text(`counted to ${n}`))
})

class Greeting extends Context.Tag("test/Greeting")<Greeting, string>() {}

const greet = Tool.make({
  name: "greet",
  description: "Greets",
  parameters: Schema.Struct({}),
  run: () => Effect.map(Greeting, (greeting) => Tool.text(greeting))
})

describe("PKG-03 send options", () => {
  it.scoped("PKG-03 send(message, { target, wake }) defaults to next-turn and waking; the positional form still works", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([Model.text("one"), Model.text("two"), Model.text("three")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: route })
        // parked: next-step, no wake
        yield* agent.send(Message.user("parked", { id: "p" }), { target: "next-step", wake: false })
        assert.strictEqual(yield* agent.status, "idle")
        assert.deepStrictEqual((yield* agent.inbox.nextStep).map((m) => m.id), ["p"])
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [])
        // the defaults: next-turn, wakes (a followup)
        yield* agent.send(Message.user("default", { id: "d" }))
        assert.strictEqual(yield* agent.status, "running")
        yield* agent.whenIdle
        // the deprecated positional form keeps v1 semantics
        yield* agent.send(Message.user("positional", { id: "q" }), "next-turn", true)
        yield* agent.whenIdle
        yield* agent.send(Message.user("wake only", { id: "w" }), { wake: true, target: "next-step" })
        yield* agent.whenIdle
        const entered = eventsOfType(yield* agent.session.events, "user/message").map((event) =>
          (event.data as { readonly message: Message.UserMessage }).message.id
        )
        // the parked message entered the first turn's step with the default send
        assert.deepStrictEqual(entered, ["p", "d", "q", "w"])
        assert.strictEqual((yield* requestsOf).length, 3)
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("PKG-03 tool timeout", () => {
  it.scoped("PKG-03 a tool running past its timeout is interrupted and gets a TOOL_TIMEOUT error result the model sees", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      const slow = Tool.make({
        name: "slow",
        description: "Never finishes",
        parameters: Schema.Struct({}),
        timeout: "5 seconds",
        run: () =>
          Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
            Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
          )
      })
      const quick = Tool.make({
        name: "quick",
        description: "Finishes at once",
        parameters: Schema.Struct({}),
        timeout: 1000,
        run: () => Effect.succeed(Tool.text("quick done"))
      })
      const rt = yield* runtime([
        [Model.toolCall("c1", "slow", "{}"), Model.toolCall("c2", "quick", "{}")],
        Model.text("noted")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "s",
          options: route,
          setup: (setup) => setup.tools.registerAll([slow, quick])
        })
        yield* agent.followup(Message.user("go"))
        yield* Deferred.await(started)
        // the timeout's sleep is registered before the clock moves (no real time passes)
        yield* TestClock.sleeps().pipe(Effect.repeat({ until: Chunk.isNonEmpty }))
        yield* TestClock.adjust("5 seconds")
        yield* agent.whenIdle
        assert.isTrue(yield* Deferred.isDone(interrupted))
        const events = yield* agent.session.events
        const results = eventsOfType(events, "tool/result").map((event) =>
          event.data as {
            readonly message: Message.ToolResultMessage
            readonly error?: { readonly name: string; readonly code: string }
          }
        )
        assert.deepStrictEqual(results.map((r) => r.error?.code), ["TOOL_TIMEOUT", undefined])
        assert.isTrue(results[0]!.message.isError)
        assert.include(Message.textOf(results[0]!.message.content), "timeout of 5s")
        assert.include(Message.textOf(results[0]!.message.content), "may have partly run")
        assert.strictEqual(Message.textOf(results[1]!.message.content), "quick done")
        // the turn went on and completed; the log needs no repair
        const turnEnd = eventsOfType(events, "turn/end")[0]!.data as { readonly reason: { readonly kind: string } }
        assert.strictEqual(turnEnd.reason.kind, "completed")
        assert.deepStrictEqual(Repair.closers(events), [])
        // the model saw the timeout result in its next request
        const second = yield* awaitRequest(2)
        const seen = second.messages.filter((m): m is Message.ToolResultMessage => m.role === "tool")
        assert.deepStrictEqual(seen.map((m) => m.toolCallId), ["c1", "c2"])
        assert.isTrue(seen[0]!.isError)
      }).pipe(Effect.provide(rt.context))
    }))

  it("PKG-03 a timeout that is not a positive duration is refused where the tool is defined", () => {
    const define = (timeout: Parameters<typeof Tool.make>[0]["timeout"]) => () =>
      Tool.make({ name: "t", description: "", parameters: Schema.Struct({}), timeout, run: () => Effect.never })
    assert.throws(define(0), /positive duration/)
    assert.throws(define(-5), /positive duration/)
    assert.deepStrictEqual(define("2 minutes")().timeout, Duration.minutes(2))
    assert.isUndefined(define(undefined)().timeout)
  })
})

describe("PKG-03 registerAll and toolkits", () => {
  it.scoped("PKG-03 registerAll takes tools with different parameter schemas, and toolkits; the model can call each", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([
        [
          Model.toolCall("c1", "read", "{\"path\":\"a.txt\"}"),
          Model.toolCall("c2", "count", "{\"n\":3}"),
          Model.toolCall("c3", "greet", "{}")
        ],
        Model.text("done")
      ])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({
          sessionId: "s",
          options: route,
          setup: (setup) =>
            Effect.zipRight(
              setup.tools.registerAll([read, count]),
              // a toolkit whose tool needs a service: registerAll requires it
              setup.tools.registerAll(Tool.toolkit(greet)).pipe(Effect.provideService(Greeting, "hello"))
            )
        })
        assert.deepStrictEqual((yield* agent.tools.list).map((t) => t.name), ["read", "count", "greet"])
        yield* agent.followup(Message.user("go"))
        yield* agent.whenIdle
        const results = eventsOfType(yield* agent.session.events, "tool/result").map((event) =>
          Message.textOf((event.data as { readonly message: Message.ToolResultMessage }).message.content)
        )
        assert.deepStrictEqual(results, ["contents of a.txt", "counted to 3", "hello"])
        const first = yield* awaitRequest(1)
        assert.deepStrictEqual(first.tools.map((t) => t.name), ["read", "count", "greet"])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PKG-03 registerAll registers all or none: a duplicate leaves the registry as it was", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([])
      yield* Effect.gen(function*() {
        const global = yield* Tool.ToolRegistry
        yield* global.register(count)
        const error = yield* Effect.flip(global.registerAll([read, count]))
        assert.instanceOf(error, AgentError.DuplicateTool)
        assert.deepStrictEqual((yield* global.list).map((t) => t.name), ["count"])
        // a duplicate inside the list itself
        const inner = yield* Effect.flip(global.registerAll(Tool.toolkit(read, read)))
        assert.instanceOf(inner, AgentError.DuplicateTool)
        assert.deepStrictEqual((yield* global.list).map((t) => t.name), ["count"])
        // a successful group lasts until its Scope closes
        const scope = yield* Scope.make()
        yield* global.registerAll(Tool.toolkit(read, greet)).pipe(
          Effect.provideService(Greeting, "hi"),
          Scope.extend(scope)
        )
        assert.deepStrictEqual((yield* global.list).map((t) => t.name), ["count", "read", "greet"])
        yield* Scope.close(scope, Exit.void)
        assert.deepStrictEqual((yield* global.list).map((t) => t.name), ["count"])
        // the call requires what the tools require (checked by the type checker)
        // @ts-expect-error: greet needs Greeting
        const unprovided: Effect.Effect<void, unknown, Scope.Scope> = global.registerAll([read, greet])
        assert.isTrue(Effect.isEffect(unprovided))
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PKG-03 LIFE-06 registerAll on an agent whose teardown began fails AgentInactive and registers nothing", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "s", options: route })
        yield* handle.dispose
        const error = yield* Effect.flip(handle.agent.tools.registerAll([read, count]))
        assert.instanceOf(error, AgentError.AgentInactive)
        assert.deepStrictEqual(yield* handle.agent.tools.list, [])
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("PKG-03 Model.layerScripted", () => {
  it.effect("PKG-03 Model.layerScripted is a plain Layer; ScriptedModel beside it gives its requests", () =>
    Effect.gen(function*() {
      const program = Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: route })
        yield* agent.followup(Message.user("hi"))
        const first = yield* awaitRequest(1)
        yield* agent.whenIdle
        return { first, messages: yield* agent.session.messages }
      })
      // no Scope to manage: the layer is provided like any other
      const layer = AgentRuntime.layer.pipe(Layer.provideMerge(Model.layerScripted([Model.text("hello")])))
      const { first, messages } = yield* program.pipe(Effect.scoped, Effect.provide(layer))
      assert.strictEqual(first.sessionId, sid("s"))
      assert.strictEqual(textOfLast(first.messages), "hi")
      assert.strictEqual(textOfLast(messages), "hello")
      // each build is a fresh model: its script and request count start over
      const again = yield* program.pipe(Effect.scoped, Effect.provide(layer))
      assert.strictEqual(textOfLast(again.messages), "hello")
    }))
})

describe("PKG-03 global tools and hooks under AgentRuntime.layer*", () => {
  it.scoped("PKG-03 Tool.layerGlobalWith and Tool.layerGlobalHooks provided around AgentRuntime.layerMemory are the ones the agents use", () =>
    Effect.gen(function*() {
      const clock = Tool.make({
        name: "clock",
        description: "Tells the time",
        parameters: Schema.Struct({}),
        run: () => Effect.succeed(Tool.text("noon"))
      })
      const storage = yield* SessionPersistence.makeMemoryStorage
      // the README's composition: the model and the global registries provided around the runtime
      const AppRuntime = AgentRuntime.layerMemory({ storage }).pipe(
        Layer.provide(Layer.mergeAll(
          Model.layerScripted([[Model.toolCall("c1", "clock", "{}")], Model.text("it is noon")]),
          Tool.layerGlobalWith([clock]),
          Tool.layerGlobalHooks
        ))
      )
      const context = yield* Layer.build(AppRuntime)
      yield* Effect.gen(function*() {
        // the runtime provides the same registries it was given
        assert.deepStrictEqual((yield* (yield* Tool.ToolRegistry).list).map((t) => t.name), ["clock"])
        const hooks = yield* Tool.LoopHooks
        const routes = yield* Ref.make<ReadonlyArray<string>>([])
        yield* hooks.request(({ route: r }) => Effect.as(Ref.update(routes, (all) => [...all, r.model]), r))
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: route })
        yield* agent.followup(Message.user("what time is it?"))
        yield* agent.whenIdle
        const result = eventsOfType(yield* agent.session.events, "tool/result")[0]!.data as {
          readonly message: Message.ToolResultMessage
          readonly error?: unknown
        }
        assert.isUndefined(result.error)
        assert.strictEqual(Message.textOf(result.message.content), "noon")
        assert.deepStrictEqual(yield* Ref.get(routes), ["test", "test"])
        assert.strictEqual(textOfLast(yield* agent.session.messages), "it is noon")
      }).pipe(Effect.provide(context))
    }))
})

describe("PKG-03 owned children by id", () => {
  it.scoped("PKG-03 OWN-03 spawn({ sessionId, resume: true }) resumes a stored child owned by the spawning agent", () =>
    Effect.gen(function*() {
      const rt = yield* runtime({ c: [Model.text("first answer"), Model.text("second answer")] })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        // a parent spawns a child, which is stored; disposing the parent disposes the child
        const first = yield* registry.create({ sessionId: "p", options: route })
        const child = yield* first.agent.spawn({ sessionId: "c", options: route })
        yield* child.agent.followup(Message.user("question", { id: "q1" }))
        yield* child.agent.whenIdle
        yield* first.dispose
        assert.isTrue(Option.isNone(yield* registry.get("c")))

        const parent = yield* registry.create({ sessionId: "p2", options: route })
        // v1 behaviour, unchanged: a plain spawn of a stored id fails
        const stored = yield* Effect.flip(parent.agent.spawn({ sessionId: "c", options: route }))
        assert.instanceOf(stored, AgentError.AgentAlreadyExists)
        assert.strictEqual((stored as AgentError.AgentAlreadyExists).where, "stored")

        const feeds = yield* watch()
        const resumed = yield* parent.agent.spawn({ sessionId: "c", resume: true })
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:c:resume"), [
          "AgentCreated:c",
          "AgentSessionStart:c:resume"
        ])
        assert.isTrue(yield* registry.isOwnedBy("c", parent.agent))
        assert.deepStrictEqual((yield* registry.roots).map((a) => a.id), [sid("p2")])
        // its history came back; the route came from the log
        assert.strictEqual(textOfLast(yield* resumed.agent.session.messages), "first answer")
        yield* resumed.agent.followup(Message.user("again", { id: "q2" }))
        yield* resumed.agent.whenIdle
        assert.strictEqual(textOfLast(yield* resumed.agent.session.messages), "second answer")
        // a live child is not resumed twice
        const live = yield* Effect.flip(parent.agent.spawn({ sessionId: "c", resume: true }))
        assert.strictEqual(live._tag, "SessionAlreadyLive")
        // OWN-03: the owned child is fully disposed before its parent leaves the registry
        yield* parent.dispose
        const lines = yield* feeds.agents.until("AgentDisposed:p2")
        assert.deepStrictEqual(lines.slice(-2), ["AgentDisposed:c", "AgentDisposed:p2"])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PKG-03 spawn({ resume: true }) of an id that is not stored creates the child (AgentSessionStart startup)", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const parent = yield* registry.create({ sessionId: "p", options: route })
        const feeds = yield* watch()
        yield* parent.agent.spawn({ sessionId: "fresh", options: route, resume: true })
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:fresh:startup"), [
          "AgentCreated:fresh",
          "AgentSessionStart:fresh:startup"
        ])
        assert.isTrue(yield* registry.isOwnedBy("fresh", parent.agent))
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PKG-03 OWN-03 REG-07 registry.resume({ parentAgent }) from another Scope stays detached: it survives the parent", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const stored = yield* registry.create({ sessionId: "c", options: route })
        yield* stored.dispose
        const parent = yield* registry.create({ sessionId: "p", options: route })
        yield* registry.resume({ sessionId: "c", parentAgent: parent.agent })
        assert.isTrue(yield* registry.isOwnedBy("c", parent.agent))
        yield* parent.dispose
        assert.isTrue(Option.isSome(yield* registry.get("c")))
        assert.deepStrictEqual((yield* registry.roots).map((a) => a.id), [sid("c")])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PKG-03 resumeOrCreate of a live agent fails and leaves it untouched: never a second handle", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([Model.hang("")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s", options: route })
        yield* agent.followup(Message.user("go"))
        yield* awaitRequest(1)
        const error = yield* Effect.flip(registry.resumeOrCreate({ sessionId: "s", options: route }))
        assert.strictEqual(error._tag, "SessionAlreadyLive")
        assert.strictEqual(yield* agent.status, "running")
        // the live agent is found (bare, without dispose) through get
        assert.strictEqual(Option.getOrUndefined(yield* registry.get("s")), agent)
      }).pipe(Effect.provide(rt.context))
      // without persistence: the create it falls back to finds the id live
      const volatile = yield* Layer.build(AgentRuntime.layer.pipe(Layer.provideMerge(Model.layerScripted([]))))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        yield* registry.create({ sessionId: "v", options: route })
        const error = yield* Effect.flip(registry.resumeOrCreate({ sessionId: "v", options: route }))
        assert.instanceOf(error, AgentError.AgentAlreadyExists)
        assert.strictEqual((error as AgentError.AgentAlreadyExists).where, "live")
      }).pipe(Effect.provide(volatile))
    }))
})

/** The `turn/end` events of a log with their reason. */
const turnEnds = (events: ReadonlyArray<SessionEvent.SessionEvent>) =>
  eventsOfType(events, "turn/end").map((event) =>
    (event.data as { readonly reason: { readonly kind: string; readonly cause?: { readonly kind: string } } }).reason
  )

describe("PKG-05 shutdown note", () => {
  it.scoped("PKG-05 REQ-03 after a dispose interrupted a turn, the next request's history carries the shutdown note", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const waitForever = Tool.make({
        name: "wait",
        description: "Waits",
        parameters: Schema.Struct({}),
        run: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
      })
      const storage = yield* SessionPersistence.makeMemoryStorage
      const first = yield* runtime([[Model.toolCall("c1", "wait", "{}")]], { storage })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({
          sessionId: "s",
          options: route,
          setup: (setup) => setup.tools.register(waitForever)
        })
        yield* handle.agent.followup(Message.user("go", { id: "m1" }))
        yield* Deferred.await(started)
        yield* handle.dispose
      }).pipe(Effect.provide(first.context))
      const stored = (yield* storage.events(sid("s"))) ?? []
      assert.deepStrictEqual(turnEnds(stored), [{ kind: "aborted", cause: { kind: "disposed" } }])
      // the log itself is v1's: nothing new was written for the note
      assert.isFalse(stored.some((event) => event.type.includes("shutdown")))

      const second = yield* runtime([Model.text("resumed")], { storage })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.resume({ sessionId: "s" })
        const history = yield* agent.session.messages
        const note = history[history.length - 1]!
        assert.strictEqual(note.role, "user")
        assert.deepStrictEqual((note as Message.UserMessage).source, { kind: "system" })
        assert.strictEqual(Message.textOf(note.content), Session.shutdownNote)
        assert.include(Session.shutdownNote, "shut down")
        assert.include(Session.shutdownNote, "Each tool result")
        // the tool result before it says the tool may have partly run
        const toolResult = history[history.length - 2] as Message.ToolResultMessage
        assert.strictEqual(toolResult.role, "tool")
        assert.include(Message.textOf(toolResult.content), "may have partly run")
        yield* agent.followup(Message.user("continue", { id: "m2" }))
        const request = yield* awaitRequest(1)
        yield* agent.whenIdle
        // REQ-03: the request is the log's history at dispatch (rebuilt from the log alone), the
        // note before the new input
        const events = yield* agent.session.events
        const answered = events.find((event) =>
          event.type === "assistant/message" && event.seq >= agent.session.firstLiveSeq
        )!
        const beforeAnswer = events.filter((event) => event.seq < answered.seq)
        assert.deepStrictEqual(request.messages, Session.deriveMessages(beforeAnswer))
        assert.deepStrictEqual(request.messages.map((m) => m.id), [...history.map((m) => m.id), "m2"])
      }).pipe(Effect.provide(second.context))
    }))

  it("PKG-05 SES-03 the note is derived from the log alone: disposed aborts only, crash interruptions keep their own note", () => {
    const at = (seq: number, type: string, data: unknown) => ({ seq, time: 0, type, data }) as SessionEvent.SessionEvent
    const user = Message.user("hi", { id: "u1" })
    const turn = (n: number, reason: unknown, base: number) => [
      at(base, "turn/start", { turn: n }),
      at(base + 1, "turn/end", { turn: n, reason })
    ]
    const log = [
      at(0, "user/message", { turn: 1, step: 1, message: user }),
      ...turn(1, { kind: "aborted", cause: { kind: "disposed" } }, 1),
      ...turn(2, { kind: "aborted", cause: { kind: "user" } }, 3),
      ...turn(3, { kind: "interrupted" }, 5),
      ...turn(4, { kind: "completed" }, 7)
    ]
    const messages = Session.deriveMessages(log)
    assert.deepStrictEqual(messages.map((m) => m.id), ["u1", "shutdown:1", "interrupted:3"])
    assert.strictEqual(Message.textOf(messages[1]!.content), Session.shutdownNote)
    assert.strictEqual(Message.textOf(messages[2]!.content), Session.interruptedNote)
    // deterministic: the same events give deep-equal output
    assert.deepStrictEqual(Session.deriveMessages(log), messages)
  })
})

describe("PKG-06 route validation", () => {
  const routes = [{ provider: "scripted", model: "test" }]

  it.scoped("PKG-06 Model.scripted with routes implements validateRoute; without routes it has none", () =>
    Effect.gen(function*() {
      const withRoutes = yield* Model.scripted([], { routes })
      const model = yield* Effect.provide(Model.Model, withRoutes.layer)
      yield* model.validateRoute!("scripted", "test")
      const refused = yield* Effect.flip(model.validateRoute!("scripted", "other"))
      assert.instanceOf(refused, Model.RouteRefused)
      assert.deepStrictEqual([refused.provider, refused.model], ["scripted", "other"])
      const none = yield* Effect.provide(Model.Model, (yield* Model.scripted([], { routes: [] })).layer)
      assert.include((yield* Effect.flip(none.validateRoute!("scripted", "test"))).reason, "serves no route")
      const plain = yield* Effect.provide(Model.Model, (yield* Model.scripted([])).layer)
      assert.isUndefined(plain.validateRoute)
    }))

  it.scoped("PKG-06 PUB-10 create with a route the model refuses fails InvalidAgentOptions with its reason; nothing is stored or published", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([], { routes })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feed = yield* registry.subscribe
        const error = yield* Effect.flip(registry.create({
          sessionId: "s",
          options: { provider: "openai", model: "gpt-x" },
          setup: () => Effect.die("setup never runs")
        }))
        assert.instanceOf(error, AgentError.InvalidAgentOptions)
        assert.include(error.message, "\"openai\"")
        assert.include(error.message, "serves only \"scripted\"/\"test\"")
        assert.isTrue(Option.isNone(yield* registry.get("s")))
        const persistence = yield* SessionPersistence.SessionPersistence
        assert.isFalse(yield* persistence.exists(sid("s")))
        // a served route is accepted, and so is a model that was given without a provider
        yield* registry.create({ sessionId: "ok", options: route })
        yield* registry.create({ sessionId: "half", options: { model: "gpt-x" } })
        const published = yield* feed.pipe(
          Stream.filter((event) => event._tag === "AgentCreated"),
          Stream.take(2),
          Stream.runCollect
        )
        assert.deepStrictEqual(Chunk.toReadonlyArray(published).map((event) => event.agent), [sid("ok"), sid("half")])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PKG-06 RES-07 RES-08 a missing route stays allowed: the first request ends NO_ROUTE", () =>
    Effect.gen(function*() {
      const rt = yield* runtime([], { routes })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "s" })
        yield* agent.followup(Message.user("hi"))
        yield* agent.whenIdle
        const [reason] = turnEnds(yield* agent.session.events) as ReadonlyArray<
          { readonly error?: { readonly code: string } }
        >
        assert.strictEqual(reason?.error?.code, "NO_ROUTE")
        assert.deepStrictEqual(yield* requestsOf, [])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PKG-06 resume never refuses a stored session for its route: it stays readable and cancellable", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const before = yield* runtime([Model.text("stored")], { storage })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "s", options: { provider: "retired", model: "old" } })
        yield* handle.agent.followup(Message.user("hi", { id: "m1" }))
        yield* handle.agent.whenIdle
        yield* handle.dispose
      }).pipe(Effect.provide(before.context))
      // a model that no longer serves the stored route
      const after = yield* runtime([], { storage, routes })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.resume({ sessionId: "s" })
        const agent = handle.agent
        assert.strictEqual(textOfLast(yield* agent.session.messages), "stored")
        yield* agent.inject(Message.user("pending", { id: "m2" }))
        yield* agent.cancel({ kind: "user" })
        assert.deepStrictEqual(yield* agent.inbox.nextStep, [])
        yield* handle.dispose
        // a route given to resume is not validated either
        const again = yield* registry.resume({ sessionId: "s", options: { provider: "retired", model: "older" } })
        assert.strictEqual(again.agent.options.model, "older")
      }).pipe(Effect.provide(after.context))
    }))
})
