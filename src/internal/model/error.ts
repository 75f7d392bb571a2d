/**
 * `ModelError`, what a model call fails with (MOD-04), in a module of its own so that the model
 * adapters import it without importing every agent error (ARCH-02). `AgentError` re-exports it, its
 * codes and the retryable set under their public names.
 *
 * @internal
 */
import { Schema } from "effect"

/**
 * The codes a provider failure maps to (MOD-04). A model may use other codes (the scripted model
 * fails with any code a test asks for); only these have a meaning the loop acts on.
 *
 * - `RATE_LIMITED` (429; `retryAfter` from `Retry-After` when the provider sent one),
 * - `CONTEXT_LENGTH` (the prompt is longer than the model's window),
 * - `AUTH` (401/403: a missing or wrong API key),
 * - `BAD_REQUEST` (another 4xx: the request was refused as it is),
 * - `PROVIDER` (5xx, an overloaded provider, an error event or malformed output mid-stream),
 * - `NETWORK` (the connection failed or dropped),
 * - `TIMEOUT` (the request or the wait for the next chunk took too long),
 * - `CONTENT_FILTER` (the provider stopped the reply by its content policy),
 * - `NO_ROUTE` (no provider/model, or one the installed model does not serve),
 * - `OUTPUT_TOO_LARGE` (since 0.3.0: the provider sent an event, or a reply, over the adapter's
 *   `maxEventBytes`; the request was stopped at once and is not retried, SEC-02).
 *
 * @since 0.2.0
 * @category errors
 */
export type ModelErrorCode =
  | "RATE_LIMITED"
  | "CONTEXT_LENGTH"
  | "AUTH"
  | "BAD_REQUEST"
  | "PROVIDER"
  | "NETWORK"
  | "TIMEOUT"
  | "CONTENT_FILTER"
  | "NO_ROUTE"
  | "OUTPUT_TOO_LARGE"

/**
 * The codes the loop retries on its own, with backoff (MOD-04): the same request may succeed
 * later. Others are final unless a `requestError` hook asks for a retry.
 *
 * @since 0.2.0
 * @category errors
 */
export const retryableModelErrorCodes: ReadonlySet<string> = new Set<ModelErrorCode>([
  "RATE_LIMITED",
  "PROVIDER",
  "NETWORK",
  "TIMEOUT"
])

/** What to do about each provider failure (MOD-04). */
const modelErrorHints: Readonly<Record<string, string>> = {
  RATE_LIMITED: "the provider is rate limiting; the loop retries after its Retry-After, or wait and send again",
  CONTEXT_LENGTH: "the conversation is longer than the model's context window; fork a shorter session or use a larger model",
  AUTH: "check the API key (OPENAI_API_KEY / ANTHROPIC_API_KEY) and its permissions",
  BAD_REQUEST: "the provider refused the request as sent; check the model name, maxTokens and tool schemas",
  PROVIDER: "the provider failed; retrying later usually helps",
  NETWORK: "the connection to the provider failed; check the base URL and the network",
  TIMEOUT: "the provider took too long; raise requestTimeout/idleTimeout or retry",
  CONTENT_FILTER: "the provider's content policy stopped the reply; rephrase the request",
  NO_ROUTE: "set provider and model in the agent options to a route the installed Model serves",
  OUTPUT_TOO_LARGE:
    "the provider's reply was larger than the adapter accepts; ask for a shorter reply (maxTokens) or raise maxEventBytes"
}

/**
 * A model call failed. `code` is one of {@link ModelErrorCode} for provider failures (MOD-04);
 * `retryAfter` is how long the provider asked to wait (`Retry-After`), when it said. The message
 * and reason never carry an API key (MOD-03).
 *
 * @since 0.1.0
 * @category errors
 */
export class ModelError extends Schema.TaggedError<ModelError>("effect-agent/ModelError")(
  "ModelError",
  {
    code: Schema.String,
    reason: Schema.optional(Schema.String),
    cause: Schema.optional(Schema.Defect),
    /** @since 0.2.0 */
    retryAfter: Schema.optional(Schema.DurationFromSelf),
    /** @since 0.2.0 */
    status: Schema.optional(Schema.Number)
  }
) {
  override get message(): string {
    const hint = modelErrorHints[this.code]
    return `model call failed (${this.code})${this.reason !== undefined ? `: ${this.reason}` : ""}` +
      (hint !== undefined ? ` — ${hint}` : "")
  }

  /**
   * Whether the loop retries this failure on its own (MOD-04, {@link retryableModelErrorCodes}).
   *
   * @since 0.2.0
   */
  get retryable(): boolean {
    return retryableModelErrorCodes.has(this.code)
  }
}
