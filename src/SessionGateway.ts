/**
 * The SessionGateway (SPEC §17, HTTP-00): what a front end — the HTTP API of `effect-agent/HttpApi`,
 * an RPC server, a test — needs from a fleet of sessions, and nothing that only exists in one
 * process. Every argument and result is plain data with a Schema, and every failure is a
 * `Schema.TaggedError` of the library, so one interface is implemented by `AgentHost` in one process
 * (`SessionGateway.layerHost`) and by the cluster client (§19), and the same API serves both.
 *
 * @since 0.2.0
 */
import type { Chunk, Duration, Effect, Exit, SchemaAST, Scope, Stream } from "effect"
import { Context, Layer, ParseResult, Schema } from "effect"
import * as AgentError from "./AgentError.js"
import * as AgentHost from "./AgentHost.js"
import type { AgentRegistry } from "./AgentRegistry.js"
import * as codec from "./internal/log/eventCodec.js"
import {
  DecisionsUnsupported,
  InvalidRequest,
  MessageIdConflict,
  RunsUnsupported,
  TurnRunning
} from "./internal/gateway/errors.js"
import * as internal from "./internal/gateway/host.js"
import * as json from "./internal/json.js"
import { ContentPart, InvalidSessionId, MessageId, SessionId } from "./Message.js"
import { ModelSettings } from "./ModelSettings.js"
import type * as Pending from "./Pending.js"
import * as SessionError from "./SessionError.js"
import type { SessionEvent as SessionEventType } from "./SessionEvent.js"
import type { JsonRecord } from "./SessionEvent.js"
import { Usage } from "./SessionEvent.js"
import type { TurnResult } from "./TurnResult.js"

// -------------------------------------------------------------------------------------------------
// errors

// they live in `internal/gateway/errors.ts`, where the gateways' internals import them (ARCH-02)
export {
  /** @since 0.3.0 */
  DecisionsUnsupported,
  /** @since 0.2.0 */
  InvalidRequest,
  /** @since 0.2.0 */
  MessageIdConflict,
  /** @since 0.3.0 */
  RunsUnsupported,
  /** @since 0.3.0 */
  TurnRunning
}

/**
 * What reading a session can fail with.
 *
 * @since 0.2.0
 * @category errors
 */
export type ReadError =
  | InvalidSessionId
  | SessionError.SessionNotFound
  | SessionError.SessionCorrupt
  | SessionError.SessionFormatUnsupported
  | SessionError.PersistenceError

/**
 * What activating a session's agent (to write to it) can fail with: what `AgentHost.get` can —
 * the session held by another process (`SessionLocked`), the host full (`HostAtCapacity`) or
 * closing (`HostClosed`), a log that does not replay, the runtime shutting down — besides
 * {@link ReadError}.
 *
 * @since 0.2.0
 * @category errors
 */
export type ActivationError = ReadError | AgentHost.GetError

/**
 * What a write through a live agent (send, cancel) can fail with, besides {@link ActivationError}.
 *
 * @since 0.2.0
 * @category errors
 */
export type WriteError =
  | ActivationError
  | AgentError.AgentInactive
  | AgentError.AgentBroken
  | SessionError.SessionClosed

/**
 * What `create` can fail with.
 *
 * @since 0.2.0
 * @category errors
 */
export type CreateError = ActivationError

/**
 * What `send` can fail with.
 *
 * @since 0.2.0
 * @category errors
 */
export type SendError = WriteError | InvalidRequest | MessageIdConflict

/**
 * What `fork` can fail with (`AgentAlreadyExists` when the child exists, `ForkInsideOpenTurn` and
 * `InvalidForkBoundary` for a bad `upTo`, FORK-01).
 *
 * @since 0.2.0
 * @category errors
 */
export type ForkError = WriteError

/**
 * What `dispose` can fail with: the agent's teardown failed or timed out (it was released all the
 * same), or the session is unknown.
 *
 * @since 0.2.0
 * @category errors
 */
export type DisposeError = ReadError | AgentError.AgentDisposeError | AgentError.TeardownTimeout

