/**
 * SEC-10 (the HTTP part): hostile clients against `effect-agent serve --token …` running as a real
 * child process, over real sockets on 127.0.0.1 — unauthenticated large bodies (answered 401
 * without being read; the server's peak memory stays bounded over 50 concurrent 1 MiB uploads),
 * deep JSON, bad ids and percent-escapes, bad cursors and unknown routes. Each asserts the status,
 * the problem body and that nothing stored changed (the session files, byte for byte).
 *
 * `it.scopedLive`: the server is another process on the real clock. The peak is read from Linux's
 * `/proc/<pid>/status` (`VmHWM`, reset through `clear_refs`); elsewhere that check is skipped.
 */
import { Command } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer, Option, Stream } from "effect"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { tempDirectory } from "./fixtures/backends.js"
import { assertProblem, rawExchange } from "./fixtures/hostileHttp.js"

const repository = fileURLToPath(new URL("..", import.meta.url))
const main = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url))
const token = "hostile-suite-token"
const MiB = 1024 * 1024

/** A server the suite's tests share: its port, pid and directory. */
class Server extends Context.Tag("test/hostile-http/Server")<Server, {
  readonly port: number
  readonly pid: number
  readonly directory: string
}>() {}

/** `effect-agent serve` on a fresh directory with a bearer token, for the whole suite. */
const startServer = Effect.gen(function*() {
  const directory = yield* tempDirectory("effect-agent-hostile-")
  const child = yield* Command.make(
    process.execPath,
    "--import",
    "tsx",
    main,
    "serve",
    "--dir",
    directory,
    "--port",
    "0",
    "--token",
    token
  ).pipe(Command.workingDirectory(repository), Command.start)
  const first = yield* child.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runHead)
  const port = Option.flatMap(first, (line) => Option.fromNullable(/http:\/\/127\.0\.0\.1:(\d+)/.exec(line)?.[1]))
  if (Option.isNone(port)) return yield* Effect.dieMessage(`serve printed no address: ${Option.getOrElse(first, () => "")}`)
  return { port: Number(port.value), pid: Number(child.pid), directory }
})

const ServerLive = Layer.scoped(Server, startServer).pipe(Layer.provide(NodeContext.layer))

/**
 * The session files of the store, as digests of their bytes: what "nothing stored changed" is
 * checked against (a digest keeps a failure's diff short).
 */
const storedFiles = (directory: string) => {
  const files: Record<string, string> = {}
  for (const name of fs.readdirSync(directory).sort()) {
    if (name.endsWith(".jsonl")) {
      files[name] = crypto.createHash("sha256").update(fs.readFileSync(path.join(directory, name))).digest("hex")
    }
  }
  return files
}

/** A request's head as the raw socket writes it. */
const head = (method: string, target: string, headers: ReadonlyArray<string>) => [
  `${method} ${target} HTTP/1.1`,
  "host: 127.0.0.1",
  ...headers
]

const json = (value: unknown) => Buffer.from(typeof value === "string" ? value : JSON.stringify(value))

/** A request with a JSON body (authenticated unless told otherwise), over a raw socket. */
const send = (port: number, method: string, target: string, body?: Buffer, authorized = true) =>
  rawExchange(
    port,
    head(method, target, [
      ...(authorized ? [`authorization: Bearer ${token}`] : []),
      ...(body === undefined ? [] : ["content-type: application/json", `content-length: ${body.length}`])
    ]),
    body
  )

/** Linux's view of a process's memory: resident now and the peak since the last reset, in bytes. */
const memoryOf = (pid: number) => {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8")
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? "NaN") * 1024
  return { rss: kib("VmRSS"), peak: kib("VmHWM") }
}
const canMeasure = fs.existsSync("/proc/self/clear_refs")

