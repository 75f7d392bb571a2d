/**
 * The loop's retry of failed model requests (MOD-04): retryable codes (`RATE_LIMITED`,
 * `PROVIDER`, `NETWORK`, `TIMEOUT`) are retried on a `Schedule` — exponential backoff with jitter,
 * or exactly the provider's `Retry-After` when it sent one — up to `maxRequestRetries`; other
 * codes are retried only when the `requestError` hooks say so (at once, as before). Each retry is
 * announced before its wait, so the loop can publish `ModelRetry` and UIs drop the failed
 * attempt's partial text.
 *
 * @internal
 */
import { Cause, Duration, Effect, Exit, Option, Schedule } from "effect"
import { ModelError } from "./error.js"

/**
 * The knobs of the backoff.
 *
 * @internal
 */
export interface RetryPolicy {
  /** Retries after the first attempt (`maxRequestRetries`); 0 disables retrying. */
  readonly maxRetries: number
  /** The first backoff delay (before jitter). Default 1 second. */
  readonly base?: Duration.DurationInput | undefined
  /** The growth of each next delay. Default 2. */
  readonly factor?: number | undefined
  /**
   * The longest backoff delay; a provider's `Retry-After` is honoured even when longer (our adapters
   * cap what a header may ask at their `maxRetryDelay`, SEC-02). Default 30 seconds.
   */
  readonly maxDelay?: Duration.DurationInput | undefined
}

/**
 * One failed attempt, as the schedule sees it: the error and its number (from 1).
 *
 * @internal
 */
export interface Failure {
  readonly error: ModelError
  readonly attempt: number
}

/**
 * A retry about to happen: after failed attempt `attempt`, the next one starts after `delay`.
 *
 * @internal
 */
export interface RetryInfo {
  readonly attempt: number
  readonly error: ModelError
  readonly delay: Duration.Duration
}

/**
 * The backoff `Schedule` over failures: it continues while the error is retryable, waits the
 * provider's `retryAfter` when there is one, else a jittered exponential delay capped at
 * `maxDelay`, and runs `onRetry` with the delay before waiting. Its output is the failure.
 *
 * @internal
 */
export const backoff = <R>(
  policy: RetryPolicy,
  onRetry: (info: RetryInfo) => Effect.Effect<void, never, R>
): Schedule.Schedule<Failure, Failure, R> => {
  const cap = Duration.decode(policy.maxDelay ?? Duration.seconds(30))
  return Schedule.exponential(policy.base ?? Duration.seconds(1), policy.factor ?? 2).pipe(
    Schedule.jittered,
    Schedule.whileInput((failure: Failure) => failure.error.retryable),
    Schedule.passthrough,
    Schedule.modifyDelayEffect((failure, delay) => {
      // whole milliseconds: a jittered delay is fractional, and clocks (TestClock too) then stay integral
      const wait = Duration.millis(Math.ceil(Duration.toMillis(failure.error.retryAfter ?? Duration.min(delay, cap))))
      return Effect.as(onRetry({ attempt: failure.attempt, error: failure.error, delay: wait }), wait)
    })
  )
}

/**
 * How {@link retrying} runs.
 *
 * @internal
 */
export interface RetryOptions<E2, R2, R3> {
  readonly policy: RetryPolicy
  /** Asked for a failure whose code is not retryable (the `requestError` hooks); none: final. */
  readonly decide?: ((failure: Failure) => Effect.Effect<"retry" | "fail", E2, R2>) | undefined
  /** Runs before each retry's wait (the loop publishes `ModelRetry`). */
  readonly onRetry: (info: RetryInfo) => Effect.Effect<void, never, R3>
}

/**
 * Runs `attempt` until it succeeds or fails for good (MOD-04). A `ModelError` with a retryable
 * code is retried on {@link backoff}; another code when `decide` answers `"retry"` (at once);
 * either way at most `policy.maxRetries` times. Interruptions, defects and other errors are never
 * retried. The last attempt's error is the one that fails. Only the backoff wait is made
 * interruptible: `attempt`, `decide` and `onRetry` run with the caller's interruptibility.
 *
 * @internal
 */
export const retrying = <A, E, R, E2 = never, R2 = never, R3 = never>(
  attempt: (n: number) => Effect.Effect<A, E | ModelError, R>,
  options: RetryOptions<E2, R2, R3>
): Effect.Effect<A, E | ModelError | E2, R | R2 | R3> =>
  Effect.suspend(() => {
    // the Schedule's driver is made at the first retryable failure: a request that succeeds pays
    // none of it (B5); the retries after share it
    let driver: Schedule.ScheduleDriver<Failure, Failure, R3> | undefined
    const wait = (info: Failure) =>
      driver !== undefined ? driver.next(info) : Effect.flatMap(
        Schedule.driver(backoff(options.policy, options.onRetry)),
        (made) => {
          driver = made
          return made.next(info)
        }
      )
    const run = (n: number): Effect.Effect<A, E | ModelError | E2, R | R2 | R3> =>
      Effect.catchAllCause(attempt(n), (cause) => {
        const exit = Exit.failCause(cause)
        const failure = Cause.failureOption(cause)
        if (Cause.isInterrupted(cause) || Option.isNone(failure) || !(failure.value instanceof ModelError)) {
          return exit
        }
        const error = failure.value
        if (n > options.policy.maxRetries) return exit
        if (error.retryable) {
          // the driver's wait is the schedule's: it ends (None) when the schedule is done; the wait
          // is interruptible even when the caller is not (a cancel during a backoff lands at once)
          return Effect.matchEffect(Effect.interruptible(wait({ error, attempt: n })), {
            onFailure: () => exit,
            onSuccess: () => run(n + 1)
          })
        }
        if (options.decide === undefined) return exit
        return Effect.flatMap(options.decide({ error, attempt: n }), (decision) =>
          decision === "retry"
            ? Effect.zipRight(options.onRetry({ attempt: n, error, delay: Duration.zero }), run(n + 1))
            : exit)
      })
    return run(1)
  })
