/**
 * An Effect-native core (SPEC §14): scoped fibers whose defects are observed (CORE-01), the
 * teardown as a Scope's finalizers (CORE-02), bounded teardown (CORE-06), self-deadlocks that never
 * hang (CORE-07).
 */
import { assert, describe, it } from "@effect/vitest"
import {
  Cause,
  Clock,
  Context,
  Deferred,
  Effect,
  Either,
  Exit,
  Fiber,
  FiberRef,
  Layer,
  Option,
  Schema,
  Scope,
  TestClock
} from "effect"
import * as AgentError from "../src/AgentError.js"
import * as AgentLoop from "../src/AgentLoop.js"
import type { AgentPublisher } from "../src/AgentRegistry.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Inbox from "../src/Inbox.js"
import * as internalRegistry from "../src/internal/agent/registry.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Session from "../src/Session.js"
import * as SessionError from "../src/SessionError.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as SessionPersistenceModule from "../src/SessionPersistence.js"
import { SessionStore } from "../src/SessionStore.js"
import * as Tool from "../src/Tool.js"
import { makeRuntime, route } from "./fixtures/runtime.js"
import { recordingWriter } from "./fixtures/writers.js"
import { stallingRuntime, timerStarted } from "./fixtures/stalling.js"

const planFor = (id: string) => {
  const planned = Session.plan({ id, createdAt: 0 })
  if (Either.isLeft(planned)) throw new Error("bad plan")
  return planned.right
}

/** The messages of the defects of a cause. */
const defectMessages = (cause: Cause.Cause<unknown>) =>
  Array.from(Cause.defects(cause), (d) => (d instanceof Error ? d.message : String(d)))

/** A clock whose synchronous reads throw: the session writer stamps each batch with one. */
const explodingClock = (base: Clock.Clock): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => {
    throw new Error("clock exploded")
  },
  unsafeCurrentTimeNanos: () => base.unsafeCurrentTimeNanos(),
  currentTimeMillis: base.currentTimeMillis,
  currentTimeNanos: base.currentTimeNanos,
  sleep: (duration) => base.sleep(duration)
})

