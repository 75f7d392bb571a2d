/**
 * The request and idle-chunk timeouts of a model stream (MOD-04): `requestTimeout` from the start
 * of the request, `idleTimeout` for each wait for the provider's next chunk (the first included:
 * it covers the wait for the response). Either fails the stream `TIMEOUT` at once and closes the
 * provider's stream, so that its HTTP request is aborted (MOD-05).
 *
 * One timer fiber per request and none per chunk (B13): `Stream.timeoutFail` forks a fiber and a
 * timer per pull and `Stream.interruptWhen` runs the stream in a merge, ≈160 Effect operations per
 * chunk together — and a provider streams about one chunk per delta. The timer sleeps until the
 * earlier deadline, then looks again. How it ends a wait depends on who owns the HTTP request:
 * - {@link withAbortingTimeouts}, for our wire models: the stream reading the HTTP body tells the
 *   watch when it waits (no stage of its own), and a timeout aborts the request, which fails a
 *   waiting read at once;
 * - {@link withTimeouts}, for any other `LanguageModel`: a reader fiber reads the stream one chunk
 *   ahead, and a timeout interrupts it (≈25 operations per chunk for the hand-over).
 *
 * @internal
 */
import { Cause, Channel, Chunk, Duration, Effect, Exit, Fiber, FiberId, Option, Scope, Stream } from "effect"
import type { Clock } from "effect"
import { ModelError } from "./error.js"

/**
 * The timeouts of one request (MOD-04): the whole request, and the wait for each next chunk.
 *
 * @internal
 */
export interface Timeouts {
  readonly requestTimeout: Duration.Duration
  readonly idleTimeout: Duration.Duration
}

/** The timer of one request and what it watches: since when the consumer has been waiting for the provider. */
abstract class Watch {
  /** Since when the provider has been awaited; undefined while nobody waits for it. */
  protected waitingSince: number | undefined = undefined
  /** The timeout that ended the stream. */
  failure: ModelError | undefined = undefined
  /** When the whole request times out (clock milliseconds). */
  private readonly requestDeadline: number
  private readonly idle: number

  constructor(protected readonly clock: Clock.Clock, private readonly timeouts: Timeouts) {
    this.requestDeadline = clock.unsafeCurrentTimeMillis() + Duration.toMillis(timeouts.requestTimeout)
    this.idle = Duration.toMillis(timeouts.idleTimeout)
  }

  /** Ends the wait in progress, if any, and closes the provider's stream (`failure` is set). */
  protected abstract expire(): Effect.Effect<void>

  private fire(error: ModelError): Effect.Effect<void> {
    if (this.failure !== undefined) return Effect.void
    this.failure = error
    return this.expire()
  }

  /**
   * Both timeouts in one timer (B13: one fiber and one clock timer per request): it sleeps until
   * the earlier of the request's deadline and the current wait's, then looks again — a chunk
   * that arrived meanwhile moved the wait's deadline.
   */
  readonly timer: Effect.Effect<void> = Effect.suspend(() => {
    const now = this.clock.unsafeCurrentTimeMillis()
    if (now >= this.requestDeadline) {
      return this.fire(
        new ModelError({
          code: "TIMEOUT",
          reason: `the request took longer than ${Duration.format(this.timeouts.requestTimeout)} (requestTimeout)`
        })
      )
    }
    const since = this.waitingSince
    if (since !== undefined && now >= since + this.idle) {
      return this.fire(
        new ModelError({
          code: "TIMEOUT",
          reason: `no chunk arrived for ${Duration.format(this.timeouts.idleTimeout)} (idleTimeout)`
        })
      )
    }
    const next = Math.min(this.requestDeadline, (since ?? now) + this.idle)
    return Effect.flatMap(this.clock.sleep(Duration.millis(next - now)), () => this.timer)
  })
}

/**
 * What a stream under {@link withAbortingTimeouts} tells the timer, and what it reads of it: the
 * scope its HTTP request is tied to, and the timeout that aborted it.
 *
 * @internal
 */
export interface RequestWatch {
  /** The scope the HTTP request is tied to (`HttpClient.withScope`): a timeout closes it. */
  readonly abortOn: Scope.Scope
  /** The timeout that fired, if one did: what a failure after the abort is to be reported as. */
  readonly failure: ModelError | undefined
  /** A wait for the provider starts now (a read of the body that will not be answered at once). */
  waiting(): void
  /** A chunk arrived: the stream is not waiting for the provider until it reads again. */
  received(): void
}

