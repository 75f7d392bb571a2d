/**
 * The HTTP API (SPEC §17, HTTP-01..03) over real HTTP on 127.0.0.1: a server on a port the system
 * chose, `fetch` as the client and the test's own SSE parser. Every refused request is checked for
 * its status, its problem body and that nothing was appended to any stored session.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Fiber, Option, Redacted, Schema, Stream, TestClock } from "effect"
import * as http from "node:http"
import { feedOf as agentFeedOf } from "../src/internal/agent/loop/agent.js"
import type { Agent } from "../src/Agent.js"
import * as Model from "../src/Model.js"
import * as SessionGateway from "../src/SessionGateway.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import type { SessionId } from "../src/Message.js"
import type { Store } from "./fixtures/host.js"
import type { Frame, Served } from "./fixtures/httpServer.js"
import { fileStore, fileStoreAt, openEvents, request, serve } from "./fixtures/httpServer.js"

const files = { make: fileStore }
const route = { provider: "scripted", model: "test" }

/** Every stored session and its number of events: what "nothing was appended" is checked against. */
const storedCounts = (store: Store) =>
  Effect.gen(function*() {
    const persistence = Context.get(store.context, SessionPersistence)
    const entries = yield* Stream.runCollect(persistence.list)
    const counts: Record<string, number> = {}
    for (const entry of entries) if (entry._tag === "SessionSummary") counts[entry.id] = entry.eventCount
    return counts
  })

const put = (served: Served, id: string, body: unknown = { options: route }) =>
  request(`${served.url}/sessions/${id}`, { method: "PUT", body })

const post = (served: Served, path: string, body: unknown, headers?: Record<string, string>) =>
  request(`${served.url}${path}`, { method: "POST", body, ...(headers === undefined ? {} : { headers }) })

const whenIdle = (served: Served, id: string) => served.host.use(id, (agent) => agent.whenIdle)

/**
 * POSTs `pieces` with `node:http`: with a Content-Length when `declared`, else chunked (what
 * `fetch` never sends for a string body).
 */
const rawPost = (port: string, path: string, pieces: ReadonlyArray<Buffer>, declared: boolean) =>
  Effect.promise(() =>
    new Promise<{ readonly status: number; readonly body: unknown }>((resolve, reject) => {
      const length = pieces.reduce((sum, piece) => sum + piece.length, 0)
      const outgoing = http.request({
        host: "127.0.0.1",
        port: Number(port),
        path,
        method: "POST",
        headers: { "content-type": "application/json", ...(declared ? { "content-length": String(length) } : {}) }
      }, (response) => {
        let text = ""
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => (text += chunk))
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, body: text === "" ? undefined : JSON.parse(text) })
        )
      })
      outgoing.on("error", reject)
      for (const piece of pieces) outgoing.write(piece)
      outgoing.end()
    })
  )

/** Asserts a problem body (HTTP-02): status, `type`, `title`, `detail`. */
const assertProblem = (reply: { readonly status: number; readonly body: unknown }, status: number, tag: string) => {
  assert.strictEqual(reply.status, status, JSON.stringify(reply.body))
  const body = reply.body as Record<string, unknown>
  assert.strictEqual(body["type"], `effect-agent/${tag}`)
  assert.strictEqual(body["title"], tag)
  assert.strictEqual(body["status"], status)
  assert.isString(body["detail"])
  assert.isAbove((body["detail"] as string).length, 10)
}

const decodeDurable = Schema.decodeUnknownSync(Schema.parseJson(SessionGateway.DurableEvent))
const decodeLive = Schema.decodeUnknownSync(Schema.parseJson(SessionGateway.LiveEvent))

const durableFrames = (frames: ReadonlyArray<Frame>) => frames.filter((frame) => frame.event === "durable")