describe("CORE-01 background fibers are scoped and observed", () => {
  it.scoped(
    "CORE-01 a defect in the session writer fails the batch it held and every later append with the cause; none waits forever",
    () =>
      Effect.gen(function*() {
        const { writer, stored } = yield* recordingWriter
        const base = yield* Effect.clock
        const session = yield* Effect.withClock(Session.fromPlan(planFor("w-defect"), writer), explodingClock(base))
        const first = yield* Effect.exit(session.append({ type: "test/a", data: 1 }))
        assert.isTrue(Exit.isFailure(first) && Cause.isDie(first.cause))
        if (Exit.isFailure(first)) assert.deepStrictEqual(defectMessages(first.cause), ["clock exploded"])
        const later = yield* Effect.exit(session.appendAll([{ type: "test/a", data: 2 }]))
        assert.isTrue(Exit.isFailure(later) && Cause.isDie(later.cause), "a later append fails with the cause too")
        if (Exit.isFailure(later)) assert.deepStrictEqual(defectMessages(later.cause), ["clock exploded"])
        assert.deepStrictEqual(yield* stored, [], "nothing was stored")
      })
  )

  it.scoped(
    "CORE-01 a drain whose state update dies leaves the agent AgentBroken{cause} and idle, never Running on a dead fiber",
    () =>
      Effect.gen(function*() {
        const rt = yield* makeRuntime([Model.text("hello")])
        yield* Effect.gen(function*() {
          const factory = yield* AgentLoop.AgentLoop
          const { publisher } = yield* internalRegistry.makeWithPublisher()
          // the status update at the end of the drain publishes `idle`: here that publication dies
          const dying: AgentPublisher = {
            ...publisher,
            publish: (event) =>
              event._tag === "AgentStatusChanged" && event.status === "idle"
                ? Effect.dieMessage("publish exploded")
                : publisher.publish(event)
          }
          const owner = yield* Scope.make()
          const handle = yield* factory.create<never, never>({ sessionId: "a", options: route }, owner, dying)
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          yield* handle.agent.whenIdle
          assert.strictEqual(yield* handle.agent.status, "idle")
          const refused = yield* Effect.flip(handle.agent.followup(Message.user("again", { id: "m2" })))
          assert.instanceOf(refused, AgentError.AgentBroken)
          if (refused instanceof AgentError.AgentBroken) assert.include(String(refused.cause), "publish exploded")
          const maintenance = yield* Effect.flip(handle.agent.runMaintenance(Effect.void))
          assert.instanceOf(maintenance, AgentError.AgentBroken)
          yield* Scope.close(owner, Exit.void)
        }).pipe(Effect.provide(rt.context))
      })
  )

  it.scoped("CORE-01 §6.3 the drain never runs with the waker's log annotations or span", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.toolCall("c1", "probe", "{}"), Model.text("done")])
      const seen = yield* Deferred.make<{ readonly annotations: ReadonlyArray<string>; readonly span: boolean }>()
      const probe = Tool.make({
        name: "probe",
        description: "reports the fiber's log annotations and span",
        parameters: Schema.Struct({}),
        run: () =>
          Effect.gen(function*() {
            const annotations = yield* FiberRef.get(FiberRef.currentLogAnnotations)
            const span = yield* Effect.currentSpan.pipe(Effect.option)
            const wakerSpan = Option.isSome(span) && span.value.name === "waker-span"
            yield* Deferred.succeed(seen, { annotations: Array.from(annotations).map(([key]) => key), span: wakerSpan })
            return Tool.text("ok")
          })
      })
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({
          sessionId: "a",
          options: route,
          setup: (agent) => agent.tools.register(probe)
        })
        yield* handle.agent.followup(Message.user("go", { id: "m1" })).pipe(
          Effect.annotateLogs("waker", "yes"),
          Effect.withSpan("waker-span")
        )
        const observed = yield* Deferred.await(seen)
        assert.isFalse(observed.annotations.includes("waker"))
        assert.isFalse(observed.span)
        yield* handle.agent.whenIdle
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("CORE-07 self-deadlocks never hang", () => {
  it.scoped(
    "CORE-07 whenIdle awaited from the agent's own tool or hook dies with a defect naming the mistake; AGT-05's whenIdle stays infallible",
    () =>
      Effect.gen(function*() {
        const rt = yield* makeRuntime([Model.toolCall("c1", "waiter", "{}"), Model.text("done")])
        const fromTool = yield* Deferred.make<Exit.Exit<void>>()
        const fromHook = yield* Deferred.make<Exit.Exit<void>>()
        const waiter = Tool.make({
          name: "waiter",
          description: "awaits its own agent's whenIdle",
          parameters: Schema.Struct({}),
          run: (_, context) =>
            Effect.exit(context.agent.whenIdle).pipe(
              Effect.flatMap((exit) => Deferred.succeed(fromTool, exit)),
              Effect.as(Tool.text("waited"))
            )
        })
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.create({
            sessionId: "a",
            options: route,
            setup: (agent) =>
              Effect.zipRight(
                agent.tools.register(waiter),
                agent.hooks.turnStopping(({ agent: self }) =>
                  Effect.exit(self.whenIdle).pipe(Effect.flatMap((exit) => Deferred.succeed(fromHook, exit)))
                )
              )
          })
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          // awaited from outside the agent, whenIdle waits for the turn and never fails
          yield* handle.agent.whenIdle
          for (const exit of [yield* Deferred.await(fromTool), yield* Deferred.await(fromHook)]) {
            assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
            if (Exit.isFailure(exit)) {
              const [message] = defectMessages(exit.cause)
              assert.include(message, "whenIdle")
              assert.include(message, "own activity")
              assert.include(message, "wait for itself")
            }
          }
        }).pipe(Effect.provide(rt.context))
      })
  )

  it.scoped("CORE-07 an Inbox.make onChange observer that writes to the same inbox fails AgentBusy{reason}; nothing hangs", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "observed" })
      const seen = yield* Deferred.make<Exit.Exit<void, unknown>>()
      let inbox: Inbox.Inbox | undefined
      inbox = yield* Inbox.make(session, {
        onChange: (change) =>
          change._tag === "Inserted" && change.messages[0]?.id === "m1"
            ? Effect.exit(inbox!.append("next-turn", Message.user("echo", { id: "m2" }))).pipe(
              Effect.flatMap((exit) => Deferred.succeed(seen, exit)),
              Effect.asVoid
            )
            : Effect.void
      })
      yield* inbox.append("next-turn", Message.user("first", { id: "m1" }))
      const exit = yield* Deferred.await(seen)
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const failure = Cause.failureOption(exit.cause)
        assert.isTrue(Option.isSome(failure) && failure.value instanceof AgentError.AgentBusy)
        if (Option.isSome(failure) && failure.value instanceof AgentError.AgentBusy) {
          assert.include(failure.value.reason ?? "", "onChange")
          assert.include(failure.value.message, "onChange")
        }
      }
      assert.deepStrictEqual((yield* inbox.nextTurn).map((m) => m.id), ["m1"])
      // after the observer returned, the inbox takes writes again
      yield* inbox.append("next-turn", Message.user("later", { id: "m3" }))
      assert.deepStrictEqual((yield* inbox.nextTurn).map((m) => m.id), ["m1", "m3"])
    }))
})

