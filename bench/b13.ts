/**
 * B13 (issue 16): the model adapter's overhead per streamed delta, against a local Chat
 * Completions server on loopback, compared with a raw `HttpClient` SSE read of the same stream
 * (decode, split lines, `JSON.parse` each `data:` line). Target: ≤ 1.2× the raw read.
 *
 * How it keeps the comparison fair and the figure stable on a shared machine:
 * - both sides run on one `ManagedRuntime` (one `FetchHttpClient`, one adapter layer built once)
 *   against one in-process server that answers every request with the same precomputed bytes, so
 *   the server's share of a request is identical on both sides;
 * - both sides consume their stream the same way, a chunk at a time with a plain loop
 *   (`Stream.runForEachChunk`), so neither pays for a per-element consumer the other does not;
 * - a round is one sample of each side, in alternating order (ours first on even rounds), each
 *   after a young-generation GC (`--expose-gc`, which `bench/run.ts` provides) so that neither
 *   collects the other's garbage; a sample is a few requests in a row (5 of the bulk reply, 1 of
 *   the paced one), and its figure is the process's CPU time (user + system) per request, which a
 *   busy neighbour does not inflate the way it does wall time (wall time is kept in the notes);
 * - the ratio is the median of the per-round ratios over many rounds (61 for the bulk reply: its
 *   per-round ratios spread ±15 % on a loaded machine), with the interquartile range beside the
 *   half-range spread.
 *
 * Two server behaviours: the whole reply in one write (a few large network reads, the per-element
 * cost), and one write per SSE event spaced by `setImmediate` (about one event per read, as a real
 * provider streams: the per-read cost of the adapter's stream machinery).
 */
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Effect, Layer, ManagedRuntime, Redacted, Stream } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import type { SessionId } from "../src/Message.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { Row, Scenario, Stat } from "./harness.js"
import { countOperations, fmt, hasGc, now, ratios, settle, stat } from "./harness.js"

const DELTAS = 2000

/** The SSE events: a role chunk, DELTAS text deltas of a few characters, a finish, usage, [DONE]. */
const events: ReadonlyArray<Buffer> = (() => {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "b13", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
  const pieces = [chunk({ role: "assistant", content: "" })]
  for (let i = 0; i < DELTAS; i++) pieces.push(chunk({ content: `tok${i % 10} ` }))
  pieces.push(chunk({}, "stop"))
  const usage = { prompt_tokens: 10, completion_tokens: DELTAS }
  pieces.push(`data: ${JSON.stringify({ id: "b13", choices: [], usage })}\n\n`)
  pieces.push("data: [DONE]\n\n")
  return pieces.map((piece) => Buffer.from(piece))
})()
const whole = Buffer.concat(events)

type Mode = "bulk" | "paced"

/** `/bulk/…` answers in one write; `/paced/…` writes one event per turn of the event loop. */
const startServer = () =>
  new Promise<http.Server>((resolve) => {
    const server = http.createServer((req, res) => {
      req.resume()
      req.on("end", () => {
        res.writeHead(200, { "content-type": "text/event-stream" })
        if (req.url?.startsWith("/bulk/")) {
          res.end(whole)
          return
        }
        res.socket?.setNoDelay(true)
        let i = 0
        const next = () => {
          if (i === events.length) {
            res.end()
            return
          }
          res.write(events[i++]!)
          setImmediate(next)
        }
        next()
      })
    })
    server.listen(0, "127.0.0.1", () => resolve(server))
  })

const request: Model.ModelRequest = {
  sessionId: "b13" as SessionId,
  provider: "openai",
  model: "bench",
  messages: [Message.user("go", { id: "m1" })],
  tools: []
}

/** What one request of a side cost in a sample: CPU time and wall time (ms), and the stream chunks it read. */
interface Sample {
  readonly cpu: number
  readonly wall: number
  readonly chunks: number
}