/**
 * The watch of one of our wire requests: the stream reading the HTTP body says when each wait for
 * the provider starts and ends; a timeout aborts the HTTP request, so that a read waiting for the
 * body fails at once, and the stream turns what follows into the timeout. The first wait (for the
 * response) starts with the request.
 */
class AbortingWatch extends Watch implements RequestWatch {
  constructor(clock: Clock.Clock, timeouts: Timeouts, readonly abortOn: Scope.CloseableScope) {
    super(clock, timeouts)
    this.waitingSince = clock.unsafeCurrentTimeMillis()
  }

  protected expire(): Effect.Effect<void> {
    return Scope.close(this.abortOn, Exit.void)
  }

  waiting(): void {
    this.waitingSince = this.clock.unsafeCurrentTimeMillis()
  }

  received(): void {
    this.waitingSince = undefined
  }
}

/**
 * `stream` telling `watch` when it waits for its upstream: a stage for a stream that does not read
 * its HTTP body itself (the wire models' SSE reader does, without a stage of its own).
 *
 * @internal
 */
export const watched = <A>(
  stream: Stream.Stream<A, ModelError>,
  watch: RequestWatch
): Stream.Stream<A, ModelError> => {
  const read: Channel.Channel<Chunk.Chunk<A>, Chunk.Chunk<A>, ModelError, ModelError, unknown, unknown> = Channel
    .suspend(() => {
      if (watch.failure !== undefined) return Channel.fail(watch.failure)
      watch.waiting()
      return Channel.readWithCause({
        onInput: (chunk: Chunk.Chunk<A>) => {
          watch.received()
          return Channel.flatMap(Channel.write(chunk), () => read)
        },
        onFailure: (cause) => {
          watch.received()
          // the aborted request's failure is the timeout's
          return watch.failure !== undefined ? Channel.fail(watch.failure) : Channel.failCause(cause)
        },
        onDone: () => {
          watch.received()
          return Channel.void
        }
      })
    })
  return Stream.pipeThroughChannel(stream, read)
}

/**
 * The stream of one of our wire requests with both timeouts (MOD-04): `request` streams the reply
 * with its HTTP request tied to `watch.abortOn` (`HttpClient.withScope`), which a timeout closes,
 * and tells the watch when it waits for the provider. The timer is one daemon fiber, interrupted
 * (not awaited) when the stream ends, fails or is interrupted; the abort scope is closed then too,
 * which aborts a request still running (MOD-05).
 *
 * @internal
 */
export const withAbortingTimeouts = <A>(
  request: (watch: RequestWatch) => Stream.Stream<A, ModelError>,
  timeouts: Timeouts
): Stream.Stream<A, ModelError> =>
  Stream.fromChannel(
    Channel.acquireUseRelease(
      Effect.clockWith((clock) =>
        Effect.flatMap(Scope.make(), (abortOn) => {
          const watch = new AbortingWatch(clock, timeouts, abortOn)
          return Effect.map(Effect.forkDaemon(Effect.interruptible(watch.timer)), (timer) => ({ watch, timer }))
        })
      ),
      ({ watch }) => Stream.toChannel(request(watch)),
      ({ timer, watch }, exit) =>
        Effect.zipRight(
          Effect.sync(() => timer.unsafeInterruptAsFork(FiberId.none)),
          Scope.close(watch.abortOn, exit)
        )
    )
  )

/** Forks `effect` into `scope` (interruptible: the start runs uninterruptibly). */
const fork = <R>(effect: Effect.Effect<void, never, R>, scope: Scope.Scope) =>
  Effect.forkIn(Effect.interruptible(effect), scope)

/** What the reader read: a chunk, or undefined at the end. */
type Read<A> = Exit.Exit<Chunk.Chunk<A> | undefined, ModelError>

/** What a pull's failure means: the end of the stream, or its failure. */
const endOrFailure = (cause: Cause.Cause<Option.Option<ModelError>>): Read<never> => {
  const failure = Cause.flipCauseOption(cause)
  return Option.isNone(failure) ? Exit.succeed(undefined) : Exit.failCause(failure.value)
}

/**
 * The watch of a stream someone else owns: a reader fiber reads it one chunk ahead and hands each
 * chunk to the consumer; a timeout fails a waiting consumer and interrupts the reader, which closes
 * the stream even while the consumer is busy.
 */