describe("CORE-06 bounded teardown", () => {
  it.scoped(
    "CORE-06 a stalled write cannot hang dispose or the owner's close: after teardownTimeout AgentDisposeError{TeardownTimeout}, the entry is gone, the session stays locked until the write settles, then resumes",
    () =>
      Effect.gen(function*() {
        const rt = yield* stallingRuntime()
        const registry = Context.get(rt.context, AgentRegistry)
        const store = Context.get(rt.context, SessionStore)
        const owner = yield* Scope.make()
        const handle = yield* Scope.extend(registry.create({ sessionId: "a", options: route }), owner)
        yield* handle.agent.followup(Message.user("go", { id: "m1" }))
        yield* rt.reached
        const disposing = yield* Effect.fork(Effect.flip(handle.dispose))
        const closingOwner = yield* Effect.fork(Scope.close(owner, Exit.void))
        yield* timerStarted
        yield* TestClock.adjust("4 seconds")
        assert.isTrue(Option.isNone(yield* Fiber.poll(disposing)), "the teardown is awaited until its timeout")
        yield* TestClock.adjust("1 second")
        const error = yield* Fiber.join(disposing)
        yield* Fiber.join(closingOwner)
        assert.instanceOf(error, AgentError.AgentDisposeError)
        assert.instanceOf(error.cause, AgentError.TeardownTimeout)
        if (error.cause instanceof AgentError.TeardownTimeout) assert.strictEqual(error.cause.timeoutMillis, 5000)
        assert.isTrue(Option.isNone(yield* registry.get("a")), "the agent left the registry")
        assert.isTrue(Option.isNone(yield* store.get("a")), "the session left the store")
        // PERS-01: the writer is still held while the stalled write may land
        const locked = yield* Effect.flip(registry.resume({ sessionId: "a" }))
        assert.instanceOf(locked, SessionError.SessionLocked)
        // the write settles: the teardown goes on and releases the writer; the session resumes
        yield* rt.open
        yield* rt.released
        const resumed = yield* registry.resume({ sessionId: "a" })
        const events = yield* resumed.agent.session.events
        const last = events[events.length - 1]
        assert.strictEqual(last?.type, "turn/end")
        assert.deepStrictEqual(last?.data, { turn: 1, reason: { kind: "aborted", cause: { kind: "disposed" } } })
        yield* resumed.dispose
      }).pipe(Effect.provide(Layer.empty))
  )

  it.scoped("CORE-06 a stalled write cannot hang the runtime's release; the session stays locked meanwhile", () =>
    Effect.gen(function*() {
      const rt = yield* stallingRuntime()
      const registry = Context.get(rt.context, AgentRegistry)
      const handle = yield* registry.create({ sessionId: "b", options: route })
      yield* handle.agent.followup(Message.user("go", { id: "m1" }))
      yield* rt.reached
      const closing = yield* Effect.fork(rt.close)
      yield* timerStarted
      yield* TestClock.adjust("5 seconds")
      yield* Fiber.join(closing)
      // another runtime over the same storage finds the session locked
      const persistence = yield* Effect.provide(SessionPersistence, SessionPersistenceModule.layerMemory(rt.storage))
      const reopened = yield* Effect.flip(Effect.scoped(persistence.openWrite("b" as Message.SessionId)))
      assert.instanceOf(reopened, SessionError.SessionLocked)
    }))
})
