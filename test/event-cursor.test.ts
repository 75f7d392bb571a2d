/**
 * EVS-01: `session.eventsFrom(seq)` — the stored events from a cursor, then the live ones as they
 * commit: no gap, no duplicate, in order, wherever it starts; a slow reader neither blocks the writer
 * nor loses events.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Either, Exit, FastCheck, Fiber, Layer, Scope, Stream } from "effect"
import * as nodeFs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as eventCursor from "../src/internal/log/eventCursor.js"
import * as sessionInternal from "../src/internal/log/session.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as Session from "../src/Session.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"

const seqs = (events: Iterable<SessionEvent>) => Array.from(events, (event) => event.seq)
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i)
const note = (n: number) => ({ type: "test/note", data: n })
type Note = ReturnType<typeof note>
const notes = (from: number, to: number) => range(from, to).map(note) as [Note, ...Array<Note>]

/** A session in its own Scope, so a test can close it (which ends every live stream). */
const openSession = (id: string) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const session = yield* Scope.extend(Session.make({ id }), scope)
    return { session, close: Scope.close(scope, Exit.void) }
  })

const collect = <E>(stream: Stream.Stream<SessionEvent, E>) => Effect.map(Stream.runCollect(stream), Chunk.toArray)

describe("event cursor (EVS-01)", () => {
  it.scoped("EVS-01 the stored events from the cursor, then the live ones, until the session closes", () =>
    Effect.gen(function*() {
      const { close, session } = yield* openSession("cursor-basic")
      yield* session.appendAll([note(0), note(1), note(2)])
      const fromStart = yield* Effect.fork(collect(session.eventsFrom(0)))
      const fromTwo = yield* Effect.fork(collect(session.eventsFrom(2)))
      const fromEnd = yield* Effect.fork(collect(session.eventsFrom(3)))
      yield* Effect.yieldNow()
      yield* session.append(note(3))
      yield* session.appendAll([note(4), note(5)])
      yield* close
      assert.deepStrictEqual(seqs(yield* Fiber.join(fromStart)), range(0, 6))
      assert.deepStrictEqual(seqs(yield* Fiber.join(fromTwo)), range(2, 6))
      assert.deepStrictEqual(seqs(yield* Fiber.join(fromEnd)), range(3, 6))
      // after the close: the stored events, then the end
      assert.deepStrictEqual(seqs(yield* collect(session.eventsFrom(4))), [4, 5])
    }))

  it.scoped("EVS-01 a cursor outside 0..length fails InvalidEventCursor before emitting anything", () =>
    Effect.gen(function*() {
      const { session } = yield* openSession("cursor-bad")
      yield* session.appendAll([note(0), note(1)])
      for (const seq of [-1, 3, 1.5, Number.NaN]) {
        const failed = yield* Effect.either(collect(session.eventsFrom(seq)))
        assert.isTrue(Either.isLeft(failed), String(seq))
        if (Either.isLeft(failed)) {
          assert.strictEqual(failed.left._tag, "InvalidEventCursor")
          assert.include(failed.left.message, "an integer from 0 to 2")
        }
      }
    }))

  it.scoped("EVS-01 a long stored log (12,000 events) streams from 0 without overflowing the stack", () =>
    Effect.gen(function*() {
      const { close, session } = yield* openSession("cursor-long")
      yield* session.appendAll(notes(0, 12_000))
      const reader = yield* Effect.fork(collect(session.eventsFrom(0)))
      yield* Effect.yieldNow()
      yield* session.append(note(12_000))
      yield* close
      assert.deepStrictEqual(seqs(yield* Fiber.join(reader)), range(0, 12_001))
    }))

  it.scoped.prop(
    "EVS-01 random interleavings of appends and readers from random cursors: each reader sees exactly the log's suffix",
    [FastCheck.array(
      FastCheck.oneof(
        FastCheck.record({ append: FastCheck.integer({ min: 1, max: 5 }) }),
        FastCheck.record({ read: FastCheck.double({ min: 0, max: 1, noNaN: true }) }),
        FastCheck.record({ yield: FastCheck.constant(true) })
      ),
      { minLength: 1, maxLength: 40 }
    )],
    ([steps]) =>
      Effect.gen(function*() {
        const { close, session } = yield* openSession("cursor-prop")
        const readers: Array<{ readonly from: number; readonly fiber: Fiber.Fiber<Array<SessionEvent>, unknown> }> = []
        let n = 0
        for (const step of steps) {
          if ("append" in step) {
            const batch = notes(n, n + step.append)
            n += step.append
            // appends in flight while readers start: forked, not awaited
            yield* Effect.fork(session.appendAll(batch))
          } else if ("read" in step) {
            const length = (yield* session.events).length
            const from = Math.floor(step.read * length)
            readers.push({ from, fiber: yield* Effect.fork(collect(session.eventsFrom(from))) })
          } else {
            yield* Effect.yieldNow()
          }
        }
        // every forked append has committed once the log has all n events
        while ((yield* session.events).length < n) yield* Effect.yieldNow()
        yield* close
        const log = yield* session.events
        for (const reader of readers) {
          assert.deepStrictEqual(seqs(yield* Fiber.join(reader.fiber)), seqs(log.slice(reader.from)))
        }
      }),
    { fastCheck: { numRuns: 100 } }
  )

  it.scoped("EVS-01 a reader stalled far behind blocks neither the writer nor other readers, and loses nothing", () =>
    Effect.gen(function*() {
      const { close, session } = yield* openSession("cursor-slow")
      const gate = yield* Deferred.make<void>()
      const first = yield* Deferred.make<void>()
      // a buffer of 4: the stalled reader's missing events are re-read from the log when it resumes
      const source = sessionInternal.cursorSourceOf(session)
      assert.isDefined(source)
      const slow = yield* eventCursor.eventsFrom(source!, 0, 4).pipe(
        Stream.tap((event) =>
          event.seq === 0 ? Effect.zipRight(Deferred.succeed(first, undefined), Deferred.await(gate)) : Effect.void
        ),
        collect,
        Effect.fork
      )
      const fast = yield* Effect.fork(collect(session.eventsFrom(0)))
      yield* session.append(note(0))
      yield* Deferred.await(first)
      for (let i = 1; i < 300; i++) yield* session.append(note(i))
      // the writer went on: every append committed while the slow reader was stalled
      assert.strictEqual((yield* session.events).length, 300)
      yield* close
      assert.deepStrictEqual(seqs(yield* Fiber.join(fast)), range(0, 300))
      yield* Deferred.succeed(gate, undefined)
      assert.deepStrictEqual(seqs(yield* Fiber.join(slow)), range(0, 300))
    }))

  it.scoped("EVS-01 a commit larger than a reader's whole buffer reaches it (read from the log), and the reader goes on", () =>
    Effect.gen(function*() {
      const { close, session } = yield* openSession("cursor-big-commit")
      const source = sessionInternal.cursorSourceOf(session)
      assert.isDefined(source)
      const batchRead = yield* Deferred.make<void>()
      const reader = yield* eventCursor.eventsFrom(source!, 0, 4).pipe(
        Stream.tap((event) => event.seq === 9 ? Deferred.succeed(batchRead, undefined) : Effect.void),
        collect,
        Effect.fork
      )
      while ((yield* reader.status)._tag !== "Suspended") yield* Effect.yieldNow()
      // the reader waits on its empty buffer: a batch of 10 does not fit, so only its mark wakes it
      yield* session.appendAll(notes(0, 10))
      yield* Deferred.await(batchRead)
      yield* session.append(note(10))
      yield* session.appendAll(notes(11, 20))
      yield* close
      assert.deepStrictEqual(seqs(yield* Fiber.join(reader)), range(0, 20))
    }))

  it.scoped("EVS-01 1,000 appends in flight on a file-backed session while readers subscribe", () =>
    Effect.gen(function*() {
      const directory = nodeFs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-cursor-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => nodeFs.rmSync(directory, { recursive: true, force: true })))
      const built = yield* Layer.build(
        NodeFileSessionPersistence.layer({ directory, durability: "buffered" }).pipe(Layer.provide(NodeContext.layer))
      )
      const persistence = Context.get(built, SessionPersistence)
      const scope = yield* Scope.make()
      const planned = Session.plan({ id: "cursor-file", createdAt: 0 })
      assert.isTrue(Either.isRight(planned))
      if (Either.isLeft(planned)) return
      const writer = yield* Scope.extend(persistence.create(planned.right.header), scope)
      const stored = { header: planned.right.header, events: [] }
      const session = yield* Scope.extend(Session.fromStored(stored, writer), scope)
      const appends = yield* Effect.fork(
        Effect.forEach(range(0, 1_000), (i) => session.append(note(i)), { concurrency: "unbounded", discard: true })
      )
      const readers: Array<{ readonly from: number; readonly fiber: Fiber.Fiber<Array<SessionEvent>, unknown> }> = []
      for (let k = 0; k < 8; k++) {
        const from = (yield* session.events).length
        readers.push({ from, fiber: yield* Effect.fork(collect(session.eventsFrom(from))) })
        yield* Effect.yieldNow()
      }
      yield* Fiber.join(appends)
      yield* Scope.close(scope, Exit.void)
      const log = (yield* persistence.read(session.id)).events
      assert.strictEqual(log.length, 1_000)
      for (const reader of readers) {
        assert.deepStrictEqual(seqs(yield* Fiber.join(reader.fiber)), seqs(log.slice(reader.from)))
      }
    }))
})
