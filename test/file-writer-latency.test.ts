/**
 * The file writer appends in the calling fiber (no writer fiber of its own): what that must not
 * change — an interrupted caller and a closing scope never leave a write half-acknowledged.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import { inDirectory, newFilePlan, newGate, withFilePlan } from "./fixtures/instrumentedFiles.js"
import { header, notes, sid } from "./fixtures/persistenceConformance.js"

/** Lets every other fiber run until it blocks. */
const settle = Effect.repeatN(Effect.yieldNow(), 20)

describe("FileSessionPersistence writer", () => {
  it.effect("SES-02b an append interrupted while its write is in flight is stored whole and acknowledged", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const plan = newFilePlan()
        const persistence = yield* withFilePlan(directory, plan)
        const id = sid("interrupted")
        const writer = yield* persistence.create(header(id))
        const gate = yield* newGate
        plan.gate = gate
        const append = yield* Effect.fork(writer.append(notes(0, 2)))
        yield* Deferred.await(gate.entered)
        yield* Fiber.interruptFork(append)
        yield* settle
        yield* Deferred.succeed(gate.open, undefined)
        yield* Fiber.await(append)

        assert.strictEqual(yield* writer.nextSeq, 2)
        yield* writer.append(notes(2, 1))
        assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 3))
      }).pipe(Effect.scoped)))

  it.effect("PERS-01 PERS-04 closing the writer lets the write in flight finish, then refuses appends", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const plan = newFilePlan()
        const persistence = yield* withFilePlan(directory, plan)
        const id = sid("closing")
        const scope = yield* Scope.make()
        const writer = yield* Scope.extend(persistence.create(header(id)), scope)
        const gate = yield* newGate
        plan.gate = gate
        const inFlight = yield* Effect.fork(writer.append(notes(0, 1)))
        yield* Deferred.await(gate.entered)
        const joined = yield* Effect.fork(writer.append(notes(1, 1)))
        yield* settle
        const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
        yield* settle
        assert.isTrue(Option.isNone(yield* Fiber.poll(closing)), "closing waits for the write in flight")

        yield* Deferred.succeed(gate.open, undefined)
        yield* Fiber.join(inFlight)
        const refused = yield* Effect.flip(Fiber.join(joined))
        assert.strictEqual(refused._tag, "SessionConflict")
        yield* Fiber.join(closing)
        const late = yield* Effect.flip(writer.append(notes(1, 1)))
        assert.strictEqual(late._tag, "SessionConflict")
        // The lock is released: a new writer reads exactly the acknowledged event.
        const { stored } = yield* persistence.openWrite(id)
        assert.deepStrictEqual(stored.events, notes(0, 1))
      }).pipe(Effect.scoped)))

  it.effect("SES-02 an append that joined the write in flight goes out with the next write even if its caller is interrupted", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const plan = newFilePlan()
        const persistence = yield* withFilePlan(directory, plan)
        const id = sid("joined")
        const writer = yield* persistence.create(header(id))
        const syncsBefore = plan.syncs
        const gate = yield* newGate
        plan.gate = gate
        const inFlight = yield* Effect.fork(writer.append(notes(0, 1)))
        yield* Deferred.await(gate.entered)
        const joined = yield* Effect.fork(writer.append(notes(1, 2)))
        yield* settle
        yield* Fiber.interruptFork(joined)
        yield* settle
        yield* Deferred.succeed(gate.open, undefined)
        yield* Fiber.join(inFlight)
        yield* Fiber.await(joined)
        // A joined append cannot be taken back: it was written and acknowledged, one sync later.
        assert.strictEqual(plan.syncs - syncsBefore, 2)
        assert.strictEqual(yield* writer.nextSeq, 3)
        assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 3))
      }).pipe(Effect.scoped)))

  it.effect("PERS-01 discard during a write waits for it, then removes the session and refuses appends", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const plan = newFilePlan()
        const persistence = yield* withFilePlan(directory, plan)
        const id = sid("discarded")
        const writer = yield* persistence.create(header(id))
        const gate = yield* newGate
        plan.gate = gate
        const inFlight = yield* Effect.fork(writer.append(notes(0, 1)))
        yield* Deferred.await(gate.entered)
        const discarding = yield* Effect.fork(writer.discard)
        yield* settle
        assert.isTrue(Option.isNone(yield* Fiber.poll(discarding)), "discard waits for the write in flight")
        const refused = yield* Effect.flip(writer.append(notes(1, 1)))
        assert.strictEqual(refused._tag, "SessionConflict")

        yield* Deferred.succeed(gate.open, undefined)
        yield* Fiber.join(inFlight)
        yield* Fiber.join(discarding)
        assert.isFalse(yield* persistence.exists(id))
        // The id is free again.
        yield* persistence.create(header(id))
      }).pipe(Effect.scoped)))

  it.effect("SES-02b DUR-04 a batch the writer cannot encode fails alone with InvalidEventData; later appends and the close go on", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const persistence = yield* withFilePlan(directory, newFilePlan())
        const id = sid("unencodable")
        const scope = yield* Scope.make()
        const writer = yield* Scope.extend(persistence.create(header(id)), scope)
        // only reachable by calling the writer directly: sessions validate their events first
        const unencodable = [{ seq: 0, time: 1, type: "test/note", data: { n: 10n } }] as unknown as ReturnType<
          typeof notes
        >
        const failed = yield* Effect.flip(writer.append(unencodable))
        assert.strictEqual(failed._tag, "InvalidEventData")
        if (failed._tag === "InvalidEventData") assert.include(failed.reason, "BigInt")
        yield* writer.append(notes(0, 2))
        yield* Scope.close(scope, Exit.void)
        assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 2))
      }).pipe(Effect.scoped)))
})
