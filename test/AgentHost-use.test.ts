/**
 * HOST-02 at the agent: what keeps a live agent from passivating besides its work — `host.use`
 * holds, and the subscribers of the agent's own `events`/`subscribe`/`statusChanges` however the
 * agent was obtained (`registry.get` included) — and what does not (`eventsFrom` clients, tested
 * with EVS-01). `TestClock` for the idle timeouts, `Deferred` gates for the races. Real stores:
 * files in a temp directory and SQLite in a temp file.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Scope, Stream, TestClock } from "effect"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import { hostOver, nextEvent, stores } from "./fixtures/host.js"
import { route } from "./fixtures/runtime.js"
import { allSuspended, eventually } from "./fixtures/waiting.js"

const create = { options: route }

for (const backend of stores) {
  describe(`AgentHost.use and subscribers over ${backend.name}`, () => {
    it.scoped("HOST-02 get then send races the idle timer (AgentInactive); use holds the agent while f runs, so its send cannot", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host, registry } = yield* hostOver(store, [Model.text("answered")], {
          idleTimeout: "1 minute",
          agentOptions: route
        })
        // the race `use` closes: the host passivates the idle agent between the get and the send
        const got = yield* host.get("raced", create)
        const disposed = yield* nextEvent(registry, "raced", "AgentDisposed")
        yield* TestClock.adjust("1 minute")
        yield* Fiber.join(disposed)
        const refused = yield* Effect.flip(got.followup(Message.user("too late")))
        assert.strictEqual(refused._tag, "AgentInactive")
        // through use: held while f waits at its gate, however long
        const entered = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        const using = yield* Effect.fork(host.use("raced", (agent) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(entered, undefined)
            yield* Deferred.await(gate)
            yield* agent.followup(Message.user("held", { id: "h1" }))
            yield* agent.whenIdle
            return (yield* agent.session.messages).length
          })))
        yield* Deferred.await(entered)
        yield* TestClock.adjust("10 minutes")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["raced"])
        yield* Deferred.succeed(gate, undefined)
        assert.strictEqual(yield* Fiber.join(using), 2)
        // the hold ended: an idle timeout later the agent passivates
        const released = yield* nextEvent(registry, "raced", "AgentDisposed")
        yield* TestClock.adjust("1 minute")
        yield* Fiber.join(released)
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
      }))

    it.scoped("HOST-02 under maxLive a held agent is not passivated for a waiter; the waiter gets the slot when the hold ends", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host } = yield* hostOver(store, [], { maxLive: 1, activationTimeout: "10 seconds" })
        const entered = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        const using = yield* Effect.fork(host.use("a", (agent) =>
          Effect.zipRight(Deferred.succeed(entered, undefined), Effect.as(Deferred.await(gate), agent.id)), create))
        yield* Deferred.await(entered)
        const waiting = yield* Effect.fork(host.get("b", create))
        yield* eventually(allSuspended([waiting]))
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["a"])
        yield* Deferred.succeed(gate, undefined)
        assert.strictEqual(yield* Fiber.join(using), "a")
        assert.strictEqual((yield* Fiber.join(waiting)).id, "b")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["b"])
      }))

    it.scoped("HOST-02 use returns f's failure and releases the hold; a bad id, an unknown id and a closed host fail typed", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { close, host, registry } = yield* hostOver(store, [], { idleTimeout: "1 minute" })
        const failed = yield* Effect.flip(host.use("f", () => Effect.fail("f failed" as const), create))
        assert.strictEqual(failed, "f failed")
        const disposed = yield* nextEvent(registry, "f", "AgentDisposed")
        yield* TestClock.adjust("1 minute")
        yield* Fiber.join(disposed)
        assert.strictEqual((yield* Effect.flip(host.use("../x", () => Effect.void)))._tag, "InvalidSessionId")
        assert.strictEqual((yield* Effect.flip(host.use("nobody", () => Effect.void)))._tag, "SessionNotFound")
        // a passivated agent comes back for use
        assert.strictEqual(yield* host.use("f", (agent) => Effect.succeed(agent.id)), "f")
        yield* close
        assert.strictEqual((yield* Effect.flip(host.use("f", () => Effect.void)))._tag, "HostClosed")
      }))

    it.scoped("HOST-02 a subscriber of the agent obtained from registry.get keeps it live; when it leaves the agent passivates", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host, registry } = yield* hostOver(store, [], { idleTimeout: "1 minute" })
        yield* host.get("seen", create)
        const agent = Option.getOrThrow(yield* registry.get("seen"))
        const watching = yield* Scope.make()
        yield* Scope.extend(agent.subscribe, watching)
        yield* TestClock.adjust("5 minutes")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["seen"])
        // statusChanges counts too (a lazy stream: subscribed while it runs)
        const statuses = yield* Effect.fork(Stream.runDrain(agent.statusChanges))
        yield* Scope.close(watching, Exit.void)
        yield* TestClock.adjust("5 minutes")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["seen"])
        const disposed = yield* nextEvent(registry, "seen", "AgentDisposed")
        yield* Fiber.interrupt(statuses)
        yield* TestClock.adjust("1 minute")
        yield* Fiber.join(disposed)
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
      }))

    it.scoped("HOST-02 under maxLive a watched idle agent is not passivated; a waiter gets its slot when the last subscriber leaves", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host, registry } = yield* hostOver(store, [], { maxLive: 1, activationTimeout: "10 seconds" })
        yield* host.get("a", create)
        const watching = yield* Scope.make()
        yield* Scope.extend(Option.getOrThrow(yield* registry.get("a")).subscribe, watching)
        const waiting = yield* Effect.fork(host.get("b", create))
        yield* eventually(allSuspended([waiting]))
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["a"])
        yield* Scope.close(watching, Exit.void)
        assert.strictEqual((yield* Fiber.join(waiting)).id, "b")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["b"])
      }))
  })
}
