/**
 * The HTTP API of a fleet of sessions (SPEC §17, HTTP-01..03): an `@effect/platform` `HttpApi`
 * definition over `SessionGateway` — every body and response a Schema, OpenAPI at `/openapi.json`,
 * Server-Sent Events of a session's durable and live events with `Last-Event-ID` resume — the
 * handler layer, an exported typed client and an SSE helper that reconnects.
 *
 * Errors are JSON problem bodies `{type: "effect-agent/<Tag>", title: "<Tag>", status, detail}`
 * carrying the error's fields too, so the typed client fails with the same `Schema.TaggedError`
 * the gateway failed with (HTTP-02).
 *
 * @since 0.2.0
 */
import type { HttpClient, HttpRouter, HttpServer } from "@effect/platform"
import type { HttpApi } from "@effect/platform"
import type { Duration, Effect, Layer, Option, Redacted, Schedule, Stream } from "effect"
import { Api } from "./internal/http/api.js"
import type { Action, Principal } from "./internal/http/api.js"
import * as httpClient from "./internal/http/client.js"
import * as server from "./internal/http/server.js"
import * as sse from "./internal/http/sse.js"
import type { SessionId } from "./Message.js"
import type * as Gateway from "./SessionGateway.js"

// the API's definition lives in `internal/http/api.ts`, where the server's internals import it (ARCH-02)
export {
  /** @since 0.2.0 */
  Api,
  /** @since 0.2.0 */
  Authentication,
  /** @since 0.2.0 */
  CurrentPrincipal,
  /** @since 0.2.0 */
  DisposeParams,
  /** @since 0.2.0 */
  EventsParams,
  /** @since 0.3.0 */
  WaitParams,
  /** @since 0.2.0 */
  Forbidden,
  /** @since 0.2.0 */
  HealthGroup,
  /** @since 0.2.0 */
  ListParams,
  /** @since 0.2.0 */
  NotReady,
  /** @since 0.2.0 */
  PayloadTooLarge,
  /** @since 0.2.0 */
  SessionCreated,
  /** @since 0.2.0 */
  SessionProblem,
  /** @since 0.2.0 */
  SessionsGroup,
  /** @since 0.2.0 */
  statusOf,
  /** @since 0.2.0 */
  Unauthorized,
  /** @since 0.2.0 */
  UnauthorizedProblem
} from "./internal/http/api.js"
export type {
  /** @since 0.2.0 */
  Action,
  /** @since 0.2.0 */
  Principal
} from "./internal/http/api.js"

// -------------------------------------------------------------------------------------------------
// the server

/**
 * The server's options. Every field has a default: no authentication, every request authorized,
 * 1 MiB bodies, 1 MiB unread per event-stream client, a heartbeat every 15 seconds, CORS off.
 *
 * @since 0.2.0
 * @category options
 */
export interface Options {
  /** The largest request body; a larger one is refused `413 PayloadTooLarge`. Default 1 MiB. */
  readonly maxBodyBytes?: number | undefined
  /**
   * The most an event-stream client may have unread on the server (SEC-01): the frames waiting for it
   * and the last write the socket has not flushed. A client over it gets no live events until it has
   * caught up, and its durable events are read again from the session's log when it reads: none is
   * lost or sent twice, and a stalled client holds no more than this. Default 1 MiB.
   *
   * @since 0.3.0
   */
  readonly maxClientBufferBytes?: number | undefined
  /**
   * SEC-06: the most of a session's `meta` (its UTF-8 JSON length) that `GET /sessions?include=meta`
   * sends per entry; a larger `meta` is left out and the entry says `metaTruncated: true` (read it
   * with `GET /sessions/:id`). Default 8 KiB.
   *
   * @since 0.3.0
   */
  readonly maxListMetaBytes?: number | undefined
  /** How often an event stream sends a comment line to keep proxies from closing it. Default 15 seconds. */
  readonly heartbeat?: Duration.DurationInput | undefined
  /** What `Retry-After` says with a 503 (host at capacity or closing). Default 5 seconds. */
  readonly retryAfter?: Duration.DurationInput | undefined
  /**
   * Bearer authentication (HTTP-03, SEC-04): the principal a token names, or `None` (401). Every
   * route that reveals or changes a session asks it, the inspector's registry included; a request's
   * body is read only after it answered. The token is what follows `Bearer` (in any case) and one
   * space in the `Authorization` header; any other form is a 401. Without it every request is the
   * principal `anonymous`.
   */
  readonly authenticate?: ((token: Redacted.Redacted) => Effect.Effect<Option.Option<Principal>>) | undefined
  /**
   * Whether `principal` may do `action` to the session (`undefined` for the listing as a whole; a
   * listing, and the inspector's tree of live agents, show only the sessions the principal may
   * `read`). A refusal is 403 and changes nothing.
   */
  readonly authorize?:
    | ((principal: Principal, sessionId: SessionId | undefined, action: Action) => Effect.Effect<boolean>)
    | undefined
  /**
   * The inspector (INS-01): a page at `/inspector/` over this API (sessions, timelines, live events,
   * send/steer/cancel) and `GET /inspector/api/registry`, a read-only snapshot of the live agents of
   * this process's `AgentRegistry` (answered with the same authentication as the sessions routes, to
   * principals that may `list`, each shown the agents it may `read`). On by default; `false` serves
   * neither.
   */
  readonly inspector?: boolean | undefined
  /** CORS for browsers on other origins: off by default. */
  readonly cors?: {
    readonly allowedOrigins?: ReadonlyArray<string> | undefined
    readonly allowedHeaders?: ReadonlyArray<string> | undefined
    readonly credentials?: boolean | undefined
  } | undefined
}