describe("HttpApi over files", () => {
  it.scoped("HTTP-01 PUT /sessions/:id creates (201) or answers 200 with the summary; GET, health, readiness, OpenAPI", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [])
      const created = yield* put(served, "alpha", { options: route, meta: { team: "a" } })
      assert.strictEqual(created.status, 201)
      const info = created.body as SessionGateway.SessionInfo
      assert.strictEqual(info.id, "alpha")
      assert.deepStrictEqual(info.meta, { team: "a" })
      assert.deepStrictEqual(info.pending, { nextTurn: 0, nextStep: 0 })
      const again = yield* put(served, "alpha", { meta: { team: "other" } })
      assert.strictEqual(again.status, 200)
      // left as it was
      assert.deepStrictEqual((again.body as SessionGateway.SessionInfo).meta, { team: "a" })
      const read = yield* request(`${served.url}/sessions/alpha`)
      assert.strictEqual(read.status, 200)
      assert.strictEqual((read.body as SessionGateway.SessionInfo).id, "alpha")
      // an id of 128 characters (the longest ID-01 allows) routes
      const long = "L".repeat(128)
      assert.strictEqual((yield* put(served, long)).status, 201)
      assert.strictEqual((yield* request(`${served.url}/sessions/${long}`)).status, 200)
      assert.deepStrictEqual((yield* request(`${served.url}/healthz`)).body, { status: "ok" })
      assert.deepStrictEqual((yield* request(`${served.url}/readyz`)).body, { status: "ready" })
      const openapi = yield* request(`${served.url}/openapi.json`)
      const paths = Object.keys((openapi.body as { readonly paths: Record<string, unknown> }).paths).sort()
      assert.deepStrictEqual(paths, [
        "/healthz",
        "/readyz",
        "/sessions",
        "/sessions/{id}",
        "/sessions/{id}/cancel",
        "/sessions/{id}/events",
        "/sessions/{id}/fork",
        "/sessions/{id}/messages",
        "/sessions/{id}/pending",
        "/sessions/{id}/runs",
        "/sessions/{id}/turns/{turn}"
      ])
      assert.deepStrictEqual(yield* storedCounts(store), { alpha: 0, [long]: 0 })
    }))

  it.scoped("HTTP-01 POST messages is 202 {messageId}; HTTP-02 the same id and content again appends nothing, other content is 409", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [Model.text("one"), Model.text("two")])
      yield* put(served, "chat")
      const sent = yield* post(served, "/sessions/chat/messages", { text: "hello", id: "m1" })
      assert.strictEqual(sent.status, 202)
      assert.deepStrictEqual(sent.body, { messageId: "m1", duplicate: false })
      yield* whenIdle(served, "chat")
      const before = yield* storedCounts(store)
      // an idempotent re-send: the same id, content and mode
      const repeated = yield* post(served, "/sessions/chat/messages", { text: "hello", id: "m1", mode: "followup" })
      assert.strictEqual(repeated.status, 202)
      assert.deepStrictEqual(repeated.body, { messageId: "m1", duplicate: true })
      // the same id with other content, or in another mode
      assertProblem(yield* post(served, "/sessions/chat/messages", { text: "changed", id: "m1" }), 409, "MessageIdConflict")
      assertProblem(
        yield* post(served, "/sessions/chat/messages", { text: "hello", id: "m1", mode: "steer" }),
        409,
        "MessageIdConflict"
      )
      assert.deepStrictEqual(yield* storedCounts(store), before)
      // a message without an id gets a fresh one; content parts are accepted
      const fresh = yield* post(served, "/sessions/chat/messages", { content: [{ type: "text", text: "again" }] })
      assert.strictEqual(fresh.status, 202)
      assert.notStrictEqual((fresh.body as SessionGateway.SendReceipt).messageId, "m1")
      yield* whenIdle(served, "chat")
      const info = (yield* request(`${served.url}/sessions/chat`)).body as SessionGateway.SessionInfo
      assert.strictEqual(info.status, "idle")
      assert.isFalse(info.openTurn)
      assert.deepStrictEqual(info.usage, { inputTokens: 4, outputTokens: 6 })
    }))

  it.scoped("HTTP-02 every route: an invalid id is 400, an unknown session 404, a malformed body 400, an oversize body 413; nothing appended", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [], { http: { maxBodyBytes: 2048 } })
      yield* put(served, "known")
      const before = yield* storedCounts(store)
      const routes = (id: string) => [
        { method: "GET", path: `/sessions/${id}` },
        { method: "PUT", path: `/sessions/${id}`, body: {} },
        { method: "POST", path: `/sessions/${id}/messages`, body: { text: "x" } },
        { method: "POST", path: `/sessions/${id}/cancel`, body: {} },
        { method: "POST", path: `/sessions/${id}/fork`, body: { childId: "child" } },
        { method: "DELETE", path: `/sessions/${id}` },
        { method: "DELETE", path: `/sessions/${id}?remove=true` },
        { method: "GET", path: `/sessions/${id}/events` }
      ]
      const send = (route: { readonly method: string; readonly path: string; readonly body?: unknown }) =>
        request(`${served.url}${route.path}`, { method: route.method, ...("body" in route ? { body: route.body } : {}) })
      // invalid ids: a bad character, "..", a leading dot, 129 and 1,000 characters: 400, not 404
      for (const id of ["bad!id", "a..b", ".hidden", "x".repeat(129), "y".repeat(1000)]) {
        for (const route of routes(id)) assertProblem(yield* send(route), 400, "InvalidSessionId")
      }
      // unknown session (PUT creates, so it is not among them)
      for (const route of routes("nobody").filter((route) => route.method !== "PUT")) {
        assertProblem(yield* send(route), 404, "SessionNotFound")
      }
      // malformed bodies on every route with one
      const bodies = ["{not json", "[1,2", "\"unterminated"]
      for (const path of ["/sessions/known", "/sessions/known/messages", "/sessions/known/cancel", "/sessions/known/fork"]) {
        const method = path === "/sessions/known" ? "PUT" : "POST"
        for (const body of bodies) assertProblem(yield* request(`${served.url}${path}`, { method, body }), 400, "InvalidRequest")
        // well-formed JSON that does not match the route's schema
        assertProblem(yield* request(`${served.url}${path}`, { method, body: "[]" }), 400, "InvalidRequest")
        // over maxBodyBytes
        const oversize = JSON.stringify({ text: "z".repeat(4096) })
        assertProblem(yield* request(`${served.url}${path}`, { method, body: oversize }), 413, "PayloadTooLarge")
      }
      // message bodies that decode as JSON but are not a message
      for (
        const body of [
          {},
          { text: "a", content: [{ type: "text", text: "b" }] },
          { text: "a", mode: "shout" },
          { text: "a", id: "" },
          { text: 42 }
        ]
      ) {
        assertProblem(yield* post(served, "/sessions/known/messages", body), 400, "InvalidRequest")
      }
      // bad query parameters and cursors
      assertProblem(yield* request(`${served.url}/sessions?limit=0`), 400, "InvalidRequest")
      assertProblem(yield* request(`${served.url}/sessions/known/events?from=5`), 400, "InvalidEventCursor")
      assertProblem(
        yield* request(`${served.url}/sessions/known/events`, { headers: { "last-event-id": "soon" } }),
        400,
        "InvalidRequest"
      )
      // a fork onto an existing child
      assertProblem(yield* post(served, "/sessions/known/fork", { childId: "known" }), 409, "AgentAlreadyExists")
      assert.deepStrictEqual(yield* storedCounts(store), before)
    }))

  it.scoped("HTTP-02 a body with Content-Length and a chunked one are read alike: a message, an oversize body 413, bytes that are not UTF-8 400; nothing appended for the refused", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [Model.text("one"), Model.text("two")], { http: { maxBodyBytes: 2048 } })
      yield* put(served, "bodies")
      const { port } = new URL(served.url)
      const path = "/sessions/bodies/messages"
      // the same message, with its length declared and in chunks without one
      assert.strictEqual((yield* rawPost(port, path, [Buffer.from(JSON.stringify({ text: "a", id: "m1" }))], true)).status, 202)
      yield* whenIdle(served, "bodies")
      const pieces = [Buffer.from("{\"text\":"), Buffer.from("\"b\",\"id\":\"m2\"}")]
      assert.strictEqual((yield* rawPost(port, path, pieces, false)).status, 202)
      yield* whenIdle(served, "bodies")
      const before = yield* storedCounts(store)
      const oversize = Buffer.from(JSON.stringify({ text: "z".repeat(4096) }))
      assertProblem(yield* rawPost(port, path, [oversize], true), 413, "PayloadTooLarge")
      assertProblem(yield* rawPost(port, path, [oversize.subarray(0, 3000), oversize.subarray(3000)], false), 413, "PayloadTooLarge")
      // a lone continuation byte inside the JSON text
      const latin1 = Buffer.concat([Buffer.from("{\"text\":\""), Buffer.from([0xe9]), Buffer.from("\"}")])
      assertProblem(yield* rawPost(port, path, [latin1], true), 400, "InvalidRequest")
      assertProblem(yield* rawPost(port, path, [latin1.subarray(0, 5), latin1.subarray(5)], false), 400, "InvalidRequest")
      assert.deepStrictEqual(yield* storedCounts(store), before)
    }))

  it.scoped("HTTP-02 a session held by another process is 423 SessionLocked; reads still answer; nothing appended", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [])
      yield* put(served, "held")
      yield* post(served, "/sessions/held/messages", { text: "queued", id: "q1", mode: "inject" })
      // passivated: the inbox is kept, the lock released (LIFE-06)
      assert.strictEqual((yield* request(`${served.url}/sessions/held`, { method: "DELETE" })).status, 204)
      // another writer of the same directory (its own instance, as another process would be) holds it
      const other = yield* fileStoreAt(store.directory, "other-process")
      yield* Context.get(other.context, SessionPersistence).openWrite("held" as SessionId)
      const before = yield* storedCounts(store)
      assertProblem(yield* post(served, "/sessions/held/messages", { text: "blocked" }), 423, "SessionLocked")
      assertProblem(yield* post(served, "/sessions/held/cancel", {}), 423, "SessionLocked")
      assertProblem(yield* post(served, "/sessions/held/fork", { childId: "copy" }), 423, "SessionLocked")
      assertProblem(yield* request(`${served.url}/sessions/held?remove=true`, { method: "DELETE" }), 423, "SessionLocked")
      // reads do not lock
      const info = yield* request(`${served.url}/sessions/held`)
      assert.strictEqual(info.status, 200)
      assert.deepStrictEqual((info.body as SessionGateway.SessionInfo).pending, { nextTurn: 0, nextStep: 1 })
      assert.strictEqual((yield* put(served, "held")).status, 200)
      assert.deepStrictEqual(yield* storedCounts(store), before)
    }))

  it.live("HTTP-02 HostAtCapacity is 503 with Retry-After; nothing appended", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [Model.hang("thinking")], {
        host: { maxLive: 1, activationTimeout: "20 millis", drainTimeout: 0 },
        http: { retryAfter: "7 seconds" }
      })
      yield* put(served, "busy")
      yield* post(served, "/sessions/busy/messages", { text: "think" })
      yield* served.model.awaitRequest(1)
      // the one live agent is running: another session cannot be activated
      const createdElsewhere = yield* put(served, "other")
      assertProblem(createdElsewhere, 503, "HostAtCapacity")
      assert.strictEqual(createdElsewhere.headers.get("retry-after"), "7")
      assert.deepStrictEqual(Object.keys(yield* storedCounts(store)), ["busy"])
    }).pipe(Effect.scoped))

  it.scoped("HTTP-03 bearer authentication and authorization: 401 and 403 change nothing; healthz needs no token; CORS is off", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const tokens: Record<string, string> = { "alice-token": "alice", "bob-token": "bob" }
      const served = yield* serve(store, [Model.text("hi")], {
        http: {
          authenticate: (token) => Effect.succeed(Option.fromNullable(tokens[Redacted.value(token)]).pipe(Option.map((id) => ({ id })))),
          // alice may do anything; bob may only read sessions whose id starts with "shared"
          authorize: (principal, sessionId, action) =>
            Effect.succeed(
              principal.id === "alice" ||
                (action === "list" || (action === "read" && sessionId?.startsWith("shared") === true))
            )
        }
      })
      const as = (token: string) => ({ authorization: `Bearer ${token}` })
      assert.strictEqual((yield* request(`${served.url}/healthz`)).status, 200)
      assert.strictEqual(
        (yield* request(`${served.url}/sessions/shared-1`, { method: "PUT", body: { options: route }, headers: as("alice-token") }))
          .status,
        201
      )
      assert.strictEqual(
        (yield* request(`${served.url}/sessions/private`, { method: "PUT", body: { options: route }, headers: as("alice-token") }))
          .status,
        201
      )
      const before = yield* storedCounts(store)
      const missing = yield* post(served, "/sessions/shared-1/messages", { text: "x" })
      assertProblem(missing, 401, "Unauthorized")
      assert.strictEqual(missing.headers.get("www-authenticate"), "Bearer")
      assertProblem(yield* post(served, "/sessions/shared-1/messages", { text: "x" }, as("mallory")), 401, "Unauthorized")
      assertProblem(yield* post(served, "/sessions/shared-1/messages", { text: "x" }, as("bob-token")), 403, "Forbidden")
      assertProblem(
        yield* request(`${served.url}/sessions/shared-1`, { method: "DELETE", headers: as("bob-token") }),
        403,
        "Forbidden"
      )
      assertProblem(yield* request(`${served.url}/sessions/private`, { headers: as("bob-token") }), 403, "Forbidden")
      assertProblem(yield* request(`${served.url}/sessions/private/events`, { headers: as("bob-token") }), 403, "Forbidden")
      assert.deepStrictEqual(yield* storedCounts(store), before)
      // bob reads what he may, and lists only that
      assert.strictEqual((yield* request(`${served.url}/sessions/shared-1`, { headers: as("bob-token") })).status, 200)
      const listed = (yield* request(`${served.url}/sessions`, { headers: as("bob-token") })).body as SessionGateway.SessionPage
      assert.deepStrictEqual(listed.sessions.map((entry) => entry.id), ["shared-1"])
      assert.strictEqual(
        (yield* post(served, "/sessions/shared-1/messages", { text: "from alice" }, as("alice-token"))).status,
        202
      )
      // CORS is off by default: no allow-origin header, a preflight is not answered with one
      const cross = yield* request(`${served.url}/healthz`, { headers: { origin: "https://elsewhere.example" } })
      assert.isNull(cross.headers.get("access-control-allow-origin"))
      const preflight = yield* request(`${served.url}/sessions`, {
        method: "OPTIONS",
        headers: { origin: "https://elsewhere.example", "access-control-request-method": "GET" }
      })
      assert.isNull(preflight.headers.get("access-control-allow-origin"))
    }))

  it.scoped("HTTP-01 GET /sessions lists stored and live sessions in pages with status, pending and usage", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [Model.text("answer")])
      for (const id of ["s1", "s2", "s3", "s4", "s5"]) yield* put(served, id)
      yield* post(served, "/sessions/s2/messages", { text: "question" })
      yield* whenIdle(served, "s2")
      yield* post(served, "/sessions/s4/messages", { text: "later", mode: "inject" })
      // s5 is passivated: listed from the store
      yield* request(`${served.url}/sessions/s5`, { method: "DELETE" })
      const first = (yield* request(`${served.url}/sessions?limit=2`)).body as SessionGateway.SessionPage
      assert.deepStrictEqual(first.sessions.map((entry) => entry.id), ["s1", "s2"])
      assert.strictEqual(first.next, "s2")
      const second = (yield* request(`${served.url}/sessions?limit=2&after=s2`)).body as SessionGateway.SessionPage
      assert.deepStrictEqual(second.sessions.map((entry) => entry.id), ["s3", "s4"])
      const last = (yield* request(`${served.url}/sessions?limit=2&after=s4`)).body as SessionGateway.SessionPage
      assert.deepStrictEqual(last.sessions.map((entry) => entry.id), ["s5"])
      assert.isUndefined(last.next)
      const s2 = first.sessions[1] as SessionGateway.SessionInfo
      assert.deepStrictEqual([s2.status, s2.usage], ["idle", { inputTokens: 1, outputTokens: 6 }])
      const s4 = second.sessions[1] as SessionGateway.SessionInfo
      assert.deepStrictEqual(s4.pending, { nextTurn: 0, nextStep: 1 })
      const s5 = last.sessions[0] as SessionGateway.SessionInfo
      assert.strictEqual(s5.status, "passive")
    }))

  it.scoped("HTTP-01 cancel, fork and DELETE (dispose; remove=true deletes the log)", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [Model.text("first"), Model.hang("long")])
      yield* put(served, "src")
      yield* post(served, "/sessions/src/messages", { text: "one" })
      yield* whenIdle(served, "src")
      // fork at the current end: the child holds the source's log as its seed
      const forked = yield* post(served, "/sessions/src/fork", { childId: "copy" })
      assert.strictEqual(forked.status, 201)
      const child = forked.body as SessionGateway.SessionInfo
      assert.strictEqual(child.parentSession, "src")
      assert.strictEqual(child.eventCount, (yield* storedCounts(store))["src"])
      // a running turn and a queued follow-up, both cancelled
      yield* post(served, "/sessions/src/messages", { text: "two" })
      yield* served.model.awaitRequest(2)
      yield* post(served, "/sessions/src/messages", { text: "three" })
      const canceled = yield* post(served, "/sessions/src/cancel", {})
      assert.strictEqual(canceled.status, 204)
      yield* whenIdle(served, "src")
      const info = (yield* request(`${served.url}/sessions/src`)).body as SessionGateway.SessionInfo
      assert.deepStrictEqual([info.status, info.pending, info.openTurn], ["idle", { nextTurn: 0, nextStep: 0 }, false])
      // dispose keeps the log; remove deletes it
      assert.strictEqual((yield* request(`${served.url}/sessions/src`, { method: "DELETE" })).status, 204)
      assert.isTrue(Option.isNone(yield* served.registry.get("src")))
      assert.strictEqual((yield* request(`${served.url}/sessions/src`)).status, 200)
      assert.strictEqual((yield* request(`${served.url}/sessions/copy?remove=true`, { method: "DELETE" })).status, 204)
      assertProblem(yield* request(`${served.url}/sessions/copy`), 404, "SessionNotFound")
      assert.deepStrictEqual(Object.keys(yield* storedCounts(store)), ["src"])
    }))
})

