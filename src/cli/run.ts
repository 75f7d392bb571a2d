/**
 * The `effect-agent` command (CLI-01), loaded by `main.ts` once its packages are found. Exit codes: 0 ok, 1 failure, 2
 * usage error, 3 session not found, 4 session locked (or, for `break-lock`, held by a live process, SEC-07), 5
 * session corrupt.
 *
 * @internal
 */
import { Command, ValidationError } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Console, Effect, Exit, Logger } from "effect"
import { command } from "./commands.js"
import { ExitCode } from "./errors.js"
import { stderrLogger, writeStderr, writeStdout } from "./output.js"
import { VERSION } from "../internal/version.js"
import { stoppedBySignal } from "./serve.js"

const cli = Command.run(command, { name: "effect-agent", version: VERSION })

/** Terminal control sequences (colours, cursor moves): `ESC [ … letter`. */
// eslint-disable-next-line no-control-regex
const controlSequence = /\x1b\[[0-9;?]*[A-Za-z]/g

/** `text` without terminal control sequences. */
const plainText = (text: string): string => text.replace(controlSequence, "")

/**
 * SEC-09: what `@effect/cli` refuses (an unknown flag, a bad value) it prints on the console's
 * stderr as a help document; the operator gets it as one line, like every other error of the CLI.
 * DOC-02: what it prints on stdout (`--help`, `--version`) carries colour codes only to a terminal.
 */
const oneLineErrors = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Console.consoleWith((console) =>
    Console.withConsole(effect, {
      ...console,
      log: (...args: ReadonlyArray<unknown>) =>
        process.stdout.isTTY === true ? console.log(...args) : writeStdout(plainText(args.map(String).join(" "))),
      error: (...args: ReadonlyArray<unknown>) => {
        const text = plainText(args.map(String).join(" "))
        const line = text.split("\n").map((part) => part.trim()).filter((part) => part !== "").join(" ")
        return line === "" ? Effect.void : writeStderr(`effect-agent: ${line}`)
      }
    }))

/** The process's exit code: the command's, 2 for what `@effect/cli` refused (its message is printed already). */
const program: Effect.Effect<ExitCode> = oneLineErrors(cli(process.argv)).pipe(
  Effect.as(ExitCode.ok),
  Effect.catchAll((error) => {
    if (ValidationError.isValidationError(error)) return Effect.succeed(ExitCode.usage)
    return Effect.succeed(error.code)
  }),
  Effect.catchAllDefect((defect) =>
    Effect.as(writeStderr(`effect-agent: unexpected failure: ${Cause.pretty(Cause.die(defect))}`), ExitCode.failure)
  ),
  Effect.provide(NodeContext.layer),
  Effect.provide(Logger.replace(Logger.defaultLogger, stderrLogger))
)

NodeRuntime.runMain(program, {
  disablePrettyLogger: true,
  // `serve` stopped by SIGTERM/SIGINT drained and ended as asked (HTTP-04): 0
  teardown: (exit, onExit) =>
    onExit(
      Exit.isSuccess(exit) && typeof exit.value === "number"
        ? exit.value
        : Exit.isInterrupted(exit) && stoppedBySignal
        ? ExitCode.ok
        : ExitCode.failure
    )
})
