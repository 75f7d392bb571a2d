/**
 * ARCH-01: no hidden capability. A user who wraps a public service — a spread with one method
 * replaced, or an object of their own that delegates each method — changes no behaviour: the fast
 * paths the library takes are explicit (`AgentPublisher.lookup`, `AgentHost.eventsInto`,
 * `SessionGateway.eventsInto`, `AgentHandle.watchers`, the session's own state), so they survive the
 * wrap, and a user's own implementation of an optional method is the one used. Real components: the
 * file store in a temp directory, a real HTTP server on 127.0.0.1.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { HttpServer } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Fiber, Layer, Option, Ref, Scope, Stream, TestClock } from "effect"
import { createServer, type Server } from "node:http"
import type { Agent } from "../src/Agent.js"
import * as AgentHost from "../src/AgentHost.js"
import * as AgentLoop from "../src/AgentLoop.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Registry from "../src/AgentRegistry.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as HttpApi from "../src/HttpApi.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { Session } from "../src/Session.js"
import * as SessionGateway from "../src/SessionGateway.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SessionStore from "../src/SessionStore.js"
import * as Tool from "../src/Tool.js"
import { hostOver, nextEvent, stores } from "./fixtures/host.js"
import { gatewayOver, openEvents } from "./fixtures/httpServer.js"
import { route } from "./fixtures/runtime.js"

const files = stores[0]!
const create = { options: route }

/** A registry of the user's own that delegates every method to `registry`, counting `get`. */
const delegatingRegistry = (registry: AgentRegistry["Type"], gets: Ref.Ref<number>): AgentRegistry["Type"] =>
  AgentRegistry.of({
    get: (id) => Effect.zipRight(Ref.update(gets, (n) => n + 1), registry.get(id)),
    list: registry.list,
    roots: registry.roots,
    owners: registry.owners,
    isOwnedBy: registry.isOwnedBy,
    create: registry.create,
    resume: registry.resume,
    resumeOrCreate: registry.resumeOrCreate,
    register: registry.register,
    setFactory: registry.setFactory,
    events: registry.events,
    subscribe: registry.subscribe,
    onCreated: registry.onCreated,
    onSessionStart: registry.onSessionStart,
    currentInitiator: registry.currentInitiator,
    requireInitiator: registry.requireInitiator,
    withInitiator: registry.withInitiator,
    withoutInitiator: registry.withoutInitiator
  })

/** AgentLoop over a registry the user wrapped (the wrap is what the loop and its callers see). */
const runtimeOverWrapped = (gets: Ref.Ref<number>) =>
  Effect.gen(function*() {
    const model = yield* Model.scripted([Model.text("one"), Model.text("two")])
    const wrapped = Layer.effect(AgentRegistry, Effect.map(AgentRegistry, (r) => delegatingRegistry(r, gets))).pipe(
      Layer.provide(Registry.layer)
    )
    const layer = AgentLoop.layer.pipe(
      Layer.provideMerge(Layer.mergeAll(wrapped, SessionStore.layer)),
      Layer.provide(model.layer)
    )
    return Context.get(yield* Layer.build(layer), AgentRegistry)
  })

/** The session's events as a user's own object over `session` sees them (no class, no prototype). */
const delegatingSession = (session: Session): Session => ({
  id: session.id,
  header: session.header,
  firstLiveSeq: session.firstLiveSeq,
  get events() {
    return session.events
  },
  get messages() {
    return session.messages
  },
  get usage() {
    return session.usage
  },
  append: session.append,
  appendAll: session.appendAll,
  changes: session.changes,
  subscribe: session.subscribe,
  eventsFrom: session.eventsFrom
})

