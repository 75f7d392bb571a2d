/**
 * The Session implementation: an in-memory log with one writer fiber (SES-02) forked into the
 * session's Scope by the first append (CORE-01); a writer that dies fails every pending and later
 * caller with its cause, so none waits forever; events are committed only after the writer acknowledged, published
 * after commit, with the model-visible history and the turn state folded incrementally.
 *
 * @internal
 */
import { Cause, Effect, Either, Exit, Fiber, Option, Scope } from "effect"
import * as fiberModule from "../fiber.js"
import type { Array as Arr, Clock, FiberRefs, Tracer } from "effect"
import type { Message, SessionId } from "../../Message.js"
import type { Session, SessionPlan } from "../../Session.js"
import * as eventCursor from "./eventCursor.js"
import * as usage from "./usage.js"
import * as SessionError from "../../SessionError.js"
import type { CoreEventInput, CustomEventInput, JsonRecord, SessionEvent, SessionHeader } from "../../SessionEvent.js"
import { snapshot } from "../json.js"
import type { SessionWriter } from "../../SessionPersistence.js"
import { currentInitiatorRef } from "../agent/initiator.js"
import * as codec from "./eventCodec.js"
import * as Feed from "../feed.js"
import * as history from "./history.js"
import * as observability from "../observability.js"


/**
 * A header's `meta` (PUB-02): plain JSON in an object, copied, else `InvalidEventData` naming the
 * problem. What `Session.plan` and the gateways' requests (ARCH-04) both check.
 *
 * @internal
 */
export const headerMeta = (meta: unknown): Either.Either<JsonRecord, SessionError.InvalidEventData> => {
  const copied = snapshot(meta ?? {})
  if (copied._tag === "Left" || typeof copied.value !== "object" || copied.value === null || Array.isArray(copied.value)) {
    return Either.left(
      new SessionError.InvalidEventData({
        type: "(header meta)",
        reason: copied._tag === "Left" ? `${copied.problem.path}: ${copied.problem.reason}` : "meta must be a JSON object"
      })
    )
  }
  return Either.right(copied.value as JsonRecord)
}

/**
 * What only the inbox, the loop and repair may do with a session (SES-00).
 *
 * @internal
 */
export interface SessionCore {
  /** Appends core events as one writer batch. */
  readonly appendCore: (
    events: Arr.NonEmptyReadonlyArray<CoreEventInput>
  ) => Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError>
  /** The highest turn number opened in the log (0 when none). */
  readonly lastTurn: () => number
  /** The turn open at the end of the log, if any. */
  readonly openTurn: () => number | undefined
  /** The seq of the open turn's `turn/start`, if a turn is open (EVS-02: what `TurnStarted` mirrors). */
  readonly openTurnSeq: () => number | undefined
  /** The log length at the end of the last closed turn (FORK-01's default boundary). */
  readonly closedLength: () => number
  /** The current length of the log. */
  readonly length: () => number
  /** The live log itself (read-only use, no copy). */
  readonly log: () => ReadonlyArray<SessionEvent>
  /** Marks the session closed and stops its writer fiber after what was queued. */
  readonly close: Effect.Effect<void>
  /**
   * CORE-06: when the writer fiber was never started, closes the session to appends at once (later
   * ones fail `SessionClosed`, SES-04; none can start a writer) and returns true: its `close` then
   * cannot wait on a write. False when a writer fiber exists (or the session is closed already).
   */
  readonly sealIfIdle: () => boolean
  /**
   * CORE-06: gives up on a write that stalls (the runtime is released after a teardown timed out).
   * Every caller waiting for the writer, and every later one, fails `PersistenceError` now; the
   * writer fiber finishes that write on its own, answering nobody, and its writer stays held.
   */
  readonly abandon: (reason: string) => void
}

/**
 * The core of a session built here (ARCH-01: the session's own state, held by the session itself, not
 * a side table). The inbox, the loop and repair only ever hold sessions they built.
 *
 * @internal
 */
export const core = (session: Session): SessionCore => {
  if (session instanceof LiveSession) return session[stateKey]
  throw new Error(
    `session ${JSON.stringify(session.id)} was not made by effect-agent (Session.make, SessionStore or AgentLoop): ` +
      "an inbox or an agent needs a session made there"
  )
}

/**
 * The log length at the end of the last closed turn of `events` (FORK-01's default boundary), for a
 * session read through its public surface.
 *
 * @internal
 */
