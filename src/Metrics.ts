/**
 * The library's metrics (OBS-02), as Effect `Metric`s in Effect's global metric registry: read
 * them with `Metric.value` (tagged with `Metric.tagged` for one series) or `Metric.snapshot`, or
 * export them with `@effect/opentelemetry` (`NodeSdk.layer({ metricReader })`, `Otlp.layer`), as any
 * Effect metric. The library updates them in place (`unsafeUpdate`/`unsafeModify` where the value
 * is known), so recording costs no Effect operation.
 *
 * Durations are in milliseconds, read from the `Clock` of the fiber that measured them (the
 * factory's for turns and tools, the session writer's for commits).
 *
 * @since 0.2.0
 */
import { Metric, MetricBoundaries } from "effect"

/** Milliseconds, 1 ms to ~2 min (18 doubling buckets). */
const millis = MetricBoundaries.exponential({ start: 1, factor: 2, count: 18 })

/**
 * Agents live in this process: created or resumed and not torn down yet (OBS-02).
 *
 * @since 0.2.0
 * @category metrics
 */
export const liveAgents = Metric.gauge("effect_agent.agents.live", {
  description: "Agents live in this process (created or resumed, not torn down)"
})

/**
 * Turns ended, tagged `reason`: `completed`, `aborted`, `error`, `blocked`, `max-steps`,
 * `max-tokens` (the `turn/end` reason's kind).
 *
 * @since 0.2.0
 * @category metrics
 */
export const turns = Metric.counter("effect_agent.turns", {
  description: "Turns ended, by end reason",
  incremental: true
})

/**
 * Steps opened (each `step/start` a turn wrote).
 *
 * @since 0.2.0
 * @category metrics
 */
export const steps = Metric.counter("effect_agent.steps", { description: "Steps opened", incremental: true })

/**
 * Tool calls that ran (their `tool/call` was logged), tagged `tool` (its name) and `outcome`: `ok`,
 * `error` (the tool returned `isError`), `aborted` (a cancel interrupted it), or the code of the
 * error its result records, lower-cased (`tool_failed`, `tool_timeout`, `tool_not_found`,
 * `invalid_arguments`, `invalid_tool_output`, `tool_defect`).
 *
 * @since 0.2.0
 * @category metrics
 */
export const toolCalls = Metric.counter("effect_agent.tool_calls", {
  description: "Tool calls, by tool and outcome",
  incremental: true
})

/**
 * How long tool calls ran, in milliseconds (from their `tool/call` to their result), tagged `tool`.
 *
 * @since 0.2.0
 * @category metrics
 */
export const toolCallDuration = Metric.histogram(
  "effect_agent.tool_call.duration",
  millis,
  "Tool call duration in milliseconds, by tool"
)

/**
 * How long model requests took, in milliseconds (each attempt, from its start to its stream's end
 * or failure), tagged `provider`, `model` and `outcome` (`ok`, or the `ModelError` code).
 *
 * @since 0.2.0
 * @category metrics
 */
export const modelRequestDuration = Metric.histogram(
  "effect_agent.model_request.duration",
  millis,
  "Model request duration in milliseconds, by provider, model and outcome"
)

/**
 * Tokens the providers reported, tagged `provider`, `model` and `kind` (`input`, `output`,
 * `reasoning`, `cached_input`).
 *
 * @since 0.2.0
 * @category metrics
 */
export const modelTokens = Metric.counter("effect_agent.model.tokens", {
  description: "Tokens reported by the model providers, by provider, model and kind",
  incremental: true
})

/**
 * Messages pending in the inboxes of the live agents (both lists; they leave it when they enter a
 * step, are canceled or rejected, or their agent is torn down).
 *
 * @since 0.2.0
 * @category metrics
 */
export const inboxDepth = Metric.gauge("effect_agent.inbox.depth", {
  description: "Messages pending in the inboxes of live agents"
})

/**
 * How long the sessions' durable commits took, in milliseconds (one batch of the session writer:
 * from handing it to the persistence to its answer), tagged `outcome` (`ok` or `failed`).
 *
 * @since 0.2.0
 * @category metrics
 */
export const persistenceCommitDuration = Metric.histogram(
  "effect_agent.persistence.commit.duration",
  millis,
  "Session commit duration in milliseconds"
)

/**
 * How many events each durable commit of a session writer carried.
 *
 * @since 0.2.0
 * @category metrics
 */
export const persistenceCommitBatchSize = Metric.histogram(
  "effect_agent.persistence.commit.batch_size",
  MetricBoundaries.exponential({ start: 1, factor: 2, count: 12 }),
  "Events per session commit"
)

/**
 * Agents an `AgentHost` activated (resumed or created on demand), tagged `outcome` (`ok`, `failed`).
 *
 * @since 0.2.0
 * @category metrics
 */
export const hostActivations = Metric.counter("effect_agent.host.activations", {
  description: "Agents activated by an AgentHost",
  incremental: true
})

/**
 * Agents an `AgentHost` passivated (disposed while idle, inbox kept), tagged `forced` (`true` for
 * `host.passivate`, `false` for the idle timer and the `maxLive` cap).
 *
 * @since 0.2.0
 * @category metrics
 */
export const hostPassivations = Metric.counter("effect_agent.host.passivations", {
  description: "Agents passivated by an AgentHost",
  incremental: true
})
