/**
 * A Session is the durable truth of one agent: an append-only, replayable event log with its
 * header, a post-commit feed of appends, and the model-visible history derived from it
 * (SES-00..04).
 *
 * @since 0.1.0
 */
import type { Array as Arr, Scope, Stream } from "effect"
import { Effect, Either, Schema } from "effect"
import * as internal from "./internal/log/session.js"
import * as codec from "./internal/log/eventCodec.js"
import type { Message, SessionId } from "./Message.js"
import { sessionId } from "./Message.js"
import type { InvalidSessionId } from "./Message.js"
import * as SessionError from "./SessionError.js"
import type { SessionWriter } from "./SessionPersistence.js"
import type { ChildOf, CustomEventInput, JsonRecord, SessionEvent, SessionHeader, Usage } from "./SessionEvent.js"
import { ChildOf as ChildOfSchema, FORMAT, VERSION } from "./SessionEvent.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Session {
  readonly id: SessionId
  readonly header: SessionHeader
  /** The log length when this process took ownership of the session (seed or stored length). */
  readonly firstLiveSeq: number
  /** A frozen snapshot of the log, cached until the next append. */
  readonly events: Effect.Effect<ReadonlyArray<SessionEvent>>
  /**
   * Appends one custom event (SES-00, SES-01): assigns `seq` and `time`, validates, writes through
   * the session's writer (when it has one), commits, publishes on `changes`, and resolves with the
   * committed event after the writer acknowledged it. On failure nothing is committed.
   */
  readonly append: (event: CustomEventInput) => Effect.Effect<SessionEvent, SessionError.SessionAppendError>
  /** Appends custom events with contiguous seqs as one writer batch; all or nothing in this process. */
  readonly appendAll: (
    events: Arr.NonEmptyReadonlyArray<CustomEventInput>
  ) => Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError>
  /** The post-commit feed of appends (lazy: subscribes when the stream starts). Ends when the session closes. */
  readonly changes: Stream.Stream<SessionEvent>
  /** The eager form of `changes`: subscribed before it returns. */
  readonly subscribe: Effect.Effect<Stream.Stream<SessionEvent>, never, Scope.Scope>
  /**
   * The durable event stream from a cursor (EVS-01): the events from `seq` (the seq after the last
   * one a reader saw; 0 for all), then each appended event as it commits, until the session closes —
   * no gap, no duplicate, in order, whatever appends are in flight when it starts. A reader that
   * falls behind never blocks the writer or other readers: what its bounded buffer cannot hold is
   * re-read from the log when it gets there. Fails `InvalidEventCursor` when `seq` is not in
   * `0..length`.
   *
   * @since 0.2.0
   */
  readonly eventsFrom: (seq: number) => Stream.Stream<SessionEvent, SessionError.InvalidEventCursor>
  /**
   * The session's token usage (MOD-06): the sums of what its `assistant/message` events recorded,
   * and its `session/compacted` events (the summarizer calls, CMP-01), per field; a field nothing
   * reported is absent (unknown, not zero).
   *
   * @since 0.2.0
   */
  readonly usage: Effect.Effect<Usage>
  /** The model-visible history (SES-03), maintained incrementally. */
  readonly messages: Effect.Effect<ReadonlyArray<Message>>
}

/**
 * A validated plan for a new session: its header and its seed events. Nothing is published or
 * stored by making one.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionPlan {
  readonly header: SessionHeader
  readonly seed: ReadonlyArray<SessionEvent>
}

/** The type a seed event names, for an error message (never throws, DUR-10). */
const seedTypeOf = (event: unknown): string => {
  try {
    const type = (event as { readonly type?: unknown } | undefined)?.type
    return typeof type === "string" ? type : "(seed)"
  } catch {
    return "(seed)"
  }
}

const isChildOf = Schema.is(ChildOfSchema)

/**
 * Validates the header fields and seed of a new session (ID-01, EVT-01..03). Seed events must be
 * contiguous from seq 0 and valid like stored events.
 *
 * @since 0.1.0
 * @category constructors
 */
