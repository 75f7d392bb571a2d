/**
 * The server side of `effect-agent/HttpApi` (HTTP-01..03): the handlers over `SessionGateway`, the
 * body guard (413 over `maxBodyBytes`, a malformed body as a 400 problem), the mapping of the
 * platform's decode errors to problems, `Retry-After` on 503s, bearer authentication and the
 * authorization callback.
 *
 * @internal
 */
import {
  HttpApiBuilder,
  HttpApp,
  HttpMethod,
  HttpRouter,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { Cause, Deferred, Duration, Effect, Layer, Option, Schema, Stream } from "effect"
import type * as HttpApi from "../../HttpApi.js"
import { Api, Authentication, CurrentPrincipal, NotReady, PayloadTooLarge, SessionProblem, statusOf } from "./api.js"
import * as Message from "../../Message.js"
import type { SessionId } from "../../Message.js"
import * as SessionError from "../../SessionError.js"
import type { EventsError, SessionInfo, SessionPage } from "../../SessionGateway.js"
import {
  DecisionsUnsupported,
  InvalidRequest,
  RunsUnsupported,
  SessionGateway,
  SessionInfo as SessionInfoSchema
} from "../../SessionGateway.js"
import type { EventsInto } from "../gateway/durableAndLive.js"
import { eventsInto } from "../gateway/durableAndLive.js"
import * as listing from "../gateway/summary.js"
import * as auth from "./auth.js"
import * as inspector from "./inspector.js"
import * as problems from "./problem.js"
import * as sse from "./sse.js"
import { MAX_DEPTH, nestsDeeperThan } from "../json.js"
import * as sseBody from "./sseBody.js"

/** The options with their defaults. */
interface Settings {
  readonly maxBodyBytes: number
  readonly maxClientBufferBytes: number
  readonly maxListMetaBytes: number
  readonly heartbeat: Duration.Duration
  readonly retryAfterSeconds: number
  readonly authenticate: HttpApi.Options["authenticate"]
  readonly authorize: HttpApi.Options["authorize"]
  readonly cors: HttpApi.Options["cors"]
}

/** 1 MiB. */
const DEFAULT_MAX_BODY_BYTES = 1024 * 1024

/**
 * Path parameters up to this length reach the handlers: every ID-01 id routes, and a longer invalid
 * one is a 400 (SEC-05), not a route that is not found. Above any request line Node accepts by
 * default (16 KiB of headers).
 */
const MAX_PARAM_LENGTH = 64 * 1024

const settingsOf = (options: HttpApi.Options | undefined): Settings => ({
  maxBodyBytes: options?.maxBodyBytes !== undefined && options.maxBodyBytes > 0
    ? options.maxBodyBytes
    : DEFAULT_MAX_BODY_BYTES,
  maxClientBufferBytes: options?.maxClientBufferBytes !== undefined && options.maxClientBufferBytes > 0
    ? options.maxClientBufferBytes
    : sseBody.DEFAULT_MAX_BYTES,
  maxListMetaBytes: options?.maxListMetaBytes !== undefined && options.maxListMetaBytes >= 0
    ? options.maxListMetaBytes
    : listing.DEFAULT_LIST_META_BYTES,
  heartbeat: Duration.decode(options?.heartbeat ?? "15 seconds"),
  retryAfterSeconds: Math.max(1, Math.ceil(Duration.toSeconds(Duration.decode(options?.retryAfter ?? "5 seconds")))),
  authenticate: options?.authenticate,
  authorize: options?.authorize,
  cors: options?.cors
})

// -------------------------------------------------------------------------------------------------
// the body guard and the error mapping (HTTP-02)

/** The body as UTF-8 text, or a 400 when it is not. */
const decodeUtf8 = (bytes: Uint8Array) =>
  Effect.try({
    try: () => new TextDecoder("utf-8", { fatal: true }).decode(bytes),
    catch: () => new InvalidRequest({ reason: "the request body is not UTF-8 text" })
  })

/**
 * A body whose length was declared (within the limit, checked before): read at once. The HTTP
 * parser delivers no more than the declared length, and the platform reads it in one callback
 * where a `Stream` of its chunks costs ≈150 Effect operations per request (B10).
 */
const readDeclaredBody = (request: HttpServerRequest.HttpServerRequest) =>
  request.arrayBuffer.pipe(
    Effect.mapError(() => new InvalidRequest({ reason: "the request body could not be read" })),
    Effect.flatMap((buffer) => decodeUtf8(new Uint8Array(buffer)))
  )

/**
 * The request body as text, refused over `limit` bytes. An oversize body is read to its end (up to
 * eight times the limit) so the client gets the 413 rather than a reset connection.
 */
const readBody = (request: HttpServerRequest.HttpServerRequest, limit: number) =>
  Effect.gen(function*() {
    const chunks: Array<Uint8Array> = []
    let size = 0
    yield* request.stream.pipe(
      Stream.takeWhile(() => size <= limit * 8),
      Stream.runForEach((chunk) =>
        Effect.sync(() => {
          size += chunk.length
          if (size <= limit) chunks.push(chunk)
        })
      ),
      Effect.mapError(() => new InvalidRequest({ reason: "the request body could not be read" }))
    )
    if (size > limit) return yield* new PayloadTooLarge({ limit })
    const bytes = new Uint8Array(size)
    let offset = 0
    for (const chunk of chunks) {
      bytes.set(chunk, offset)
      offset += chunk.length
    }
    return yield* decodeUtf8(bytes)
  })

/**
 * The body as JSON (an empty body is `{}`: every field of a body is optional but a message's),
 * refused when it nests deeper than the codec's limit (DUR-10, SEC-05): no schema walks it then.
 */
const parseBody = (text: string) =>
  Effect.flatMap(
    Effect.try({
      try: (): unknown => (text.trim() === "" ? {} : JSON.parse(text)),
      catch: (error) =>
        new InvalidRequest({ reason: `the request body is not JSON (${error instanceof Error ? error.message : String(error)})` })
    }),
    (json) =>
      nestsDeeperThan(json)
        ? Effect.fail(new InvalidRequest({ reason: `the request body nests deeper than ${MAX_DEPTH} levels` }))
        : Effect.succeed(json)
  )

/** The request with its body read: the handlers decode `json`, whatever Content-Type the client sent. */
const withBody = (
  request: HttpServerRequest.HttpServerRequest,
  text: string,
  json: unknown
): HttpServerRequest.HttpServerRequest =>
  Object.create(request, {
    headers: { value: { ...request.headers, "content-type": "application/json" } },
    text: { value: Effect.succeed(text) },
    json: { value: Effect.succeed(json) }
  })

/** Whether every percent-escape of a URL decodes (SEC-05: a malformed one is a 400, not an unknown route). */
const isWellEncoded = (url: string): boolean => {
  if (!url.includes("%")) return true
  try {
    decodeURIComponent(url)
    return true
  } catch {
    return false
  }
}

/**
 * The body of a request that has one, read once its sender is known (SEC-04: 401 before 400 and
 * 413, and an unauthenticated body is never read), checked (HTTP-02: 413, UTF-8, JSON; SEC-05:
 * depth) and handed to the routes with the principal, so the sessions routes do not authenticate
 * it again.
 */
const withCheckedBody = (settings: Settings, request: HttpServerRequest.HttpServerRequest, app: HttpApp.Default) =>
  Effect.gen(function*() {
    const principal = yield* auth.authenticate(settings, request)
    const declared = Number(request.headers["content-length"])
    if (Number.isFinite(declared) && declared > settings.maxBodyBytes) {
      return yield* new PayloadTooLarge({ limit: settings.maxBodyBytes })
    }
    const text = yield* (Number.isFinite(declared)
      ? readDeclaredBody(request)
      : readBody(request, settings.maxBodyBytes))
    const json = yield* parseBody(text)
    return yield* app.pipe(
      Effect.provideService(HttpServerRequest.HttpServerRequest, withBody(request, text, json)),
      Effect.provideService(auth.Authenticated, principal)
    )
  })

/** Statuses that tell the client to come back later: they carry `Retry-After`. */
const isUnavailable = (tag: string) => statusOf[tag] === 503

const tagOf = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "_tag" in error && typeof error._tag === "string"
    ? error._tag
    : undefined

const setHeader = (name: string, value: string) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, name, value))
  )

