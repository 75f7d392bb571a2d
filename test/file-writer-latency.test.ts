/**
 * The file writer appends in the calling fiber (no writer fiber of its own): what that must not
 * change — an interrupted caller and a closing scope never leave a write half-acknowledged.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext, NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Scope } from "effect"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import { header, notes, sid } from "./fixtures/persistenceConformance.js"

interface Gate {
  readonly entered: Deferred.Deferred<void>
  readonly open: Deferred.Deferred<void>
}

/** Node's file system whose next write to a session data file waits at `plan.gate`. */
const gated = (plan: { gate: Gate | undefined }) =>
  Layer.effect(
    FileSystem.FileSystem,
    Effect.map(FileSystem.FileSystem, (fs): FileSystem.FileSystem => ({
      ...fs,
      open: (path, options) =>
        Effect.map(fs.open(path, options), (file): FileSystem.File => {
          if (!path.endsWith(".jsonl")) return file
          return {
            [FileSystem.FileTypeId]: FileSystem.FileTypeId,
            fd: file.fd,
            get stat() {
              return file.stat
            },
            get sync() {
              return file.sync
            },
            seek: (offset, from) => file.seek(offset, from),
            read: (buffer) => file.read(buffer),
            readAlloc: (size) => file.readAlloc(size),
            write: (buffer) => file.write(buffer),
            truncate: (length) => file.truncate(length),
            writeAll: (buffer) =>
              Effect.gen(function*() {
                const gate = plan.gate
                if (gate !== undefined) {
                  plan.gate = undefined
                  yield* Deferred.succeed(gate.entered, undefined)
                  yield* Deferred.await(gate.open)
                }
                return yield* file.writeAll(buffer)
              })
          }
        })
    }))
  ).pipe(Layer.provide(NodeFileSystem.layer))

const withGate = (directory: string, plan: { gate: Gate | undefined }) =>
  Effect.provide(
    SessionPersistence,
    FileSessionPersistence.layer({ directory }).pipe(Layer.provide(Layer.merge(NodeContext.layer, gated(plan))))
  )

const inDirectory = <A, E, R>(body: (directory: string) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    return yield* body(yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-" }))
  }).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

const newGate = Effect.all({ entered: Deferred.make<void>(), open: Deferred.make<void>() })

/** Lets every other fiber run until it blocks. */
const settle = Effect.repeatN(Effect.yieldNow(), 20)

describe("FileSessionPersistence writer", () => {
  it.effect("SES-02b an append interrupted while its write is in flight is stored whole and acknowledged", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const plan: { gate: Gate | undefined } = { gate: undefined }
        const persistence = yield* withGate(directory, plan)
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
        const plan: { gate: Gate | undefined } = { gate: undefined }
        const persistence = yield* withGate(directory, plan)
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
})