/**
 * What `remove` can fail with: as dispose, and the stored log held by another process.
 *
 * @since 0.2.0
 * @category errors
 */
export type RemoveError = DisposeError | AgentHost.RemoveError

/**
 * What `eventsFrom` can fail with: before anything streams, a bad id, an unknown session or a
 * cursor outside the log; at any time, the log unreadable, the session removed while it is read
 * (`SessionRemoved`), the gateway closing (`HostClosed`). As `AgentHost.eventsFrom` (EVS-01).
 *
 * @since 0.2.0
 * @category errors
 */
export type EventsError = ReadError | AgentHost.EventsFromError

/**
 * Every failure of the gateway, as one Schema (a union of `Schema.TaggedError`s): what an RPC
 * protocol over the gateway declares as its error.
 *
 * @since 0.2.0
 * @category errors
 */
export const GatewayError = Schema.Union(
  InvalidRequest,
  MessageIdConflict,
  InvalidSessionId,
  SessionError.SessionNotFound,
  SessionError.SessionCorrupt,
  SessionError.SessionFormatUnsupported,
  SessionError.PersistenceError,
  SessionError.SessionLocked,
  SessionError.SessionAlreadyLive,
  SessionError.SessionConflict,
  SessionError.SessionFull,
  SessionError.SessionClosed,
  SessionError.InvalidEventData,
  SessionError.InvalidEventCursor,
  SessionError.ForkInsideOpenTurn,
  SessionError.InvalidForkBoundary,
  AgentError.InvalidInboxLog,
  AgentError.InvalidAgentOptions,
  AgentError.AgentAlreadyExists,
  AgentError.AgentCreationVetoed,
  AgentError.NoAgentFactory,
  AgentError.AgentLoopInactive,
  AgentError.PersistenceNotConfigured,
  AgentError.AgentInactive,
  AgentError.AgentBroken,
  AgentError.AgentDisposeError,
  AgentError.TeardownTimeout,
  AgentHost.HostAtCapacity,
  AgentHost.HostClosed,
  AgentHost.HostSetupFailed,
  AgentHost.SessionRemoved,
  AgentError.MessageDiscarded,
  AgentError.TurnNotFound,
  TurnRunning
)

/**
 * @since 0.2.0
 * @category errors
 */
export type GatewayError = typeof GatewayError.Type

// -------------------------------------------------------------------------------------------------
// requests

/**
 * A header's `meta` as the log's own codec takes it (EVT-03): a JSON object, checked and copied by
 * `snapshot` instead of being rebuilt key by key, so a `__proto__` key stays a key of the data and
 * never becomes the object's prototype (DUR-03), and nesting past DUR-10's limit is refused without
 * recursing through it.
 */
const metaOf = (input: unknown, ast: SchemaAST.AST): Effect.Effect<JsonRecord, ParseResult.ParseIssue> => {
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    return ParseResult.fail(new ParseResult.Type(ast, input, "expected a JSON object"))
  }
  const copy = json.snapshot(input)
  if (copy._tag === "Right") return ParseResult.succeed(copy.value as JsonRecord)
  const where = copy.problem.path === "$" ? "" : `at ${copy.problem.path.slice(1).replace(/^\./, "")}: `
  return ParseResult.fail(new ParseResult.Type(ast, input, `${where}${copy.problem.reason}`))
}

const Meta: Schema.Schema<JsonRecord> = Schema.declare([], {
  decode: () => (input, _options, ast) => metaOf(input, ast),
  encode: () => (input, _options, ast) => metaOf(input, ast)
}, {
  identifier: "JsonRecord",
  description: "a JSON object",
  jsonSchema: { type: "object", additionalProperties: true }
})

/**
 * How a message is sent: `followup` (next turn, wakes the agent), `steer` (next step, wakes it),
 * `inject` (next step, never wakes it).
 *
 * @since 0.2.0
 * @category requests
 */
export const SendMode = Schema.Literal("followup", "steer", "inject")

/**
 * @since 0.2.0
 * @category requests
 */
export type SendMode = typeof SendMode.Type

