/**
 * An Effect-native core (SPEC §14): scoped fibers whose defects are observed (CORE-01), the
 * teardown as a Scope's finalizers (CORE-02), bounded teardown (CORE-06), self-deadlocks that never
 * hang (CORE-07).
 */
import { assert, describe, it } from "@effect/vitest"
import {
  Context,
  Effect,
  Either,
  Exit,
  Fiber,
  Option,
  Scope,
  TestClock
} from "effect"
import * as AgentError from "../src/AgentError.js"
import * as AgentLoop from "../src/AgentLoop.js"
import type { AgentPublisher } from "../src/AgentRegistry.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as internalRegistry from "../src/internal/agent/registry.js"
import * as Message from "../src/Message.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as SessionPersistenceModule from "../src/SessionPersistence.js"
import { route } from "./fixtures/runtime.js"
import { stallingRuntime, timerStarted } from "./fixtures/stalling.js"

describe("review: CORE-06 abandoned teardown", () => {
  it.scoped("CORE-06 after the runtime's release abandoned a stalled teardown, the writer is released once the write settles", () =>
    Effect.gen(function*() {
      const rt = yield* stallingRuntime(["request/config", "test/stall"])
      const registry = Context.get(rt.context, AgentRegistry)
      const handle = yield* registry.create({ sessionId: "b", options: route })
      yield* handle.agent.followup(Message.user("go", { id: "m1" }))
      yield* rt.reached
      const closing = yield* Effect.fork(rt.close)
      yield* timerStarted
      yield* TestClock.adjust("5 seconds")
      yield* Fiber.join(closing)
      // the stalled write settles: the writer (lock) should now be released (CORE-06, PERS-01)
      yield* rt.open
      const released = yield* Effect.fork(Effect.timeoutOption(rt.released, "1 minute"))
      yield* TestClock.adjust("1 minute")
      assert.isTrue(Option.isSome(yield* Fiber.join(released)), "the writer was never released")
      const persistence = yield* Effect.provide(SessionPersistence, SessionPersistenceModule.layerMemory(rt.storage))
      const reopened = yield* Effect.exit(Effect.scoped(persistence.openWrite("b" as Message.SessionId)))
      assert.isTrue(Exit.isSuccess(reopened), "the session stays locked forever")
    }))
})

describe("review: CORE-06 stall outside the driver", () => {
  it.scoped("CORE-06 a stalled user append (agent idle) cannot hang the runtime's release", () =>
    Effect.gen(function*() {
      const rt = yield* stallingRuntime(["request/config", "test/stall"])
      const registry = Context.get(rt.context, AgentRegistry)
      const handle = yield* registry.create({ sessionId: "c", options: route })
      yield* Effect.fork(handle.agent.session.append({ type: "test/stall", data: 1 }))
      yield* rt.reached
      const closing = yield* Effect.fork(Effect.timeoutOption(Effect.disconnect(rt.close), "1 minute"))
      yield* timerStarted
      yield* TestClock.adjust("5 seconds")
      yield* TestClock.adjust("1 minute")
      assert.isTrue(Option.isSome(yield* Fiber.join(closing)), "the runtime's release hangs")
    }))
})
describe("review: CORE-06 stalled user append, then release", () => {
  // was a diagnostic asserting that the release hangs until the gate opens (the bug); it now
  // asserts the contract: the release is bounded and the writer stays held until the write settles
  it.scoped("CORE-06 PERS-01 after dispose timed out on a stalled user append, the runtime's release finishes; the writer is held until the write settles, then released", () =>
    Effect.gen(function*() {
      const rt = yield* stallingRuntime(["request/config", "test/stall"])
      const registry = Context.get(rt.context, AgentRegistry)
      const handle = yield* registry.create({ sessionId: "d", options: route })
      const appending = yield* Effect.fork(Effect.either(handle.agent.session.append({ type: "test/stall", data: 1 })))
      yield* rt.reached
      const disposing = yield* Effect.fork(Effect.flip(handle.dispose))
      yield* timerStarted
      yield* TestClock.adjust("5 seconds")
      const error = yield* Fiber.join(disposing)
      assert.instanceOf(error.cause, AgentError.TeardownTimeout)
      const closing = yield* Effect.fork(Effect.timeoutOption(Effect.disconnect(rt.close), "1 minute"))
      yield* TestClock.adjust("1 minute")
      assert.isTrue(Option.isSome(yield* Fiber.join(closing)), "the runtime's release hangs")
      // the runtime gave up on the stalled append: its caller gets a PersistenceError
      const appended = yield* Fiber.join(appending)
      assert.isTrue(Either.isLeft(appended) && appended.left._tag === "PersistenceError")
      const persistence = yield* Effect.provide(SessionPersistence, SessionPersistenceModule.layerMemory(rt.storage))
      const reopen = Effect.scoped(persistence.openWrite("d" as Message.SessionId))
      const locked = yield* Effect.flip(reopen)
      assert.strictEqual(locked._tag, "SessionLocked", "the writer is held while the write may still land")
      yield* rt.open
      const released = yield* Effect.fork(Effect.timeoutOption(rt.released, "1 minute"))
      yield* TestClock.adjust("1 minute")
      assert.isTrue(Option.isSome(yield* Fiber.join(released)), "the writer was never released")
      assert.isTrue(Exit.isSuccess(yield* Effect.exit(reopen)), "the session stays locked forever")
    }))
})

