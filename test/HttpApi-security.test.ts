/**
 * The HTTP API against clients that do not play by the rules (SPEC §28, SEC-03..06), over real HTTP
 * on 127.0.0.1: authorization on every route and authentication before a body is read (SEC-04), no
 * internals in what is stored or sent (SEC-03), a problem body for every bad input (SEC-05) and
 * bounded listings (SEC-06). Every refused request is checked for its status, its problem body and
 * that nothing stored changed.
 */
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Logger, Option, Redacted, Schema, Stream } from "effect"
import * as HttpApi from "../src/HttpApi.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as SessionError from "../src/SessionError.js"
import type { JsonValue } from "../src/SessionEvent.js"
import * as SessionGateway from "../src/SessionGateway.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import type { Store } from "./fixtures/host.js"
import { assertProblem, rawExchange, serveGateway, serveModel, storedCounts } from "./fixtures/hostileHttp.js"
import { fileStore, openEvents, request, serve } from "./fixtures/httpServer.js"

const route = { provider: "scripted", model: "test" }

/** Tokens the servers of these tests accept. */
const tokens: Record<string, string> = { "ops-token": "ops", "lister-token": "lister", "reader-token": "reader" }

const authenticate = (token: Redacted.Redacted) =>
  Effect.succeed(Option.map(Option.fromNullable(tokens[Redacted.value(token)]), (id) => ({ id })))

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

