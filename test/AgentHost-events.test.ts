/**
 * EVS-01 at host level: `host.eventsFrom(id, seq)` — the stored events from a cursor, then the live
 * ones, across passivations and activations of the agent (no gap, no duplicate, in order), without
 * activating the agent or keeping it live (HOST-02); removal while reading; the typed errors; a
 * property test of random interleavings; 1,000 appends in flight; a slow reader. Real stores: files
 * in a temp directory and SQLite in a temp file.
 */
import { assert, describe, it } from "@effect/vitest"
import {
  Array as Arr,
  Chunk,
  Context,
  Deferred,
  Effect,
  FastCheck,
  Fiber,
  Layer,
  Option,
  Stream,
  TestClock
} from "effect"
import * as AgentHost from "../src/AgentHost.js"
import type { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import type { Store } from "./fixtures/host.js"
import { hostOver, nextEvent, stores } from "./fixtures/host.js"
import { route } from "./fixtures/runtime.js"
import { allSuspended, allSuspendedOrDone, eventually } from "./fixtures/waiting.js"

const create = { options: route }

const note = (n: number) => ({ type: "test/note", data: n })
type Note = ReturnType<typeof note>
const notes = (from: number, count: number) => Arr.makeBy(count, (i) => note(from + i)) as [Note, ...Array<Note>]

const collect = <E>(stream: Stream.Stream<SessionEvent, E>) => Effect.map(Stream.runCollect(stream), Chunk.toArray)

/** What a reader must see of an event: all of it but its object identity. */
const shape = (events: ReadonlyArray<SessionEvent>) =>
  events.map((event) => ({ seq: event.seq, type: event.type, data: JSON.stringify(event.data) }))

const storedLog = (store: Store, id: string) =>
  Effect.map(
    Effect.flatMap(SessionPersistence, (persistence) => persistence.read(id as Message.SessionId)),
    (stored) => stored.events
  ).pipe(Effect.provide(store.context))

/** The length of the log a client could know now: the live session's, else the stored one. */
const knownLength = (store: Store, registry: AgentRegistry["Type"], id: string) =>
  Effect.flatMap(registry.get(id), (live) =>
    Option.isSome(live)
      ? Effect.map(live.value.session.events, (events) => events.length)
      : Effect.map(storedLog(store, id), (events) => events.length))

interface Reader {
  readonly from: number
  readonly fiber: Fiber.RuntimeFiber<Array<SessionEvent>, AgentHost.EventsFromError>
}

const checkReaders = (store: Store, id: string, readers: ReadonlyArray<Reader>) =>
  Effect.gen(function*() {
    const log = yield* storedLog(store, id)
    for (const reader of readers) {
      const seen = yield* Fiber.join(reader.fiber)
      assert.deepStrictEqual(shape(seen), shape(log.slice(reader.from)), `from ${reader.from}`)
    }
    return log
  })

for (const backend of stores) {
  describe(`AgentHost.eventsFrom over ${backend.name}`, () => {
    it.scoped("EVS-01 host.eventsFrom follows a session across passivations and activations, then ends when the host closes", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { close, host } = yield* hostOver(store, [Model.text("one"), Model.text("two"), Model.text("three")])
        const agent = yield* host.get("follow", create)
        yield* agent.followup(Message.user("one"))
        yield* agent.whenIdle
        const length = (yield* agent.session.events).length
        const readers: Array<Reader> = []
        readers.push({ from: 0, fiber: yield* Effect.fork(collect(host.eventsFrom("follow", 0))) })
        readers.push({ from: length, fiber: yield* Effect.fork(collect(host.eventsFrom("follow", length))) })
        assert.isTrue(yield* host.passivate("follow"))
        // started while nothing is live: the stored log, then it waits for an activation
        readers.push({ from: 2, fiber: yield* Effect.fork(collect(host.eventsFrom("follow", 2))) })
        yield* eventually(allSuspended(readers.map((reader) => reader.fiber)))
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
        const second = yield* host.get("follow")
        yield* second.followup(Message.user("two"))
        yield* second.whenIdle
        assert.isTrue(yield* host.passivate("follow"))
        const third = yield* host.get("follow")
        yield* third.followup(Message.user("three"))
        yield* third.whenIdle
        yield* close
        const log = yield* checkReaders(store, "follow", readers)
        // three turns, each with its user message, across three activations
        assert.strictEqual(log.filter((event) => event.type === "turn/end").length, 3)
      }))

    it.scoped("EVS-01 HOST-02 an eventsFrom client neither activates the agent nor keeps it live", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { close, host, registry } = yield* hostOver(store, [Model.text("a1"), Model.text("a2")], {
          idleTimeout: "1 minute"
        })
        const agent = yield* host.get("unheld", create)
        yield* agent.followup(Message.user("one"))
        yield* agent.whenIdle
        const reader = yield* Effect.fork(collect(host.eventsFrom("unheld", 0)))
        yield* eventually(allSuspended([reader]))
        const disposed = yield* nextEvent(registry, "unheld", "AgentDisposed")
        yield* TestClock.adjust("1 minute")
        yield* Fiber.join(disposed)
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
        // the reader waits without activating it
        yield* TestClock.adjust("10 minutes")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
        assert.isNull(reader.unsafePoll())
        const again = yield* host.get("unheld")
        yield* again.followup(Message.user("two"))
        yield* again.whenIdle
        yield* close
        yield* checkReaders(store, "unheld", [{ from: 0, fiber: reader }])
      }))

    it.scoped("EVS-01 host.eventsFrom fails typed: a bad id, an unknown session, a cursor outside the log, a closed host", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { close, host } = yield* hostOver(store, [])
        const agent = yield* host.get("errs", create)
        yield* agent.session.appendAll(notes(0, 3))
        const failure = (id: string, seq: number) => Effect.flip(collect(host.eventsFrom(id, seq)))
        assert.strictEqual((yield* failure("../x", 0))._tag, "InvalidSessionId")
        assert.strictEqual((yield* failure("nobody", 0))._tag, "SessionNotFound")
        // nothing activated by asking
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["errs"])
        // live, then stored: the cursor is checked against the log either way
        const live = yield* failure("errs", 4)
        assert.strictEqual(live._tag, "InvalidEventCursor")
        assert.include(live.message, "an integer from 0 to 3")
        yield* host.passivate("errs")
        for (const seq of [-1, 4, 0.5]) {
          const stored = yield* failure("errs", seq)
          assert.strictEqual(stored._tag, "InvalidEventCursor", String(seq))
        }
        yield* close
        assert.strictEqual((yield* failure("errs", 0))._tag, "HostClosed")
      }))

    it.scoped("EVS-01 a session removed while a client reads: host.remove fails the reader SessionRemoved", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host } = yield* hostOver(store, [])
        const agent = yield* host.get("gone", create)
        yield* agent.session.appendAll(notes(0, 2))
        const reader = yield* Effect.fork(collect(host.eventsFrom("gone", 0)))
        yield* eventually(allSuspended([reader]))
        // remove passivates the live agent first, then deletes its log
        yield* host.remove("gone")
        assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, [])
        const removed = yield* Effect.flip(Fiber.join(reader))
        assert.strictEqual(removed._tag, "SessionRemoved")
        assert.include(removed.message, "read it from seq 0")
        const exists = yield* Effect.flatMap(SessionPersistence, (p) => p.exists("gone" as Message.SessionId)).pipe(
          Effect.provide(store.context)
        )
        assert.isFalse(exists)
        // removing what is not stored is no error; a new reader finds nothing
        yield* host.remove("gone")
        assert.strictEqual((yield* Effect.flip(collect(host.eventsFrom("gone", 0))))._tag, "SessionNotFound")
      }))

    it.scoped("EVS-01 a session removed behind the host's back and created again: the reader fails SessionRemoved at the activation", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { host } = yield* hostOver(store, [])
        const agent = yield* host.get("again", create)
        yield* agent.session.appendAll(notes(0, 3))
        yield* host.passivate("again")
        const reader = yield* Effect.fork(collect(host.eventsFrom("again", 1)))
        yield* eventually(allSuspended([reader]))
        yield* Effect.flatMap(SessionPersistence, (p) => p.remove("again" as Message.SessionId)).pipe(
          Effect.provide(store.context)
        )
        // the host learns of it when it activates the id: a new, different log
        const created = yield* host.get("again", create)
        yield* created.session.appendAll(notes(100, 5))
        const removed = yield* Effect.flip(Fiber.join(reader))
        assert.strictEqual(removed._tag, "SessionRemoved")
      }))

    it.scoped.prop(
      "EVS-01 HOST-02 random interleavings of appends, readers from random cursors, passivations and activations: each reader sees exactly the log's suffix",
      [FastCheck.array(
        FastCheck.oneof(
          FastCheck.record({ append: FastCheck.integer({ min: 1, max: 4 }) }),
          FastCheck.record({ read: FastCheck.double({ min: 0, max: 1, noNaN: true }) }),
          FastCheck.record({ passivate: FastCheck.constant(true) }),
          FastCheck.record({ activate: FastCheck.constant(true) }),
          FastCheck.record({ yield: FastCheck.constant(true) })
        ),
        { minLength: 1, maxLength: 25 }
      )],
      ([steps]) =>
        Effect.gen(function*() {
          const store = yield* backend.make
          const { close, host, registry } = yield* hostOver(store, [])
          const id = "prop"
          yield* host.get(id, create)
          const appends: Array<Fiber.RuntimeFiber<unknown>> = []
          const readers: Array<Reader> = []
          let n = 0
          for (const step of steps) {
            if ("append" in step) {
              const batch = notes(n, step.append)
              n += step.append
              // in flight while the next steps run: a passivation may refuse it (then it is not in the log)
              appends.push(yield* Effect.fork(Effect.exit(host.use(id, (agent) => agent.session.appendAll(batch)))))
            } else if ("read" in step) {
              const from = Math.floor(step.read * (yield* knownLength(store, registry, id)))
              readers.push({ from, fiber: yield* Effect.fork(collect(host.eventsFrom(id, from))) })
            } else if ("passivate" in step) {
              yield* host.passivate(id)
            } else if ("activate" in step) {
              yield* host.get(id)
            } else {
              yield* Effect.yieldNow()
            }
          }
          yield* Fiber.joinAll(appends)
          // every reader has started (a reader that starts after the close fails HostClosed, as it should)
          yield* eventually(allSuspendedOrDone(readers.map((reader) => reader.fiber)))
          yield* close
          yield* checkReaders(store, id, readers)
        }),
      { fastCheck: { numRuns: 25 } }
    )

    it.scoped("EVS-01 1,000 appends in flight while readers subscribe, then a passivation and an activation", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { close, host, registry } = yield* hostOver(store, [])
        const id = "flight"
        yield* host.get(id, create)
        // reached[k]: k × 125 appends acknowledged
        const reached = yield* Effect.forEach(Arr.range(0, 7), () => Deferred.make<void>())
        let acknowledged = 0
        const acknowledge = Effect.suspend(() => {
          acknowledged++
          return acknowledged % 125 === 0 && acknowledged < 1_000
            ? Deferred.succeed(reached[acknowledged / 125]!, undefined)
            : Effect.void
        })
        yield* Deferred.succeed(reached[0]!, undefined)
        const appends = yield* Effect.fork(host.use(id, (agent) =>
          Effect.forEach(Arr.range(0, 999), (i) => Effect.zipRight(agent.session.append(note(i)), acknowledge), {
            concurrency: 16,
            discard: true
          })))
        const readers: Array<Reader> = []
        for (let k = 0; k < 8; k++) {
          // spread over the appends: reader k starts once k × 125 of them were acknowledged
          yield* Deferred.await(reached[k]!)
          const from = yield* knownLength(store, registry, id)
          readers.push({ from, fiber: yield* Effect.fork(collect(host.eventsFrom(id, from))) })
        }
        yield* Fiber.join(appends)
        assert.isTrue(yield* host.passivate(id))
        yield* host.use(id, (agent) => agent.session.appendAll(notes(1_000, 10)))
        yield* close
        const log = yield* checkReaders(store, id, readers)
        assert.strictEqual(log.length, 1_010)
      }))

    it.scoped("EVS-01 a reader stalled far behind blocks neither the writer, nor other readers, nor a passivation, and loses nothing", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { close, host } = yield* hostOver(store, [])
        const id = "slow"
        const agent = yield* host.get(id, create)
        const gate = yield* Deferred.make<void>()
        const first = yield* Deferred.make<void>()
        const slow = yield* host.eventsFrom(id, 0).pipe(
          Stream.tap((event) =>
            event.seq === 0 ? Effect.zipRight(Deferred.succeed(first, undefined), Deferred.await(gate)) : Effect.void
          ),
          collect,
          Effect.fork
        )
        const fast = yield* Effect.fork(collect(host.eventsFrom(id, 0)))
        yield* agent.session.append(note(0))
        yield* Deferred.await(first)
        // more than a reader's buffer (1,024 events) while it is stalled
        for (let batch = 0; batch < 30; batch++) yield* agent.session.appendAll(notes(1 + batch * 100, 100))
        assert.strictEqual((yield* agent.session.events).length, 3_001)
        // the passivation does not wait for the stalled reader
        assert.isTrue(yield* host.passivate(id))
        yield* host.use(id, (again) => again.session.append(note(3_001)))
        yield* close
        assert.deepStrictEqual(shape(yield* Fiber.join(fast)), shape(yield* storedLog(store, id)))
        yield* Deferred.succeed(gate, undefined)
        const log = yield* checkReaders(store, id, [{ from: 0, fiber: slow }])
        assert.strictEqual(log.length, 3_002)
      }))
  })
}

describe("AgentHost.eventsFrom without persistence", () => {
  it.scoped("EVS-01 without a SessionPersistence a passivated agent's session is gone: its reader fails SessionRemoved", () =>
    Effect.gen(function*() {
      const model = yield* Model.scripted([])
      const built = yield* Layer.build(
        AgentHost.layer().pipe(Layer.provideMerge(AgentRuntime.layer), Layer.provide(model.layer))
      )
      const host = Context.get(built, AgentHost.AgentHost)
      const agent = yield* host.get("volatile", create)
      yield* agent.session.appendAll(notes(0, 2))
      const reader = yield* Effect.fork(collect(host.eventsFrom("volatile", 0)))
      yield* eventually(allSuspendedOrDone([reader]))
      yield* host.passivate("volatile")
      const removed = yield* Effect.flip(Fiber.join(reader))
      assert.strictEqual(removed._tag, "SessionRemoved")
      assert.strictEqual((yield* Effect.flip(collect(host.eventsFrom("volatile", 0))))._tag, "SessionNotFound")
    }))
})
