/**
 * What the Chat Completions and Messages models share: one streaming POST over `HttpClient`, the
 * mapping of HTTP failures to `ModelError` codes (MOD-04) and the redaction of API keys from
 * everything an error carries (MOD-03).
 *
 * @internal
 */
import type { HttpClientError, HttpClientResponse } from "@effect/platform"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import type { Stream } from "effect"
import { Duration, Effect, Redacted, Scope } from "effect"
import { ModelError } from "../AgentError.js"
import type { RequestWatch } from "./modelTimeouts.js"

/** How much of an error body is read (the provider's message is at its start). */
const MAX_ERROR_BODY = 16 * 1024

/**
 * Replaces every occurrence of a secret (and of its first 8+ characters, which providers echo in
 * "incorrect API key sk-abc…" messages) by `[redacted]` (MOD-03).
 *
 * @internal
 */
export const redact = (text: string, secret: Redacted.Redacted | undefined): string => {
  if (secret === undefined) return text
  const value = Redacted.value(secret)
  if (value.length === 0) return text
  let out = text.split(value).join("[redacted]")
  if (value.length >= 12) out = out.split(value.slice(0, 8)).join("[redacted]")
  return out
}

/**
 * The error with the secret redacted from its reason (MOD-03): whatever a provider echoed, in a
 * status body or an error event mid-stream, never carries the key further.
 *
 * @internal
 */
export const redactError = (secret: Redacted.Redacted | undefined) => (error: ModelError): ModelError => {
  if (secret === undefined || error.reason === undefined) return error
  const reason = redact(error.reason, secret)
  return reason === error.reason ? error : new ModelError({ ...error, reason })
}

/**
 * The wait a `Retry-After` (seconds or an HTTP date) or `retry-after-ms` header asks for.
 *
 * @internal
 */
export const retryAfterOf = (headers: Readonly<Record<string, string>>, now: number): Duration.Duration | undefined => {
  const ms = headers["retry-after-ms"]
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Duration.millis(Math.ceil(Number(ms)))
  const value = headers["retry-after"]?.trim()
  if (value === undefined || value === "") return undefined
  if (/^\d+(\.\d+)?$/.test(value)) return Duration.millis(Math.ceil(Number(value) * 1000))
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Duration.millis(Math.max(0, date - now))
}

/** Markers of a prompt over the model's window in the error bodies of OpenAI, DeepSeek, vLLM and Anthropic. */
const contextLengthPattern = /context[_ ]length|context window|maximum context|prompt is too long|too many tokens/i

/** The provider's own message in an error body (`{error: {message}}` or `{message}`), else the body's start. */
export const providerMessage = (body: string): string => {
  try {
    const parsed: unknown = JSON.parse(body)
    if (typeof parsed === "object" && parsed !== null) {
      const error = (parsed as Record<string, unknown>)["error"]
      const holder = typeof error === "object" && error !== null ? error as Record<string, unknown> : parsed as Record<string, unknown>
      const message = holder["message"]
      if (typeof message === "string") return message
      if (typeof error === "string") return error
    }
  } catch {
    // not JSON: the text itself
  }
  return body.slice(0, 500)
}

/**
 * The `ModelError` of an HTTP status (MOD-04): 429 `RATE_LIMITED` (with `retryAfter`), 401/403
 * `AUTH`, 408 `TIMEOUT`, a context-length body `CONTEXT_LENGTH`, other 4xx `BAD_REQUEST`, 5xx and
 * 529 `PROVIDER`. The reason is the provider's message with the key redacted.
 *
 * @internal
 */
export const statusError = (
  provider: string,
  status: number,
  headers: Readonly<Record<string, string>>,
  body: string,
  secret: Redacted.Redacted | undefined,
  now: number
): ModelError => {
  const message = redact(providerMessage(body), secret)
  const reason = `${provider} answered HTTP ${status}${message !== "" ? `: ${message}` : ""}`
  const code = status === 429
    ? "RATE_LIMITED"
    : status === 401 || status === 403
    ? "AUTH"
    : status === 408
    ? "TIMEOUT"
    : status >= 500
    ? "PROVIDER"
    : contextLengthPattern.test(body)
    ? "CONTEXT_LENGTH"
    : "BAD_REQUEST"
  const retryAfter = retryAfterOf(headers, now)
  return new ModelError({ code, reason, status, ...(retryAfter !== undefined ? { retryAfter } : {}) })
}

