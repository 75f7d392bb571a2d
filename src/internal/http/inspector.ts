/**
 * The inspector (INS-01): the static page shipped in the package's `inspector/` folder, served at
 * `/inspector/`, and its one extra endpoint, `GET /inspector/api/registry`, a read-only snapshot of
 * the live agents of this process's `AgentRegistry` (owners, initiators, status). Everything else
 * the page shows comes from the API's own routes.
 *
 * The registry endpoint is local to the process: it is not part of `SessionGateway`, so a gateway
 * without an `AgentRegistry` in its context (a cluster client) answers it 404 and the page says so.
 *
 * @internal
 */
import { FileSystem, HttpApiBuilder, HttpRouter, HttpServerRequest, HttpServerResponse, Path } from "@effect/platform"
import type { Option as OptionType } from "effect"
import { Effect, Either, Option, Schema, Stream } from "effect"
import type { Agent } from "../../Agent.js"
import type { AgentStatus } from "../../AgentEvent.js"
import { AgentRegistry } from "../../AgentRegistry.js"
import type * as HttpApi from "../../HttpApi.js"
import { Forbidden, Unauthorized } from "./api.js"
import type { SessionId } from "../../Message.js"
import * as auth from "./auth.js"
import * as problems from "./problem.js"

/** What the inspector needs of the server's options. @internal */
export type InspectorSettings = auth.AuthSettings

/** The folder of the page, at the package root: `../../../inspector/` from `src/internal/http` and `dist/internal/http` alike. */
const assetsUrl = new URL("../../../inspector/", import.meta.url)

/** The content type of each kind of asset the page is made of; any other file is not served. */
const contentTypes: Readonly<Record<string, string>> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml"
}

/**
 * An asset name: one path segment of letters, digits, `-` and `_`, then a known extension. No
 * separator, no dot segment, so no request can name a file outside the folder (INS-01).
 */
const assetName = /^[A-Za-z0-9][A-Za-z0-9_-]*\.([a-z]+)$/

/** The page's own requests stay on this origin; nothing inline runs (the page builds DOM nodes, never HTML). */
const securityHeaders = {
  "cache-control": "no-cache",
  "x-content-type-options": "nosniff",
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'"
}

const problemResponse = (status: number, tag: string, detail: string) =>
  HttpServerResponse.unsafeJson({ type: `effect-agent/${tag}`, title: tag, status, detail }, { status })

const notFound = (name: string) =>
  problemResponse(404, "InspectorAssetNotFound", `the inspector has no file ${JSON.stringify(name)}; open /inspector/`)

/** One asset of the folder, with its content type; 404 for any other name. */
const asset = (name: string) =>
  Effect.gen(function*() {
    const match = assetName.exec(name)
    const contentType = match === null ? undefined : contentTypes[match[1]!]
    if (contentType === undefined) return notFound(name)
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const folder = yield* Effect.orDie(path.fromFileUrl(assetsUrl))
    const file = path.join(folder, name)
    // the name pattern already keeps it inside; checked again so a change to the pattern cannot open the disk
    if (path.relative(folder, file).startsWith("..")) return notFound(name)
    return yield* fs.readFile(file).pipe(
      Effect.map((bytes) => HttpServerResponse.uint8Array(bytes, { contentType, headers: securityHeaders })),
      Effect.catchAll(() => Effect.succeed(notFound(name)))
    )
  })

// -------------------------------------------------------------------------------------------------
// the registry snapshot

/** One live agent as the page draws the tree. @internal */
export interface RegistryNode {
  readonly id: SessionId
  readonly status: AgentStatus
  /** The live agent that owns it (REG-07); `null` for a root (owned by the host or a plain Scope). */
  readonly owner: SessionId | null
  /** The agent whose work created it, as recorded since the server started (INIT); `null` when none. */
  readonly initiator: SessionId | null
}

/**
 * The initiators of agents created while the server runs, from the registry's `AgentCreated`
 * events (the registry keeps none): forgotten at `AgentDisposed`.
 */
const recordInitiators = (registry: AgentRegistry["Type"]) =>
  Effect.gen(function*() {
    const initiators = new Map<string, SessionId>()
    const events = yield* registry.subscribe
    yield* events.pipe(
      Stream.runForEach((event) =>
        Effect.sync(() => {
          if (event._tag === "AgentCreated" && event.initiator !== undefined) initiators.set(event.agent, event.initiator)
          else if (event._tag === "AgentDisposed") initiators.delete(event.agent)
        })
      ),
      Effect.forkScoped
    )
    return initiators
  })

