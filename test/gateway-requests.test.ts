/**
 * ARCH-04: requests are decoded at the edge, by one module both gateways share
 * (`internal/gateway/request.ts`): the host gateway (`SessionGateway.layerHost`) and the cluster
 * client (`Cluster.layerClient`) refuse the same bad input with the same error and the same words,
 * called directly and through the HTTP API. The cluster runs on the real Postgres of
 * `EFFECT_AGENT_PG_URL` (skipped without it, as `Cluster.test.ts`).
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Either, Stream } from "effect"
import * as Message from "../src/Message.js"
import { SessionGateway } from "../src/SessionGateway.js"
import * as requests from "../src/internal/gateway/request.js"
import * as inProcess from "./fixtures/clusterInProcess.js"
import { rawExchange, serveGateway } from "./fixtures/hostileHttp.js"
import { fileStore, gatewayOver } from "./fixtures/httpServer.js"

const url = process.env["EFFECT_AGENT_PG_URL"]

type Gateway = SessionGateway["Type"]

/** A failure as a caller tells it apart: its tag and its words. */
const failureOf = <A, E extends { readonly _tag: string; readonly message: string }>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.either(effect), (result) =>
    Either.isRight(result) ? { _tag: "succeeded", message: "" } : { _tag: result.left._tag, message: result.left.message })

const content = [{ type: "text" as const, text: "x" }]

/** Bad input, one call each, and the error it must fail with on every gateway. */
const badCalls: ReadonlyArray<readonly [string, string, (gateway: Gateway) => Effect.Effect<unknown, { readonly _tag: string; readonly message: string }>]> = [
  ["summary of a traversal", "InvalidSessionId", (g) => g.summary("../etc")],
  ["summary of an id over 128 characters", "InvalidSessionId", (g) => g.summary("a".repeat(200))],
  ["create with a space in the id", "InvalidSessionId", (g) => g.create("a b", {})],
  ["send to an empty id", "InvalidSessionId", (g) => g.send("", { text: "x" })],
  ["send to a bad id with a bad body: the id first", "InvalidSessionId", (g) => g.send("..", { text: "x", content })],
  ["send with text and content", "InvalidRequest", (g) => g.send("arch04-never", { text: "x", content })],
  ["send with neither text nor content", "InvalidRequest", (g) => g.send("arch04-never", {})],
  ["send with an empty message id", "InvalidRequest", (g) => g.send("arch04-never", { text: "x", id: "" })],
  ["send with a message id over 256 characters", "InvalidRequest", (g) => g.send("arch04-never", { text: "x", id: "m".repeat(300) })],
  ["send with content of an unknown part", "InvalidRequest", (g) => g.send("arch04-never", { content: JSON.parse("[{\"type\":\"nope\"}]") })],
  ["send with a text part without text", "InvalidRequest", (g) => g.send("arch04-never", { content: JSON.parse("[{\"type\":\"text\"}]") })],
  ["create with agent options out of range", "InvalidAgentOptions", (g) => g.create("arch04-options", { options: { maxTokens: -1 } })],
  ["create with a meta that is not JSON", "InvalidEventData", (g) => g.create("arch04-meta", { meta: { n: Number.NaN } })],
  ["create with a bad id and bad options: the id first", "InvalidSessionId", (g) => g.create("", { options: { maxTokens: 0 } })],
  ["cancel of a bad id", "InvalidSessionId", (g) => g.cancel("-x", { keepInbox: true })],
  ["fork of a bad source", "InvalidSessionId", (g) => g.fork("a/b", { childId: "arch04-child" })],
  ["fork onto a bad child", "InvalidSessionId", (g) => g.fork("arch04-never", { childId: "../child" })],
  ["fork with both bad: the source first", "InvalidSessionId", (g) => g.fork("x y", { childId: "" })],
  ["dispose of a bad id", "InvalidSessionId", (g) => g.dispose("a..b")],
  ["remove of a bad id", "InvalidSessionId", (g) => g.remove("%")],
  ["events of a bad id", "InvalidSessionId", (g) => Stream.runDrain(g.eventsFrom("a\u0000b", 0))],
  ["summary of an unknown session", "SessionNotFound", (g) => g.summary("arch04-never")],
  ["run on a bad id", "InvalidSessionId", (g) => g.run!("..", { message: "x" })],
  ["run with an empty message id", "InvalidRequest", (g) => g.run!("arch04-never", { message: "x", id: "" })],
  ["run with content of an unknown part", "InvalidRequest", (g) => g.run!("arch04-never", { message: JSON.parse("[{\"type\":\"nope\"}]") })],
  ["run with a setting out of range", "InvalidAgentOptions", (g) => g.run!("arch04-never", { message: "x", settings: { temperature: 9 } })],
  ["run with a setting nobody knows", "InvalidAgentOptions", (g) => g.run!("arch04-never", { message: "x", settings: JSON.parse("{\"temprature\":1}") })],
  ["run with strict output whose schema is not strict", "InvalidAgentOptions", (g) =>
    g.run!("arch04-never", { message: "x", output: { schema: { type: "object", properties: {} }, strict: true } })],
  ["run with an output name providers refuse", "InvalidAgentOptions", (g) =>
    g.run!("arch04-never", { message: "x", output: { name: "a name", schema: { type: "object" } } })],
  ["turn of a bad id", "InvalidSessionId", (g) => g.turn!("a b", 1)]
]