/**
 * The code of an error a provider sent inside a stream (`{error: {type|code}}` or an Anthropic
 * `error` event): rate limits, overload and context length keep their meaning, the rest is
 * `PROVIDER`.
 *
 * @internal
 */
export const streamErrorCode = (kind: string, message: string): string =>
  /rate_limit/i.test(kind)
    ? "RATE_LIMITED"
    : /context_length/i.test(kind) || contextLengthPattern.test(message)
    ? "CONTEXT_LENGTH"
    : /authentication|permission|invalid_api_key/i.test(kind)
    ? "AUTH"
    : "PROVIDER"

/**
 * The settings of one streaming POST.
 *
 * @internal
 */
export interface PostOptions {
  readonly provider: string
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly secret: Redacted.Redacted | undefined
  readonly body: unknown
}

/**
 * The failure of a body that broke off mid-stream (reset, dropped): `NETWORK`, retried (MOD-04).
 *
 * @internal
 */
export const droppedMidStream = (provider: string, secret: Redacted.Redacted | undefined) =>
(error: { readonly message: string }): ModelError =>
  new ModelError({
    code: "NETWORK",
    reason: `${provider}: the connection dropped mid-stream: ${redact(error.message, secret)}`
  })

/**
 * POSTs `body` as JSON and gives the body stream (bytes) of a 2xx answer. Any other status fails
 * with its `ModelError`; a transport failure (refused, reset) fails `NETWORK`. Interrupting the
 * body stream aborts the request (MOD-05): the platform client aborts the fetch when the body
 * stream ends early. With a `watch`, the request is tied to its scope instead
 * (`HttpClient.withScope`): closing it aborts the request, and a read waiting for the body fails
 * at once; a failure after its timeout fired is that timeout.
 *
 * @internal
 */
export const postEventStream = (
  client: HttpClient.HttpClient,
  options: PostOptions,
  watch?: RequestWatch | undefined
): Effect.Effect<Stream.Stream<Uint8Array, HttpClientError.ResponseError>, ModelError> => {
  const request = HttpClientRequest.post(options.url).pipe(
    HttpClientRequest.setHeaders(options.headers),
    HttpClientRequest.bodyUnsafeJson(options.body)
  )
  const execute = watch === undefined
    ? client.execute(request)
    : Effect.provideService(HttpClient.withScope(client).execute(request), Scope.Scope, watch.abortOn)
  const opened = Effect.flatMap(
    Effect.mapError(execute, (error) =>
      new ModelError({
        code: "NETWORK",
        reason: `${options.provider}: the request failed: ${redact(error.message, options.secret)}`
      })),
    (response) => response.status >= 200 && response.status < 300
      ? Effect.succeed(response.stream)
      : failedStatus(options, response)
  )
  // what fails after a timeout aborted the request is that timeout
  return watch === undefined ? opened : Effect.mapError(opened, (error) => watch.failure ?? error)
}

/** The `ModelError` of a non-2xx answer, from its status, headers and the start of its body. */
const failedStatus = (
  options: PostOptions,
  response: HttpClientResponse.HttpClientResponse
): Effect.Effect<never, ModelError> =>
  Effect.gen(function*() {
    const body = yield* response.text.pipe(
      Effect.map((text) => text.slice(0, MAX_ERROR_BODY)),
      Effect.orElseSucceed(() => "")
    )
    const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    return yield* Effect.fail(statusError(options.provider, response.status, response.headers, body, options.secret, now))
  })

/**
 * The JSON object of an SSE data line, or undefined when it is not a JSON object.
 *
 * @internal
 */
export const parseJsonObject = (text: string): Record<string, unknown> | undefined => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return undefined
  }
  return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
    ? parsed as Record<string, unknown>
    : undefined
}