export const closedLengthOf = (events: ReadonlyArray<SessionEvent>): number => {
  const turns = new TurnState()
  for (let i = 0; i < events.length; i++) turns.fold(events[i]!, i + 1)
  return turns.closedLength
}

/** An event as the writer receives it: validated, not yet stamped. */
interface Input {
  readonly type: string
  readonly data: unknown
}

type AppendError = SessionError.SessionAppendError

type AppendExit<A> = Exit.Exit<A, AppendError>

/**
 * One caller waiting in a batch: `append` (one event, resolves with it) or `appendAll`/`appendCore`
 * (resolves with the array); `resume` completes the caller.
 */
type Request =
  | {
    readonly one: Input
    readonly resume: (exit: AppendExit<SessionEvent>) => void
    /** OBS-01: the caller's span, when a tracer is installed (the commit span's parent). */
    readonly parent?: Tracer.AnySpan | undefined
  }
  | {
    readonly one: undefined
    readonly many: Arr.NonEmptyReadonlyArray<Input>
    readonly resume: (exit: AppendExit<Arr.NonEmptyReadonlyArray<SessionEvent>>) => void
    readonly parent?: Tracer.AnySpan | undefined
  }

/** Whether a writer refused a batch for what it holds (DUR-05), not for a failure to store it. */
const isRefusedContent = (cause: Cause.Cause<unknown>): boolean => {
  const failure = Cause.failureOption(cause)
  if (Option.isNone(failure)) return false
  const tag = (failure.value as { readonly _tag?: unknown } | null)?._tag
  return tag === "InvalidEventData" || tag === "SessionFull"
}

/** The committed form of an input: its seq and time assigned, frozen. */
const stamp = (input: Input, seq: number, time: number): SessionEvent =>
  Object.freeze({ seq, time, type: input.type, data: input.data }) as SessionEvent

/**
 * Turn bookkeeping folded one event at a time.
 *
 * @internal
 */
export class TurnState {
  lastTurn = 0
  openTurn: number | undefined = undefined
  openTurnSeq: number | undefined = undefined
  closedLength = 0
  fold(event: SessionEvent, lengthAfter: number): void {
    if (event.type === "turn/start") {
      const turn = (event.data as { readonly turn: number }).turn
      this.lastTurn = Math.max(this.lastTurn, turn)
      this.openTurn = turn
      this.openTurnSeq = event.seq
    } else if (event.type === "turn/end") {
      this.openTurn = undefined
      this.openTurnSeq = undefined
    }
    if (this.openTurn === undefined) this.closedLength = lengthAfter
  }
}

/** @internal */
export const make = (options: MakeOptions): Effect.Effect<Session, never, Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) => makeIn(scope, options))

/** @internal */
export interface MakeOptions {
  readonly header: SessionHeader
  /** Events already stored (or validated seed events when there is no writer). */
  readonly events: ReadonlyArray<SessionEvent>
  readonly writer: SessionWriter | undefined
  /**
   * The FiberRefs the writer fiber starts with (CORE-01, §6.3: no initiator, parent span or log
   * annotations of whoever built the session); default the constructing fiber's, with those reset.
   * A factory passes the background FiberRefs it computed once, so no session keeps its creator's
   * FiberRefs and span (B2).
   */
  readonly refs?: FiberRefs.FiberRefs | undefined
}

/**
 * `make` with its Scope given: the session closes when `scope` closes (a factory that holds the
 * session's Scope saves providing it as a service, B1).
 *
 * @internal
 */
export const makeIn = (scope: Scope.Scope, options: MakeOptions): Effect.Effect<Session> =>
  // the FiberRefs are read only when not given (B1)
  options.refs === undefined
    ? Effect.flatMap(
      Effect.runtime<never>(),
      (runtime) => makeWith(scope, options, fiberModule.isolatedRefs(runtime, [currentInitiatorRef]))
    )
    : makeWith(scope, options, options.refs)

/**
 * A live session's state record, and its core (SES-00): the log with the model-visible history, the
 * turn state and the usage folded incrementally; the writer fiber's batches (SES-02). Its core
 * methods live on the prototype: a session is two small objects, not a closure per method (B2).
 */