describe("review: CORE-06 watcher death", () => {
  it.scoped("CORE-06 LIFE-02 a publisher whose detach dies at the timeout still releases the owners (the watcher must not die)", () =>
    Effect.gen(function*() {
      const rt = yield* stallingRuntime(["request/config", "test/stall"])
      const factory = Context.get(rt.context, AgentLoop.AgentLoop)
      const { publisher } = yield* internalRegistry.makeWithPublisher()
      const dying: AgentPublisher = { ...publisher, detach: () => Effect.dieMessage("detach exploded") }
      const owner = yield* Scope.make()
      const handle = yield* factory.create<never, never>({ sessionId: "e", options: route }, owner, dying).pipe(
        Effect.provide(rt.context)
      )
      yield* handle.agent.followup(Message.user("go", { id: "m1" }))
      yield* rt.reached
      const disposing = yield* Effect.fork(Effect.exit(handle.dispose))
      yield* timerStarted
      yield* TestClock.adjust("5 seconds")
      yield* TestClock.adjust("1 minute")
      assert.isTrue(Option.isSome(yield* Fiber.poll(disposing)), "dispose still waits after the timeout")
      // the watcher lives on: a later stalled teardown (a user append waiting on the same gate)
      // still times out
      const later = yield* factory.create<never, never>({ sessionId: "e2", options: route }, owner, publisher).pipe(
        Effect.provide(rt.context)
      )
      const appending = yield* Effect.fork(later.agent.session.append({ type: "test/stall", data: 1 }))
      while ((yield* Fiber.status(appending))._tag !== "Suspended") yield* Effect.yieldNow()
      const disposingLater = yield* Effect.fork(Effect.exit(later.dispose))
      for (let i = 0; i < 1000 && (yield* TestClock.sleeps()).length === 0; i++) yield* Effect.yieldNow()
      yield* TestClock.adjust("5 seconds")
      const laterExit = yield* Fiber.poll(disposingLater)
      assert.isTrue(Option.isSome(laterExit), "a later teardown no longer times out: the watcher died")
      yield* rt.open
    }))
})

describe("review: control watcher", () => {
  it.scoped("control publisher at the timeout still releases the owners (the watcher must not die)", () =>
    Effect.gen(function*() {
      const rt = yield* stallingRuntime(["request/config", "test/stall"])
      const factory = Context.get(rt.context, AgentLoop.AgentLoop)
      const { publisher } = yield* internalRegistry.makeWithPublisher()
      const owner = yield* Scope.make()
      const handle = yield* factory.create<never, never>({ sessionId: "f", options: route }, owner, publisher).pipe(
        Effect.provide(rt.context)
      )
      yield* handle.agent.followup(Message.user("go", { id: "m1" }))
      yield* rt.reached
      const disposing = yield* Effect.fork(Effect.exit(handle.dispose))
      yield* timerStarted
      yield* TestClock.adjust("5 seconds")
      yield* TestClock.adjust("1 minute")
      assert.isTrue(Option.isSome(yield* Fiber.poll(disposing)), "dispose still waits after the timeout")
      yield* rt.open
    }))
})
