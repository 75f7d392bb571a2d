import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SessionError from "../src/SessionError.js"
import { conformance, header, lineSize, notes, sid } from "./fixtures/persistenceConformance.js"

conformance(
  "SessionPersistence.layerMemory conformance (PERS-06)",
  (limits) =>
    Layer.unwrapEffect(
      Effect.map(SessionPersistence.makeMemoryStorage, (storage) => SessionPersistence.layerMemory(storage, limits))
    )
)

describe("SessionPersistence.layerMemory", () => {
  const instance = (storage: SessionPersistence.MemoryStorage, instanceId: string) =>
    Effect.provide(SessionPersistence.SessionPersistence, SessionPersistence.layerMemory(storage, { instanceId }))

  it.effect("PERS-05 crash(instanceId) drops that instance's locks so another instance can open the session", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const first = yield* instance(storage, "first")
      const second = yield* instance(storage, "second")
      const id = sid("crashing")
      const scope = yield* Scope.make()
      const writer = yield* first.create(header(id)).pipe(Scope.extend(scope))
      yield* writer.append(notes(0, 2))

      const locked = yield* Effect.flip(Effect.scoped(second.openWrite(id)))
      assert.strictEqual(locked._tag, "SessionLocked")
      if (locked._tag === "SessionLocked") assert.include(locked.holder, "first")

      yield* storage.crash("first")
      const { stored } = yield* Effect.scoped(second.openWrite(id))
      assert.deepStrictEqual(stored.events, notes(0, 2))
      yield* Scope.close(scope, Exit.void)
    }))

  it.effect("PERS-05 a crashed instance's writer can no longer append", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const first = yield* instance(storage, "first")
      const second = yield* instance(storage, "second")
      const id = sid("crashed-writer")
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* first.create(header(id))
        yield* writer.append(notes(0, 1))
        yield* storage.crash("first")

        const refused = yield* Effect.flip(writer.append(notes(1, 1)))
        assert.strictEqual(refused._tag, "SessionConflict")
        assert.deepStrictEqual(yield* storage.events(id), notes(0, 1))

        // The restarted process owns the session now; the dead writer still cannot write.
        const { writer: restarted } = yield* second.openWrite(id)
        yield* restarted.append(notes(1, 1))
        assert.strictEqual((yield* Effect.flip(writer.append(notes(2, 1))))._tag, "SessionConflict")
        assert.deepStrictEqual(yield* storage.events(id), notes(0, 2))
      }))
    }))

  it.effect("DUR-05 storage.truncate recounts the session's size: the truncated events no longer count", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const id = sid("truncated")
      const limit = lineSize(header(id)) + 3 * lineSize(notes(0, 1)[0])
      const persistence = yield* Effect.provide(
        SessionPersistence.SessionPersistence,
        SessionPersistence.layerMemory(storage, { maxSessionBytes: limit })
      )
      yield* Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(notes(0, 3))))
      yield* storage.truncate(id, 1)
      yield* Effect.scoped(Effect.gen(function*() {
        const { writer } = yield* persistence.openWrite(id)
        yield* writer.append(notes(1, 2))
        const full = yield* Effect.flip(writer.append(notes(3, 1)))
        const size = limit + lineSize(notes(3, 1)[0])
        assert.deepStrictEqual(full, new SessionError.SessionFull({ id, size, limit }))
      }))
    }))
})
