/**
 * The gateway's requests, decoded at the edge (ARCH-04): what the host gateway (`gateway/host.ts`)
 * and the cluster client (`cluster/client.ts`) both run on a request before anything else, so the
 * two refuse bad input with the same error and the same words. Each decoder takes the id and the
 * request as a caller gives them (strings, optional fields) and returns what the gateway works with:
 * the `SessionId` (ID-01) decoded once, the message built (its id minted when absent), the content,
 * agent options and meta checked, the defaults filled in. The gateways' own functions take the
 * decoded values; the cluster client refuses bad input here instead of dying when the RPC encodes it.
 * (The public services a gateway calls, `AgentHost` and `AgentRegistry`, still check the ids they
 * are given, as they do any caller's.)
 *
 * @internal
 */
import { Duration, Either, ParseResult, Schema } from "effect"
import { InvalidAgentOptions } from "../../AgentError.js"
import * as Message from "../../Message.js"
import type { SessionId } from "../../Message.js"
import * as ModelSettings from "../../ModelSettings.js"
import type * as SessionError from "../../SessionError.js"
import type * as Gateway from "../../SessionGateway.js"
import { InvalidRequest } from "./errors.js"
import { readableIssues } from "../http/problem.js"
import { headerMeta } from "../log/session.js"
import { decodeAgentOptions, decodeSettings } from "../options.js"

/** The default page of `list` (SEC-06: 1..1000, 100 when not given). @internal */
export const DEFAULT_PAGE = 100

/** The session a request names (ID-01), or `InvalidSessionId`. @internal */
export const sessionKey = (id: string): Either.Either<SessionId, Message.InvalidSessionId> => Message.sessionId(id)

/** The shortest and longest message id (ID-02), as `Message.MessageId` has them. */
const MESSAGE_ID_LENGTH = { min: 1, max: 256 } as const

const decodeContent = Schema.decodeUnknownEither(Schema.Array(Message.ContentPart))

/** A message's `content`, decoded; refused in the words the HTTP API uses for a bad body (SEC-03). */
const contentOf = (
  content: unknown
): Either.Either<ReadonlyArray<Message.ContentPart>, InvalidRequest> =>
  Either.mapLeft(decodeContent(content), (error) =>
    new InvalidRequest({
      reason: readableIssues(
        ParseResult.ArrayFormatter.formatErrorSync(error).map((issue) => ({ ...issue, path: ["content", ...issue.path] }))
      )
    }))

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
  if (request.text !== undefined && typeof request.text !== "string") {
    return Either.left(new InvalidRequest({ reason: "field text: a string is expected" }))
  }
  const id = request.id
  if (id !== undefined && (typeof id !== "string" || id.length < MESSAGE_ID_LENGTH.min || id.length > MESSAGE_ID_LENGTH.max)) {
    return Either.left(new InvalidRequest({ reason: "a message id is 1-256 characters" }))
  }
  if (request.content === undefined) return Either.right(Message.user(request.text ?? "", id === undefined ? {} : { id }))
  return Either.map(contentOf(request.content), (content) =>
    Message.user("", { ...(id === undefined ? {} : { id }), content }))
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

/** A run, decoded: the session, its message and the turn's own settings and output (APP-05). @internal */
export interface Run {
  readonly key: SessionId
  readonly message: Message.UserMessage
  readonly settings: ModelSettings.ModelSettings | undefined
  readonly output: ModelSettings.OutputFormat | undefined
}

/**
 * `run`'s input decoded (APP-05): the id first, then the message (checked as a send's is), then
 * the settings (APP-04: every bad or unknown field named, `InvalidAgentOptions`) and the output
 * format (OUT-01: its name, a JSON Schema object, `strict` only for a schema that meets the strict
 * rules). Whether the agent's provider takes the settings is asked where the agent is (the send).
 *
 * @internal
 */
export const runOf = (
  id: string,
  request: Gateway.RunRequest
): Either.Either<Run, Message.InvalidSessionId | InvalidRequest | InvalidAgentOptions> =>
  Either.gen(function*() {
    const key = yield* sessionKey(id)
    const message = yield* messageOf({
      ...(typeof request.message === "string" ? { text: request.message } : { content: request.message }),
      ...(request.id === undefined ? {} : { id: request.id })
    })
    const settings = request.settings === undefined ? undefined : yield* decodeSettings(request.settings)
    const output = request.output === undefined ? undefined : yield* Either.mapLeft(
      ModelSettings.outputFormatFromJsonSchema(request.output.schema, {
        name: request.output.name,
        strict: request.output.strict
      }),
      (reason) => new InvalidAgentOptions({ reason })
    )
    return { key, message, settings, output }
  })

/**
 * APP-05: how long a run waits for its turn: 60 seconds unless given, at most 10 minutes.
 *
 * @internal
 */
export const runWait = (wait: Duration.DurationInput | undefined): Duration.Duration =>
  Duration.min(wait === undefined ? Duration.seconds(60) : Duration.decode(wait), Duration.minutes(10))

/**
 * APP-05: how long a turn's read waits for a running turn: not at all unless given, at most 10 minutes.
 *
 * @internal
 */
export const turnWait = (wait: Duration.DurationInput | undefined): Duration.Duration =>
  wait === undefined ? Duration.zero : runWait(wait)

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

/**
 * `fork`'s input decoded: the source's id first, then the child's. The boundary `upTo` is checked
 * against the source's log where it is read (FORK-01, `InvalidForkBoundary`).
 *
 * @internal
 */
export const forkOf = (
  id: string,
  request: Gateway.ForkRequest
): Either.Either<Fork, Message.InvalidSessionId> =>
  Either.flatMap(sessionKey(id), (key) =>
    Either.map(sessionKey(request.childId), (childId) => ({ key, childId, upTo: request.upTo })))

/** A create, decoded: the session and its request with the options and meta checked. @internal */
export interface Create {
  readonly key: SessionId
  readonly request: Gateway.CreateRequest
}

/**
 * `create`'s input decoded: the id, then the agent options (CORE-08, `InvalidAgentOptions` naming
 * each bad field, as the AgentLoop says it) and the header's meta (`InvalidEventData`, as a session
 * plan says it), whether or not the session exists.
 *
 * @internal
 */
export const createOf = (
  id: string,
  request?: Gateway.CreateRequest | undefined
): Either.Either<Create, Message.InvalidSessionId | InvalidAgentOptions | SessionError.InvalidEventData> =>
  Either.flatMap(sessionKey(id), (key): Either.Either<Create, InvalidAgentOptions | SessionError.InvalidEventData> => {
    if (request === undefined) return Either.right({ key, request: {} })
    const checked = request.options === undefined ? Either.right(undefined) : decodeAgentOptions(request.options)
    if (Either.isLeft(checked)) return Either.left(checked.left)
    if (request.meta === undefined) return Either.right({ key, request })
    return Either.map(headerMeta(request.meta), () => ({ key, request }))
  })

/** A page of `list`, decoded: its size and where it starts. @internal */
export interface Page {
  readonly limit: number
  readonly after: string | undefined
  /** HIL-06: only the sessions with this status. */
  readonly status: Gateway.SessionStatus | undefined
}

/** `list`'s input with its defaults. @internal */
export const pageOf = (request?: Gateway.ListRequest | undefined): Page => ({
  limit: request?.limit ?? DEFAULT_PAGE,
  after: request?.after,
  status: request?.status
})
