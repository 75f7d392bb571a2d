/**
 * B10 (SPEC §10b): one HTTP follow-up → turn → SSE `turn/end`, with a scripted model that answers
 * at once: `POST /sessions/:id/messages` on a keep-alive connection, timed until the session's
 * event stream (open on another connection) delivers the turn's `turn/end`; p50 and p99.
 *
 * The reference, measured in the same rounds, one sample of each per iteration (interleaved): a raw
 * `node:http` request/response round trip (the same client code POSTs the same body to a server that
 * reads it and answers 202 with a body of the same size) plus an in-process turn of the same kind of
 * agent (`followup` + `whenIdle` through `AgentHost.use`, on an unwatched session of the same
 * server). Target ≤ 3× the reference at p50 and p99. Effect operations per iteration are counted on
 * a separate server after the timed rounds.
 */
import { Effect, Exit, Layer, Scope } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { AgentRegistry, AgentRuntime, Message, SessionPersistence } from "../src/index.js"
import * as harness from "./harness.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, settle, stat } from "./harness.js"
import { connect, deltaModel, OperationCounter, serve } from "./http.js"


const route = { provider: "bench", model: "immediate" }
const body = JSON.stringify({ text: "go" })

/** POSTs `body` on the keep-alive agent and resolves with the status once the response is read. */
const post = (port: number, path: string, agent: http.Agent): Promise<number> =>
  new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) }
      },
      (response) => {
        response.resume()
        response.on("end", () => resolve(response.statusCode ?? 0))
      }
    )
    request.on("error", reject)
    request.end(body)
  })

const percentile = (samples: ReadonlyArray<number>, p: number) => {
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * p) - 1)]!
}

/** Ours: the follow-up over HTTP, its `turn/end` through SSE; and the same agent kind's turn in process. */
const setUpOurs = async (counter?: OperationCounter) => {
  const served = await serve(deltaModel(1), 16, counter)
  const run = <A, E>(effect: Effect.Effect<A, E>) =>
    Effect.runPromise((counter === undefined ? effect : counter.supervise(effect)).pipe(Effect.orDie))
  await run(served.gateway.create("b10", { options: route }))
  await run(served.gateway.create("b10-turn", { options: route }))
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
  const events = await connect(served.port, "/sessions/b10/events", ["\"turn/end\""], agent)
  let turns = 0
  const viaHttp = async () => {
    const start = now()
    const status = await post(served.port, "/sessions/b10/messages", agent)
    if (status !== 202) throw new Error(`B10: POST answered ${status}`)
    await events.until("\"turn/end\"", ++turns)
    return now() - start
  }
  const inProcess = async () => {
    const start = now()
    await run(served.host.use("b10-turn", (live) => Effect.zipRight(live.followup(Message.user("go")), live.whenIdle)))
    return now() - start
  }
  const close = async () => {
    events.close()
    agent.destroy()
    await served.close()
  }
  return { served, viaHttp, inProcess, close }
}