class SessionState implements SessionCore {
  /** The committed log (the core's `log()`). */
  readonly entries: Array<SessionEvent>
  readonly messages: Array<Message> = []
  readonly turns = new TurnState()
  usageSums: usage.Sums | undefined = undefined
  eventsSnapshot: ReadonlyArray<SessionEvent> | undefined = undefined
  messagesSnapshot: ReadonlyArray<Message> | undefined = undefined
  isClosed = false
  readonly feed = Feed.makeUnsafe<SessionEvent>()
  // the writer fiber is started by the first append (SES-02: still one per session)
  writerFiber: Fiber.RuntimeFiber<void> | undefined = undefined
  /** Set once the writer fiber is being forked (the fork and its record are two operations). */
  isWriterStarted = false
  /** Why the writer fiber ended, once it did: every later request fails with it (CORE-01). */
  writerEnd: Exit.Exit<never, SessionError.SessionAppendError> | undefined = undefined
  /** The batch the writer took and has not answered yet: failed with the cause if the writer dies. */
  taken: ReadonlyArray<Request> | undefined = undefined
  /** Set by `abandon`: the writer answers nobody any more. */
  isAbandoned = false
  /**
   * The next batch: the requests made since the writer last took one. A request joins it until the
   * writer takes it, so everything made meanwhile — in particular while a write is in flight — goes
   * out together, in call order (SES-02). There is never more than one waiting batch.
   */
  open: Array<Request> | undefined = undefined
  /** The idle writer's wake-up, while it waits for a batch (or for the close). */
  wake: ((next: Effect.Effect<void>) => void) | undefined = undefined
  /** Made when the writer starts (an idle session has none): see `startWriter`. */
  writerLoop: WriterLoop | undefined = undefined
  /** SES-04: the close, added to the session's Scope. */
  readonly close: Effect.Effect<void>
  /** OBS-01/02: the writer fiber's tracer (commit spans only with a non-default one). */
  readonly telemetry: observability.Telemetry
  constructor(
    readonly id: SessionId,
    readonly scope: Scope.Scope,
    readonly writer: SessionWriter | undefined,
    readonly refs: FiberRefs.FiberRefs,
    stored: ReadonlyArray<SessionEvent>
  ) {
    this.entries = stored.slice()
    for (let i = 0; i < this.entries.length; i++) {
      const event = this.entries[i]!
      history.fold(this.messages, event, this.entries)
      this.turns.fold(event, i + 1)
      this.usageSums = usage.add(this.usageSums, event)
    }
    this.close = closeOf(this)
    this.telemetry = observability.fromRefs(refs)
  }
  appendCore(events: Arr.NonEmptyReadonlyArray<CoreEventInput>) {
    return appendCoreEvents(this, events)
  }
  lastTurn() {
    return this.turns.lastTurn
  }
  openTurn() {
    return this.turns.openTurn
  }
  openTurnSeq() {
    return this.turns.openTurnSeq
  }
  closedLength() {
    return this.turns.closedLength
  }
  length() {
    return this.entries.length
  }
  log() {
    return this.entries
  }
  sealIfIdle() {
    if (this.isWriterStarted || this.isClosed) return false
    this.isClosed = true
    return true
  }
  abandon(reason: string) {
    this.isAbandoned = true
    failPending(this, Exit.fail(new SessionError.PersistenceError({ reason })))
  }
}

/** What the writer fiber runs, made once when it starts. */
interface WriterLoop {
  /** The loop's next step: the waiting batch, else the end after a close, else a wait. */
  readonly next: () => Effect.Effect<void>
  /** What a woken writer runs: the loop's next step, evaluated when the writer runs (not at wake-up). */
  readonly resume: Effect.Effect<void>
  /** The idle writer's wait for a batch or the close. */
  readonly waitForWork: Effect.Effect<void>
  /** The writer fiber's clock, read once. */
  clock: Clock.Clock | undefined
}

