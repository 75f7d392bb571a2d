/**
 * The definition of the HTTP API (HTTP-01..03): its errors and their statuses and problem bodies,
 * the authentication middleware, the request Schemas, the route groups and the `Api` itself. In a
 * module of its own so that the server's internals import it without importing the `HttpApi`
 * facade, which builds on them (ARCH-02); `HttpApi` re-exports each under its public name.
 *
 * @internal
 */
import {
  HttpApi,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  HttpApiSecurity,
  OpenApi
} from "@effect/platform"
import { Context, Schema } from "effect"
import * as AgentError from "../../AgentError.js"
import { InvalidSessionId } from "../../Message.js"
import * as Pending from "../../Pending.js"
import * as SessionError from "../../SessionError.js"
import * as Gateway from "../../SessionGateway.js"
import { TurnResult } from "../../TurnResult.js"
import { VERSION } from "../version.js"
import * as AgentHost from "../host/errors.js"
import * as problems from "./problem.js"

// -------------------------------------------------------------------------------------------------
// errors of the HTTP layer

/**
 * The request carried no bearer token, or one that authenticates nobody (HTTP-03). Nothing was
 * changed.
 *
 * @since 0.2.0
 * @category errors
 */
export class Unauthorized extends Schema.TaggedError<Unauthorized>("effect-agent/Unauthorized")(
  "Unauthorized",
  { reason: Schema.String }
) {
  override get message(): string {
    return `not authenticated: ${this.reason}; send "Authorization: Bearer <token>" with a token the server accepts`
  }
}

/**
 * The authenticated principal may not do this to this session (HTTP-03). Nothing was changed.
 *
 * @since 0.2.0
 * @category errors
 */
export class Forbidden extends Schema.TaggedError<Forbidden>("effect-agent/Forbidden")(
  "Forbidden",
  { principal: Schema.String, action: Schema.String, sessionId: Schema.optional(Schema.String) }
) {
  override get message(): string {
    return `${JSON.stringify(this.principal)} may not ${this.action}` +
      (this.sessionId === undefined ? "" : ` session ${JSON.stringify(this.sessionId)}`) +
      "; nothing was changed. Ask the operator for access"
  }
}

/**
 * A request body over the server's `maxBodyBytes` (default 1 MiB, HTTP-02). Nothing was read into
 * a session.
 *
 * @since 0.2.0
 * @category errors
 */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>("effect-agent/PayloadTooLarge")(
  "PayloadTooLarge",
  { limit: Schema.Number }
) {
  override get message(): string {
    return `the request body is over the server's limit of ${this.limit} bytes; nothing was changed. ` +
      "Send a smaller body (large content belongs in a tool, not a message)"
  }
}

/**
 * The server does not serve requests yet (its start-up recovery runs) or any longer (it drains).
 *
 * @since 0.2.0
 * @category errors
 */
export class NotReady extends Schema.TaggedError<NotReady>("effect-agent/NotReady")("NotReady", {}) {
  override get message(): string {
    return "the server is starting up or shutting down; retry shortly"
  }
}

/**
 * The HTTP status of every error the API sends (HTTP-02): invalid input 400, unknown session 404,
 * conflicts 409 (a `MessageId` reused with other content), a session removed while its events were
 * read 410, `SessionLocked` 423, an unavailable
 * host 503 (with `Retry-After`), a body too large 413, storage and runtime failures 500 (their
 * `cause` is not sent).
 *
 * @since 0.2.0
 * @category errors
 */