/**
 * A 500 (SEC-03): the whole failure goes to the process's log at Error; the client gets its problem
 * body without absolute paths, or, for a defect, a problem that says only that the server failed.
 */
const internalFailure = (cause: Cause.Cause<unknown>, error: unknown) =>
  Effect.gen(function*() {
    yield* Effect.logError("effect-agent HttpApi: a request failed inside the server", cause)
    const tag = tagOf(error)
    const encoded = tag === undefined ? undefined : yield* Effect.option(encodeProblem(error))
    const body = encoded !== undefined && Option.isSome(encoded)
      ? problems.scrubbed(encoded.value)
      : problems.plainProblem(
        "InternalError",
        500,
        "the server failed while handling the request; nothing more is said to clients (its log has the details). Retry, or report it to the operator"
      )
    return HttpServerResponse.unsafeJson(body, { status: 500 })
  })

/**
 * What the client gets for a request that failed: the platform's decode errors as `InvalidRequest`
 * problems in plain words (SEC-03), an unknown route as a 404 problem (SEC-05), a 500 without
 * internals (SEC-03), `Retry-After` with a 503 and `WWW-Authenticate` with a 401.
 */
const answerFailure = (settings: Settings, cause: Cause.Cause<unknown>) => {
  const failure = Cause.failureOption(cause)
  if (Option.isNone(failure)) {
    return Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : internalFailure(cause, undefined)
  }
  const error = failure.value
  const tag = tagOf(error)
  if (tag === "HttpApiDecodeError") {
    const issues = (error as { readonly issues?: ReadonlyArray<problems.DecodeIssue> }).issues ?? []
    return Effect.fail(new InvalidRequest({ reason: problems.readableIssues(issues) }))
  }
  if (tag === "RouteNotFound") {
    return Effect.succeed(HttpServerResponse.unsafeJson(
      problems.plainProblem("RouteNotFound", 404, "there is no such route; the API's routes are listed at /openapi.json"),
      { status: 404 }
    ))
  }
  if (tag !== undefined && statusOf[tag] === 500) return internalFailure(cause, error)
  const header = tag === undefined
    ? Effect.void
    : isUnavailable(tag)
    ? setHeader("retry-after", String(settings.retryAfterSeconds))
    : tag === "Unauthorized"
    ? setHeader("www-authenticate", "Bearer")
    : Effect.void
  return Effect.zipRight(header, Effect.failCause(cause))
}

