/**
 * The durable vocabulary of a session: the envelope every event shares, the core event types the
 * inbox, the loop and repair write, and the rules for custom events (EVT-01..04, MSG-00).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { AssistantMessage, MessageId, SessionId, ToolResultMessage, UserMessage } from "./Message.js"
import { JsonRecord, JsonValue } from "./internal/log/jsonValue.js"
import { ModelSettings, OutputFormat } from "./ModelSettings.js"

// the JSON vocabulary lives in `internal/log/jsonValue.ts`, where modules this one imports can use it too
export {
  /**
   * A JSON record as stored in a log (EVT-03).
   *
   * @since 0.1.0
   * @category json
   */
  JsonRecord,
  /**
   * Any lossless JSON value (EVT-03), as a type and as its Schema. Decoding checks the structure; the
   * append path and stored-record decoding also refuse sparse arrays and class instances.
   *
   * @since 0.1.0
   * @category json
   */
  JsonValue
}

/**
 * The format name every header carries.
 *
 * @since 0.1.0
 * @category format
 */
export const FORMAT = "effect-agent/session" as const

/**
 * The format version this library writes (DUR-00). It reads and appends to sessions of every
 * version in {@link SUPPORTED_VERSIONS}; a newer one is refused (EVT-04).
 *
 * @since 0.1.0
 * @category format
 */
export const VERSION = 3 as const

/**
 * The format versions this library reads and appends to (DUR-00). Version 2 adds
 * `providerCallId` on tool-call parts, the `reasoningTokens`/`cachedInputTokens` usage fields, the
 * `"other"` finish reason and the `session/compacted` event (CMP-01); they may be appended to a version-1 session too (an older library then
 * refuses the session, which is safe). Version 3 adds the people-in-the-loop events
 * (`tool/approval-requested`, `tool/approval-decided`, `tool/input-requested`, `tool/input-provided`),
 * `tool/child` and the header's `child`.
 *
 * @since 0.2.0
 * @category format
 */
export const SUPPORTED_VERSIONS = [1, 2, 3] as const

/**
 * Which parent call a child session was spawned for (format v3): a child's header names its
 * parent session and the tool call that owns it. This is ownership, not a fork's lineage.
 *
 * @since 0.3.0
 * @category format
 */
export const ChildOf = Schema.Struct({
  parent: SessionId,
  callId: Schema.String.pipe(Schema.minLength(1))
})

/**
 * @since 0.3.0
 * @category format
 */
export type ChildOf = typeof ChildOf.Type

/**
 * @since 0.1.0
 * @category format
 */
export const SessionHeader = Schema.Struct({
  format: Schema.Literal(FORMAT),
  version: Schema.Literal(...SUPPORTED_VERSIONS),
  id: SessionId,
  createdAt: Schema.NonNegativeInt,
  parentSession: Schema.optionalWith(SessionId, { exact: true }),
  seedLength: Schema.NonNegativeInt,
  meta: JsonRecord,
  child: Schema.optionalWith(ChildOf, { exact: true })
})

/**
 * @since 0.1.0
 * @category format
 */
export type SessionHeader = typeof SessionHeader.Type

const Seq = Schema.NonNegativeInt
const Time = Schema.NonNegativeInt
const Turn = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))
const Step = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))

const envelope = <T extends string, D extends Schema.Schema.Any>(type: T, data: D) =>
  Schema.Struct({ seq: Seq, time: Time, type: Schema.Literal(type), data })

/**
 * Which inbox list a splice or a send targets.
 *
 * @since 0.1.0
 * @category inbox
 */
export const InboxTarget = Schema.Literal("next-turn", "next-step")

/**
 * @since 0.1.0
 * @category inbox
 */
export type InboxTarget = typeof InboxTarget.Type

/**
 * @since 0.1.0
 * @category core events
 */
export const InboxSpliced = envelope(
  "agent/inbox/spliced",
  Schema.Struct({
    target: InboxTarget,
    start: Schema.NonNegativeInt,
    removed: Schema.Array(MessageId),
    inserted: Schema.Array(UserMessage),
    outcome: Schema.optionalWith(Schema.Literal("canceled", "rejected", "restored"), { exact: true }),
    /**
     * HOST-03 (format v2): whether the inserted messages were sent waking. Written only when it
     * differs from what a splice without it means (v1 logs): next-turn waking, next-step not, and
     * `restored` messages (claimed into a turn a crash interrupted) waking.
     */
    wake: Schema.optionalWith(Schema.Boolean, { exact: true })
  })
)

/**
 * @since 0.1.0
 * @category core events
 */
export const TurnStart = envelope("turn/start", Schema.Struct({ turn: Turn }))

/**
 * @since 0.1.0
 * @category core events
 */
