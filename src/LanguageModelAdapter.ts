/**
 * Real models (SPEC §16, MOD-01..06): `@effect/ai` language models as the agent loop's `Model`.
 *
 * - {@link layer} / {@link make} adapt any `@effect/ai` `LanguageModel` (a provider package's, or
 *   one of ours) to the model seam.
 * - {@link openAi} speaks OpenAI **Chat Completions** (`POST {baseUrl}/chat/completions`, SSE), the
 *   protocol OpenAI and every compatible endpoint share: DeepSeek, vLLM, Ollama, LM Studio via
 *   `baseUrl` (which includes the version path, e.g. `https://api.deepseek.com/v1`).
 * - {@link anthropic} speaks Anthropic **Messages** (`POST {baseUrl}/messages`, typed SSE events).
 *
 * Both are `LanguageModel`s built with `LanguageModel.make` over `@effect/platform`'s `HttpClient`
 * (provide one, e.g. `FetchHttpClient.layer`), and keep the model's raw tool-argument text: the log
 * stores exactly what the model wrote, and arguments that do not parse or do not decode reach the
 * loop, which answers them `INVALID_ARGUMENTS` so the model can correct itself (MOD-02).
 *
 * Where MOD-02 degrades: a provider package that decodes tool arguments itself (e.g.
 * `@effect/ai-openai`'s `OpenAiLanguageModel`) fails its stream with `MalformedOutput` on
 * arguments that are not JSON (the adapter maps it to `ModelError{code: "PROVIDER"}`), and when it
 * streams no `tool-params-*` parts the log stores `JSON.stringify` of its parsed parameters, not
 * the model's text. Such a provider also takes its model name and token limit from its own layer,
 * not from the request ({@link RequestSettings} is read only by ours).
 *
 * Requires `@effect/ai` 0.37.x (an optional peer of effect-agent).
 *
 * @since 0.2.0
 */
import type { HttpClient } from "@effect/platform"
import { HttpClient as Client } from "@effect/platform"
import type { Response } from "@effect/ai"
import { AiError, LanguageModel } from "@effect/ai"
import { Config, ConfigError, Duration, Effect, Layer, Option, Redacted, Stream } from "effect"
import { ModelError, RouteRefused } from "./AgentError.js"
import * as anthropicMessages from "./internal/model/anthropicMessages.js"
import * as adapter from "./internal/model/languageModel.js"
import * as openAiChat from "./internal/model/openAiChat.js"
import type { RequestWatch, Timeouts } from "./internal/model/timeouts.js"
import * as providerHttp from "./internal/model/providerHttp.js"
import * as providerOutput from "./internal/model/providerOutput.js"
import { collectParts, PartsSink, sseStream } from "./internal/model/wireParts.js"
import type { ReplySink, SseReply, WireOptions } from "./internal/model/wireParts.js"
import { anthropicRefusal, asModelSettings, openAiRefusal } from "./internal/model/wireSettings.js"
import type { Refusal, WireRequestSettings } from "./internal/model/wireSettings.js"
import { Model } from "./Model.js"
import type { ModelSettings } from "./ModelSettings.js"

/**
 * The per-request settings our wire models read: the request's `model` and `maxTokens` (MOD-01),
 * its model settings (APP-04) and typed output (OUT-01).
 * The adapter provides them to every request; provide them yourself to call {@link openAi}'s or
 * {@link anthropic}'s `LanguageModel` directly with another model than its default.
 *
 * @since 0.2.0
 * @category services
 */
export const RequestSettings = adapter.RequestSettings

/**
 * @since 0.2.0
 * @category services
 */
export type RequestSettings = adapter.RequestSettings

/**
 * How the adapter runs requests.
 *
 * @since 0.2.0
 * @category options
 */
