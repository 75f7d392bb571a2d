/**
 * The model seam (SPEC §8.2): what the loop asks a model, and what it streams back.
 *
 * @since 0.1.0
 */
import type { Schema, Scope, Stream } from "effect"
import { Context, Effect, Layer, Stream as S } from "effect"
import { ModelError, RouteRefused } from "./AgentError.js"
import * as scriptedModel from "./internal/model/scripted.js"
import type { Message, SessionId } from "./Message.js"
import type { ModelSettings, OutputFormat } from "./ModelSettings.js"
import type { FinishReason, JsonRecord, RequestSettings, Usage } from "./SessionEvent.js"

export {
  /**
   * @since 0.1.0
   * @category errors
   */
  ModelError,
  /**
   * @since 0.2.0
   * @category errors
   */
  RouteRefused
} from "./AgentError.js"

/**
 * A tool as the model sees it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolSchema {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Struct<any>
  readonly jsonSchema: JsonRecord
}

/**
 * One model request, built from the session log alone (REQ-03).
 *
 * @since 0.1.0
 * @category models
 */
export interface ModelRequest {
  readonly sessionId: SessionId
  readonly provider: string
  readonly model: string
  readonly maxTokens?: number | undefined
  readonly system?: string | undefined
  readonly messages: ReadonlyArray<Message>
  readonly tools: ReadonlyArray<ToolSchema>
  /**
   * APP-04: the model settings of the request (`maxOutputTokens` is `maxTokens`), as its
   * `request/config` stores them; absent when none is set.
   *
   * @since 0.3.0
   */
  readonly settings?: RequestSettings | undefined
  /**
   * OUT-01: the typed output the final answer must be: JSON matching `output.schema`. A model
   * answers it as text (the wire adapters ask the provider for it: `response_format` on Chat
   * Completions, a forced final tool on Anthropic whose input becomes the text).
   *
   * @since 0.3.0
   */
  readonly output?: OutputFormat | undefined
}

/**
 * What a model streams: text and reasoning deltas, complete tool calls with their raw argument
 * text, and a final `finish`. The driver normalises what it logs (DUR-02): unusable call ids are
 * replaced by minted ones (the provider's kept as `providerCallId`), usage keeps only its known
 * non-negative integer fields, and a reason outside {@link FinishReason} is logged as `"other"`.
 *
 * @since 0.1.0
 * @category models
 */
export type ModelChunk =
  | { readonly _tag: "TextDelta"; readonly text: string }
  | { readonly _tag: "ReasoningDelta"; readonly text: string }
  | { readonly _tag: "ToolCall"; readonly callId: string; readonly name: string; readonly arguments: string }
  | { readonly _tag: "Finish"; readonly reason: FinishReason; readonly usage?: Usage | undefined }

/**
 * The model service. `validateRoute` is optional (PKG-06): when a model has it, `create` asks it
 * about the agent's provider and model (when both are set) and fails `InvalidAgentOptions` with
 * its reason when it refuses. `resume` never asks (a stored session stays cancellable and
 * readable), and a missing route is never refused here (`NO_ROUTE` at the first request, RES-07/08).
 *
 * @since 0.1.0
 * @category services
 */
export class Model extends Context.Tag("effect-agent/Model")<Model, {
  readonly stream: (request: ModelRequest) => Stream.Stream<ModelChunk, ModelError>
  /**
   * Succeeds when this model can serve `provider`/`model`, else fails `RouteRefused` with the
   * reason.
   *
   * @since 0.2.0
   */
  readonly validateRoute?: ((provider: string, model: string) => Effect.Effect<void, RouteRefused>) | undefined
  /**
   * APP-04: succeeds when this model can send every setting in `settings` to `provider`/`model`,
   * else fails `RouteRefused` naming the setting. `create` asks it about the agent's settings and
   * `send` about a message's own (`InvalidAgentOptions` either way); `resume` never asks (a request
   * whose settings the provider cannot take fails, and the turn ends `error`). A model without it
   * takes every setting.
   *
   * @since 0.3.0
   */
  readonly validateSettings?:
    | ((provider: string, model: string, settings: ModelSettings) => Effect.Effect<void, RouteRefused>)
    | undefined
}>() {}