export const plan = (options: {
  readonly id: SessionId | string
  readonly meta?: JsonRecord | undefined
  readonly seed?: ReadonlyArray<SessionEvent> | undefined
  readonly parentSession?: SessionId | undefined
  /** SUB-01: the parent session and call of a child session (since 0.3.0). */
  readonly child?: ChildOf | undefined
  readonly createdAt: number
}): Either.Either<SessionPlan, InvalidSessionId | SessionError.InvalidEventData> => {
  const id = sessionId(options.id)
  if (Either.isLeft(id)) return Either.left(id.left)
  const meta = internal.headerMeta(options.meta)
  if (Either.isLeft(meta)) return Either.left(meta.left)
  if (options.child !== undefined && !isChildOf(options.child)) {
    return Either.left(
      new SessionError.InvalidEventData({
        type: "(header child)",
        reason: "child must name a valid parent session id and a non-empty call id"
      })
    )
  }
  const seedInput = options.seed ?? []
  const seed: Array<SessionEvent> = []
  for (let i = 0; i < seedInput.length; i++) {
    const event = codec.storedEvent(seedInput[i], i)
    if (Either.isLeft(event)) {
      return Either.left(
        new SessionError.InvalidEventData({
          type: seedTypeOf(seedInput[i]),
          reason: `seed event ${i}: ${event.left.reason}`
        })
      )
    }
    seed.push(event.right)
  }
  const header: SessionHeader = codec.deepFreeze({
    format: FORMAT,
    version: VERSION,
    id: id.right,
    // whole milliseconds, as the log stores them (a TestClock may be adjusted by fractions)
    createdAt: Math.floor(options.createdAt),
    ...(options.parentSession !== undefined ? { parentSession: options.parentSession } : {}),
    seedLength: seed.length,
    meta: meta.right,
    ...(options.child !== undefined ? { child: { parent: options.child.parent, callId: options.child.callId } } : {})
  })
  return Either.right({ header, seed })
}

/**
 * Builds a live session from a plan. With a writer (a new stored session from
 * `SessionPersistence.create`) the seed is written through it first. The session closes when the
 * Scope closes (SES-04): later appends fail `SessionClosed`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromPlan = (
  sessionPlan: SessionPlan,
  writer?: SessionWriter | undefined
): Effect.Effect<
  Session,
  | SessionError.SessionConflict
  | SessionError.InvalidEventData
  | SessionError.SessionFull
  | SessionError.PersistenceError,
  Scope.Scope
> => internal.fromPlan(sessionPlan, writer)

/**
 * Builds a live session over a stored log and its exclusive writer (for resume).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromStored = (
  stored: { readonly header: SessionHeader; readonly events: ReadonlyArray<SessionEvent> },
  writer: SessionWriter
): Effect.Effect<Session, never, Scope.Scope> => internal.make({ header: stored.header, events: stored.events, writer })

/**
 * Makes a detached in-memory session (no writer), for tests and tools. It closes with the Scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: {
  readonly id: SessionId | string
  readonly meta?: JsonRecord | undefined
  readonly seed?: ReadonlyArray<SessionEvent> | undefined
}): Effect.Effect<Session, InvalidSessionId | SessionError.InvalidEventData, Scope.Scope> =>
  Effect.gen(function*() {
    const createdAt = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const sessionPlan = yield* plan({ ...options, createdAt })
    return yield* internal.make({ header: sessionPlan.header, events: sessionPlan.seed, writer: undefined })
  })

/**
 * The model-visible history of a log, derived from scratch (SES-03). `session.messages` is always
 * deep-equal to `deriveMessages(events)` of the same log. After a `session/compacted` event it is
 * that event's summary followed by what the events from its `upTo` on contribute (CMP-01).
 *
 * @since 0.1.0
 * @category history
 */
export { derive as deriveMessages, interruptedNote } from "./internal/log/history.js"

/**
 * The fixed text of the system note the history carries after a turn that a dispose interrupted
 * (`turn/end {kind:"aborted", cause:{kind:"disposed"}}`), as `interruptedNote` after a crash
 * (PKG-05). Derived from the log alone, so v1 logs get it too.
 *
 * @since 0.2.0
 * @category history
 */
export { shutdownNote } from "./internal/log/history.js"
