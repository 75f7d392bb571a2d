/**
 * The Inbox: an agent's durable pending work, two ordered lists (`next-turn`, `next-step`) whose
 * every change is an `agent/inbox/spliced` event written before the in-memory change (SPEC §5).
 *
 * @since 0.1.0
 */
import type { Effect, Stream } from "effect"
import { Data } from "effect"
import type * as AgentError from "./AgentError.js"
import * as internal from "./internal/agent/inbox.js"
import type { MessageId, UserMessage } from "./Message.js"
import type { Session } from "./Session.js"
import type { SessionAppendError } from "./SessionError.js"
import type { InboxTarget } from "./SessionEvent.js"

/**
 * A change of the inbox, after it is durable: `Discarded` before `Inserted` within one splice.
 * `seq` (@since 0.2.0, EVS-02) is the durable event the change mirrors: the `agent/inbox/spliced`
 * event of an insertion or discard, the `step/start` of the step a claim's messages entered.
 *
 * @since 0.1.0
 * @category models
 */
export type InboxChange = Data.TaggedEnum<{
  Inserted: {
    readonly target: InboxTarget
    readonly start: number
    readonly messages: ReadonlyArray<UserMessage>
    readonly seq?: number | undefined
  }
  Discarded: {
    readonly target: InboxTarget
    readonly ids: ReadonlyArray<MessageId>
    readonly outcome: "canceled" | "rejected"
    readonly seq?: number | undefined
  }
  Claimed: { readonly turn: number; readonly messages: ReadonlyArray<UserMessage>; readonly seq?: number | undefined }
}>

/**
 * @since 0.1.0
 * @category models
 */
export const InboxChange = Data.taggedEnum<InboxChange>()

/**
 * @since 0.1.0
 * @category models
 */
export interface Inbox {
  readonly nextTurn: Effect.Effect<ReadonlyArray<UserMessage>>
  readonly nextStep: Effect.Effect<ReadonlyArray<UserMessage>>
  readonly hasPending: Effect.Effect<boolean>
  /** Inserts at the end of a list (not waking). Fails `DuplicateMessage` for an id already accepted (INB-01). */
  readonly append: (
    target: InboxTarget,
    message: UserMessage
  ) => Effect.Effect<void, AgentError.DuplicateMessage | AgentError.AgentBusy | SessionAppendError>
  /** Inserts at the front of a list (not waking). */
  readonly prepend: (
    target: InboxTarget,
    message: UserMessage
  ) => Effect.Effect<void, AgentError.DuplicateMessage | AgentError.AgentBusy | SessionAppendError>
  /** Replaces a pending message in place; `false` (nothing written) when `id` is not pending. */
  readonly replace: (
    id: MessageId,
    message: UserMessage
  ) => Effect.Effect<boolean, AgentError.DuplicateMessage | AgentError.AgentBusy | SessionAppendError>
  /** Removes a pending message (`canceled`); `false` when it is not pending. */
  readonly remove: (id: MessageId) => Effect.Effect<boolean, AgentError.AgentBusy | SessionAppendError>
  /** Removes everything pending (`canceled`): next-step first, then next-turn. */
  readonly clear: Effect.Effect<void, AgentError.AgentBusy | SessionAppendError>
  /** Changes after they are durable. */
  readonly changes: Stream.Stream<InboxChange>
}

/**
 * Builds the inbox of a session: replays its `agent/inbox/spliced` and `user/message` events after
 * `header.seedLength`, validating every splice like a live one (INB-05); an invalid one fails
 * `InvalidInboxLog` and nothing is repaired. Every later change is written to the session before it
 * changes the lists, under one lock (INB-01b, INB-02); `options.onChange` sees each change in
 * order, while that lock is held. A write to the same inbox from the observer (or from a fiber it
 * awaits) would wait for that lock, held by itself: it fails `AgentBusy` instead (CORE-07).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Inbox, Message, Session } from "effect-agent"
 *
 * const program = Effect.gen(function*() {
 *   const session = yield* Session.make({ id: "demo" })
 *   const inbox = yield* Inbox.make(session)
 *   yield* inbox.append("next-turn", Message.user("hello"))
 *   return yield* inbox.nextTurn
 * }).pipe(Effect.scoped)
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: (
  session: Session,
  options?: { readonly onChange?: ((change: InboxChange) => Effect.Effect<void>) | undefined } | undefined
) => Effect.Effect<Inbox, AgentError.InvalidInboxLog> = internal.make
