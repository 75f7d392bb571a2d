/**
 * APP-05 over real HTTP on 127.0.0.1: `POST /sessions/:id/runs` and `GET /sessions/:id/turns/:turn`
 * against the host gateway, with `fetch` as the client.
 */
import { FetchHttpClient } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Schema, TestClock } from "effect"
import * as AgentError from "../src/AgentError.js"
import * as HttpApi from "../src/HttpApi.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Tool from "../src/Tool.js"
import * as TurnResult from "../src/TurnResult.js"
import type { Served } from "./fixtures/httpServer.js"
import { fileStore, request, serve } from "./fixtures/httpServer.js"

const route = { provider: "scripted", model: "test" }

const post = (served: Served, path: string, body: unknown) =>
  request(`${served.url}${path}`, { method: "POST", body })

const decodeResult = Schema.decodeUnknownSync(TurnResult.TurnResult)

/** The JSON Schema of a spam verdict, as an HTTP client writes it. */
const verdictSchema = {
  type: "object",
  properties: { spam: { type: "boolean" }, reason: { type: "string" } },
  required: ["spam", "reason"],
  additionalProperties: false
}

/** Waits until the server's wait is registered on the TestClock, then lets it pass. */
const passWait = (seconds: number) =>
  Effect.zipRight(
    TestClock.sleeps().pipe(Effect.repeat({ until: Chunk.isNonEmpty })),
    TestClock.adjust(`${seconds} seconds`)
  )

