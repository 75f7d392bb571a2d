import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Exit, FastCheck as fc, Fiber, Option, Ref, Stream } from "effect"
import type { InboxChange } from "../src/Inbox.js"
import * as Inbox from "../src/Inbox.js"
import * as internal from "../src/internal/agent/inbox.js"
import { core } from "../src/internal/log/session.js"
import * as Message from "../src/Message.js"
import type { MessageId, UserMessage } from "../src/Message.js"
import * as Repair from "../src/Repair.js"
import * as Session from "../src/Session.js"
import type { CoreEventInput, InboxTarget, SessionEvent } from "../src/SessionEvent.js"
import { recordingWriter } from "./fixtures/writers.js"

const planFor = (id: string, seed?: ReadonlyArray<SessionEvent>) => {
  const planned = Session.plan({ id, createdAt: 0, seed })
  if (Either.isLeft(planned)) throw new Error("bad plan")
  return planned.right
}

const msg = (id: string, text = `text of ${id}`): UserMessage => Message.user(text, { id })

const ids = (messages: ReadonlyArray<UserMessage>): ReadonlyArray<string> => messages.map((m) => m.id)

const messageIds = (messages: ReadonlyArray<UserMessage>): ReadonlyArray<MessageId> => messages.map((m) => m.id)

type SpliceData = {
  readonly target: InboxTarget
  readonly start: number
  readonly removed: ReadonlyArray<MessageId>
  readonly inserted: ReadonlyArray<UserMessage>
  readonly outcome?: "canceled" | "rejected" | "restored"
}

/** The splices of a log, compacted to `[target, start, removed ids, inserted ids, outcome?]`. */
const splicesOf = (events: ReadonlyArray<SessionEvent>) =>
  events.filter((e) => e.type === "agent/inbox/spliced").map((e) => {
    const data = e.data as SpliceData
    const removed: ReadonlyArray<string> = data.removed
    return [data.target, data.start, removed, ids(data.inserted), data.outcome] as const
  })

const event = (seq: number, type: string, data: unknown): SessionEvent => ({ seq, time: 0, type, data }) as SessionEvent

/** A stored log with contiguous seqs. */
const storedLog = (...entries: ReadonlyArray<readonly [string, unknown]>): ReadonlyArray<SessionEvent> =>
  entries.map(([type, data], seq) => event(seq, type, data))

const splice = (
  target: InboxTarget,
  start: number,
  removed: ReadonlyArray<string>,
  inserted: ReadonlyArray<UserMessage>,
  outcome?: "canceled" | "rejected" | "restored"
) => ["agent/inbox/spliced", { target, start, removed, inserted, ...(outcome ? { outcome } : {}) }] as const

/** A session over a stored log (header seedLength 0), as resume builds it, with a writer that accepts appends. */
const storedSession = (id: string, events: ReadonlyArray<SessionEvent>) =>
  Session.fromStored({ header: planFor(id).header, events }, {
    append: () => Effect.void,
    nextSeq: Effect.succeed(events.length),
    discard: Effect.void
  })

/** An inbox whose `onChange` records every change. */
const recorded = (session: Session.Session) =>
  Effect.gen(function*() {
    const seen = yield* Ref.make<ReadonlyArray<InboxChange>>([])
    const inbox = yield* internal.make(session, { onChange: (change) => Ref.update(seen, (all) => [...all, change]) })
    return { inbox, changes: Ref.get(seen) }
  })

const lists = (inbox: Inbox.Inbox) =>
  Effect.map(Effect.all([inbox.nextTurn, inbox.nextStep]), ([turn, step]) => ({ turn: ids(turn), step: ids(step) }))

const claimAll = (inbox: internal.InboxInternal, turn: number, boundary: "turn" | "step" = "turn") =>
  Effect.gen(function*() {
    const peeked = yield* inbox.peek(boundary)
    return yield* inbox.claim({ turn, step: 1, peeked: messageIds(peeked), entering: peeked, guard: () => true })
  })

