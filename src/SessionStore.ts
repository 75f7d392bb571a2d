/**
 * The SessionStore: the service of the sessions live in this process (its state in a `Ref`, each
 * change one `Ref.modify`: CORE-03), with lifecycle events, vetoing `onCreated` hooks and the
 * low-level lifecycle the factory uses (prepare / enter / announce / detach), STORE-01..06 and
 * FORK-01's seed computation.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Context, Data, Effect, Either, Layer, Option } from "effect"
import type { Stream } from "effect"
import * as Feed from "./internal/feed.js"
import * as lifecycle from "./internal/lifecycle.js"
import * as internalSession from "./internal/log/session.js"
import type { InvalidSessionId, SessionId } from "./Message.js"
import * as Session from "./Session.js"
import * as SessionError from "./SessionError.js"
import type { ChildOf, JsonRecord, SessionEvent } from "./SessionEvent.js"

/**
 * Lifecycle events of the store: `SessionCreated` when an announcement begins, `SessionDisposed`
 * exactly when an announced entry leaves (STORE-05).
 *
 * @since 0.1.0
 * @category events
 */
export type SessionStoreEvent = Data.TaggedEnum<{
  SessionCreated: { readonly session: Session.Session }
  SessionDisposed: { readonly session: Session.Session }
}>

/**
 * @since 0.1.0
 * @category events
 */
export const SessionStoreEvent = Data.taggedEnum<SessionStoreEvent>()

/**
 * A live entry of the store, returned by `enter`; `detach` removes exactly this entry (never a
 * replacement with the same id), is idempotent, and is deferred while the entry is announcing.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionEntry {
  readonly session: Session.Session
  readonly detach: Effect.Effect<void>
  /** @internal */
  readonly entry: lifecycle.Entry<Session.Session, void>
}

/**
 * Where a new session's initial events come from: nothing, a seed, or a fork of a live session
 * (FORK-01).
 *
 * @since 0.1.0
 * @category models
 */
export interface PrepareOptions {
  readonly sessionId: SessionId | string
  readonly meta?: JsonRecord | undefined
  readonly seed?: ReadonlyArray<SessionEvent> | undefined
  /** Seeds the new session with the first `upTo` events of `from` (default: up to its last closed turn). */
  readonly fork?: { readonly from: Session.Session; readonly upTo?: number | undefined } | undefined
  /**
   * SUB-01: the parent session and call this one is a child of, recorded in the header.
   *
   * @since 0.3.0
   */
  readonly child?: ChildOf | undefined
}

/**
 * What `prepare` can fail with.
 *
 * @since 0.1.0
 * @category errors
 */
export type PrepareError =
  | InvalidSessionId
  | SessionError.InvalidEventData
  | SessionError.SessionAlreadyLive
  | SessionError.ForkInsideOpenTurn
  | SessionError.InvalidForkBoundary

/**
 * The seed of a fork of `from` (FORK-01): its first `upTo` events, by default the log up to the end
 * of its last closed turn, so a running session can be forked. Fails `InvalidForkBoundary` when
 * `upTo` is not an integer in `0..length`, `ForkInsideOpenTurn` when the prefix ends inside a turn.
 *
 * @since 0.1.0
 * @category fork
 */
export const forkSeed = (
  from: Session.Session,
  upTo?: number | undefined
): Effect.Effect<ReadonlyArray<SessionEvent>, SessionError.ForkInsideOpenTurn | SessionError.InvalidForkBoundary> =>
  // the session's public surface (ARCH-01): a session a user wrapped forks as the one it wraps
  Effect.flatMap(from.events, (log): Effect.Effect<
    ReadonlyArray<SessionEvent>,
    SessionError.ForkInsideOpenTurn | SessionError.InvalidForkBoundary
  > => {
    const length = log.length
    const boundary = upTo ?? internalSession.closedLengthOf(log)
    if (!Number.isSafeInteger(boundary) || boundary < 0 || boundary > length) {
      return Effect.fail(new SessionError.InvalidForkBoundary({ id: from.id, upTo: boundary, length }))
    }
    const open = internalSession.isOpenAt(log, boundary)
    if (Option.isSome(open)) {
      return Effect.fail(new SessionError.ForkInsideOpenTurn({ id: from.id, upTo: boundary, turn: open.value }))
    }
    return Effect.succeed(log.slice(0, boundary))
  })

/**
 * The live sessions of this process.
 *
 * @since 0.1.0
 * @category services
 */
