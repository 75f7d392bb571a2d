import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Option, Ref, Scope, Stream } from "effect"
import { core } from "../src/internal/log/session.js"
import * as Session from "../src/Session.js"
import * as SessionStore from "../src/SessionStore.js"

const withStore = <A, E, R>(f: (store: SessionStore.SessionStore["Type"]) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(SessionStore.make, f)

const tags = (events: Chunk.Chunk<SessionStore.SessionStoreEvent>) =>
  Chunk.toReadonlyArray(events).map((e) => `${e._tag}:${e.session.id}`)

describe("SessionStore", () => {
  it.scoped("STORE-01 prepare is unpublished; a live id fails fast with SessionAlreadyLive", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const planned = yield* store.prepare({ sessionId: "x" })
        assert.strictEqual(planned.header.id, "x")
        assert.isTrue(Option.isNone(yield* store.get("x")))
        yield* store.create({ sessionId: "x" })
        const failure = yield* Effect.flip(store.prepare({ sessionId: "x" }))
        assert.strictEqual(failure._tag, "SessionAlreadyLive")
        const invalid = yield* Effect.flip(store.prepare({ sessionId: "../etc" }))
        assert.strictEqual(invalid._tag, "InvalidSessionId")
        const badMeta = yield* Effect.flip(store.prepare({ sessionId: "m", meta: { n: 1n } as never }))
        assert.strictEqual(badMeta._tag, "InvalidEventData")
      })
    ))

  it.scoped("STORE-02 enter is the authoritative collision check: a stale prepared session never replaces a live one", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const events = yield* store.subscribe
        const stale = yield* Session.fromPlan(yield* store.prepare({ sessionId: "r" }))
        const live = yield* store.create({ sessionId: "r" })
        const failure = yield* Effect.flip(store.enter(stale))
        assert.strictEqual(failure._tag, "SessionAlreadyLive")
        assert.strictEqual(Option.getOrThrow(yield* store.get("r")), live)
        const other = yield* Session.fromPlan(yield* store.prepare({ sessionId: "q" }))
        const entry = yield* store.enter(other)
        assert.strictEqual(Option.getOrThrow(yield* store.get("q")), other)
        yield* entry.detach
        yield* entry.detach
        assert.isTrue(Option.isNone(yield* store.get("q")))
        const received = yield* Stream.runCollect(Stream.take(events, 1))
        assert.deepStrictEqual(tags(received), ["SessionCreated:r"])
      })
    ))

  it.scoped("STORE-03 announce happens once; a second announce of the same entry is a defect", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const session = yield* Session.fromPlan(yield* store.prepare({ sessionId: "a" }))
        const entry = yield* store.enter(session)
        yield* store.announce(entry)
        const again = yield* Effect.exit(store.announce(entry))
        assert.isTrue(Exit.isFailure(again) && Exit.causeOption(again).pipe(Option.exists((c) => c._tag === "Die")))
      })
    ))

  it.scoped("STORE-04 a detach requested while hooks run is deferred: every hook sees the session live", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const order = yield* Ref.make<ReadonlyArray<string>>([])
        const feed = yield* store.subscribe
        const entryRef = yield* Ref.make<SessionStore.SessionEntry | undefined>(undefined)
        yield* store.onCreated(() =>
          Effect.gen(function*() {
            const entry = yield* Ref.get(entryRef)
            yield* entry!.detach
            yield* Ref.update(order, (o) => [...o, "created:first"])
          })
        )
        yield* store.onCreated((session) =>
          Effect.gen(function*() {
            const live = yield* store.get(session.id)
            yield* Ref.update(order, (o) => [...o, `created:second:${Option.isSome(live)}`])
          })
        )
        const session = yield* Session.fromPlan(yield* store.prepare({ sessionId: "d" }))
        const entry = yield* store.enter(session)
        yield* Ref.set(entryRef, entry)
        yield* store.announce(entry)
        assert.deepStrictEqual(yield* Ref.get(order), ["created:first", "created:second:true"])
        assert.isTrue(Option.isNone(yield* store.get("d")))
        assert.deepStrictEqual(tags(yield* Stream.runCollect(Stream.take(feed, 2))), [
          "SessionCreated:d",
          "SessionDisposed:d"
        ])
      })
    ))

  it.scoped("STORE-05 SessionDisposed is emitted exactly when the entry was announced", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const feed = yield* store.subscribe
        const quiet = yield* Session.fromPlan(yield* store.prepare({ sessionId: "quiet" }))
        const quietEntry = yield* store.enter(quiet)
        yield* quietEntry.detach
        const loud = yield* Session.fromPlan(yield* store.prepare({ sessionId: "loud" }))
        const loudEntry = yield* store.enter(loud)
        yield* store.announce(loudEntry)
        yield* loudEntry.detach
        assert.deepStrictEqual(tags(yield* Stream.runCollect(Stream.take(feed, 2))), [
          "SessionCreated:loud",
          "SessionDisposed:loud"
        ])
      })
    ))

  it.scoped("STORE-06 a vetoing onCreated hook rolls back, later hooks are skipped, and the id is reusable", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const feed = yield* store.subscribe
        const vetoOnce = yield* Ref.make(true)
        const laterRan = yield* Ref.make(0)
        yield* store.onCreated(() =>
          Effect.flatMap(Ref.getAndSet(vetoOnce, false), (veto) => (veto ? Effect.fail("no") : Effect.void))
        )
        yield* store.onCreated(() => Ref.update(laterRan, (n) => n + 1))
        const failure = yield* Effect.flip(store.create({ sessionId: "fixed" }))
        assert.strictEqual(failure._tag, "SessionCreationVetoed")
        assert.strictEqual(yield* Ref.get(laterRan), 0)
        assert.isTrue(Option.isNone(yield* store.get("fixed")))
        const session = yield* store.create({ sessionId: "fixed" })
        assert.strictEqual(yield* Ref.get(laterRan), 1)
        const appended = yield* session.append({ type: "test/ok", data: 1 })
        assert.strictEqual(appended.seq, 0)
        assert.deepStrictEqual(tags(yield* Stream.runCollect(Stream.take(feed, 3))), [
          "SessionCreated:fixed",
          "SessionDisposed:fixed",
          "SessionCreated:fixed"
        ])
      })
    ))

  it.scoped("STORE-06 create is owned by its Scope: closing it detaches (SessionDisposed) and closes the session", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const feed = yield* store.subscribe
        const session = yield* Scope.extend(store.create({ sessionId: "owned" }), scope)
        const collected = yield* Effect.fork(Stream.runCollect(Stream.take(feed, 2)))
        assert.strictEqual((yield* store.list).length, 1)
        yield* Scope.close(scope, Exit.void)
        assert.isTrue(Option.isNone(yield* store.get("owned")))
        assert.deepStrictEqual(tags(yield* Fiber.join(collected)), ["SessionCreated:owned", "SessionDisposed:owned"])
        const closed = yield* Effect.flip(session.append({ type: "test/x", data: 1 }))
        assert.strictEqual(closed._tag, "SessionClosed")
      })
    ))

  it.scoped("STORE-06 hooks registered in a Scope stop running when it closes; list is in creation order", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const calls = yield* Ref.make(0)
        const hookScope = yield* Scope.make()
        yield* Scope.extend(store.onCreated(() => Ref.update(calls, (n) => n + 1)), hookScope)
        yield* store.create({ sessionId: "h1" })
        yield* Scope.close(hookScope, Exit.void)
        yield* store.create({ sessionId: "h2" })
        yield* store.create({ sessionId: "h0" })
        assert.strictEqual(yield* Ref.get(calls), 1)
        assert.deepStrictEqual((yield* store.list).map((s) => s.id), ["h1", "h2", "h0"])
      })
    ))

  it.scoped("STORE-04 a hook that blocks delays nobody else's reads; the hook sees the entry live", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const inHook = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        yield* store.onCreated(() => Effect.zipRight(Deferred.succeed(inHook, undefined), Deferred.await(release)))
        const creating = yield* Effect.fork(store.create({ sessionId: "slow" }))
        yield* Deferred.await(inHook)
        assert.isTrue(Option.isSome(yield* store.get("slow")))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(creating)
      })
    ))
})

