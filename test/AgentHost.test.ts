/**
 * AgentHost (SPEC §17): single-flight activation, host-owned agents, idle passivation under
 * `TestClock`, `maxLive` with LRU passivation and `HostAtCapacity`, `agent.wake` and wake on
 * activation, graceful drain with the shutdown note. Real stores: files in a temp directory and
 * SQLite in a temp file.
 */
import { assert, describe, it } from "@effect/vitest"
import { Array as Arr, Deferred, Effect, Exit, Fiber, Option, Ref, Scope, TestClock } from "effect"
import * as AgentHost from "../src/AgentHost.js"
import * as Message from "../src/Message.js"
import type { MessageId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { hostOver, nextEvent, stores } from "./fixtures/host.js"
import { route } from "./fixtures/runtime.js"
import { gate } from "./fixtures/tools.js"
import { allSuspended, eventually } from "./fixtures/waiting.js"

const create = { options: route }

const typesOf = (events: ReadonlyArray<SessionEvent>) => events.map((event) => event.type)

const splices = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((event) => event.type === "agent/inbox/spliced").map((event) => event.data as Record<string, unknown>)

for (const backend of stores) {
  describe(`AgentHost over ${backend.name}`, () => {
    it.scoped("HOST-01 50 concurrent gets of one id cause one activation; all callers get the same agent", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host, registry } = yield* hostOver(store, [Model.text("first"), Model.text("second")])
        const starts = yield* Ref.make<ReadonlyArray<string>>([])
        yield* registry.onSessionStart((agent, source) => Ref.update(starts, (all) => [...all, `${agent.id}:${source}`]))
        // a new id: one creation, nobody sees AgentAlreadyExists
        const created = yield* Effect.forEach(Arr.range(1, 50), () => host.get("h1", create), {
          concurrency: "unbounded"
        })
        assert.isTrue(created.every((agent) => agent === created[0]))
        yield* created[0]!.followup(Message.user("hello", { id: "m1" }))
        yield* created[0]!.whenIdle
        assert.isTrue(yield* host.passivate("h1"))
        assert.isTrue(Option.isNone(yield* registry.get("h1")))
        // a passivated id: one resume, nobody sees SessionAlreadyLive
        const resumed = yield* Effect.forEach(Arr.range(1, 50), () => host.get("h1"), { concurrency: "unbounded" })
        assert.isTrue(resumed.every((agent) => agent === resumed[0]))
        assert.notStrictEqual(resumed[0], created[0])
        assert.deepStrictEqual(yield* Ref.get(starts), ["h1:startup", "h1:resume"])
        assert.strictEqual((yield* resumed[0]!.session.messages).length, 2)
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["h1"])
        // the host owns it: the caller's agent has no dispose, the registry finds the same session
        assert.isFalse("dispose" in resumed[0]!)
        const live = yield* registry.get("h1")
        assert.isTrue(Option.isSome(live) && live.value.session === resumed[0]!.session)
      }))

    it.scoped("HOST-01 get without create options of an unknown id fails SessionNotFound; a bad id InvalidSessionId", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host } = yield* hostOver(store, [])
        const missing = yield* Effect.flip(host.get("nobody"))
        assert.strictEqual(missing._tag, "SessionNotFound")
        const invalid = yield* Effect.flip(host.get("../etc"))
        assert.strictEqual(invalid._tag, "InvalidSessionId")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
        // the failed activation left nothing: the id can be created now
        const agent = yield* host.get("nobody", create)
        assert.strictEqual(agent.id, "nobody")
      }))

    it.scoped("HOST-02 an agent idle for idleTimeout is passivated (TestClock); the next get resumes it", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host, registry } = yield* hostOver(store, [Model.text("a1"), Model.text("a2")], {
          idleTimeout: "1 minute"
        })
        const agent = yield* host.get("idle", create)
        yield* agent.followup(Message.user("one"))
        yield* agent.whenIdle
        const disposed = yield* nextEvent(registry, "idle", "AgentDisposed")
        yield* TestClock.adjust("59 seconds")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["idle"])
        yield* TestClock.adjust("1 second")
        yield* Fiber.join(disposed)
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
        const again = yield* host.get("idle")
        assert.strictEqual((yield* again.session.messages).length, 2)
        yield* again.followup(Message.user("two"))
        yield* again.whenIdle
        assert.strictEqual((yield* again.session.messages).length, 4)
      }))

    it.scoped("HOST-02 a live subscriber of agent.events and pending input keep an idle agent live", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host, registry } = yield* hostOver(store, [Model.text("a1")], { idleTimeout: "1 minute" })
        const agent = yield* host.get("watched", create)
        const watching = yield* Scope.make()
        yield* Scope.extend(agent.subscribe, watching)
        yield* TestClock.adjust("5 minutes")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["watched"])
        // a parked inject is pending input: still live when the subscriber leaves
        yield* agent.inject(Message.user("parked", { id: "p1" }))
        yield* Scope.close(watching, Exit.void)
        yield* TestClock.adjust("5 minutes")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["watched"])
        const disposed = yield* nextEvent(registry, "watched", "AgentDisposed")
        assert.isTrue(yield* agent.inbox.remove("p1" as MessageId))
        yield* TestClock.adjust("2 minutes")
        yield* Fiber.join(disposed)
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
      }))

    it.scoped("HOST-02 under maxLive the LRU idle agent is passivated; all busy: HostAtCapacity after activationTimeout", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host } = yield* hostOver(store, {
          a: [Model.hang("")],
          b: [],
          c: [Model.hang("")],
          e: []
        }, { maxLive: 2, activationTimeout: "10 seconds", drainTimeout: 0 })
        const a = yield* host.get("a", create)
        yield* host.get("b", create)
        yield* host.get("a") // a is now the most recently used
        const c = yield* host.get("c", create)
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["a", "c"])
        // both busy: a get waits, then fails
        yield* a.followup(Message.user("hang a"))
        yield* c.followup(Message.user("hang c"))
        const waiting = yield* Effect.fork(host.get("d", create))
        yield* eventually(allSuspended([waiting]))
        yield* TestClock.adjust("10 seconds")
        const refused = yield* Effect.flip(Fiber.join(waiting))
        assert.strictEqual(refused._tag, "HostAtCapacity")
        assert.include(refused.message, "maxLive")
        // a waiter gets the slot of an agent that becomes idle
        const next = yield* Effect.fork(host.get("e", create))
        yield* eventually(allSuspended([next]))
        yield* a.cancel({ kind: "user" })
        const e = yield* Fiber.join(next)
        assert.strictEqual(e.id, "e")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["c", "e"])
      }))

    it.scoped("HOST-03 followup/steer are recorded waking, inject and inbox.append not; v1 splices read by their list", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const entered = yield* Deferred.make<void>()
        const open = yield* Deferred.make<void>()
        const { host } = yield* hostOver(store, [Model.toolCall("g1", "gate", "{}"), Model.text("done")], {
          setup: (agent) => agent.tools.register(gate(entered, open))
        })
        const agent = yield* host.get("flags", create)
        yield* agent.inbox.append("next-turn", Message.user("seeded", { id: "s0" }))
        yield* agent.followup(Message.user("go", { id: "f1" }))
        yield* Deferred.await(entered)
        yield* agent.steer(Message.user("steer", { id: "s1" }))
        yield* agent.inject(Message.user("inject", { id: "i1" }))
        yield* Deferred.succeed(open, undefined)
        yield* agent.whenIdle
        const inserted = splices(yield* agent.session.events).filter((data) =>
          (data["inserted"] as ReadonlyArray<unknown>).length > 0
        )
        const flagOf = (id: string) =>
          inserted.find((data) => (data["inserted"] as ReadonlyArray<{ id: string }>)[0]!.id === id)!["wake"]
        assert.strictEqual(flagOf("s0"), false)
        assert.strictEqual(flagOf("f1"), undefined) // next-turn: waking by default
        assert.strictEqual(flagOf("s1"), true)
        assert.strictEqual(flagOf("i1"), undefined) // next-step: not waking by default
      }))

    it.scoped("HOST-03 agent.wake runs pending waking input; a parked inject alone does not wake, on activation neither", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host, model } = yield* hostOver(store, [Model.hang(""), Model.text("follow-up answered")])
        const agent = yield* host.get("waker", create)
        yield* agent.followup(Message.user("first"))
        yield* model.awaitRequest(1)
        yield* agent.followup(Message.user("queued", { id: "q1" }))
        yield* agent.cancel({ kind: "user" }, { keepInbox: true })
        yield* agent.whenIdle
        // CAN-03: the follow-up is parked until a wake
        assert.deepStrictEqual((yield* agent.inbox.nextTurn).map((m) => m.id), ["q1"])
        yield* agent.wake
        yield* agent.whenIdle
        assert.deepStrictEqual(yield* agent.inbox.nextTurn, [])
        assert.strictEqual((yield* model.requests).length, 2)
        // an inject alone: wake is a no-op, and so is the wake of an activation
        yield* agent.inject(Message.user("context only", { id: "i1" }))
        yield* agent.wake
        assert.strictEqual(yield* agent.status, "idle")
        assert.isTrue(yield* host.passivate("waker"))
        const before = (yield* agent.session.events).length
        const resumed = yield* host.get("waker")
        yield* resumed.whenIdle
        const after = yield* resumed.session.events
        assert.strictEqual(after.length, before)
        assert.notInclude(typesOf(after.slice(before)), "turn/start")
        assert.deepStrictEqual((yield* resumed.inbox.nextStep).map((m) => m.id), ["i1"])
        assert.strictEqual((yield* model.requests).length, 2)
      }))

    it.scoped("HOST-03 a follow-up left pending by a shutdown runs when the host activates the agent (wakeOnActivate)", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const first = yield* hostOver(store, [Model.hang("")], { drainTimeout: 0 })
        const agent = yield* first.host.get("pending", create)
        yield* agent.followup(Message.user("long"))
        yield* first.model.awaitRequest(1)
        yield* agent.followup(Message.user("next", { id: "n1" }))
        yield* first.close
        const second = yield* hostOver(store, [Model.text("next answered")])
        const resumed = yield* second.host.get("pending")
        yield* resumed.whenIdle
        const requests = yield* second.model.requests
        assert.strictEqual(requests.length, 1)
        const last = requests[0]!.messages.at(-1)!
        assert.strictEqual(last.role === "user" ? last.id : undefined, "n1")
      }))

    it.scoped("HOST-05 closing the host refuses gets, lets turns finish for drainTimeout, then disposes; the model sees the shutdown note", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const entered = yield* Deferred.make<void>()
        const open = yield* Deferred.make<void>()
        const first = yield* hostOver(store, {
          quick: [Model.toolCall("g1", "gate", "{}"), Model.text("finished in time")],
          slow: [Model.hang("")]
        }, {
          drainTimeout: "10 seconds",
          setup: (agent) => agent.id === "quick" ? agent.tools.register(gate(entered, open)) : Effect.void
        })
        const quick = yield* first.host.get("quick", create)
        const slow = yield* first.host.get("slow", create)
        yield* quick.followup(Message.user("quick one"))
        yield* slow.followup(Message.user("slow one"))
        yield* Deferred.await(entered)
        yield* first.model.awaitRequest(2)
        yield* slow.followup(Message.user("after the slow one", { id: "later" }))
        const closing = yield* Effect.fork(first.close)
        yield* eventually(() => Effect.map(Effect.either(first.host.get("other", create)), (r) =>
          r._tag === "Left" && r.left._tag === "HostClosed"))
        // the quick turn finishes within the drain
        yield* Deferred.succeed(open, undefined)
        yield* quick.whenIdle
        assert.strictEqual(yield* slow.status, "running")
        yield* TestClock.adjust("10 seconds")
        yield* Fiber.join(closing)
        const ends = (events: ReadonlyArray<SessionEvent>) =>
          events.filter((event) => event.type === "turn/end").map((event) =>
            (event.data as { reason: unknown }).reason
          )
        assert.deepStrictEqual(ends(yield* quick.session.events), [{ kind: "completed" }])
        assert.deepStrictEqual(ends(yield* slow.session.events), [{ kind: "aborted", cause: { kind: "disposed" } }])
        // inbox kept (LIFE-06); a new host resumes, wakes, and the model sees the shutdown note (PKG-05)
        const second = yield* hostOver(store, [Model.text("resumed")])
        const resumed = yield* second.host.get("slow")
        yield* resumed.whenIdle
        const request = (yield* second.model.requests)[0]!
        const texts = request.messages.flatMap((m) =>
          m.role === "user" ? m.content.flatMap((part) => part.type === "text" ? [part.text] : []) : []
        )
        assert.isTrue(texts.some((text) => text.includes("shut down")))
        assert.strictEqual(texts.at(-1), "after the slow one")
      }))
  })
}

describe("AgentHost options", () => {
  it("HOST-00 the defaults", () => {
    assert.strictEqual(AgentHost.defaults.maxLive, 10_000)
    assert.strictEqual(AgentHost.defaults.idleTimeout.toString(), "Duration(5m)")
    assert.strictEqual(AgentHost.defaults.activationTimeout.toString(), "Duration(30s)")
    assert.strictEqual(AgentHost.defaults.drainTimeout.toString(), "Duration(30s)")
    assert.isFalse(AgentHost.defaults.recover)
    assert.isTrue(AgentHost.defaults.wakeOnActivate)
  })
})