export class SessionStore extends Context.Tag("effect-agent/SessionStore")<SessionStore, {
  readonly get: (id: SessionId | string) => Effect.Effect<Option.Option<Session.Session>>
  /** Live sessions in creation order. */
  readonly list: Effect.Effect<ReadonlyArray<Session.Session>>
  readonly events: Stream.Stream<SessionStoreEvent>
  /** The eager form of `events`: subscribed before it returns. */
  readonly subscribe: Effect.Effect<Stream.Stream<SessionStoreEvent>, never, Scope.Scope>
  /**
   * Registers a hook run serially at every announcement until the Scope closes. A failing hook
   * vetoes the creation: it is rolled back with `SessionCreated, SessionDisposed` and the id is free.
   */
  readonly onCreated: (hook: (session: Session.Session) => Effect.Effect<void, unknown>) => Effect.Effect<void, never, Scope.Scope>
  /**
   * Validates a new session (id, meta, seed or fork) without publishing anything (STORE-01). Fails
   * fast with `SessionAlreadyLive` when the id is live.
   */
  readonly prepare: (options: PrepareOptions) => Effect.Effect<Session.SessionPlan, PrepareError>
  /** The authoritative collision check (STORE-02): no event; returns the exact entry. */
  readonly enter: (session: Session.Session) => Effect.Effect<SessionEntry, SessionError.SessionAlreadyLive>
  /**
   * Publishes `SessionCreated` and runs the `onCreated` hooks serially (STORE-03). A veto fails
   * `SessionCreationVetoed` after the rollback (`SessionDisposed`).
   */
  readonly announce: (entry: SessionEntry) => Effect.Effect<void, SessionError.SessionCreationVetoed>
  /**
   * prepare → build an in-memory session in the Scope → enter → announce (STORE-06). The session is
   * detached and closed when the Scope closes.
   */
  readonly create: (
    options: PrepareOptions
  ) => Effect.Effect<Session.Session, PrepareError | SessionError.SessionCreationVetoed, Scope.Scope>
}>() {}

const noParent = (): void => undefined

/**
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<SessionStore["Type"]> = Effect.gen(function*() {
  const feed = yield* Feed.make<SessionStoreEvent>()
  const registry = yield* lifecycle.make<Session.Session, void>({
    announced: (entry) => feed.publish(SessionStoreEvent.SessionCreated({ session: entry.value })),
    disposed: (entry) => feed.publish(SessionStoreEvent.SessionDisposed({ session: entry.value }))
  })

  const toEntry = (entry: lifecycle.Entry<Session.Session, void>): SessionEntry => ({
    session: entry.value,
    detach: registry.detach(entry),
    entry
  })

  /** The plan once the seed is known: plain code, in the caller's operation (B1). */
  const planWith = (
    options: PrepareOptions,
    seed: ReadonlyArray<SessionEvent> | undefined,
    createdAt: number
  ): Effect.Effect<Session.SessionPlan, PrepareError> => {
    const planned = Session.plan({
      id: options.sessionId,
      meta: options.meta,
      seed,
      parentSession: options.fork?.from.id,
      child: options.child,
      createdAt
    })
    if (Either.isLeft(planned)) return Effect.fail(planned.left)
    const id = planned.right.header.id
    return registry.withLive((live) =>
      live(id) !== undefined ? Effect.fail(new SessionError.SessionAlreadyLive({ id })) : Effect.succeed(planned.right)
    )
  }

  // untraced: it runs inside the span of the factory's create (B1), or inside `create` below; no
  // generator: the clock's read and the plan in a few operations (B1)
  const prepare = (options: PrepareOptions): Effect.Effect<Session.SessionPlan, PrepareError> =>
    Effect.clockWith((clock) =>
      Effect.flatMap(clock.currentTimeMillis, (createdAt): Effect.Effect<Session.SessionPlan, PrepareError> => {
        if (options.seed !== undefined && options.fork !== undefined) {
          return Effect.fail(
            new SessionError.InvalidEventData({
              type: "(seed)",
              reason: "give either a seed or a fork, not both"
            })
          )
        }
        const fork = options.fork
        return fork === undefined
          ? planWith(options, options.seed, createdAt)
          : Effect.flatMap(forkSeed(fork.from, fork.upTo), (seed) => planWith(options, seed, createdAt))
      })
    )

  const enter = (session: Session.Session): Effect.Effect<SessionEntry, SessionError.SessionAlreadyLive> =>
    registry.enter({
      key: session.id,
      value: session,
      parentOf: noParent,
      onEntered: toEntry,
      onTaken: () => new SessionError.SessionAlreadyLive({ id: session.id })
    })

  const announce = (entry: SessionEntry) =>
    registry.announce(entry.entry).pipe(
      Effect.mapError((cause) => new SessionError.SessionCreationVetoed({ id: entry.session.id, cause }))
    )

  const create = Effect.fn("SessionStore.create")(function*(options: PrepareOptions) {
    const planned = yield* prepare(options)
    const session = yield* Session.fromPlan(planned).pipe(Effect.orDie)
    const entry = yield* Effect.uninterruptible(
      Effect.tap(enter(session), (entry) => Effect.addFinalizer(() => entry.detach))
    )
    yield* announce(entry)
    return session
  })

  return SessionStore.of({
    get: (id) => Effect.map(registry.get(id), Option.map((entry) => entry.value)),
    list: Effect.map(registry.entries, (entries) => entries.map((entry) => entry.value)),
    events: feed.stream,
    subscribe: feed.subscribe,
    onCreated: registry.addHook,
    prepare,
    enter,
    announce,
    create
  })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<SessionStore> = Layer.effect(SessionStore, make)