describe("APP-05 runs over HTTP", () => {
  it.scoped("APP-05 POST /sessions/:id/runs answers 200 with the TurnResult (the same id and content again attaches to it); a failed turn is 200 with its reason", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [Model.text("hello over http"), Model.fail("AUTH")])
      yield* request(`${served.url}/sessions/web`, { method: "PUT", body: { options: route } })
      const ran = yield* post(served, "/sessions/web/runs", { message: "hi", id: "h1" })
      assert.strictEqual(ran.status, 200, JSON.stringify(ran.body))
      const result = decodeResult(ran.body)
      assert.strictEqual(result.text, "hello over http")
      assert.deepStrictEqual(result.reason, { kind: "completed" })
      // what the host derives from the log is what the wire carried
      const read = yield* request(`${served.url}/sessions/web/turns/${result.turn}`)
      assert.strictEqual(read.status, 200)
      assert.deepStrictEqual(decodeResult(read.body), result)
      // the ruling on /runs: the same id and content again attaches to that message's (ended) turn, appending nothing
      const before = (yield* served.gateway.summary("web")).eventCount
      const again = yield* post(served, "/sessions/web/runs", { message: "hi", id: "h1" })
      assert.strictEqual(again.status, 200, JSON.stringify(again.body))
      assert.deepStrictEqual(decodeResult(again.body), result)
      assert.strictEqual((yield* served.gateway.summary("web")).eventCount, before)
      const failed = yield* post(served, "/sessions/web/runs", { message: [{ type: "text", text: "again" }] })
      assert.strictEqual(failed.status, 200)
      const failure = decodeResult(failed.body)
      assert.strictEqual(failure.reason.kind, "error")
      assert.strictEqual(failure.turn, 2)
    }))

  it.scoped("APP-05 a run past its wait is 202 {turn, messageId} with Location; GET turns is 409 while it runs, 200 once ended, 404 for no such turn; a known id attaches, other content is 409", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const gateTool = Tool.make({
        name: "gate",
        description: "Waits",
        parameters: Schema.Struct({}),
        run: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.as(Deferred.await(gate), Tool.text("open")))
      })
      const store = yield* fileStore
      const served = yield* serve(store, [Model.toolCall("g", "gate", "{}"), Model.text("done at last")], {
        host: { setup: (agent) => agent.tools.register(gateTool) }
      })
      yield* request(`${served.url}/sessions/slow`, { method: "PUT", body: { options: route } })
      const pending = yield* Effect.fork(post(served, "/sessions/slow/runs?wait=1", { message: "take your time", id: "r1" }))
      yield* Deferred.await(started)
      yield* passWait(1)
      const accepted = yield* Fiber.join(pending)
      assert.strictEqual(accepted.status, 202, JSON.stringify(accepted.body))
      assert.deepStrictEqual(accepted.body, { _tag: "RunAccepted", messageId: "r1", turn: 1 })
      assert.strictEqual(accepted.headers.get("location"), "/sessions/slow/turns/1")
      const running = yield* request(`${served.url}/sessions/slow/turns/1`)
      assert.strictEqual(running.status, 409)
      assert.strictEqual((running.body as { readonly title: string }).title, "TurnRunning")
      // the same id and text again attaches to that turn; other content under the id is a conflict
      const attaching = yield* Effect.fork(post(served, "/sessions/slow/runs?wait=2", { message: "take your time", id: "r1" }))
      yield* passWait(2)
      assert.deepStrictEqual((yield* Fiber.join(attaching)).body, { _tag: "RunAccepted", messageId: "r1", turn: 1 })
      const conflict = yield* post(served, "/sessions/slow/runs", { message: "something else", id: "r1" })
      assert.strictEqual(conflict.status, 409)
      assert.strictEqual((conflict.body as { readonly title: string }).title, "MessageIdConflict")
      yield* Deferred.succeed(gate, undefined)
      yield* served.host.use("slow", (agent) => agent.whenIdle)
      const ended = yield* request(`${served.url}/sessions/slow/turns/1`)
      assert.strictEqual(ended.status, 200)
      assert.strictEqual(decodeResult(ended.body).text, "done at last")
      const missing = yield* request(`${served.url}/sessions/slow/turns/9`)
      assert.strictEqual(missing.status, 404)
      assert.strictEqual((missing.body as { readonly title: string }).title, "TurnNotFound")
      const tooLong = yield* post(served, "/sessions/slow/runs?wait=601", { message: "x" })
      assert.strictEqual(tooLong.status, 400)
      const openapi = yield* request(`${served.url}/openapi.json`)
      const paths = (openapi.body as { readonly paths: Record<string, Record<string, unknown>> }).paths
      assert.containsAllKeys(paths["/sessions/{id}/runs"]!, ["post"])
      assert.containsAllKeys(paths["/sessions/{id}/turns/{turn}"]!, ["get"])
    }))

  it.scoped("APP-05 APP-04 OUT-01 a run's settings and output (a JSON Schema, as OpenAI's json_schema) go in its turn's request, are stored with its message, and the decoded JSON is the result's output", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [Model.text("{\"spam\": true, \"reason\": \"an offer\"}"), Model.text("plain")])
      yield* request(`${served.url}/sessions/typed`, { method: "PUT", body: { options: route } })
      const ran = yield* post(served, "/sessions/typed/runs", {
        message: "is it spam?",
        id: "t1",
        settings: { temperature: 0.3, stop: ["END"], maxOutputTokens: 40 },
        output: { name: "verdict", schema: verdictSchema }
      })
      assert.strictEqual(ran.status, 200, JSON.stringify(ran.body))
      const result = decodeResult(ran.body)
      assert.deepStrictEqual(result.output, { spam: true, reason: "an offer" })
      // strict by default for a schema that meets the strict rules, as outputFormat decides it
      const verdict = { name: "verdict", schema: verdictSchema, strict: true }
      // the next turn (no settings, no output) is back to the agent's own
      const plain = yield* post(served, "/sessions/typed/runs", { message: "and now?" })
      assert.strictEqual(plain.status, 200, JSON.stringify(plain.body))
      assert.isUndefined(decodeResult(plain.body).output)
      const requests = yield* served.model.requests
      assert.deepStrictEqual(requests.map((r) => [r.settings, r.maxTokens, r.output]), [
        [{ temperature: 0.3, stop: ["END"] }, 40, verdict],
        [undefined, undefined, undefined]
      ])
      // durable: stored with the message (what a resume after a crash reads), and in the turn's request/config
      const events = yield* served.host.use("typed", (agent) => agent.session.events)
      const inserted = events.filter((e) => e.type === "agent/inbox/spliced")
        .flatMap((e) => (e.data as { readonly inserted: ReadonlyArray<{ readonly id: string; readonly turnOptions?: unknown }> }).inserted)
      assert.deepStrictEqual(inserted.find((m) => m.id === "t1")?.turnOptions, {
        settings: { temperature: 0.3, stop: ["END"], maxOutputTokens: 40 },
        output: verdict
      })
      const configs = events.filter((e) => e.type === "request/config").map((e) => e.data as { readonly turnOnly?: boolean })
      assert.deepStrictEqual(configs.map((c) => c.turnOnly), [true, undefined])
    }))

  it.scoped("APP-05 APP-04 OUT-01 bad settings or output on /runs are a 400 problem naming what is wrong; nothing is sent", () =>
    Effect.gen(function*() {
      const store = yield* fileStore
      const served = yield* serve(store, [])
      yield* request(`${served.url}/sessions/bad`, { method: "PUT", body: { options: route } })
      const before = (yield* served.gateway.summary("bad")).eventCount
      const cases: ReadonlyArray<readonly [unknown, string, RegExp]> = [
        [{ settings: { temperature: 5 } }, "InvalidRequest", /temperature/],
        [{ settings: { temprature: 0.5 } }, "InvalidRequest", /temprature/],
        [{ settings: { toolChoice: "sometimes" } }, "InvalidRequest", /toolChoice/],
        [{ output: { name: "no spaces", schema: verdictSchema } }, "InvalidRequest", /name/],
        [{ output: { schema: [1, 2] } }, "InvalidRequest", /schema/],
        [{ output: { schema: verdictSchema, format: "json" } }, "InvalidRequest", /format/],
        [{ output: { schema: { type: "object", properties: { a: { type: "string" } } }, strict: true } }, "InvalidAgentOptions", /strict rules/]
      ]
      for (const [extra, title, detail] of cases) {
        const refused = yield* post(served, "/sessions/bad/runs", { message: "x", ...(extra as object) })
        const problem = refused.body as { readonly title: string; readonly detail: string }
        assert.strictEqual(refused.status, 400, JSON.stringify(extra))
        assert.strictEqual(problem.title, title, JSON.stringify(refused.body))
        assert.match(problem.detail, detail, JSON.stringify(refused.body))
      }
      assert.strictEqual((yield* served.gateway.summary("bad")).eventCount, before)
      assert.deepStrictEqual(yield* served.model.requests, [])
    }))

  it.scoped("APP-05 the typed client: a completed run is its TurnResult, a failed turn fails TurnFailed with the partial result (runs and turns/:turn), a run past its wait is RunAccepted", () =>
    Effect.gen(function*() {
      const holding = yield* Deferred.make<void>()
      const held = yield* Deferred.make<void>()
      const openTool = Tool.make({ name: "gate", description: "Opens", parameters: Schema.Struct({}), run: () => Effect.succeed(Tool.text("open")) })
      const holdTool = Tool.make({
        name: "hold",
        description: "Waits",
        parameters: Schema.Struct({}),
        run: () => Effect.zipRight(Deferred.succeed(holding, undefined), Effect.as(Deferred.await(held), Tool.text("let go")))
      })
      const store = yield* fileStore
      const served = yield* serve(store, [
        Model.text("fine"),
        Model.toolCall("g1", "gate", "{}"),
        Model.fail("AUTH"),
        Model.toolCall("h1", "hold", "{}"),
        Model.text("done")
      ], {
        host: {
          setup: (agent) => Effect.zipRight(agent.tools.register(openTool), agent.tools.register(holdTool))
        }
      })
      const client = yield* HttpApi.client({ baseUrl: served.url })
      yield* client.sessions.create({ path: { id: "typed" }, payload: { options: route } })
      const completed = yield* client.sessions.run({ path: { id: "typed" }, urlParams: {}, payload: { message: "hi" } })
      assert.instanceOf(completed, TurnResult.TurnResult)
      assert.strictEqual((completed as TurnResult.TurnResult).text, "fine")
      // a turn whose model fails after a tool call: the HTTP call answers 200 with reason error; the client fails
      const failed = yield* Effect.flip(
        client.sessions.run({ path: { id: "typed" }, urlParams: {}, payload: { message: "use the gate", id: "f1" } })
      )
      assert.strictEqual(failed._tag, "TurnFailed")
      const turnFailed = failed as AgentError.TurnFailed
      assert.instanceOf(turnFailed, AgentError.TurnFailed)
      assert.strictEqual(turnFailed.id, "typed")
      assert.strictEqual(turnFailed.turn, 2)
      assert.strictEqual(turnFailed.reason.kind, "error")
      assert.deepStrictEqual(turnFailed.partial.toolCalls.map((c) => [c.callId, c.result]), [["g1", "open"]])
      // the same through turns/:turn, read later
      const read = yield* Effect.flip(client.sessions.turn({ path: { id: "typed", turn: 2 }, urlParams: {} }))
      assert.strictEqual(read._tag, "TurnFailed")
      assert.deepStrictEqual((read as AgentError.TurnFailed).partial, turnFailed.partial)
      const first = yield* client.sessions.turn({ path: { id: "typed", turn: 1 }, urlParams: {} })
      assert.deepStrictEqual(first, completed)
      // other failures keep their own typed errors
      const missing = yield* Effect.flip(client.sessions.turn({ path: { id: "typed", turn: 9 }, urlParams: {} }))
      assert.strictEqual(missing._tag, "TurnNotFound")
      // past its wait: RunAccepted, and the turn read once it ended
      const pending = yield* Effect.fork(
        client.sessions.run({ path: { id: "typed" }, urlParams: { wait: 1 }, payload: { message: "hold on", id: "w1" } })
      )
      yield* Deferred.await(holding)
      yield* passWait(1)
      const accepted = yield* Fiber.join(pending)
      assert.deepStrictEqual(accepted, { _tag: "RunAccepted", messageId: Message.MessageId.make("w1"), turn: 3 })
      yield* Deferred.succeed(held, undefined)
      const later = yield* client.sessions.turn({ path: { id: "typed", turn: 3 }, urlParams: { wait: 5 } })
      assert.strictEqual(later.text, "done")
    }).pipe(Effect.provide(FetchHttpClient.layer)))
})
