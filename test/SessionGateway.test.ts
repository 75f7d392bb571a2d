/**
 * SessionGateway over AgentHost (SPEC §17, HTTP-00), without HTTP, over the file store and SQLite:
 * create-if-absent, idempotent sends and MessageId conflicts, summaries of stored sessions read
 * without activation, paged listing, the event stream across passivation (EVS-01) with live events
 * attached again after an activation (EVS-02), fork, cancel and remove.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Fiber, Option, Queue, Stream } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import * as AgentHost from "../src/AgentHost.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import type * as SessionGateway from "../src/SessionGateway.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import { feedOf as agentFeedOf } from "../src/internal/agent/loop/agent.js"
import { stores } from "./fixtures/host.js"
import type { Store } from "./fixtures/host.js"
import { fileStore, gatewayOver } from "./fixtures/httpServer.js"
import { gate } from "./fixtures/tools.js"
import { eventually } from "./fixtures/waiting.js"

const route = { provider: "scripted", model: "test" }

const logOf = (store: Store, id: string) =>
  Effect.map(Context.get(store.context, SessionPersistence).read(id as SessionId), (stored) => stored.events)

const backends = [{ name: "files", make: fileStore }, stores[1]!]

/** The host as made (its reader runs into the gateway's sink), and a copy of its service (read as a stream). */
const hostShapes = [
  { name: "the host as made", seen: (host: AgentHost.AgentHost["Type"]) => host },
  { name: "a copy of the host's service", seen: (host: AgentHost.AgentHost["Type"]) => AgentHost.AgentHost.of({ ...host }) }
]

