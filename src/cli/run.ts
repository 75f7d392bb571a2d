/**
 * The `effect-agent` command (CLI-01), loaded by `main.ts` once its packages are found. Exit codes: 0 ok, 1 failure, 2
 * usage error, 3 session not found, 4 session locked (or, for `break-lock`, held by a live process, SEC-07), 5
 * session corrupt.
 *
 * @internal
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Exit } from "effect"
import { ExitCode } from "./errors.js"
import { program } from "./program.js"
import { stoppedBySignal } from "./serve.js"

NodeRuntime.runMain(program(process.argv), {
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