export interface AdapterOptions {
  /** The longest a whole request may take; then it fails `TIMEOUT` (MOD-04). Default 10 minutes. */
  readonly requestTimeout?: Duration.DurationInput | undefined
  /** The longest wait for the next chunk of a streaming reply; then it fails `TIMEOUT`. Default 2 minutes. */
  readonly idleTimeout?: Duration.DurationInput | undefined
  /**
   * When set, the model names this model serves: `create` with another model fails
   * `InvalidAgentOptions` (PKG-06). Unset: any model name is accepted and the provider judges it.
   */
  readonly models?: ReadonlyArray<string> | undefined
  /**
   * The most a provider may send, in UTF-8 bytes, of one SSE event (counted while it arrives: a
   * line that never ends is stopped when it passes the limit) and of one reply's assistant message
   * (its text, reasoning and tool calls, counted delta by delta). Past it the request is aborted at
   * once and fails `ModelError{code: "OUTPUT_TOO_LARGE"}`, which the loop does not retry (SEC-02).
   * Default 16 MiB, the session log's own `maxEventBytes` (a larger message could not be stored).
   * A positive integer of at most 256 MiB (a string of more could reach V8's limit); anything else
   * fails the layer with a `ConfigError`.
   *
   * @since 0.3.0
   */
  readonly maxEventBytes?: number | undefined
  /**
   * The longest wait a provider's `Retry-After` or `retry-after-ms` header may ask for: a longer
   * one waits this long, and so does a value that is not a finite number (SEC-02). Default 60
   * seconds. A finite duration; anything else fails the layer with a `ConfigError`.
   *
   * @since 0.3.0
   */
  readonly maxRetryDelay?: Duration.DurationInput | undefined
  /**
   * APP-04, for {@link make} and {@link layer}: whether the `LanguageModel` reads the model settings
   * from {@link RequestSettings}, as ours do. Default `false`: a provider package's model takes its
   * sampling settings from its own layer, so only `toolChoice` (which `@effect/ai` carries) and
   * `maxOutputTokens` are accepted, and an agent asking for another setting is refused at create
   * (`InvalidAgentOptions`) rather than having it silently ignored.
   *
   * @since 0.3.0
   */
  readonly readsRequestSettings?: boolean | undefined
}

const timeoutsOf = (options: AdapterOptions | undefined): Timeouts => ({
  requestTimeout: Duration.decode(options?.requestTimeout ?? Duration.minutes(10)),
  idleTimeout: Duration.decode(options?.idleTimeout ?? Duration.minutes(2))
})

/** The limits of the options (SEC-02), or the `ConfigError` of a bad one. */
const limitsOf = (
  options: AdapterOptions | undefined
): Effect.Effect<providerOutput.Limits, ConfigError.ConfigError> => {
  const limits = providerOutput.limitsOf(options ?? {})
  return typeof limits === "string" ? Effect.fail(ConfigError.InvalidData([], limits)) : Effect.succeed(limits)
}

/** APP-04: `validateSettings` over a protocol's refusals (PKG-06's shape: `RouteRefused` with the reason). */
const settingsValidator = (refusal: Refusal) => (provider: string, model: string, settings: ModelSettings) => {
  const refused = refusal(settings)
  return refused === undefined ? Effect.void : Effect.fail(new RouteRefused({ provider, model, reason: refused }))
}

const validatorOf = (models: ReadonlyArray<string> | undefined) =>
  models === undefined ? {} : {
    validateRoute: (provider: string, model: string) =>
      models.includes(model) ? Effect.void : Effect.fail(
        new RouteRefused({
          provider,
          model,
          reason: `this model serves only ${models.map((name) => JSON.stringify(name)).join(", ")}`
        })
      )
  }

/**
 * Our `Model` over an `@effect/ai` `LanguageModel` (MOD-01): each request streams with its prompt
 * (system, user, assistant with tool calls, tool results) and its tools as `@effect/ai` tools
 * carrying the JSON Schema the log records; tool calls are not resolved by `@effect/ai` (the loop
 * runs tools); text and reasoning deltas stream as they arrive; failures are `ModelError` codes
 * (MOD-04); the request and idle timeouts fail `TIMEOUT`; a reply over `maxEventBytes` fails
 * `OUTPUT_TOO_LARGE` (SEC-02: what the provider package holds while it parses is its own).
 *
 * Throws when `maxEventBytes` or `maxRetryDelay` is invalid ({@link layer} fails with a
 * `ConfigError` instead).
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = (model: LanguageModel.Service, options?: AdapterOptions | undefined): Model["Type"] => {
  const limits = providerOutput.limitsOf(options ?? {})
  if (typeof limits === "string") throw new Error(`LanguageModelAdapter.make: ${limits}`)
  return makeWith(model, limits, options)
}

const makeWith = (
  model: LanguageModel.Service,
  limits: providerOutput.Limits,
  options: AdapterOptions | undefined
): Model["Type"] => {
  const timeouts = timeoutsOf(options)
  return Model.of({
    stream: (request) => adapter.streamOf(model, request, timeouts, limits),
    ...validatorOf(options?.models),
    validateSettings: settingsValidator(options?.readsRequestSettings === true ? () => undefined : foreignRefusal)
  })
}

/** APP-04: what a provider package's `LanguageModel` cannot be handed per request. */
const foreignRefusal: Refusal = (settings) => {
  const unsent = Object.keys(settings).filter((name) => name !== "toolChoice" && name !== "maxOutputTokens")
  return unsent.length === 0 ? undefined : `this LanguageModel takes ${unsent.join(", ")} from its own layer, not per ` +
    "request: set them there, or pass readsRequestSettings: true when it reads LanguageModelAdapter.RequestSettings"
}

