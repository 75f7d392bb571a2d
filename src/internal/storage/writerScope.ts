/**
 * What every persistence layer does around acquiring a writer.
 *
 * @internal
 */
import { Effect, ExecutionStrategy, Exit, Scope } from "effect"
import type { SessionId } from "../../Message.js"
import * as SessionError from "../../SessionError.js"

/**
 * Runs `build` in a child of the caller's Scope that is closed at once if `build` fails, so a
 * failed create/openWrite releases its lock or lease immediately, while a successful one lives as
 * long as the caller's Scope.
 *
 * @internal
 */
export const inWriterScope = <A, E, R>(
  build: Effect.Effect<A, E, R>
): Effect.Effect<A, E, Exclude<R, Scope.Scope> | Scope.Scope> =>
  Effect.flatMap(Effect.scope, (parent) =>
    Effect.flatMap(Scope.fork(parent, ExecutionStrategy.sequential), (scope) =>
      build.pipe(
        Scope.extend(scope),
        Effect.onExit((exit) => (Exit.isFailure(exit) ? Scope.close(scope, exit) : Effect.void))
      )))

/**
 * What `discard` does on a writer returned by `openWrite`: only a new session's writer (from
 * `create`) may remove what it created.
 *
 * @internal
 */
export const discardRefused = (id: SessionId): Effect.Effect<never, SessionError.PersistenceError> =>
  Effect.fail(
    new SessionError.PersistenceError({
      reason: `discard of ${JSON.stringify(id)}: only the writer returned by create may discard its session`
    })
  )