/** The raw round trip: the same client, a server that reads the body and answers 202. */
const setUpRoundTrip = async () => {
  const answer = JSON.stringify({ messageId: "00000000-0000-4000-8000-000000000000", duplicate: false })
  const server = http.createServer((request, response) => {
    request.resume()
    request.on("end", () => {
      response.writeHead(202, { "content-type": "application/json" })
      response.end(answer)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as AddressInfo).port
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
  const run = async () => {
    const start = now()
    await post(port, "/raw", agent)
    return now() - start
  }
  const close = async () => {
    agent.destroy()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
  return { run, close }
}

/**
 * A turn of a bare registry agent (no `AgentHost`, no gateway) on a memory runtime with the same
 * model: what the reference would be with the cheapest agent (reported, not the ratio's base).
 */
const setUpBareTurn = async () => {
  const scope = Effect.runSync(Scope.make())
  const agent = await Effect.runPromise(Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const runtime = AgentRuntime.layerMemory({ storage }).pipe(Layer.provide(deltaModel(1)))
    const context = yield* Layer.buildWithScope(runtime, scope)
    const registry = yield* Effect.provide(AgentRegistry.AgentRegistry, context)
    return (yield* registry.create({ sessionId: "b10-bare", options: route })).agent
  }).pipe(Scope.extend(scope), Effect.orDie))
  const run = async () => {
    const start = now()
    await Effect.runPromise(Effect.zipRight(agent.followup(Message.user("go")), agent.whenIdle).pipe(Effect.orDie))
    return now() - start
  }
  return { run, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

/** Effect operations per iteration, ours over HTTP and the in-process turn (after a warm-up). */
const countOperations = async () => {
  const counter = new OperationCounter()
  const ours = await setUpOurs(counter)
  try {
    const per = async (run: () => Promise<number>) => {
      for (let i = 0; i < 20; i++) await run()
      const before = counter.count
      for (let i = 0; i < 20; i++) await run()
      return (counter.count - before) / 20
    }
    return { viaHttp: await per(ours.viaHttp), inProcess: await per(ours.inProcess) }
  } finally {
    await ours.close()
  }
}

interface Round {
  readonly ours: ReadonlyArray<number>
  readonly roundTrip: ReadonlyArray<number>
  readonly turn: ReadonlyArray<number>
  readonly bareTurn: ReadonlyArray<number>
  readonly reference: ReadonlyArray<number>
}

const measureRound = async (
  ours: Awaited<ReturnType<typeof setUpOurs>>,
  raw: Awaited<ReturnType<typeof setUpRoundTrip>>,
  bare: Awaited<ReturnType<typeof setUpBareTurn>>,
  iterations: number
): Promise<Round> => {
  const samples = {
    ours: [] as Array<number>,
    roundTrip: [] as Array<number>,
    turn: [] as Array<number>,
    bareTurn: [] as Array<number>
  }
  for (let i = 0; i < iterations; i++) {
    if (i % 25 === 0) await settle()
    samples.ours.push(await ours.viaHttp())
    samples.roundTrip.push(await raw.run())
    samples.turn.push(await ours.inProcess())
    samples.bareTurn.push(await bare.run())
  }
  return { ...samples, reference: samples.roundTrip.map((ms, i) => ms + samples.turn[i]!) }
}

export const scenario: Scenario = {
  id: "B10",
  title: "HTTP follow-up → turn → SSE turn/end, scripted instant model, p50/p99",
  run: async ({ quick, log }) => {
    const iterations = quick ? 100 : 200
    const roundCount = quick ? 3 : 5
    const ours = await setUpOurs()
    const raw = await setUpRoundTrip()
    const bare = await setUpBareTurn()
    const rounds: Array<Round> = []
    try {
      await measureRound(ours, raw, bare, quick ? 50 : 100) // warm-up
      for (let r = 0; r < roundCount; r++) {
        await settle()
        harness.collect()
        const round = await measureRound(ours, raw, bare, iterations)
        rounds.push(round)
        const at = (samples: ReadonlyArray<number>, q: number) => fmt(percentile(samples, q))
        log(
          `B10 round ${r}: ours p50 ${at(round.ours, 0.5)} ms p99 ${at(round.ours, 0.99)} ms; reference p50 ` +
            `${at(round.reference, 0.5)} ms p99 ${at(round.reference, 0.99)} ms (round trip p50 ` +
            `${at(round.roundTrip, 0.5)} ms, turn p50 ${at(round.turn, 0.5)} ms, bare turn ` +
            `${at(round.bareTurn, 0.5)} ms)`
        )
      }
    } finally {
      await ours.close()
      await raw.close()
      await bare.close()
    }
    const operations = await countOperations()
    log(
      `B10 Effect operations: ${fmt(operations.viaHttp)} per HTTP iteration, ${fmt(operations.inProcess)} per ` +
        "in-process turn"
    )
    const p = (pick: (round: Round) => ReadonlyArray<number>, q: number) =>
      stat(rounds.map((round) => percentile(pick(round), q)))
    const ratio = (q: number) =>
      stat(rounds.map((round) => percentile(round.ours, q) / percentile(round.reference, q)))
    const p50 = ratio(0.5)
    const bareRatio = stat(rounds.map((round) =>
      percentile(round.ours, 0.5) / percentile(round.roundTrip.map((ms, i) => ms + round.bareTurn[i]!), 0.5)
    ))
    const p99 = ratio(0.99)
    const row: Row = {
      id: "B10",
      scenario:
        `HTTP follow-up → turn → SSE turn/end, ${roundCount} rounds × ${fmt(iterations)} sequential, memory (p50)`,
      ours: p((round) => round.ours, 0.5),
      unit: "ms",
      raw: { label: "node:http round trip + in-process turn (p50)", value: p((round) => round.reference, 0.5) },
      costRatio: p50,
      notes: `p99 ${fmt(p((round) => round.ours, 0.99).median)} ms vs reference ${
        fmt(p((round) => round.reference, 0.99).median)
      } ms: ${fmt(p99.median)}× ±${(p99.spread * 100).toFixed(0)}%; round trip p50 ${
        fmt(p((round) => round.roundTrip, 0.5).median)
      } ms, in-process turn p50 ${fmt(p((round) => round.turn, 0.5).median)} ms (a bare registry agent's turn ${
        fmt(p((round) => round.bareTurn, 0.5).median)
      } ms: p50 ${fmt(bareRatio.median)}× that reference); ${fmt(operations.viaHttp)} ` +
        `Effect operations per HTTP iteration (in-process turn: ${fmt(operations.inProcess)})`,
      peer: `target ≤ 3× → p50 ${fmt(p50.median)}×, p99 ${fmt(p99.median)}×`,
      extra: {
        p50: p((round) => round.ours, 0.5).median,
        p99: p((round) => round.ours, 0.99).median,
        referenceP50: p((round) => round.reference, 0.5).median,
        referenceP99: p((round) => round.reference, 0.99).median,
        p99Ratio: p99.median,
        operationsPerIteration: operations.viaHttp,
        operationsPerTurn: operations.inProcess,
        bareTurnP50: p((round) => round.bareTurn, 0.5).median,
        p50RatioToBareTurn: bareRatio.median
      }
    }
    return [row]
  }
}