for (const backend of backends) {
  describe(`SessionGateway over ${backend.name}`, () => {
    it.scoped("HTTP-00 create is create-if-absent and says whether it created; a stored session's summary is read without activating it", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { gateway, host, registry } = yield* gatewayOver(store, [Model.text("hello")])
        const first = yield* gateway.create("g1", { options: route, meta: { owner: "ann" } })
        assert.isTrue(first.created)
        assert.deepStrictEqual([first.session.status, first.session.eventCount], ["idle", 0])
        const again = yield* gateway.create("g1", { meta: { owner: "bob" } })
        assert.isFalse(again.created)
        assert.deepStrictEqual(again.session.meta, { owner: "ann" })
        yield* gateway.send("g1", { text: "hi", id: "m1" })
        yield* host.use("g1", (agent) => agent.whenIdle)
        yield* gateway.send("g1", { text: "later", id: "m2", mode: "inject" })
        yield* gateway.send("g1", { text: "after that", id: "m3", mode: "inject" })
        const live = yield* gateway.summary("g1")
        yield* gateway.dispose("g1")
        assert.isTrue(Option.isNone(yield* registry.get("g1")))
        const stored = yield* gateway.summary("g1")
        // the stored summary says what the live one said, without an agent
        assert.deepStrictEqual({ ...stored, status: live.status }, live)
        assert.deepStrictEqual([stored.status, stored.pending, stored.openTurn], ["passive", { nextTurn: 0, nextStep: 2 }, false])
        assert.deepStrictEqual(stored.usage, { inputTokens: 1, outputTokens: 5 })
        assert.strictEqual(stored.eventCount, (yield* logOf(store, "g1")).length)
        assert.isTrue(Option.isNone(yield* registry.get("g1")))
        // unknown and invalid ids
        assert.strictEqual((yield* Effect.flip(gateway.summary("nobody")))._tag, "SessionNotFound")
        assert.strictEqual((yield* Effect.flip(gateway.summary("no/body")))._tag, "InvalidSessionId")
        assert.strictEqual((yield* Effect.flip(gateway.create("..")))._tag, "InvalidSessionId")
      }))

    it.scoped("HTTP-00 send: a repeated MessageId with the same content and mode appends nothing; other content or mode is MessageIdConflict", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { gateway, host } = yield* gatewayOver(store, [Model.text("a"), Model.text("b")])
        yield* gateway.create("dup", { options: route })
        for (const mode of ["inject", "steer", "followup"] as const) {
          const id = `id-${mode}`
          assert.deepStrictEqual(yield* gateway.send("dup", { text: mode, id, mode }), {
            messageId: Message.MessageId.make(id),
            duplicate: false
          })
          yield* host.use("dup", (agent) => agent.whenIdle)
          const before = (yield* logOf(store, "dup")).length
          assert.deepStrictEqual(yield* gateway.send("dup", { text: mode, id, mode }), {
            messageId: Message.MessageId.make(id),
            duplicate: true
          })
          const changed = yield* Effect.flip(gateway.send("dup", { text: `${mode}!`, id, mode }))
          assert.strictEqual(changed._tag, "MessageIdConflict")
          const moved = yield* Effect.flip(gateway.send("dup", { text: mode, id, mode: mode === "inject" ? "steer" : "inject" }))
          assert.strictEqual(moved._tag, "MessageIdConflict")
          assert.strictEqual((yield* logOf(store, "dup")).length, before)
        }
        const invalid = yield* Effect.flip(gateway.send("dup", { text: "a", content: [{ type: "text", text: "b" }] }))
        assert.strictEqual(invalid._tag, "InvalidRequest")
        // a passivated agent is activated by a send
        yield* gateway.dispose("dup")
        yield* gateway.send("dup", { text: "wake up", id: "w1" })
        yield* host.use("dup", (agent) => agent.whenIdle)
        const messages = (yield* logOf(store, "dup")).filter((event) => event.type === "user/message")
        assert.strictEqual(messages.length, 4)
      }))

    it.scoped("HTTP-00 list: stored and live sessions in id order, paged with limit and after", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { gateway } = yield* gatewayOver(store, [])
        for (const id of ["b", "a", "d", "c", "e"]) yield* gateway.create(id, { options: route })
        yield* gateway.dispose("c")
        const page1 = yield* gateway.list({ limit: 2 })
        assert.deepStrictEqual(page1.sessions.map((entry) => entry.id), ["a", "b"])
        const page2 = yield* gateway.list({ limit: 2, after: page1.next! })
        assert.deepStrictEqual(page2.sessions.map((entry) => entry.id), ["c", "d"])
        assert.strictEqual((page2.sessions[0] as SessionGateway.SessionInfo).status, "passive")
        const page3 = yield* gateway.list({ limit: 2, after: page2.next! })
        assert.deepStrictEqual(page3.sessions.map((entry) => entry.id), ["e"])
        assert.isUndefined(page3.next)
        assert.strictEqual((yield* gateway.list()).sessions.length, 5)
      }))

    for (const shape of hostShapes) {
      it.scoped(`HTTP-00 EVS-01 eventsFrom follows the session across a passivation without activating it; EVS-02 live events attach again after the activation (${shape.name})`, () =>
        Effect.gen(function*() {
          const store = yield* backend.make
          const entered = yield* Deferred.make<void>()
          const open = yield* Deferred.make<void>()
          const { gateway, registry } = yield* gatewayOver(
            store,
            [Model.text("first"), Model.toolCall("c1", "gate", "{}"), Model.text("second reply")],
            { setup: (agent) => agent.tools.register(gate(entered, open)) },
            shape.seen
          )
          yield* gateway.create("ev", { options: route })
          // the agent's own watchers (the registry's mirror), before any reader
          const baseline = agentFeedOf(Option.getOrThrow(yield* registry.get("ev")))!.subscribers()
          yield* gateway.send("ev", { text: "one", id: "m1" })
          const received = yield* Queue.unbounded<SessionGateway.StreamEvent>()
          const reader = yield* gateway.eventsFrom("ev", 0).pipe(
            Stream.runForEach((item) => Queue.offer(received, item)),
            Effect.fork
          )
          const takeUntil = (done: (item: SessionGateway.StreamEvent) => boolean) =>
            Effect.gen(function*() {
              const items: Array<SessionGateway.StreamEvent> = []
              while (true) {
                const item = yield* Queue.take(received)
                items.push(item)
                if (done(item)) return items
              }
            })
          const turnEnd = (turn: number) => (item: SessionGateway.StreamEvent) =>
            item._tag === "Durable" && item.event.type === "turn/end" && (item.event.data as { turn: number }).turn === turn
          const first = yield* takeUntil(turnEnd(1))
          // passivated: the reader waits without activating the agent
          yield* gateway.dispose("ev")
          assert.isTrue(Option.isNone(yield* registry.get("ev")))
          yield* gateway.send("ev", { text: "two", id: "m2" })
          yield* Deferred.await(entered)
          // the reader has attached to the new agent's live events before the gate opens
          const agent = Option.getOrThrow(yield* registry.get("ev"))
          yield* eventually(() => Effect.sync(() => agentFeedOf(agent)!.subscribers() === baseline + 1))
          yield* Deferred.succeed(open, undefined)
          // live events come beside the durable ones, not in order with them: wait for both
          let ended = false
          let streamed = ""
          const second = yield* takeUntil((item) => {
            if (turnEnd(2)(item)) ended = true
            if (item._tag === "Live" && item.event._tag === "ModelDelta" && item.event.turn === 2) streamed += item.event.text
            return ended && streamed === "second reply"
          })
          yield* Fiber.interrupt(reader)
          const durable = [...first, ...second].flatMap((item) => (item._tag === "Durable" ? [item.event] : []))
          assert.deepStrictEqual(durable, yield* logOf(store, "ev"))
          assert.strictEqual(streamed, "second reply")
          assert.isTrue(second.some((item) => item._tag === "Live" && item.event._tag === "ToolCallStarted"))
        }))
    }

    it.scoped("HTTP-00 fork, cancel of a passive session's pending input, and remove while a reader reads (SessionRemoved)", () =>
      Effect.gen(function*() {
        const store = yield* backend.make
        const { gateway, host } = yield* gatewayOver(store, [Model.text("answer"), Model.text("x")])
        yield* gateway.create("src", { options: route })
        yield* gateway.send("src", { text: "q", id: "q1" })
        yield* host.use("src", (agent) => agent.whenIdle)
        const log = yield* logOf(store, "src")
        const child = yield* gateway.fork("src", { childId: "kid", upTo: 1 })
        assert.deepStrictEqual([child.parentSession, child.eventCount], ["src", 1])
        assert.strictEqual((yield* Effect.flip(gateway.fork("src", { childId: "kid" })))._tag, "AgentAlreadyExists")
        const inside = yield* Effect.flip(gateway.fork("src", { childId: "kid2", upTo: 3 }))
        assert.strictEqual(inside._tag, "ForkInsideOpenTurn")
        assert.strictEqual((yield* logOf(store, "src")).length, log.length)
        // pending input of a passive session: kept with keepInbox, cancelled without
        yield* gateway.send("src", { text: "later", mode: "inject" })
        yield* gateway.dispose("src")
        yield* gateway.cancel("src", { keepInbox: true })
        assert.deepStrictEqual((yield* gateway.summary("src")).pending, { nextTurn: 0, nextStep: 1 })
        yield* gateway.cancel("src")
        assert.deepStrictEqual((yield* gateway.summary("src")).pending, { nextTurn: 0, nextStep: 0 })
        // remove while a reader follows the session
        const reading = yield* Deferred.make<void>()
        const reader = yield* gateway.eventsFrom("kid", 0).pipe(
          Stream.tap(() => Deferred.succeed(reading, undefined)),
          Stream.runCollect,
          Effect.either,
          Effect.fork
        )
        yield* Deferred.await(reading)
        yield* gateway.remove("kid")
        const outcome = yield* Fiber.join(reader)
        assert.isTrue(outcome._tag === "Left" && outcome.left._tag === "SessionRemoved")
        assert.strictEqual((yield* Effect.flip(gateway.summary("kid")))._tag, "SessionNotFound")
        assert.strictEqual((yield* Effect.flip(gateway.remove("kid")))._tag, "SessionNotFound")
      }))
  })
}

describe("SessionGateway listing", () => {
  it.scoped("HTTP-00 DUR-08 a stored file that cannot be read is listed as unreadable, with its problem; the others are listed", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const { gateway } = yield* gatewayOver(store, [])
      yield* gateway.create("fine", { options: route })
      yield* Effect.promise(() => fs.writeFile(path.join(store.directory, "broken.jsonl"), "{not a header\n"))
      const page = yield* gateway.list()
      assert.deepStrictEqual(page.sessions.map((entry) => [entry._tag, entry.id]), [
        ["UnreadableSession", "broken"],
        ["SessionInfo", "fine"]
      ])
      const broken = page.sessions[0] as SessionGateway.UnreadableSession
      assert.isAbove(broken.problem.length, 0)
    }))
})