const snapshot = (registry: AgentRegistry["Type"], initiators: ReadonlyMap<string, SessionId>) =>
  Effect.gen(function*() {
    const owners = yield* registry.owners
    const agents = yield* Effect.forEach(owners, ({ agent, owner }: { agent: Agent; owner: OptionType.Option<SessionId> }) =>
      Effect.map(agent.status, (status): RegistryNode => ({
        id: agent.id,
        status,
        owner: Option.getOrNull(owner),
        initiator: initiators.get(agent.id) ?? null
      })))
    return { agents }
  })

// -------------------------------------------------------------------------------------------------
// security: the registry answers as the sessions routes do (HTTP-03, SEC-04)

const problemEncoders = {
  unauthorized: Schema.encode(problems.problem(Unauthorized, 401)),
  forbidden: Schema.encode(problems.problem(Forbidden, 403))
}

/**
 * The principal of a request that may see the registry (authenticated by the sessions routes' own
 * parser, SEC-04, and allowed to `list`), or the 401/403 response.
 */
const admitted = (settings: InspectorSettings, request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function*() {
    const principal = yield* Effect.either(auth.authenticate(settings, request))
    if (Either.isLeft(principal)) {
      const body = yield* Effect.orDie(problemEncoders.unauthorized(principal.left))
      return Either.left(HttpServerResponse.unsafeJson(body, { status: 401, headers: { "www-authenticate": "Bearer" } }))
    }
    const allowed = yield* Effect.either(auth.authorize(settings, principal.right, undefined, "list"))
    if (Either.isLeft(allowed)) {
      const body = yield* Effect.orDie(problemEncoders.forbidden(allowed.left))
      return Either.left(HttpServerResponse.unsafeJson(body, { status: 403 }))
    }
    return Either.right(principal.right)
  })

/**
 * SEC-04: only the live agents the principal may `read`, as the sessions listing shows only those;
 * an owner or an initiator it may not read is not named (the agent shows as a root, or as started
 * by nobody it can see).
 */
const readableNodes = (
  settings: InspectorSettings,
  principal: HttpApi.Principal,
  agents: ReadonlyArray<RegistryNode>
) =>
  Effect.gen(function*() {
    if (settings.authorize === undefined) return agents
    const ids = new Set<SessionId>()
    for (const node of agents) {
      ids.add(node.id)
      if (node.owner !== null) ids.add(node.owner)
      if (node.initiator !== null) ids.add(node.initiator)
    }
    const readable = new Set<SessionId>()
    yield* Effect.forEach(ids, (id) =>
      Effect.map(auth.mayDo(settings, principal, id, "read"), (allowed) => {
        if (allowed) readable.add(id)
      }), { discard: true })
    const shown = (id: SessionId | null) => (id !== null && readable.has(id) ? id : null)
    return agents.filter((node) => readable.has(node.id)).map((node): RegistryNode => ({
      ...node,
      owner: shown(node.owner),
      initiator: shown(node.initiator)
    }))
  })

// -------------------------------------------------------------------------------------------------
// routes

/**
 * The inspector's routes on the API's router (INS-01): `/inspector` (redirects to the folder),
 * `/inspector/` (the page), `/inspector/<file>` and `/inspector/api/registry`.
 *
 * @internal
 */
export const layer = (settings: InspectorSettings) =>
  HttpApiBuilder.Router.use((router) =>
    Effect.gen(function*() {
      const registry = yield* Effect.serviceOption(AgentRegistry)
      const initiators = Option.isSome(registry) ? yield* recordInitiators(registry.value) : new Map<string, SessionId>()
      // one route for both forms (the router ignores a trailing slash): the page's relative URLs need
      // the folder form, so `/inspector` redirects there, relatively, to keep a proxy's path prefix
      yield* router.get(
        "/inspector",
        Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
          (request.url.split("?")[0] ?? "").endsWith("/")
            ? asset("index.html")
            : Effect.succeed(HttpServerResponse.redirect("./inspector/", { status: 302 })))
      )
      yield* router.get(
        "/inspector/:file",
        Effect.flatMap(HttpRouter.params, (params) => asset(params["file"] ?? ""))
      )
      yield* router.get(
        "/inspector/api/registry",
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const principal = yield* admitted(settings, request)
          if (Either.isLeft(principal)) return principal.left
          if (Option.isNone(registry)) {
            return problemResponse(
              404,
              "RegistryUnavailable",
              "this server's gateway has no local AgentRegistry (a cluster client): the registry tree is shown only by a server over an AgentHost"
            )
          }
          const { agents } = yield* snapshot(registry.value, initiators)
          const shown = yield* readableNodes(settings, principal.right, agents)
          return yield* HttpServerResponse.json({ agents: shown }, {
            headers: { "cache-control": "no-store" }
          }).pipe(Effect.orDie)
        })
      )
    })
  )