/**
 * The API's handlers over the `SessionGateway` of the context, with the body guard (authentication
 * before a body is read; 413; malformed or too deeply nested JSON and malformed URLs as 400
 * problems), authentication, problem bodies for unknown routes (404) and for failures inside the
 * server (500, without file paths or stacks: those go to the log at Error), OpenAPI at
 * `/openapi.json` and (when asked) CORS. Serve it with `HttpApiBuilder.serve()` on a platform's
 * `HttpServer`, or use {@link layerServer}.
 *
 * @since 0.2.0
 * @category layers
 */
export const layer: (options?: Options | undefined) => Layer.Layer<HttpApi.Api, never, Gateway.SessionGateway> =
  server.layer

/**
 * The API served on the `HttpServer` of the context (e.g. `NodeHttpServer.layer(createServer, {
 * port })`), with the router's path-parameter limit raised so every id valid under ID-01 routes
 * (and a longer invalid one is a 400, not a 404).
 *
 * @since 0.2.0
 * @category layers
 */
export const layerServer: (
  options?: Options | undefined
) => Layer.Layer<
  never,
  never,
  HttpServer.HttpServer | HttpRouter.HttpRouter.DefaultServices | Gateway.SessionGateway
> = server.layerServer

// -------------------------------------------------------------------------------------------------
// the client

/**
 * The typed client of the API (`HttpApiClient`): `client.sessions.send({ path: { id }, payload })`
 * and so on; a problem response fails with the error it encodes. `token` is sent as a bearer token.
 * `sessions.run` and `sessions.turn` fail `TurnFailed` with the partial result for a turn that did
 * not complete, as `agent.run` does (APP-05; see {@link Client}).
 *
 * @since 0.2.0
 * @category client
 */
export const client: (options: {
  readonly baseUrl: string | URL
  readonly token?: Redacted.Redacted | undefined
}) => Effect.Effect<Client, never, HttpClient.HttpClient> = httpClient.make

/**
 * The typed client (`HttpApiClient`'s, derived from {@link Api}), where `sessions.run` and
 * `sessions.turn` fail `TurnFailed` (with the whole result as `partial`) for a turn that ended other
 * than `completed`, as `agent.run` does: over the wire such a turn is a `200` with its `reason`
 * (APP-05). A run past its wait succeeds with `RunAccepted`.
 *
 * @since 0.3.0
 * @category client
 */
export type Client = httpClient.Client

/**
 * The options of {@link events}.
 *
 * @since 0.2.0
 * @category client
 */
export interface EventsOptions {
  readonly baseUrl: string | URL
  readonly sessionId: string
  /** The first seq to read (default 0). */
  readonly from?: number | undefined
  readonly token?: Redacted.Redacted | undefined
  /**
   * How reconnections are spaced after the stream ends or fails for a reason a retry may cure (the
   * network, a 5xx such as `HostAtCapacity`). Default: exponential from 100 ms, capped at 5 s,
   * forever.
   */
  readonly reconnect?: Schedule.Schedule<unknown, unknown> | undefined
}

/**
 * A session's events through `GET /sessions/:id/events` as a `Stream`, reconnecting with
 * `Last-Event-ID` after a dropped connection or a server restart, so the durable events arrive
 * once each, in order, without a gap. A problem the server answers with that retrying cannot cure
 * (4xx: unknown session, refused token, …) fails the stream with its typed error.
 *
 * @since 0.2.0
 * @category client
 */
export const events: (
  options: EventsOptions
) => Stream.Stream<Gateway.StreamEvent, ClientError, HttpClient.HttpClient> = sse.events

/**
 * What the client's requests fail with: the typed error a problem response encodes (the gateway's
 * errors, `Unauthorized`, `Forbidden`, `PayloadTooLarge`), or an `HttpClientError`.
 *
 * @since 0.2.0
 * @category client
 */
export type ClientError = sse.ClientError