export const StepStart = envelope("step/start", Schema.Struct({ turn: Turn, step: Step }))

/**
 * @since 0.1.0
 * @category core events
 */
export const StepEnd = envelope("step/end", Schema.Struct({ turn: Turn, step: Step }))

/**
 * @since 0.1.0
 * @category core events
 */
export const UserMessageEntered = envelope(
  "user/message",
  Schema.Struct({ turn: Turn, step: Step, message: UserMessage })
)

/**
 * Token usage reported by a model. The driver keeps only these fields, and only integers ≥ 0
 * (DUR-02); `reasoningTokens` and `cachedInputTokens` are format version 2.
 *
 * @since 0.1.0
 * @category core events
 */
export const Usage = Schema.Struct({
  inputTokens: Schema.optionalWith(Schema.NonNegativeInt, { exact: true }),
  outputTokens: Schema.optionalWith(Schema.NonNegativeInt, { exact: true }),
  reasoningTokens: Schema.optionalWith(Schema.NonNegativeInt, { exact: true }),
  cachedInputTokens: Schema.optionalWith(Schema.NonNegativeInt, { exact: true })
})

/**
 * @since 0.1.0
 * @category core events
 */
export type Usage = typeof Usage.Type

/**
 * Why a model stopped: `"other"` (format version 2) stands for any reason a provider gave that is
 * not one of the others (DUR-02).
 *
 * @since 0.2.0
 * @category core events
 */
export const FinishReason = Schema.Literal("stop", "tool-calls", "max-tokens", "other")

/**
 * @since 0.2.0
 * @category core events
 */
export type FinishReason = typeof FinishReason.Type

/**
 * @since 0.1.0
 * @category core events
 */
export const AssistantMessageLogged = envelope(
  "assistant/message",
  Schema.Struct({
    turn: Turn,
    step: Step,
    message: AssistantMessage,
    usage: Schema.optionalWith(Usage, { exact: true }),
    finish: Schema.optionalWith(FinishReason, { exact: true }),
    interrupted: Schema.optionalWith(Schema.Literal(true), { exact: true })
  }).pipe(
    Schema.filter((d) =>
      (d.finish === undefined) === (d.interrupted === true) ||
      "an assistant/message has a finish reason exactly when it was not interrupted"
    ),
    Schema.filter((d) =>
      (d.finish !== "max-tokens" && d.interrupted !== true) ||
      d.message.content.every((part) => part.type !== "tool-call") ||
      "an interrupted or max-tokens assistant/message carries no tool-call parts"
    )
  )
)

/**
 * @since 0.1.0
 * @category core events
 */
export const ToolCallLogged = envelope(
  "tool/call",
  Schema.Struct({
    turn: Turn,
    step: Step,
    callId: Schema.String.pipe(Schema.minLength(1)),
    name: Schema.String,
    arguments: Schema.String
  })
)

/**
 * @since 0.1.0
 * @category core events
 */
export const ToolResultLogged = envelope(
  "tool/result",
  Schema.Struct({
    turn: Turn,
    step: Step,
    message: ToolResultMessage,
    error: Schema.optionalWith(Schema.Struct({ name: Schema.String, code: Schema.String }), { exact: true })
  })
)

/**
 * Why an activity was cancelled.
 *
 * @since 0.1.0
 * @category core events
 */
export const CancelCause = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("user") }),
  Schema.Struct({ kind: Schema.Literal("parent") }),
  Schema.Struct({ kind: Schema.Literal("hook"), reason: Schema.String }),
  Schema.Struct({ kind: Schema.Literal("disposed") })
)

/**
 * @since 0.1.0
 * @category core events
 */
export type CancelCause = typeof CancelCause.Type

/**
 * How a turn ended.
 *
 * @since 0.1.0
 * @category core events
 */
export const TurnEndReason = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("completed") }),
  Schema.Struct({ kind: Schema.Literal("max-tokens") }),
  Schema.Struct({ kind: Schema.Literal("max-steps") }),
  Schema.Struct({ kind: Schema.Literal("blocked"), reason: Schema.String }),
  Schema.Struct({ kind: Schema.Literal("aborted"), cause: CancelCause }),
  Schema.Struct({
    kind: Schema.Literal("error"),
    error: Schema.Struct({ message: Schema.String, code: Schema.String })
  }),
  Schema.Struct({ kind: Schema.Literal("interrupted") })
)

/**
 * @since 0.1.0
 * @category core events
 */
export type TurnEndReason = typeof TurnEndReason.Type

/**
 * @since 0.1.0
 * @category core events
 */
export const TurnEnd = envelope("turn/end", Schema.Struct({ turn: Turn, reason: TurnEndReason }))

/**
 * A tool as described to the model.
 *
 * @since 0.1.0
 * @category core events
 */