/**
 * A route a model serves, as `Model.scripted`'s `routes` option lists them.
 *
 * @since 0.2.0
 * @category models
 */
export interface RouteName {
  readonly provider: string
  readonly model: string
}

/**
 * Options of {@link scripted} and {@link layerScripted}.
 *
 * @since 0.2.0
 * @category testing
 */
export interface ScriptedOptions {
  /**
   * When set, the model implements `validateRoute` and serves exactly these routes (PKG-06), so
   * `create` with another provider/model fails `InvalidAgentOptions`.
   */
  readonly routes?: ReadonlyArray<RouteName> | undefined
}

/**
 * One part of a scripted reply (see {@link scripted}). Build parts with {@link text},
 * {@link reasoning}, {@link toolCall}, {@link maxTokens}, {@link fail} and {@link hang}.
 *
 * @since 0.1.0
 * @category testing
 */
export type ReplyPart =
  | { readonly _tag: "Text"; readonly text: string }
  | { readonly _tag: "Reasoning"; readonly text: string }
  | { readonly _tag: "ToolCall"; readonly callId: string; readonly name: string; readonly arguments: string }
  | { readonly _tag: "MaxTokens"; readonly text: string }
  | { readonly _tag: "Fail"; readonly code: string }
  | { readonly _tag: "Hang"; readonly prefix: string }

/**
 * A scripted reply: one part, or several parts streamed in order
 * (e.g. `[Model.text("…"), Model.toolCall(…), Model.toolCall(…)]`).
 *
 * @since 0.1.0
 * @category testing
 */
export type Reply = ReplyPart | ReadonlyArray<ReplyPart>

/**
 * Replies consumed in request order.
 *
 * @since 0.1.0
 * @category testing
 */
export type Script = ReadonlyArray<Reply>

/**
 * Text, streamed in two deltas (split on a code point boundary) when it has more than one
 * character, so streaming consumers see more than one delta.
 *
 * @since 0.1.0
 * @category testing
 */
export const text = (value: string): ReplyPart => Object.freeze({ _tag: "Text", text: value })

/**
 * Reasoning, streamed as `ReasoningDelta`s the way {@link text} streams text.
 *
 * @since 0.1.0
 * @category testing
 */
export const reasoning = (value: string): ReplyPart => Object.freeze({ _tag: "Reasoning", text: value })

/**
 * A complete tool call with its raw argument text. A reply with a tool call finishes `tool-calls`.
 *
 * @since 0.1.0
 * @category testing
 */
export const toolCall = (callId: string, name: string, argumentsJson: string): ReplyPart =>
  Object.freeze({ _tag: "ToolCall", callId, name, arguments: argumentsJson })

/**
 * Text, then a `max-tokens` finish (unless the reply also has a tool call).
 *
 * @since 0.1.0
 * @category testing
 */
export const maxTokens = (value: string): ReplyPart => Object.freeze({ _tag: "MaxTokens", text: value })

/**
 * The stream fails with `ModelError{code}` (after any earlier parts of the reply).
 *
 * @since 0.1.0
 * @category testing
 */
export const fail = (code: string): ReplyPart => Object.freeze({ _tag: "Fail", code })

/**
 * Streams `prefix` as one `TextDelta` (nothing when it is empty), then waits until interrupted.
 *
 * @since 0.1.0
 * @category testing
 */
export const hang = (prefix: string): ReplyPart => Object.freeze({ _tag: "Hang", prefix })

/**
 * What a test reads from a scripted model: the requests it was asked.
 *
 * @since 0.2.0
 * @category testing
 */
