/**
 * A step's model request (SPEC §8, MOD): the route (the options, else the log's last `request/config`,
 * RES-07/08, through the `request` hooks), one attempt streamed chunk by chunk into the turn's record
 * (what was delivered is kept for the closers, CAN-05; nothing of a failed attempt is kept, MOD-04),
 * and the retries on the `modelRetry` Schedule.
 *
 * @internal
 */
import type { Tracer } from "effect"
import { Cause, Channel, Chunk, Effect, Either, Exit, Option, Scope, Stream } from "effect"
import type * as AgentError from "../../../AgentError.js"
import { AgentEvent } from "../../../AgentEvent.js"
import type { ModelChunk, ModelRequest } from "../../../Model.js"
import type { FinishReason, Usage } from "../../../SessionEvent.js"
import type * as Tool from "../../../Tool.js"
import * as modelOutput from "../../model/output.js"
import * as modelRetry from "../../model/retry.js"
import * as observability from "../../observability.js"
import type { DriverState } from "./state.js"
import type { TurnContext } from "./turnContext.js"
import * as turnOptions from "./turnOptions.js"

interface Finish {
  readonly reason: FinishReason
  readonly usage?: Usage | undefined
}

/** What one attempt collected besides the streamed text: the calls and the finish. */
interface Collected {
  readonly calls: Array<{ readonly callId: unknown; readonly name: unknown; readonly arguments: unknown }>
  finish: Finish | undefined
}

/** RES-07/08: the step's route, the options' over the stored one, through the `request` hooks. @internal */
export const resolveRoute = (state: DriverState, ctx: TurnContext, step: number) =>
  Effect.gen(function*() {
    const deps = state.deps
    const provider = deps.options.provider ?? deps.storedRoute.provider
    const model = deps.options.model ?? deps.storedRoute.model
    const system = deps.options.system ?? deps.storedRoute.system
    if (provider === undefined || model === undefined) return Option.none<Tool.Route>()
    // APP-04: the agent's settings, the turn's own over them (maxOutputTokens is maxTokens)
    const own = ctx.ask.settings
    const base = turnOptions.agentSettings(deps.options, deps.storedRoute)
    const maxTokens = own?.maxOutputTokens ?? base.maxTokens
    const settings = turnOptions.overSettings(base.settings, own)
    const route: Tool.Route = {
      provider,
      model,
      ...(maxTokens !== undefined ? { maxTokens } : {}),
      ...(system !== undefined ? { system } : {}),
      ...(settings !== undefined ? { settings } : {})
    }
    // the hooks run interruptible (their runner makes them so)
    const hooked = yield* deps.hooks.runRequest({ agent: deps.agent(), turn: ctx.turn, step }, route)
    return Option.some(hooked)
  })

/**
 * The handler of one pulled chunk: one Effect per chunk, its elements handled in order (a state
 * update, then its `ModelDelta` emit).
 */
const onChunk = (state: DriverState, ctx: TurnContext, step: number, collected: Collected) =>
(chunk: Chunk.Chunk<ModelChunk>): Effect.Effect<void> => {
  const items = Chunk.toReadonlyArray(chunk)
  const from = (start: number): Effect.Effect<void> => {
    for (let i = start; i < items.length; i++) {
      const item = items[i]!
      switch (item._tag) {
        case "TextDelta":
        case "ReasoningDelta": {
          const kind = item._tag === "TextDelta" ? "text" : "reasoning"
          if (kind === "text") ctx.streamedText += item.text
          else ctx.streamedReasoning += item.text
          const next = i + 1
          const emitted = state.deps.emit(
            AgentEvent.ModelDelta({ agent: state.deps.id, turn: ctx.turn, step, kind, text: item.text })
          )
          return next < items.length ? Effect.flatMap(emitted, () => from(next)) : emitted
        }
        case "ToolCall":
          collected.calls.push({ callId: item.callId, name: item.name, arguments: item.arguments })
          break
        case "Finish":
          // DUR-02: only what the log can carry (known usage fields, a known or "other" reason)
          collected.finish = {
            reason: modelOutput.normalizeFinishReason(item.reason),
            usage: modelOutput.normalizeUsage(item.usage)
          }
          break
      }
    }
    return Effect.void
  }
  return Effect.suspend(() => from(0))
}

/**
 * Pulls `stream` chunk by chunk into `handle`, interruptibly, in a Scope of its own closed with the
 * outcome (the stream's finalizers run then, as with `Stream.runForEachChunk`, same order). The
 * channel's pull on a `Scope.make`d scope instead of `Effect.scoped` + `Stream.toPull`: the same
 * steps with ≈60 fewer Effect operations per request (B5).
 */