class ReadAheadWatch<A> extends Watch {
  /** What the reader read and no taker has taken yet (an end or a failure stays). */
  private ready: Read<A> | undefined = undefined
  /** The consumer, waiting for the reader. */
  private taker: ((read: Read<A>) => void) | undefined = undefined
  /** The reader, waiting for the consumer to take `ready`. */
  private reader: ((taken: Effect.Effect<void>) => void) | undefined = undefined
  /** The reader's fiber. */
  readerFiber: Fiber.Fiber<void> | undefined = undefined

  protected expire(): Effect.Effect<void> {
    const taker = this.taker
    this.taker = undefined
    taker?.(Exit.fail(this.failure!))
    return this.readerFiber === undefined ? Effect.void : Fiber.interrupt(this.readerFiber)
  }

  /** The reader fiber: pull, hand over, wait while the handed chunk is not taken; then the end. */
  read<R>(pull: Effect.Effect<Chunk.Chunk<A>, Option.Option<ModelError>, R>): Effect.Effect<void, never, R> {
    const next = (): Effect.Effect<void, never, R> => {
      this.waitingSince = this.clock.unsafeCurrentTimeMillis()
      return Effect.matchCauseEffect(pull, {
        onFailure: (cause) => {
          this.waitingSince = undefined
          this.offer(endOrFailure(cause))
          return Effect.void
        },
        onSuccess: (chunk) => {
          this.waitingSince = undefined
          this.offer(Exit.succeed(chunk))
          return this.ready === undefined ? next() : Effect.flatMap(this.untaken, next)
        }
      })
    }
    return Effect.suspend(next)
  }

  /** Hands what the reader read to a waiting taker, else keeps it for the next take. */
  private offer(read: Read<A>): void {
    const taker = this.taker
    if (taker === undefined) {
      this.ready = read
      return
    }
    this.taker = undefined
    taker(read)
  }

  /** Waits until the consumer takes the chunk the reader holds. */
  private readonly untaken: Effect.Effect<void> = Effect.async((resume) => {
    if (this.ready === undefined) return resume(Effect.void)
    this.reader = resume
    return Effect.sync(() => {
      this.reader = undefined
    })
  })

  /** The consumer's pull: the timeout that fired, else the chunk read ahead, else the next one. */
  private readonly take: Effect.Effect<Chunk.Chunk<A> | undefined, ModelError> = Effect.suspend(() => {
    if (this.failure !== undefined) return Effect.fail(this.failure)
    const ready = this.ready
    if (ready === undefined) {
      return Effect.async<Chunk.Chunk<A> | undefined, ModelError>((resume) => {
        this.taker = resume
        return Effect.sync(() => {
          this.taker = undefined
        })
      })
    }
    if (Exit.isSuccess(ready) && ready.value !== undefined) {
      this.ready = undefined
      const reader = this.reader
      if (reader !== undefined) {
        this.reader = undefined
        reader(Effect.void)
      }
    }
    return ready
  })

  /** The consumer's side: a channel that writes what it takes until the end. */
  readonly channel: Channel.Channel<Chunk.Chunk<A>, unknown, ModelError, unknown, void, unknown> = Channel.flatMap(
    Channel.fromEffect(this.take),
    (chunk) => chunk === undefined ? Channel.void : Channel.flatMap(Channel.write(chunk), () => this.channel)
  )
}

/**
 * Any provider's stream with both timeouts, read one chunk ahead by a reader fiber.
 *
 * @internal
 */
export const withTimeouts = <A, R>(
  stream: Stream.Stream<A, ModelError, R>,
  timeouts: Timeouts
): Stream.Stream<A, ModelError, R> =>
  Stream.fromChannel(
    Channel.acquireUseRelease(
      Effect.flatMap(Scope.make(), (scope) =>
        Effect.clockWith((clock) => {
          const watch = new ReadAheadWatch<A>(clock, timeouts)
          const reader = Effect.scoped(Effect.flatMap(Stream.toPull(stream), (pull) => watch.read(pull)))
          return Effect.flatMap(fork(reader, scope), (readerFiber) => {
            watch.readerFiber = readerFiber
            return Effect.as(fork(watch.timer, scope), { scope, watch })
          })
        })),
      ({ watch }) => watch.channel,
      ({ scope }, exit) => Scope.close(scope, exit)
    )
  )