export const statusOf: Readonly<Record<string, number>> = {
  InvalidRequest: 400,
  InvalidSessionId: 400,
  InvalidEventCursor: 400,
  InvalidAgentOptions: 400,
  InvalidEventData: 400,
  InvalidForkBoundary: 400,
  Unauthorized: 401,
  Forbidden: 403,
  SessionNotFound: 404,
  MessageIdConflict: 409,
  AgentAlreadyExists: 409,
  TurnRunning: 409,
  MessageDiscarded: 409,
  TurnNotFound: 404,
  RunsUnsupported: 501,
  DecisionsUnsupported: 501,
  ForkInsideOpenTurn: 409,
  SessionConflict: 409,
  SessionAlreadyLive: 409,
  SessionFull: 409,
  SessionRemoved: 410,
  PayloadTooLarge: 413,
  SessionLocked: 423,
  HostAtCapacity: 503,
  HostClosed: 503,
  AgentLoopInactive: 503,
  AgentInactive: 503,
  SessionClosed: 503,
  NotReady: 503,
  SessionCorrupt: 500,
  SessionFormatUnsupported: 500,
  InvalidInboxLog: 500,
  PersistenceError: 500,
  PersistenceNotConfigured: 500,
  NoAgentFactory: 500,
  AgentCreationVetoed: 500,
  AgentBroken: 500,
  AgentDisposeError: 500,
  TeardownTimeout: 500,
  HostSetupFailed: 500
}

const problem = <A extends { readonly _tag: string; readonly message: string }, I>(
  error: problems.ErrorClass<A, I>
) => problems.problem(error, statusOf[error._tag] ?? 500, { omit: ["cause"] })

/**
 * The problem bodies of the sessions routes, one Schema per error (decoded back into the error).
 *
 * @since 0.2.0
 * @category errors
 */
export const SessionProblem = Schema.Union(
  problem(Gateway.InvalidRequest),
  problem(InvalidSessionId),
  problem(SessionError.InvalidEventCursor),
  problem(AgentError.InvalidAgentOptions),
  problem(SessionError.InvalidEventData),
  problem(SessionError.InvalidForkBoundary),
  problem(Forbidden),
  problem(SessionError.SessionNotFound),
  problem(Gateway.MessageIdConflict),
  problem(AgentError.TurnNotFound),
  problem(Gateway.TurnRunning),
  problem(AgentError.MessageDiscarded),
  problem(Gateway.RunsUnsupported),
  problem(Gateway.DecisionsUnsupported),
  problem(AgentError.AgentAlreadyExists),
  problem(SessionError.ForkInsideOpenTurn),
  problem(SessionError.SessionConflict),
  problem(SessionError.SessionAlreadyLive),
  problem(SessionError.SessionFull),
  problem(AgentHost.SessionRemoved),
  problem(PayloadTooLarge),
  problem(SessionError.SessionLocked),
  problem(AgentHost.HostAtCapacity),
  problem(AgentHost.HostClosed),
  problem(AgentError.AgentLoopInactive),
  problem(AgentError.AgentInactive),
  problem(SessionError.SessionClosed),
  problem(SessionError.SessionCorrupt),
  problem(SessionError.SessionFormatUnsupported),
  problem(AgentError.InvalidInboxLog),
  problem(SessionError.PersistenceError),
  problem(AgentError.PersistenceNotConfigured),
  problem(AgentError.NoAgentFactory),
  problem(AgentError.AgentCreationVetoed),
  problem(AgentError.AgentBroken),
  problem(AgentError.AgentDisposeError),
  problem(AgentError.TeardownTimeout),
  problem(AgentHost.HostSetupFailed)
)

// -------------------------------------------------------------------------------------------------
// security (HTTP-03)

/**
 * Who a request comes from: what `authenticate` made of its bearer token (`anonymous` when the
 * server has no authentication).
 *
 * @since 0.2.0
 * @category security
 */
export interface Principal {
  readonly id: string
}

/**
 * The principal of the request being handled.
 *
 * @since 0.2.0
 * @category security
 */
export class CurrentPrincipal extends Context.Tag("effect-agent/HttpApi/CurrentPrincipal")<
  CurrentPrincipal,
  Principal
>() {}

/**
 * The problem body of `Unauthorized` (401).
 *
 * @since 0.2.0
 * @category security
 */
export const UnauthorizedProblem = problems.problem(Unauthorized, 401)

/**
 * The authentication middleware of the sessions routes: a bearer token (HTTP-03).
 *
 * @since 0.2.0
 * @category security
 */
