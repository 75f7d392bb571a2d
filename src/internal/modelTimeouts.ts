/**
 * The request and idle-chunk timeouts of a model stream (MOD-04): `requestTimeout` from the start
 * of the request, `idleTimeout` for each wait for the provider's next chunk (the first included:
 * it covers the wait for the response). Either fails the stream `TIMEOUT` at once and closes the
 * provider's stream, so that its HTTP request is aborted (MOD-05).
 *
 * Two timer fibers per request and none per chunk (B13): `Stream.timeoutFail` forks a fiber and a
 * timer per pull and `Stream.interruptWhen` runs the stream in a merge, ≈160 Effect operations per
 * chunk together — and a provider streams about one chunk per delta. The idle timer sleeps until
 * the current wait would expire, then looks again. How a timer ends a wait depends on who owns
 * the HTTP request:
 * - {@link withAbortingTimeouts}, for our wire models: the consumer reads the HTTP stream itself
 *   and a timeout aborts the request, which fails a waiting read at once (≈4 operations per
 *   chunk);
 * - {@link withTimeouts}, for any other `LanguageModel`: a reader fiber reads the stream one chunk
 *   ahead, and a timeout interrupts it (≈25 operations per chunk for the hand-over).
 *
 * @internal
 */
import { Cause, Channel, Chunk, Duration, Effect, ExecutionStrategy, Exit, Fiber, Option, Scope, Stream } from "effect"
import type { Clock } from "effect"
import { ModelError } from "../AgentError.js"

/**
 * The timeouts of one request (MOD-04): the whole request, and the wait for each next chunk.
 *
 * @internal
 */
export interface Timeouts {
  readonly requestTimeout: Duration.Duration
  readonly idleTimeout: Duration.Duration
}

/** The timers of one request and what they watch: since when the consumer has been waiting for the provider. */
abstract class Watch {
  /** Since when the provider has been awaited; undefined while nobody waits for it. */
  protected waitingSince: number | undefined = undefined
  /** The timeout that ended the stream. */
  protected failure: ModelError | undefined = undefined

  constructor(protected readonly clock: Clock.Clock, private readonly timeouts: Timeouts) {}

  /** Ends the wait in progress, if any, and closes the provider's stream (`failure` is set). */
  protected abstract expire(): Effect.Effect<void>

  private fire(error: ModelError): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.failure !== undefined) return Effect.void
      this.failure = error
      return this.expire()
    })
  }

  /** Fails the stream when the whole request has taken `requestTimeout`. */
  private requestTimer(): Effect.Effect<void> {
    return Effect.flatMap(Effect.sleep(this.timeouts.requestTimeout), () =>
      this.fire(
        new ModelError({
          code: "TIMEOUT",
          reason: `the request took longer than ${Duration.format(this.timeouts.requestTimeout)} (requestTimeout)`
        })
      ))
  }

  /** Fails the stream when one wait for the provider takes `idleTimeout`: sleeps until it would, then looks again. */
  private idleTimer(): Effect.Effect<void> {
    const idle = Duration.toMillis(this.timeouts.idleTimeout)
    const since = this.waitingSince
    const left = since === undefined ? idle : since + idle - this.clock.unsafeCurrentTimeMillis()
    if (left > 0) return Effect.flatMap(Effect.sleep(Duration.millis(left)), () => this.idleTimer())
    return this.fire(
      new ModelError({
        code: "TIMEOUT",
        reason: `no chunk arrived for ${Duration.format(this.timeouts.idleTimeout)} (idleTimeout)`
      })
    )
  }

  /** Forks both timers into `scope`. */
  startTimers(scope: Scope.Scope): Effect.Effect<void> {
    return Effect.zipRight(
      fork(this.requestTimer(), scope),
      fork(Effect.suspend(() => this.idleTimer()), scope)
    )
  }
}

/** Forks `effect` into `scope` (interruptible: the start runs uninterruptibly). */
const fork = <R>(effect: Effect.Effect<void, never, R>, scope: Scope.Scope) =>
  Effect.forkIn(Effect.interruptible(effect), scope)