/**
 * The API-level middleware: a malformed URL is a 400 (SEC-05); a request with a body is
 * authenticated, then its body read and checked, before routing; failures are answered by
 * {@link answerFailure}.
 */
const guard = (settings: Settings) => (app: HttpApp.Default): HttpApp.Default<InvalidRequest | PayloadTooLarge> =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (!isWellEncoded(request.url)) {
      return yield* new InvalidRequest({ reason: "the URL has a malformed percent-escape (a % not followed by UTF-8 in hex)" })
    }
    if (!HttpMethod.hasBody(request.method)) return yield* app
    return yield* withCheckedBody(settings, request, app)
  }).pipe(Effect.catchAllCause((cause) => answerFailure(settings, cause))) as HttpApp.Default<
    InvalidRequest | PayloadTooLarge
  >
// -------------------------------------------------------------------------------------------------
// security (HTTP-03, SEC-04)

/**
 * The sessions routes' authentication: the principal the body guard found, else the request's own
 * `Authorization` header through the one parser of every route (`httpAuth.bearerToken`; the
 * platform's decoding of the header, which takes any seven characters as the scheme, is not used).
 */
const authenticationLayer = (settings: Settings) =>
  Layer.succeed(Authentication, Authentication.of({ bearer: () => auth.principalOfRequest(settings) }))