/** SES-04: the close: a waiting writer ends now, a busy one after writing what was accepted before. */
const closeOf = (s: SessionState): Effect.Effect<void> =>
  Effect.suspend(() => {
    // sealed (`sealIfIdle`) or closed before: the feed ends once (`end` is idempotent)
    if (s.isClosed) return s.writerFiber === undefined ? s.feed.end : Fiber.await(s.writerFiber)
    s.isClosed = true
    if (s.writerFiber === undefined) {
      // no writer fiber recorded yet (its fork is under way): the requests it has not taken fail
      // (SES-04), none waits forever; a batch it took already is still answered by it
      const waiting = s.open
      s.open = undefined
      if (waiting !== undefined) {
        const closed = Exit.fail(new SessionError.SessionClosed({ id: s.id }))
        for (let i = 0; i < waiting.length; i++) waiting[i]!.resume(closed)
      }
      wakeWriter(s)
      return s.feed.end
    }
    // a waiting writer ends now; a busy one after writing what was accepted before the close
    wakeWriter(s)
    return Effect.zipRight(Fiber.await(s.writerFiber), s.feed.end)
  }).pipe(Effect.asVoid, Effect.uninterruptible)

/**
 * Forks the writer fiber into the session's Scope (CORE-01), on first use, with the isolated FiberRefs
 * given at construction (neither the builder's nor the first appender's, §6.3). No Queue: a batch is
 * handed over in `open`. The hot path is plain code between few Effect ops: the write, the
 * publication, the callers resumed in a loop, and a wait only when nothing is waiting.
 */
const startWriter = (s: SessionState): Effect.Effect<void> => {
  const next = () => nextStep(s)
  const resume = Effect.suspend(next)
  // The fiber may yield between `next` and this registration (the scheduler can ask any fiber to
  // yield before any operation): a request or a close made meanwhile found no `wake` to call, so the
  // registration looks again before it waits. Only this wait is interruptible (the Scope closing
  // while nothing waits to be written); a write never is. (No canceler: an interrupted writer's
  // `wake` is cleared when it ends, `writerEnded`.)
  const waitForWork = Effect.interruptible(Effect.async<void>((wake) => {
    if (s.open !== undefined || s.isClosed) return wake(resume)
    s.wake = wake
  }))
  const loop: WriterLoop = { next, resume, waitForWork, clock: undefined }
  s.writerLoop = loop
  const body = Effect.uninterruptible(Effect.clockWith((writerClock) => {
    loop.clock = writerClock
    return next()
  }))
  return Effect.flatMap(fiberModule.forkIn(body, s.scope, s.refs), (fiber) => {
    s.writerFiber = fiber
    fiber.addObserver((exit) => writerEnded(s, exit))
    // the close runs before the Scope interrupts the writer (finalizers run last-added first): what
    // was accepted before the close is written, later appends fail (SES-04)
    return Scope.addFinalizer(s.scope, s.close)
  })
}

/** The writer loop's next step: the waiting batch, else the end after a close, else a wait (SES-02). */
const nextStep = (s: SessionState): Effect.Effect<void> => {
  s.taken = undefined
  const batch = s.open
  if (batch !== undefined) {
    // from here on the batch is the writer's: a later request opens the next one
    s.open = undefined
    s.taken = batch
    return writeBatch(s, batch, s.writerLoop!.next)
  }
  // closed with nothing waiting: every request accepted before the close was written
  if (s.isClosed) return Effect.void
  return s.writerLoop!.waitForWork
}

/** Stamps and writes one batch, then commits it and runs `then` (SES-02, DUR-04). */
const writeBatch = (
  s: SessionState,
  batch: ReadonlyArray<Request>,
  then: () => Effect.Effect<void>
): Effect.Effect<void> => {
  // whole milliseconds, as the log stores them (a TestClock may be adjusted by fractions)
  const time = Math.floor(s.writerLoop!.clock!.unsafeCurrentTimeMillis())
  const stamped: Array<SessionEvent> = []
  let seq = s.entries.length
  for (let i = 0; i < batch.length; i++) {
    const request = batch[i]!
    if (request.one !== undefined) stamped.push(stamp(request.one, seq++, time))
    else for (const input of request.many) stamped.push(stamp(input, seq++, time))
  }
  const writer = s.writer
  if (writer === undefined) return commit(s, batch, stamped, then)
  const measured = commitMeasure(s, batch, stamped.length, time)
  // a defect of the writer reaches the callers as a defect; the writer fiber lives on (also when a
  // persistence implementation throws instead of returning an Effect: suspended)
  return Effect.matchCauseEffect(
    Effect.suspend(() => writer.append(stamped as unknown as Arr.NonEmptyReadonlyArray<SessionEvent>)),
    {
      onFailure: (cause) => {
        measured(Exit.failCause(cause))
        if (s.isAbandoned) return Effect.void
        // DUR-04 inside a session: a batch of several callers refused for its content (an event over
        // maxEventBytes, the session over maxSessionBytes) stored nothing, so it is written again
        // caller by caller, and only the refused caller's append fails.
        if (batch.length > 1 && isRefusedContent(cause)) return writeEach(s, batch, 0, then)
        const failed = Exit.failCause(cause)
        for (let i = 0; i < batch.length; i++) batch[i]!.resume(failed)
        return then()
      },
      onSuccess: () => {
        measured(Exit.void)
        return s.isAbandoned ? Effect.void : commit(s, batch, stamped, then)
      }
    }
  )
}

