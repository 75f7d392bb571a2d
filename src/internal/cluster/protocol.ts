/**
 * The protocol of the agent entity (CLU-01): its RPCs, over the gateway's schemas (HTTP-00), so
 * what the entity answers is what `SessionGateway` returns. Re-exported by `Cluster.ts` (kept here
 * so the runner and client internals import it without a cycle).
 *
 * `Send` is persisted in the cluster's message storage and uninterruptible: a send acknowledged to
 * a client survives the death of its runner (redelivered to the shard's next owner), and a client
 * that goes away does not cut an append in half. It has no primary key: the storage's
 * deduplication would answer a retry with the first answer (a failure included) and could not say
 * `duplicate: true`; sends are deduplicated by MessageId against the session's log instead
 * (CLU-03). Every other request is volatile: the cluster re-sends it to the new owner of the
 * shard when its runner dies.
 *
 * @internal
 */
import { ClusterError, ClusterSchema, Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Effect, Predicate, Schema } from "effect"
import * as AgentError from "../../AgentError.js"
import * as AgentHost from "../../AgentHost.js"
import { InvalidSessionId, SessionId, UserMessage } from "../../Message.js"
import * as Pending from "../../Pending.js"
import * as SessionError from "../../SessionError.js"
import {
  AgentOptions,
  CreateRequest,
  CreateResult,
  DurableEvent,
  GatewayError,
  InvalidRequest,
  MessageIdConflict,
  RunAccepted,
  SendMode,
  SendReceipt,
  SessionInfo,
  StreamEvent,
  TurnRunning
} from "../../SessionGateway.js"
import { ModelSettings, OutputFormat } from "../../ModelSettings.js"
import { TurnResult } from "../../TurnResult.js"

// The failures of each request, as the gateway types them (HTTP-00), as Schemas for the wire.

const getErrors = [
  InvalidSessionId,
  AgentHost.HostAtCapacity,
  AgentHost.HostClosed,
  AgentHost.HostSetupFailed,
  AgentError.InvalidAgentOptions,
  AgentError.AgentAlreadyExists,
  AgentError.AgentCreationVetoed,
  AgentError.NoAgentFactory,
  AgentError.AgentLoopInactive,
  AgentError.AgentInactive,
  AgentError.PersistenceNotConfigured,
  AgentError.InvalidInboxLog,
  SessionError.InvalidEventData,
  SessionError.ForkInsideOpenTurn,
  SessionError.InvalidForkBoundary,
  SessionError.SessionFull,
  SessionError.SessionConflict,
  SessionError.PersistenceError,
  SessionError.SessionAlreadyLive,
  SessionError.SessionNotFound,
  SessionError.SessionLocked,
  SessionError.SessionCorrupt,
  SessionError.SessionFormatUnsupported
] as const

/** `SessionGateway.ReadError`. @internal */
export const ReadError = Schema.Union(
  InvalidSessionId,
  SessionError.SessionNotFound,
  SessionError.SessionCorrupt,
  SessionError.SessionFormatUnsupported,
  SessionError.PersistenceError
)

/** `SessionGateway.ActivationError` (= `CreateError`). @internal */
export const ActivationError = Schema.Union(...getErrors)

/** `SessionGateway.WriteError` (= `ForkError`). @internal */
export const WriteError = Schema.Union(...getErrors, AgentError.AgentBroken, SessionError.SessionClosed)

/** `SessionGateway.SendError`. @internal */
export const SendError = Schema.Union(
  ...getErrors,
  AgentError.AgentBroken,
  SessionError.SessionClosed,
  InvalidRequest,
  MessageIdConflict
)

/** `SessionGateway.RunError` (APP-05). @internal */
export const RunError = Schema.Union(
  ...getErrors,
  AgentError.AgentBroken,
  SessionError.SessionClosed,
  InvalidRequest,
  MessageIdConflict,
  AgentError.MessageDiscarded,
  AgentError.TurnNotFound
)

/** `SessionGateway.TurnError` (APP-05). @internal */
export const TurnError = Schema.Union(...getErrors, AgentError.TurnNotFound, TurnRunning, AgentError.AgentBroken)

/** `SessionGateway.DisposeError`. @internal */
export const DisposeError = Schema.Union(
  InvalidSessionId,
  SessionError.SessionNotFound,
  SessionError.SessionCorrupt,
  SessionError.SessionFormatUnsupported,
  SessionError.PersistenceError,
  AgentError.AgentDisposeError,
  AgentError.TeardownTimeout
)