/** Refuses (403) unless the callback allows `action` on the sessions (the listing: no session). */
const allowList = (settings: Settings) =>
  settings.authorize === undefined
    ? Effect.void
    : Effect.flatMap(CurrentPrincipal, (principal) => auth.authorize(settings, principal, undefined, "list"))

/**
 * The session of a route, decoded once here where it enters (ARCH-04: an invalid id is a 400 first)
 * and passed inward as a `SessionId`; then refused (403) unless the callback allows `action` on it.
 */
const allow = (settings: Settings, rawId: string, action: HttpApi.Action) =>
  Effect.gen(function*() {
    const sessionId = yield* Message.sessionId(rawId)
    if (settings.authorize === undefined) return sessionId
    yield* auth.authorize(settings, yield* CurrentPrincipal, sessionId, action)
    return sessionId
  })

/**
 * A page as the client gets it: only the sessions the principal may read (HTTP-03), each with its
 * `meta` only when asked and within `maxListMetaBytes` (SEC-06; applied here too, so a gateway of
 * the user's own is held to it).
 */
const listedPage = (settings: Settings, page: SessionPage, includeMeta: boolean) =>
  Effect.gen(function*() {
    const options = { includeMeta, maxMetaBytes: settings.maxListMetaBytes }
    const shown = page.sessions.map((entry) => (entry._tag === "SessionInfo" ? listing.listed(entry, options) : entry))
    if (settings.authorize === undefined) return { ...page, sessions: shown }
    const principal = yield* CurrentPrincipal
    const sessions = yield* Effect.filter(shown, (entry) => {
      const id = Message.sessionId(entry.id)
      return id._tag === "Left" ? Effect.succeed(false) : auth.mayDo(settings, principal, id.right, "read")
    })
    return { ...page, sessions }
  })

// -------------------------------------------------------------------------------------------------
// events (HTTP-01)

/** A seq as a client writes it (SEC-05): decimal digits only, as `HttpApi`'s `from` parameter. */
const isDecimalSeq = (text: string): boolean => /^[0-9]{1,15}$/.test(text)

/**
 * The cursor of a connection: after `Last-Event-ID` (the last seq the client saw), else `from`,
 * else 0. SEC-05: a seq is written in decimal digits only (`1e3`, `0x10`, `1.5` are refused).
 */
const cursorOf = (lastEventId: string | undefined, from: number | undefined) => {
  if (lastEventId === undefined || lastEventId.trim() === "") return Effect.succeed(from ?? 0)
  const text = lastEventId.trim()
  return isDecimalSeq(text)
    ? Effect.succeed(Number(text) + 1)
    : Effect.fail(
      new InvalidRequest({ reason: `Last-Event-ID must be the seq of an event in decimal digits, got ${JSON.stringify(text.slice(0, 40))}` })
    )
}

const encodeInfo = (info: SessionInfo) => Effect.orDie(Schema.encode(SessionInfoSchema)(info))

const encodeProblem = Schema.encodeUnknown(SessionProblem)

/** The last frame of a stream that failed after it started: its problem body. */
const errorFrameOf = (error: EventsError) =>
  Effect.map(
    Effect.orElseSucceed(encodeProblem(error), () => ({ type: `effect-agent/${error._tag}`, detail: error.message })),
    sse.errorFrame
  )

