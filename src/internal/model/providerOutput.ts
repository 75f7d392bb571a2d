/**
 * What a provider may make us hold (SEC-02): the bytes of one SSE event while it arrives (the
 * parser counts those) and of the assistant message a reply builds (an {@link OutputBudget} counts
 * those), both bounded by the adapter's `maxEventBytes`; and how long its `Retry-After` may park a
 * request (`maxRetryDelay`). Without these, a provider that never ends a line, or never ends a
 * reply, grows a string until V8 refuses it (about 0.8 GB per stream), and `Retry-After: 86400`
 * parks a turn for a day.
 *
 * @internal
 */
import { Duration, Option } from "effect"
import { ModelError } from "./error.js"
import { defaultMaxEventBytes, utf8Length } from "../log/recordSize.js"

/**
 * The limits of one adapter.
 *
 * @internal
 */
export interface Limits {
  /** The largest SSE event and the largest assistant message, in UTF-8 bytes. */
  readonly maxEventBytes: number
  /** The longest wait a provider's retry header may ask for. */
  readonly maxRetryDelay: Duration.Duration
}

/**
 * The default of `maxEventBytes`: the session log's (DUR-05, 16 MiB), since a larger assistant
 * message could not be stored anyway.
 *
 * @internal
 */
export const defaultMaxOutputBytes: number = defaultMaxEventBytes

/**
 * The largest `maxEventBytes` accepted: 256 MiB, well under the longest string V8 can build (about
 * 2^29 UTF-16 units), so that the bound holds before the engine's own limit turns into a defect.
 *
 * @internal
 */
export const largestMaxOutputBytes: number = 256 * 1024 * 1024

/**
 * The default of `maxRetryDelay`: 60 seconds.
 *
 * @internal
 */
export const defaultMaxRetryDelay: Duration.Duration = Duration.seconds(60)

/**
 * The limits of the options, or what is wrong with them.
 *
 * @internal
 */
export const limitsOf = (options: {
  readonly maxEventBytes?: number | undefined
  readonly maxRetryDelay?: Duration.DurationInput | undefined
}): Limits | string => {
  const maxEventBytes = options.maxEventBytes ?? defaultMaxOutputBytes
  if (!Number.isSafeInteger(maxEventBytes) || maxEventBytes < 1 || maxEventBytes > largestMaxOutputBytes) {
    return `maxEventBytes must be a positive integer of at most ${largestMaxOutputBytes} (bytes), not ${
      String(options.maxEventBytes)
    }`
  }
  const maxRetryDelay = options.maxRetryDelay === undefined
    ? Option.some(defaultMaxRetryDelay)
    : Duration.decodeUnknown(options.maxRetryDelay)
  if (Option.isNone(maxRetryDelay) || !Duration.isFinite(maxRetryDelay.value)) {
    return `maxRetryDelay must be a finite duration, not ${String(options.maxRetryDelay)}`
  }
  return { maxEventBytes, maxRetryDelay: maxRetryDelay.value }
}

/**
 * The failure of a reply over `maxEventBytes` (not retryable: the same request would do it again).
 *
 * @internal
 */
export const outputTooLarge = (provider: string, what: string, maxEventBytes: number): ModelError =>
  new ModelError({
    code: "OUTPUT_TOO_LARGE",
    reason: `${provider} sent ${what} over maxEventBytes (${maxEventBytes} bytes); the request was stopped there`
  })

/**
 * What one part of the message costs beyond its text (a tool call, a content block): about its
 * fields in the logged record. Charged so that an endless run of empty parts is bounded too.
 */
const PART_BYTES = 64

/**
 * The running size of the assistant message one reply builds (SEC-02): its text, reasoning, tool
 * names and argument text, and each part. The wire replies charge what they keep; whoever feeds
 * them checks {@link failure} after each event, so the request stops as soon as the message passed
 * the limit, not after it was built.
 *
 * @internal
 */
export class OutputBudget {
  /** The bytes charged so far. */
  private used = 0
  /** Set once the message went over the limit. */
  failure: ModelError | undefined = undefined

  constructor(readonly provider: string, readonly maxEventBytes: number) {}

  /** Charges text the message grows by. */
  text(text: string): void {
    this.charge(utf8Length(text))
  }

  /** Charges a new part of the message (a tool call, a content block). */
  part(): void {
    this.charge(PART_BYTES)
  }

  private charge(bytes: number): void {
    this.used += bytes
    if (this.used > this.maxEventBytes && this.failure === undefined) {
      this.failure = outputTooLarge(this.provider, "a reply", this.maxEventBytes)
    }
  }
}