/**
 * The `LanguageModel` in context as our `Model` (see {@link make}).
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import * as LanguageModelAdapter from "effect-agent/LanguageModelAdapter"
 *
 * // any @effect/ai LanguageModel layer (a provider package's, or one of ours)
 * declare const LanguageModelLive: Layer.Layer<import("@effect/ai").LanguageModel.LanguageModel>
 * const ModelLive = LanguageModelAdapter.layer().pipe(Layer.provide(LanguageModelLive))
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = (
  options?: AdapterOptions | undefined
): Layer.Layer<Model, ConfigError.ConfigError, LanguageModel.LanguageModel> =>
  Layer.effect(
    Model,
    Effect.zipWith(limitsOf(options), LanguageModel.LanguageModel, (limits, model) => makeWith(model, limits, options))
  )

/** How one of our wire models reaches its provider, and what it accepts from it (SEC-02). */
interface WireConfig {
  readonly provider: string
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly secret: Redacted.Redacted | undefined
  readonly model: string | undefined
  readonly limits: providerOutput.Limits
}

const toAiError = (method: string) => (error: ModelError): AiError.AiError =>
  new AiError.UnknownError({ module: "effect-agent/LanguageModelAdapter", method, description: error.message, cause: error })

/**
 * One wire protocol: the JSON body of a request, the state of one streamed reply, and the settings
 * it cannot take (APP-04).
 */
interface WireProtocol {
  readonly body: (options: WireOptions, request: WireRequestSettings) => unknown
  readonly reply: (provider: string, budget: providerOutput.OutputBudget, request: WireRequestSettings) => SseReply
  readonly refusal: Refusal
}

/** What a request asks beyond its prompt: its model (else the config's), token limit, settings and output. */
type RequestedSettings = Omit<WireRequestSettings, "model"> & { readonly model?: string | undefined }

/** One streaming request over a wire protocol, built by the caller's sink. */
type WireRequest = <B>(
  options: WireOptions,
  requested: RequestedSettings,
  sink: () => ReplySink<B>,
  watch?: RequestWatch | undefined
) => Stream.Stream<B, ModelError>

const wireRequest = (
  config: WireConfig,
  protocol: WireProtocol
): Effect.Effect<WireRequest, never, HttpClient.HttpClient> =>
  Effect.map(Client.HttpClient, (client): WireRequest => {
    const dropped = providerHttp.droppedMidStream(config.provider, config.secret)
    const redact = providerHttp.redactError(config.secret)
    return (options, requested, sink, watch) => {
      const model = requested.model ?? config.model
      if (model === undefined) {
        return Stream.fail(
          new ModelError({
            code: "BAD_REQUEST",
            reason: `${config.provider}: no model: set one in the options or the request`
          })
        )
      }
      const request: WireRequestSettings = { ...requested, model }
      // APP-04: a stored setting the provider cannot take (resume never refuses) fails the request
      const refused = protocol.refusal(asModelSettings(request))
      if (refused !== undefined) {
        return Stream.fail(new ModelError({ code: "BAD_REQUEST", reason: `${config.provider}: ${refused}` }))
      }
      const open = providerHttp.postEventStream(client, {
        provider: config.provider,
        url: config.url,
        headers: config.headers,
        secret: config.secret,
        body: protocol.body(options, request),
        maxRetryDelay: config.limits.maxRetryDelay
      }, watch)
      return sseStream(
        { provider: config.provider, maxEventBytes: config.limits.maxEventBytes, open, dropped, redact, watch },
        (budget) => protocol.reply(config.provider, budget, request),
        sink
      )
    }
  })