/** `requests` requests of a side in a row, as one sample: the figures per request. */
const timed = <E, R>(
  effect: (count: () => void) => Effect.Effect<void, E, R>,
  requests: number
): Effect.Effect<Sample, E, R> =>
  Effect.suspend(() => {
    let chunks = 0
    const cpu0 = process.cpuUsage()
    const wall0 = now()
    return Effect.map(Effect.replicateEffect(effect(() => chunks++), requests, { discard: true }), () => {
      const wall = now() - wall0
      const cpu = process.cpuUsage(cpu0)
      return { cpu: (cpu.user + cpu.system) / 1000 / requests, wall: wall / requests, chunks: chunks / requests }
    })
  })

/** The adapter's side: `Model.stream` of `LanguageModelAdapter.openAi`, counting text deltas. */
const ours = (count: () => void) =>
  Effect.gen(function*() {
    const model = yield* Model.Model
    let deltas = 0
    yield* Stream.runForEachChunk(model.stream(request), (chunk) =>
      Effect.sync(() => {
        count()
        for (const item of chunk) if (item._tag === "TextDelta") deltas++
      }))
    if (deltas !== DELTAS) return yield* Effect.dieMessage(`B13: ${deltas} deltas`)
  })

/** The raw side: the same POST through the same `HttpClient`, its SSE lines parsed by hand. */
const raw = (url: string) => (count: () => void) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.execute(
      HttpClientRequest.post(url).pipe(HttpClientRequest.bodyUnsafeJson({ model: "bench", stream: true }))
    )
    let deltas = 0
    yield* response.stream.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.runForEachChunk((lines) =>
        Effect.sync(() => {
          count()
          for (const line of lines) {
            if (!line.startsWith("data: ") || line === "data: [DONE]") continue
            const parsed = JSON.parse(line.slice(6)) as { choices: Array<{ delta?: { content?: string } }> }
            if (parsed.choices[0]?.delta?.content) deltas++
          }
        })
      )
    )
    if (deltas !== DELTAS) return yield* Effect.dieMessage(`B13 raw: ${deltas} deltas`)
  })

/**
 * A young-generation collection (a scavenge) when node runs with `--expose-gc`: each sample starts
 * with an empty young generation, so neither side pays for the other's short-lived garbage. Not a
 * full collection: after one, V8 starts over with a small young generation and cold feedback, which
 * doubled the CPU of the next requests of both sides and weighed more on the side with more code
 * (the adapter): 1.4× where scavenges give 1.2× on the same code.
 */
const collectYoung = (): void => {
  const gc = (globalThis as { readonly gc?: ((options?: { readonly type: "minor" | "major" }) => void) | undefined }).gc
  if (gc !== undefined) gc({ type: "minor" })
}

/** The 25th and 75th percentiles (linear interpolation). */
const quartiles = (samples: ReadonlyArray<number>): readonly [number, number] => {
  const sorted = [...samples].sort((a, b) => a - b)
  const at = (q: number) => {
    const position = (sorted.length - 1) * q
    const low = Math.floor(position)
    const high = Math.ceil(position)
    return sorted[low]! + (sorted[high]! - sorted[low]!) * (position - low)
  }
  return [at(0.25), at(0.75)]
}

const iqr = (s: Stat) => {
  const [q1, q3] = quartiles(s.samples)
  return `IQR ${fmt(q1)}–${fmt(q3)}`
}

/** How a mode is measured: rounds, each one sample of `requests` requests per side. */
interface Plan {
  readonly rounds: number
  readonly requests: number
}