/**
 * A message to send: exactly one of `text` (one text part) and `content`; `id` makes a retry
 * idempotent (a fresh id is minted without it); `mode` defaults to `followup`.
 *
 * @since 0.2.0
 * @category requests
 */
export const SendRequest = Schema.Struct({
  text: Schema.optionalWith(Schema.String, { exact: true }),
  content: Schema.optionalWith(Schema.Array(ContentPart), { exact: true }),
  id: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256)), { exact: true }),
  mode: Schema.optionalWith(SendMode, { exact: true })
}).pipe(
  Schema.filter((request) =>
    (request.text === undefined) !== (request.content === undefined) ||
    "a message has exactly one of text and content"
  )
).annotations({ identifier: "SendRequest" })

/**
 * @since 0.2.0
 * @category requests
 */
export type SendRequest = typeof SendRequest.Type

/** A field the request does not know is refused, never ignored (APP-04: no setting is silently dropped). */
const strictFields = { parseOptions: { onExcessProperty: "error" } } as const

/**
 * The typed output a run asks for (OUT-01, APP-05), as a user of OpenAI's `response_format`
 * writes its `json_schema` object: `schema` the JSON Schema of the answer, `name` (default
 * `"output"`, `^[A-Za-z0-9_-]{1,64}$`) and `strict` (default: whether the schema meets OpenAI's
 * strict rules; `true` for one that does not is refused).
 *
 * @since 0.3.0
 * @category requests
 */
export const OutputRequest = Schema.Struct({
  name: Schema.optionalWith(Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/)), { exact: true }),
  schema: Meta,
  strict: Schema.optionalWith(Schema.Boolean, { exact: true })
}).annotations({ identifier: "OutputRequest", ...strictFields })

/**
 * @since 0.3.0
 * @category requests
 */
export type OutputRequest = typeof OutputRequest.Type

/**
 * A run (APP-05): `message` is the text (or the content parts) of a follow-up; `id` makes a retry
 * attach to the same message's turn instead of sending it again. `settings` (APP-04) and `output`
 * (OUT-01) apply to that turn only; they are stored with the message, so they still apply after a
 * restart. A setting the request does not know is refused (400), never dropped.
 *
 * @since 0.3.0
 * @category requests
 */
export const RunRequest = Schema.Struct({
  message: Schema.Union(Schema.String, Schema.Array(ContentPart)),
  id: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256)), { exact: true }),
  /** @since 0.3.0 */
  settings: Schema.optionalWith(ModelSettings.annotations(strictFields), { exact: true }),
  /** @since 0.3.0 */
  output: Schema.optionalWith(OutputRequest, { exact: true })
}).annotations({ identifier: "RunRequest" })

/**
 * @since 0.3.0
 * @category requests
 */
export type RunRequest = typeof RunRequest.Type

/**
 * A run that did not end within its wait (APP-05): its message is accepted; `turn` is the turn
 * that claimed it, once one did (read it later with `GET /sessions/:id/turns/:turn`).
 *
 * @since 0.3.0
 * @category results
 */
export const RunAccepted = Schema.TaggedStruct("RunAccepted", {
  messageId: MessageId,
  turn: Schema.optionalWith(Schema.Int, { exact: true })
}).annotations({ identifier: "RunAccepted" })

/**
 * @since 0.3.0
 * @category results
 */
export type RunAccepted = typeof RunAccepted.Type

/**
 * What a run answers (APP-05): the `TurnResult` of a turn that ended within the wait (whatever its
 * reason: a failed turn is a result too), else `RunAccepted`.
 *
 * @since 0.3.0
 * @category results
 */
export type RunOutcome = TurnResult | RunAccepted

/**
 * What `run` can fail with.
 *
 * @since 0.3.0
 * @category errors
 */
export type RunError = SendError | AgentError.MessageDiscarded | AgentError.TurnNotFound

/**
 * What `turn` can fail with.
 *
 * @since 0.3.0
 * @category errors
 */
export type TurnError =
  | ActivationError
  | AgentError.TurnNotFound
  | TurnRunning
  | AgentError.AgentInactive
  | AgentError.AgentBroken

