/**
 * The gateway's event stream over a host (HTTP-00, EVS-02: `durableAndLive`) and the SSE body it
 * runs into (HTTP-01: `sseBody`): live events of an agent that has no feed of ours, the order of
 * frames in the body, and what a stalled client costs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Option, Stream } from "effect"
import type { Agent } from "../src/Agent.js"
import { AgentEvent } from "../src/AgentEvent.js"
import { durableAndLive, eventsInto } from "../src/internal/gateway/durableAndLive.js"
import type { DurableSink } from "../src/internal/host/events.js"
import * as sseBody from "../src/internal/http/sseBody.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import type { StreamEvent } from "../src/SessionGateway.js"
import { makeStubAgent } from "./fixtures/stubAgent.js"
import { allSuspended, eventually } from "./fixtures/waiting.js"

const decoder = new TextDecoder()

/** The frames of a body, read until its end. */
const framesOf = (body: sseBody.Body) =>
  Effect.map(Stream.runCollect(body.bytes), (chunks) => {
    const text = Chunk.toReadonlyArray(chunks).map((bytes) => decoder.decode(bytes)).join("")
    return text.split("\n\n").filter((frame) => frame.length > 0)
  })

const delta = (agent: Agent, text: string): StreamEvent => ({
  _tag: "Live",
  event: { _tag: "ModelDelta", agent: agent.id, turn: 1, step: 1, kind: "text", text }
})

const durableOf = (event: SessionEvent): StreamEvent => ({ _tag: "Durable", event })