export const ToolDescription = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  parameters: JsonRecord
})

/**
 * The model settings a `request/config` stores (APP-04): every setting but `maxOutputTokens`,
 * which the config keeps as `maxTokens` (one value).
 *
 * @since 0.3.0
 * @category core events
 */
export const RequestSettings = ModelSettings.pipe(Schema.omit("maxOutputTokens"))

/**
 * @since 0.3.0
 * @category core events
 */
export type RequestSettings = typeof RequestSettings.Type

/**
 * @since 0.1.0
 * @category core events
 */
export const RequestConfig = envelope(
  "request/config",
  Schema.Struct({
    provider: Schema.String,
    model: Schema.String,
    maxTokens: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { exact: true }),
    system: Schema.optionalWith(Schema.String, { exact: true }),
    tools: Schema.Array(ToolDescription),
    /**
     * APP-04 (format v3): the model settings of the requests from here on, but `maxOutputTokens`,
     * which is `maxTokens`.
     */
    settings: Schema.optionalWith(RequestSettings, { exact: true }),
    /** OUT-01 (format v3): the typed output the requests from here on ask for. */
    output: Schema.optionalWith(OutputFormat, { exact: true }),
    /**
     * APP-04 (format v3): this config holds a message's own settings or output, for its turn only;
     * the agent's own are those of the last config without it (what `resume` restores).
     */
    turnOnly: Schema.optionalWith(Schema.Literal(true), { exact: true })
  })
)

/**
 * CMP-01 (format v2): the first `upTo` events of the log (a count, as a fork's `upTo`, FORK-01)
 * were summarised as `summary`, by a model call that used `usage` (`{}` when the provider reported
 * none). From this event on the model-visible history is the summary followed by what the events
 * from `upTo` on contribute (SES-03, REQ-03); the events before `upTo` stay in the log. An `upTo`
 * beyond the event's own seq covers only the events before it (the library never writes one).
 *
 * @since 0.2.0
 * @category core events
 */
export const SessionCompacted = envelope(
  "session/compacted",
  Schema.Struct({
    upTo: Schema.NonNegativeInt,
    summary: Schema.String,
    usage: Usage
  })
)

const CallId = Schema.String.pipe(Schema.minLength(1))

/**
 * An id the library mints for a request a person answers (an approval's `approvalId`, a question's
 * `requestId`): URL-safe, so it can name a route.
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const RequestId = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9._~-]{1,128}$/))

/**
 * Format v3: a call of the step's response needs a decision before it may run. Logged before
 * the call's `tool/call`, which is written only when the call is dispatched. `arguments` is the model's
 * raw argument text; `deadline` (epoch milliseconds on the session's Clock) is when the request is
 * rejected automatically.
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const ApprovalRequested = envelope(
  "tool/approval-requested",
  Schema.Struct({
    turn: Turn,
    step: Step,
    callId: CallId,
    approvalId: RequestId,
    tool: Schema.String,
    arguments: Schema.String,
    deadline: Schema.optionalWith(Schema.NonNegativeInt, { exact: true })
  })
)

/**
 * How an approval request was settled: a decision (`approved`, `rejected`) or a cancel of the turn
 * (`canceled`).
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const ApprovalDecision = Schema.Literal("approved", "rejected", "canceled")

/**
 * @since 0.3.0
 * @category people in the loop
 */
export type ApprovalDecision = typeof ApprovalDecision.Type

/**
 * Format v3: the decision on an approval request. `reason` is for people (`"timeout"` for an
 * automatic rejection); `message` is what the model sees in a rejected call's result; `arguments` the
 * edited argument text an approval ran the call with; `initiator` the agent that decided, `null` when
 * it came from outside any agent (a person through the API).
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const ApprovalDecided = envelope(
  "tool/approval-decided",
  Schema.Struct({
    turn: Turn,
    step: Step,
    callId: CallId,
    decision: ApprovalDecision,
    reason: Schema.optionalWith(Schema.String, { exact: true }),
    message: Schema.optionalWith(Schema.String, { exact: true }),
    arguments: Schema.optionalWith(Schema.String, { exact: true }),
    initiator: Schema.NullOr(SessionId)
  })
)

/**
 * Format v3: a running tool asked a question (`Tool.ask`); `jsonSchema` describes the answer
 * it decodes. `deadline` as for approvals.
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const InputRequested = envelope(
  "tool/input-requested",
  Schema.Struct({
    turn: Turn,
    step: Step,
    callId: CallId,
    requestId: RequestId,
    question: Schema.String,
    jsonSchema: JsonRecord,
    deadline: Schema.optionalWith(Schema.NonNegativeInt, { exact: true })
  })
)

/**
 * How a question was settled: answered (`provided`, with the `value`), `declined` by the person,
 * `canceled` with the turn, or `timeout`.
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const InputOutcome = Schema.Literal("provided", "declined", "canceled", "timeout")

/**
 * @since 0.3.0
 * @category people in the loop
 */