const pullAll = <E>(
  stream: Stream.Stream<ModelChunk, E>,
  handle: (chunk: Chunk.Chunk<ModelChunk>) => Effect.Effect<void>
): Effect.Effect<void, E> =>
  Effect.flatMap(Scope.make(), (scope) =>
    Effect.onExit(
      Effect.interruptible(Effect.flatMap(Channel.toPullIn(Stream.toChannel(stream), scope), (pull) => {
        const loop: Effect.Effect<void, E> = Effect.flatMap(
          pull,
          (next) => Either.isRight(next) ? Effect.flatMap(handle(next.right), () => loop) : Effect.void
        )
        return loop
      })),
      (exit) => Scope.close(scope, exit)
    ))

/**
 * OBS-02: an attempt's latency (and, when it succeeded, the tokens reported) by provider and model;
 * OBS-01: the usage on its span.
 */
const recordAttempt = (
  state: DriverState,
  request: ModelRequest,
  started: number,
  outcome: string,
  usage: Usage | undefined,
  span: Tracer.Span | undefined
): void => {
  const millis = state.deps.telemetry.clock.unsafeCurrentTimeMillis() - started
  observability.recordModelRequest(request.provider, request.model, outcome, millis, usage)
  if (span !== undefined) observability.usageAttributes(span, usage)
}

/** The `outcome` of a failed attempt (its `ModelError` code) or an interrupted one. */
const failedOutcome = (cause: Cause.Cause<AgentError.ModelError>): string => {
  const failure = Cause.failureOption(cause)
  return Option.isSome(failure) ? failure.value.code : Cause.isInterrupted(cause) ? "interrupted" : "defect"
}

/**
 * One attempt of a model request: nothing of a failed attempt is kept (MOD-04). With a tracer, in
 * an `effect-agent.model.request` span (OBS-01), a child of the step's.
 */
const attemptModel = (state: DriverState, ctx: TurnContext, step: number, request: ModelRequest) =>
  observability.spanned(state.deps.telemetry, "effect-agent.model.request", () => ({
    [observability.attr.agentId]: state.deps.id,
    [observability.attr.turn]: ctx.turn,
    [observability.attr.step]: step,
    [observability.attr.provider]: request.provider,
    [observability.attr.model]: request.model
  }), (span) => attemptBody(state, ctx, step, request, span))

const attemptBody = (
  state: DriverState,
  ctx: TurnContext,
  step: number,
  request: ModelRequest,
  span: Tracer.Span | undefined
) =>
  Effect.gen(function*() {
    const started = state.deps.telemetry.clock.unsafeCurrentTimeMillis()
    ctx.streamedText = ""
    ctx.streamedReasoning = ""
    ctx.streaming = true
    const collected: Collected = { calls: [], finish: undefined }
    const handle = onChunk(state, ctx, step, collected)
    const exit = yield* Effect.exit(pullAll(state.deps.model.stream(request), handle))
    if (Exit.isSuccess(exit)) {
      ctx.streaming = false
      recordAttempt(state, request, started, "ok", collected.finish?.usage, span)
      const calls = collected.calls
      return {
        // DUR-02: call ids the log, the results and the next request can carry
        calls: modelOutput.normalizeCalls(ctx.turn, step, calls),
        finish: collected.finish ?? { reason: calls.length > 0 ? "tool-calls" as const : "stop" as const }
      }
    }
    recordAttempt(state, request, started, failedOutcome(exit.cause), undefined, span)
    // interrupted (a cancel): the closers keep what was delivered so far (CAN-05)
    if (Cause.isInterrupted(exit.cause)) return yield* Effect.failCause(exit.cause)
    // a failed attempt delivers nothing the model will be shown
    ctx.streaming = false
    return yield* Effect.failCause(exit.cause)
  })

/**
 * MOD-04: retryable codes back off on the Schedule (Retry-After honoured), others retry when the
 * `requestError` hooks say so; each retry is announced live as `ModelRetry`.
 *
 * @internal
 */
export const callModel = (state: DriverState, ctx: TurnContext, step: number, request: ModelRequest) =>
  modelRetry.retrying(() => attemptModel(state, ctx, step, request), {
    policy: { maxRetries: state.deps.options.maxRequestRetries ?? 3 },
    decide: ({ attempt, error }) =>
      state.deps.hooks.runRequestError({ agent: state.deps.agent(), turn: ctx.turn, step, error, attempt }),
    onRetry: ({ attempt, delay, error }) =>
      state.deps.emit(
        AgentEvent.ModelRetry({ agent: state.deps.id, turn: ctx.turn, step, attempt, code: error.code, delay })
      )
  })
