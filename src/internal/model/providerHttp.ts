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
import { Duration, Effect, Encoding, Redacted, Scope } from "effect"
import { ModelError } from "./error.js"
import type { RequestWatch } from "./timeouts.js"

/** How much of an error body is read (the provider's message is at its start). */
const MAX_ERROR_BODY = 16 * 1024

/**
 * How much of a provider's text an error keeps: a message sent mid-stream may be as large as an
 * event, and a reason travels into logs, events and the session log.
 */
const MAX_REASON = 4096

/** The length of the runs of a key that are scrubbed wherever they appear (SEC-08). */
const RUN = 12

/**
 * The base64 text that encodes `bytes` wherever they sit in a longer encoded text: one form per
 * alignment (0, 1 or 2 bytes before them in their first group), without the groups they share with
 * their neighbours; the key alone, unpadded, too.
 */
const base64Forms = (bytes: Uint8Array, encode: (bytes: Uint8Array) => string): Array<string> => {
  const forms = [encode(bytes).replace(/=+$/, "")]
  for (let before = 0; before < 3; before++) {
    const padded = new Uint8Array(before + bytes.length)
    padded.set(bytes, before)
    const whole = Math.floor(padded.length / 3) * 4
    forms.push(encode(padded).slice(before === 0 ? 0 : 4, whole))
  }
  return forms
}

/**
 * What is scrubbed of a key (SEC-08): the key plain, URL-encoded (either case of escapes), in base64
 * and base64url at any alignment, and every run of {@link RUN} characters of each of those forms
 * (a provider echoing the key's last characters, or a part of it); the first 8 characters of a key
 * of 12 or more, as "incorrect API key sk-abc…" messages echo them (MOD-03).
 */
const needlesOf = (key: string): ReadonlyArray<string> => {
  const bytes = new TextEncoder().encode(key)
  const url = encodeURIComponent(key)
  const forms = [
    key,
    url,
    url.replace(/%[0-9A-F]{2}/g, (escape) => escape.toLowerCase()),
    ...base64Forms(bytes, Encoding.encodeBase64),
    ...base64Forms(bytes, Encoding.encodeBase64Url)
  ]
  const needles = new Set<string>()
  for (const form of forms) {
    if (form.length === 0) continue
    needles.add(form)
    for (let at = 0; at + RUN <= form.length; at++) needles.add(form.slice(at, at + RUN))
  }
  if (key.length >= RUN) needles.add(key.slice(0, 8))
  return [...needles]
}

/** The needles of each key, computed once per `Redacted` (a config holds one for its lifetime). */
const needlesByKey = new WeakMap<Redacted.Redacted, ReadonlyArray<string>>()

const needlesFor = (secret: Redacted.Redacted): ReadonlyArray<string> => {
  let needles = needlesByKey.get(secret)
  if (needles === undefined) {
    needles = needlesOf(Redacted.value(secret))
    needlesByKey.set(secret, needles)
  }
  return needles
}

/** `text` with every occurrence of a needle replaced by `[redacted]` (overlapping ones merged). */
const scrub = (text: string, needles: ReadonlyArray<string>): string => {
  const found: Array<readonly [number, number]> = []
  for (const needle of needles) {
    for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) {
      found.push([at, at + needle.length])
    }
  }
  if (found.length === 0) return text
  found.sort((a, b) => a[0] - b[0])
  let out = ""
  let kept = 0
  for (let i = 0; i < found.length;) {
    const start = found[i]![0]
    let end = found[i]![1]
    for (i++; i < found.length && found[i]![0] <= end; i++) end = Math.max(end, found[i]![1])
    out += text.slice(kept, start) + "[redacted]"
    kept = end
  }
  return out + text.slice(kept)
}

/**
 * A provider's text as an error may carry it: at most {@link MAX_REASON} characters, scrubbed of
 * the key in every form a provider could echo it in (MOD-03, SEC-08; see `needlesOf`).
 *
 * @internal
 */
export const redact = (text: string, secret: Redacted.Redacted | undefined): string => {
  const bounded = text.length > MAX_REASON ? `${text.slice(0, MAX_REASON)}…` : text
  if (secret === undefined || Redacted.value(secret).length === 0) return bounded
  return scrub(bounded, needlesFor(secret))
}

/**
 * The error with its reason bounded and the secret redacted from it (MOD-03, SEC-08): whatever a
 * provider echoed, in a status body or an error event mid-stream, never carries the key further.
 *
 * @internal
 */
export const redactError = (secret: Redacted.Redacted | undefined) => (error: ModelError): ModelError => {
  if (error.reason === undefined) return error
  const reason = redact(error.reason, secret)
  return reason === error.reason ? error : new ModelError({ ...error, reason })
}

/** A number of `unit` milliseconds (Infinity when it has too many digits), else NaN. */
const waitOf = (value: string, unit: number): number => /^\d+(\.\d+)?$/.test(value) ? Number(value) * unit : Number.NaN

/** An HTTP date's distance from `now` (0 when past), else NaN; a date names its day or month. */
const untilDate = (value: string, now: number): number => {
  if (!/[a-z]/i.test(value)) return Number.NaN
  const date = Date.parse(value)
  return Number.isNaN(date) ? Number.NaN : Math.max(0, date - now)
}

/**
 * The wait a `retry-after-ms` (milliseconds) or `Retry-After` (seconds or an HTTP date) header asks
 * for, at most `cap` (SEC-02: `maxRetryDelay`). A header whose value is not a finite number (too
 * many digits, or not a number or date at all) asks for the cap; no header, for nothing.
 *
 * @internal
 */
export const retryAfterOf = (
  headers: Readonly<Record<string, string>>,
  now: number,
  cap: Duration.Duration
): Duration.Duration | undefined => {
  const ms = headers["retry-after-ms"]?.trim()
  const value = headers["retry-after"]?.trim()
  const hasMs = ms !== undefined && ms !== ""
  const hasValue = value !== undefined && value !== ""
  if (!hasMs && !hasValue) return undefined
  const asked = hasMs ? waitOf(ms, 1) : Number.NaN
  const wait = Number.isFinite(asked)
    ? asked
    : hasValue
    ? (/^\d/.test(value) ? waitOf(value, 1000) : untilDate(value, now))
    : Number.NaN
  const most = Duration.toMillis(cap)
  return Duration.millis(Number.isFinite(wait) ? Math.min(Math.ceil(wait), most) : most)
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
 * The `ModelError` of an HTTP status (MOD-04): 429 `RATE_LIMITED` (with `retryAfter`, at most
 * `maxRetryDelay`), 401/403 `AUTH`, 408 `TIMEOUT`, a context-length body `CONTEXT_LENGTH`, other
 * 4xx `BAD_REQUEST`, 5xx and 529 `PROVIDER`. The reason is the provider's message with the key
 * redacted (SEC-08).
 *
 * @internal
 */
export const statusError = (
  provider: string,
  status: number,
  headers: Readonly<Record<string, string>>,
  body: string,
  secret: Redacted.Redacted | undefined,
  now: number,
  maxRetryDelay: Duration.Duration
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
  const retryAfter = retryAfterOf(headers, now, maxRetryDelay)
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
  /** The longest wait a retry header may ask for (SEC-02). */
  readonly maxRetryDelay: Duration.Duration
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
    return yield* Effect.fail(
      statusError(options.provider, response.status, response.headers, body, options.secret, now, options.maxRetryDelay)
    )
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