describe("durableAndLive and the SSE body", () => {
  it.scoped("EVS-02 HTTP-00 the live events of an agent from a user's factory (no feed of ours) are read from its events", () =>
    Effect.gen(function*() {
      const stub = yield* makeStubAgent("factory-made")
      const stored = yield* stub.session.append({ type: "test/note", data: 1 })
      const delivered = yield* Deferred.make<void>()
      const deltas = ["a", "b", "c"].map((text) =>
        AgentEvent.ModelDelta({ agent: stub.id, turn: 1, step: 1, kind: "text", text })
      )
      const agent: Agent = {
        ...stub,
        events: Stream.concat(Stream.fromIterable(deltas), Stream.execute(Deferred.succeed(delivered, undefined)))
      }
      // the durable event comes once the live ones were handed over, then the stream ends
      const reader = (sink: DurableSink) => Effect.zipRight(Deferred.await(delivered), sink.durable(Chunk.of(stored)))
      const out = yield* Stream.runCollect(durableAndLive(reader, Effect.succeed(Option.some(agent)), "test"))
      const items = Chunk.toReadonlyArray(out)
      assert.deepStrictEqual(
        items.map((item) => item._tag === "Live" && item.event._tag === "ModelDelta" ? item.event.text : item._tag),
        ["a", "b", "c", "Durable"]
      )
    }))

  it.scoped("HTTP-01 the SSE body writes frames in the order they came: live frames join the waiting piece, others start their own", () =>
    Effect.gen(function*() {
      const stub = yield* makeStubAgent("body-order")
      const first = yield* stub.session.append({ type: "test/note", data: 1 })
      const second = yield* stub.session.append({ type: "test/note", data: 2 })
      const body = yield* sseBody.make(sseBody.DEFAULT_MAX_BYTES)
      const sink = body.sink(() => Effect.succeed("event: error\ndata: {}\n\n"))
      sink.live(delta(stub, "a"))
      sink.live(delta(stub, "b"))
      yield* sink.durable(Chunk.of(durableOf(first)))
      sink.live(delta(stub, "c"))
      yield* body.offer(": heartbeat\n\n")
      sink.live(delta(stub, "d"))
      yield* sink.durable(Chunk.of(durableOf(second)))
      yield* sink.end(Exit.void)
      const frames = yield* framesOf(body)
      const names = frames.map((frame) =>
        frame.startsWith(":") ? "heartbeat" : frame.includes("event: durable") ? `durable ${frame.split("\n")[0]}` : JSON.parse(frame.split("data: ")[1]!).text
      )
      assert.deepStrictEqual(names, ["a", "b", "durable id: 0", "c", "heartbeat", "d", "durable id: 1"])
    }))

  it.scoped("SEC-01 a stalled client: the body holds at most its limit; live frames past it are dropped, durable frames wait for room and none is lost", () =>
    Effect.gen(function*() {
      const stub = yield* makeStubAgent("body-stalled")
      const limit = 64 * 1024
      const big = "x".repeat(4 * 1024)
      const events: Array<SessionEvent> = []
      for (let i = 0; i < 50; i++) events.push(yield* stub.session.append({ type: "test/note", data: `${i} ${big}` }))
      const body = yield* sseBody.make(limit)
      const sink = body.sink(() => Effect.succeed("event: error\ndata: {}\n\n"))
      // nobody reads: 100 live frames of 4 KB, six times the limit
      for (let i = 0; i < 100; i++) sink.live(delta(stub, `${i} ${big}`))
      // the durable events do not fit: the writer waits for room, and live frames are dropped meanwhile
      const writer = yield* Effect.fork(Effect.gen(function*() {
        for (const event of events) yield* sink.durable(Chunk.of(durableOf(event)))
        yield* sink.end(Exit.void)
      }))
      yield* eventually(allSuspended([writer]))
      sink.live(delta(stub, "while the writer waits"))
      yield* body.heartbeat
      const frames = yield* framesOf(body)
      yield* Fiber.join(writer)
      const live = frames.filter((frame) => frame.includes("event: live"))
      const durable = frames.filter((frame) => frame.includes("event: durable"))
      assert.deepStrictEqual(durable.map((frame) => frame.split("\n")[0]), events.map((event) => `id: ${event.seq}`))
      assert.isFalse(frames.some((frame) => frame.startsWith(":")), "no heartbeat while the client is behind")
      assert.isAbove(live.length, 0)
      assert.isBelow(live.length, 100)
      assert.isAtMost(live.reduce((size, frame) => size + frame.length + 2, 0), limit)
      // the ones kept are the first ones, in order
      assert.deepStrictEqual(
        live.map((frame) => Number(JSON.parse(frame.split("data: ")[1]!).text.split(" ")[0])),
        live.map((_, i) => i)
      )
    }))

  it.scoped("SEC-01 a write the server has not flushed counts until the next pull; a frame larger than the limit goes alone", () =>
    Effect.gen(function*() {
      const stub = yield* makeStubAgent("body-in-flight")
      const limit = 1024
      const large = yield* stub.session.append({ type: "test/note", data: "y".repeat(4 * limit) })
      const small = yield* stub.session.append({ type: "test/note", data: 1 })
      const body = yield* sseBody.make(limit)
      const sink = body.sink(() => Effect.succeed("event: error\ndata: {}\n\n"))
      const pull = yield* Stream.toPull(body.bytes)
      // nothing is held: the large frame goes alone, over the limit
      assert.isTrue(sink.tryDurable(Chunk.of(durableOf(large))))
      const first = yield* pull
      assert.include(decoder.decode(Chunk.unsafeHead(first)), `id: ${large.seq}\n`)
      // handed to the server and not flushed yet: no room for anything until the server pulls again
      sink.live(delta(stub, "dropped"))
      assert.isFalse(sink.tryDurable(Chunk.of(durableOf(small))))
      const writer = yield* Effect.fork(sink.durable(Chunk.of(durableOf(small))))
      yield* eventually(allSuspended([writer]))
      // the next pull says the write is out: the waiting writer goes on, and its frame is the next one
      const second = yield* pull
      yield* Fiber.join(writer)
      const text = decoder.decode(Chunk.unsafeHead(second))
      assert.include(text, `id: ${small.seq}\n`)
      assert.notInclude(text, "dropped")
      sink.live(delta(stub, "kept"))
      yield* sink.end(Exit.void)
      assert.include(decoder.decode(Chunk.unsafeHead(yield* pull)), "kept")
    }))

  it.scoped("SEC-01 a gateway's own event stream into the body: live events keep their place between durable ones, and are dropped, not waited for, when the client is behind", () =>
    Effect.gen(function*() {
      const stub = yield* makeStubAgent("gateway-stream")
      const limit = 8 * 1024
      const small = yield* stub.session.append({ type: "test/note", data: 0 })
      const large = yield* stub.session.append({ type: "test/note", data: "z".repeat(limit) })
      const last = yield* stub.session.append({ type: "test/note", data: 2 })
      const handled = yield* Effect.all([Deferred.make<void>(), Deferred.make<void>()])
      // a gateway without the host's fast path: its stream is run into the body, a chunk at a time
      const gateway = {
        eventsFrom: () =>
          Stream.fromIterable([delta(stub, "first"), durableOf(small), delta(stub, "second")]).pipe(
            Stream.concat(Stream.execute(Deferred.succeed(handled[0], undefined))),
            Stream.concat(Stream.make(durableOf(large))),
            Stream.concat(Stream.make(delta(stub, "dropped"))),
            Stream.concat(Stream.execute(Deferred.succeed(handled[1], undefined))),
            Stream.concat(Stream.make(durableOf(last)))
          )
      }
      const body = yield* sseBody.make(limit)
      yield* eventsInto(gateway)("gateway-stream", 0, body.sink(() => Effect.succeed("event: error\ndata: {}\n\n")))
      const pull = yield* Stream.toPull(body.bytes)
      const read = Effect.map(pull, (chunk) => decoder.decode(Chunk.unsafeHead(chunk)))
      yield* Deferred.await(handled[0])
      const first = yield* read
      // the large event waits until that write is out; then it is the write the client has not read
      const second = yield* read
      // the live event after it comes while the client is behind: dropped, and the stream goes on
      yield* Deferred.await(handled[1])
      const rest = yield* Effect.map(Stream.runCollect(Stream.fromPull(Effect.succeed(pull))), (chunks) =>
        Chunk.toReadonlyArray(chunks).map((bytes) => decoder.decode(bytes)).join(""))
      const names = (first + second + rest).split("\n\n").filter((frame) => frame.length > 0).map((frame) =>
        frame.includes("event: durable") ? frame.split("\n")[0] : JSON.parse(frame.split("data: ")[1]!).text
      )
      assert.deepStrictEqual(names, ["first", `id: ${small.seq}`, "second", `id: ${large.seq}`, `id: ${last.seq}`])
    }))
})
