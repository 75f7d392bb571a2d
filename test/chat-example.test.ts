/**
 * DOC-02: `examples/chat.ts`, the interactive chat, run as a user runs it — a child process whose
 * stdin the test types into and to which it sends SIGINT, as Ctrl-C does — against a local server
 * speaking OpenAI's Chat Completions wire protocol on 127.0.0.1. A turn calls the calculator and
 * streams its answer; a reply the server holds open after its first delta is canceled by the first
 * SIGINT (the log keeps the partial answer and the aborted turn, the prompt comes back); SIGINT at the
 * prompt leaves, the session's lock released; a second run resumes the conversation, and two SIGINTs
 * during a turn leave at once, cleanly. No sleeps: the test waits for what the chat prints.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as bundle from "./fixtures/bundle.js"
import * as wire from "./fixtures/wireServer.js"

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-chat",
  object: "chat.completion.chunk",
  model: "gpt-test",
  choices: [{ index: 0, delta, finish_reason: finish }]
})

/** A streamed reply of `parts`, then `stop`. */
const textReply = (...parts: ReadonlyArray<string>) =>
  wire.chatSse([chunk({ role: "assistant", content: "" }), ...parts.map((content) => chunk({ content })), chunk({}, "stop")])

/** A reply that writes its first delta and then holds the stream open until the client goes away. */
const heldReply = (first: string) => wire.chatSse([chunk({ role: "assistant", content: "" }), chunk({ content: first })], "hang")

/** A reply that calls the calculator. */
const calculation = (expression: string) =>
  wire.chatSse([
    chunk({
      role: "assistant",
      tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "calculator", arguments: JSON.stringify({ expression }) } }]
    }),
    chunk({}, "tool_calls")
  ])

/** The chat as a child process in the test's Scope (killed by its pid if still running when the Scope closes). */
const startChat = (args: ReadonlyArray<string>, directory: string, baseUrl: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const env: Record<string, string | undefined> = {
        ...process.env,
        OPENAI_API_KEY: "sk-test",
        OPENAI_BASE_URL: baseUrl,
        EFFECT_AGENT_MODEL: "gpt-test"
      }
      delete env["ANTHROPIC_API_KEY"]
      const child = spawn(process.execPath, [...args, "--dir", directory], { env, stdio: ["pipe", "pipe", "pipe"] })
      let out = ""
      let err = ""
      const waiters: Array<{ readonly text: string; readonly from: number; readonly resume: (at: number) => void }> = []
      const check = () => {
        for (let i = waiters.length - 1; i >= 0; i--) {
          const at = out.indexOf(waiters[i]!.text, waiters[i]!.from)
          if (at !== -1) {
            waiters[i]!.resume(at + waiters[i]!.text.length)
            waiters.splice(i, 1)
          }
        }
      }
      child.stdout.on("data", (data: Buffer) => {
        out += data.toString("utf8")
        check()
      })
      child.stderr.on("data", (data: Buffer) => (err += data.toString("utf8")))
      let mark = 0
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
      return {
        child,
        output: () => out,
        errors: () => err,
        type: (line: string) => Effect.sync(() => child.stdin.write(`${line}\n`)),
        /** What Ctrl-C does to a process whose input is a pipe. */
        interrupt: Effect.sync(() => child.kill("SIGINT")),
        /** Waits until `text` appears in stdout after everything awaited so far. */
        until: (text: string) =>
          Effect.async<void>((resume) => {
            waiters.push({
              text,
              from: mark,
              resume: (at) => {
                mark = at
                resume(Effect.void)
              }
            })
            check()
          }),
        exit: Effect.promise(() => exited)
      }
    }),
    ({ child }) => Effect.sync(() => child.exitCode === null && child.signalCode === null && child.kill("SIGKILL"))
  )

interface LoggedEvent {
  readonly type: string
  readonly data: Record<string, unknown>
}

const logOf = (directory: string): ReadonlyArray<LoggedEvent> =>
  fs.readFileSync(path.join(directory, "chat.jsonl"), "utf8").trim().split("\n").slice(1).map((line) => JSON.parse(line))

