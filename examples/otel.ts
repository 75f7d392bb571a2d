/**
 * OpenTelemetry for effect-agent (OBS-03): the library's spans (`effect-agent.*`) and metrics
 * (`effect_agent.*`, the `Metrics` module) exported with `@effect/opentelemetry`.
 *
 *   npx tsx examples/otel.ts
 *     spans on the console (OpenTelemetry's ConsoleSpanExporter), the metrics printed at the end
 *   OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 npx tsx examples/otel.ts
 *     traces, metrics and logs to that OTLP/HTTP endpoint (JSON), e.g. an OpenTelemetry Collector,
 *     Jaeger or Grafana Tempo/Alloy; `OTEL_SERVICE_NAME` names the service (default
 *     "effect-agent-example")
 *
 * The tracer is installed *under* the agent runtime (`Layer.provideMerge(telemetry)`), so the
 * runtime's background fibers — turns, session writers, teardowns — trace too: a turn is the root
 * of its own trace (turn → step → model request + tool calls), as it runs in the agent's drain fiber,
 * not in the fiber that sent the message.
 */
import { Otlp, Resource, Tracer as OtelTracer } from "@effect/opentelemetry"
import { FetchHttpClient } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { BasicTracerProvider, ConsoleSpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Config, Console, Effect, Layer, Metric, Option, Schema } from "effect"
import { AgentRegistry, AgentRuntime, Message, Model, SessionPersistence, Tool } from "../src/index.js"

/** OTLP/HTTP with JSON bodies to `endpoint` (`/v1/traces`, `/v1/metrics`, `/v1/logs`); no SDK needed. */
const otlp = (endpoint: string, serviceName: string) =>
  Otlp.layerJson({
    baseUrl: endpoint,
    resource: { serviceName },
    // the exporters also flush when the runtime is released, at the end of the program
    tracerExportInterval: "2 seconds",
    metricsExportInterval: "5 seconds",
    shutdownTimeout: "5 seconds"
  }).pipe(Layer.provide(FetchHttpClient.layer))

/** The spans printed as they end, with OpenTelemetry's console exporter. */
const consoleSpans = (serviceName: string) =>
  OtelTracer.layer.pipe(
    Layer.provideMerge(
      Layer.effect(
        OtelTracer.OtelTracerProvider,
        Effect.map(Resource.Resource, (resource) =>
          new BasicTracerProvider({
            resource,
            spanProcessors: [new SimpleSpanProcessor(new ConsoleSpanExporter())]
          }))
      )
    ),
    Layer.provideMerge(Resource.layer({ serviceName }))
  )

const settings = Config.all({
  endpoint: Config.option(Config.nonEmptyString("OTEL_EXPORTER_OTLP_ENDPOINT")),
  serviceName: Config.withDefault(Config.nonEmptyString("OTEL_SERVICE_NAME"), "effect-agent-example")
})

/** A tool, so the turn has two steps: a request that calls it, and one that answers. */
const weather = Tool.make({
  name: "weather",
  description: "Tells the weather in a city",
  parameters: Schema.Struct({ city: Schema.String }),
  run: ({ city }) => Effect.succeed(Tool.text(`Sunny in ${city}, 21°C`))
})

const program = Effect.gen(function*() {
  const registry = yield* AgentRegistry.AgentRegistry
  const { agent, dispose } = yield* registry.create({
    sessionId: "otel-demo",
    options: { provider: "scripted", model: "demo" },
    setup: (setup) => setup.tools.register(weather)
  })
  yield* agent.followup(Message.user("What's the weather in Lisbon?"))
  yield* agent.whenIdle
  const [last] = (yield* agent.session.messages).slice(-1)
  yield* Console.log(`assistant: ${last === undefined ? "" : Message.textOf(last.content)}`)
  yield* dispose
})

/** The library's metrics (`effect_agent.*`), one line per series: the console mode's summary. */
const printMetrics = Effect.gen(function*() {
  yield* Console.log("metrics:")
  for (const pair of yield* Metric.snapshot) {
    const key = pair.metricKey
    if (!key.name.startsWith("effect_agent.")) continue
    const tags = key.tags.map((tag) => `${tag.key}=${tag.value}`).join(",")
    const state: object = pair.metricState
    const value = "count" in state ? state.count : "value" in state ? state.value : "?"
    yield* Console.log(`  ${key.name}{${tags}} ${String(value)}`)
  }
})

const main = Effect.gen(function*() {
  const { endpoint, serviceName } = yield* settings
  const telemetry = Option.isSome(endpoint) ? otlp(endpoint.value, serviceName) : consoleSpans(serviceName)
  // a deterministic model (no network): the first request calls the tool, the second answers
  const model = Model.layerScripted([
    [Model.text("Let me check."), Model.toolCall("c1", "weather", "{\"city\":\"Lisbon\"}")],
    Model.text("It is sunny in Lisbon, 21°C.")
  ])
  const storage = yield* SessionPersistence.makeMemoryStorage
  const runtime = AgentRuntime.layerMemory({ storage }).pipe(Layer.provide(model), Layer.provideMerge(telemetry))
  yield* program.pipe(Effect.scoped, Effect.provide(runtime))
  if (Option.isNone(endpoint)) yield* printMetrics
  else yield* Console.log(`exported to ${endpoint.value}`)
})

NodeRuntime.runMain(main)