export interface ScriptedRequests {
  /** Every request so far, in arrival order. */
  readonly requests: Effect.Effect<ReadonlyArray<ModelRequest>>
  /** Completes when the `n`-th request (numbered from 1) has arrived; at once if it already did. */
  readonly awaitRequest: (n: number) => Effect.Effect<ModelRequest>
}

/**
 * A scripted model and what it was asked.
 *
 * @since 0.1.0
 * @category testing
 */
export interface Scripted extends ScriptedRequests {
  readonly layer: Layer.Layer<Model>
}

/**
 * The requests of the scripted model that {@link layerScripted} provides beside it (PKG-03).
 *
 * @since 0.2.0
 * @category testing
 */
export class ScriptedModel extends Context.Tag("effect-agent/ScriptedModel")<ScriptedModel, ScriptedRequests>() {}

/** The script, as the scripted model takes it. */
type ScriptSource = Script | Readonly<Record<string, Script>> | ((request: ModelRequest, n: number) => Reply)

/** PKG-06: a scripted model with `routes` serves exactly those. */
const routeValidator = (
  routes: ReadonlyArray<RouteName> | undefined
): { readonly validateRoute?: (provider: string, model: string) => Effect.Effect<void, RouteRefused> } => {
  if (routes === undefined) return {}
  const served = routes.map((route) => `${JSON.stringify(route.provider)}/${JSON.stringify(route.model)}`)
  return {
    validateRoute: (provider, model) =>
      routes.some((route) => route.provider === provider && route.model === model)
        ? Effect.void
        : Effect.fail(
          new RouteRefused({
            provider,
            model,
            reason: served.length === 0
              ? "this scripted model serves no route"
              : `this scripted model serves only ${served.join(", ")}`
          })
        )
  }
}

const modelOf = (model: scriptedModel.ScriptedModel, options: ScriptedOptions | undefined): Model["Type"] =>
  Model.of({ stream: model.stream, ...routeValidator(options?.routes) })

/**
 * The deterministic test model (SPEC §8.2). The script is either
 * - an array of replies, consumed in request order;
 * - a record of arrays by session id, each consumed in that session's request order;
 * - a function of the request and its number (from 1).
 *
 * A request arrives when its stream starts running; requests are numbered from 1 across all
 * sessions. A request beyond its script fails with `ModelError{code: "SCRIPT_EXHAUSTED"}`. Every
 * reply that neither fails nor hangs ends with a `Finish` chunk carrying a deterministic usage
 * (one input token per request message, one output token per streamed character). No timers.
 * With `routes` it validates routes (PKG-06). See {@link layerScripted} for the same model as a
 * plain layer.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import * as Model from "effect-agent/Model"
 *
 * const program = Effect.gen(function*() {
 *   const model = yield* Model.scripted([
 *     [Model.text("let me look"), Model.toolCall("c1", "read", "{\"path\":\"a.txt\"}")],
 *     Model.text("done")
 *   ])
 *   return model.layer
 * })
 * ```
 *
 * @since 0.1.0
 * @category testing
 */
export const scripted = (
  script: ScriptSource,
  options?: ScriptedOptions | undefined
): Effect.Effect<Scripted, never, Scope.Scope> =>
  Effect.map(scriptedModel.make(script), (model) => ({
    layer: Layer.succeed(Model, modelOf(model, options)),
    requests: model.requests,
    awaitRequest: model.awaitRequest
  }))

/**
 * The scripted model of {@link scripted} as a layer (PKG-03): no Scope to manage. It provides the
 * `Model` and, beside it, `ScriptedModel` with the model's `requests` and `awaitRequest`. Each
 * build of the layer is a fresh model with a fresh request count.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { AgentRegistry, AgentRuntime, Message, Model } from "effect-agent"
 *
 * const ModelLive = Model.layerScripted([Model.text("hello")])
 * const RuntimeLive = AgentRuntime.layer.pipe(Layer.provideMerge(ModelLive))
 *
 * const program = Effect.gen(function*() {
 *   const registry = yield* AgentRegistry.AgentRegistry
 *   const { agent } = yield* registry.create({ sessionId: "demo", options: { provider: "scripted", model: "demo" } })
 *   yield* agent.followup(Message.user("hi"))
 *   const first = yield* Effect.flatMap(Model.ScriptedModel, (model) => model.awaitRequest(1))
 *   return first.messages
 * }).pipe(Effect.scoped, Effect.provide(RuntimeLive))
 * ```
 *
 * @since 0.2.0
 * @category testing
 */