const turnEnd = (log: ReadonlyArray<LoggedEvent>, turn: number) =>
  log.find((event) => event.type === "turn/end" && event.data["turn"] === turn)?.data["reason"]

/** No lock file, no lock leftovers: only the log (and perhaps its summary) stays. */
const assertUnlocked = (directory: string) =>
  assert.deepStrictEqual(fs.readdirSync(directory).filter((name) => name.includes(".lock")), [], "the session's lock was released")

const messagesOf = (request: wire.Received): ReadonlyArray<{ readonly role: string; readonly content?: unknown }> =>
  (request.body as { readonly messages: ReadonlyArray<{ readonly role: string; readonly content?: unknown }> }).messages

describe("examples/chat.ts (DOC-02)", () => {
  it.scoped("DOC-02 the chat streams a calculator turn, Ctrl-C cancels a turn and waits for it, Ctrl-C at the prompt leaves unlocked, and a second run resumes", () =>
    Effect.gen(function*() {
      const server = yield* wire.start([
        calculation("6*7"),
        textReply("It is ", "42."),
        heldReply("Counting slowly"),
        textReply("Back ", "again."),
        textReply("Still ", "here."),
        heldReply("Once more")
      ])
      const directory = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-chat-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true })))
      const args = yield* bundle.nodeArguments("examples/chat.ts")

      const first = yield* startChat(args, directory, server.baseUrl)
      yield* first.until("session chat · 0 messages")
      yield* first.until("you> ")
      yield* first.type("What is 6 times 7?")
      yield* first.until("[calculator {\"expression\":\"6*7\"}] → 42")
      yield* first.until("It is 42.")
      yield* first.until("[completed]")
      yield* first.until("you> ")
      // the server holds this reply open after its first delta: the turn is running when Ctrl-C comes
      yield* first.type("Count to a million")
      yield* first.until("Counting slowly")
      yield* first.interrupt
      yield* first.until("[canceling the turn")
      yield* first.until("[aborted (user)]")
      // the cancel reached the wire: the client went away from the held stream
      yield* Deferred.await((yield* server.awaitRequest(3)).aborted)
      yield* first.until("you> ")
      yield* first.type("Are you there?")
      yield* first.until("Back again.")
      yield* first.until("[completed]")
      yield* first.until("you> ")
      yield* first.interrupt
      assert.strictEqual(yield* first.exit, 0, first.errors())
      assert.include(first.output(), "[bye]")
      assertUnlocked(directory)

      // the log has the canceled turn: its partial answer and its end (nothing lost)
      const log = logOf(directory)
      assert.deepStrictEqual(turnEnd(log, 2), { kind: "aborted", cause: { kind: "user" } })
      const partial = log.find((event) => event.type === "assistant/message" && event.data["turn"] === 2)
      assert.deepInclude(partial?.data ?? {}, { interrupted: true })
      assert.include(JSON.stringify(partial?.data["message"]), "Counting slowly")
      assert.deepStrictEqual(turnEnd(log, 3), { kind: "completed" })

      const second = yield* startChat(args, directory, server.baseUrl)
      yield* second.until("session chat · ")
      assert.notInclude(second.output(), "· 0 messages")
      yield* second.until("you> ")
      yield* second.type("Still there?")
      yield* second.until("Still here.")
      yield* second.until("you> ")
      // resumed: the request carries the first run's conversation, the canceled answer included
      const resumed = JSON.stringify(messagesOf(yield* server.awaitRequest(5)))
      for (const said of ["What is 6 times 7?", "It is 42.", "Counting slowly", "Back again.", "Still there?"]) {
        assert.include(resumed, said)
      }
      // two Ctrl-Cs during a turn: the second leaves without waiting, and still cleanly
      yield* second.type("One more slow one")
      yield* second.until("Once more")
      yield* second.interrupt
      yield* second.until("[canceling the turn")
      yield* second.interrupt
      assert.strictEqual(yield* second.exit, 0, second.errors())
      assert.include(second.output(), "[bye]")
      assertUnlocked(directory)
      assert.strictEqual((turnEnd(logOf(directory), 5) as { readonly kind?: string } | undefined)?.kind, "aborted")
    }), 180_000)
})