describe("fork", () => {
  const closedTurn = (session: Session.Session, turn: number) =>
    core(session).appendCore([
      { type: "turn/start", data: { turn } },
      { type: "turn/end", data: { turn, reason: { kind: "completed" } } }
    ])

  it.scoped("FORK-01 a fork copies the closed prefix: header names the parent, seedLength = upTo", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const parent = yield* store.create({ sessionId: "parent" })
        yield* closedTurn(parent, 1)
        yield* parent.append({ type: "test/after", data: 1 })
        yield* core(parent).appendCore([{ type: "turn/start", data: { turn: 2 } }])
        const child = yield* store.create({ sessionId: "child", fork: { from: parent } })
        assert.strictEqual(child.header.parentSession, "parent")
        assert.strictEqual(child.header.seedLength, 3)
        assert.strictEqual(child.firstLiveSeq, 3)
        const parentEvents = yield* parent.events
        assert.deepStrictEqual(yield* child.events, parentEvents.slice(0, 3))
        const explicit = yield* store.create({ sessionId: "child2", fork: { from: parent, upTo: 2 } })
        assert.strictEqual((yield* explicit.events).length, 2)
      })
    ))

  it.scoped("FORK-01 upTo inside an open turn fails ForkInsideOpenTurn, out of range InvalidForkBoundary; nothing is created", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const parent = yield* store.create({ sessionId: "p" })
        yield* closedTurn(parent, 1)
        yield* core(parent).appendCore([{ type: "turn/start", data: { turn: 2 } }])
        const inside = yield* Effect.flip(store.create({ sessionId: "c", fork: { from: parent, upTo: 3 } }))
        assert.strictEqual(inside._tag, "ForkInsideOpenTurn")
        const inside1 = yield* Effect.flip(store.create({ sessionId: "c", fork: { from: parent, upTo: 1 } }))
        assert.strictEqual(inside1._tag, "ForkInsideOpenTurn")
        for (const upTo of [-1, 4, 1.5]) {
          const outside = yield* Effect.flip(store.create({ sessionId: "c", fork: { from: parent, upTo } }))
          assert.strictEqual(outside._tag, "InvalidForkBoundary")
        }
        const both = yield* Effect.flip(store.create({ sessionId: "c", seed: [], fork: { from: parent } }))
        assert.strictEqual(both._tag, "InvalidEventData")
        assert.isTrue(Option.isNone(yield* store.get("c")))
      })
    ))
})