/**
 * OBS-01/02: opens the commit span under the batch's first caller's span (when a tracer is
 * installed); returns what records the commit's latency and size once the persistence answered.
 */
const commitMeasure = (
  s: SessionState,
  batch: ReadonlyArray<Request>,
  size: number,
  time: number
): (exit: Exit.Exit<unknown, unknown>) => void => {
  const span = s.telemetry.tracer === undefined
    ? undefined
    : observability.startSpan(s.telemetry, "effect-agent.persistence.commit", batch[0]!.parent, {
      [observability.attr.sessionId]: s.id,
      [observability.attr.batchSize]: size
    })
  return (exit) => {
    observability.recordCommit(size, s.writerLoop!.clock!.unsafeCurrentTimeMillis() - time, Exit.isSuccess(exit))
    observability.endSpan(s.telemetry, span, exit)
  }
}

/** Writes the requests of `batch` from `i` on, each as a batch of its own, then `then` (DUR-04). */
const writeEach = (
  s: SessionState,
  batch: ReadonlyArray<Request>,
  i: number,
  then: () => Effect.Effect<void>
): Effect.Effect<void> =>
  i >= batch.length ? then() : writeBatch(s, [batch[i]!], () => writeEach(s, batch, i + 1, then))

/** Commits a written batch: folded into the log, published (SES-03), then its callers resumed. */
const commit = (
  s: SessionState,
  batch: ReadonlyArray<Request>,
  stamped: ReadonlyArray<SessionEvent>,
  then: () => Effect.Effect<void>
): Effect.Effect<void> => {
  for (let i = 0; i < stamped.length; i++) {
    const event = stamped[i]!
    s.entries.push(event)
    if (history.fold(s.messages, event, s.entries)) s.messagesSnapshot = undefined
    s.turns.fold(event, s.entries.length)
    s.usageSums = usage.add(s.usageSums, event)
  }
  s.eventsSnapshot = undefined
  return Effect.flatMap(s.feed.publishAll(stamped), () => {
    let k = 0
    for (let i = 0; i < batch.length; i++) {
      const request = batch[i]!
      if (request.one !== undefined) {
        request.resume(Exit.succeed(stamped[k++]!))
      } else {
        const n = request.many.length
        request.resume(Exit.succeed(stamped.slice(k, k + n) as unknown as Arr.NonEmptyReadonlyArray<SessionEvent>))
        k += n
      }
    }
    return then()
  })
}

/**
 * The writer fiber ended: interrupted with the Scope, or dead of a defect (a bug in a commit, a
 * persistence that throws). The callers it had not answered, and every later one, fail with that
 * cause (a defect) or `SessionClosed`: none waits forever (CORE-01).
 */
const writerEnded = (s: SessionState, exit: Exit.Exit<void>): void =>
  failPending(
    s,
    Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)
      ? Exit.failCause(exit.cause)
      : Exit.fail(new SessionError.SessionClosed({ id: s.id }))
  )

/** Fails every caller not answered yet, and every later one, with `failed` (CORE-01, CORE-06). */
const failPending = (s: SessionState, failed: Exit.Exit<never, SessionError.SessionAppendError>): void => {
  const end = s.writerEnd ??= failed
  s.wake = undefined
  const pending = [...(s.taken ?? []), ...(s.open ?? [])]
  s.taken = undefined
  s.open = undefined
  for (const request of pending) request.resume(end)
}

/**
 * `self` after the writer fiber was started (the first append to run starts it). Marked started when
 * the Effect runs, not when it is built, in one uninterruptible step with the fork: an append built
 * but never run (a race's loser, interrupted before it started) starts nothing, and one that runs
 * always leaves a writer behind (SES-02, CORE-01).
 */