/**
 * The agent options a session is created with (the route and the loop's limits; SPEC §7).
 *
 * @since 0.2.0
 * @category requests
 */
export const AgentOptions = Schema.Struct({
  provider: Schema.optionalWith(Schema.String, { exact: true }),
  model: Schema.optionalWith(Schema.String, { exact: true }),
  maxTokens: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { exact: true }),
  system: Schema.optionalWith(Schema.String, { exact: true }),
  maxParallelToolCalls: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { exact: true }),
  maxStepsPerTurn: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { exact: true }),
  maxRequestRetries: Schema.optionalWith(Schema.NonNegativeInt, { exact: true })
}).annotations({ identifier: "AgentOptions" })

/**
 * A session to create if absent: its agent options (else the host's) and the `meta` of its header.
 *
 * @since 0.2.0
 * @category requests
 */
export const CreateRequest = Schema.Struct({
  options: Schema.optionalWith(AgentOptions, { exact: true }),
  meta: Schema.optionalWith(Meta, { exact: true })
}).annotations({ identifier: "CreateRequest" })

/**
 * @since 0.2.0
 * @category requests
 */
export type CreateRequest = typeof CreateRequest.Type

/**
 * Cancel the running turn and, unless `keepInbox`, every pending message.
 *
 * @since 0.2.0
 * @category requests
 */
export const CancelRequest = Schema.Struct({
  keepInbox: Schema.optionalWith(Schema.Boolean, { exact: true })
}).annotations({ identifier: "CancelRequest" })

/**
 * @since 0.2.0
 * @category requests
 */
export type CancelRequest = typeof CancelRequest.Type

/**
 * A new session `childId` seeded with the source's log up to `upTo` events (all by default; a
 * closed-turn boundary, FORK-01).
 *
 * @since 0.2.0
 * @category requests
 */
export const ForkRequest = Schema.Struct({
  childId: Schema.String,
  upTo: Schema.optionalWith(Schema.NonNegativeInt, { exact: true })
}).annotations({ identifier: "ForkRequest" })

/**
 * @since 0.2.0
 * @category requests
 */
export type ForkRequest = typeof ForkRequest.Type

/**
 * A page of the listing: at most `limit` sessions (default 100, at most 1,000) whose ids sort after
 * `after` (the `next` of the previous page); their `meta` only with `includeMeta` (SEC-06).
 *
 * @since 0.2.0
 * @category requests
 */
export const ListRequest = Schema.Struct({
  limit: Schema.optionalWith(Schema.Int.pipe(Schema.between(1, 1000)), { exact: true }),
  after: Schema.optionalWith(Schema.String, { exact: true }),
  /**
   * SEC-06: whether the entries carry each session's `meta` (default false: a listing stays small
   * whatever the sessions' headers hold).
   *
   * @since 0.3.0
   */
  includeMeta: Schema.optionalWith(Schema.Boolean, { exact: true }),
  /**
   * SEC-06: with `includeMeta`, the most of one session's `meta` an entry carries (its UTF-8 JSON
   * length); a larger one is left out and the entry says `metaTruncated: true`. Default 8 KiB.
   *
   * @since 0.3.0
   */
  maxMetaBytes: Schema.optionalWith(Schema.NonNegativeInt, { exact: true }),
  /**
   * HIL-06: only the sessions with this status (`awaiting-input`: every session waiting for a
   * person, live or not). A page may then hold fewer than `limit` entries; `next` still continues.
   *
   * @since 0.3.0
   */
  status: Schema.optionalWith(Schema.suspend(() => SessionStatus), { exact: true })
}).annotations({ identifier: "ListRequest" })

/**
 * @since 0.2.0
 * @category requests
 */
export type ListRequest = typeof ListRequest.Type

// -------------------------------------------------------------------------------------------------
// results

/**
 * Where a session's agent stands: `running` (a turn or maintenance is in progress), `idle` (live,
 * nothing running), `awaiting-input` (since 0.3.0, HIL-04: its turn is suspended, waiting for a
 * person to decide an approval or answer a question — live or not: `pending` lists what, and a
 * decision activates it) or `passive` (stored, no agent live: the next write activates it).
 *
 * @since 0.2.0
 * @category results
 */