/** Bad HTTP requests (SEC-05's matrix), each as the raw socket writes it. */
const badRequests: ReadonlyArray<{ readonly method: string; readonly path: string; readonly body?: unknown }> = [
  { method: "GET", path: `/sessions/${"a".repeat(200)}` },
  { method: "PUT", path: "/sessions/-bad", body: {} },
  { method: "GET", path: "/sessions/ok%ZZ" },
  { method: "POST", path: "/sessions/arch04-never/messages", body: { text: "x", content } },
  { method: "POST", path: "/sessions/arch04-never/messages", body: {} },
  { method: "POST", path: "/sessions/arch04-never/messages", body: { text: "x", id: "" } },
  { method: "POST", path: "/sessions/arch04-never/messages", body: { text: "x", id: "m".repeat(300) } },
  { method: "POST", path: "/sessions/..x/messages", body: { text: "x" } },
  { method: "POST", path: "/sessions/arch04-never/cancel", body: { keepInbox: "yes" } },
  { method: "POST", path: "/sessions/arch04-never/fork", body: { childId: "../child" } },
  { method: "POST", path: "/sessions/_x/fork", body: { childId: "arch04-child" } },
  { method: "DELETE", path: "/sessions/.x" },
  { method: "GET", path: "/sessions?limit=0" },
  { method: "GET", path: "/sessions?limit=5000" },
  { method: "GET", path: "/sessions/arch04-never/events?from=1e3" },
  { method: "GET", path: "/sessions/arch04-never" },
  { method: "GET", path: "/sessions/arch04-never/explode" },
  { method: "POST", path: "/sessions/..x/runs", body: { message: "x" } },
  { method: "POST", path: "/sessions/arch04-never/runs", body: { message: "x", id: "" } },
  { method: "POST", path: "/sessions/arch04-never/runs", body: { message: "x", settings: { temprature: 1 } } },
  { method: "POST", path: "/sessions/arch04-never/runs", body: { message: "x", output: { schema: 1 } } },
  {
    method: "POST",
    path: "/sessions/arch04-never/runs",
    body: { message: "x", output: { schema: { type: "object", properties: {} }, strict: true } }
  },
  { method: "POST", path: "/sessions/arch04-never/runs?wait=601", body: { message: "x" } },
  { method: "GET", path: "/sessions/_x/turns/1" },
  { method: "GET", path: "/sessions/arch04-never/turns/0" }
]

