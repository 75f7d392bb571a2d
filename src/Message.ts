/**
 * Identities and messages: the plain, durable data a session's log is made of (ID-01, ID-02,
 * MSG-00, MSG-01).
 *
 * @since 0.1.0
 */
import { Either, Schema } from "effect"
import { deepFreeze } from "./internal/json.js"
import { TurnOptions } from "./ModelSettings.js"

/**
 * The id of a session, and of the agent that drives it: `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`
 * without `..`, so it is safe as a file name and as a SQL key (ID-01).
 *
 * @since 0.1.0
 * @category ids
 */
export const SessionId = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, {
    message: () => "a session id is 1-128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
  }),
  Schema.filter((s) => !s.includes("..") || "a session id may not contain \"..\""),
  Schema.brand("SessionId")
)

/**
 * @since 0.1.0
 * @category ids
 */
export type SessionId = typeof SessionId.Type

/**
 * The id was not a valid {@link SessionId}.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidSessionId extends Schema.TaggedError<InvalidSessionId>("effect-agent/InvalidSessionId")(
  "InvalidSessionId",
  { id: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `invalid session id ${JSON.stringify(this.id)}: ${this.reason}. ` +
      "Use 1-128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit, without \"..\"."
  }
}

const decodeSessionId = Schema.decodeUnknownEither(SessionId)

/**
 * Validates a session id (ID-01).
 *
 * @since 0.1.0
 * @category ids
 */
export const sessionId = (id: unknown): Either.Either<SessionId, InvalidSessionId> =>
  Either.mapLeft(decodeSessionId(id), () =>
    new InvalidSessionId({ id: typeof id === "string" ? id : String(id), reason: whyNotSessionId(id) }))

/** What is wrong with an id, in plain words (SEC-03: not the schema's rendering of its pattern). */
const whyNotSessionId = (id: unknown): string => {
  if (typeof id !== "string") return `it is ${id === null ? "null" : `a ${typeof id}`}, not a string`
  if (id.length === 0) return "it is empty"
  if (id.length > 128) return `it is ${id.length} characters long, over 128`
  const bad = /[^A-Za-z0-9._-]/.exec(id)
  if (bad !== null) return `it contains ${JSON.stringify(bad[0])}`
  if (!/^[A-Za-z0-9]/.test(id)) return `it starts with ${JSON.stringify(id[0])}`
  return "it contains \"..\""
}

/**
 * The id of a message: a non-empty string of at most 256 characters (ID-02). A `MessageId` is
 * accepted at most once per session (INB-01).
 *
 * @since 0.1.0
 * @category ids
 */
export const MessageId = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256), Schema.brand("MessageId"))

/**
 * @since 0.1.0
 * @category ids
 */
export type MessageId = typeof MessageId.Type

/**
 * @since 0.1.0
 * @category content
 */
export const TextPart = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String })

/**
 * @since 0.1.0
 * @category content
 */
export type TextPart = typeof TextPart.Type

/**
 * An image, inline as base64.
 *
 * @since 0.1.0
 * @category content
 */
export const ImagePart = Schema.Struct({
  type: Schema.Literal("image"),
  mediaType: Schema.String,
  data: Schema.String
})

/**
 * @since 0.1.0
 * @category content
 */
export type ImagePart = typeof ImagePart.Type

/**
 * @since 0.1.0
 * @category content
 */
export const ReasoningPart = Schema.Struct({ type: Schema.Literal("reasoning"), text: Schema.String })

/**
 * @since 0.1.0
 * @category content
 */
export type ReasoningPart = typeof ReasoningPart.Type

/**
 * A tool call as the model produced it: `arguments` is the raw argument text. `providerCallId` is
 * present only when the provider's id was replaced by a minted `callId` (DUR-02, format version 2).
 *
 * @since 0.1.0
 * @category content
 */
export const ToolCallPart = Schema.Struct({
  type: Schema.Literal("tool-call"),
  callId: Schema.String.pipe(Schema.minLength(1)),
  name: Schema.String,
  arguments: Schema.String,
  /**
   * The id the provider gave the call, when it was not usable as a `callId` (empty, over 128
   * characters or not printable ASCII) and the driver minted one instead (DUR-02; format v2).
   */
  providerCallId: Schema.optionalWith(Schema.String, { exact: true })
})