export const SessionStatus = Schema.Literal("running", "idle", "passive", "awaiting-input")

/**
 * @since 0.2.0
 * @category results
 */
export type SessionStatus = typeof SessionStatus.Type

/**
 * What a suspended session waits for (HIL-04), as its summary shows it.
 *
 * @since 0.3.0
 * @category results
 */
export const Awaiting = Schema.Struct({
  approvals: Schema.NonNegativeInt,
  questions: Schema.NonNegativeInt,
  approvedUndispatched: Schema.NonNegativeInt,
  earliestDeadline: Schema.optionalWith(Schema.NonNegativeInt, { exact: true })
}).annotations({ identifier: "Awaiting" })

/**
 * @since 0.3.0
 * @category results
 */
export type Awaiting = typeof Awaiting.Type

/**
 * The summary of a session: status, pending input per inbox list, whether its log ends inside a
 * turn, its size, token usage (MOD-06: a field no message reported is absent) and header.
 *
 * @since 0.2.0
 * @category results
 */
export const SessionInfo = Schema.TaggedStruct("SessionInfo", {
  id: SessionId,
  status: SessionStatus,
  pending: Schema.Struct({ nextTurn: Schema.NonNegativeInt, nextStep: Schema.NonNegativeInt }),
  openTurn: Schema.Boolean,
  eventCount: Schema.NonNegativeInt,
  usage: Usage,
  createdAt: Schema.NonNegativeInt,
  parentSession: Schema.optionalWith(SessionId, { exact: true }),
  meta: Meta,
  /**
   * HIL-04: what the suspended turn waits for (absent when it waits for nothing): undecided
   * approvals, unanswered questions, approved calls not yet dispatched, the earliest deadline
   * (epoch milliseconds). `pending(id)` lists the items.
   *
   * @since 0.3.0
   */
  awaiting: Schema.optionalWith(Awaiting, { exact: true })
}).annotations({ identifier: "SessionInfo" })

/**
 * @since 0.2.0
 * @category results
 */
export type SessionInfo = typeof SessionInfo.Type

/**
 * A stored entry the listing could not read (DUR-08), listed with what is wrong with it.
 *
 * @since 0.2.0
 * @category results
 */
export const UnreadableSession = Schema.TaggedStruct("UnreadableSession", {
  id: Schema.String,
  problem: Schema.String
}).annotations({ identifier: "UnreadableSession" })

/**
 * @since 0.2.0
 * @category results
 */
export type UnreadableSession = typeof UnreadableSession.Type

/**
 * A session as a listing shows it (SEC-06): its summary, with `meta` only when the listing was
 * asked for it (`includeMeta`, `?include=meta`) and it fits the listing's limit; a `meta` left out
 * for its size is flagged `metaTruncated: true` (read it with `summary` / `GET /sessions/:id`).
 * Tagged `SessionInfo` like the summary it comes from.
 *
 * @since 0.3.0
 * @category results
 */
export const SessionListEntry = Schema.Struct({
  ...SessionInfo.fields,
  meta: Schema.optionalWith(Meta, { exact: true }),
  metaTruncated: Schema.optionalWith(Schema.Literal(true), { exact: true })
}).annotations({ identifier: "SessionListEntry" })

/**
 * @since 0.3.0
 * @category results
 */
export type SessionListEntry = typeof SessionListEntry.Type

/**
 * A page of sessions, in id order; `next` is the `after` of the next page, absent on the last one.
 *
 * @since 0.2.0
 * @category results
 */
export const SessionPage = Schema.Struct({
  sessions: Schema.Array(Schema.Union(SessionListEntry, UnreadableSession)),
  next: Schema.optionalWith(Schema.String, { exact: true })
}).annotations({ identifier: "SessionPage" })

/**
 * @since 0.2.0
 * @category results
 */
export type SessionPage = typeof SessionPage.Type

/**
 * What `create` did: `created` is false when the session existed (it was left as it was).
 *
 * @since 0.2.0
 * @category results
 */