/**
 * The event-stream body (`http/sseBody.ts`): the retry hint, then the events as frames with heartbeats
 * between them; a failure after the start is sent as a last `error` frame. The gateway runs the
 * events into the body's sink (no fiber copies a stream of them); the heartbeats and the server's
 * close (streams end first, HOST-05) are fibers of the body's Scope; a client that disconnects
 * closes it, which stops them all. What the client has not read is bounded by `maxClientBufferBytes`
 * (SEC-01: a client behind loses live frames, and its durable events are read from the log when it
 * gets there). B9: a `Stream.merge` with the heartbeats and a
 * `Stream.interruptWhen` each cost ≈110 Effect operations per chunk of events, and a fiber copying
 * the gateway's stream ≈20 per publication; the body's queue costs a few.
 */
const eventStream = (
  into: EventsInto,
  id: string,
  from: number,
  settings: Settings,
  closing: Deferred.Deferred<void>
) =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const body = yield* sseBody.make(settings.maxClientBufferBytes)
    yield* body.offer(sse.retryFrame(1000))
    yield* into(id, from, body.sink(errorFrameOf))
    yield* Effect.forkScoped(sseBody.heartbeats(body, settings.heartbeat))
    yield* Effect.forkScoped(sseBody.endOnClose(body, closing))
    return body.bytes
  }))

// -------------------------------------------------------------------------------------------------
// handlers

const healthLayer = () =>
  HttpApiBuilder.group(Api, "health", (handlers) =>
  Effect.gen(function*() {
    const gateway = yield* SessionGateway
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () =>
        Effect.flatMap(gateway.ready, (ready) =>
          ready ? Effect.succeed({ status: "ready" as const }) : Effect.fail(new NotReady())))
  }))

const sessionsLayer = (settings: Settings) =>
  HttpApiBuilder.group(Api, "sessions", (handlers) =>
    Effect.gen(function*() {
      const gateway = yield* SessionGateway
      // released before the server closes (the server waits for open connections): event streams end
      const closing = yield* Deferred.make<void>()
      yield* Effect.addFinalizer(() => Deferred.succeed(closing, undefined))
      return handlers
        .handle("list", ({ urlParams }) =>
          Effect.gen(function*() {
            yield* allowList(settings)
            const includeMeta = urlParams.include === "meta"
            const page = yield* gateway.list({
              ...(urlParams.limit === undefined ? {} : { limit: urlParams.limit }),
              ...(urlParams.after === undefined ? {} : { after: urlParams.after }),
              ...(urlParams.status === undefined ? {} : { status: urlParams.status }),
              includeMeta,
              maxMetaBytes: settings.maxListMetaBytes
            })
            return yield* listedPage(settings, page, includeMeta)
          }))
        .handle("create", ({ path, payload }) =>
          Effect.gen(function*() {
            const id = yield* allow(settings, path.id, "create")
            const result = yield* gateway.create(id, payload)
            // 201 and 200 carry the same body, which the success union cannot tell apart
            return result.created
              ? yield* HttpServerResponse.json(yield* encodeInfo(result.session), { status: 201 }).pipe(Effect.orDie)
              : result.session
          }))
        .handle("get", ({ path }) => Effect.flatMap(allow(settings, path.id, "read"), (id) => gateway.summary(id)))
        .handle("send", ({ path, payload }) =>
          Effect.flatMap(allow(settings, path.id, "send"), (id) => gateway.send(id, payload)))
        .handle("run", ({ path, payload, urlParams }) =>
          Effect.gen(function*() {
            const id = yield* allow(settings, path.id, "send")
            if (gateway.run === undefined) return yield* new RunsUnsupported()
            const outcome = yield* gateway.run(id, payload, { wait: Duration.seconds(urlParams.wait ?? 60) })
            if (!("_tag" in outcome)) return outcome
            // APP-05: 202 with where to read the turn once it is known
            const location = outcome.turn === undefined
              ? {}
              : { location: `/sessions/${encodeURIComponent(id)}/turns/${outcome.turn}` }
            return yield* HttpServerResponse.json(outcome, { status: 202, headers: location }).pipe(Effect.orDie)
          }))
        .handle("turn", ({ path, urlParams }) =>
          Effect.gen(function*() {
            const id = yield* allow(settings, path.id, "read")
            if (gateway.turn === undefined) return yield* new RunsUnsupported()
            return yield* gateway.turn(id, path.turn, { wait: Duration.seconds(urlParams.wait ?? 0) })
          }))
        .handle("pending", ({ path }) =>
          Effect.gen(function*() {
            const id = yield* allow(settings, path.id, "read")
            if (gateway.pending === undefined) return yield* new DecisionsUnsupported()
            return { pending: yield* gateway.pending(id) }
          }))
        .handle("cancel", ({ path, payload }) =>
          Effect.flatMap(allow(settings, path.id, "cancel"), (id) => gateway.cancel(id, payload)))
        .handle("fork", ({ path, payload }) =>
          Effect.gen(function*() {
            const id = yield* allow(settings, path.id, "fork")
            const childId = yield* allow(settings, payload.childId, "create")
            return yield* gateway.fork(id, { ...payload, childId })
          }))
        .handle("dispose", ({ path, urlParams }) =>
          urlParams.remove === true
            ? Effect.flatMap(allow(settings, path.id, "remove"), (id) => gateway.remove(id))
            : Effect.flatMap(allow(settings, path.id, "dispose"), (id) => gateway.dispose(id)))
        .handleRaw("events", ({ path, request, urlParams }) =>
          Effect.gen(function*() {
            const id: SessionId = yield* allow(settings, path.id, "events")
            const from = yield* cursorOf(request.headers["last-event-id"], urlParams.from)
            // checked before the response starts, so a bad request is a problem, not a broken stream
            const info = yield* gateway.summary(id)
            if (from > info.eventCount) {
              return yield* new SessionError.InvalidEventCursor({ id, seq: from, length: info.eventCount })
            }
            return HttpServerResponse.stream(eventStream(eventsInto(gateway), id, from, settings, closing), {
              contentType: "text/event-stream",
              headers: { "cache-control": "no-cache", "x-accel-buffering": "no", connection: "close" }
            })
          }))
    }))

