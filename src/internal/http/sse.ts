/**
 * Server-Sent Events of a session (HTTP-01): the frames the server writes — durable events with
 * `id: <seq>`, live events without an id, heartbeats as comment lines — and the client helper that
 * reads them and reconnects with `Last-Event-ID`.
 *
 * @internal
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { HttpClientError } from "@effect/platform"
import type { HttpClientResponse } from "@effect/platform"
import { Chunk, Duration, Effect, Either, Option, Redacted, Schedule, Schema, Stream } from "effect"
import type * as HttpApiFacade from "../../HttpApi.js"
import * as HttpApi from "./api.js"
import type { LiveEvent, StreamEvent } from "../../SessionGateway.js"
import { DurableEvent, LiveEvent as LiveEventSchema } from "../../SessionGateway.js"

// -------------------------------------------------------------------------------------------------
// frames (server)

/**
 * A live event as its Schema encodes it: the same object, the retry delay in milliseconds. Written
 * by hand on the hot path (B9); the tests decode every frame with the Schema.
 */
const liveJson = (event: LiveEvent): string =>
  event._tag === "ModelRetry"
    ? JSON.stringify({ ...event, delay: Duration.toMillis(event.delay) })
    : JSON.stringify(event)

/** The frame of one stream event: durable events carry their seq as the SSE id. @internal */
export const frame = (item: StreamEvent): string =>
  item._tag === "Durable"
    ? `id: ${item.event.seq}\nevent: durable\ndata: ${JSON.stringify(item.event)}\n\n`
    : `event: live\ndata: ${liveJson(item.event)}\n\n`

/** A comment line: keeps proxies and load balancers from closing an idle stream. @internal */
export const heartbeatFrame = ": heartbeat\n\n"

/** The first frame: the reconnection delay a browser's `EventSource` should use. @internal */
export const retryFrame = (millis: number) => `retry: ${Math.max(0, Math.round(millis))}\n\n`

/** The last frame of a stream that failed after it started: the problem body. @internal */
export const errorFrame = (body: unknown) => `event: error\ndata: ${JSON.stringify(body)}\n\n`

// -------------------------------------------------------------------------------------------------
// parsing (client)

/** One dispatched SSE event. @internal */
export interface Frame {
  readonly id: string | undefined
  readonly event: string
  readonly data: string
}

/**
 * The frames of an event-stream body (WHATWG format): lines end with `\n`, `\r\n` or `\r`; a blank
 * line dispatches the fields read since the last one; comments are skipped; a frame cut off by the
 * end of the body is dropped.
 *
 * @internal
 */
export const frames = <E, R>(body: Stream.Stream<Uint8Array, E, R>): Stream.Stream<Frame, E, R> =>
  Stream.suspend(() => {
    let id: string | undefined
    let event = ""
    let data: Array<string> | undefined
    const field = (line: string) => {
      if (line.startsWith(":")) return
      const colon = line.indexOf(":")
      const name = colon === -1 ? line : line.slice(0, colon)
      const value = colon === -1 ? "" : line.slice(line[colon + 1] === " " ? colon + 2 : colon + 1)
      if (name === "data") (data ??= []).push(value)
      else if (name === "event") event = value
      else if (name === "id") id = value
    }
    return body.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.mapChunks((lines) => {
        const out: Array<Frame> = []
        for (const line of lines) {
          if (line !== "") {
            field(line)
            continue
          }
          if (data !== undefined) out.push({ id, event: event === "" ? "message" : event, data: data.join("\n") })
          id = undefined
          event = ""
          data = undefined
        }
        return Chunk.unsafeFromArray(out)
      })
    )
  })

const decodeDurable = Schema.decodeUnknownEither(Schema.parseJson(DurableEvent))
const decodeLive = Schema.decodeUnknownEither(Schema.parseJson(LiveEventSchema))

