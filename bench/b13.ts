/**
 * B13 (issue 16): the model adapter's overhead per streamed delta and per request, against a local
 * Chat Completions server on loopback, compared with a raw `HttpClient` SSE read of the same stream
 * (decode, split lines, `JSON.parse` each `data:` line). Target: ≤ 1.2× the raw read.
 */
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Effect, Layer, Redacted, Stream } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as LanguageModelAdapter from "../src/LanguageModelAdapter.js"
import type { SessionId } from "../src/Message.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, ratios, settle, stat } from "./harness.js"

const DELTAS = 2000

/** The SSE body: DELTAS text deltas of a few characters, a finish, usage, [DONE]. */
const body = (() => {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "b13", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
  const pieces = [chunk({ role: "assistant", content: "" })]
  for (let i = 0; i < DELTAS; i++) pieces.push(chunk({ content: `tok${i % 10} ` }))
  pieces.push(chunk({}, "stop"))
  pieces.push(`data: ${JSON.stringify({ id: "b13", choices: [], usage: { prompt_tokens: 10, completion_tokens: DELTAS } })}\n\n`)
  pieces.push("data: [DONE]\n\n")
  return pieces.join("")
})()

const startServer = () =>
  new Promise<http.Server>((resolve) => {
    const server = http.createServer((req, res) => {
      req.resume()
      req.on("end", () => {
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end(body)
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

export const scenario: Scenario = {
  id: "B13",
  title: "model adapter overhead per streamed delta (Chat Completions on loopback)",
  run: async ({ quick, log }) => {
    const server = await startServer()
    const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
    try {
      const ours = Effect.gen(function*() {
        const model = yield* Model.Model
        const start = now()
        let deltas = 0
        yield* Stream.runForEach(model.stream(request), (chunk) =>
          Effect.sync(() => {
            if (chunk._tag === "TextDelta") deltas++
          }))
        if (deltas !== DELTAS) return yield* Effect.dieMessage(`B13: ${deltas} deltas`)
        return now() - start
      }).pipe(
        Effect.provide(
          LanguageModelAdapter.openAi({ baseUrl, apiKey: Redacted.make("bench") }).pipe(Layer.provide(FetchHttpClient.layer))
        ),
        Effect.orDie
      )
      const raw = Effect.gen(function*() {
        const client = yield* HttpClient.HttpClient
        const start = now()
        const response = yield* client.execute(
          HttpClientRequest.post(`${baseUrl}/chat/completions`).pipe(HttpClientRequest.bodyUnsafeJson({ model: "bench" }))
        )
        let deltas = 0
        yield* response.stream.pipe(
          Stream.decodeText(),
          Stream.splitLines,
          Stream.runForEach((line) =>
            Effect.sync(() => {
              if (!line.startsWith("data: ") || line === "data: [DONE]") return
              const parsed = JSON.parse(line.slice(6)) as { choices: Array<{ delta?: { content?: string } }> }
              if (parsed.choices[0]?.delta?.content) deltas++
            })
          )
        )
        if (deltas !== DELTAS) return yield* Effect.dieMessage(`B13 raw: ${deltas} deltas`)
        return now() - start
      }).pipe(Effect.provide(FetchHttpClient.layer), Effect.orDie)

      for (let i = 0; i < 3; i++) {
        await Effect.runPromise(ours)
        await Effect.runPromise(raw)
      }
      const rounds = quick ? 3 : 15
      const oursMs: Array<number> = []
      const rawMs: Array<number> = []
      for (let r = 0; r < rounds; r++) {
        await settle()
        oursMs.push(await Effect.runPromise(ours))
        rawMs.push(await Effect.runPromise(raw))
        log(`B13 round ${r}: ${fmt(oursMs[r]!)} ms per request, raw ${fmt(rawMs[r]!)} ms`)
      }
      const perDelta = (ms: number) => (ms * 1000) / DELTAS
      const ratio = ratios(oursMs, rawMs)
      const row: Row = {
        id: "B13",
        scenario: `one streamed reply of ${fmt(DELTAS)} deltas, Chat Completions on loopback, FetchHttpClient`,
        ours: stat(oursMs.map(perDelta)),
        unit: "µs/delta",
        raw: { label: "HttpClient SSE read + JSON.parse", value: stat(rawMs.map(perDelta)) },
        costRatio: ratio,
        notes: `per request ${fmt(stat(oursMs).median)} ms (raw ${fmt(stat(rawMs).median)} ms), ` +
          `overhead ${fmt(perDelta(stat(oursMs).median - stat(rawMs).median))} µs/delta`,
        peer: `target ≤ 1.2× raw → ${fmt(ratio.median)}×`,
        extra: { perRequestMs: stat(oursMs).median, rawPerRequestMs: stat(rawMs).median }
      }
      return [row]
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