// -------------------------------------------------------------------------------------------------
// layers

/** @internal */
export const layer = (options?: HttpApi.Options | undefined): Layer.Layer<
  import("@effect/platform").HttpApi.Api,
  never,
  SessionGateway
> => {
  const settings = settingsOf(options)
  const api = HttpApiBuilder.api(Api).pipe(
    Layer.provide([healthLayer(), sessionsLayer(settings)]),
    Layer.provide(authenticationLayer(settings))
  )
  const cors = settings.cors === undefined
    ? Layer.empty
    : HttpApiBuilder.middlewareCors({
      ...(settings.cors.allowedOrigins === undefined ? {} : { allowedOrigins: settings.cors.allowedOrigins }),
      ...(settings.cors.allowedHeaders === undefined ? {} : { allowedHeaders: settings.cors.allowedHeaders }),
      ...(settings.cors.credentials === undefined ? {} : { credentials: settings.cors.credentials })
    })
  return Layer.mergeAll(
    api,
    HttpApiBuilder.middleware(Api, guard(settings)),
    HttpApiBuilder.middlewareOpenApi().pipe(Layer.provide(api)),
    cors,
    // INS-01: the inspector page and its registry snapshot, unless turned off
    options?.inspector === false ? Layer.empty : inspector.layer(settings)
  )
}

/** @internal */
export const layerServer = (
  options?: HttpApi.Options | undefined
): Layer.Layer<
  never,
  never,
  import("@effect/platform").HttpServer.HttpServer | HttpRouter.HttpRouter.DefaultServices | SessionGateway
> =>
  HttpApiBuilder.serve().pipe(
    Layer.provide(layer(options)),
    Layer.provide(HttpRouter.setRouterConfig({ maxParamLength: MAX_PARAM_LENGTH }))
  )