/** The stream event a frame carries; a frame that is neither durable nor live (or malformed) is skipped. */
const itemOf = (frame: Frame): Option.Option<StreamEvent> => {
  if (frame.event === "durable") {
    return Option.map(Either.getRight(decodeDurable(frame.data)), (event): StreamEvent => ({ _tag: "Durable", event }))
  }
  if (frame.event === "live") {
    return Option.map(Either.getRight(decodeLive(frame.data)), (event): StreamEvent => ({ _tag: "Live", event }))
  }
  return Option.none()
}

// -------------------------------------------------------------------------------------------------
// the reconnecting client (HTTP-01)

/** Sends `token` as a bearer token on every request. @internal */
export const withToken = (token: Redacted.Redacted | undefined) => (client: HttpClient.HttpClient) =>
  token === undefined ? client : HttpClient.mapRequest(client, HttpClientRequest.bearerToken(Redacted.value(token)))

/** What a request of the client can fail with: an error a problem body encodes, or the HTTP client's. @internal */
export type ClientError =
  | Schema.Schema.Type<typeof HttpApi.SessionProblem>
  | HttpApi.Unauthorized
  | HttpClientError.HttpClientError

const decodeProblem = Schema.decodeUnknown(Schema.Union(HttpApi.SessionProblem, HttpApi.UnauthorizedProblem))

/** A failure that retrying may cure: the network, a 5xx, a 429. */
const isTransient = (error: ClientError): boolean => {
  if (error._tag === "RequestError") return true
  if (error._tag === "ResponseError") {
    const status = (error as HttpClientError.ResponseError).response.status
    return status >= 500 || status === 429 || (error as HttpClientError.ResponseError).reason === "Decode"
  }
  const status = HttpApi.statusOf[error._tag]
  return status !== undefined && status >= 500
}


/** The typed error a problem response encodes, or the response as a `ResponseError`. */
const failure = (response: HttpClientResponse.HttpClientResponse): Effect.Effect<never, ClientError> =>
  Effect.flatMap(
    Effect.either(Effect.flatMap(response.json, decodeProblem)),
    (decoded): Effect.Effect<never, ClientError> =>
      Either.isRight(decoded)
        ? Effect.fail(decoded.right)
        : Effect.fail(
          new HttpClientError.ResponseError({
            request: response.request,
            response,
            reason: "StatusCode",
            description: `the server answered ${response.status} without a problem body`
          })
        )
  )

/** Default reconnection: exponential from 100 ms, capped at 5 s, forever. */
const defaultReconnect: Schedule.Schedule<unknown, unknown> = Schedule.exponential("100 millis").pipe(
  Schedule.union(Schedule.spaced("5 seconds"))
)

/** @internal */
export const events = (
  options: HttpApiFacade.EventsOptions
): Stream.Stream<StreamEvent, ClientError, HttpClient.HttpClient> =>
  Stream.suspend(() => {
    let next = options.from ?? 0
    const base = typeof options.baseUrl === "string" ? options.baseUrl : options.baseUrl.toString()
    const url = new URL(`sessions/${encodeURIComponent(options.sessionId)}/events`, base.endsWith("/") ? base : `${base}/`)
    const connect = Stream.unwrapScoped(Effect.gen(function*() {
      const client = withToken(options.token)(yield* HttpClient.HttpClient)
      const request = HttpClientRequest.get(url).pipe(
        HttpClientRequest.setHeader("accept", "text/event-stream"),
        next > 0
          ? HttpClientRequest.setHeader("last-event-id", String(next - 1))
          : HttpClientRequest.setUrlParam("from", "0")
      )
      const response = yield* client.execute(request)
      if (response.status >= 300) return yield* failure(response)
      return frames(response.stream).pipe(
        Stream.filterMap(itemOf),
        Stream.tap((item) =>
          Effect.sync(() => {
            if (item._tag === "Durable") next = item.event.seq + 1
          })
        )
      )
    }))
    const schedule = options.reconnect ?? defaultReconnect
    return connect.pipe(
      Stream.retry(Schedule.whileInput(schedule, isTransient)),
      Stream.repeat(schedule)
    )
  })
