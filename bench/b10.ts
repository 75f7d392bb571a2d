/**
 * B10 (SPEC §10b): one HTTP follow-up → turn → SSE `turn/end`, with a scripted model that answers
 * at once: `POST /sessions/:id/messages` on a keep-alive connection, timed until the session's
 * event stream (open on another connection) delivers the turn's `turn/end`; p50 and p99 over the
 * iterations. The reference, in the same run: a raw `node:http` request/response round trip (a
 * POST answered 202 once its body is read, by the same client code) plus an in-process turn
 * (`agent.followup` + `whenIdle` on a memory runtime with the same model). Target ≤ 3× the
 * reference.
 */
import { Effect, Layer } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { AgentRegistry, AgentRuntime, Message, SessionPersistence } from "../src/index.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, settle, stat } from "./harness.js"
import { connect, deltaModel, serve } from "./http.js"

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

/** Ours: the follow-up over HTTP, the turn/end through SSE. */
const measureOurs = async (iterations: number, warmup: number) => {
  const served = await serve(deltaModel(1), 16)
  await Effect.runPromise(served.gateway.create("b10", { options: route }).pipe(Effect.orDie))
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
  const events = await connect(served.port, "/sessions/b10/events", ["\"turn/end\""], agent)
  const samples: Array<number> = []
  try {
    for (let i = 1; i <= warmup + iterations; i++) {
      if (i % 50 === 0) await settle()
      const start = now()
      const status = await post(served.port, "/sessions/b10/messages", agent)
      if (status !== 202) throw new Error(`B10: POST answered ${status}`)
      await events.until("\"turn/end\"", i)
      if (i > warmup) samples.push(now() - start)
    }
  } finally {
    events.close()
    agent.destroy()
    await served.close()
  }
  return samples
}

/** The raw round trip: the same client, a server that reads the body and answers 202. */
const measureRoundTrip = async (iterations: number, warmup: number) => {
  const server = http.createServer((request, response) => {
    request.resume()
    request.on("end", () => {
      response.writeHead(202, { "content-type": "application/json" })
      response.end("{\"messageId\":\"m\",\"duplicate\":false}")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as AddressInfo).port
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
  const samples: Array<number> = []
  for (let i = 1; i <= warmup + iterations; i++) {
    if (i % 50 === 0) await settle()
    const start = now()
    await post(port, "/raw", agent)
    if (i > warmup) samples.push(now() - start)
  }
  agent.destroy()
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return samples
}

/** The in-process turn: follow-up and wait for idle on a memory runtime with the same model. */
const measureTurn = (iterations: number, warmup: number) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const context = yield* Layer.build(AgentRuntime.layerMemory({ storage }).pipe(Layer.provide(deltaModel(1))))
    const registry = yield* Effect.provide(AgentRegistry.AgentRegistry, context)
    const { agent } = yield* registry.create({ sessionId: "b10-turn", options: route })
    const samples: Array<number> = []
    for (let i = 1; i <= warmup + iterations; i++) {
      if (i % 50 === 0) yield* Effect.promise(settle)
      const start = now()
      yield* agent.followup(Message.user("go"))
      yield* agent.whenIdle
      if (i > warmup) samples.push(now() - start)
    }
    return samples
  })).pipe(Effect.orDie))

export const scenario: Scenario = {
  id: "B10",
  title: "HTTP follow-up → turn → SSE turn/end, scripted instant model, p50/p99",
  run: async ({ quick, log }) => {
    const iterations = quick ? 100 : 500
    const warmup = quick ? 20 : 50
    const ours = await measureOurs(iterations, warmup)
    const roundTrip = await measureRoundTrip(iterations, warmup)
    const turn = await measureTurn(iterations, warmup)
    const reference = roundTrip.map((ms, i) => ms + turn[i]!)
    const p50 = percentile(ours, 0.5)
    const p99 = percentile(ours, 0.99)
    const ref50 = percentile(reference, 0.5)
    const ref99 = percentile(reference, 0.99)
    log(`B10: ours p50 ${fmt(p50)} ms p99 ${fmt(p99)} ms; round trip p50 ${fmt(percentile(roundTrip, 0.5))} ms, ` +
      `turn p50 ${fmt(percentile(turn, 0.5))} ms`)
    const row: Row = {
      id: "B10",
      scenario: `HTTP follow-up → turn → SSE turn/end, ${fmt(iterations)} sequential, memory`,
      ours: stat(ours),
      unit: "ms",
      raw: { label: "node:http round trip + in-process turn", value: stat(reference) },
      costRatio: stat([p50 / ref50]),
      notes: `p50 ${fmt(p50)} ms, p99 ${fmt(p99)} ms; reference p50 ${fmt(ref50)} ms, p99 ${fmt(ref99)} ms ` +
        `(round trip p50 ${fmt(percentile(roundTrip, 0.5))} ms + turn p50 ${fmt(percentile(turn, 0.5))} ms); ` +
        `p99 ratio ${fmt(p99 / ref99)}×`,
      peer: `target ≤ 3× → p50 ${fmt(p50 / ref50)}×, p99 ${fmt(p99 / ref99)}×`,
      extra: { p50, p99, referenceP50: ref50, referenceP99: ref99 }
    }
    return [row]
  }
}