const measureMode = async (
  mode: Mode,
  baseUrl: string,
  { requests, rounds }: Plan,
  log: (line: string) => void
): Promise<Row> => {
  const runtime = ManagedRuntime.make(
    LanguageModelAdapter.openAi({ baseUrl: `${baseUrl}/${mode}/v1`, apiKey: Redacted.make("bench") }).pipe(
      Layer.provideMerge(FetchHttpClient.layer)
    )
  )
  try {
    const sides = {
      ours: Effect.orDie(timed(ours, requests)),
      raw: Effect.orDie(timed(raw(`${baseUrl}/${mode}/v1/chat/completions`), requests))
    }
    const run = async (side: keyof typeof sides) => {
      collectYoung()
      await settle()
      return runtime.runPromise(sides[side])
    }
    for (let i = 0; i < 3; i++) {
      await run("ours")
      await run("raw")
    }
    const [, oursOps] = await runtime.runPromise(countOperations(Effect.orDie(timed(ours, 1))))
    const [, rawOps] = await runtime.runPromise(
      countOperations(Effect.orDie(timed(raw(`${baseUrl}/${mode}/v1/chat/completions`), 1)))
    )
    const oursSamples: Array<Sample> = []
    const rawSamples: Array<Sample> = []
    for (let r = 0; r < rounds; r++) {
      if (r % 2 === 0) {
        oursSamples.push(await run("ours"))
        rawSamples.push(await run("raw"))
      } else {
        rawSamples.push(await run("raw"))
        oursSamples.push(await run("ours"))
      }
      const o = oursSamples[r]!
      const w = rawSamples[r]!
      log(
        `B13 ${mode} round ${r} (per request): ` +
          `ours ${fmt(o.cpu)} ms CPU (${fmt(o.wall)} ms wall, ${o.chunks} chunks), ` +
          `raw ${fmt(w.cpu)} ms CPU (${fmt(w.wall)} ms wall, ${w.chunks} chunks)`
      )
    }
    const perDelta = (ms: number) => (ms * 1000) / DELTAS
    const oursCpu = stat(oursSamples.map((s) => perDelta(s.cpu)))
    const rawCpu = stat(rawSamples.map((s) => perDelta(s.cpu)))
    const ratio = ratios(oursSamples.map((s) => s.cpu), rawSamples.map((s) => s.cpu))
    const wallRatio = ratios(oursSamples.map((s) => s.wall), rawSamples.map((s) => s.wall))
    const chunks = stat(oursSamples.map((s) => s.chunks))
    const rawChunks = stat(rawSamples.map((s) => s.chunks))
    return {
      id: "B13",
      scenario: `one streamed reply of ${fmt(DELTAS)} deltas, Chat Completions on loopback, ` +
        (mode === "bulk" ? "the reply in one write" : "one write per SSE event") +
        `, FetchHttpClient, ${rounds} rounds of ${requests} request${requests > 1 ? "s" : ""} per side`,
      ours: oursCpu,
      unit: "µs CPU/delta",
      raw: { label: "HttpClient SSE read + JSON.parse", value: rawCpu },
      costRatio: ratio,
      notes: `ratio ${iqr(ratio)}; per request ${fmt(stat(oursSamples.map((s) => s.cpu)).median)} ms CPU ` +
        `(raw ${fmt(stat(rawSamples.map((s) => s.cpu)).median)} ms), overhead ${
          fmt(oursCpu.median - rawCpu.median)
        } µs/delta; wall-time ratio ${fmt(wallRatio.median)}× ±${(wallRatio.spread * 100).toFixed(0)}% (${
          iqr(wallRatio)
        }); stream chunks per request ${fmt(chunks.median)} (raw ${fmt(rawChunks.median)} network reads); ` +
        `Effect operations per request ${fmt(oursOps)} (raw ${fmt(rawOps)})`,
      peer: `target ≤ 1.2× raw → ${fmt(ratio.median)}×`,
      extra: {
        perRequestCpuMs: stat(oursSamples.map((s) => s.cpu)).median,
        rawPerRequestCpuMs: stat(rawSamples.map((s) => s.cpu)).median,
        wallRatio: wallRatio.median,
        operationsPerRequest: oursOps,
        rawOperationsPerRequest: rawOps,
        gc: hasGc() ? 1 : 0
      }
    }
  } finally {
    await runtime.dispose()
  }
}

export const scenario: Scenario = {
  id: "B13",
  title: "model adapter overhead per streamed delta (Chat Completions on loopback)",
  run: async ({ quick, log }) => {
    const server = await startServer()
    const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    try {
      return [
        await measureMode("bulk", baseUrl, quick ? { rounds: 7, requests: 2 } : { rounds: 61, requests: 5 }, log),
        await measureMode("paced", baseUrl, quick ? { rounds: 3, requests: 1 } : { rounds: 15, requests: 1 }, log)
      ]
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
