/**
 * The HTTP API across a restart (HTTP-01, HTTP-04's walkthrough): a server's runtime is closed while
 * a turn runs and a follow-up waits, a new one starts on the same file store, and a client that
 * reconnects with `Last-Event-ID` reads every durable event once, in order, while the pending
 * follow-up runs without a new message (HOST-03/HOST-04). Also the exported typed client and the
 * reconnecting SSE helper.
 */
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Either, Fiber, Schedule, Schema, Stream } from "effect"
import * as HttpApi from "../src/HttpApi.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as SessionGateway from "../src/SessionGateway.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import { tempDirectory } from "./fixtures/backends.js"
import type { Frame } from "./fixtures/httpServer.js"
import { fileStoreAt, openEvents, request, serve } from "./fixtures/httpServer.js"

const route = { provider: "scripted", model: "test" }
const decodeDurable = Schema.decodeUnknownSync(Schema.parseJson(SessionGateway.DurableEvent))

const durableOf = (frames: ReadonlyArray<Frame | undefined>): ReadonlyArray<SessionEvent> =>
  frames.flatMap((frame) => (frame?.event === "durable" ? [decodeDurable(frame.data!)] : []))

const isTurnEnd = (turn: number) => (frame: Frame) =>
  frame.event === "durable" && (() => {
    const event = decodeDurable(frame.data!)
    return event.type === "turn/end" && (event.data as { readonly turn: number }).turn === turn
  })()

/** Reads frames until the stream ends. */
const rest = (events: { readonly next: Effect.Effect<Frame | undefined> }) =>
  Effect.gen(function*() {
    const frames: Array<Frame> = []
    while (true) {
      const frame = yield* events.next
      if (frame === undefined) return frames
      frames.push(frame)
    }
  })

