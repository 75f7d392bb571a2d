/**
 * The interactive chat example (issue 16, SPEC §12) driven as a child process through stdin and
 * stdout, with the scripted model (no network) and sessions on disk: streamed replies, a steer
 * while running, `/cancel`, `/usage`, `/queue`, `/fork`, `/sessions`, and a resume in a second run.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const chat = fileURLToPath(new URL("../examples/chat.ts", import.meta.url))

/** The chat as a child process in the test's Scope (killed by its pid when the Scope closes). */
const startChat = (directory: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const env = { ...process.env }
      delete env["OPENAI_API_KEY"]
      delete env["ANTHROPIC_API_KEY"]
      const child = spawn(process.execPath, ["--import", "tsx", chat, "--dir", directory], {
        env,
        stdio: ["pipe", "pipe", "pipe"]
      })
      let out = ""
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
      let mark = 0
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
      return {
        child,
        output: () => out,
        send: (line: string) => Effect.sync(() => child.stdin.write(`${line}\n`)),
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
        end: Effect.promise(() => {
          child.stdin.end()
          return exited
        })
      }
    }),
    ({ child }) => Effect.sync(() => child.exitCode === null && child.kill("SIGKILL"))
  )

describe("examples/chat.ts", () => {
  it.scopedLive("the chat example streams replies, steers while running, cancels, counts usage, forks and resumes from disk", () =>
    Effect.gen(function*() {
      const directory = fs.mkdtempSync(path.join(os.tmpdir(), "chat-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true })))
      const first = yield* startChat(directory)
      yield* first.until("session chat · 0 messages")
      yield* first.send("hello")
      yield* first.until("echo: hello")
      yield* first.until("[turn 1 completed]")
      // a reply that streams and hangs; a line typed meanwhile is a steer; /cancel aborts the turn
      yield* first.send("wait for me")
      yield* first.until("thinking about it")
      yield* first.send("steer this")
      yield* first.send("/cancel")
      yield* first.until("[turn 2 aborted (user)]")
      yield* first.send("/usage")
      yield* first.until("[usage {\"inputTokens\":")
      yield* first.send("/queue later")
      yield* first.until("echo: later")
      yield* first.until("[turn 3 completed]")
      yield* first.send("/fork side")
      yield* first.until("[forked into side")
      yield* first.send("/sessions")
      yield* first.until("[session side:")
      assert.strictEqual(yield* first.end, 0)
      assert.include(first.output(), "[bye]")
      // the canceled steer never reached the model
      assert.notInclude(first.output(), "echo: steer this")

      const second = yield* startChat(directory)
      // resumed from disk: the earlier turns are there
      yield* second.until("session chat · ")
      assert.notInclude(second.output(), "· 0 messages")
      yield* second.send("again")
      yield* second.until("[turn 4] echo: again")
      yield* second.send("/quit")
      assert.strictEqual(yield* second.end, 0)
    }), { timeout: 120_000 })
})