layer(ServerLive, { timeout: 60_000, excludeTestServices: true })("hostile HTTP clients (SEC-10)", (it) => {
  it.effect("SEC-10 SEC-04 unauthenticated 1 MiB uploads: 50 held open with most of the body unsent are each answered 401, and 3 rounds of 50 concurrent complete ones (150 MiB) leave the server's peak memory bounded; nothing stored changed", () =>
    Effect.gen(function*() {
      const server = yield* Server
      assert.isBelow((yield* send(server.port, "PUT", "/sessions/kept", json({ meta: { owner: "ops" } }))).status, 300)
      const before = storedFiles(server.directory)
      const upload = Buffer.alloc(MiB, 0x20) // a valid JSON message once it is wrapped: spaces
      upload.write("{\"text\":\"", 0)
      upload.write("\"}", MiB - 2)
      const unauthenticated = (i: number, body: Buffer, sendAll: boolean) =>
        rawExchange(server.port, head("POST", "/sessions/kept/messages", [
          "content-type: application/json",
          `content-length: ${MiB}`,
          ...(i % 2 === 0 ? [] : ["authorization: Bearer not-the-token"])
        ]), body, { sendAll })
      const fifty = Array.from({ length: 50 }, (_, i) => i)
      // a quarter of each body sent and the connections held open: only a server that does not wait
      // for (and hold) the bodies answers them
      const held = yield* Effect.forEach(fifty, (i) => unauthenticated(i, upload.subarray(0, MiB / 4), false), {
        concurrency: "unbounded"
      }).pipe(Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the server waited for unsent bodies") }))
      for (const reply of held) assertProblem(reply, 401, "Unauthorized")
      // complete uploads: the server discards what it does not read, so its peak stays within the
      // garbage collector's slack (V8 collects once about 64 MiB of buffers are garbage), far below
      // the 150 MiB sent
      if (canMeasure) fs.writeFileSync(`/proc/${server.pid}/clear_refs`, "5")
      const baseline = canMeasure ? memoryOf(server.pid).rss : 0
      for (let round = 0; round < 3; round++) {
        const replies = yield* Effect.forEach(fifty, (i) => unauthenticated(i, upload, true), { concurrency: "unbounded" })
        for (const reply of replies) assertProblem(reply, 401, "Unauthorized")
      }
      if (canMeasure) {
        const grown = memoryOf(server.pid).peak - baseline
        assert.isBelow(grown, 96 * MiB, `the server's peak grew by ${(grown / MiB).toFixed(1)} MiB over 150 MiB of uploads`)
      }
      assert.deepStrictEqual(storedFiles(server.directory), before)
      // a 1 MiB body with the token is read (a PUT of the existing session: 200, left as it was),
      // so the server still serves and changes nothing it should not
      const read = yield* rawExchange(server.port, head("PUT", "/sessions/kept", [
        "content-type: application/json",
        `content-length: ${MiB}`,
        `authorization: Bearer ${token}`
      ]), Buffer.concat([Buffer.from("{\"meta\":{}}"), Buffer.alloc(MiB - 11, 0x20)]), { sendAll: true })
      assert.strictEqual(read.status, 200, JSON.stringify(read.body))
      assert.deepStrictEqual(storedFiles(server.directory), before)
    }), 30_000)

  it.effect("SEC-10 SEC-05 deep JSON, bad ids, malformed escapes, bad cursors and unknown routes: each a problem body with its status; nothing stored changed", () =>
    Effect.gen(function*() {
      const server = yield* Server
      assert.isBelow((yield* send(server.port, "PUT", "/sessions/kept", json({}))).status, 300)
      const before = storedFiles(server.directory)
      const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth)
      const deep = nested(400_000)
      const cases: ReadonlyArray<readonly [string, string, Buffer | undefined, number, string]> = [
        // deep JSON on every route with a body
        ["PUT", "/sessions/deep", json(`{"meta":{"x":${deep}}}`), 400, "InvalidRequest"],
        ["PUT", "/sessions/kept", json(`{"options":${deep}}`), 400, "InvalidRequest"],
        ["POST", "/sessions/kept/messages", json(`{"text":"a","x":${deep}}`), 400, "InvalidRequest"],
        ["POST", "/sessions/kept/cancel", json(deep), 400, "InvalidRequest"],
        ["POST", "/sessions/kept/fork", json(`{"childId":"c","x":${deep}}`), 400, "InvalidRequest"],
        ["PUT", "/sessions/deep", json(`{"meta":{"x":${nested(1001)}}}`), 400, "InvalidRequest"],
        // ids over the limit, characters outside ID-01, traversal
        ["GET", `/sessions/${"a".repeat(200)}`, undefined, 400, "InvalidSessionId"],
        ["PUT", `/sessions/${"b".repeat(10_000)}`, json({}), 400, "InvalidSessionId"],
        ["POST", `/sessions/${"c".repeat(129)}/messages`, json({ text: "x" }), 400, "InvalidSessionId"],
        ["GET", "/sessions/..%2F..%2Fetc%2Fpasswd", undefined, 400, "InvalidSessionId"],
        ["PUT", "/sessions/a%00b", json({}), 400, "InvalidSessionId"],
        // malformed percent-escapes in the path and the query
        ["GET", "/sessions/%E0%A4%A", undefined, 400, "InvalidRequest"],
        ["PUT", "/sessions/%FF", json({}), 400, "InvalidRequest"],
        ["POST", "/sessions/kept%G1/messages", json({ text: "x" }), 400, "InvalidRequest"],
        ["GET", "/sessions?after=%E0%A4%A", undefined, 400, "InvalidRequest"],
        // cursors: decimal digits only
        ["GET", "/sessions/kept/events?from=1e3", undefined, 400, "InvalidRequest"],
        ["GET", "/sessions/kept/events?from=0x10", undefined, 400, "InvalidRequest"],
        ["GET", "/sessions?limit=1e2", undefined, 400, "InvalidRequest"],
        // unknown routes
        ["GET", "/admin", undefined, 404, "RouteNotFound"],
        ["POST", "/sessions/kept/delete", json({}), 404, "RouteNotFound"],
        ["PATCH", "/sessions/kept", json({}), 404, "RouteNotFound"]
      ]
      for (const [method, target, body, status, tag] of cases) {
        assertProblem(yield* send(server.port, method, target, body), status, tag, `${method} ${target.slice(0, 60)}`)
      }
      // a Last-Event-ID that is not digits
      for (const lastEventId of ["1.5", "0x1", "1e1"]) {
        const reply = yield* rawExchange(server.port, head("GET", "/sessions/kept/events", [
          `authorization: Bearer ${token}`,
          `last-event-id: ${lastEventId}`
        ]), undefined)
        assertProblem(reply, 400, "InvalidRequest", `Last-Event-ID: ${lastEventId}`)
      }
      // deep JSON and bad ids without a token: 401 first (the body is not read)
      assertProblem(yield* send(server.port, "PUT", "/sessions/deep", json(`{"meta":${deep}}`), false), 401, "Unauthorized")
      assert.deepStrictEqual(storedFiles(server.directory), before)
      // and the server still serves
      assert.strictEqual((yield* send(server.port, "GET", "/sessions/kept")).status, 200)
    }), 30_000)
})
