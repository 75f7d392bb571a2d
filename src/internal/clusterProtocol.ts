/**
 * The protocol of the agent entity (CLU-01): its RPCs and their schemas, re-exported by
 * `Cluster.ts` (kept here so the runner and client internals import it without a cycle).
 *
 * @internal
 */
import { ClusterError, ClusterSchema, Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Effect, Predicate, Schema } from "effect"
import * as AgentError from "../AgentError.js"
import * as AgentHost from "../AgentHost.js"
import { InvalidSessionId, UserMessage } from "../Message.js"
import * as SessionError from "../SessionError.js"
import { Envelope, JsonRecord, Usage } from "../SessionEvent.js"
import { primaryKeyOf } from "./clusterMessage.js"
import { AgentOptionsSchema } from "./options.js"

/** @internal */
export const SendMode = Schema.Literal("followup", "steer", "inject")

/** @internal */
export type SendMode = typeof SendMode.Type

/** @internal */
export const AgentFailure = Schema.Union(
  InvalidSessionId,
  AgentHost.HostAtCapacity,
  AgentHost.HostClosed,
  AgentHost.HostSetupFailed,
  AgentError.DuplicateMessage,
  AgentError.InvalidInboxLog,
  AgentError.AgentAlreadyExists,
  AgentError.AgentCreationVetoed,
  AgentError.NoAgentFactory,
  AgentError.AgentLoopInactive,
  AgentError.PersistenceNotConfigured,
  AgentError.InvalidAgentOptions,
  AgentError.AgentInactive,
  AgentError.AgentBroken,
  SessionError.InvalidEventData,
  SessionError.SessionAlreadyLive,
  SessionError.SessionNotFound,
  SessionError.SessionLocked,
  SessionError.SessionConflict,
  SessionError.SessionCorrupt,
  SessionError.SessionFormatUnsupported,
  SessionError.SessionClosed,
  SessionError.PersistenceError,
  SessionError.SessionFull,
  SessionError.ForkInsideOpenTurn,
  SessionError.InvalidForkBoundary,
  SessionError.InvalidEventCursor
)

/** @internal */
export type AgentFailure = typeof AgentFailure.Type

/** @internal */
export class SessionStatus extends Schema.Class<SessionStatus>("effect-agent/Cluster/SessionStatus")({
  id: Schema.String,
  status: Schema.Literal("idle", "running"),
  /** Pending inbox messages (both lanes). */
  pending: Schema.NonNegativeInt,
  /** The log's length: the seq the next event gets. */
  length: Schema.NonNegativeInt,
  usage: Usage
}) {}

/** @internal */
export const StreamItem = Schema.Union(
  Schema.TaggedStruct("Durable", { event: Envelope }),
  Schema.TaggedStruct("Delta", {
    turn: Schema.Number,
    step: Schema.Number,
    kind: Schema.Literal("text", "reasoning"),
    text: Schema.String
  })
)

/** @internal */
export type StreamItem = typeof StreamItem.Type

/** @internal */
export const Created = Schema.Struct({ created: Schema.Boolean })

/** The options of an agent as they cross the wire (validated again by the registry, PUB-10). */
const CreatePayload = {
  options: Schema.optional(AgentOptionsSchema),
  meta: Schema.optional(JsonRecord)
}

/** @internal */
export const AgentEntity = Entity.make("effect-agent/Agent", [
  Rpc.make("Create", { payload: CreatePayload, success: Created, error: AgentFailure }),
  Rpc.make("Send", {
    payload: { message: UserMessage, mode: SendMode },
    primaryKey: ({ message, mode }) => primaryKeyOf(message, mode),
    error: AgentFailure
  }).annotate(ClusterSchema.Persisted, true).annotate(ClusterSchema.Uninterruptible, true),
  Rpc.make("Cancel", { payload: { keepInbox: Schema.Boolean }, error: AgentFailure }),
  Rpc.make("Status", { success: SessionStatus, error: AgentFailure }),
  Rpc.make("WhenIdle", { error: AgentFailure }),
  Rpc.make("Wake", { error: AgentFailure }),
  Rpc.make("Fork", {
    payload: { childId: Schema.String, upTo: Schema.optional(Schema.NonNegativeInt), ...CreatePayload },
    error: AgentFailure
  }),
  Rpc.make("CreateFork", {
    payload: { parent: Schema.String, seed: Schema.Array(Envelope), ...CreatePayload },
    error: AgentFailure
  }),
  Rpc.make("Passivate", { success: Schema.Boolean, error: AgentFailure }),
  Rpc.make("Remove", { error: AgentFailure }),
  Rpc.make("Events", { payload: { from: Schema.NonNegativeInt }, success: StreamItem, error: AgentFailure, stream: true })
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