describe("wrapped services", () => {
  it.scoped("ARCH-01 a wrapped LoopHooks: hooks registered through a spread with one method replaced run in a turn, as through the original", () =>
    Effect.gen(function*() {
      const registrations = yield* Ref.make(0)
      const trace: Array<string> = []
      const model = yield* Model.scripted([Model.text("ok")])
      const storage = yield* SessionPersistence.makeMemoryStorage
      // the user's global hooks: the library's registry with `request` counted (a spread, no class)
      const wrappedHooks = Layer.effect(
        Tool.LoopHooks,
        Effect.map(Tool.LoopHooks, (hooks) =>
          Tool.LoopHooks.of({
            ...hooks,
            request: (f) => Effect.zipRight(Ref.update(registrations, (n) => n + 1), hooks.request(f))
          }))
      ).pipe(Layer.provide(Tool.layerGlobalHooks))
      const context = yield* Layer.build(
        AgentRuntime.layerMemory({ storage }).pipe(Layer.provide(Layer.merge(model.layer, wrappedHooks)))
      )
      const hooks = Context.get(context, Tool.LoopHooks)
      yield* hooks.request((info) =>
        Effect.sync(() => {
          trace.push(`request ${info.route.model}`)
          return { ...info.route, model: "renamed" }
        })
      )
      yield* hooks.turnStopping((info) => Effect.sync(() => trace.push(`turnStopping ${info.turn}`)))
      assert.strictEqual(yield* Ref.get(registrations), 1)
      assert.deepStrictEqual(hooks.list().request.length, 1)
      const { agent } = yield* Context.get(context, AgentRegistry).create({ sessionId: "hooked", options: route })
      yield* agent.followup(Message.user("go"))
      yield* agent.whenIdle
      // the runtime ran what the wrapper registered, as it runs the original's (no defect, no skip)
      assert.deepStrictEqual(trace, ["request test", "turnStopping 1"])
      assert.deepStrictEqual((yield* model.requests).map((request) => request.model), ["renamed"])
    }))

  it.scoped("ARCH-01 a wrapped AgentRegistry: the factory's collision check reads the registry that called it", () =>
    Effect.gen(function*() {
      const gets = yield* Ref.make(0)
      const registry = yield* runtimeOverWrapped(gets)
      const first = yield* registry.create({ sessionId: "a", options: route })
      const again = yield* Effect.flip(registry.create({ sessionId: "a", options: route }))
      assert.strictEqual(again._tag, "AgentAlreadyExists")
      assert.deepStrictEqual(again._tag === "AgentAlreadyExists" ? again.where : undefined, "live")
      // the loop asked the publisher its registry handed it, not the user's `get`: no span, no call
      assert.strictEqual(yield* Ref.get(gets), 0)
      // what a user asks goes through the user's `get`, and finds the same agent
      assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), first.agent)
      assert.strictEqual(yield* Ref.get(gets), 1)
      yield* first.dispose
      const made = yield* registry.create({ sessionId: "a", options: route })
      assert.strictEqual(made.agent.id, "a")
    }))

  it.scoped("ARCH-01 HOST-02 a host over a wrapped AgentRegistry counts the agent's own subscribers", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const gets = yield* Ref.make(0)
      // the host's activations go through a registry the user wrapped with a delegating object
      const { host, registry } = yield* hostOver(store, [], { idleTimeout: "1 minute" })
      const wrapped = delegatingRegistry(registry, gets)
      yield* host.get("seen", create)
      const agent: Agent = Option.getOrThrow(yield* wrapped.get("seen"))
      const watching = yield* Scope.make()
      yield* Scope.extend(agent.subscribe, watching)
      yield* TestClock.adjust("5 minutes")
      assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["seen"])
      const disposed = yield* nextEvent(registry, "seen", "AgentDisposed")
      yield* Scope.close(watching, Exit.void)
      yield* TestClock.adjust("1 minute")
      yield* Fiber.join(disposed)
      assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
    }))

  it.scoped("ARCH-01 a gateway over a wrapped AgentHost reads through its eventsInto (a user's own wins), as over the original", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const calls = yield* Ref.make(0)
      const wrap = (host: AgentHost.AgentHost["Type"]): AgentHost.AgentHost["Type"] => ({
        ...host,
        live: host.live,
        eventsInto: (id, seq, sink, onLive) =>
          Effect.zipRight(Ref.update(calls, (n) => n + 1), host.eventsInto!(id, seq, sink, onLive))
      })
      const { gateway, host } = yield* gatewayOver(store, [Model.text("hello there")], undefined, wrap)
      yield* gateway.create("w", { options: route })
      yield* gateway.send("w", { text: "hi", id: "m1" })
      yield* host.use("w", (agent) => agent.whenIdle)
      const durable = (events: Stream.Stream<SessionGateway.StreamEvent, unknown>) =>
        events.pipe(
          Stream.filterMap((item) => item._tag === "Durable" ? Option.some(item.event) : Option.none()),
          Stream.takeUntil((event) => event.type === "turn/end"),
          Stream.runCollect,
          Effect.map((chunk) => Array.from(chunk, (event) => `${event.seq} ${event.type}`))
        )
      const throughGateway = yield* durable(gateway.eventsFrom("w", 0))
      const fromHost = yield* durable(
        Stream.map(host.eventsFrom("w", 0), (event): SessionGateway.StreamEvent => ({ _tag: "Durable", event }))
      )
      assert.deepStrictEqual(throughGateway, fromHost)
      assert.isTrue(throughGateway.some((line) => line.endsWith("turn/end")))
      assert.strictEqual(yield* Ref.get(calls), 1)
      // a plain spread keeps the host's own fast path: the same function, not a stream read back
      const spread: AgentHost.AgentHost["Type"] = { ...host, live: host.live }
      assert.strictEqual(spread.eventsInto, host.eventsInto)
    }))

  it.scoped("ARCH-01 the HTTP event stream over a wrapped SessionGateway goes through the gateway's eventsInto", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const calls = yield* Ref.make(0)
      const { gateway, host } = yield* gatewayOver(store, [Model.text("streamed")])
      // the user's gateway: a spread with `list` replaced and its own `eventsInto` over the original
      const wrapped: SessionGateway.SessionGateway["Type"] = {
        ...gateway,
        list: (request) => gateway.list(request),
        eventsInto: (id, seq, sink) => Effect.zipRight(Ref.update(calls, (n) => n + 1), gateway.eventsInto!(id, seq, sink))
      }
      const scope = yield* Scope.make()
      yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
      let nodeServer: Server | undefined
      // a server stops accepting before its Scope closes (as the HTTP fixture's does)
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          nodeServer?.close()
          nodeServer?.closeIdleConnections()
        })
      )
      const server = HttpApi.layerServer().pipe(
        Layer.provide(Layer.succeed(SessionGateway.SessionGateway, wrapped)),
        Layer.provideMerge(NodeHttpServer.layer(() => (nodeServer = createServer({ keepAliveTimeout: 200 })), {
          port: 0,
          host: "127.0.0.1"
        }))
      )
      const address = Context.get(yield* Layer.buildWithScope(server, scope), HttpServer.HttpServer).address
      assert.strictEqual(address._tag, "TcpAddress")
      const port = address._tag === "TcpAddress" ? address.port : 0
      yield* gateway.create("h", { options: route })
      yield* gateway.send("h", { text: "hi", id: "m1" })
      yield* host.use("h", (agent) => agent.whenIdle)
      const events = yield* openEvents(`http://127.0.0.1:${port}/sessions/h/events`)
      assert.strictEqual(events.status, 200)
      const frames = yield* events.until((frame) => frame.data?.includes("\"turn/end\"") === true)
      const durable = frames.filter((frame) => frame.event === "durable")
      // every durable event of the session, in seq order, with the seq as the frame's id
      assert.deepStrictEqual(durable.map((frame) => frame.id), durable.map((_, i) => String(i)))
      assert.isTrue(durable.some((frame) => frame.data?.includes("\"user/message\"") === true))
      assert.strictEqual(yield* Ref.get(calls), 1)
      yield* events.close
    }))

  it.scoped("ARCH-01 a fork from a session the user wrapped seeds what a fork from the session itself does", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const { host } = yield* hostOver(store, [Model.text("first"), Model.text("second")], { agentOptions: route })
      yield* host.use("forked", (agent) =>
        Effect.gen(function*() {
          yield* agent.followup(Message.user("one"))
          yield* agent.whenIdle
          const session = agent.session
          const wrapped = delegatingSession(session)
          assert.deepStrictEqual(yield* SessionStore.forkSeed(wrapped), yield* SessionStore.forkSeed(session))
          assert.deepStrictEqual(yield* SessionStore.forkSeed(wrapped, 1), yield* SessionStore.forkSeed(session, 1))
          const length = (yield* session.events).length
          const beyond = yield* Effect.flip(SessionStore.forkSeed(wrapped, length + 1))
          assert.strictEqual(beyond._tag, "InvalidForkBoundary")
          // inside the turn: the same refusal as the session's own
          const inside = yield* Effect.flip(SessionStore.forkSeed(wrapped, length - 1))
          const insideOwn = yield* Effect.flip(SessionStore.forkSeed(session, length - 1))
          assert.deepStrictEqual(inside, insideOwn)
          assert.strictEqual(inside._tag, "ForkInsideOpenTurn")
        }), create)
    }))
})