const withWriter = <A, E>(s: SessionState, self: Effect.Effect<A, E>): Effect.Effect<A, E> => {
  if (s.isWriterStarted || s.isClosed) return self
  return Effect.zipRight(ensureWriter(s), self)
}

/** Forks the writer fiber when it runs, unless it was forked already (or the session closed). */
const ensureWriter = (s: SessionState): Effect.Effect<void> =>
  Effect.uninterruptible(Effect.suspend(() => {
    if (s.isWriterStarted || s.isClosed) return Effect.void
    s.isWriterStarted = true
    return startWriter(s)
  }))

/** Wakes the writer if it waits: it then runs its next step. */
const wakeWriter = (s: SessionState): void => {
  const idle = s.wake
  if (idle === undefined) return
  s.wake = undefined
  idle(s.writerLoop!.resume)
}

/** Hands a validated request to the writer: it joins the waiting batch, or opens one (SES-02). */
const submit = (s: SessionState, request: Request): void => {
  if (s.writerEnd !== undefined) return request.resume(s.writerEnd)
  if (s.isClosed) return request.resume(Exit.fail(new SessionError.SessionClosed({ id: s.id })))
  if (s.open !== undefined) {
    s.open.push(request)
    return
  }
  // opened after the start (a writer that ran at once is waiting now): the requests made before the
  // woken writer runs all join this batch
  s.open = [request]
  wakeWriter(s)
}

/**
 * OBS-01: `run` with the caller's span when a tracer is installed (it parents the commit span);
 * without one, no operation is added.
 */
const inCallerSpan = <A, E>(
  s: SessionState,
  run: (parent: Tracer.AnySpan | undefined) => Effect.Effect<A, E>
): Effect.Effect<A, E> =>
  s.telemetry.tracer === undefined
    ? run(undefined)
    : Effect.withFiberRuntime((fiber) => run(observability.currentSpanOf(fiber)))

/** SES-01: one custom event, validated (DUR-01) and submitted in the op that suspends the caller. */
const appendOne = (s: SessionState, event: CustomEventInput): Effect.Effect<SessionEvent, AppendError> =>
  inCallerSpan(s, (parent) =>
    withWriter(s, Effect.async<SessionEvent, AppendError>((resume) => {
      const checked = codec.customInput(event)
      if (Either.isLeft(checked)) return resume(Exit.fail(checked.left))
      submit(s, { one: checked.right, resume, parent })
    })))

/** SES-01: custom events as one batch, all validated before any is submitted (DUR-01). */
const appendMany = (
  s: SessionState,
  events: Arr.NonEmptyReadonlyArray<CustomEventInput>
): Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, AppendError> =>
  inCallerSpan(s, (parent) =>
    withWriter(s, Effect.async<Arr.NonEmptyReadonlyArray<SessionEvent>, AppendError>((resume) => {
      if (!Array.isArray(events) || events.length === 0) {
        return resume(
          Exit.fail(new SessionError.InvalidEventData({ type: "(batch)", reason: "appendAll needs at least one event" }))
        )
      }
      const inputs: Array<Input> = []
      for (const event of events) {
        const checked = codec.customInput(event)
        if (Either.isLeft(checked)) return resume(Exit.fail(checked.left))
        inputs.push(checked.right)
      }
      submit(s, { one: undefined, many: inputs as unknown as Arr.NonEmptyReadonlyArray<Input>, resume, parent })
    }))
  )

/** SES-00: core events as one batch (the inbox, the loop, repair). */
const appendCoreEvents = (
  s: SessionState,
  events: Arr.NonEmptyReadonlyArray<CoreEventInput>
): Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, AppendError> =>
  inCallerSpan(s, (parent) =>
    withWriter(s, Effect.async<Arr.NonEmptyReadonlyArray<SessionEvent>, AppendError>((resume) => {
      // DUR-01: each event checked by the reader's rules before it is queued; only type and data are read
      const inputs: Array<Input> = []
      for (let i = 0; i < events.length; i++) {
        const checked = codec.coreEvent(events[i]!)
        if (Either.isLeft(checked)) return resume(Exit.fail(checked.left))
        inputs.push(checked.right)
      }
      submit(s, { one: undefined, many: inputs as unknown as Arr.NonEmptyReadonlyArray<Input>, resume, parent })
    }))
  )

const stateKey: unique symbol = Symbol("effect-agent/Session/state")