export type InputOutcome = typeof InputOutcome.Type

/**
 * Format v3: the answer to a question, or why there is none. A replayed tool's `ask` returns
 * a logged `value` at once.
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const InputProvided = envelope(
  "tool/input-provided",
  Schema.Struct({
    turn: Turn,
    step: Step,
    callId: CallId,
    requestId: RequestId,
    outcome: InputOutcome,
    value: Schema.optionalWith(JsonValue, { exact: true })
  }).pipe(
    Schema.filter((d) =>
      (d.outcome === "provided") === (d.value !== undefined) ||
      "a tool/input-provided carries a value exactly when its outcome is provided"
    )
  )
)

/**
 * Format v3: the call `callId` runs the child session `child`. Logged before the child is
 * spawned, so a resumed parent finds it.
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const ToolChild = envelope(
  "tool/child",
  Schema.Struct({ turn: Turn, step: Step, callId: CallId, child: SessionId })
)

/**
 * Every core event, discriminated by `type` (EVT-02).
 *
 * @since 0.1.0
 * @category core events
 */
export const CoreEvent = Schema.Union(
  InboxSpliced,
  TurnStart,
  StepStart,
  StepEnd,
  UserMessageEntered,
  AssistantMessageLogged,
  ToolCallLogged,
  ToolResultLogged,
  TurnEnd,
  RequestConfig,
  SessionCompacted,
  ApprovalRequested,
  ApprovalDecided,
  InputRequested,
  InputProvided,
  ToolChild
)

/**
 * @since 0.1.0
 * @category core events
 */
export type CoreEvent = typeof CoreEvent.Type

/**
 * The core type names.
 *
 * @since 0.1.0
 * @category core events
 */
export type CoreType = CoreEvent["type"]

/**
 * @since 0.1.0
 * @category core events
 */
export const coreTypes: ReadonlySet<string> = new Set<CoreType>([
  "agent/inbox/spliced",
  "turn/start",
  "step/start",
  "step/end",
  "user/message",
  "assistant/message",
  "tool/call",
  "tool/result",
  "turn/end",
  "request/config",
  "session/compacted",
  "tool/approval-requested",
  "tool/approval-decided",
  "tool/input-requested",
  "tool/input-provided",
  "tool/child"
])

/**
 * Type prefixes reserved for the core vocabulary: an unknown type under one of them comes from a
 * newer writer and is refused (EVT-01).
 *
 * @since 0.1.0
 * @category core events
 */
export const reservedPrefixes: ReadonlyArray<string> = [
  "agent/",
  "turn/",
  "step/",
  "user/",
  "assistant/",
  "tool/",
  "request/",
  "session/"
]

/**
 * @since 0.1.0
 * @category core events
 */
export const isReservedType = (type: string): boolean => reservedPrefixes.some((prefix) => type.startsWith(prefix))

/**
 * @since 0.1.0
 * @category core events
 */
export const isCoreType = (type: string): type is CoreType => coreTypes.has(type)

/**
 * A custom (plugin) event: any type outside the reserved prefixes that contains a `/`, with JSON
 * data.
 *
 * @since 0.1.0
 * @category custom events
 */
export interface CustomEvent {
  readonly seq: number
  readonly time: number
  readonly type: string
  readonly data: JsonValue
}

/**
 * What a plugin passes to `Session.append`.
 *
 * @since 0.1.0
 * @category custom events
 */
export interface CustomEventInput {
  readonly type: string
  readonly data: unknown
}

/**
 * A durable event: `{seq, time, type, data}` (EVT-01). Core events are typed by `type`; any other
 * event is a {@link CustomEvent}.
 *
 * @since 0.1.0
 * @category models
 */
export type SessionEvent = CoreEvent | CustomEvent

/**
 * A core event before the session stamps `seq` and `time`.
 *
 * @since 0.1.0
 * @category models
 */
export type CoreEventInput = CoreEvent extends infer E ? E extends CoreEvent ? Omit<E, "seq" | "time"> : never : never

/**
 * The envelope every stored event has.
 *
 * @since 0.1.0
 * @category models
 */
export const Envelope = Schema.Struct({ seq: Seq, time: Time, type: Schema.String, data: Schema.Unknown })

/**
 * Narrows an event to a core type.
 *
 * @since 0.1.0
 * @category guards
 */
export const is = <T extends CoreType>(type: T) => (event: SessionEvent): event is Extract<CoreEvent, { type: T }> =>
  event.type === type
