/**
 * OBS-01/02: the library's spans and metrics, from library parts (`Effect.useSpan`,
 * `Effect.withParentSpan`, a `Metric`'s `unsafeUpdate`), so that with the default tracer they cost
 * no Effect operation (SPEC §14's instrumentation budget).
 *
 * Spans: the `effect-agent.*` spans are made when the fiber's tracer is not Effect's built-in one
 * (which exports nowhere) and tracing is enabled. Whether it is, and the Clock durations are read
 * from, are read once from the FiberRefs of the fiber that runs the work (`Telemetry`): the factory's
 * background FiberRefs for turns, commits and teardowns (CORE-01), the caller's for creations.
 *
 * Metrics: updated in place, tagged with label arrays kept per tag combination (a `Metric` caches
 * its hook per label array).
 *
 * @internal
 */
import type { Exit, Fiber } from "effect"
import {
  Cause,
  Clock,
  Context,
  DefaultServices,
  Effect,
  FiberRef,
  FiberRefs,
  MetricLabel,
  Option,
  Tracer
} from "effect"
import * as Metrics from "../Metrics.js"
import type { Usage } from "../SessionEvent.js"

/** What instruments one fiber's work: its tracer when spans are made, and its Clock. @internal */
export interface Telemetry {
  /** The tracer the `effect-agent.*` spans go to; undefined when they are not made. */
  readonly tracer: Tracer.Tracer | undefined
  readonly clock: Clock.Clock
}

/** Effect's built-in tracer: its spans go nowhere, so the library makes none under it. */
const nativeTracer = Context.get(DefaultServices.liveServices, Tracer.Tracer)

const telemetryOf = (services: Context.Context<DefaultServices.DefaultServices>, enabled: boolean): Telemetry => {
  const tracer = Context.get(services, Tracer.Tracer)
  return {
    tracer: enabled && tracer !== nativeTracer ? tracer : undefined,
    clock: Context.get(services, Clock.Clock)
  }
}

/** The telemetry of fibers started with `refs` (read without running anything). @internal */
export const fromRefs = (refs: FiberRefs.FiberRefs): Telemetry =>
  telemetryOf(
    FiberRefs.getOrDefault(refs, DefaultServices.currentServices),
    FiberRefs.getOrDefault(refs, FiberRef.currentTracerEnabled)
  )

/** The telemetry of a running fiber. @internal */
export const fromFiber = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Telemetry =>
  telemetryOf(fiber.currentDefaultServices, fiber.getFiberRef(FiberRef.currentTracerEnabled))

/** Whether spans are made for a fiber's work: a tracer other than the built-in one, enabled. @internal */
export const isTracing = (fiber: Fiber.RuntimeFiber<unknown, unknown>): boolean =>
  fiber.getFiberRef(FiberRef.currentTracerEnabled) &&
  Context.get(fiber.currentDefaultServices, Tracer.Tracer) !== nativeTracer

/** The span the fiber runs in, if any (a parent for spans it causes elsewhere). @internal */
export const currentSpanOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Tracer.AnySpan | undefined =>
  Option.getOrUndefined(Context.getOption(fiber.currentContext, Tracer.ParentSpan))

// -------------------------------------------------------------------------------------------------
// attributes

/** The span attributes of OBS-01 (OpenTelemetry's `gen_ai.*` and `error.type` where they apply). @internal */
export const attr = {
  agentId: "effect_agent.agent.id",
  parentId: "effect_agent.agent.parent",
  initiator: "effect_agent.initiator",
  sessionId: "effect_agent.session.id",
  turn: "effect_agent.turn",
  step: "effect_agent.step",
  endReason: "effect_agent.turn.end_reason",
  steps: "effect_agent.turn.steps",
  finish: "gen_ai.response.finish_reasons",
  provider: "gen_ai.system",
  model: "gen_ai.request.model",
  attempt: "effect_agent.model.attempt",
  inputTokens: "gen_ai.usage.input_tokens",
  outputTokens: "gen_ai.usage.output_tokens",
  toolName: "gen_ai.tool.name",
  toolCallId: "gen_ai.tool.call.id",
  isError: "effect_agent.tool.is_error",
  batchSize: "effect_agent.persistence.batch_size",
  forced: "effect_agent.host.forced",
  passivated: "effect_agent.host.passivated",
  repairEvents: "effect_agent.repair.events",
  errorType: "error.type"
} as const