describe("Inbox", () => {
  it.scoped("INB-01 an id already accepted (pending, entered, canceled, rejected) fails DuplicateMessage and writes nothing", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "dup" })
      const { changes, inbox } = yield* recorded(session)
      yield* inbox.append("next-turn", msg("p"))
      yield* inbox.append("next-step", msg("e"))
      yield* claimAll(inbox, 1, "step")
      yield* inbox.append("next-turn", msg("c"))
      yield* inbox.remove("c" as MessageId)
      yield* inbox.append("next-step", msg("r"))
      yield* inbox.claim({ turn: 2, step: 1, peeked: ["r" as MessageId], entering: [], guard: () => true })
      const expected = { p: "pending", e: "entered", c: "canceled", r: "rejected" } as const
      for (const [id, state] of Object.entries(expected)) assert.strictEqual(inbox.stateOf(id), state)

      const length = (yield* session.events).length
      const before = yield* changes
      const listsBefore = yield* lists(inbox)
      for (const [id, state] of Object.entries(expected)) {
        const attempts = [
          inbox.append("next-turn", msg(id)),
          inbox.prepend("next-step", msg(id)),
          inbox.insert("next-turn", msg(id), "end", () => [{ type: "turn/start", data: { turn: 9 } }]),
          Effect.asVoid(inbox.replace("p" as MessageId, msg(id, "other text")))
        ]
        for (const attempt of attempts) {
          const failure = yield* Effect.flip(attempt)
          assert.strictEqual(failure._tag, "DuplicateMessage")
          if (failure._tag === "DuplicateMessage") assert.deepStrictEqual([failure.id, failure.state], [id, state])
        }
      }
      assert.strictEqual((yield* session.events).length, length)
      assert.deepStrictEqual(yield* changes, before)
      assert.deepStrictEqual(yield* lists(inbox), listsBefore)
    }))

  it.scoped("INB-01 malformed or non-JSON messages fail InvalidEventData before anything is written", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "bad" })
      const inbox = yield* internal.make(session)
      const good = msg("m")
      const cyclic: { self?: unknown } = {}
      cyclic.self = cyclic
      const bad: ReadonlyArray<unknown> = [
        { ...good, extra: 1 },
        { ...good, role: "assistant" },
        { ...good, id: "" },
        { ...good, content: [{ type: "text", text: 1 }] },
        { ...good, content: [{ type: "text", text: "x", more: true }] },
        { ...good, content: [{ type: "text", text: "x" }, , { type: "text", text: "y" }] },
        { ...good, source: { kind: "agent", agent: "../escape" } },
        { ...good, source: cyclic },
        { ...good, content: [{ type: "text", text: new String("boxed") }] }
      ]
      for (const message of bad) {
        const failure = yield* Effect.flip(inbox.append("next-turn", message as UserMessage))
        assert.strictEqual(failure._tag, "InvalidEventData")
      }
      yield* inbox.append("next-turn", good)
      const excess = { ...good, id: "n" as MessageId, extra: 1 } as UserMessage
      const failure = yield* Effect.flip(inbox.replace(good.id, excess))
      assert.strictEqual(failure._tag, "InvalidEventData")
      const claimed = yield* Effect.flip(inbox.claim({
        turn: 1,
        step: 1,
        peeked: [good.id],
        entering: [{ ...good, role: "system" } as unknown as UserMessage],
        guard: () => true
      }))
      assert.strictEqual(claimed._tag, "InvalidEventData")
      assert.strictEqual((yield* session.events).length, 1)
      assert.strictEqual(inbox.stateOf("n"), undefined)
    }))

  it.scoped("INB-01 the stored copy is frozen: mutating the caller's message changes neither the inbox nor the log", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "frozen" })
      const inbox = yield* internal.make(session)
      const mutable = { id: "m", role: "user", content: [{ type: "text", text: "before" }], source: { kind: "user" } }
      yield* inbox.append("next-turn", mutable as unknown as UserMessage)
      mutable.content[0]!.text = "after"
      const [pending] = yield* inbox.nextTurn
      assert.deepStrictEqual(pending?.content, [{ type: "text", text: "before" }])
      assert.isTrue(Object.isFrozen(pending) && Object.isFrozen(pending?.content))
    }))

  it.scoped("INB-01 the id index is rebuilt at replay after the seed; ids that entered by user/message count", () =>
    Effect.gen(function*() {
      const events = storedLog(
        splice("next-turn", 0, [], [msg("a"), msg("b")]),
        splice("next-turn", 0, ["a"], [], "canceled"),
        ["user/message", { turn: 1, step: 1, message: msg("fresh") }]
      )
      const session = yield* storedSession("rebuilt", events)
      const inbox = yield* internal.make(session)
      assert.deepStrictEqual(
        ["a", "b", "fresh", "never"].map((id) => inbox.stateOf(id)),
        ["canceled", "pending", "entered", undefined]
      )
      for (const id of ["a", "b", "fresh"]) {
        const failure = yield* Effect.flip(inbox.append("next-step", msg(id)))
        assert.strictEqual(failure._tag, "DuplicateMessage")
      }
      // A fork's seed is not the child's inbox: its ids may be sent again.
      const child = yield* Session.make({ id: "child", seed: events })
      const childInbox = yield* internal.make(child)
      assert.deepStrictEqual(yield* lists(childInbox), { turn: [], step: [] })
      yield* childInbox.append("next-turn", msg("a"))
      assert.strictEqual(childInbox.stateOf("a"), "pending")
    }))

  it.scoped("INB-01b a mutation waits for the one in flight: it computes its splice only after the first applied", () =>
    Effect.gen(function*() {
      const { batches, holdNext, writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("locked"), writer)
      const inbox = yield* internal.make(session)
      const held = yield* holdNext
      // If an assertion fails first, still release the writer so the session can close.
      yield* Effect.addFinalizer(() => held.open)
      const append = yield* Effect.fork(inbox.append("next-turn", msg("a")))
      yield* held.reached
      // Without the lock, remove would see no pending "a" and answer false at once.
      const remove = yield* Effect.fork(inbox.remove("a" as MessageId))
      const duplicate = yield* Effect.fork(Effect.either(inbox.append("next-step", msg("a"))))
      for (let i = 0; i < 10; i++) yield* Effect.yieldNow()
      assert.isTrue(Option.isNone(yield* Fiber.poll(remove)))
      assert.isTrue(Option.isNone(yield* Fiber.poll(duplicate)))
      yield* held.open
      yield* Fiber.join(append)
      assert.isTrue(yield* Fiber.join(remove))
      const second = yield* Fiber.join(duplicate)
      assert.isTrue(Either.isLeft(second) && second.left._tag === "DuplicateMessage")
      assert.deepStrictEqual(splicesOf(yield* session.events), [
        ["next-turn", 0, [], ["a"], undefined],
        ["next-turn", 0, ["a"], [], "canceled"]
      ])
      assert.deepStrictEqual((yield* batches).map((b) => b.length), [1, 1])
    }))

  it.scoped("INB-01b withLock excludes every mutation, the claim included", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "withLock" })
      const inbox = yield* internal.make(session)
      yield* inbox.append("next-step", msg("a"))
      const fibers = yield* inbox.withLock(Effect.gen(function*() {
        const forked = yield* Effect.all([
          Effect.fork(inbox.append("next-turn", msg("b"))),
          Effect.fork(Effect.asVoid(claimAll(inbox, 1, "step"))),
          Effect.fork(inbox.clear)
        ])
        for (let i = 0; i < 10; i++) yield* Effect.yieldNow()
        for (const fiber of forked) assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
        assert.strictEqual((yield* session.events).length, 1)
        return forked
      }))
      for (const fiber of fibers) yield* Fiber.join(fiber)
      assert.strictEqual(yield* inbox.hasPending, false)
    }))

  it.effect.prop("INB-01b concurrent operations serialize: the result replays to the same lists", [
    fc.array(fc.tuple(fc.constantFrom("append", "prepend", "remove"), fc.integer({ min: 0, max: 9 })), {
      maxLength: 40
    })
  ], ([ops]) =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "concurrent" })
      const inbox = yield* internal.make(session)
      yield* Effect.forEach(ops, ([op, n]) => {
        const id = `m${n}`
        return Effect.either(
          op === "remove"
            ? inbox.remove(id as MessageId)
            : op === "append"
            ? inbox.append(n % 2 === 0 ? "next-turn" : "next-step", msg(id))
            : inbox.prepend(n % 2 === 0 ? "next-turn" : "next-step", msg(id))
        )
      }, { concurrency: "unbounded", discard: true })
      const replayed = yield* internal.make(session)
      assert.deepStrictEqual(yield* lists(replayed), yield* lists(inbox))
    }).pipe(Effect.scoped))

  it.scoped("INB-02 a failed append leaves lists, log and notifications unchanged, and the caller gets the error", () =>
    Effect.gen(function*() {
      const { failNext, stored, writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("failing"), writer)
      const { changes, inbox } = yield* recorded(session)
      yield* inbox.append("next-turn", msg("a"))
      yield* inbox.append("next-step", msg("b"))
      const before = { lists: yield* lists(inbox), changes: yield* changes, log: (yield* session.events).length }
      const attempts: ReadonlyArray<Effect.Effect<unknown, { readonly _tag: string }>> = [
        inbox.append("next-turn", msg("c")),
        inbox.prepend("next-step", msg("c")),
        inbox.replace("a" as MessageId, msg("c")),
        inbox.remove("a" as MessageId),
        inbox.clear,
        claimAll(inbox, 1)
      ]
      for (const attempt of attempts) {
        yield* failNext
        const failure = yield* Effect.flip(attempt)
        assert.strictEqual(failure._tag, "PersistenceError")
        assert.deepStrictEqual(yield* lists(inbox), before.lists)
        assert.deepStrictEqual(yield* changes, before.changes)
        assert.strictEqual((yield* session.events).length, before.log)
        assert.strictEqual((yield* stored).length, before.log)
        assert.strictEqual(inbox.stateOf("c"), undefined)
        assert.strictEqual(inbox.stateOf("a"), "pending")
      }
      // The failed id was never accepted: it may be sent again.
      yield* inbox.append("next-turn", msg("c"))
      assert.deepStrictEqual(yield* lists(inbox), { turn: ["a", "c"], step: ["b"] })
    }))

  it.scoped("INB-02 notifications follow the durable write, Discarded before Inserted, on changes and onChange alike", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "notify" })
      const { changes, inbox } = yield* recorded(session)
      const stream = yield* inbox.subscribe
      yield* inbox.append("next-turn", msg("a"))
      yield* inbox.append("next-turn", msg("b"))
      assert.isTrue(yield* inbox.replace("a" as MessageId, msg("a2")))
      yield* inbox.end
      const streamed = Chunk.toReadonlyArray(yield* Stream.runCollect(stream))
      // EVS-02: each change carries the seq of its splice (a replace is one splice: both its changes)
      const expected: ReadonlyArray<InboxChange> = [
        Inbox.InboxChange.Inserted({ target: "next-turn", start: 0, messages: [msg("a")], seq: 0 }),
        Inbox.InboxChange.Inserted({ target: "next-turn", start: 1, messages: [msg("b")], seq: 1 }),
        Inbox.InboxChange.Discarded({ target: "next-turn", ids: ["a" as MessageId], outcome: "canceled", seq: 2 }),
        Inbox.InboxChange.Inserted({ target: "next-turn", start: 0, messages: [msg("a2")], seq: 2 })
      ]
      assert.deepStrictEqual(yield* changes, expected)
      assert.deepStrictEqual(streamed, expected)
    }))

  it.scoped("INB-02 onChange runs under the lock: the next mutation waits for it", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "onChange" })
      const gate = yield* Effect.makeLatch(false)
      const reached = yield* Effect.makeLatch(false)
      const inbox = yield* internal.make(session, {
        onChange: (change) => change._tag === "Inserted" && change.messages[0]?.id === "a"
          ? Effect.zipRight(reached.open, gate.await)
          : Effect.void
      })
      yield* Effect.addFinalizer(() => gate.open)
      const first = yield* Effect.fork(inbox.append("next-turn", msg("a")))
      yield* reached.await
      const second = yield* Effect.fork(inbox.append("next-turn", msg("b")))
      for (let i = 0; i < 10; i++) yield* Effect.yieldNow()
      assert.isTrue(Option.isNone(yield* Fiber.poll(second)))
      assert.strictEqual((yield* session.events).length, 1)
      yield* gate.open
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      assert.deepStrictEqual((yield* lists(inbox)).turn, ["a", "b"])
    }))

  it.scoped("INB-03 each operation writes exactly its splice", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "ops" })
      const inbox = yield* internal.make(session)
      const written = () => Effect.map(session.events, splicesOf)
      yield* inbox.append("next-turn", msg("a"))
      yield* inbox.append("next-turn", msg("b"))
      yield* inbox.prepend("next-turn", msg("c"))
      yield* inbox.append("next-step", msg("s1"))
      yield* inbox.prepend("next-step", msg("s0"))
      assert.isTrue(yield* inbox.replace("a" as MessageId, msg("a2")))
      assert.isFalse(yield* inbox.replace("zzz" as MessageId, msg("unused")))
      assert.isTrue(yield* inbox.remove("c" as MessageId))
      assert.isFalse(yield* inbox.remove("c" as MessageId))
      assert.deepStrictEqual(yield* lists(inbox), { turn: ["a2", "b"], step: ["s0", "s1"] })
      yield* inbox.clear
      const length = (yield* session.events).length
      yield* inbox.clear
      assert.strictEqual((yield* session.events).length, length, "nothing is written for empty lists")
      yield* inbox.append("next-step", msg("x"))
      yield* inbox.append("next-turn", msg("y"))
      yield* inbox.append("next-turn", msg("z"))
      yield* claimAll(inbox, 1)
      yield* inbox.clearCanceled
      assert.deepStrictEqual(yield* written(), [
        ["next-turn", 0, [], ["a"], undefined],
        ["next-turn", 1, [], ["b"], undefined],
        ["next-turn", 0, [], ["c"], undefined],
        ["next-step", 0, [], ["s1"], undefined],
        ["next-step", 0, [], ["s0"], undefined],
        ["next-turn", 1, ["a"], ["a2"], "canceled"],
        ["next-turn", 0, ["c"], [], "canceled"],
        ["next-step", 0, ["s0", "s1"], [], "canceled"],
        ["next-turn", 0, ["a2", "b"], [], "canceled"],
        ["next-step", 0, [], ["x"], undefined],
        ["next-turn", 0, [], ["y"], undefined],
        ["next-turn", 1, [], ["z"], undefined],
        ["next-step", 0, ["x"], [], undefined],
        ["next-turn", 0, ["y"], [], undefined],
        ["next-turn", 0, ["z"], [], "canceled"]
      ])
      assert.strictEqual(yield* inbox.hasPending, false)
    }))

  it.scoped("INB-03 clear writes its splices (next-step first) as one batch", () =>
    Effect.gen(function*() {
      const { batches, writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("clear"), writer)
      const { changes, inbox } = yield* recorded(session)
      yield* inbox.append("next-turn", msg("t"))
      yield* inbox.append("next-step", msg("s"))
      yield* inbox.clear
      const last = (yield* batches).at(-1) ?? []
      assert.deepStrictEqual(splicesOf(last), [
        ["next-step", 0, ["s"], [], "canceled"],
        ["next-turn", 0, ["t"], [], "canceled"]
      ])
      assert.deepStrictEqual((yield* changes).slice(2).map((c) => c._tag === "Discarded" ? c.target : c._tag), [
        "next-step",
        "next-turn"
      ])
    }))

  it.scoped("INB-05 replay of a stored log equals the live projection, and a restored splice after a claim is accepted", () =>
    Effect.gen(function*() {
      const { writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("replay"), writer)
      const inbox = yield* internal.make(session)
      yield* inbox.append("next-turn", msg("a"))
      yield* inbox.append("next-turn", msg("b"))
      yield* inbox.append("next-step", msg("s"))
      yield* inbox.replace("b" as MessageId, msg("b2"))
      yield* claimAll(inbox, 1)
      yield* inbox.prepend("next-step", msg("t"))
      const live = yield* lists(inbox)
      const replayed = yield* internal.make(yield* storedSession("replay", yield* session.events))
      assert.deepStrictEqual(yield* lists(replayed), live)
      for (const id of ["a", "b", "b2", "s", "t"]) assert.strictEqual(replayed.stateOf(id), inbox.stateOf(id))

      // A crash inside a claim batch: the claim splice is stored, its user/message is not (REP-02).
      const torn = storedLog(
        splice("next-turn", 0, [], [msg("a"), msg("b")]),
        ["turn/start", { turn: 1 }],
        splice("next-turn", 0, ["a"], []),
        ["step/start", { turn: 1, step: 1 }]
      )
      const closers = Repair.closers(torn)
      assert.deepStrictEqual(splicesOf(closers), [["next-turn", 0, [], ["a"], "restored"]])
      const repaired = yield* internal.make(yield* storedSession("torn", [...torn, ...closers]))
      assert.deepStrictEqual(yield* lists(repaired), { turn: ["a", "b"], step: [] })
      assert.strictEqual(repaired.stateOf("a"), "pending")
      const result = yield* claimAll(repaired, 2)
      assert.deepStrictEqual(Option.map(result, (r) => ids(r.entered)), Option.some(["a"]))
    }))

  it.scoped("INB-05 an invalid stored splice fails InvalidInboxLog with its seq; nothing is repaired", () =>
    Effect.gen(function*() {
      const a = msg("a")
      const b = msg("b")
      const cases: ReadonlyArray<readonly [string, ReadonlyArray<readonly [string, unknown]>, number]> = [
        ["start out of range", [splice("next-turn", 0, [], [a]), splice("next-turn", 2, [], [b])], 1],
        ["removal past the end", [splice("next-turn", 0, [], [a]), splice("next-turn", 0, ["a", "b"], [])], 1],
        [
          "removal from the wrong list",
          [splice("next-turn", 0, [], [a]), splice("next-step", 0, ["a"], [], "canceled")],
          1
        ],
        [
          "removed id mismatch",
          [
            splice("next-turn", 0, [], [a, b]),
            ["turn/start", { turn: 1 }],
            splice("next-turn", 0, ["b"], [], "canceled")
          ],
          2
        ],
        ["duplicate insert (pending)", [splice("next-turn", 0, [], [a]), splice("next-step", 0, [], [a])], 1],
        ["duplicate insert in one splice", [splice("next-turn", 0, [], [a, a])], 0],
        [
          "duplicate insert (canceled)",
          [
            splice("next-turn", 0, [], [a]),
            splice("next-turn", 0, ["a"], [], "canceled"),
            splice("next-turn", 0, [], [a])
          ],
          2
        ],
        [
          "restored after a cancel",
          [
            splice("next-turn", 0, [], [a]),
            splice("next-turn", 0, ["a"], [], "canceled"),
            splice("next-turn", 0, [], [a], "restored")
          ],
          2
        ],
        [
          "restored after the message entered",
          [
            splice("next-turn", 0, [], [a]),
            splice("next-turn", 0, ["a"], []),
            ["user/message", { turn: 1, step: 1, message: a }],
            splice("next-turn", 0, [], [a], "restored")
          ],
          3
        ],
        [
          "entered while pending",
          [splice("next-turn", 0, [], [a]), ["user/message", { turn: 1, step: 1, message: a }]],
          1
        ]
      ]
      for (const [name, entries, seq] of cases) {
        const events = storedLog(...entries)
        const failure = yield* Effect.flip(Inbox.make(yield* storedSession("invalid", events)))
        assert.strictEqual(failure._tag, "InvalidInboxLog", name)
        assert.strictEqual(failure.seq, seq, name)
        assert.strictEqual(failure.id, "invalid", name)
      }
      // The same splices in a seed are not the inbox's (a fork's child starts empty).
      const seeded = yield* Session.make({ id: "seeded", seed: storedLog(...cases[0]![1]) })
      assert.deepStrictEqual(yield* lists(yield* Inbox.make(seeded)), { turn: [], step: [] })
    }))

  it.scoped("INB-06 peek: at a turn boundary all next-step then at most one next-turn; between steps next-step only", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "peek" })
      const inbox = yield* internal.make(session)
      assert.deepStrictEqual(yield* inbox.peek("turn"), [])
      yield* inbox.append("next-turn", msg("t1"))
      yield* inbox.append("next-turn", msg("t2"))
      assert.deepStrictEqual(ids(yield* inbox.peek("turn")), ["t1"])
      assert.deepStrictEqual(ids(yield* inbox.peek("step")), [])
      yield* inbox.append("next-step", msg("s1"))
      yield* inbox.append("next-step", msg("s2"))
      assert.deepStrictEqual(ids(yield* inbox.peek("turn")), ["s1", "s2", "t1"])
      assert.deepStrictEqual(ids(yield* inbox.peek("step")), ["s1", "s2"])
      assert.strictEqual((yield* session.events).length, 4, "peeking writes nothing")
      const result = yield* claimAll(inbox, 1)
      assert.deepStrictEqual(Option.map(result, (r) => ids(r.entered)), Option.some(["s1", "s2", "t1"]))
      assert.deepStrictEqual(yield* lists(inbox), { turn: ["t2"], step: [] })
    }))

  it.scoped("INB-06 claim re-resolves the peeked ids: one replaced in between does not enter, nor is it written twice", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "reresolve" })
      const { changes, inbox } = yield* recorded(session)
      yield* inbox.append("next-step", msg("a"))
      yield* inbox.append("next-step", msg("b"))
      yield* inbox.append("next-step", msg("c"))
      const peeked = yield* inbox.peek("step")
      yield* inbox.replace("b" as MessageId, msg("b2"))
      yield* inbox.prepend("next-step", msg("late"))
      const result = yield* inbox.claim({
        turn: 1,
        step: 2,
        peeked: messageIds(peeked),
        entering: peeked,
        guard: () => true
      })
      const claimed = Option.getOrThrow(result)
      assert.deepStrictEqual(ids(claimed.entered), ["a", "c"])
      assert.deepStrictEqual(claimed.events.map((e) => e.type), [
        "agent/inbox/spliced",
        "agent/inbox/spliced",
        "step/start",
        "user/message",
        "user/message"
      ])
      // [late, a, b2, c]: two runs, the second start relative to the list after the first.
      assert.deepStrictEqual(splicesOf(claimed.events), [
        ["next-step", 1, ["a"], [], undefined],
        ["next-step", 2, ["c"], [], undefined]
      ])
      assert.deepStrictEqual(claimed.events[2]?.data, { turn: 1, step: 2 })
      assert.deepStrictEqual(yield* lists(inbox), { turn: [], step: ["late", "b2"] })
      assert.deepStrictEqual(["a", "b", "c"].map((id) => inbox.stateOf(id)), ["entered", "canceled", "entered"])
      const last = (yield* changes).at(-1)
      // EVS-02: the claim mirrors the step/start of the step its messages entered
      const seq = claimed.events[2]!.seq
      assert.deepStrictEqual(last, Inbox.InboxChange.Claimed({ turn: 1, messages: [msg("a"), msg("c")], seq }))
    }))

  it.scoped("INB-06 a claim whose guard is false (cancel cause set) writes nothing and returns None", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "guard" })
      const { changes, inbox } = yield* recorded(session)
      yield* inbox.append("next-turn", msg("a"))
      const peeked = yield* inbox.peek("turn")
      const before = (yield* changes).length
      const result = yield* inbox.claim({
        turn: 1,
        step: 1,
        peeked: messageIds(peeked),
        entering: peeked,
        guard: () => false,
        extraBefore: [{ type: "turn/start", data: { turn: 1 } }]
      })
      assert.isTrue(Option.isNone(result))
      assert.strictEqual((yield* session.events).length, 1)
      assert.strictEqual((yield* changes).length, before)
      assert.strictEqual(inbox.stateOf("a"), "pending")
      assert.deepStrictEqual(yield* inbox.reject(["a" as MessageId], { guard: () => false }), [])
      assert.strictEqual((yield* session.events).length, 1)
    }))

  it.scoped("INB-07 the claim splices, step/start and user/messages are one writer batch (with extraBefore first)", () =>
    Effect.gen(function*() {
      const { batches, writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("batch"), writer)
      const inbox = yield* internal.make(session)
      yield* inbox.append("next-turn", msg("t"))
      yield* inbox.append("next-step", msg("s"))
      const peeked = yield* inbox.peek("turn")
      const extraBefore: ReadonlyArray<CoreEventInput> = [{ type: "turn/start", data: { turn: 1 } }]
      const guard = () => true
      yield* inbox.claim({ turn: 1, step: 1, peeked: messageIds(peeked), entering: peeked, guard, extraBefore })
      const all = yield* batches
      assert.strictEqual(all.length, 3)
      const claim = all[2]!
      assert.deepStrictEqual(claim.map((e) => e.type), [
        "turn/start",
        "agent/inbox/spliced",
        "agent/inbox/spliced",
        "step/start",
        "user/message",
        "user/message"
      ])
      assert.deepStrictEqual(splicesOf(claim), [
        ["next-step", 0, ["s"], [], undefined],
        ["next-turn", 0, ["t"], [], undefined]
      ])
      assert.deepStrictEqual(claim.slice(4).map((e) => e.data), [
        { turn: 1, step: 1, message: msg("s") },
        { turn: 1, step: 1, message: msg("t") }
      ])
    }))

  it.scoped("INB-07 a preStep replacement: peeked originals left out are rejected in the same batch, fresh ids enter", () =>
    Effect.gen(function*() {
      const { batches, writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("replaced"), writer)
      const { changes, inbox } = yield* recorded(session)
      yield* inbox.append("next-step", msg("keep"))
      yield* inbox.append("next-step", msg("drop"))
      yield* inbox.append("next-turn", msg("used"))
      const peeked = yield* inbox.peek("turn")
      const before = (yield* changes).length
      const result = yield* inbox.claim({
        turn: 3,
        step: 1,
        peeked: messageIds(peeked),
        entering: [msg("keep"), msg("hook"), msg("used")],
        guard: () => true
      })
      assert.deepStrictEqual(ids(Option.getOrThrow(result).entered), ["keep", "hook", "used"])
      const claim = (yield* batches).at(-1) ?? []
      assert.deepStrictEqual(splicesOf(claim), [
        ["next-step", 0, ["keep"], [], undefined],
        ["next-step", 0, ["drop"], [], "rejected"],
        ["next-turn", 0, ["used"], [], undefined]
      ])
      const enteredIds = claim
        .filter((e) => e.type === "user/message")
        .map((e) => (e.data as { readonly message: UserMessage }).message.id)
      assert.deepStrictEqual(enteredIds, ["keep", "hook", "used"])
      assert.deepStrictEqual(["keep", "drop", "hook", "used"].map((id) => inbox.stateOf(id)), [
        "entered",
        "rejected",
        "entered",
        "entered"
      ])
      // EVS-02: the discard mirrors its splice, the claim the batch's step/start
      const rejectedSeq = claim[1]!.seq
      const stepStartSeq = claim.find((e) => e.type === "step/start")!.seq
      assert.deepStrictEqual((yield* changes).slice(before), [
        Inbox.InboxChange.Discarded({
          target: "next-step",
          ids: ["drop" as MessageId],
          outcome: "rejected",
          seq: rejectedSeq
        }),
        Inbox.InboxChange.Claimed({ turn: 3, messages: [msg("keep"), msg("hook"), msg("used")], seq: stepStartSeq })
      ])
      // Already accepted ids in a replacement do not enter again.
      const again = yield* inbox.claim({
        turn: 3,
        step: 2,
        peeked: [],
        entering: [msg("drop"), msg("hook")],
        guard: () => true
      })
      assert.deepStrictEqual(again, Option.some({ entered: [], events: [] }))
    }))

  it.scoped("INB-07 a rejected batch (preStep reject, or nothing entering) is removed with outcome rejected and nothing enters", () =>
    Effect.gen(function*() {
      const session = yield* Session.make({ id: "rejected" })
      const inbox = yield* internal.make(session)
      yield* inbox.append("next-step", msg("a"))
      yield* inbox.append("next-turn", msg("b"))
      yield* inbox.append("next-turn", msg("c"))
      const result = yield* inbox.claim({
        turn: 1,
        step: 1,
        peeked: ["a", "b"] as Array<MessageId>,
        entering: [],
        guard: () => true,
        extraBefore: [{ type: "turn/start", data: { turn: 1 } }]
      })
      const claimed = Option.getOrThrow(result)
      assert.deepStrictEqual(claimed.entered, [])
      assert.deepStrictEqual(splicesOf(claimed.events), [
        ["next-step", 0, ["a"], [], "rejected"],
        ["next-turn", 0, ["b"], [], "rejected"]
      ])
      assert.isFalse((yield* session.events).some((e) => e.type === "turn/start" || e.type === "step/start"))
      assert.deepStrictEqual(yield* inbox.reject(["c", "a", "zzz"] as Array<MessageId>), ["c" as MessageId])
      assert.deepStrictEqual(splicesOf((yield* session.events).slice(-1)), [["next-turn", 0, ["c"], [], "rejected"]])
      assert.deepStrictEqual(yield* inbox.reject(["c"] as Array<MessageId>), [])
      assert.strictEqual(yield* inbox.hasPending, false)
    }))

  it.scoped("DLV-03 insert writes extra core events in the same batch, right after its splice", () =>
    Effect.gen(function*() {
      const { batches, writer } = yield* recordingWriter
      const session = yield* Session.fromPlan(planFor("insert"), writer)
      const inbox = yield* internal.make(session)
      let evaluatedWithLength = -1
      yield* inbox.insert("next-turn", msg("a"), "end", () => {
        evaluatedWithLength = core(session).length()
        return [{ type: "turn/start", data: { turn: 1 } }]
      })
      assert.strictEqual(evaluatedWithLength, 0)
      assert.deepStrictEqual((yield* batches).map((b) => b.map((e) => e.type)), [["agent/inbox/spliced", "turn/start"]])
      yield* inbox.insert("next-turn", msg("b"), "front")
      assert.deepStrictEqual((yield* lists(inbox)).turn, ["b", "a"])
    }))

  it.scoped("B8 the deque stays consistent through long front/back mixes (ring wrap-around, growth)", () =>
    Effect.sync(() => {
      const deque = new internal.Deque<number>()
      const model: Array<number> = []
      let next = 0
      for (let round = 0; round < 2000; round++) {
        const kind = round % 7
        if (kind < 3) {
          deque.splice(deque.length, 0, [next])
          model.push(next++)
        } else if (kind < 5) {
          deque.splice(0, 0, [next, next + 1])
          model.unshift(next, next + 1)
          next += 2
        } else if (kind === 5 && model.length > 0) {
          deque.splice(0, 1, [])
          model.shift()
        } else if (model.length > 2) {
          const at = Math.floor(model.length / 2)
          deque.splice(at, 1, [])
          model.splice(at, 1)
        }
        assert.strictEqual(deque.length, model.length)
      }
      assert.deepStrictEqual(deque.toArray(), model)
    }))

  describe("properties", () => {
    type Op =
      | { readonly op: "append" | "prepend"; readonly target: InboxTarget; readonly id: string }
      | { readonly op: "replace"; readonly id: string; readonly by: string }
      | { readonly op: "remove"; readonly id: string }
      | { readonly op: "clear" }
      | { readonly op: "fail" }
      | {
        readonly op: "claim"
        readonly boundary: "turn" | "step"
        readonly keep: ReadonlyArray<boolean>
        readonly cancelBetween: string | null
        readonly fresh: string | null
        readonly guard: boolean
      }

    const id = fc.constantFrom(...Array.from({ length: 12 }, (_, i) => `m${i}`))
    const target = fc.constantFrom<InboxTarget>("next-turn", "next-step")
    const op: fc.Arbitrary<Op> = fc.oneof(
      { arbitrary: fc.record({ op: fc.constantFrom("append" as const, "prepend" as const), target, id }), weight: 6 },
      { arbitrary: fc.record({ op: fc.constant("replace" as const), id, by: id }), weight: 2 },
      { arbitrary: fc.record({ op: fc.constant("remove" as const), id }), weight: 2 },
      { arbitrary: fc.record({ op: fc.constant("clear" as const) }), weight: 1 },
      { arbitrary: fc.record({ op: fc.constant("fail" as const) }), weight: 1 },
      {
        arbitrary: fc.record({
          op: fc.constant("claim" as const),
          boundary: fc.constantFrom("turn" as const, "step" as const),
          keep: fc.array(fc.boolean(), { maxLength: 6 }),
          cancelBetween: fc.option(id, { nil: null }),
          fresh: fc.option(id, { nil: null }),
          guard: fc.boolean()
        }),
        weight: 3
      }
    )

    /** Runs the ops on a live inbox (errors are expected outcomes) and checks uniqueness after each. */
    const run = (ops: ReadonlyArray<Op>) =>
      Effect.gen(function*() {
        const { failNext, writer } = yield* recordingWriter
        const session = yield* Session.fromPlan(planFor("prop"), writer)
        const inbox = yield* internal.make(session)
        let turn = 0
        for (const o of ops) {
          switch (o.op) {
            case "append":
              yield* Effect.either(inbox.append(o.target, msg(o.id)))
              break
            case "prepend":
              yield* Effect.either(inbox.prepend(o.target, msg(o.id)))
              break
            case "replace":
              yield* Effect.either(inbox.replace(o.id as MessageId, msg(o.by, `replacement ${o.by}`)))
              break
            case "remove":
              yield* Effect.either(inbox.remove(o.id as MessageId))
              break
            case "clear":
              yield* Effect.either(inbox.clear)
              break
            case "fail":
              yield* failNext
              break
            case "claim": {
              const peeked = yield* inbox.peek(o.boundary)
              if (o.cancelBetween !== null) yield* Effect.either(inbox.remove(o.cancelBetween as MessageId))
              const entering = [
                ...peeked.filter((_, i) => o.keep[i] ?? true),
                ...(o.fresh === null ? [] : [msg(o.fresh, "from a hook")])
              ]
              turn++
              yield* Effect.either(inbox.claim({
                turn,
                step: 1,
                peeked: messageIds(peeked),
                entering,
                guard: () => o.guard
              }))
              break
            }
          }
          const pending = [...(yield* inbox.nextStep), ...(yield* inbox.nextTurn)]
          assert.strictEqual(new Set(ids(pending)).size, pending.length, "a MessageId is pending at most once")
          for (const m of pending) assert.strictEqual(inbox.stateOf(m.id), "pending")
        }
        return { session, inbox }
      })

    const ops = fc.array(op, { maxLength: 40 })

    it.effect.prop("INB-05 replaying the log of random operations gives the live lists and id states", [ops], ([ops]) =>
      Effect.gen(function*() {
        const { inbox, session } = yield* run(ops)
        const replayed = yield* internal.make(yield* storedSession("prop", yield* session.events))
        assert.deepStrictEqual(yield* replayed.nextTurn, yield* inbox.nextTurn)
        assert.deepStrictEqual(yield* replayed.nextStep, yield* inbox.nextStep)
        for (let i = 0; i < 12; i++) assert.strictEqual(replayed.stateOf(`m${i}`), inbox.stateOf(`m${i}`))
      }).pipe(Effect.scoped))

    it.effect.prop("INB-01 a MessageId is pending at most once across both lists, at all times", [ops], ([ops]) =>
      Effect.asVoid(run(ops)).pipe(Effect.scoped))

    it.effect.prop(
      "INB-07 every accepted id ends exactly one of: entered, removed by a logged canceled/rejected splice, pending",
      [ops],
      ([ops]) =>
        Effect.gen(function*() {
          const { inbox, session } = yield* run(ops)
          const events = yield* session.events
          const accepted = new Set<string>()
          const entered: Array<string> = []
          const discarded: Array<string> = []
          for (const e of events) {
            if (e.type === "agent/inbox/spliced") {
              const data = e.data as SpliceData
              for (const m of data.inserted) accepted.add(m.id)
              if (data.outcome === "canceled" || data.outcome === "rejected") discarded.push(...data.removed)
            } else if (e.type === "user/message") {
              const id = (e.data as { readonly message: UserMessage }).message.id
              accepted.add(id)
              entered.push(id)
            }
          }
          const pending = ids([...(yield* inbox.nextStep), ...(yield* inbox.nextTurn)])
          const endings = [...entered, ...discarded, ...pending]
          assert.strictEqual(endings.length, accepted.size, "no id ends twice")
          assert.deepStrictEqual(new Set(endings), accepted, "every accepted id ends somewhere")
          for (const id of accepted) assert.isDefined(inbox.stateOf(id))
        }).pipe(Effect.scoped)
    )
  })

  it.scoped("INB-05 replay is linear: 10,000 pending items resume and claim one by one from the front", () =>
    Effect.gen(function*() {
      const entries: Array<readonly [string, unknown]> = []
      for (let i = 0; i < 10_000; i++) entries.push(splice("next-turn", i, [], [msg(`m${i}`)]))
      const session = yield* storedSession("many", storedLog(...entries))
      const inbox = yield* internal.make(session)
      assert.strictEqual(inbox.sizes().nextTurn, 10_000)
      for (let turn = 1; turn <= 100; turn++) {
        const result = yield* claimAll(inbox, turn)
        assert.deepStrictEqual(Option.map(result, (r) => ids(r.entered)), Option.some([`m${turn - 1}`]))
      }
      assert.strictEqual((yield* inbox.nextTurn)[0]?.id, "m100")
      const exit = yield* Effect.exit(inbox.append("next-turn", msg("m0")))
      assert.isTrue(Exit.isFailure(exit))
    }))

  it.effect("CORE-04 INB-05 replay folds the stored events after the seed as a stream in chunks: 50,000 fit the stack", () =>
    Effect.gen(function*() {
      const count = 50_000
      const entries: Array<readonly [string, unknown]> = [["custom/seeded", {}]]
      for (let i = 0; i < count; i++) entries.push(splice("next-step", i, [], [msg(`m${i}`)]))
      const log = storedLog(...entries)
      // the stream starts after the seed and never hands the fold one big chunk
      const chunks = yield* Stream.runCollect(Stream.chunks(internal.eventsAfter(log, 1)))
      assert.strictEqual(Chunk.reduce(chunks, 0, (n, chunk) => n + chunk.length), count)
      assert.isTrue(Chunk.every(chunks, (chunk) => chunk.length > 0 && chunk.length <= 1024))
      assert.strictEqual(Chunk.unsafeHead(Chunk.unsafeHead(chunks)).seq, 1)
      const projection = yield* internal.replay(Message.SessionId.make("many"), log, 1)
      assert.strictEqual(projection.lists["next-step"].length, count)
      assert.strictEqual(projection.stateOf(`m${count - 1}`), "pending")
      // the fold stops at the first event that does not apply, deep in the log, and names its seq
      const broken = [...log]
      broken[40_001] = event(40_001, "agent/inbox/spliced", {
        target: "next-step",
        start: 0,
        removed: ["not-there"],
        inserted: []
      })
      const failed = yield* Effect.flip(internal.replay(Message.SessionId.make("many"), broken, 1))
      assert.strictEqual(failed._tag, "InvalidInboxLog")
      assert.strictEqual(failed.seq, 40_001)
    }))
})
