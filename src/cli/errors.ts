/**
 * The operator CLI's failures and its exit codes (CLI-01): 0 ok, 1 failure, 2 usage error, 3
 * session not found, 4 session locked, 5 session corrupt.
 *
 * @internal
 */
import { Data } from "effect"

/** @internal */
export const ExitCode = {
  ok: 0,
  failure: 1,
  usage: 2,
  notFound: 3,
  locked: 4,
  corrupt: 5
} as const

/** @internal */
export type ExitCode = typeof ExitCode[keyof typeof ExitCode]

/** The command line was wrong in a way `@effect/cli` cannot tell (which store, a malformed id). @internal */
export class UsageError extends Data.TaggedError("UsageError")<{ readonly reason: string }> {
  override get message(): string {
    return this.reason
  }
}

/** A command failed and said so (on stderr, and on stdout under `--json`): the process exits with `code`. @internal */
export class CommandFailed extends Data.TaggedError("CommandFailed")<{ readonly code: ExitCode }> {}

/** The exit code of a typed failure, by its tag. @internal */
export const exitCodeOf = (error: { readonly _tag: string }): ExitCode => {
  switch (error._tag) {
    case "UsageError":
    case "InvalidSessionId":
      return ExitCode.usage
    case "SessionNotFound":
      return ExitCode.notFound
    case "SessionLocked":
      return ExitCode.locked
    case "SessionCorrupt":
    case "SessionFormatUnsupported":
    case "InvalidInboxLog":
      return ExitCode.corrupt
    default:
      return ExitCode.failure
  }
}
