/**
 * A hostile provider against an agent in its own process (SEC-10, SEC-02): the wire servers (here,
 * on 127.0.0.1) send a reply whose line never ends and a reply of deltas that never finishes, each
 * up to 512 MiB; the agent (`fixtures/hostileProviderChild.ts`, file sessions, the adapters'
 * default 16 MiB `maxEventBytes`) must end each turn `OUTPUT_TOO_LARGE` with its memory bounded —
 * without the bound it would hold the whole reply, hundreds of MB — and leave each session's log
 * valid on disk.
 */
import { Command, FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Schema, Stream } from "effect"
import { fileURLToPath } from "node:url"
import { SessionId } from "../src/Message.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as Repair from "../src/Repair.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as hostile from "./fixtures/hostileProviders.js"
import * as wire from "./fixtures/wireServer.js"

const child = fileURLToPath(new URL("./fixtures/hostileProviderChild.ts", import.meta.url))
const repository = fileURLToPath(new URL("..", import.meta.url))

/** What a hostile server writes at most per reply: far more than a bounded agent may hold. */
const SERVER_LIMIT = 512 * 1024 * 1024
const MB = 1024 * 1024
/** The deltas' size: small (a provider's are tens of bytes), yet 16 MiB of them is no more than 32,768 deltas. */
const DELTA = 512

const hostileSessions = ["line-openai", "deltas-openai", "line-anthropic", "deltas-anthropic"]

describe("SEC-10 a hostile provider against an agent in its own process", () => {
  it.scopedLive("SEC-10 SEC-02 an endless line and endless deltas from both protocols: each turn ends OUTPUT_TOO_LARGE, memory stays bounded, the logs stay valid", () =>
    Effect.gen(function*() {
      const openai = yield* wire.start([
        hostile.normalReply("openai", "warm"),
        hostile.endlessLine("openai", SERVER_LIMIT),
        hostile.endlessDeltas("openai", SERVER_LIMIT, DELTA)
      ])
      const anthropic = yield* wire.start([
        hostile.normalReply("anthropic", "warm"),
        hostile.endlessLine("anthropic", SERVER_LIMIT),
        hostile.endlessDeltas("anthropic", SERVER_LIMIT, DELTA)
      ])
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "hostile-provider-" })
      const process = yield* Command.make(
        globalThis.process.execPath,
        "--import",
        "tsx",
        child,
        openai.baseUrl,
        anthropic.baseUrl,
        directory
      ).pipe(Command.workingDirectory(repository), Command.start)
      const stderr = yield* Effect.forkScoped(process.stderr.pipe(Stream.decodeText(), Stream.mkString))
      const lines = Chunk.toReadonlyArray(
        yield* process.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runCollect)
      )
      const exitCode = yield* process.exitCode
      assert.strictEqual(exitCode, 0, `the child failed: ${yield* Fiber.join(stderr)}`)

      const turns = new Map(lines.filter((line) => line.startsWith("turn ")).map((line) => {
        const [, session, kind, code] = line.split(" ")
        return [session!, `${kind} ${code}`] as const
      }))
      assert.strictEqual(turns.get("warm-openai"), "completed -")
      assert.strictEqual(turns.get("warm-anthropic"), "completed -")
      for (const session of hostileSessions) assert.strictEqual(turns.get(session), "error OUTPUT_TOO_LARGE", session)

      const number = (prefix: string) => Number(lines.find((line) => line.startsWith(`${prefix} `))!.split(" ")[1])
      const growth = number("peak") - number("baseline")
      // 16 MiB of reply held per stream at most; without the bound, one stream alone holds ~512 MB
      assert.isBelow(growth, 200 * MB, `the agent's RSS grew by ${Math.round(growth / MB)} MB`)

      // each hostile request was cut off: the server saw its connection close before the reply ended
      for (const server of [openai, anthropic]) {
        assert.strictEqual((yield* server.received).length, 3)
        for (const n of [2, 3]) yield* (yield* server.awaitRequest(n)).aborted
      }

      // the logs on disk are valid: readable, nothing torn, balanced (no repair needed), the error recorded
      const persistence = yield* Effect.provide(
        SessionPersistence,
        NodeFileSessionPersistence.layer({ directory })
      )
      for (const session of hostileSessions) {
        const stored = yield* persistence.read(Schema.decodeSync(SessionId)(session))
        assert.strictEqual(stored.tornTailDropped, 0, session)
        assert.deepStrictEqual(Repair.closers(stored.events), [], session)
        const ends = stored.events.filter((event) => event.type === "turn/end").map((event) =>
          event.data as { readonly turn: number; readonly reason: { readonly kind: string; readonly error?: { readonly code: string } } }
        )
        assert.deepStrictEqual(
          ends.map((end) => [end.turn, end.reason.kind, end.reason.error?.code]),
          [[1, "error", "OUTPUT_TOO_LARGE"]],
          session
        )
        assert.isFalse(stored.events.some((event) => event.type === "assistant/message"), session)
      }
    }).pipe(Effect.provide(NodeContext.layer)), 90_000)
})
