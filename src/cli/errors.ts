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

/**
 * SEC-07: `break-lock` without `--force` refuses the lock of a writer that runs on this host (two
 * writers of one session would corrupt it). @internal
 */
export class LiveLockHolder extends Data.TaggedError("LiveLockHolder")<{
  readonly id: string
  readonly pid: number
  readonly started: string
}> {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} is locked by process ${this.pid} (${this.started}), which is ` +
      "running on this host: break-lock does not break the lock of a live writer, because two writers would " +
      "corrupt the session. Stop that process (it releases the lock as it ends), or pass --force if you are sure " +
      "it no longer writes this session"
  }
}

/**
 * SEC-09: `serve` could not start; the message names the system's error code (`EADDRINUSE`: the
 * port is taken) and what to do. @internal
 */
export class ServerNotStarted extends Data.TaggedError("ServerNotStarted")<{ readonly reason: string }> {
  override get message(): string {
    return `the server could not start: ${this.reason}`
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
    case "LiveLockHolder":
      return ExitCode.locked
    case "SessionCorrupt":
    case "SessionFormatUnsupported":
    case "InvalidInboxLog":
      return ExitCode.corrupt
    default:
      return ExitCode.failure
  }
}