/**
 * @since 0.1.0
 * @category content
 */
export type ToolCallPart = typeof ToolCallPart.Type

/**
 * What a user (or a tool result) can say: text or images.
 *
 * @since 0.1.0
 * @category content
 */
export const ContentPart = Schema.Union(TextPart, ImagePart)

/**
 * @since 0.1.0
 * @category content
 */
export type ContentPart = typeof ContentPart.Type

/**
 * Who wrote a user-role message.
 *
 * @since 0.1.0
 * @category messages
 */
export const MessageSource = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("user") }),
  Schema.Struct({ kind: Schema.Literal("agent"), agent: SessionId }),
  Schema.Struct({ kind: Schema.Literal("plugin"), plugin: Schema.String }),
  Schema.Struct({
    kind: Schema.Literal("system"),
    /**
     * Why the library wrote it (format v3), e.g. `"output-invalid"` for OUT-02's correction message.
     *
     * @since 0.3.0
     */
    reason: Schema.optionalWith(Schema.String, { exact: true })
  })
)

/**
 * @since 0.1.0
 * @category messages
 */
export type MessageSource = typeof MessageSource.Type

/**
 * @since 0.1.0
 * @category messages
 */
export const UserMessage = Schema.Struct({
  id: MessageId,
  role: Schema.Literal("user"),
  content: Schema.Array(ContentPart),
  source: MessageSource,
  /**
   * The settings and output format of the turn this message starts (APP-04, OUT-01; format v3):
   * written by `send` from its `settings`/`output` options, never sent to the model.
   *
   * @since 0.3.0
   */
  turnOptions: Schema.optionalWith(TurnOptions, { exact: true })
})

/**
 * @since 0.1.0
 * @category messages
 */
export type UserMessage = typeof UserMessage.Type

/**
 * @since 0.1.0
 * @category messages
 */
export const AssistantMessage = Schema.Struct({
  id: MessageId,
  role: Schema.Literal("assistant"),
  content: Schema.Array(Schema.Union(TextPart, ReasoningPart, ToolCallPart)),
  source: Schema.Struct({ kind: Schema.Literal("model"), provider: Schema.String, model: Schema.String })
})

/**
 * @since 0.1.0
 * @category messages
 */
export type AssistantMessage = typeof AssistantMessage.Type

/**
 * @since 0.1.0
 * @category messages
 */
export const ToolResultMessage = Schema.Struct({
  id: MessageId,
  role: Schema.Literal("tool"),
  toolCallId: Schema.String.pipe(Schema.minLength(1)),
  toolName: Schema.String,
  content: Schema.Array(ContentPart),
  isError: Schema.Boolean
})

/**
 * @since 0.1.0
 * @category messages
 */
export type ToolResultMessage = typeof ToolResultMessage.Type

/**
 * Any message of the model-visible history.
 *
 * @since 0.1.0
 * @category messages
 */
export const Message = Schema.Union(UserMessage, AssistantMessage, ToolResultMessage)

/**
 * @since 0.1.0
 * @category messages
 */
export type Message = typeof Message.Type

/**
 * Builds a frozen user message with a single text part. A fresh id is minted with
 * `crypto.randomUUID()` unless `options.id` is given; the source is `{kind:"user"}` unless given.
 *
 * @since 0.1.0
 * @category constructors
 */
export const user = (
  text: string,
  options?: {
    readonly id?: string | undefined
    readonly source?: MessageSource | undefined
    readonly content?: ReadonlyArray<ContentPart> | undefined
  }
): UserMessage =>
  deepFreeze({
    id: (options?.id ?? globalThis.crypto.randomUUID()) as MessageId,
    role: "user" as const,
    content: options?.content ?? [{ type: "text" as const, text }],
    source: options?.source ?? { kind: "user" as const }
  })

/**
 * Concatenates the text parts of a message's content.
 *
 * @since 0.1.0
 * @category accessors
 */
export const textOf = (content: ReadonlyArray<{ readonly type: string; readonly text?: string }>): string => {
  let out = ""
  for (const part of content) if (part.type === "text" && part.text !== undefined) out += part.text
  return out
}