/**
 * What `error.type` says of a failure: its `code` when it has one (a `ModelError`'s), else its
 * `_tag`; `interrupted`, or `defect`.
 *
 * @internal
 */
export const errorTypeOf = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    if (typeof error === "object" && error !== null) {
      if ("code" in error && typeof error.code === "string") return error.code
      if ("_tag" in error) return String(error._tag)
    }
    return "failure"
  }
  return Cause.isInterruptedOnly(cause) ? "interrupted" : "defect"
}

/** Token usage as span attributes (only what the provider reported). @internal */
export const usageAttributes = (span: Tracer.Span, usage: Usage | undefined): void => {
  if (usage?.inputTokens !== undefined) span.attribute(attr.inputTokens, usage.inputTokens)
  if (usage?.outputTokens !== undefined) span.attribute(attr.outputTokens, usage.outputTokens)
}

// -------------------------------------------------------------------------------------------------
// spans

/**
 * OBS-01: `body` in a span named `name` (a child of the fiber's current span, the parent of the spans
 * made inside) when `telemetry` traces, with `error.type` set on failure; `body(undefined)` as it is
 * otherwise — no operation added.
 *
 * @internal
 */
export const spanned = <A, E, R>(
  telemetry: Telemetry,
  name: string,
  attributes: () => Record<string, unknown>,
  body: (span: Tracer.Span | undefined) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  telemetry.tracer === undefined
    ? body(undefined)
    : Effect.useSpan(name, { attributes: attributes(), captureStackTrace: false }, (span) =>
      Effect.withParentSpan(
        Effect.onError(body(span), (cause) => Effect.sync(() => span.attribute(attr.errorType, errorTypeOf(cause)))),
        span
      ))

/**
 * `spanned` with the current fiber's telemetry: one operation more, for paths off the §14 budgets
 * (a repair, a host's activation).
 *
 * @internal
 */
export const spannedHere = <A, E, R>(
  name: string,
  attributes: () => Record<string, unknown>,
  body: (span: Tracer.Span | undefined) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime<A, E, R>((fiber) => spanned(fromFiber(fiber), name, attributes, body))

/**
 * OBS-01: a span started now, ended by `endSpan`, for work whose start and end are not one Effect
 * (a teardown, a session writer's batch): `undefined` when `telemetry` does not trace.
 *
 * @internal
 */
export const startSpan = (
  telemetry: Telemetry,
  name: string,
  parent: Tracer.AnySpan | undefined,
  attributes: Record<string, unknown>
): Tracer.Span | undefined => {
  const tracer = telemetry.tracer
  if (tracer === undefined) return undefined
  const span = tracer.span(
    name,
    parent === undefined ? Option.none() : Option.some(parent),
    Context.empty(),
    [],
    telemetry.clock.unsafeCurrentTimeNanos(),
    "internal"
  )
  for (const key in attributes) span.attribute(key, attributes[key])
  return span
}

/** Ends a span of `startSpan` with the work's exit. @internal */
export const endSpan = (
  telemetry: Telemetry,
  span: Tracer.Span | undefined,
  exit: Exit.Exit<unknown, unknown>
): void => {
  if (span === undefined || span.status._tag === "Ended") return
  if (exit._tag === "Failure") span.attribute(attr.errorType, errorTypeOf(exit.cause))
  span.end(telemetry.clock.unsafeCurrentTimeNanos(), exit)
}

// -------------------------------------------------------------------------------------------------
// metrics

const labelCache = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()

/** The label array of a tag combination (`key, value, key, value…`), one per combination. @internal */
export const labels = (...pairs: ReadonlyArray<string>): ReadonlyArray<MetricLabel.MetricLabel> => {
  const key = pairs.join("\u0000")
  let found = labelCache.get(key)
  if (found === undefined) {
    const made: Array<MetricLabel.MetricLabel> = []
    for (let i = 0; i + 1 < pairs.length; i += 2) made.push(MetricLabel.make(pairs[i]!, pairs[i + 1]!))
    found = made
    labelCache.set(key, found)
  }
  return found
}

const none: ReadonlyArray<MetricLabel.MetricLabel> = []

/** OBS-02: a live agent more (`+1`) or less (`-1`). @internal */
export const countLive = (delta: number): void => Metrics.liveAgents.unsafeModify(delta, none)

/** OBS-02: messages added to (or, negative, removed from) the inboxes of live agents. @internal */
export const addInboxDepth = (delta: number): void => {
  if (delta !== 0) Metrics.inboxDepth.unsafeModify(delta, none)
}

/** OBS-02: a turn ended with `reason`. @internal */
export const countTurn = (reason: string): void => Metrics.turns.unsafeUpdate(1, labels("reason", reason))

/** OBS-02: a step opened. @internal */
export const countStep = (): void => Metrics.steps.unsafeUpdate(1, none)

/** OBS-02: a tool call that ran, its outcome and how long it took. @internal */
export const recordToolCall = (tool: string, outcome: string, millis: number): void => {
  Metrics.toolCalls.unsafeUpdate(1, labels("tool", tool, "outcome", outcome))
  Metrics.toolCallDuration.unsafeUpdate(millis, labels("tool", tool))
}

/** OBS-02: one model request attempt, how long it took, and the tokens reported. @internal */
export const recordModelRequest = (
  provider: string,
  model: string,
  outcome: string,
  millis: number,
  usage: Usage | undefined
): void => {
  Metrics.modelRequestDuration.unsafeUpdate(millis, labels("provider", provider, "model", model, "outcome", outcome))
  if (usage === undefined) return
  const tokens = (kind: string, n: number | undefined) => {
    if (n === undefined || n <= 0) return
    Metrics.modelTokens.unsafeUpdate(n, labels("provider", provider, "model", model, "kind", kind))
  }
  tokens("input", usage.inputTokens)
  tokens("output", usage.outputTokens)
  tokens("reasoning", usage.reasoningTokens)
  tokens("cached_input", usage.cachedInputTokens)
}

/** OBS-02: one durable commit of a session writer. @internal */
export const recordCommit = (events: number, millis: number, ok: boolean): void => {
  Metrics.persistenceCommitDuration.unsafeUpdate(millis, labels("outcome", ok ? "ok" : "failed"))
  Metrics.persistenceCommitBatchSize.unsafeUpdate(events, none)
}

/**
 * OBS-01/02: an `AgentHost` activation (resume or create on demand) in its `effect-agent.host.activate`
 * span, counted in `Metrics.hostActivations` by outcome.
 *
 * @internal
 */
export const hostActivation = (id: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  spannedHere("effect-agent.host.activate", () => ({ [attr.agentId]: id }), () =>
    Effect.onExit(self, (exit) =>
      Effect.sync(() => {
        Metrics.hostActivations.unsafeUpdate(1, labels("outcome", exit._tag === "Success" ? "ok" : "failed"))
      })))

/**
 * OBS-01/02: an `AgentHost` passivation attempt in its `effect-agent.host.passivate` span (whether it
 * passivated is an attribute); a passivation is counted in `Metrics.hostPassivations`.
 *
 * @internal
 */
export const hostPassivation = (id: string, forced: boolean) =>
<E, R>(self: Effect.Effect<boolean, E, R>): Effect.Effect<boolean, E, R> =>
  spannedHere("effect-agent.host.passivate", () => ({ [attr.agentId]: id, [attr.forced]: forced }), (span) =>
    Effect.tap(self, (passivated) =>
      Effect.sync(() => {
        if (span !== undefined) span.attribute(attr.passivated, passivated)
        if (passivated) Metrics.hostPassivations.unsafeUpdate(1, labels("forced", String(forced)))
      })))
