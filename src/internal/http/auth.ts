/**
 * Authentication and authorization of the HTTP server (HTTP-03, SEC-04), in one place for every
 * route: the sessions routes, the body guard (which authenticates a request before it reads its
 * body) and the inspector's registry snapshot.
 *
 * @internal
 */
import { HttpServerRequest } from "@effect/platform"
import { Context, Effect, Option, Redacted } from "effect"
import type * as HttpApi from "../../HttpApi.js"
import { Forbidden, Unauthorized } from "./api.js"
import type { SessionId } from "../../Message.js"

/** What authentication and authorization need of the server's options. @internal */
export interface AuthSettings {
  readonly authenticate: HttpApi.Options["authenticate"]
  readonly authorize: HttpApi.Options["authorize"]
}

/** The principal of a server without authentication. @internal */
export const anonymous: HttpApi.Principal = { id: "anonymous" }

/**
 * SEC-04: the credentials of an `Authorization` header: the scheme `Bearer` in any case, exactly
 * one space, then a token of visible ASCII characters. Anything else (`Basic …`, `Bearerx`, two
 * spaces, a scheme of seven other characters) carries no bearer token.
 */
const bearerHeader = /^bearer ([\x21-\x7e]+)$/i

/**
 * The bearer token of a request's `Authorization` header (SEC-04): the one parser every route uses.
 * `None` when the header is absent; `Some(None)` when it is present but not `Bearer <token>`.
 *
 * @internal
 */
export const bearerToken = (header: string | undefined): Option.Option<Option.Option<string>> => {
  if (header === undefined || header === "") return Option.none()
  const match = bearerHeader.exec(header)
  return Option.some(match === null ? Option.none() : Option.some(match[1]!))
}

/**
 * The principal the body guard authenticated: a request with a body is authenticated before its
 * body is read (SEC-04), and the sessions routes' middleware reuses that answer instead of asking
 * `authenticate` again.
 *
 * @internal
 */
export class Authenticated extends Context.Tag("effect-agent/HttpApi/Authenticated")<
  Authenticated,
  HttpApi.Principal
>() {}

/**
 * Who sent `request` (HTTP-03, SEC-04): `anonymous` without authentication, else what
 * `authenticate` makes of its bearer token; 401 without one or with one it refuses.
 *
 * @internal
 */
export const authenticate = (
  settings: AuthSettings,
  request: HttpServerRequest.HttpServerRequest
): Effect.Effect<HttpApi.Principal, Unauthorized> => {
  const check = settings.authenticate
  if (check === undefined) return Effect.succeed(anonymous)
  const credentials = bearerToken(request.headers["authorization"])
  if (Option.isNone(credentials)) return Effect.fail(new Unauthorized({ reason: "the request has no bearer token" }))
  if (Option.isNone(credentials.value)) {
    return Effect.fail(
      new Unauthorized({ reason: "the Authorization header is not \"Bearer\", one space and a token" })
    )
  }
  return Effect.flatMap(check(Redacted.make(credentials.value.value)), (principal) =>
    Option.isSome(principal)
      ? Effect.succeed(principal.value)
      : Effect.fail(new Unauthorized({ reason: "the bearer token is not valid" })))
}

/**
 * The principal of the request being handled: the one the body guard found, else authenticated
 * now from the request's header.
 *
 * @internal
 */
export const principalOfRequest = (
  settings: AuthSettings
): Effect.Effect<HttpApi.Principal, Unauthorized, HttpServerRequest.HttpServerRequest> =>
  Effect.flatMap(Effect.serviceOption(Authenticated), (known) =>
    Option.isSome(known)
      ? Effect.succeed(known.value)
      : Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => authenticate(settings, request)))

/**
 * Whether `principal` may do `action` to the session (every request may without an `authorize`
 * callback).
 *
 * @internal
 */
export const mayDo = (
  settings: AuthSettings,
  principal: HttpApi.Principal,
  sessionId: SessionId | undefined,
  action: HttpApi.Action
): Effect.Effect<boolean> => settings.authorize === undefined ? Effect.succeed(true) : settings.authorize(principal, sessionId, action)

/**
 * Refuses (403) unless `principal` may do `action` to the session.
 *
 * @internal
 */
export const authorize = (
  settings: AuthSettings,
  principal: HttpApi.Principal,
  sessionId: SessionId | undefined,
  action: HttpApi.Action
): Effect.Effect<void, Forbidden> =>
  Effect.flatMap(mayDo(settings, principal, sessionId, action), (allowed) =>
    allowed
      ? Effect.void
      : Effect.fail(
        new Forbidden({ principal: principal.id, action, ...(sessionId === undefined ? {} : { sessionId }) })
      ))