export const CreateResult = Schema.Struct({
  created: Schema.Boolean,
  session: SessionInfo
}).annotations({ identifier: "CreateResult" })

/**
 * @since 0.2.0
 * @category results
 */
export type CreateResult = typeof CreateResult.Type

/**
 * A send was accepted (durable in the inbox): its message id, and whether it was a repeat of an
 * accepted message (`duplicate`: nothing was appended).
 *
 * @since 0.2.0
 * @category results
 */
export const SendReceipt = Schema.Struct({
  messageId: MessageId,
  duplicate: Schema.Boolean
}).annotations({ identifier: "SendReceipt" })

/**
 * @since 0.2.0
 * @category results
 */
export type SendReceipt = typeof SendReceipt.Type

// -------------------------------------------------------------------------------------------------
// events

/**
 * A durable event on the wire: the `{seq, time, type, data}` record of the log (EVT-01), checked
 * like a stored record when decoded.
 *
 * @since 0.2.0
 * @category events
 */
export const DurableEvent: Schema.Schema<SessionEventType, {
  readonly seq: number
  readonly time: number
  readonly type: string
  readonly data: unknown
}> = Schema.transformOrFail(
  Schema.Struct({ seq: Schema.NonNegativeInt, time: Schema.NonNegativeInt, type: Schema.String, data: Schema.Unknown }),
  Schema.declare((u: unknown): u is SessionEventType =>
    typeof u === "object" && u !== null && "seq" in u && "time" in u && "type" in u && "data" in u
  ),
  {
    strict: true,
    decode: (raw, _, ast) => {
      const event = codec.storedEvent(raw, raw.seq)
      return event._tag === "Right"
        ? ParseResult.succeed(event.right)
        : ParseResult.fail(new ParseResult.Type(ast, raw, event.left.reason))
    },
    encode: (event) => ParseResult.succeed({ seq: event.seq, time: event.time, type: event.type, data: event.data })
  }
).annotations({ identifier: "DurableEvent" })

const Turn = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))
const Step = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))
const liveFields = {
  agent: SessionId,
  initiator: Schema.optionalWith(SessionId, { exact: true })
}
/** EVS-02: the seq of the durable event a live event mirrors, when there is one. */
const mirroredSeq = { seq: Schema.optionalWith(Schema.NonNegativeInt, { exact: true }) }

/**
 * The live-only events a front end streams besides the durable log (EVS-02): model text and
 * reasoning as it streams, tool calls starting (with their raw arguments) and finishing (with a
 * summary of the result), the assistant's message as a whole, retries of a failed model request,
 * status changes and errors. They are not replayed; those that mirror a durable event carry its
 * `seq`. Fields marked optional are sent when the runtime provides them.
 *
 * @since 0.2.0
 * @category events
 */
export const LiveEvent = Schema.Union(
  Schema.TaggedStruct("ModelDelta", {
    ...liveFields,
    turn: Turn,
    step: Step,
    kind: Schema.Literal("text", "reasoning"),
    text: Schema.String
  }),
  Schema.TaggedStruct("ToolCallStarted", {
    ...liveFields,
    ...mirroredSeq,
    turn: Turn,
    step: Step,
    callId: Schema.String,
    name: Schema.String,
    arguments: Schema.optionalWith(Schema.String, { exact: true })
  }),
  Schema.TaggedStruct("ToolCallFinished", {
    ...liveFields,
    ...mirroredSeq,
    turn: Turn,
    step: Step,
    callId: Schema.String,
    isError: Schema.Boolean,
    summary: Schema.optionalWith(Schema.String, { exact: true })
  }),
  Schema.TaggedStruct("AssistantMessage", {
    ...liveFields,
    ...mirroredSeq,
    turn: Turn,
    step: Step,
    text: Schema.String,
    toolCalls: Schema.Array(Schema.Struct({ callId: Schema.String, name: Schema.String, arguments: Schema.String })),
    usage: Schema.optionalWith(Usage, { exact: true })
  }),
  Schema.TaggedStruct("ModelRetry", {
    ...liveFields,
    turn: Turn,
    step: Step,
    attempt: Schema.Int,
    code: Schema.String,
    /** The delay before the retry, in milliseconds on the wire. */
    delay: Schema.DurationFromMillis
  }),
  Schema.TaggedStruct("AgentStatusChanged", {
    ...liveFields,
    status: Schema.Literal("idle", "running", "awaiting-input")
  }),
  Schema.TaggedStruct("AgentError", {
    ...liveFields,
    turn: Schema.optionalWith(Turn, { exact: true }),
    step: Schema.optionalWith(Step, { exact: true }),
    error: Schema.Struct({ message: Schema.String, code: Schema.String })
  })
).annotations({ identifier: "LiveEvent" })

