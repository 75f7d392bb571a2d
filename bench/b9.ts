/**
 * B9 (SPEC §10b): 1,000 agents streaming model deltas (50 per turn) to SSE subscribers through the
 * HTTP API on loopback — each agent's `GET /sessions/:id/events` open on its own connection, one
 * follow-up per agent (sent in process: B10 measures the HTTP send), timed until every connection
 * has read its 50 deltas and its turn's `turn/end`. Per delta: the round's time ÷ (agents × 50).
 *
 * Measured in the same run, rounds interleaved:
 * - the same turns on as many agents of the same server that nobody watches (sent the same way,
 *   waited for with `whenIdle`): what the turns cost without any streaming;
 * - the raw reference: a `PubSub` per connection, published the same stream events a turn of ours
 *   delivers (its durable events, its status changes, its 50 deltas, captured from our server), a
 *   subscriber fiber per connection taking what waits and writing it as SSE frames (the same frame
 *   text as ours, one `write` per batch) on a `node:http` response, read by the same client code.
 *
 * Two ratios: end to end (ours ÷ raw; our side also runs the turns, the raw side only publishes),
 * and the streaming path alone ((ours − the unwatched turns) ÷ raw), which is what the target of
 * ≤ 3× the raw loop is about. Effect operations per delta are counted on a smaller server after the
 * timed rounds (they do not move with the machine's load).
 */
import { Chunk, Deferred, Effect, Fiber, PubSub, Queue, Stream } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { feedOf as agentFeedOf } from "../src/internal/agent/loop/agent.js"
import type { StreamEvent } from "../src/SessionGateway.js"
import * as harness from "./harness.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, ratios, settle, stat } from "./harness.js"
import { connect, deltaModel, OperationCounter, serve } from "./http.js"
import type { Counter, Served } from "./http.js"

const DELTAS = 50
const route = { provider: "bench", model: "deltas" }
const markers = ["\"ModelDelta\"", "\"turn/end\""]

const runAll = <A, E>(
  ids: ReadonlyArray<string>,
  f: (id: string) => Effect.Effect<A, E>,
  counter?: OperationCounter
) => {
  const all = Effect.forEach(ids, f, { concurrency: "unbounded", discard: true }).pipe(Effect.orDie)
  return Effect.runPromise(counter === undefined ? all : counter.supervise(all))
}

/** Waits until every connection has read `round` turns: their deltas, then their `turn/end`. */
const untilRead = async (counters: ReadonlyArray<Counter>, round: number) => {
  await Promise.all(counters.map((counter) => counter.until("\"ModelDelta\"", round * DELTAS)))
  await Promise.all(counters.map((counter) => counter.until("\"turn/end\"", round)))
}

/** Our server: `agents` sessions each watched by one SSE connection, as many that nobody watches. */
const setUpOurs = async (agents: number, counter?: OperationCounter) => {
  const served = await serve(deltaModel(DELTAS), agents * 2 + 1, counter)
  const watched = Array.from({ length: agents }, (_, i) => `b9-${i}`)
  const quiet = Array.from({ length: agents }, (_, i) => `b9-quiet-${i}`)
  await runAll([...watched, ...quiet], (id) => served.gateway.create(id, { options: route }), counter)
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const counters: Array<Counter> = []
  for (const id of watched) counters.push(await connect(served.port, `/sessions/${id}/events`, markers, agent))
  let round = 0
  /** One turn on every watched agent, until every connection read it. */
  const run = async () => {
    round++
    const start = now()
    await runAll(watched, (id) => served.gateway.send(id, { text: "go" }), counter)
    await untilRead(counters, round)
    return now() - start
  }
  /** One turn on every unwatched agent, until each is idle again. */
  const runQuiet = async () => {
    const start = now()
    await runAll(quiet, (id) => served.gateway.send(id, { text: "go" }), counter)
    await runAll(quiet, (id) => served.host.use(id, (live) => live.whenIdle), counter)
    return now() - start
  }
  const close = async () => {
    for (const counter of counters) counter.close()
    agent.destroy()
    await served.close()
  }
  return { served, run, runQuiet, close }
}