/** A `LanguageModel` over one wire protocol (model and `maxTokens` from `RequestSettings`); `generateText` collects the stream. */
const wireModel = (
  config: WireConfig,
  protocol: WireProtocol
): Effect.Effect<LanguageModel.Service, never, HttpClient.HttpClient> =>
  Effect.flatMap(wireRequest(config, protocol), (request) => {
    const stream = (options: LanguageModel.ProviderOptions): Stream.Stream<Response.StreamPartEncoded, ModelError> =>
      Stream.unwrap(Effect.map(Effect.serviceOption(adapter.RequestSettings), (settings) =>
        request(options, Option.getOrElse(settings, () => ({})), () => new PartsSink(options.tools))))
    return LanguageModel.make({
      streamText: (options) => Stream.mapError(stream(options), toAiError("streamText")),
      generateText: (options) =>
        stream(options).pipe(
          Stream.runCollect,
          Effect.map((chunk) => collectParts([...chunk])),
          Effect.mapError(toAiError("generateText"))
        )
    })
  })

/**
 * Our `Model` over one wire protocol: what its `LanguageModel` streams, built straight into chunks
 * (B13: neither `@effect/ai`'s schema decoding of each part, which was most of the cost per delta,
 * nor a part object and its assembly per delta).
 */
const wireLayer = (
  config: Effect.Effect<WireConfig, ConfigError.ConfigError>,
  protocol: WireProtocol,
  options: AdapterOptions
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(
    Model,
    Effect.gen(function*() {
      const request = yield* wireRequest(yield* config, protocol)
      const timeouts = timeoutsOf(options)
      const chunks = (wireOptions: WireOptions, requested: RequestedSettings, watch: RequestWatch) =>
        request(wireOptions, requested, () => new adapter.ChunkSink(), watch)
      return Model.of({
        stream: (modelRequest) => adapter.directStreamOf(chunks, modelRequest, timeouts),
        ...validatorOf(options.models),
        validateSettings: settingsValidator(protocol.refusal)
      })
    })
  )

const trimSlash = (url: string) => url.replace(/\/+$/, "")

/**
 * Options of {@link openAi}.
 *
 * @since 0.2.0
 * @category options
 */
export interface OpenAiOptions extends AdapterOptions {
  /** The default model; each agent request names its own (`options.model`). */
  readonly model?: string | undefined
  /** The API key; default `OPENAI_API_KEY` from `Config` (none: no `Authorization` header, e.g. Ollama). */
  readonly apiKey?: Redacted.Redacted | undefined
  /** The endpoint including its version path; default `OPENAI_BASE_URL`, else `https://api.openai.com/v1`. */
  readonly baseUrl?: string | undefined
  /** The body field of `maxTokens`: `max_tokens` (default; every compatible endpoint) or `max_completion_tokens` (OpenAI reasoning models). */
  readonly maxTokensField?: "max_tokens" | "max_completion_tokens" | undefined
  /** Extra request headers (e.g. `OpenAI-Organization`). */
  readonly headers?: Readonly<Record<string, string>> | undefined
}

const openAiProtocol = (options: OpenAiOptions): WireProtocol => ({
  body: (wireOptions, request) =>
    openAiChat.requestBody(wireOptions, { ...request, maxTokensField: options.maxTokensField ?? "max_tokens" }),
  reply: (provider, budget) => openAiChat.reply(provider, budget),
  refusal: openAiRefusal
})

const openAiConfig = (options: OpenAiOptions) =>
  Effect.gen(function*() {
    const apiKey = options.apiKey !== undefined
      ? options.apiKey
      : Option.getOrUndefined(yield* Config.option(Config.redacted("OPENAI_API_KEY")))
    const baseUrl = options.baseUrl ?? (yield* Config.string("OPENAI_BASE_URL").pipe(
      Config.withDefault("https://api.openai.com/v1")
    ))
    const config: WireConfig = {
      provider: "openai",
      url: `${trimSlash(baseUrl)}/chat/completions`,
      headers: {
        accept: "text/event-stream",
        ...options.headers,
        ...(apiKey !== undefined ? { authorization: `Bearer ${Redacted.value(apiKey)}` } : {})
      },
      secret: apiKey,
      model: options.model,
      limits: yield* limitsOf(options)
    }
    return config
  })

/**
 * A `LanguageModel` speaking OpenAI Chat Completions (MOD-03), configured from the options and
 * `Config` (`OPENAI_API_KEY`, `OPENAI_BASE_URL`). Streams with `stream_options.include_usage`;
 * `maxTokens` per request; tool calls keep their raw argument text (MOD-02).
 *
 * @since 0.2.0
 * @category constructors
 */
export const makeOpenAiLanguageModel = (
  options: OpenAiOptions = {}
): Effect.Effect<LanguageModel.Service, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Effect.flatMap(openAiConfig(options), (config) => wireModel(config, openAiProtocol(options)))

/**
 * OpenAI Chat Completions as our `Model` (MOD-01, MOD-03): OpenAI, DeepSeek, vLLM, Ollama,
 * LM Studio — any compatible endpoint through `baseUrl`.
 *
 * @example
 * ```ts
 * import { FetchHttpClient } from "@effect/platform"
 * import { Layer } from "effect"
 * import * as LanguageModelAdapter from "effect-agent/LanguageModelAdapter"
 *
 * // DeepSeek: the key from DEEPSEEK_API_KEY is passed explicitly, the rest is the same protocol
 * const DeepSeek = LanguageModelAdapter.openAi({ baseUrl: "https://api.deepseek.com/v1" }).pipe(
 *   Layer.provide(FetchHttpClient.layer)
 * )
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const openAi = (
  options: OpenAiOptions = {}
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  wireLayer(openAiConfig(options), openAiProtocol(options), options)

/**
 * Options of {@link anthropic}.
 *
 * @since 0.2.0
 * @category options
 */
export interface AnthropicOptions extends AdapterOptions {
  /** The default model; each agent request names its own (`options.model`). */
  readonly model?: string | undefined
  /** The API key; default `ANTHROPIC_API_KEY` from `Config`. */
  readonly apiKey?: Redacted.Redacted | undefined
  /** The endpoint including its version path; default `ANTHROPIC_BASE_URL`, else `https://api.anthropic.com/v1`. */
  readonly baseUrl?: string | undefined
  /** `max_tokens` when a request sets no `maxTokens` (Messages requires one). Default 4096. */
  readonly defaultMaxTokens?: number | undefined
  /** The `anthropic-version` header. Default `2023-06-01`. */
  readonly version?: string | undefined
  /** Extra request headers (e.g. `anthropic-beta`). */
  readonly headers?: Readonly<Record<string, string>> | undefined
}

const anthropicProtocol = (options: AnthropicOptions): WireProtocol => ({
  body: (wireOptions, request) =>
    anthropicMessages.requestBody(wireOptions, { ...request, defaultMaxTokens: options.defaultMaxTokens ?? 4096 }),
  reply: (provider, budget, request) =>
    anthropicMessages.reply(provider, budget, anthropicMessages.answerToolOf(request.output)),
  refusal: anthropicRefusal
})

const anthropicConfig = (options: AnthropicOptions) =>
  Effect.gen(function*() {
    const apiKey = options.apiKey !== undefined
      ? options.apiKey
      : Option.getOrUndefined(yield* Config.option(Config.redacted("ANTHROPIC_API_KEY")))
    const baseUrl = options.baseUrl ?? (yield* Config.string("ANTHROPIC_BASE_URL").pipe(
      Config.withDefault("https://api.anthropic.com/v1")
    ))
    const config: WireConfig = {
      provider: "anthropic",
      url: `${trimSlash(baseUrl)}/messages`,
      headers: {
        accept: "text/event-stream",
        "anthropic-version": options.version ?? "2023-06-01",
        ...options.headers,
        ...(apiKey !== undefined ? { "x-api-key": Redacted.value(apiKey) } : {})
      },
      secret: apiKey,
      model: options.model,
      limits: yield* limitsOf(options)
    }
    return config
  })

/**
 * A `LanguageModel` speaking Anthropic Messages (MOD-03), configured from the options and
 * `Config` (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`).
 *
 * @since 0.2.0
 * @category constructors
 */
export const makeAnthropicLanguageModel = (
  options: AnthropicOptions = {}
): Effect.Effect<LanguageModel.Service, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Effect.flatMap(anthropicConfig(options), (config) => wireModel(config, anthropicProtocol(options)))

/**
 * Anthropic Messages as our `Model` (MOD-01, MOD-03).
 *
 * @since 0.2.0
 * @category layers
 */
export const anthropic = (
  options: AnthropicOptions = {}
): Layer.Layer<Model, ConfigError.ConfigError, HttpClient.HttpClient> =>
  wireLayer(anthropicConfig(options), anthropicProtocol(options), options)