describe("HttpApi events (SSE)", () => {
  it.scoped("HTTP-01 durable events carry id = seq, live deltas none; Last-Event-ID resumes without gap or duplicate; heartbeats", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [Model.text("streamed reply"), Model.text("second reply")], {
        http: { heartbeat: "10 seconds" }
      })
      yield* put(served, "live")
      const events = yield* openEvents(`${served.url}/sessions/live/events`)
      assert.strictEqual(events.status, 200)
      assert.strictEqual(events.contentType, "text/event-stream")
      assert.deepStrictEqual(yield* events.next, { retry: "1000" })
      yield* post(served, "/sessions/live/messages", { text: "go", id: "g1" })
      const frames = yield* events.until((frame) => frame.data?.includes("\"turn/end\"") === true)
      const durable = durableFrames(frames)
      // every durable frame decodes; its id is its seq; seqs are 0..n without gap
      durable.forEach((frame, i) => {
        const event = decodeDurable(frame.data!)
        assert.strictEqual(event.seq, i)
        assert.strictEqual(frame.id, String(i))
      })
      const live = frames.filter((frame) => frame.event === "live")
      assert.isAbove(live.length, 0)
      for (const frame of live) assert.isUndefined(frame.id)
      const deltas = live.map((frame) => decodeLive(frame.data!)).flatMap((event) =>
        event._tag === "ModelDelta" ? [event.text] : []
      )
      assert.strictEqual(deltas.join(""), "streamed reply")
      // heartbeats on the schedule
      yield* TestClock.adjust("10 seconds")
      const beat = yield* events.until((frame) => frame.comment !== undefined)
      assert.strictEqual(beat[beat.length - 1]!.comment, "heartbeat")
      yield* events.close
      // reconnect after the third event: the rest, then the next turn, contiguous
      const resumed = yield* openEvents(`${served.url}/sessions/live/events`, { "last-event-id": "2" })
      yield* post(served, "/sessions/live/messages", { text: "more" })
      const after = durableFrames(
        yield* resumed.until((frame) => frame.data?.includes("\"turn/end\"") === true && frame.id !== durable.at(-1)!.id)
      )
      const stored = yield* Context.get(store.context, SessionPersistence).read("live" as SessionId)
      assert.deepStrictEqual(after.map((frame) => Number(frame.id)), stored.events.slice(3).map((event) => event.seq))
      assert.deepStrictEqual(after.map((frame) => decodeDurable(frame.data!)), stored.events.slice(3))
      // `from` starts a first connection anywhere in the log
      const late = yield* openEvents(`${served.url}/sessions/live/events?from=${stored.events.length - 1}`)
      const tail = yield* late.until((frame) => frame.event === "durable")
      assert.strictEqual(tail[tail.length - 1]!.id, String(stored.events.length - 1))
    }))

  it.scoped("HTTP-01 an SSE client that disconnects leaks nothing: after 25 connect/disconnect cycles no subscription is left and the agent passivates", () =>
    Effect.gen(function*() {
      const store = yield* files.make
      const served = yield* serve(store, [Model.text("x")], { host: { idleTimeout: "1 minute" } })
      yield* put(served, "watched")
      const agent = yield* served.host.get("watched")
      const watchers = watchersOf(agent)
      for (let i = 0; i < 25; i++) {
        const events = yield* openEvents(`${served.url}/sessions/watched/events`)
        yield* events.next
        // subscribed: the live events of the agent are watched by this connection
        yield* untilIo(() => watchers() === 1, "the connection subscribed")
        yield* events.close
        yield* untilIo(() => watchers() === 0, `connection ${i} released its subscription`)
      }
      const disposed = yield* served.registry.subscribe.pipe(
        Effect.flatMap((stream) =>
          Effect.fork(Stream.runHead(Stream.filter(stream, (event) => event._tag === "AgentDisposed")))
        )
      )
      yield* TestClock.adjust("1 minute")
      const event = yield* Fiber.join(disposed)
      assert.isTrue(Option.isSome(event) && event.value.agent === "watched")
      assert.deepStrictEqual(yield* served.host.live, [])
    }))
})

/** The number of live subscriptions of an agent's events (the host's HOST-02 count). */
const watchersOf = (agent: Agent): (() => number) => {
  const feed = feedOf(agent)
  return () => feed.subscribers()
}

const feedOf = (agent: Agent) => {
  const feed = agentFeedOf(agent)
  if (feed === undefined) throw new Error("the agent has no attached feed")
  return feed
}

/**
 * Waits for what the server does when a connection closes (it learns it from the socket): yields
 * to the event loop, without a timer, until `done` holds; dies after `turns` turns of the loop.
 */
const untilIo = (done: () => boolean, what: string, turns = 5000): Effect.Effect<void> =>
  Effect.suspend(() =>
    done()
      ? Effect.void
      : turns <= 0
      ? Effect.dieMessage(`waited in vain: ${what}`)
      : Effect.zipRight(Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve))), untilIo(done, what, turns - 1))
  )

