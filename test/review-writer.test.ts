import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber, FiberRef, HashMap, Option, TestClock } from "effect"
import * as Session from "../src/Session.js"
import { recordingWriter } from "./fixtures/writers.js"

const planFor = (id: string) => {
  const planned = Session.plan({ id, createdAt: 0 })
  if (Either.isLeft(planned)) throw new Error("bad plan")
  return planned.right
}

describe("review: session writer start", () => {
  it.scoped("control: an append completes", () =>
    Effect.gen(function*() {
      const { writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("ctl"), writer)
      const fiber = yield* Effect.fork(Effect.timeoutOption(session.append({ type: "test/a", data: 1 }), "1 second"))
      yield* TestClock.adjust("1 second")
      assert.isTrue(Option.isSome(yield* Fiber.join(fiber)))
    }))

  it.scoped("SES-02 CORE-01 an append Effect built but never run (or interrupted before it ran) leaves no writer: later appends wait forever", () =>
    Effect.gen(function*() {
      const { writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("lost"), writer)
      // a first append interrupted before it started (e.g. the loser of a race, a timeout)
      const first = yield* Effect.fork(session.append({ type: "test/a", data: 0 }))
      yield* Fiber.interrupt(first)
      const fiber = yield* Effect.fork(Effect.timeoutOption(session.append({ type: "test/a", data: 1 }), "1 second"))
      yield* TestClock.adjust("1 second")
      assert.isTrue(Option.isSome(yield* Fiber.join(fiber)), "the second append never completed: no writer fiber")
    }))
})

describe("review: writer FiberRefs", () => {
  it.scoped("CORE-01 §6.3 the session writer fiber does not carry the session builder's log annotations or span", () =>
    Effect.gen(function*() {
      const { writer } = yield* recordingWriter
      const seen: Array<unknown> = []
      const spied = {
        ...writer,
        append: (events: Parameters<typeof writer.append>[0]) =>
          Effect.zipRight(
            Effect.flatMap(FiberRef.get(FiberRef.currentLogAnnotations), (a) =>
              Effect.flatMap(Effect.currentSpan.pipe(Effect.option), (span) =>
                Effect.sync(() => seen.push([HashMap.size(a), Option.isSome(span)])))),
            writer.append(events)
          )
      }
      const session = yield* Session.fromPlan(planFor("refs"), spied).pipe(
        Effect.annotateLogs("request", "r1"),
        Effect.withSpan("build-request")
      )
      yield* session.append({ type: "test/a", data: 1 })
      assert.deepStrictEqual(seen, [[0, false]])
    }))
})