/** The stream events one turn of ours delivers to a watcher, in order (read in process). */
const captureTurn = async (served: Served): Promise<ReadonlyArray<StreamEvent>> => {
  const id = "b9-sample"
  await Effect.runPromise(served.gateway.create(id, { options: route }).pipe(Effect.orDie))
  const events = await Effect.runPromise(Effect.gen(function*() {
    // the turn's live events reach the reader once it follows the agent (one more watcher)
    const watched = yield* served.host.use(id, (agent) => Effect.succeed(agentFeedOf(agent)))
    const watchers = watched?.subscribers() ?? 0
    let ended = false
    let idle = false
    const reader = yield* served.gateway.eventsFrom(id, 0).pipe(
      // the durable and the live events of a turn may interleave in any order: up to the last of both
      Stream.takeUntil((item) => {
        if (item._tag === "Durable" && item.event.type === "turn/end") ended = true
        if (item._tag === "Live" && item.event._tag === "AgentStatusChanged" && item.event.status === "idle") idle = true
        return ended && idle
      }),
      Stream.runCollect,
      Effect.fork
    )
    while ((watched?.subscribers() ?? 0) <= watchers) yield* Effect.promise(settle)
    yield* served.gateway.send(id, { text: "go" })
    return Chunk.toReadonlyArray(yield* Fiber.join(reader))
  }).pipe(Effect.orDie))
  const deltas = events.filter((item) => item._tag === "Live" && item.event._tag === "ModelDelta").length
  if (deltas !== DELTAS) throw new Error(`B9: the sample turn delivered ${deltas} deltas, not ${DELTAS}`)
  return events
}

/** The SSE frame of a stream event, as our server writes it (HTTP-01). */
const rawFrame = (item: StreamEvent): string =>
  item._tag === "Durable"
    ? `id: ${item.event.seq}\nevent: durable\ndata: ${JSON.stringify(item.event)}\n\n`
    : `event: live\ndata: ${JSON.stringify(item.event)}\n\n`

/**
 * The raw reference: a PubSub per connection, a subscriber fiber that takes what waits and writes
 * it with one `res.write`; each round publishes `turn` on every PubSub, one event at a time.
 */