/** `SessionGateway.RemoveError`. @internal */
export const RemoveError = Schema.Union(
  InvalidSessionId,
  SessionError.SessionNotFound,
  SessionError.SessionCorrupt,
  SessionError.SessionFormatUnsupported,
  SessionError.PersistenceError,
  SessionError.SessionLocked,
  AgentError.AgentDisposeError,
  AgentError.TeardownTimeout,
  AgentHost.HostClosed
)

/** `SessionGateway.EventsError`. @internal */
export const EventsError = Schema.Union(
  InvalidSessionId,
  SessionError.SessionNotFound,
  SessionError.SessionCorrupt,
  SessionError.SessionFormatUnsupported,
  SessionError.PersistenceError,
  SessionError.InvalidEventCursor,
  AgentHost.HostClosed,
  AgentHost.SessionRemoved
)

/**
 * Every failure of a request to the entity: the gateway's (HTTP-00), as they cross the wire.
 *
 * @internal
 */
export const AgentFailure = GatewayError

/** @internal */
export type AgentFailure = typeof AgentFailure.Type

/** The options of a session to create, as the gateway takes them. */
const CreateFields = {
  options: Schema.optionalWith(AgentOptions, { exact: true }),
  // the gateway's own: a `__proto__` key of the meta stays data on the wire too (DUR-03)
  meta: CreateRequest.fields.meta
}

/** @internal */
export const AgentEntity = Entity.make("effect-agent/Agent", [
  Rpc.make("Summary", { success: SessionInfo, error: ReadError }),
  // HIL-06: read where the session lives (a live agent's own items, else its log)
  Rpc.make("Pending", { success: Schema.Array(Pending.Item), error: ReadError }),
  Rpc.make("Create", { payload: CreateFields, success: CreateResult, error: ActivationError }),
  Rpc.make("Send", {
    payload: { message: UserMessage, mode: SendMode },
    success: SendReceipt,
    error: SendError
  }).annotate(ClusterSchema.Persisted, true).annotate(ClusterSchema.Uninterruptible, true),
  // APP-05: volatile like every request but Send: a run re-sent to the shard's next owner sends its
  // message again under the same id (minted by the client), which attaches to that message's turn
  Rpc.make("Run", {
    payload: Schema.Struct({
      message: UserMessage,
      settings: Schema.optionalWith(ModelSettings, { exact: true }),
      output: Schema.optionalWith(OutputFormat, { exact: true }),
      wait: Schema.DurationFromMillis
    }),
    success: Schema.Union(TurnResult, RunAccepted),
    error: RunError
  }),
  Rpc.make("Turn", { payload: { turn: Schema.Number, wait: Schema.DurationFromMillis }, success: TurnResult, error: TurnError }),
  Rpc.make("Cancel", { payload: { keepInbox: Schema.Boolean }, error: WriteError }),
  Rpc.make("WhenIdle", { error: WriteError }),
  Rpc.make("Wake", { error: WriteError }),
  Rpc.make("Fork", {
    // the child's id crosses the wire as a SessionId, decoded by the client (ARCH-04) and by the wire
    payload: Schema.Struct({ childId: SessionId, upTo: Schema.optionalWith(Schema.NonNegativeInt, { exact: true }) }),
    success: SessionInfo,
    error: WriteError
  }),
  Rpc.make("CreateFork", {
    payload: { parent: SessionId, seed: Schema.Array(DurableEvent), ...CreateFields },
    success: SessionInfo,
    error: WriteError
  }),
  Rpc.make("Dispose", { error: DisposeError }),
  Rpc.make("Remove", { error: RemoveError }),
  Rpc.make("Events", {
    payload: { from: Schema.NonNegativeInt },
    success: StreamEvent,
    error: EventsError,
    stream: true
  })
])

/** A failure of the cluster itself (its message storage, a mailbox), not of the agent. */
type ClusterFailure = ClusterError.PersistenceError | ClusterError.MailboxFull | ClusterError.AlreadyProcessingMessage

/**
 * A request to an entity, with the cluster's own failures (its storage, a full mailbox) reported
 * as the store's `PersistenceError` (the cluster's message storage is persistence too); the
 * agent's failures pass as they are. (The cluster's `PersistenceError` shares its tag with ours,
 * hence the check of the cluster's type id, not of tags.)
 *
 * @internal
 */
export const refailCluster = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, Extract<E, ClusterFailure>> | SessionError.PersistenceError, R> =>
  Effect.catchIf(
    effect,
    (error): error is Extract<E, ClusterFailure> => Predicate.hasProperty(error, ClusterError.TypeId),
    (error) =>
      Effect.fail(
        new SessionError.PersistenceError({
          reason: `the cluster could not deliver the request (${error._tag}); retry it`,
          cause: error
        })
      )
  )
