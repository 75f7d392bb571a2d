/**
 * The gateway's own errors and what a send mode means (HTTP-00), in a module of their own so that
 * the gateways' internals import them without importing the `SessionGateway` facade (ARCH-02).
 * `SessionGateway` re-exports each under its public name.
 *
 * @internal
 */
import { Schema } from "effect"
import type { SendMode } from "../../SessionGateway.js"
import type { InboxTarget } from "../../SessionEvent.js"

/**
 * A request the gateway cannot act on as given: a body that is not JSON or does not match its
 * schema, a message with both or neither of `text` and `content`, a malformed message id. Nothing
 * was changed.
 *
 * @since 0.2.0
 * @category errors
 */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>("effect-agent/InvalidRequest")(
  "InvalidRequest",
  { reason: Schema.String }
) {
  override get message(): string {
    return `the request was refused: ${this.reason}. Nothing was changed; fix the request and send it again`
  }
}

/**
 * A `MessageId` this session already accepted, sent again with other content (or another mode).
 * Nothing was appended. The same id with the same content is not an error: the send succeeds
 * again, appending nothing (an idempotent retry).
 *
 * @since 0.2.0
 * @category errors
 */
export class MessageIdConflict extends Schema.TaggedError<MessageIdConflict>("effect-agent/MessageIdConflict")(
  "MessageIdConflict",
  { id: Schema.String, messageId: Schema.String }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} already accepted message ${JSON.stringify(this.messageId)} with other ` +
      "content; nothing was appended. A message id names one message: use a new id for new input"
  }
}

/**
 * The inbox list a send mode targets, and whether it wakes the agent.
 *
 * @since 0.2.0
 * @category requests
 */
export const sendTarget = (mode: SendMode): { readonly target: InboxTarget; readonly wake: boolean } =>
  mode === "followup"
    ? { target: "next-turn", wake: true }
    : mode === "steer"
    ? { target: "next-step", wake: true }
    : { target: "next-step", wake: false }

/**
 * `GET /sessions/:id/turns/:turn` (or `SessionGateway.turn`) named a turn that is still running
 * when its wait ended (APP-05).
 *
 * @since 0.3.0
 * @category errors
 */
export class TurnRunning extends Schema.TaggedError<TurnRunning>("effect-agent/TurnRunning")(
  "TurnRunning",
  { id: Schema.String, turn: Schema.Number }
) {
  override get message(): string {
    return `turn ${this.turn} of session ${JSON.stringify(this.id)} is still running; ask again later, or with a ` +
      "longer wait (?wait=<seconds>)"
  }
}

/**
 * This gateway does not offer runs (APP-05): a gateway without the optional `run`/`turn` methods
 * (one of the user's own: the host gateway and the cluster client both have them).
 *
 * @since 0.3.0
 * @category errors
 */
export class RunsUnsupported extends Schema.TaggedError<RunsUnsupported>("effect-agent/RunsUnsupported")(
  "RunsUnsupported",
  {}
) {
  override get message(): string {
    return "this gateway does not run turns (it has no run/turn methods); send messages and read the events instead"
  }
}

/**
 * This gateway does not offer people in the loop (HIL-06): a gateway without the optional
 * `pending`/`decide`/`respond` methods.
 *
 * @since 0.3.0
 * @category errors
 */
export class DecisionsUnsupported extends Schema.TaggedError<DecisionsUnsupported>("effect-agent/DecisionsUnsupported")(
  "DecisionsUnsupported",
  {}
) {
  override get message(): string {
    return "this gateway does not list pending approvals and questions or take decisions (it has no " +
      "pending/decide/respond methods); serve it with SessionGateway.layerHost or the cluster client"
  }
}