export const layerScripted = (
  script: ScriptSource,
  options?: ScriptedOptions | undefined
): Layer.Layer<Model | ScriptedModel> =>
  Layer.effectContext(
    Effect.map(scriptedModel.make(script), (model) =>
      Context.make(Model, modelOf(model, options)).pipe(
        Context.add(ScriptedModel, ScriptedModel.of({ requests: model.requests, awaitRequest: model.awaitRequest }))
      ))
  )

/** The providers a router serves, for messages. */
const providerList = (providers: ReadonlyArray<string>): string =>
  providers.length === 0 ? "no provider" : providers.map((name) => JSON.stringify(name)).join(", ")

/**
 * A model that picks a model by each request's `provider` (MOD-03), e.g. `openai`, `deepseek`
 * and `anthropic` routes to three provider models. It implements `validateRoute` (PKG-06): an
 * unknown provider is refused at create (`InvalidAgentOptions`), and a known one asks that
 * provider's model (when it validates routes, e.g. with a `models` list). `resume` never asks: a
 * stored session whose provider is gone stays readable and cancellable, and its next request
 * fails `ModelError{code: "NO_ROUTE"}`. See {@link layerRouter} for the same over layers.
 *
 * @since 0.2.0
 * @category constructors
 */
export const router = (routes: Readonly<Record<string, Model["Type"]>>): Model["Type"] => {
  const table = new Map(Object.entries(routes))
  const served = providerList([...table.keys()])
  return Model.of({
    stream: (request) => {
      const model = table.get(request.provider)
      return model !== undefined
        ? model.stream(request)
        : S.fail(
          new ModelError({
            code: "NO_ROUTE",
            reason: `no model for provider ${JSON.stringify(request.provider)}; this router serves ${served}`
          })
        )
    },
    validateRoute: (provider, model) => {
      const target = table.get(provider)
      if (target === undefined) {
        return Effect.fail(new RouteRefused({ provider, model, reason: `this router serves ${served}` }))
      }
      return target.validateRoute === undefined ? Effect.void : target.validateRoute(provider, model)
    },
    // APP-04: the provider's model judges the settings (an unknown provider is validateRoute's to refuse)
    validateSettings: (provider, model, settings) => {
      const target = table.get(provider)
      return target?.validateSettings === undefined ? Effect.void : target.validateSettings(provider, model, settings)
    }
  })
}

/**
 * {@link router} over model layers, one per provider name; each layer is built once, in the
 * router's scope.
 *
 * @example
 * ```ts
 * import { FetchHttpClient } from "@effect/platform"
 * import { Layer } from "effect"
 * import * as Model from "effect-agent/Model"
 * import * as LanguageModelAdapter from "effect-agent/LanguageModelAdapter"
 *
 * const ModelLive = Model.layerRouter({
 *   openai: LanguageModelAdapter.openAi(),
 *   deepseek: LanguageModelAdapter.openAi({ baseUrl: "https://api.deepseek.com/v1" }),
 *   anthropic: LanguageModelAdapter.anthropic()
 * }).pipe(Layer.provide(FetchHttpClient.layer))
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layerRouter = <E, R>(
  routes: Readonly<Record<string, Layer.Layer<Model, E, R>>>
): Layer.Layer<Model, E, R> =>
  Layer.scoped(
    Model,
    Effect.map(
      Effect.forEach(Object.entries(routes), ([provider, layer]) =>
        Effect.map(Layer.build(layer), (context) => [provider, Context.get(context, Model)] as const)),
      (entries) => router(Object.fromEntries(entries))
    )
  )