/**
 * Runs `use` over what `start` made, in a scope of its own: started uninterruptibly (nothing it
 * forks can leak) and closed when the consumer's stream ends, fails or is interrupted.
 */
const scopedStream = <S, A, R>(
  start: (scope: Scope.Scope, clock: Clock.Clock) => Effect.Effect<S, never, R>,
  use: (made: S) => Channel.Channel<Chunk.Chunk<A>, unknown, ModelError, unknown, unknown, unknown>
): Stream.Stream<A, ModelError, R> =>
  Stream.fromChannel(
    Channel.acquireUseRelease(
      Effect.flatMap(Scope.make(), (scope) =>
        Effect.clockWith((clock) => Effect.map(start(scope, clock), (made) => ({ scope, made })))),
      ({ made }) => use(made),
      ({ scope }, exit) => Scope.close(scope, exit)
    )
  )

/**
 * The watch of one of our wire requests: the consumer's reads pass through {@link stage}, which
 * notes when each wait for the provider starts; a timeout aborts the HTTP request, so that a read
 * waiting for the body fails at once, and the stage turns what follows into the timeout.
 */
class AbortingWatch extends Watch {
  constructor(clock: Clock.Clock, timeouts: Timeouts, private readonly abort: Effect.Effect<void>) {
    super(clock, timeouts)
  }

  protected expire(): Effect.Effect<void> {
    return this.abort
  }

  private done(): void {
    this.waitingSince = undefined
  }

  /** Between the provider's stream and the consumer: one read per pull of the consumer. */
  stage<A>(): Channel.Channel<Chunk.Chunk<A>, Chunk.Chunk<A>, ModelError, ModelError, unknown, unknown> {
    const read: Channel.Channel<Chunk.Chunk<A>, Chunk.Chunk<A>, ModelError, ModelError, unknown, unknown> = Channel
      .suspend(() => {
        if (this.failure !== undefined) return Channel.fail(this.failure)
        this.waitingSince = this.clock.unsafeCurrentTimeMillis()
        return Channel.readWithCause({
          onInput: (chunk: Chunk.Chunk<A>) => {
            this.done()
            return Channel.flatMap(Channel.write(chunk), () => read)
          },
          onFailure: (cause) => {
            this.done()
            // the aborted request's failure is the timeout's
            return this.failure !== undefined ? Channel.fail(this.failure) : Channel.failCause(cause)
          },
          onDone: () => {
            this.done()
            return Channel.void
          }
        })
      })
    return read
  }
}

/**
 * The stream of one of our wire requests with both timeouts: `request` streams the reply with its
 * HTTP request tied to the scope it is given (`HttpClient.withScope`), which a timeout closes.
 *
 * @internal
 */
export const withAbortingTimeouts = <A>(
  request: (abortOn: Scope.Scope) => Stream.Stream<A, ModelError>,
  timeouts: Timeouts
): Stream.Stream<A, ModelError> =>
  scopedStream(
    (scope, clock) =>
      Effect.flatMap(Scope.fork(scope, ExecutionStrategy.sequential), (abortOn) => {
        const watch = new AbortingWatch(clock, timeouts, Scope.close(abortOn, Exit.void))
        return Effect.as(watch.startTimers(scope), { watch, abortOn })
      }),
    ({ abortOn, watch }) => Channel.pipeTo(Stream.toChannel(request(abortOn)), watch.stage<A>())
  )

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
  scopedStream(
    (scope, clock) => {
      const watch = new ReadAheadWatch<A>(clock, timeouts)
      const reader = Effect.scoped(Effect.flatMap(Stream.toPull(stream), (pull) => watch.read(pull)))
      return Effect.flatMap(fork(reader, scope), (readerFiber) => {
        watch.readerFiber = readerFiber
        return Effect.as(watch.startTimers(scope), watch)
      })
    },
    (watch) => watch.channel
  )