/** An absolute path as a message could carry one (POSIX, Windows, a `file:` URL). */
const absolutePath = /(^|[\s'"(=:,[{])(\/[A-Za-z0-9._-]+\/|[A-Za-z]:\\|file:\/)/

/** The stored log of a session. */
const logOf = (store: Store, id: string) =>
  Effect.map(Effect.orDie(Context.get(store.context, SessionPersistence).read(id as SessionId)), (stored) => stored)

/** A model whose stream dies the way a crashed adapter would: an error with a stack and install paths. */
const dyingModel = Layer.succeed(
  Model.Model,
  Model.Model.of({
    stream: () => Stream.die(new TypeError("cannot read properties of undefined (reading 'choices') at /opt/app/node_modules/effect-agent/dist/internal/openAiChat.js:120:7"))
  })
)

/** A tool that dies with a path in its message. */
const explode = Tool.make({
  name: "explode",
  description: "Fails unexpectedly.",
  parameters: Schema.Struct({}),
  run: () => Effect.die(new RangeError("invalid array length in /srv/agents/tools/explode.ts"))
})

/** Log lines (level and message text, with the cause's rendering) while `effect` runs. */
const capturingLogs = (lines: Array<string>) =>
  Logger.replace(
    Logger.defaultLogger,
    Logger.make(({ cause, logLevel, message }) => {
      lines.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)} ${String(cause)}`)
    })
  )

// -------------------------------------------------------------------------------------------------
// SEC-04

describe("SEC-04 authorization everywhere", () => {
  it.scoped("SEC-04 the inspector's registry goes through authorize: a principal allowed only list sees no live agent; one that may read some sees those, naming no owner or initiator it may not read", () =>
    Effect.gen(function*() {
      const served = yield* serve(yield* fileStore, [], {
        http: {
          authenticate,
          // ops may do anything; lister may list and nothing else; reader may also read "team-*"
          authorize: (principal, sessionId, action) =>
            Effect.succeed(
              principal.id === "ops" || action === "list" ||
                (principal.id === "reader" && action === "read" && sessionId?.startsWith("team-") === true)
            )
        }
      })
      // a private root that owns a team child it started, and a team root
      const lead = yield* served.host.get("private-lead", { options: route })
      yield* served.registry.create({ sessionId: "team-helper", options: route, parentAgent: lead }).pipe(
        served.registry.withInitiator(lead)
      )
      yield* served.host.get("team-root", { options: route })
      const registry = (token: string) => request(`${served.url}/inspector/api/registry`, { headers: bearer(token) })
      // ops sees the whole tree once the initiator is recorded (the server reads it from a feed of its own)
      let all: ReadonlyArray<{ readonly id: string; readonly initiator: string | null }> = []
      for (let attempt = 0; attempt < 500 && !all.some((node) => node.initiator === "private-lead"); attempt++) {
        all = ((yield* registry("ops-token")).body as { readonly agents: typeof all }).agents
        yield* Effect.yieldNow()
      }
      assert.deepStrictEqual(all.map((node) => node.id), ["private-lead", "team-helper", "team-root"])

      const lister = yield* registry("lister-token")
      assert.strictEqual(lister.status, 200)
      assert.deepStrictEqual(lister.body, { agents: [] })
      assert.notInclude(JSON.stringify(lister.body), "private-lead")

      const reader = yield* registry("reader-token")
      assert.deepStrictEqual(reader.body, {
        agents: [
          { id: "team-helper", status: "idle", owner: null, initiator: null },
          { id: "team-root", status: "idle", owner: null, initiator: null }
        ]
      })
      // the sessions listing agrees with it
      const listed = (yield* request(`${served.url}/sessions`, { headers: bearer("reader-token") })).body as SessionGateway.SessionPage
      assert.deepStrictEqual(listed.sessions.map((entry) => entry.id), ["team-helper", "team-root"])
      assertProblem(yield* request(`${served.url}/inspector/api/registry`), 401, "Unauthorized")
    }))

  it.scopedLive("SEC-04 a body is read only after authentication: 401 before 400/413, answered while a declared 1 MiB body is still unsent, for a chunked body without end and for a malformed one; nothing stored changed", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [], { http: { authenticate } })
      assert.strictEqual(
        (yield* request(`${served.url}/sessions/kept`, { method: "PUT", body: { options: route }, headers: bearer("ops-token") })).status,
        201
      )
      const before = yield* storedCounts(store)
      const head = (path: string, headers: ReadonlyArray<string>) =>
        [`POST ${path} HTTP/1.1`, "host: 127.0.0.1", "content-type: application/json", ...headers]
      const answered = <A, E>(effect: Effect.Effect<A, E>) =>
        Effect.timeoutFail(effect, {
          duration: "20 seconds",
          onTimeout: () => new Error("no answer: the server waited for a body it should not read")
        })
      // 1 MiB declared, 64 KiB sent, the connection held open: only a server that does not read it answers
      const partial = yield* answered(rawExchange(
        served.port,
        head("/sessions/kept/messages", ["content-length: 1048576"]),
        Buffer.alloc(64 * 1024, 0x61)
      ))
      assertProblem(partial, 401, "Unauthorized")
      assert.include(partial.headers.toLowerCase(), "www-authenticate: bearer")
      // over the server's limit: 401, not 413
      assertProblem(
        yield* answered(rawExchange(served.port, head("/sessions/kept/messages", ["content-length: 99999999"]), Buffer.from("{"))),
        401,
        "Unauthorized"
      )
      // chunked, one chunk sent and no last chunk
      const chunk = Buffer.from("{\"text\":\"")
      assertProblem(
        yield* answered(rawExchange(
          served.port,
          head("/sessions/kept/messages", ["transfer-encoding: chunked"]),
          Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")])
        )),
        401,
        "Unauthorized"
      )
      // malformed JSON without a token: 401 (it is not read); with a wrong token too
      const malformed = Buffer.from("{not json")
      for (const headers of [[], ["authorization: Bearer nope"]]) {
        assertProblem(
          yield* answered(rawExchange(served.port, head("/sessions/kept/messages", [`content-length: ${malformed.length}`, ...headers]), malformed)),
          401,
          "Unauthorized"
        )
      }
      // with a token the same bodies get what they deserve
      assertProblem(
        yield* answered(rawExchange(
          served.port,
          head("/sessions/kept/messages", [`content-length: ${malformed.length}`, "authorization: Bearer ops-token"]),
          malformed
        )),
        400,
        "InvalidRequest"
      )
      assertProblem(
        yield* answered(rawExchange(served.port, head("/sessions/kept/messages", ["content-length: 99999999", "authorization: Bearer ops-token"]), Buffer.from("{"))),
        413,
        "PayloadTooLarge"
      )
      assert.deepStrictEqual(yield* storedCounts(store), before)
    }))

  it.scoped("SEC-04 the scheme is Bearer in any case and one space, parsed alike on every route: bearer x and BEARER x pass; Basic x, Bearerx, Bearer  x (two spaces) and Xearer x are 401", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      let asked = 0
      const counting = (token: Redacted.Redacted) => Effect.zipRight(Effect.sync(() => asked++), authenticate(token))
      const served = yield* serve(store, [], { http: { authenticate: counting } })
      assert.strictEqual(
        (yield* request(`${served.url}/sessions/s`, { method: "PUT", body: { options: route }, headers: bearer("ops-token") })).status,
        201
      )
      // one question per request: the body guard's answer is the route's (a body request is not asked twice)
      assert.strictEqual(asked, 1)
      assert.strictEqual((yield* request(`${served.url}/sessions/s`, { headers: bearer("ops-token") })).status, 200)
      assert.strictEqual(asked, 2)
      const routes = [
        { method: "GET", path: "/sessions" },
        { method: "GET", path: "/sessions/s" },
        { method: "PUT", path: "/sessions/s", body: { options: route } },
        { method: "POST", path: "/sessions/s/cancel", body: {} },
        { method: "GET", path: "/inspector/api/registry" }
      ]
      const send = (routeOf: (typeof routes)[number], authorization: string) =>
        request(`${served.url}${routeOf.path}`, {
          method: routeOf.method,
          headers: { authorization },
          ...(routeOf.body === undefined ? {} : { body: routeOf.body })
        })
      const before = yield* storedCounts(store)
      for (const routeOf of routes) {
        for (const accepted of ["bearer ops-token", "BEARER ops-token", "Bearer ops-token", "bEaReR ops-token"]) {
          const reply = yield* send(routeOf, accepted)
          assert.isBelow(reply.status, 300, `${routeOf.method} ${routeOf.path} with ${accepted}: ${JSON.stringify(reply.body)}`)
        }
        for (
          const refused of [
            "Basic ops-token",
            "Bearerops-token",
            "Bearer  ops-token",
            "Xearer ops-token",
            "Bearer\tops-token",
            "Bearer",
            "Token ops-token",
            "Bearer ops-token extra"
          ]
        ) {
          assertProblem(yield* send(routeOf, refused), 401, "Unauthorized", `${routeOf.method} ${routeOf.path} with ${refused}`)
        }
      }
      // the SSE route too
      const events = yield* openEvents(`${served.url}/sessions/s/events`, { authorization: "Xearer ops-token" })
      assert.strictEqual(events.status, 401)
      yield* events.close
      assert.deepStrictEqual(yield* storedCounts(store), before)
    }))
})

// -------------------------------------------------------------------------------------------------
// SEC-03

describe("SEC-03 no internals in what is stored or sent", () => {
  it.scoped("SEC-03 a tool or a model that dies: the turn ends {code: DEFECT, message} with no stack and no absolute path in the log, the SSE stream and the inspector's data; the stack goes to the process's log at Error", () => {
    const lines: Array<string> = []
    return Effect.gen(function*() {
      const store = yield* fileStore
      // a model that dies serves "crashing"; the scripted one calls a tool that dies for "exploding"
      const scripted = yield* Model.scripted([Model.toolCall("call-1", "explode", "{}")])
      const scriptedModel = Context.get(yield* Layer.build(scripted.layer), Model.Model)
      const dying = Context.get(yield* Layer.build(dyingModel), Model.Model)
      const model = Layer.succeed(Model.Model, Model.router({ crashing: dying, exploding: scriptedModel }))
      const served = yield* serveModel(store, model, { host: { setup: (agent) => agent.tools.register(explode) } })
      for (const [id, provider] of [["died-model", "crashing"], ["died-tool", "exploding"]] as const) {
        assert.strictEqual(
          (yield* request(`${served.url}/sessions/${id}`, { method: "PUT", body: { options: { provider, model: "m" } } })).status,
          201
        )
        const stream = yield* openEvents(`${served.url}/sessions/${id}/events`)
        assert.strictEqual((yield* request(`${served.url}/sessions/${id}/messages`, { method: "POST", body: { text: "go" } })).status, 202)
        // the durable turn/end and the live AgentError that mirrors it, in whichever order they come
        let seen = 0
        const frames = yield* stream.until((frame) => {
          if (frame.event === "durable" && (frame.data ?? "").includes("\"turn/end\"")) seen |= 1
          if (frame.event === "live" && (frame.data ?? "").includes("\"AgentError\"")) seen |= 2
          return seen === 3
        })
        yield* stream.close
        yield* served.host.use(id, (agent) => agent.whenIdle)
        const ended = (yield* logOf(store, id)).events.find((event) => event.type === "turn/end")
        const reason = (ended?.data as { readonly reason: { readonly kind: string; readonly error: { readonly code: string; readonly message: string } } })
          .reason
        assert.strictEqual(reason.kind, "error", id)
        assert.strictEqual(reason.error.code, "DEFECT", id)
        assert.isAbove(reason.error.message.length, 10)
        for (const text of [reason.error.message, ...frames.map((frame) => frame.data ?? "")]) {
          assert.notMatch(text, /\n\s+at /, `${id}: a stack in ${text}`)
          assert.notMatch(text, absolutePath, `${id}: a path in ${text}`)
          assert.notInclude(text, "/opt/app")
          assert.notInclude(text, "/srv/agents")
        }
        // the live AgentError frame carries the same short message
        const live = frames.find((frame) => frame.event === "live" && (frame.data ?? "").includes("\"AgentError\""))
        assert.include(live?.data, "\"code\":\"DEFECT\"")
      }
      // the operator's log has the whole cause
      const errors = lines.filter((line) => line.startsWith("ERROR"))
      assert.isTrue(errors.some((line) => line.includes("/opt/app/node_modules/effect-agent")), errors.join("\n"))
      assert.isTrue(errors.some((line) => line.includes("/srv/agents/tools/explode.ts")), errors.join("\n"))
    }).pipe(Effect.provide(capturingLogs(lines)))
  }, 60_000)

  it.scoped("SEC-03 a 500 problem body carries no absolute path (a PersistenceError naming its file, a defect); the log keeps the whole failure", () => {
    const lines: Array<string> = []
    return Effect.gen(function*() {
      const served = yield* serveGateway(failingGateway)
      const persistence = yield* request(`${served.url}/sessions/s1`)
      assertProblem(persistence, 500, "PersistenceError")
      const text = JSON.stringify(persistence.body)
      assert.notMatch(text, absolutePath, text)
      assert.notInclude(text, "/var/lib")
      // what is left is still useful: the file's name and the reason
      assert.include((persistence.body as { readonly detail: string }).detail, "s1.jsonl")
      assert.include((persistence.body as { readonly detail: string }).detail, "EIO")
      const defect = yield* request(`${served.url}/sessions/s1`, { method: "PUT", body: {} })
      assertProblem(defect, 500, "InternalError")
      assert.notInclude(JSON.stringify(defect.body), "/home/")
      assert.notInclude(JSON.stringify(defect.body), "at ")
      const errors = lines.filter((line) => line.startsWith("ERROR"))
      assert.isTrue(errors.some((line) => line.includes("/var/lib/effect-agent/sessions/s1.jsonl")), errors.join("\n"))
      assert.isTrue(errors.some((line) => line.includes("/home/ops/app/server.js")), errors.join("\n"))
    }).pipe(Effect.provide(capturingLogs(lines)))
  })

  it.scoped("SEC-03 a 400's detail names the field path in plain words, never the schema's own rendering", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [])
      yield* request(`${served.url}/sessions/known`, { method: "PUT", body: { options: route } })
      const before = yield* storedCounts(store)
      const cases: ReadonlyArray<{ readonly method: string; readonly path: string; readonly body?: unknown; readonly says: ReadonlyArray<string> }> = [
        { method: "PUT", path: "/sessions/fresh", body: { options: { maxTokens: "many" } }, says: ["options.maxTokens", "a number", "\"many\""] },
        { method: "PUT", path: "/sessions/fresh", body: { options: { maxTokens: 0 } }, says: ["options.maxTokens", "positive"] },
        { method: "PUT", path: "/sessions/fresh", body: { meta: 5 }, says: ["meta", "JSON object"] },
        { method: "PUT", path: "/sessions/fresh", body: [], says: ["the request body", "JSON object"] },
        { method: "POST", path: "/sessions/known/messages", body: { text: "a", mode: "shout" }, says: ["field mode", "\"followup\"", "\"shout\""] },
        { method: "POST", path: "/sessions/known/messages", body: { content: [{ type: "text" }] }, says: ["content[0].text", "required"] },
        { method: "POST", path: "/sessions/known/messages", body: { content: [{ type: "video" }] }, says: ["content[0].type", "\"text\"", "\"video\""] },
        { method: "POST", path: "/sessions/known/messages", body: { text: "a", id: "" }, says: ["field id", "at least 1"] },
        { method: "POST", path: "/sessions/known/messages", body: {}, says: ["exactly one of text and content"] },
        { method: "POST", path: "/sessions/known/fork", body: { upTo: 1 }, says: ["childId", "required"] },
        { method: "POST", path: "/sessions/known/fork", body: { childId: "c", upTo: -1 }, says: ["upTo", "non-negative"] },
        { method: "POST", path: "/sessions/known/cancel", body: { keepInbox: "yes" }, says: ["keepInbox", "true or false"] },
        { method: "GET", path: "/sessions?limit=0", says: ["field limit", "between 1 and 1000"] },
        { method: "GET", path: "/sessions?limit=ten", says: ["field limit", "decimal digits"] },
        { method: "GET", path: "/sessions?include=everything", says: ["field include", "\"meta\""] },
        { method: "GET", path: "/sessions/bad!id", says: ["\"!\""] },
        { method: "GET", path: `/sessions/${"x".repeat(129)}`, says: ["129 characters"] }
      ]
      for (const item of cases) {
        const reply = yield* request(`${served.url}${item.path}`, {
          method: item.method,
          ...(item.body === undefined ? {} : { body: item.body })
        })
        assert.strictEqual(reply.status, 400, `${item.method} ${item.path}: ${JSON.stringify(reply.body)}`)
        const detail = (reply.body as { readonly detail: string }).detail
        for (const word of item.says) assert.include(detail, word, `${item.method} ${item.path}`)
        // the schema's rendering: type signatures, tree drawing, the decoder's own words
        for (const internal of ["readonly", "└", "├", "Refinement", "From side", "Transformation process", "ReadonlyArray<", "{ "]) {
          assert.notInclude(detail, internal, `${item.method} ${item.path}: ${detail}`)
        }
      }
      assert.deepStrictEqual(yield* storedCounts(store), before)
    }))
})

/** A gateway of the test's own whose reads fail with a path in their reason and whose writes die. */
const failingGateway: SessionGateway.SessionGateway["Type"] = {
  list: () => Effect.succeed({ sessions: [] }),
  summary: () =>
    Effect.fail(
      new SessionError.PersistenceError({ reason: "cannot read /var/lib/effect-agent/sessions/s1.jsonl: EIO: i/o error, read" })
    ),
  create: () => Effect.die(new Error("unexpected state in /home/ops/app/server.js:42")),
  send: () => Effect.die(new Error("unused")),
  cancel: () => Effect.die(new Error("unused")),
  fork: () => Effect.die(new Error("unused")),
  dispose: () => Effect.die(new Error("unused")),
  remove: () => Effect.die(new Error("unused")),
  eventsFrom: () => Stream.die(new Error("unused")),
  ready: Effect.succeed(true)
}

// -------------------------------------------------------------------------------------------------
// SEC-05

describe("SEC-05 bad HTTP input always gets a problem body", () => {
  it.scoped("SEC-05 nesting deeper than DUR-10's 1,000 levels in every JSON body route is a 400 problem; a meta just under the limit is stored", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [])
      yield* request(`${served.url}/sessions/known`, { method: "PUT", body: { options: route } })
      const before = yield* storedCounts(store)
      const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth)
      for (const depth of [1001, 5000, 200_000]) {
        const bodies = [
          { method: "PUT", path: "/sessions/deep", body: `{"meta":{"x":${nested(depth)}}}` },
          { method: "PUT", path: "/sessions/known", body: `{"options":${nested(depth)}}` },
          { method: "POST", path: "/sessions/known/messages", body: `{"text":"a","extra":${nested(depth)}}` },
          { method: "POST", path: "/sessions/known/cancel", body: nested(depth) },
          { method: "POST", path: "/sessions/known/fork", body: `{"childId":"c","x":${nested(depth)}}` },
          { method: "DELETE", path: "/sessions/known", body: nested(depth) }
        ]
        for (const item of bodies) {
          const reply = yield* request(`${served.url}${item.path}`, { method: item.method, body: item.body })
          assertProblem(reply, 400, "InvalidRequest", `${item.method} ${item.path} at depth ${depth}`)
          assert.include((reply.body as { readonly detail: string }).detail, "deeper than 1000")
        }
      }
      assert.deepStrictEqual(yield* storedCounts(store), before)
      // 990 levels inside the meta (992 in the body) is within the limit: stored and read back
      let meta: JsonValue = "bottom"
      for (let i = 0; i < 989; i++) meta = [meta]
      const created = yield* request(`${served.url}/sessions/deep-ok`, { method: "PUT", body: { meta: { x: meta } } })
      assert.strictEqual(created.status, 201, JSON.stringify(created.body).slice(0, 300))
      const stored = yield* logOf(store, "deep-ok")
      assert.deepStrictEqual(stored.header.meta, { x: meta })
    }))

  it.scoped("SEC-05 an id over the limit and a malformed percent-escape are 400 problems on every route; an unknown route is a 404 problem", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [])
      yield* request(`${served.url}/sessions/known`, { method: "PUT", body: { options: route } })
      const before = yield* storedCounts(store)
      const routes = (id: string) => [
        { method: "GET", path: `/sessions/${id}` },
        { method: "PUT", path: `/sessions/${id}`, body: {} },
        { method: "POST", path: `/sessions/${id}/messages`, body: { text: "x" } },
        { method: "POST", path: `/sessions/${id}/cancel`, body: {} },
        { method: "POST", path: `/sessions/${id}/fork`, body: { childId: "child" } },
        { method: "DELETE", path: `/sessions/${id}` },
        { method: "GET", path: `/sessions/${id}/events` }
      ]
      for (const [id, tag] of [["a".repeat(200), "InvalidSessionId"], ["b".repeat(5000), "InvalidSessionId"], ["%E0%A4%A", "InvalidRequest"], ["ok%ZZ", "InvalidRequest"], ["%C0%AF", "InvalidRequest"]] as const) {
        for (const item of routes(id)) {
          const reply = yield* rawExchange(served.port, [
            `${item.method} ${item.path} HTTP/1.1`,
            "host: 127.0.0.1",
            ...(item.body === undefined ? [] : ["content-type: application/json", `content-length: ${JSON.stringify(item.body).length}`])
          ], item.body === undefined ? undefined : Buffer.from(JSON.stringify(item.body)))
          assertProblem(reply, 400, tag, `${item.method} ${item.path.slice(0, 60)}`)
        }
      }
      // a malformed escape in the query too
      assertProblem(
        yield* rawExchange(served.port, ["GET /sessions?after=%E0%A4%A HTTP/1.1", "host: 127.0.0.1"], undefined),
        400,
        "InvalidRequest"
      )
      // unknown routes and methods
      for (const [method, path] of [["GET", "/nothing"], ["POST", "/sessions/known/explode"], ["PATCH", "/sessions/known"], ["GET", "/sessions/known/events/more"]] as const) {
        const reply = yield* request(`${served.url}${path}`, { method, ...(method === "GET" ? {} : { body: {} }) })
        assertProblem(reply, 404, "RouteNotFound", `${method} ${path}`)
      }
      assert.deepStrictEqual(yield* storedCounts(store), before)
    }))

  it.scoped("SEC-05 DUR-03 __proto__ keys in meta are accepted and stored as data, read back as data, and never applied to a prototype", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [])
      const body = "{\"meta\":{\"__proto__\":{\"polluted\":true},\"nested\":{\"__proto__\":[1,2]},\"constructor\":{\"prototype\":{\"polluted\":true}}}}"
      const created = yield* request(`${served.url}/sessions/proto`, { method: "PUT", body })
      assert.strictEqual(created.status, 201, JSON.stringify(created.body))
      const expected = "{\"__proto__\":{\"polluted\":true},\"nested\":{\"__proto__\":[1,2]},\"constructor\":{\"prototype\":{\"polluted\":true}}}"
      // stored: the header's meta holds the keys as its own data, with a plain prototype
      const stored = (yield* logOf(store, "proto")).header.meta
      assert.strictEqual(Object.getPrototypeOf(stored), Object.prototype)
      assert.isTrue(Object.hasOwn(stored, "__proto__"))
      assert.isTrue(Object.hasOwn(stored["nested"] as object, "__proto__"))
      assert.strictEqual(JSON.stringify(stored), expected)
      // read back over HTTP as the same data: the summary and a listing with meta
      const fetched = yield* Effect.promise(() => fetch(`${served.url}/sessions/proto`).then((response) => response.text()))
      assert.include(fetched, `"meta":${expected}`)
      const listed = yield* Effect.promise(() => fetch(`${served.url}/sessions?include=meta`).then((response) => response.text()))
      assert.include(listed, `"meta":${expected}`)
      // and through the typed client, decoded as data
      const info = yield* Effect.flatMap(HttpApi.client({ baseUrl: served.url }), (client) => client.sessions.get({ path: { id: "proto" } }))
        .pipe(Effect.provide(FetchHttpClient.layer))
      assert.isTrue(Object.hasOwn(info.meta, "__proto__"))
      assert.strictEqual(Object.getPrototypeOf(info.meta), Object.prototype)
      // nothing anywhere was polluted
      assert.isUndefined(({} as Record<string, unknown>)["polluted"])
      assert.isUndefined((Object.prototype as Record<string, unknown>)["polluted"])
    }))

  it.scoped("SEC-05 cursors are decimal integers only: from=1e3, from=0x10, from=1.5, from=-1 and Last-Event-ID 1.5, 0x1, 1e1 are 400 problems; digits work", () =>
    Effect.gen(function*() {
      const served = yield* serve(yield* fileStore, [Model.text("hello")])
      yield* request(`${served.url}/sessions/c`, { method: "PUT", body: { options: route } })
      yield* request(`${served.url}/sessions/c/messages`, { method: "POST", body: { text: "hi" } })
      yield* served.host.use("c", (agent) => agent.whenIdle)
      for (const from of ["1e3", "0x10", "1.5", "-1", "+1", " 1", "1_0", "Infinity", ""]) {
        const reply = yield* request(`${served.url}/sessions/c/events?from=${encodeURIComponent(from)}`)
        assertProblem(reply, 400, "InvalidRequest", `from=${from}`)
      }
      for (const lastEventId of ["1.5", "0x1", "1e1", "-1", "one", "1 2"]) {
        const reply = yield* request(`${served.url}/sessions/c/events`, { headers: { "last-event-id": lastEventId } })
        assertProblem(reply, 400, "InvalidRequest", `Last-Event-ID: ${lastEventId}`)
      }
      // a well-formed cursor streams: from=2, and Last-Event-ID 1 (resumes at 2)
      for (const [url, headers] of [[`${served.url}/sessions/c/events?from=2`, {}], [`${served.url}/sessions/c/events`, { "last-event-id": "1" }]] as const) {
        const stream = yield* openEvents(url, headers)
        assert.strictEqual(stream.status, 200)
        const frames = yield* stream.until((frame) => frame.event === "durable")
        assert.strictEqual(frames.find((frame) => frame.event === "durable")?.id, "2")
        yield* stream.close
      }
    }))
})

// -------------------------------------------------------------------------------------------------
// SEC-06

describe("SEC-06 lists are bounded", () => {
  it.scoped("SEC-06 GET /sessions: no meta by default; include=meta carries it up to maxListMetaBytes, a larger one is left out with metaTruncated; the typed client and the gateway list alike; the page size stays 1..1000", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [], { http: { maxListMetaBytes: 1024 } })
      const small = { title: "small" }
      const large = { notes: "é".repeat(600) } // 1,200 bytes of UTF-8 in 600 characters
      yield* request(`${served.url}/sessions/a-small`, { method: "PUT", body: { options: route, meta: small } })
      yield* request(`${served.url}/sessions/b-large`, { method: "PUT", body: { options: route, meta: large } })
      yield* request(`${served.url}/sessions/c-none`, { method: "PUT", body: { options: route } })
      yield* served.host.passivate("a-small") // listed from the store as well as live

      const plain = (yield* request(`${served.url}/sessions`)).body as { readonly sessions: ReadonlyArray<Record<string, unknown>> }
      assert.deepStrictEqual(plain.sessions.map((entry) => entry["id"]), ["a-small", "b-large", "c-none"])
      for (const entry of plain.sessions) {
        assert.notProperty(entry, "meta")
        assert.notProperty(entry, "metaTruncated")
        assert.strictEqual(entry["_tag"], "SessionInfo")
      }
      const withMeta = (yield* request(`${served.url}/sessions?include=meta`)).body as {
        readonly sessions: ReadonlyArray<Record<string, unknown>>
      }
      assert.deepStrictEqual(withMeta.sessions.map((entry) => [entry["id"], entry["meta"], entry["metaTruncated"]]), [
        ["a-small", small, undefined],
        ["b-large", undefined, true],
        ["c-none", {}, undefined]
      ])
      // the whole meta is one GET away
      assert.deepStrictEqual(((yield* request(`${served.url}/sessions/b-large`)).body as { readonly meta: unknown }).meta, large)

      // the typed client: meta optional, include=meta an option
      const client = yield* HttpApi.client({ baseUrl: served.url })
      const typed = yield* client.sessions.list({ urlParams: {} })
      assert.isTrue(typed.sessions.every((entry) => entry._tag === "SessionInfo" && entry.meta === undefined))
      const typedMeta = yield* client.sessions.list({ urlParams: { include: "meta" } })
      const entries = typedMeta.sessions.filter((entry): entry is SessionGateway.SessionListEntry => entry._tag === "SessionInfo")
      assert.deepStrictEqual(entries.map((entry) => [entry.meta, entry.metaTruncated]), [
        [small, undefined],
        [undefined, true],
        [{}, undefined]
      ])

      // the gateway itself: the same rule (the default limit is 8 KiB)
      const fromGateway = yield* served.gateway.list()
      assert.isTrue(fromGateway.sessions.every((entry) => !("meta" in entry)))
      const bounded = yield* served.gateway.list({ includeMeta: true, maxMetaBytes: 20 })
      assert.deepStrictEqual(bounded.sessions.map((entry): ReadonlyArray<unknown> => entry._tag === "SessionInfo" ? [entry.meta, entry.metaTruncated] : []), [
        [small, undefined],
        [undefined, true],
        [{}, undefined]
      ])

      // the page size stays capped
      assertProblem(yield* request(`${served.url}/sessions?limit=1001`), 400, "InvalidRequest")
      assert.strictEqual((yield* request(`${served.url}/sessions?limit=1000`)).status, 200)
    }).pipe(Effect.provide(FetchHttpClient.layer)))

  it.scoped("SEC-06 a gateway of the user's own that returns every meta is held to the same bound by the server", () =>
    Effect.gen(function*() {
      const info = (id: string, meta: Record<string, string>): SessionGateway.SessionInfo => ({
        _tag: "SessionInfo",
        id: id as SessionId,
        status: "passive",
        pending: { nextTurn: 0, nextStep: 0 },
        openTurn: false,
        eventCount: 0,
        usage: {},
        createdAt: 0,
        meta
      })
      const greedy: SessionGateway.SessionGateway["Type"] = {
        ...failingGateway,
        list: () => Effect.succeed({ sessions: [info("huge", { blob: "z".repeat(900_000) }), info("tiny", { a: "b" })] })
      }
      const served = yield* serveGateway(greedy)
      const plain = yield* Effect.promise(() => fetch(`${served.url}/sessions`).then((response) => response.text()))
      assert.isBelow(plain.length, 1000)
      assert.notInclude(plain, "\"meta\"")
      const withMeta = (yield* request(`${served.url}/sessions?include=meta`)).body as SessionGateway.SessionPage
      assert.deepStrictEqual(withMeta.sessions.map((entry): ReadonlyArray<unknown> => entry._tag === "SessionInfo" ? [entry.id, entry.meta, entry.metaTruncated] : []), [
        ["huge", undefined, true],
        ["tiny", { a: "b" }, undefined]
      ])
    }))
})