/**
 * @since 0.2.0
 * @category events
 */
export type LiveEvent = typeof LiveEvent.Type

/**
 * What `eventsFrom` streams: durable events in seq order, from the cursor, without gap or
 * duplicate, interleaved with live events (EVS-01, EVS-02).
 *
 * @since 0.2.0
 * @category events
 */
export const StreamEvent = Schema.Union(
  Schema.TaggedStruct("Durable", { event: DurableEvent }),
  Schema.TaggedStruct("Live", { event: LiveEvent })
).annotations({ identifier: "StreamEvent" })

/**
 * @since 0.2.0
 * @category events
 */
export type StreamEvent = typeof StreamEvent.Type

/**
 * The inbox list a send mode targets, and whether it wakes the agent.
 *
 * @since 0.2.0
 * @category requests
 */
export { sendTarget } from "./internal/gateway/errors.js"

// -------------------------------------------------------------------------------------------------
// the service

/**
 * Where `gateway.eventsInto` hands a session's events: `live` in the agent's publishing step (kept
 * where the reader looks, or dropped: live events are best-effort, EVS-02), the durable ones in
 * order and each once — `tryDurable` in the committing step (false when there is no room now: they
 * come again through `durable`), `durable` waiting for room — and `end` after the last durable
 * event, with its failure if the stream failed.
 *
 * @since 0.3.0
 * @category models
 */
export interface EventSink {
  readonly live: (event: StreamEvent) => void
  readonly tryDurable: (events: Chunk.Chunk<StreamEvent>) => boolean
  readonly durable: (events: Chunk.Chunk<StreamEvent>) => Effect.Effect<void>
  readonly end: (exit: Exit.Exit<void, EventsError>) => Effect.Effect<void>
}

/**
 * The gateway (HTTP-00). Ids are validated by the gateway (`InvalidSessionId`), so a front end
 * passes them on as it received them.
 *
 * @since 0.2.0
 * @category services
 */
