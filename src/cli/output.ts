/**
 * How the operator CLI writes (CLI-01): results on stdout — a table or text for people, exactly
 * one JSON document under `--json` — and everything else (errors, warnings, progress) on stderr,
 * progress only when stderr is a terminal.
 *
 * @internal
 */
import { Context, Effect, FiberRef, FiberRefs, Logger } from "effect"

/**
 * Where the command writes: the process's stdout and stderr unless told otherwise. The executable
 * never replaces it; the command run in-process (its tests, `program.ts`) captures both streams here.
 *
 * @internal
 */
export class CliOutput extends Context.Reference<CliOutput>()("effect-agent/cli/CliOutput", {
  defaultValue: (): {
    readonly stdout: (text: string) => void
    readonly stderr: (text: string) => void
  } => ({
    stdout: (text) => void process.stdout.write(text),
    stderr: (text) => void process.stderr.write(text)
  })
}) {}

/** Text as a line: a newline appended unless it ends with one. */
const asLine = (text: string): string => (text.endsWith("\n") ? text : `${text}\n`)

/** @internal */
export const writeStdout = (text: string): Effect.Effect<void> =>
  Effect.flatMap(CliOutput, (output) => Effect.sync(() => output.stdout(asLine(text))))

/** @internal */
export const writeStderr = (text: string): Effect.Effect<void> =>
  Effect.flatMap(CliOutput, (output) => Effect.sync(() => output.stderr(asLine(text))))

/** One JSON document, pretty-printed. @internal */
export const writeJson = (value: unknown): Effect.Effect<void> => writeStdout(JSON.stringify(value, null, 2))

/** The library's log lines (a takeover, a broken lock, a torn tail) go to stderr, never into a result. @internal */
export const stderrLogger: Logger.Logger<unknown, void> = Logger.make(({ context, logLevel, message }) => {
  const text = Array.isArray(message) ? message.map(String).join(" ") : String(message)
  const output = Context.get(FiberRefs.getOrDefault(context, FiberRef.currentContext), CliOutput)
  output.stderr(`${logLevel.label.toLowerCase()}: ${text}\n`)
})

/** A table for people: columns padded to their widest cell, the last column left ragged. @internal */
export const table = (headers: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => (row[column] ?? "").length))
  )
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((cell, column) => (column === cells.length - 1 ? cell : cell.padEnd(widths[column]!))).join("  ")
  return [line(headers), ...rows.map(line)].join("\n")
}

/** Label/value lines for people. @internal */
export const fields = (rows: ReadonlyArray<readonly [string, string]>): string => {
  const width = Math.max(...rows.map(([label]) => label.length))
  return rows.map(([label, value]) => `${label.padEnd(width)}  ${value}`).join("\n")
}

/** Progress of a long operation: a line rewritten on stderr when it is a terminal, nothing otherwise. @internal */
export interface Progress {
  readonly update: (text: string) => Effect.Effect<void>
  readonly done: Effect.Effect<void>
}

/** @internal */
export const progress = (isTerminal: boolean = process.stderr.isTTY === true): Progress => {
  let shown = false
  return {
    update: (text) =>
      Effect.sync(() => {
        if (!isTerminal) return
        shown = true
        process.stderr.write(`\r\x1b[2K${text}`)
      }),
    done: Effect.sync(() => {
      if (shown) process.stderr.write("\r\x1b[2K")
      shown = false
    })
  }
}

/** @internal */
export const iso = (millis: number): string => new Date(millis).toISOString()
