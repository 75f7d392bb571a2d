import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Effect, Either, Exit, Fiber, Scope, Stream, TestClock } from "effect"
import type { Scheduler } from "effect"
import { core } from "../src/internal/log/session.js"
import * as Session from "../src/Session.js"
import * as SessionError from "../src/SessionError.js"
import * as SessionPersistenceModule from "../src/SessionPersistence.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import type { SessionWriter } from "../src/SessionPersistence.js"
import { recordingWriter } from "./fixtures/writers.js"

/**
 * A scheduler that asks its fibers to yield before pseudo-random operations (one in twenty, seeded;
 * a yield itself runs about ten operations, so more would rarely let a fiber make progress).
 */
const yieldingAtRandom = (seed: number): Scheduler.Scheduler => {
  let state = seed
  return {
    shouldYield: () => {
      state = (state * 1103515245 + 12345) % 2147483648
      return Math.floor(state / 65536) % 20 === 0 ? 0 : false
    },
    scheduleTask: (task) => {
      setImmediate(task)
    }
  }
}

const planFor = (id: string) => {
  const planned = Session.plan({ id, createdAt: 0 })
  if (Either.isLeft(planned)) throw new Error("bad plan")
  return planned.right
}

describe("Session writer", () => {
  it.scoped("SES-02 appends and appendAlls submitted before the writer runs share one write; each caller gets its own events", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(77)
      const { writer, batches } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("w1"), writer)
      const a = yield* Effect.fork(session.append({ type: "test/n", data: 0 }))
      const b = yield* Effect.fork(session.appendAll([{ type: "test/n", data: 1 }, { type: "test/n", data: 2 }]))
      const c = yield* Effect.fork(session.append({ type: "test/n", data: 3 }))
      const d = yield* Effect.fork(core(session).appendCore([{ type: "turn/start", data: { turn: 1 } }]))
      const first = yield* Fiber.join(a)
      const pair = yield* Fiber.join(b)
      const third = yield* Fiber.join(c)
      const opened = yield* Fiber.join(d)
      assert.deepStrictEqual([first.seq, first.data, first.time], [0, 0, 77])
      assert.deepStrictEqual(pair.map((e) => [e.seq, e.data]), [[1, 1], [2, 2]])
      assert.deepStrictEqual([third.seq, third.data], [3, 3])
      assert.deepStrictEqual(opened.map((e) => [e.seq, e.type]), [[4, "turn/start"]])
      assert.deepStrictEqual((yield* batches).map((batch) => batch.map((e) => e.seq)), [[0, 1, 2, 3, 4]])
      assert.strictEqual(core(session).openTurn(), 1)
      assert.deepStrictEqual(yield* session.events, [first, ...pair, third, ...opened])
    }))

  it.scoped("DUR-04 DUR-05 in one session batch, a caller refused for its size fails alone; the others are written in order", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistenceModule.makeMemoryStorage
      const persistence = yield* Effect.provide(
        SessionPersistenceModule.SessionPersistence,
        SessionPersistenceModule.layerMemory(storage, { maxEventBytes: 200 })
      )
      const plan = planFor("w-sized")
      const session = yield* Session.fromPlan(plan, yield* persistence.create(plan.header))
      const a = yield* Effect.fork(session.append({ type: "test/n", data: 0 }))
      const big = yield* Effect.fork(session.append({ type: "test/n", data: "x".repeat(300) }))
      const b = yield* Effect.fork(session.appendAll([{ type: "test/n", data: 1 }, { type: "test/n", data: 2 }]))
      assert.strictEqual((yield* Fiber.join(a)).seq, 0)
      const refused = yield* Effect.flip(Fiber.join(big))
      assert.strictEqual(refused._tag, "InvalidEventData")
      assert.deepStrictEqual((yield* Fiber.join(b)).map((e) => e.seq), [1, 2])
      assert.deepStrictEqual((yield* persistence.read(session.id)).events.map((e) => e.data), [0, 1, 2])
      assert.deepStrictEqual((yield* session.events).map((e) => e.data), [0, 1, 2])
    }))

  it.scoped("SES-02b a failed write fails every caller of its batch and commits nothing; the next batch reuses the seqs", () =>
    Effect.gen(function*() {
      const { writer, stored, failNext } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("w2"), writer)
      yield* failNext
      const a = yield* Effect.fork(session.append({ type: "test/a", data: 1 }))
      const b = yield* Effect.fork(session.appendAll([{ type: "test/b", data: 2 }, { type: "test/b", data: 3 }]))
      const failures = [yield* Effect.flip(Fiber.join(a)), yield* Effect.flip(Fiber.join(b))]
      assert.deepStrictEqual(failures.map((e) => e._tag), ["PersistenceError", "PersistenceError"])
      assert.strictEqual((yield* session.events).length, 0)
      const next = yield* session.append({ type: "test/a", data: 4 })
      assert.strictEqual(next.seq, 0)
      assert.deepStrictEqual((yield* stored).map((e) => e.data), [4])
    }))

  it.scoped("SES-00 DUR-01 appendCore of data the reader would refuse fails InvalidEventData and commits nothing", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "w3" })
      for (
        const event of [
          { type: "turn/start", data: { turn: 1n } },
          { type: "turn/start", data: { turn: 0 } },
          { type: "step/start", data: { turn: 1, step: 1, extra: true } }
        ]
      ) {
        const exit = yield* Effect.exit(core(session).appendCore([event as never]))
        assert.isTrue(Exit.isFailure(exit) && !Cause.isDie(exit.cause), event.type)
        if (Exit.isFailure(exit)) assert.strictEqual(Cause.squash(exit.cause) instanceof SessionError.InvalidEventData, true)
      }
      assert.strictEqual((yield* session.events).length, 0)
      assert.strictEqual((yield* session.append({ type: "test/a", data: 1 })).seq, 0)
    }))

  it.scoped("SES-02 SES-04 an idle writer takes each new batch at once; closing it while it waits ends it and the changes", () =>
    Effect.gen(function*() {
      const { writer, batches } = yield* recordingWriter
      const scope = yield* Scope.make()
      const session = yield* Scope.extend(Session.fromPlan(planFor("w5"), writer), scope)
      const changes = yield* Effect.fork(Stream.runCollect(yield* session.subscribe))
      // one after another: each append finds the writer waiting and wakes it
      for (let i = 0; i < 3; i++) assert.strictEqual((yield* session.append({ type: "test/a", data: i })).seq, i)
      assert.deepStrictEqual((yield* batches).map((batch) => batch.map((e) => e.seq)), [[0], [1], [2]])
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual((yield* Effect.flip(session.append({ type: "test/a", data: 3 })))._tag, "SessionClosed")
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Fiber.join(changes)).map((e) => e.seq), [0, 1, 2])
    }))

  it.effect("SES-02 SES-04 a writer that yields at any operation loses no wake-up: every append is written, every close returns", () =>
    Effect.gen(function*() {
      // The scheduler may ask a fiber to yield before any operation (Effect's default one does past
      // 2048 in a row). A writer that yielded between finding nothing to write and registering its
      // wake-up used to miss an append or a close made meanwhile, and wait forever (this test hung).
      for (let seed = 1; seed <= 30; seed++) {
        const { writer, stored } = yield* recordingWriter
        const scope = yield* Scope.make()
        // the writer fiber forks from the runtime captured here, with this scheduler
        const session = yield* Scope.extend(Session.fromPlan(planFor(`w6-${seed}`), writer), scope).pipe(
          Effect.withScheduler(yieldingAtRandom(seed))
        )
        for (let i = 0; i < 20; i++) assert.strictEqual((yield* session.append({ type: "test/a", data: i })).seq, i)
        // a close right after an append finds the writer going idle
        yield* Scope.close(scope, Exit.void)
        assert.strictEqual((yield* stored).length, 20)
      }
    }))

  it.effect("SES-02b a persistence writer that throws fails its batch with a defect; the session writes on", () =>
    Effect.gen(function*() {
      const stored: Array<SessionEvent> = []
      let throwNext = true
      const throwing: SessionWriter = {
        nextSeq: Effect.sync(() => stored.length),
        discard: Effect.void,
        append: (events) => {
          if (throwNext) {
            throwNext = false
            throw new Error("a buggy writer")
          }
          return Effect.sync(() => {
            stored.push(...events)
          })
        }
      }
      const scope = yield* Scope.make()
      const session = yield* Scope.extend(Session.fromPlan(planFor("w7"), throwing), scope)
      const exit = yield* Effect.exit(session.append({ type: "test/a", data: 1 }))
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      assert.strictEqual((yield* session.events).length, 0)
      assert.strictEqual((yield* session.append({ type: "test/a", data: 2 })).seq, 0)
      yield* Scope.close(scope, Exit.void)
      assert.deepStrictEqual(stored.map((e) => e.data), [2])
    }))

  it.effect("SES-04 appends queued before close are written; appends after it fail SessionClosed", () =>
    Effect.gen(function*() {
      const { writer, stored, holdNext } = yield* recordingWriter
      const scope = yield* Scope.make()
      const session = yield* Scope.extend(Session.fromPlan(planFor("w4"), writer), scope)
      const held = yield* holdNext
      const inFlight = yield* Effect.fork(session.append({ type: "test/a", data: 1 }))
      yield* held.reached
      const queued = yield* Effect.fork(session.append({ type: "test/a", data: 2 }))
      yield* Effect.yieldNow()
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* Effect.yieldNow()
      const late = yield* Effect.flip(session.append({ type: "test/a", data: 3 }))
      assert.strictEqual(late._tag, "SessionClosed")
      yield* held.open
      yield* Fiber.join(closing)
      assert.strictEqual((yield* Fiber.join(inFlight)).seq, 0)
      assert.strictEqual((yield* Fiber.join(queued)).seq, 1)
      assert.deepStrictEqual((yield* stored).map((e) => e.data), [1, 2])
    }))
})