describe("HttpApi restart", () => {
  it.scoped("HTTP-01 restart: the server's runtime closes mid-turn, a new one starts on the same files; Last-Event-ID resumes without gap or duplicate and the pending follow-up runs", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-http-restart-")
      const first = yield* serve(yield* fileStoreAt(directory), [Model.text("one"), Model.hang("stuck")], {
        host: { drainTimeout: 0 }
      })
      yield* request(`${first.url}/sessions/r`, { method: "PUT", body: { options: route } })
      const events = yield* openEvents(`${first.url}/sessions/r/events`)
      yield* request(`${first.url}/sessions/r/messages`, { method: "POST", body: { text: "first", id: "m1" } })
      const seen = [...(yield* events.until(isTurnEnd(1)))]
      yield* request(`${first.url}/sessions/r/messages`, { method: "POST", body: { text: "second", id: "m2" } })
      yield* first.model.awaitRequest(2)
      // accepted while turn 2 runs: pending when the server stops
      const pending = yield* request(`${first.url}/sessions/r/messages`, {
        method: "POST",
        body: { text: "third", id: "m3" }
      })
      assert.strictEqual(pending.status, 202)
      seen.push(...(yield* events.until((frame) => frame.data?.includes("\"third\"") === true)))
      // the stop: the stream ends, the running turn is cancelled by the drain, m3 stays in the inbox
      yield* first.close
      seen.push(...(yield* rest(events)))
      const before = durableOf(seen)
      assert.isAbove(before.length, 0)

      const second = yield* serve(yield* fileStoreAt(directory), [Model.text("after restart")], {
        host: { recover: true }
      })
      const lastId = seen.filter((frame) => frame.id !== undefined).at(-1)!.id!
      const resumed = yield* openEvents(`${second.url}/sessions/r/events`, { "last-event-id": lastId })
      const after = durableOf(yield* resumed.until(isTurnEnd(3)))
      const all = [...before, ...after]
      // every event once, in order, from 0: what the log holds
      assert.deepStrictEqual(all.map((event) => event.seq), all.map((_, i) => i))
      const log = yield* Context.get((yield* fileStoreAt(directory)).context, SessionPersistence).read("r" as SessionId)
      assert.deepStrictEqual(all, log.events.slice(0, all.length))
      // turn 2 was cut by the stop; m3 ran in turn 3 without being sent again
      const ends = all.filter((event) => event.type === "turn/end").map((event) => event.data)
      assert.deepStrictEqual(ends, [
        { turn: 1, reason: { kind: "completed" } },
        { turn: 2, reason: { kind: "aborted", cause: { kind: "disposed" } } },
        { turn: 3, reason: { kind: "completed" } }
      ])
      const entered = all.filter((event) => event.type === "user/message")
        .map((event) => (event.data as { readonly message: { readonly id: string } }).message.id)
      assert.deepStrictEqual(entered, ["m1", "m2", "m3"])
    }))

  it.scoped("HTTP-01 the typed client: results decoded, 201 vs 200 on PUT, problems decoded into the typed errors", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-http-client-")
      const served = yield* serve(yield* fileStoreAt(directory), [Model.text("typed")])
      const client = yield* HttpApi.client({ baseUrl: served.url })
      const created = yield* client.sessions.create({ path: { id: "typed" }, payload: { options: route } })
      assert.instanceOf(created, HttpApi.SessionCreated)
      const existing: SessionGateway.SessionInfo = yield* client.sessions.create({ path: { id: "typed" }, payload: {} })
      assert.isFalse(existing instanceof HttpApi.SessionCreated)
      assert.strictEqual(existing.id, "typed")
      const t1 = Message.MessageId.make("t1")
      const receipt = yield* client.sessions.send({ path: { id: "typed" }, payload: { text: "hello", id: t1 } })
      assert.deepStrictEqual(receipt, { messageId: "t1", duplicate: false })
      const missing = yield* Effect.flip(client.sessions.get({ path: { id: "absent" } }))
      assert.strictEqual(missing._tag, "SessionNotFound")
      assert.strictEqual((missing as { readonly id?: string }).id, "absent")
      const conflict = yield* Effect.flip(
        client.sessions.send({ path: { id: "typed" }, payload: { text: "other", id: t1 } })
      )
      assert.strictEqual(conflict._tag, "MessageIdConflict")
      const invalid = yield* Effect.flip(client.sessions.get({ path: { id: "no/slash" } }))
      assert.notStrictEqual(invalid._tag, "SessionInfo")
      const page = yield* client.sessions.list({ urlParams: {} })
      assert.deepStrictEqual(page.sessions.map((entry) => entry.id), ["typed"])
    }).pipe(Effect.provide(FetchHttpClient.layer)))

  it.live("HTTP-01 the SSE helper reconnects with Last-Event-ID after the server restarts on its port: each durable event once, in order", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-http-helper-")
      const first = yield* serve(yield* fileStoreAt(directory), [Model.text("before")])
      yield* request(`${first.url}/sessions/h`, { method: "PUT", body: { options: route } })
      yield* request(`${first.url}/sessions/h/messages`, { method: "POST", body: { text: "one" } })
      yield* first.host.use("h", (agent) => agent.whenIdle)
      const firstTurn = yield* Deferred.make<void>()
      const reader = yield* HttpApi.events({
        baseUrl: first.url,
        sessionId: "h",
        reconnect: Schedule.spaced("20 millis")
      }).pipe(
        Stream.tap((item) =>
          item._tag === "Durable" && item.event.type === "turn/end" ? Deferred.succeed(firstTurn, undefined) : Effect.void
        ),
        Stream.takeUntil((item) =>
          item._tag === "Durable" && item.event.type === "turn/end" &&
          (item.event.data as { readonly turn: number }).turn === 2
        ),
        Stream.runCollect,
        Effect.provide(FetchHttpClient.layer),
        Effect.fork
      )
      // the first turn, streamed
      yield* Deferred.await(firstTurn)
      yield* first.close
      const second = yield* serve(yield* fileStoreAt(directory), [Model.text("after")], { port: first.port })
      yield* request(`${second.url}/sessions/h/messages`, { method: "POST", body: { text: "two" } })
      const items = yield* Fiber.join(reader)
      const durable = Chunk.toReadonlyArray(items).flatMap((item) => (item._tag === "Durable" ? [item.event] : []))
      assert.deepStrictEqual(durable.map((event) => event.seq), durable.map((_, i) => i))
      const log = yield* Context.get((yield* fileStoreAt(directory)).context, SessionPersistence).read("h" as SessionId)
      assert.deepStrictEqual(durable, log.events)
      // a session that does not exist fails the stream with its typed error (no retry)
      const refused = yield* HttpApi.events({ baseUrl: second.url, sessionId: "none" }).pipe(
        Stream.runDrain,
        Effect.either,
        Effect.provide(FetchHttpClient.layer)
      )
      assert.isTrue(Either.isLeft(refused) && refused.left._tag === "SessionNotFound")
    }).pipe(Effect.scoped))
})
