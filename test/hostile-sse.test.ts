/**
 * SEC-10 (its stalled-reader case, SEC-01): `effect-agent serve` in a child process, 80 event-stream
 * readers on real sockets that read their first frame and then nothing, and a session producing
 * about 21 MB of frames. The server's resident memory is read from `/proc` and compared with the same
 * work without them; afterwards one of the stalled readers reads on and gets every durable event once
 * and in order.
 *
 * The baseline ("no stalled reader") is the same work on another session with the one reading client
 * the test waits with; that session is disposed before the measured run, so its log does not count.
 *
 * `it.live`: a real process on the real clock.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import { tempDirectory } from "./fixtures/backends.js"
import type { Frame } from "./fixtures/httpServer.js"
import { openEvents, request } from "./fixtures/httpServer.js"
import { openRaw } from "./fixtures/rawSse.js"
import { memoryOf, startServe } from "./fixtures/serveProcess.js"

/** Stalled readers. */
const READERS = 80
/** Messages of 1,000,000 characters: each makes about 3 MB of frames (the message, two deltas, the echo). */
const MESSAGES = 7
const SIZE = 1_000_000
/** What the stalled readers may add to the server's peak. */
const ALLOWANCE_MIB = 150

const isTurnEnd = (frame: Frame) => frame.event === "durable" && frame.data?.includes("\"turn/end\"") === true

/** Sends the messages (each 202; they queue as follow-ups) and waits with a reading client until every turn has ended. */
const produce = (url: string, id: string) =>
  Effect.scoped(Effect.gen(function*() {
    const events = yield* openEvents(`${url}/sessions/${id}/events?from=0`)
    for (let i = 0; i < MESSAGES; i++) {
      const sent = yield* request(`${url}/sessions/${id}/messages`, {
        method: "POST",
        body: { text: `${i} ${"x".repeat(SIZE)}`, id: `m${i}` }
      })
      assert.strictEqual(sent.status, 202)
    }
    let ended = 0
    yield* events.until((frame) => isTurnEnd(frame) && ++ended === MESSAGES)
  }))

const durableSeqs = (frames: ReadonlyArray<Frame>) =>
  frames.filter((frame) => frame.event === "durable").map((frame) => Number(frame.id))

describe.skipIf(!fs.existsSync("/proc/self/status"))("hostile SSE clients (SEC-10)", () => {
  it.live("SEC-10 SEC-01 80 stalled SSE readers of a session producing 21 MB keep the server's RSS under its peak without them plus 150 MB, and lose no durable event", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-hostile-sse-")
      const server = yield* startServe(directory)
      const pid = server.child.pid

      // the baseline: the same work, no stalled reader; the session is then disposed (its log stays stored)
      assert.strictEqual((yield* request(`${server.url}/sessions/quiet`, { method: "PUT", body: {} })).status, 201)
      yield* produce(server.url, "quiet")
      assert.strictEqual((yield* request(`${server.url}/sessions/quiet`, { method: "DELETE" })).status, 204)
      const baseline = yield* memoryOf(pid)

      // 80 readers that read their first frame (the stream is set up) and then nothing
      assert.strictEqual((yield* request(`${server.url}/sessions/loud`, { method: "PUT", body: {} })).status, 201)
      const stalled = yield* Effect.forEach(
        Array.from({ length: READERS }, () => "/sessions/loud/events?from=0"),
        (path) => openRaw(server.port, path),
        { concurrency: 8 }
      )
      yield* produce(server.url, "loud")
      const loaded = yield* memoryOf(pid)
      assert.isBelow(
        loaded.peak,
        baseline.peak + ALLOWANCE_MIB,
        `peak ${loaded.peak.toFixed(0)} MiB with ${READERS} stalled readers, ${baseline.peak.toFixed(0)} MiB without`
      )

      // nothing durable lost: a stalled reader reading on gets every event once and in order
      const info = (yield* request(`${server.url}/sessions/loud`)).body as { readonly eventCount: number }
      const last = String(info.eventCount - 1)
      const resumed = yield* stalled[0]!.readUntil((frame) => frame.event === "durable" && frame.id === last)
      assert.deepStrictEqual(durableSeqs(resumed), Array.from({ length: info.eventCount }, (_, seq) => seq))
      yield* server.child.kill("SIGKILL")
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)))
})