const setUpRaw = async (agents: number, turn: ReadonlyArray<StreamEvent>, counter?: OperationCounter) => {
  const hubs = Array.from({ length: agents }, () => Effect.runSync(PubSub.unbounded<StreamEvent>()))
  const subscribed = hubs.map(() => Effect.runSync(Deferred.make<void>()))
  const supervise = <A, E>(effect: Effect.Effect<A, E>) => (counter === undefined ? effect : counter.supervise(effect))
  const server = http.createServer((request, response) => {
    const index = Number(request.url!.slice("/raw/".length))
    const hub = hubs[index]!
    response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
    response.write("retry: 1000\n\n")
    const writer = Effect.scoped(Effect.gen(function*() {
      const subscription = yield* PubSub.subscribe(hub)
      yield* Deferred.succeed(subscribed[index]!, undefined)
      while (true) {
        const waiting = yield* Queue.takeAll(subscription)
        const items = Chunk.isEmpty(waiting) ? Chunk.of(yield* Queue.take(subscription)) : waiting
        let text = ""
        for (const item of items) text += rawFrame(item)
        response.write(text)
      }
    }))
    const fiber = Effect.runFork(supervise(writer))
    response.on("close", () => Effect.runFork(Fiber.interrupt(fiber)))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as AddressInfo).port
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const counters: Array<Counter> = []
  for (let i = 0; i < agents; i++) counters.push(await connect(port, `/raw/${i}`, markers, agent))
  await Effect.runPromise(Effect.forEach(subscribed, Deferred.await, { discard: true }))
  let round = 0
  const run = async () => {
    round++
    const start = now()
    await Effect.runPromise(supervise(Effect.forEach(hubs, (hub) =>
      Effect.gen(function*() {
        for (const item of turn) yield* PubSub.publish(hub, item)
      }), { concurrency: "unbounded", discard: true })))
    await untilRead(counters, round)
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

/** Effect operations per delta: ours watched, ours unwatched, raw (a smaller population, after a warm-up round). */
const countOperations = async (agents: number, turn: ReadonlyArray<StreamEvent>) => {
  const oursCounter = new OperationCounter()
  const ours = await setUpOurs(agents, oursCounter)
  const rawCounter = new OperationCounter()
  const raw = await setUpRaw(agents, turn, rawCounter)
  try {
    await ours.run()
    await ours.runQuiet()
    await raw.run()
    const perDelta = async (counter: OperationCounter, run: () => Promise<number>) => {
      const before = counter.count
      await run()
      return (counter.count - before) / (agents * DELTAS)
    }
    return {
      watched: await perDelta(oursCounter, ours.run),
      quiet: await perDelta(oursCounter, ours.runQuiet),
      raw: await perDelta(rawCounter, raw.run)
    }
  } finally {
    await ours.close()
    await raw.close()
  }
}

export const scenario: Scenario = {
  id: "B9",
  title: "1,000 agents streaming 50 deltas per turn to SSE subscribers through the HTTP API (loopback)",
  run: async ({ quick, log }) => {
    const agents = quick ? 200 : 1000
    const rounds = quick ? 3 : 5
    const ours = await setUpOurs(agents)
    const turn = await captureTurn(ours.served)
    const raw = await setUpRaw(agents, turn)
    const perDelta = (ms: number) => (ms * 1000) / (agents * DELTAS)
    const oursMs: Array<number> = []
    const quietMs: Array<number> = []
    const rawMs: Array<number> = []
    try {
      // warm-up
      await ours.run()
      await ours.runQuiet()
      await raw.run()
      for (let r = 0; r < rounds; r++) {
        await settle()
        harness.collect()
        oursMs.push(await ours.run())
        quietMs.push(await ours.runQuiet())
        rawMs.push(await raw.run())
        log(
          `B9 round ${r}: ours ${fmt(perDelta(oursMs[r]!))} µs/delta, the same turns unwatched ` +
            `${fmt(perDelta(quietMs[r]!))} µs/delta, raw ${fmt(perDelta(rawMs[r]!))} µs/delta`
        )
      }
    } finally {
      await ours.close()
      await raw.close()
    }
    const operations = await countOperations(quick ? 20 : 50, turn)
    log(
      `B9 Effect operations per delta: ours ${fmt(operations.watched)}, unwatched turns ${fmt(operations.quiet)}, ` +
        `raw ${fmt(operations.raw)}`
    )
    const streamingMs = oursMs.map((ms, i) => ms - quietMs[i]!)
    const frames = turn.length
    const scenario =
      `${fmt(agents)} agents × ${DELTAS} deltas per turn to SSE subscribers, HTTP API on loopback, memory`
    const rawLabel = `PubSub + node:http SSE write loop (the same ${frames} frames per turn)`
    const endToEnd = ratios(oursMs, rawMs)
    const streaming = ratios(streamingMs, rawMs)
    const rows: Array<Row> = [
      {
        id: "B9",
        scenario: `${scenario}: end to end (ours runs the turns too)`,
        ours: stat(oursMs.map(perDelta)),
        unit: "µs/delta",
        raw: { label: rawLabel, value: stat(rawMs.map(perDelta)) },
        costRatio: endToEnd,
        notes: `a round (one turn per agent, ${frames} frames each, every delta and turn/end read by its client) ` +
          `${fmt(stat(oursMs).median)} ms, raw ${fmt(stat(rawMs).median)} ms; ${fmt(operations.watched)} Effect ` +
          `operations per delta (raw: ${fmt(operations.raw)})`,
        peer: `end to end ${fmt(endToEnd.median)}× (the target is about the streaming path, next row)`,
        extra: { agents, rounds, operationsPerDelta: operations.watched, rawOperationsPerDelta: operations.raw }
      },
      {
        id: "B9",
        scenario: `${scenario}: the streaming path (ours − the same turns unwatched)`,
        ours: stat(streamingMs.map(perDelta)),
        unit: "µs/delta",
        raw: { label: rawLabel, value: stat(rawMs.map(perDelta)) },
        costRatio: streaming,
        notes: `the same turns unwatched ${fmt(stat(quietMs.map(perDelta)).median)} µs/delta; ` +
          `${fmt(operations.watched - operations.quiet)} Effect operations per delta ` +
          `(${fmt(operations.watched)} watched − ${fmt(operations.quiet)} unwatched; raw: ${fmt(operations.raw)})`,
        peer: `target ≤ 3× raw → ${fmt(streaming.median)}×`,
        extra: { streamingOperationsPerDelta: operations.watched - operations.quiet }
      }
    ]
    return rows
  }
}