const exchange = (port: number, item: (typeof badRequests)[number]) => {
  const body = item.body === undefined ? undefined : Buffer.from(JSON.stringify(item.body))
  return Effect.map(
    rawExchange(port, [
      `${item.method} ${item.path} HTTP/1.1`,
      "host: 127.0.0.1",
      ...(body === undefined ? [] : ["content-type: application/json", `content-length: ${body.length}`])
    ], body),
    ({ body, status }) => ({ status, body })
  )
}

describe("ARCH-04 the request module", () => {
  it("ARCH-04 a send decodes its id first, then its message: 1-256 character ids, exactly one of text and content", () => {
    const bad = requests.sendOf("..", { text: "x", id: "" })
    assert.isTrue(Either.isLeft(bad) && bad.left._tag === "InvalidSessionId")
    for (const id of ["", "m".repeat(257)]) {
      const refused = requests.sendOf("ok", { text: "x", id })
      assert.isTrue(Either.isLeft(refused) && refused.left._tag === "InvalidRequest", id.slice(0, 10))
    }
    const accepted = requests.sendOf("ok", { text: "hi", id: "m".repeat(256), mode: "steer" })
    assert.isTrue(Either.isRight(accepted))
    if (Either.isRight(accepted)) {
      assert.strictEqual(accepted.right.key, Message.SessionId.make("ok"))
      assert.strictEqual(accepted.right.message.id, "m".repeat(256))
      assert.strictEqual(accepted.right.mode, "steer")
    }
    const minted = requests.sendOf("ok", { content })
    assert.isTrue(Either.isRight(minted) && minted.right.message.id.length > 0 && minted.right.mode === "followup")
  })
})

if (url === undefined) {
  // eslint-disable-next-line no-console
  console.log("gateway-requests.test.ts: the cluster half is skipped — set EFFECT_AGENT_PG_URL to run it")
  describe.skip("ARCH-04 over the cluster gateway (EFFECT_AGENT_PG_URL is not set)", () => {
    it("needs a server", () => {})
  })
} else {
  layer(inProcess.layer(url), { timeout: 120_000, excludeTestServices: true })("ARCH-04 both gateways", (it) => {
    it.scoped("ARCH-04 APP-05 the host gateway and the cluster gateway refuse the same bad input with the same error and words", () =>
      Effect.gen(function*() {
        const cluster = yield* SessionGateway
        const { gateway: host } = yield* gatewayOver(yield* fileStore, [])
        for (const [what, tag, call] of badCalls) {
          const fromHost = yield* failureOf(call(host))
          const fromCluster = yield* failureOf(call(cluster))
          assert.strictEqual(fromHost._tag, tag, `host: ${what}: ${fromHost.message}`)
          assert.deepStrictEqual(fromCluster, fromHost, `cluster: ${what}`)
        }
        // nothing was created by any of them
        assert.deepStrictEqual((yield* cluster.list()).sessions, [])
        assert.deepStrictEqual((yield* host.list()).sessions, [])
      }))

    it.scoped("ARCH-04 SEC-05 APP-05 the HTTP bad-input matrix gets the same status and problem body over both gateways", () =>
      Effect.gen(function*() {
        const overCluster = yield* serveGateway(yield* SessionGateway)
        const { gateway } = yield* gatewayOver(yield* fileStore, [])
        const overHost = yield* serveGateway(gateway)
        for (const item of badRequests) {
          const where = `${item.method} ${item.path.slice(0, 60)}`
          const fromHost = yield* exchange(overHost.port, item)
          const fromCluster = yield* exchange(overCluster.port, item)
          assert.isAtLeast(fromHost.status, 400, `${where}: ${JSON.stringify(fromHost.body)}`)
          const problem = fromHost.body as { readonly type?: string; readonly detail?: string }
          assert.isString(problem.type, where)
          assert.isString(problem.detail, where)
          assert.deepStrictEqual(fromCluster, fromHost, where)
        }
      }))
  })
}
