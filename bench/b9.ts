/**
 * B9 (SPEC §10b): 1,000 agents streaming model deltas (50 per turn) to SSE subscribers through the
 * HTTP API on loopback — each agent's `GET /sessions/:id/events` open on its own connection, one
 * follow-up per agent (sent in process: B10 measures the HTTP send), timed until every connection
 * has read its 50 deltas and its turn's `turn/end`. The cost per delta (elapsed ÷ 50,000) is
 * compared, in the same run, with a raw `PubSub` publish → subscriber → `node:http` SSE write loop
 * delivering 50 delta frames and an end frame to as many connections, read by the same client code.
 * Target ≤ 3× the raw loop.
 */
import { Chunk, Effect, PubSub, Queue } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as harness from "./harness.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, ratios, settle, stat } from "./harness.js"
import { connect, deltaModel, serve } from "./http.js"
import type { Counter } from "./http.js"

const DELTAS = 50
const route = { provider: "bench", model: "deltas" }

/** Our server: `agents` sessions, each watched by one SSE connection. */
const setUpOurs = async (agents: number) => {
  const served = await serve(deltaModel(DELTAS), agents * 2)
  const ids = Array.from({ length: agents }, (_, i) => `b9-${i}`)
  await Effect.runPromise(
    Effect.forEach(ids, (id) => served.gateway.create(id, { options: route }), { concurrency: 64, discard: true })
      .pipe(Effect.orDie)
  )
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const counters: Array<Counter> = []
  for (const id of ids) {
    counters.push(await connect(served.port, `/sessions/${id}/events`, ["\"ModelDelta\"", "\"turn/end\""], agent))
  }
  let round = 0
  const run = async () => {
    round++
    const start = now()
    await Effect.runPromise(
      Effect.forEach(ids, (id) => served.gateway.send(id, { text: "go" }), { concurrency: "unbounded", discard: true })
        .pipe(Effect.orDie)
    )
    await Promise.all(counters.map((counter) => counter.until("\"ModelDelta\"", round * DELTAS)))
    await Promise.all(counters.map((counter) => counter.until("\"turn/end\"", round)))
    return now() - start
  }
  const close = async () => {
    for (const counter of counters) counter.close()
    agent.destroy()
    await served.close()
  }
  return { run, close }
}

/** The raw reference: a PubSub per connection, a subscriber fiber writing SSE frames with `res.write`. */
const setUpRaw = async (agents: number) => {
  const hubs = Array.from({ length: agents }, () => Effect.runSync(PubSub.unbounded<object>()))
  const server = http.createServer((request, response) => {
    const hub = hubs[Number(request.url!.slice("/raw/".length))]!
    response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
    response.write("retry: 1000\n\n")
    const writer = Effect.scoped(Effect.gen(function*() {
      const subscription = yield* PubSub.subscribe(hub)
      while (true) {
        const items = yield* Queue.takeAll(subscription).pipe(
          Effect.flatMap((chunk) => (Chunk.isEmpty(chunk) ? Effect.map(Queue.take(subscription), Chunk.of) : Effect.succeed(chunk)))
        )
        for (const item of items) response.write(`event: live\ndata: ${JSON.stringify(item)}\n\n`)
      }
    }))
    const fiber = Effect.runFork(writer)
    response.on("close", () => Effect.runFork(fiber.interruptAsFork(fiber.id())))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as AddressInfo).port
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const counters: Array<Counter> = []
  for (let i = 0; i < agents; i++) counters.push(await connect(port, `/raw/${i}`, ["\"ModelDelta\"", "\"turn/end\""], agent))
  // subscribed once a first message arrives on every connection
  await Effect.runPromise(Effect.forEach(hubs, (hub) => PubSub.publish(hub, { _tag: "Ready" }), { discard: true }))
  let round = 0
  const run = async () => {
    round++
    const start = now()
    await Effect.runPromise(
      Effect.forEach(hubs, (hub, i) =>
        Effect.gen(function*() {
          for (let d = 0; d < DELTAS; d++) {
            yield* PubSub.publish(hub, { _tag: "ModelDelta", agent: `b9-${i}`, turn: round, step: 1, kind: "text", text: `t${d % 10} ` })
          }
          yield* PubSub.publish(hub, { seq: round, type: "turn/end", data: { turn: round } })
        }), { concurrency: "unbounded", discard: true })
    )
    await Promise.all(counters.map((counter) => counter.until("\"ModelDelta\"", round * DELTAS)))
    await Promise.all(counters.map((counter) => counter.until("\"turn/end\"", round)))
    return now() - start
  }
  const close = async () => {
    for (const counter of counters) counter.close()
    agent.destroy()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
  return { run, close }
}

export const scenario: Scenario = {
  id: "B9",
  title: "1,000 agents streaming 50 deltas per turn to SSE subscribers through the HTTP API (loopback)",
  run: async ({ quick, log }) => {
    const agents = quick ? 200 : 1000
    const rounds = quick ? 2 : 5
    const ours = await setUpOurs(agents)
    const raw = await setUpRaw(agents)
    const perDelta = (ms: number) => (ms * 1000) / (agents * DELTAS)
    try {
      // warm-up
      await ours.run()
      await raw.run()
      const oursMs: Array<number> = []
      const rawMs: Array<number> = []
      for (let r = 0; r < rounds; r++) {
        await settle()
        harness.collect()
        oursMs.push(await ours.run())
        rawMs.push(await raw.run())
        log(`B9 round ${r}: ours ${fmt(oursMs[r]!)} ms (${fmt(perDelta(oursMs[r]!))} µs/delta), raw ${fmt(rawMs[r]!)} ms`)
      }
      const ratio = ratios(oursMs, rawMs)
      const row: Row = {
        id: "B9",
        scenario: `${fmt(agents)} agents × ${DELTAS} deltas per turn to SSE subscribers, HTTP API on loopback, memory`,
        ours: stat(oursMs.map(perDelta)),
        unit: "µs/delta",
        raw: { label: "PubSub + node:http SSE write loop", value: stat(rawMs.map(perDelta)) },
        costRatio: ratio,
        notes: `a round (one turn per agent, every delta and turn/end read by its client) ${fmt(stat(oursMs).median)} ms, ` +
          `raw ${fmt(stat(rawMs).median)} ms; ours also runs the turns and streams their durable events`,
        peer: `target ≤ 3× raw → ${fmt(ratio.median)}×`,
        extra: { agents, roundMs: stat(oursMs).median, rawRoundMs: stat(rawMs).median }
      }
      return [row]
    } finally {
      await ours.close()
      await raw.close()
    }
  }
}
