/**
 * The cluster example in one command (README "Scaling out"): three runners and the HTTP API as
 * separate processes over the Postgres of `DATABASE_URL`, their output prefixed with their name.
 * Kill a runner with the `kill -9 <pid>` it prints to see its sessions fail over; Ctrl-C stops all.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npx tsx examples/cluster/main.ts
 */
import { spawn } from "node:child_process"
import type { ChildProcess } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url))

const start = (name: string, file: string, arg: string): ChildProcess => {
  const child = spawn(process.execPath, ["--import", "tsx", here(file), arg], { stdio: ["ignore", "pipe", "pipe"] })
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream! }).on("line", (line) => process.stdout.write(`[${name}] ${line}\n`))
  }
  child.on("exit", (code, signal) => process.stdout.write(`[${name}] exited (${signal ?? code})\n`))
  process.stdout.write(`[${name}] pid ${child.pid} — kill -9 ${child.pid} to crash it\n`)
  return child
}

/** Resolves when `child` prints a line that starts with `prefix`. */
const printed = (child: ChildProcess, prefix: string) =>
  new Promise<void>((resolve) => {
    createInterface({ input: child.stdout! }).on("line", (line) => line.startsWith(prefix) && resolve())
  })

// The first runner starts alone: @effect/cluster creates its tables with CREATE TABLE IF NOT EXISTS,
// which Postgres does not serialize, so runners starting together on an empty database can fail.
const children = [start("runner-1", "./runner.ts", "34431")]
await printed(children[0]!, "runner ")
children.push(
  start("runner-2", "./runner.ts", "34432"),
  start("runner-3", "./runner.ts", "34433"),
  start("api", "./api.ts", process.env["PORT"] ?? "8080")
)

process.on("SIGINT", () => {
  for (const child of children) child.kill("SIGTERM")
  setTimeout(() => process.exit(0), 15_000).unref()
})
