/**
 * DOC-01: `examples/getting-started.ts`, the README's Getting started program, run as a user runs it —
 * a child process, twice, in a fresh directory — against a local server speaking OpenAI's Chat
 * Completions wire protocol on 127.0.0.1: the first run calls the tool and streams the answer, the
 * second resumes the session, so its request carries the first conversation.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as bundle from "./fixtures/bundle.js"
import * as wire from "./fixtures/wireServer.js"

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-gs",
  object: "chat.completion.chunk",
  model: "gpt-test",
  choices: [{ index: 0, delta, finish_reason: finish }]
})

/** A streamed reply of `parts` (its text in pieces), then `stop`. */
const textReply = (...parts: ReadonlyArray<string>) =>
  wire.chatSse([chunk({ role: "assistant", content: "" }), ...parts.map((content) => chunk({ content })), chunk({}, "stop")])

/** A reply that calls the `clock` tool. */
const clockCall = wire.chatSse([
  chunk({ role: "assistant", tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "clock", arguments: "{}" } }] }),
  chunk({}, "tool_calls")
])

/** Runs the example with `question` in `cwd` against the server; resolves with its exit code and output. */
const runExample = (args: ReadonlyArray<string>, cwd: string, baseUrl: string, question: string) =>
  Effect.async<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    const child = spawn(process.execPath, [...args, question], {
      cwd,
      env: { ...process.env, OPENAI_API_KEY: "sk-test", OPENAI_BASE_URL: baseUrl, EFFECT_AGENT_MODEL: "gpt-test" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (data: Buffer) => (stdout += data.toString("utf8")))
    child.stderr.on("data", (data: Buffer) => (stderr += data.toString("utf8")))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const messagesOf = (request: wire.Received): ReadonlyArray<{ readonly role: string; readonly content?: unknown }> =>
  (request.body as { readonly messages: ReadonlyArray<{ readonly role: string; readonly content?: unknown }> }).messages

describe("Getting started (DOC-01)", () => {
  it.scoped("DOC-01 examples/getting-started.ts streams a tool turn from an OpenAI-compatible server, and a second run resumes it", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([clockCall, textReply("It is ", "time to ship."), textReply("Still ", "shipping.")])
      const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-getting-started-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(cwd, { recursive: true, force: true })))
      const args = yield* bundle.nodeArguments("examples/getting-started.ts")

      const first = yield* runExample(args, cwd, server.baseUrl, "What time is it?")
      assert.strictEqual(first.code, 0, first.stderr)
      assert.include(first.stdout, "It is time to ship.")
      assert.include(first.stdout, "(1 message from you in this session so far)")
      // the tool ran between the two requests: the second carries its result
      const afterTool = messagesOf(yield* server.awaitRequest(2))
      assert.deepStrictEqual(afterTool.map((m) => m.role), ["system", "user", "assistant", "tool"])

      const second = yield* runExample(args, cwd, server.baseUrl, "And now?")
      assert.strictEqual(second.code, 0, second.stderr)
      assert.include(second.stdout, "Still shipping.")
      assert.include(second.stdout, "(2 messages from you in this session so far)")
      // resumed: the third request carries the first run's conversation before the new question
      const resumed = messagesOf(yield* server.awaitRequest(3))
      assert.deepStrictEqual(resumed.map((m) => m.role), ["system", "user", "assistant", "tool", "assistant", "user"])
      assert.isTrue(fs.existsSync(path.join(cwd, ".sessions", "getting-started.jsonl")))
    }), 120_000)
})