/** What an event cursor reads of a session: its log and its feed (EVS-01; made per reader, B2). */
const cursorSource = (session: LiveSession): eventCursor.CursorSource => {
  const state = session[stateKey]
  return {
    id: session.id,
    events: session.events,
    snapshot: () => state.entries,
    listen: (listener) => state.feed.listen(listener)
  }
}

/**
 * The cursor source of a session made here, for a reader with its own buffer size (tests).
 *
 * @internal
 */
export const cursorSourceOf = (session: Session): eventCursor.CursorSource | undefined =>
  session instanceof LiveSession ? cursorSource(session) : undefined

/**
 * The `Session` (SES): a class so that its properties stay fast (V8 keeps an object literal with
 * accessors in dictionary mode: 0.8 KB per session) and its accessors live on the prototype (B2).
 * Its functions are own closures, so a detached `session.append` still works.
 */
class LiveSession implements Session {
  readonly id: SessionId
  readonly firstLiveSeq: number
  readonly append: Session["append"]
  readonly appendAll: Session["appendAll"]
  readonly changes: Session["changes"]
  readonly subscribe: Session["subscribe"]
  readonly eventsFrom: Session["eventsFrom"]
  readonly [stateKey]: SessionState
  constructor(state: SessionState, readonly header: SessionHeader) {
    this.id = state.id
    this.firstLiveSeq = state.entries.length
    this[stateKey] = state
    this.append = (event) => appendOne(state, event)
    this.appendAll = (events) => appendMany(state, events)
    this.changes = state.feed.stream
    this.subscribe = state.feed.subscribe
    this.eventsFrom = (seq) => eventCursor.eventsFrom(cursorSource(this), seq)
  }
  get events() {
    const state = this[stateKey]
    return Effect.sync(() => (state.eventsSnapshot ??= Object.freeze(state.entries.slice())))
  }
  get messages() {
    const state = this[stateKey]
    return Effect.sync(() => (state.messagesSnapshot ??= Object.freeze(state.messages.slice())))
  }
  /** MOD-06 */
  get usage() {
    const state = this[stateKey]
    return Effect.sync(() => usage.snapshot(state.usageSums))
  }
}

/** `makeIn` without a generator: plain code, then the one operation that adds the close to `scope` (B1). */
const makeWith = (scope: Scope.Scope, options: MakeOptions, refs: FiberRefs.FiberRefs): Effect.Effect<Session> =>
  Effect.suspend(() => {
    const state = new SessionState(options.header.id, scope, options.writer, refs, options.events)
    const session = new LiveSession(state, options.header)
    return Effect.as(Scope.addFinalizer(scope, state.close), session)
  })

/**
 * A live session from a plan; with a writer the seed is written through it first.
 *
 * @internal
 */
export const fromPlan = (
  sessionPlan: SessionPlan,
  writer: SessionWriter | undefined
): Effect.Effect<Session, SeedWriteError, Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) => fromPlanIn(scope, sessionPlan, writer))

/**
 * What writing a plan's seed can fail with.
 *
 * @internal
 */
export type SeedWriteError =
  | SessionError.SessionConflict
  | SessionError.InvalidEventData
  | SessionError.SessionFull
  | SessionError.PersistenceError

/**
 * `fromPlan` with its Scope given, and the FiberRefs the writer fiber starts with (see `MakeOptions`).
 *
 * @internal
 */
export const fromPlanIn = (
  scope: Scope.Scope,
  sessionPlan: SessionPlan,
  writer: SessionWriter | undefined,
  refs?: FiberRefs.FiberRefs
): Effect.Effect<Session, SeedWriteError> =>
  // no generator (B1): the seed is written first, when there is one to write
  writer !== undefined && sessionPlan.seed.length > 0
    ? Effect.zipRight(
      writer.append(sessionPlan.seed as Arr.NonEmptyReadonlyArray<SessionEvent>),
      makeIn(scope, { header: sessionPlan.header, events: sessionPlan.seed, writer, refs })
    )
    : makeIn(scope, { header: sessionPlan.header, events: sessionPlan.seed, writer, refs })

/** @internal */
export const isOpenAt = (events: ReadonlyArray<SessionEvent>, length: number): Option.Option<number> => {
  const turns = new TurnState()
  for (let i = 0; i < length; i++) turns.fold(events[i]!, i + 1)
  return Option.fromNullable(turns.openTurn)
}
