/**
 * The gateway's requests, decoded at the edge (ARCH-04): what the host gateway (`gateway/host.ts`)
 * and the cluster client (`cluster/client.ts`) both run on a request before anything else, so the
 * two refuse bad input with the same error and the same words. Each decoder takes the id and the
 * request as a caller gives them (strings, optional fields) and returns what the gateway works with:
 * the `SessionId` (ID-01) decoded once, the message built (its id minted when absent), the defaults
 * filled in. Nothing inward decodes them again.
 *
 * @internal
 */
import { Either } from "effect"
import * as Message from "../../Message.js"
import type { SessionId } from "../../Message.js"
import type * as Gateway from "../../SessionGateway.js"
import { InvalidRequest } from "../../SessionGateway.js"

/** The default page of `list` (SEC-06: 1..1000, 100 when not given). @internal */
export const DEFAULT_PAGE = 100

/** The session a request names (ID-01), or `InvalidSessionId`. @internal */
export const sessionKey = (id: string): Either.Either<SessionId, Message.InvalidSessionId> => Message.sessionId(id)

/** The shortest and longest message id (ID-02), as `Message.MessageId` has them. */
const MESSAGE_ID_LENGTH = { min: 1, max: 256 } as const

/**
 * The message a send request describes (its id minted when absent), or why it cannot be one:
 * exactly one of `text` and `content`, a message id of 1-256 characters (ID-02).
 *
 * @internal
 */
export const messageOf = (request: Gateway.SendRequest): Either.Either<Message.UserMessage, InvalidRequest> => {
  if ((request.text === undefined) === (request.content === undefined)) {
    return Either.left(new InvalidRequest({ reason: "a message has exactly one of text and content" }))
  }
  const id = request.id
  if (id !== undefined && (typeof id !== "string" || id.length < MESSAGE_ID_LENGTH.min || id.length > MESSAGE_ID_LENGTH.max)) {
    return Either.left(new InvalidRequest({ reason: "a message id is 1-256 characters" }))
  }
  return Either.right(
    Message.user(request.text ?? "", {
      ...(id === undefined ? {} : { id }),
      ...(request.content === undefined ? {} : { content: request.content })
    })
  )
}

/** A send, decoded: the session, the message and the mode (`followup` by default). @internal */
export interface Send {
  readonly key: SessionId
  readonly message: Message.UserMessage
  readonly mode: Gateway.SendMode
}

/** `send`'s input decoded: the id first, then the message. @internal */
export const sendOf = (
  id: string,
  request: Gateway.SendRequest
): Either.Either<Send, Message.InvalidSessionId | InvalidRequest> =>
  Either.flatMap(sessionKey(id), (key) =>
    Either.map(messageOf(request), (message) => ({ key, message, mode: request.mode ?? "followup" })))

/** A cancel, decoded: the session and whether the inbox stays (`false` by default). @internal */
export interface Cancel {
  readonly key: SessionId
  readonly keepInbox: boolean
}

/** `cancel`'s input decoded. @internal */
export const cancelOf = (
  id: string,
  request?: Gateway.CancelRequest | undefined
): Either.Either<Cancel, Message.InvalidSessionId> =>
  Either.map(sessionKey(id), (key) => ({ key, keepInbox: request?.keepInbox ?? false }))

/** A fork, decoded: the source session, the child's id and the boundary (all of the log by default). @internal */
export interface Fork {
  readonly key: SessionId
  readonly childId: SessionId
  readonly upTo: number | undefined
}

/** `fork`'s input decoded: the source's id first, then the child's. @internal */
export const forkOf = (
  id: string,
  request: Gateway.ForkRequest
): Either.Either<Fork, Message.InvalidSessionId> =>
  Either.flatMap(sessionKey(id), (key) =>
    Either.map(sessionKey(request.childId), (childId) => ({ key, childId, upTo: request.upTo })))

/** A page of `list`, decoded: its size and where it starts. @internal */
export interface Page {
  readonly limit: number
  readonly after: string | undefined
}

/** `list`'s input with its defaults. @internal */
export const pageOf = (request?: Gateway.ListRequest | undefined): Page => ({
  limit: request?.limit ?? DEFAULT_PAGE,
  after: request?.after
})
