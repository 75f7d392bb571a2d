/**
 * The `effect-agent` command as an Effect (CLI-01): arguments in, exit code out, everything it
 * prints written through `CliOutput`. `run.ts` runs it as the process; tests run it in-process with
 * the output captured, which costs no Node start-up per command.
 *
 * @internal
 */
import { Command, ValidationError } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import { Cause, Console, Effect, Logger } from "effect"
import { command } from "./commands.js"
import { ExitCode } from "./errors.js"
import { VERSION } from "../internal/version.js"
import { stderrLogger, writeStderr, writeStdout } from "./output.js"

const cli = Command.run(command, { name: "effect-agent", version: VERSION })

/** Terminal control sequences (colours, cursor moves): `ESC [ … letter`. */
// eslint-disable-next-line no-control-regex
const controlSequence = /\x1b\[[0-9;?]*[A-Za-z]/g

/** `text` without terminal control sequences. */
const plainText = (text: string): string => text.replace(controlSequence, "")

/**
 * SEC-09: what `@effect/cli` refuses (an unknown flag, a bad value) it prints on the console's
 * stderr as a help document; the operator gets it as one line, like every other error of the CLI.
 * What it prints on the console's stdout (usage, the version) goes to the command's stdout, with
 * colour codes only when that is a terminal (DOC-02).
 */
const oneLineErrors = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Console.consoleWith((console) =>
    Console.withConsole(effect, {
      ...console,
      log: (...args: ReadonlyArray<unknown>) => {
        const text = args.map(String).join(" ")
        return writeStdout(`${process.stdout.isTTY === true ? text : plainText(text)}\n`)
      },
      error: (...args: ReadonlyArray<unknown>) => {
        const text = plainText(args.map(String).join(" "))
        const line = text.split("\n").map((part) => part.trim()).filter((part) => part !== "").join(" ")
        return line === "" ? Effect.void : writeStderr(`effect-agent: ${line}`)
      }
    }))

/**
 * The command run on `argv` (as `process.argv`: the executable and the script first): its exit
 * code, 2 for what `@effect/cli` refused (its message is printed already).
 *
 * @internal
 */
export const program = (argv: ReadonlyArray<string>): Effect.Effect<ExitCode> =>
  oneLineErrors(cli(argv)).pipe(
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
