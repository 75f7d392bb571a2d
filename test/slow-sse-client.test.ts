/**
 * SEC-01 over real sockets on 127.0.0.1: an event-stream client that stops reading while its session
 * produces many times its buffer limit (and what the kernel's socket buffers take). When it reads on,
 * it gets every durable event once and in order — re-read from the log, not held for it — and it has
 * lost only live frames; once it has caught up, live frames reach it again.
 *
 * `it.live`: real sockets, a real server.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Schema } from "effect"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import { LiveEvent } from "../src/SessionGateway.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import type { Frame } from "./fixtures/httpServer.js"
import { fileStore, request, serve } from "./fixtures/httpServer.js"
import { openRaw } from "./fixtures/rawSse.js"

const route = { provider: "scripted", model: "test" }

/**
 * Characters of each large message and reply: 24 turns make about 18 MB of frames, several times what
 * the kernel's buffers of a socket take (a few MB) and the server's limit (the default, 1 MiB).
 */
const SIZE = 250_000
const TURNS = 24

/** Replies as long as the message, but "small …" gets a short reply (two small deltas). */
const reply = (request: Model.ModelRequest): Model.Reply => {
  const users = request.messages.filter((message): message is Message.UserMessage => message.role === "user")
  const last = Message.textOf(users[users.length - 1]!.content)
  return last.startsWith("small") ? Model.text("a small reply") : Model.text("y".repeat(SIZE))
}

const isDurable = (frame: Frame) => frame.event === "durable"
const decodeLive = Schema.decodeUnknownSync(Schema.parseJson(LiveEvent))

/** The text deltas among `frames` (every live frame must decode). */
const deltasOf = (frames: ReadonlyArray<Frame>) =>
  frames.filter((frame) => frame.event === "live").map((frame) => decodeLive(frame.data)).flatMap((event) =>
    event._tag === "ModelDelta" ? [event.text] : []
  )

describe("a slow SSE client (SEC-01)", () => {
  it.live("SEC-01 a client that stops reading over a real socket gets every durable event once and in order when it reads on, loses only live frames, and then gets live frames again", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, reply)
      assert.strictEqual((yield* request(`${served.url}/sessions/slow`, { method: "PUT", body: { options: route } })).status, 201)
      const stalled = yield* openRaw(served.port, "/sessions/slow/events?from=0")
      for (let i = 0; i < TURNS; i++) {
        const sent = yield* request(`${served.url}/sessions/slow/messages`, {
          method: "POST",
          body: { text: `${i} ${"x".repeat(SIZE)}`, id: `m${i}` }
        })
        assert.strictEqual(sent.status, 202)
      }
      // the agent ran every turn while the client read nothing: it never waited for the client
      yield* served.host.use("slow", (agent) => agent.whenIdle)
      const persistence = Context.get(store.context, SessionPersistence)
      const stored = (yield* persistence.read("slow" as SessionId)).events
      const lastSeq = stored[stored.length - 1]!.seq
      const frames = yield* stalled.readUntil((frame) => isDurable(frame) && frame.id === String(lastSeq))
      const durable = frames.filter(isDurable)
      assert.deepStrictEqual(durable.map((frame) => Number(frame.id)), stored.map((event) => event.seq))
      assert.deepStrictEqual(durable.map((frame) => JSON.parse(frame.data!)), stored.map((event) => JSON.parse(JSON.stringify(event))))
      // live frames: some reached the client before it fell behind, the ones past its limit did not
      const deltas = deltasOf(frames)
      assert.isAbove(deltas.length, 0)
      assert.isBelow(deltas.length, 2 * TURNS)
      for (const text of deltas) assert.match(text, /^y+$/)
      // caught up: the next turn's live frames and durable events arrive as they happen
      const before = frames.length
      yield* request(`${served.url}/sessions/slow/messages`, { method: "POST", body: { text: "small one", id: "last" } })
      const after = yield* stalled.readUntil((frame) =>
        isDurable(frame) && frame.data?.includes("\"turn/end\"") === true && Number(frame.id) > lastSeq
      )
      const rest = after.slice(before)
      assert.strictEqual(deltasOf(rest).join(""), "a small reply")
      const more = (yield* persistence.read("slow" as SessionId)).events.slice(stored.length)
      assert.deepStrictEqual(rest.filter(isDurable).map((frame) => Number(frame.id)), more.map((event) => event.seq))
    }).pipe(Effect.scoped))
})
