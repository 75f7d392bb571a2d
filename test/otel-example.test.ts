/**
 * OBS-03: `examples/otel.ts` run as a child process: spans on the console without
 * `OTEL_EXPORTER_OTLP_ENDPOINT`, and with it, traces and metrics posted to an OTLP/HTTP receiver
 * (a `node:http` server on 127.0.0.1 decoding the JSON protocol) forming the turn's tree.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"

const example = fileURLToPath(new URL("../examples/otel.ts", import.meta.url))

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs the example in a child process with `env` (killed by its pid if the test's Scope closes first). */
const runExample = (env: Record<string, string | undefined>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child = spawn(process.execPath, ["--import", "tsx", example], { env, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (data: Buffer) => (stdout += data.toString("utf8")))
      child.stderr.on("data", (data: Buffer) => (stderr += data.toString("utf8")))
      const exited = new Promise<Run>((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })))
      return { child, exited }
    }),
    ({ child }) => Effect.sync(() => child.exitCode === null && child.kill("SIGKILL"))
  ).pipe(Effect.flatMap(({ exited }) => Effect.promise(() => exited)))

/** The environment without any OpenTelemetry setting of the machine running the tests. */
const cleanEnv = (): Record<string, string | undefined> => {
  const env: Record<string, string | undefined> = { ...process.env }
  for (const key of Object.keys(env)) if (key.startsWith("OTEL_")) delete env[key]
  return env
}

interface Received {
  readonly path: string
  readonly contentType: string | undefined
  readonly body: unknown
}

/** An OTLP/HTTP receiver on 127.0.0.1 (port 0) that records every JSON body it is posted. */
const receiver = Effect.acquireRelease(
  Effect.async<{ readonly server: http.Server; readonly received: Array<Received>; readonly url: string }>(
    (resume) => {
      const received: Array<Received> = []
      const server = http.createServer((request, response) => {
        let text = ""
        request.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")))
        request.on("end", () => {
          received.push({
            path: request.url ?? "",
            contentType: request.headers["content-type"],
            body: JSON.parse(text) as unknown
          })
          response.writeHead(200, { "content-type": "application/json" })
          response.end("{}")
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as AddressInfo
        resume(Effect.succeed({ server, received, url: `http://127.0.0.1:${port}` }))
      })
    }
  ),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
    })
)

interface OtlpSpan {
  readonly name: string
  readonly spanId: string
  readonly traceId: string
  readonly parentSpanId?: string
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: Record<string, unknown> }>
}

/** The spans of OTLP JSON trace bodies (`resourceSpans[].scopeSpans[].spans[]`). */
const spansOf = (bodies: ReadonlyArray<unknown>): ReadonlyArray<OtlpSpan> =>
  bodies.flatMap((body) =>
    (body as { resourceSpans: ReadonlyArray<{ scopeSpans: ReadonlyArray<{ spans: ReadonlyArray<OtlpSpan> }> }> })
      .resourceSpans.flatMap((resource) => resource.scopeSpans.flatMap((scope) => scope.spans))
  )

const attribute = (span: OtlpSpan, key: string) => {
  const value = span.attributes.find((a) => a.key === key)?.value
  return value === undefined ? undefined : Object.values(value)[0]
}

describe("OBS-03 examples/otel.ts", () => {
  it.scopedLive("OBS-03 without OTEL_EXPORTER_OTLP_ENDPOINT the example prints spans and metrics on the console", () =>
    Effect.gen(function*() {
      const run = yield* runExample(cleanEnv())
      assert.strictEqual(run.code, 0, run.stderr)
      for (const name of ["effect-agent.create", "effect-agent.turn", "effect-agent.step", "effect-agent.tool.call"]) {
        assert.include(run.stdout, `name: '${name}'`)
      }
      assert.include(run.stdout, "assistant: It is sunny in Lisbon")
      assert.include(run.stdout, "effect_agent.turns{reason=completed} 1")
      assert.include(run.stdout, "effect_agent.tool_calls{tool=weather,outcome=ok} 1")
    }), { timeout: 120_000 })

  it.scopedLive("OBS-03 with OTEL_EXPORTER_OTLP_ENDPOINT its traces and metrics reach an OTLP/HTTP receiver", () =>
    Effect.gen(function*() {
      const otlp = yield* receiver
      const env = { ...cleanEnv(), OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_SERVICE_NAME: "obs-03" }
      const run = yield* runExample(env)
      assert.strictEqual(run.code, 0, run.stderr)
      assert.include(run.stdout, `exported to ${otlp.url}`)
      const traces = otlp.received.filter((r) => r.path === "/v1/traces")
      assert.isAbove(traces.length, 0, "traces were posted")
      assert.isTrue(traces.every((r) => r.contentType === "application/json"))
      type Resource = { readonly attributes: ReadonlyArray<{ key: string; value: { stringValue?: string } }> }
      const [first] = (traces[0]!.body as { resourceSpans: ReadonlyArray<{ resource: Resource }> }).resourceSpans
      const service = first!.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue
      assert.strictEqual(service, "obs-03")
      const spans = spansOf(traces.map((r) => r.body))
      const byName = (name: string) => spans.filter((span) => span.name === name)
      const [turn] = byName("effect-agent.turn")
      assert.isDefined(turn)
      assert.strictEqual(attribute(turn!, "effect_agent.turn.end_reason"), "completed")
      const steps = byName("effect-agent.step")
      assert.strictEqual(steps.length, 2)
      for (const step of steps) {
        assert.strictEqual(step.parentSpanId, turn!.spanId)
        assert.strictEqual(step.traceId, turn!.traceId)
      }
      const requests = byName("effect-agent.model.request")
      assert.strictEqual(requests.length, 2)
      assert.isTrue(requests.every((r) => steps.some((s) => s.spanId === r.parentSpanId)))
      const [call] = byName("effect-agent.tool.call")
      assert.strictEqual(attribute(call!, "gen_ai.tool.name"), "weather")
      assert.isTrue(steps.some((s) => s.spanId === call!.parentSpanId))
      assert.strictEqual(byName("effect-agent.create").length, 1)
      assert.strictEqual(byName("effect-agent.dispose").length, 1)
      // the metrics too: their names are in the posted bodies
      const metrics = otlp.received.filter((r) => r.path === "/v1/metrics").map((r) => JSON.stringify(r.body))
      assert.isTrue(metrics.some((text) => text.includes("\"effect_agent.turns\"")), "effect_agent.turns exported")
      assert.isTrue(metrics.some((text) => text.includes("\"effect_agent.tool_calls\"")))
    }), { timeout: 120_000 })
})
