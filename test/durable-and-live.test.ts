/**
 * The gateway's event stream over a host (HTTP-00, EVS-02: `durableAndLive`) and the SSE body it
 * runs into (HTTP-01: `sseBody`): live events of an agent that has no feed of ours, the order of
 * frames in the body, and what a stalled client costs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Option, Stream } from "effect"
import type { Agent } from "../src/Agent.js"
import { AgentEvent } from "../src/AgentEvent.js"
import { durableAndLive } from "../src/internal/durableAndLive.js"
import type { DurableSink } from "../src/internal/hostEvents.js"
import * as sseBody from "../src/internal/sseBody.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import type { StreamEvent } from "../src/SessionGateway.js"
import { makeStubAgent } from "./fixtures/stubAgent.js"

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
      const body = yield* sseBody.make
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

  it.scoped("HTTP-01 a stalled client: live frames past the limit are dropped, durable frames wait for room and none is lost", () =>
    Effect.gen(function*() {
      const stub = yield* makeStubAgent("body-stalled")
      const event = yield* stub.session.append({ type: "test/note", data: 1 })
      const body = yield* sseBody.make
      const sink = body.sink(() => Effect.succeed("event: error\ndata: {}\n\n"))
      // nobody reads: 100 live frames of 64 KB, more than LIVE_LIMIT (4 MB) of them
      const big = "x".repeat(64 * 1024)
      for (let i = 0; i < 100; i++) sink.live(delta(stub, `${i} ${big}`))
      // more durable pieces than the queue holds: the writer waits for room
      const durables = 2 * sseBody.CAPACITY
      const writer = yield* Effect.fork(Effect.gen(function*() {
        for (let i = 0; i < durables; i++) yield* sink.durable(Chunk.of(durableOf(event)))
        yield* sink.end(Exit.void)
      }))
      const frames = yield* framesOf(body)
      yield* Fiber.join(writer)
      const live = frames.filter((frame) => frame.includes("event: live"))
      assert.strictEqual(frames.filter((frame) => frame.includes("event: durable")).length, durables)
      assert.isBelow(live.length, 100)
      assert.isAtLeast(live.length * big.length, sseBody.LIVE_LIMIT)
      // the ones kept are the first ones, in order
      assert.deepStrictEqual(live.map((frame) => Number(JSON.parse(frame.split("data: ")[1]!).text.split(" ")[0])), live.map((_, i) => i))
    }))
})
