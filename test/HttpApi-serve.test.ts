/**
 * HTTP-04: `effect-agent serve --dir … --port 0` as a real child process: the walkthrough's
 * requests (create, send, stream); SIGTERM drains and exits 0, leaving the session stored as streamed
 * and unlocked (a restart resuming it with `Last-Event-ID` is `HttpApi-restart.test.ts`).
 *
 * `it.live`: the server is another process on the real clock.
 */
import { Command } from "@effect/platform"
import type { CommandExecutor } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Stream } from "effect"
import { fileURLToPath } from "node:url"
import type { SessionId } from "../src/Message.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { tempDirectory } from "./fixtures/backends.js"
import { openEvents, request } from "./fixtures/httpServer.js"

const repository = fileURLToPath(new URL("..", import.meta.url))
const main = fileURLToPath(new URL("../src/cli/main.ts", import.meta.url))

/** Starts `effect-agent serve` on `directory` and reads the address it prints. */
const startServer = (directory: string) =>
  Effect.gen(function*() {
    const child = yield* Command.make(process.execPath, "--import", "tsx", main, "serve", "--dir", directory, "--port", "0")
      .pipe(Command.workingDirectory(repository), Command.start)
    const first = yield* child.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runHead)
    const url = Option.flatMap(first, (line) => Option.fromNullable(/http:\/\/127\.0\.0\.1:\d+/.exec(line)?.[0]))
    if (Option.isNone(url)) {
      yield* child.kill("SIGKILL")
      return yield* Effect.dieMessage(`the server did not start: ${Option.getOrElse(first, () => "(no output)")}`)
    }
    return { child, url: url.value }
  })

const stop = (child: CommandExecutor.Process) => Effect.zipRight(child.kill("SIGTERM"), child.exitCode)

describe("effect-agent serve", () => {
  it.live("HTTP-04 serve: the walkthrough's requests over a directory; SIGTERM drains, releases the session and exits 0", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-serve-")
      const first = yield* startServer(directory)
      assert.strictEqual((yield* request(`${first.url}/sessions/demo`, { method: "PUT", body: {} })).status, 201)
      const events = yield* openEvents(`${first.url}/sessions/demo/events`)
      const sent = yield* request(`${first.url}/sessions/demo/messages`, {
        method: "POST",
        body: { text: "hello", id: "m1" }
      })
      assert.strictEqual(sent.status, 202)
      const frames = yield* events.until((frame) => frame.data?.includes("\"turn/end\"") === true)
      const reply = frames.find((frame) => frame.data?.includes("\"assistant/message\"") === true)
      assert.include(reply?.data ?? "", "echo: hello")
      yield* events.close
      assert.strictEqual(yield* stop(first.child), 0)
      // what the stream showed is what the directory holds, unlocked: the next server (or any writer) takes it
      const persistence = yield* Effect.provide(
        SessionPersistence.SessionPersistence,
        NodeFileSessionPersistence.layer({ directory })
      )
      const durable = frames.filter((frame) => frame.event === "durable").map((frame) => JSON.parse(frame.data!))
      const { stored } = yield* persistence.openWrite("demo" as SessionId)
      assert.deepStrictEqual(stored.events, durable)
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)))
})