export class SessionGateway extends Context.Tag("effect-agent/SessionGateway")<SessionGateway, {
  /** A page of the stored and live sessions, in id order, with their summaries. */
  readonly list: (request?: ListRequest | undefined) => Effect.Effect<SessionPage, SessionError.PersistenceError>
  /** The summary of one session (without activating it). */
  readonly summary: (id: string) => Effect.Effect<SessionInfo, ReadError>
  /**
   * Creates the session when it is neither live nor stored (with `request.options`, else the
   * gateway's defaults); otherwise leaves it as it is. `created` says which.
   */
  readonly create: (id: string, request?: CreateRequest | undefined) => Effect.Effect<CreateResult, CreateError>
  /**
   * Sends a message (activating the agent if needed). A message id already accepted with the same
   * content and mode succeeds again with `duplicate: true`, appending nothing; with other content
   * it fails `MessageIdConflict`.
   */
  readonly send: (id: string, request: SendRequest) => Effect.Effect<SendReceipt, SendError>
  /** Cancels the running turn and, unless `keepInbox`, the pending input; returns once that is durable. */
  readonly cancel: (id: string, request?: CancelRequest | undefined) => Effect.Effect<void, WriteError>
  /** Creates `childId` seeded from this session's log (FORK-01); fails `AgentAlreadyExists` when it exists. */
  readonly fork: (id: string, request: ForkRequest) => Effect.Effect<SessionInfo, ForkError>
  /**
   * Disposes the live agent (a running turn ends `aborted{disposed}`; the inbox is kept, LIFE-06);
   * the session stays stored. Not an error when no agent is live.
   */
  readonly dispose: (id: string) => Effect.Effect<void, DisposeError>
  /** Disposes the agent and deletes the stored log. */
  readonly remove: (id: string) => Effect.Effect<void, RemoveError>
  /**
   * The durable events from `seq` (the seq after the last one a client saw; 0 for all), then each
   * one as it commits, without gap or duplicate, across passivations of the agent (EVS-01);
   * interleaved with live events while the agent is live (which keeps it live: a watched agent is
   * not passivated, HOST-02). It runs until the client stops it or the gateway closes.
   */
  readonly eventsFrom: (id: string, seq: number) => Stream.Stream<StreamEvent, EventsError>
  /**
   * APP-05 (optional: both of the library's gateways, {@link layerHost} and the cluster client, have
   * it; the HTTP API answers `501 RunsUnsupported` over a gateway of the user's own without it):
   * sends a follow-up and waits up to `wait` (default 60 seconds, at most 10 minutes) for the turn
   * that claims it; its `TurnResult` whatever its end, else `RunAccepted`. The request's `settings`
   * and `output` apply to that turn only and are stored with its message. A message id already
   * accepted with the same content attaches to that message's turn; with other content it fails
   * `MessageIdConflict`.
   *
   * @since 0.3.0
   */
  readonly run?: (
    id: string,
    request: RunRequest,
    options?: { readonly wait?: Duration.DurationInput | undefined } | undefined
  ) => Effect.Effect<RunOutcome, RunError>
  /**
   * APP-05 (optional, with `run`): the result of turn `turn`, waiting up to `wait` for one that runs
   * (then `TurnRunning`); `TurnNotFound` when the session has no such turn.
   *
   * @since 0.3.0
   */
  readonly turn?: (
    id: string,
    turn: number,
    options?: { readonly wait?: Duration.DurationInput | undefined } | undefined
  ) => Effect.Effect<TurnResult, TurnError>
  /**
   * `eventsFrom` without a stream between: the same events run into `sink` from the caller's Scope
   * (a fiber of it reads the durable ones; the live ones reach the sink in the agent's publishing
   * step), then the sink's `end` with the outcome `eventsFrom` would have had. The HTTP API's
   * event-stream body is such a sink (B9), and it reads `eventsFrom` from a gateway without this.
   * The gateway of {@link layerHost} has it; a wrapper that replaces `eventsFrom` should replace or
   * leave out `eventsInto` too (ARCH-01).
   *
   * @since 0.3.0
   */
  readonly eventsInto?: ((id: string, seq: number, sink: EventSink) => Effect.Effect<void, never, Scope.Scope>) | undefined
  /**
   * HIL-06 (optional: the host's gateway and the cluster client have it): what a person still has to
   * settle in the session — the approvals and questions of its suspended turn, oldest first — read
   * without activating it (a passive session's from its stored log).
   *
   * @since 0.3.0
   */
  readonly pending?: ((id: string) => Effect.Effect<ReadonlyArray<Pending.Item>, ReadError>) | undefined
  /** Whether the gateway serves requests (for `/readyz`): false while it starts up or shuts down. */
  readonly ready: Effect.Effect<boolean>
}>() {}

/**
 * The options of {@link layerHost}.
 *
 * @since 0.2.0
 * @category options
 */
export interface HostGatewayOptions {
  /**
   * Whether `ready` waits for the host's start-up recovery (HOST-04) to finish. Default true.
   */
  readonly readyAfterRecovery?: boolean | undefined
}

/**
 * The gateway over the `AgentHost` of this process: `send` activates the session's agent through
 * the host, `summary` and `list` read stored sessions without activating them (`SessionPersistence`
 * of the context, when there is one), `eventsFrom` reads the log and follows the agent across
 * passivations.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerHost = (
  options?: HostGatewayOptions | undefined
): Layer.Layer<SessionGateway, never, AgentHost.AgentHost | AgentRegistry> =>
  Layer.scoped(SessionGateway, internal.make(options ?? {}))