export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("effect-agent/HttpApi/Authentication", {
  failure: UnauthorizedProblem,
  provides: CurrentPrincipal,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

/**
 * What a request does to a session, as the authorization callback is asked about it.
 *
 * @since 0.2.0
 * @category security
 */
export type Action = "list" | "read" | "create" | "send" | "cancel" | "fork" | "dispose" | "remove" | "events"

// -------------------------------------------------------------------------------------------------
// the API (HTTP-01)

const IdPath = Schema.Struct({ id: Schema.String })

/**
 * `201 Created`: the session `PUT /sessions/:id` created (when it existed: `200` with its
 * `SessionInfo`).
 *
 * @since 0.2.0
 * @category responses
 */
export class SessionCreated extends Schema.Class<SessionCreated>("SessionCreated")(
  Gateway.SessionInfo.fields,
  HttpApiSchema.annotations({ status: 201 })
) {}

/**
 * A whole number in a query, written in decimal digits only (SEC-05: `1e3`, `0x10`, `1.5` and
 * ` 7` are refused, not read as numbers).
 */
const DecimalInteger = Schema.String.pipe(
  Schema.pattern(/^[0-9]{1,15}$/, {
    message: (issue) => `expected a whole number in decimal digits, got ${JSON.stringify(issue.actual)}`
  }),
  Schema.compose(Schema.NumberFromString)
)

/**
 * `GET /sessions` query: `limit` (1–1000, default 100), `after` (the `next` of the previous page),
 * `include=meta` for each session's `meta` (SEC-06: without it the entries carry none) and
 * `status` to list only the sessions with that status (HIL-06: `status=awaiting-input`).
 *
 * @since 0.2.0
 * @category requests
 */
export const ListParams = Schema.Struct({
  limit: Schema.optionalWith(DecimalInteger.pipe(Schema.between(1, 1000)), { exact: true }),
  after: Schema.optionalWith(Schema.String, { exact: true }),
  /** @since 0.3.0 */
  include: Schema.optionalWith(Schema.Literal("meta"), { exact: true }),
  /** HIL-06: only the sessions with this status (`awaiting-input`: waiting for a person). @since 0.3.0 */
  status: Schema.optionalWith(Gateway.SessionStatus, { exact: true })
})

/**
 * `GET /sessions/:id/events` query: `from`, the first seq to send (default 0); a `Last-Event-ID`
 * header (the last seq the client saw) takes precedence. Both are decimal digits (SEC-05).
 *
 * @since 0.2.0
 * @category requests
 */
export const EventsParams = Schema.Struct({
  from: Schema.optionalWith(DecimalInteger, { exact: true })
})

/**
 * APP-05: `POST /sessions/:id/runs` and `GET /sessions/:id/turns/:turn` query: `wait`, in whole
 * seconds (at most 600); a run waits 60 seconds unless told, a turn's read does not wait.
 *
 * @since 0.3.0
 * @category requests
 */
export const WaitParams = Schema.Struct({
  wait: Schema.optionalWith(
    DecimalInteger.pipe(Schema.filter((n) => n <= 600 || "a wait is at most 600 seconds (10 minutes)")),
    { exact: true }
  )
})

const TurnPath = Schema.Struct({
  id: Schema.String,
  turn: DecimalInteger.pipe(Schema.filter((n) => n >= 1 || "turns are numbered from 1"))
})

/**
 * `DELETE /sessions/:id` query: `remove=true` also deletes the stored log.
 *
 * @since 0.2.0
 * @category requests
 */
export const DisposeParams = Schema.Struct({
  remove: Schema.optionalWith(Schema.BooleanFromString, { exact: true })
})

/**
 * HIL-06: `GET /sessions/:id/pending` answers what a person still has to settle in the session: its
 * pending approvals and questions, oldest first (`sessionId` names a sub-agent's session for its items).
 *
 * @since 0.3.0
 * @category responses
 */
export const PendingList = Schema.Struct({
  pending: Schema.Array(Schema.Union(
    Pending.Approval,
    // the question's JSON Schema is any JSON object: said so to OpenAPI (the recursive JSON type has no name)
    Schema.TaggedStruct("Question", {
      ...Pending.Question.fields,
      jsonSchema: Pending.Question.fields.jsonSchema.annotations({ jsonSchema: { type: "object" } })
    })
  ))
}).annotations({ identifier: "PendingList" })

/**
 * The health routes (no authentication): `GET /healthz` answers while the process serves,
 * `GET /readyz` while the gateway is ready (503 `NotReady` during start-up recovery and drain).
 *
 * @since 0.2.0
 * @category api
 */
export class HealthGroup extends HttpApiGroup.make("health")
  .add(HttpApiEndpoint.get("healthz", "/healthz").addSuccess(Schema.Struct({ status: Schema.Literal("ok") })))
  .add(
    HttpApiEndpoint.get("readyz", "/readyz")
      .addSuccess(Schema.Struct({ status: Schema.Literal("ready") }))
      .addError(problems.problem(NotReady, 503))
  )
{}

/**
 * The sessions routes (HTTP-01), behind {@link Authentication}.
 *
 * @since 0.2.0
 * @category api
 */
export class SessionsGroup extends HttpApiGroup.make("sessions")
  .add(HttpApiEndpoint.get("list", "/sessions").setUrlParams(ListParams).addSuccess(Gateway.SessionPage))
  .add(
    HttpApiEndpoint.put("create", "/sessions/:id")
      .setPath(IdPath)
      .setPayload(Gateway.CreateRequest)
      .addSuccess(Gateway.SessionInfo)
      .addSuccess(SessionCreated)
  )
  .add(HttpApiEndpoint.get("get", "/sessions/:id").setPath(IdPath).addSuccess(Gateway.SessionInfo))
  .add(
    HttpApiEndpoint.post("send", "/sessions/:id/messages")
      .setPath(IdPath)
      .setPayload(Gateway.SendRequest)
      .addSuccess(Gateway.SendReceipt, { status: 202 })
  )
  .add(
    HttpApiEndpoint.post("run", "/sessions/:id/runs")
      .setPath(IdPath)
      .setUrlParams(WaitParams)
      .setPayload(Gateway.RunRequest)
      .addSuccess(TurnResult)
      .addSuccess(Gateway.RunAccepted, { status: 202 })
  )
  .add(
    HttpApiEndpoint.get("turn", "/sessions/:id/turns/:turn")
      .setPath(TurnPath)
      .setUrlParams(WaitParams)
      .addSuccess(TurnResult)
  )
  .add(HttpApiEndpoint.get("pending", "/sessions/:id/pending").setPath(IdPath).addSuccess(PendingList))
  .add(
    HttpApiEndpoint.post("cancel", "/sessions/:id/cancel")
      .setPath(IdPath)
      .setPayload(Gateway.CancelRequest)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .add(
    HttpApiEndpoint.post("fork", "/sessions/:id/fork")
      .setPath(IdPath)
      .setPayload(Gateway.ForkRequest)
      .addSuccess(Gateway.SessionInfo, { status: 201 })
  )
  .add(
    HttpApiEndpoint.del("dispose", "/sessions/:id")
      .setPath(IdPath)
      .setUrlParams(DisposeParams)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .add(
    HttpApiEndpoint.get("events", "/sessions/:id/events")
      .setPath(IdPath)
      .setUrlParams(EventsParams)
      .addSuccess(Schema.String.pipe(HttpApiSchema.withEncoding({ kind: "Text", contentType: "text/event-stream" })))
  )
  .addError(SessionProblem)
  .middleware(Authentication)
{}

/**
 * The API: health and sessions routes.
 *
 * @since 0.2.0
 * @category api
 */
export class Api extends HttpApi.make("effect-agent")
  .add(HealthGroup)
  .add(SessionsGroup)
  .addError(problem(Gateway.InvalidRequest))
  .addError(problem(PayloadTooLarge))
  // DOC-02: the document is titled and versioned as the package is
  .annotateContext(OpenApi.annotations({ title: "effect-agent", version: VERSION }))
{}
