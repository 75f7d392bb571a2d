/**
 * The exclusive writer lock of a file-persisted session (PERS-01): `<id>.lock` next to the log,
 * created with exclusive-create and holding its owner `{host, pid, instanceId, token}`.
 *
 * A lock whose owner is on this host and no longer running is taken over atomically: the new
 * owner is written to a temp file and renamed over the lock, while a guard file named after the
 * stale token (itself exclusive-created) makes sure only one contender replaces that stale lock.
 * A lock from another host is never guessed stale; `breakLock` is the operator's tool.
 *
 * @internal
 */
import type { FileSystem, Path } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import { Effect, Option, Schema } from "effect"
import * as SessionError from "../SessionError.js"

/** @internal */
export const LockOwner = Schema.Struct({
  host: Schema.String,
  pid: Schema.Int.pipe(Schema.positive()),
  instanceId: Schema.String,
  token: Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9-]{1,64}$/))
})

/** @internal */
export type LockOwner = typeof LockOwner.Type

const decodeOwner = Schema.decodeUnknownOption(Schema.parseJson(LockOwner))

/** @internal */
export interface LockFiles {
  readonly fs: FileSystem.FileSystem
  readonly path: Path.Path
  readonly directory: string
}

/** @internal */
export interface LockContext extends LockFiles {
  /** This process: who new locks are written for. */
  readonly self: Omit<LockOwner, "token">
  readonly isProcessAlive: (pid: number) => boolean
}

type Holder =
  | { readonly _tag: "Missing" }
  | { readonly _tag: "Owner"; readonly owner: LockOwner }
  | { readonly _tag: "Unreadable"; readonly content: string }

/** @internal */
export const isNotFound = (error: PlatformError): boolean =>
  error._tag === "SystemError" && error.reason === "NotFound"

/** @internal */
export const isAlreadyExists = (error: PlatformError): boolean =>
  error._tag === "SystemError" && error.reason === "AlreadyExists"

/** Translates a platform error at the module boundary. @internal */
export const persistenceError = (what: string) => (error: PlatformError): SessionError.PersistenceError =>
  new SessionError.PersistenceError({ reason: `${what}: ${error.message}`, cause: error })

/** @internal */
export const lockPath = (files: LockFiles, id: string): string => files.path.join(files.directory, `${id}.lock`)

/** @internal */
export const describeOwner = (owner: LockOwner): string =>
  `process ${owner.pid} on host ${JSON.stringify(owner.host)} (instance ${JSON.stringify(owner.instanceId)})`

const readHolder = (files: LockFiles, file: string): Effect.Effect<Holder, SessionError.PersistenceError> =>
  files.fs.readFileString(file).pipe(
    Effect.map((content): Holder => {
      const owner = decodeOwner(content)
      return Option.isSome(owner) ? { _tag: "Owner", owner: owner.value } : { _tag: "Unreadable", content }
    }),
    Effect.catchIf(isNotFound, () => Effect.succeed<Holder>({ _tag: "Missing" })),
    Effect.mapError(persistenceError(`reading the lock file ${file}`))
  )

/**
 * Creates `file` with `content` unless it exists (`false` then). A file this call created but
 * could not fill is removed, so a failed attempt never leaves an empty lock behind.
 */
const createExclusive = (
  files: LockFiles,
  file: string,
  content: string
): Effect.Effect<boolean, SessionError.PersistenceError> =>
  Effect.scoped(
    Effect.flatMap(files.fs.open(file, { flag: "wx" }), (handle) =>
      handle.writeAll(new TextEncoder().encode(content)).pipe(
        Effect.onError(() => Effect.ignore(files.fs.remove(file)))
      ))
  ).pipe(
    Effect.as(true),
    Effect.catchIf(isAlreadyExists, () => Effect.succeed(false)),
    Effect.mapError(persistenceError(`creating ${file}`))
  )

const locked = (id: string, holder: string) => new SessionError.SessionLocked({ id, holder })

const removeQuietly = (files: LockFiles, file: string) => Effect.ignore(files.fs.remove(file))

/**
 * Replaces the lock of a dead owner with ours. `None` when the lock changed meanwhile (the caller
 * starts over).
 */
const takeOver = (
  ctx: LockContext,
  id: string,
  file: string,
  stale: LockOwner
): Effect.Effect<Option.Option<LockOwner>, SessionError.SessionLocked | SessionError.PersistenceError> => {
  const owner: LockOwner = { ...ctx.self, token: globalThis.crypto.randomUUID() }
  const temp = ctx.path.join(ctx.directory, `${id}.lock.${owner.token}.tmp`)
  const guard = ctx.path.join(ctx.directory, `${id}.lock.${stale.token}.break`)
  return Effect.gen(function*() {
    yield* createExclusive(ctx, temp, JSON.stringify(owner))
    const isGuarded = yield* createExclusive(ctx, guard, JSON.stringify(owner))
    if (!isGuarded) {
      return yield* locked(
        id,
        `another writer is taking over the stale lock of ${describeOwner(stale)} (guard file ${guard}; ` +
          "if no process is doing so, break the lock)"
      )
    }
    return yield* Effect.gen(function*() {
      // Under the guard nobody else can replace this stale lock, and nobody can create one while it
      // exists: if it still holds the stale token, the rename below is the only change to it.
      const current = yield* readHolder(ctx, file)
      if (current._tag !== "Owner" || current.owner.token !== stale.token) return Option.none()
      yield* ctx.fs.rename(temp, file).pipe(Effect.mapError(persistenceError(`taking over the lock ${file}`)))
      yield* Effect.logWarning(
        `effect-agent: took over the lock of session ${JSON.stringify(id)} from ${describeOwner(stale)}, ` +
          "which is no longer running"
      )
      return Option.some(owner)
    }).pipe(Effect.ensuring(removeQuietly(ctx, guard)))
  }).pipe(Effect.ensuring(removeQuietly(ctx, temp)))
}

const isAlive = (ctx: LockContext, pid: number): boolean => {
  try {
    return ctx.isProcessAlive(pid)
  } catch {
    // A probe that cannot tell must not let us steal a lock.
    return true
  }
}

/**
 * Takes the lock of session `id`, or fails `SessionLocked` at once with its holder. Not
 * interruptible in the middle: run it as the acquire of an `acquireRelease`.
 *
 * @internal
 */
export const acquire = (
  ctx: LockContext,
  id: string
): Effect.Effect<LockOwner, SessionError.SessionLocked | SessionError.PersistenceError> => {
  const file = lockPath(ctx, id)
  type Attempt = Effect.Effect<LockOwner, SessionError.SessionLocked | SessionError.PersistenceError>
  const attempt = (retries: number): Attempt =>
    Effect.gen(function*() {
      const owner: LockOwner = { ...ctx.self, token: globalThis.crypto.randomUUID() }
      if (yield* createExclusive(ctx, file, JSON.stringify(owner))) return owner
      const holder = yield* readHolder(ctx, file)
      const again = (why: string) =>
        retries > 0 ? attempt(retries - 1) : Effect.fail(locked(id, `a writer that keeps changing (${why})`))
      switch (holder._tag) {
        case "Missing":
          return yield* again("the lock was released while we looked")
        case "Unreadable":
          return yield* locked(id, `an unknown writer (the lock file ${file} does not name a valid owner)`)
        case "Owner": {
          const stale = holder.owner
          if (stale.host !== ctx.self.host || isAlive(ctx, stale.pid)) {
            return yield* locked(id, describeOwner(stale))
          }
          const taken = yield* takeOver(ctx, id, file, stale)
          return Option.isSome(taken) ? taken.value : yield* again("the stale lock changed while we took it over")
        }
      }
    })
  return attempt(3)
}

/**
 * Removes the lock if it is still ours. Never fails: a lock that cannot be removed is reported by
 * a warning (an operator can break it).
 *
 * @internal
 */
export const release = (ctx: LockContext, id: string, owner: LockOwner): Effect.Effect<void> => {
  const file = lockPath(ctx, id)
  return readHolder(ctx, file).pipe(
    Effect.flatMap((holder) => {
      if (holder._tag === "Missing") return Effect.void
      if (holder._tag === "Owner" && holder.owner.token === owner.token) {
        return ctx.fs.remove(file).pipe(
          Effect.catchIf(isNotFound, () => Effect.void),
          Effect.mapError(persistenceError(`removing the lock ${file}`))
        )
      }
      return Effect.logWarning(
        `effect-agent: the lock of session ${JSON.stringify(id)} was replaced while we held it; left in place`
      )
    }),
    Effect.catchAll((error) => Effect.logWarning(`effect-agent: could not release a session lock: ${error.reason}`))
  )
}

/**
 * Removes the lock of `id` whoever holds it, and the guard or temp files of interrupted takeovers.
 * Only for an operator who knows the holder is gone.
 *
 * @internal
 */
export const breakLock = (files: LockFiles, id: string): Effect.Effect<void, SessionError.PersistenceError> =>
  Effect.gen(function*() {
    const file = lockPath(files, id)
    const holder = yield* readHolder(files, file)
    if (holder._tag !== "Missing") {
      yield* Effect.logWarning(
        `effect-agent: breaking the lock of session ${JSON.stringify(id)} held by ` +
          (holder._tag === "Owner" ? describeOwner(holder.owner) : "an unknown writer")
      )
      yield* files.fs.remove(file).pipe(
        Effect.catchIf(isNotFound, () => Effect.void),
        Effect.mapError(persistenceError(`removing the lock ${file}`))
      )
    }
    const names = yield* files.fs.readDirectory(files.directory).pipe(
      Effect.catchIf(isNotFound, () => Effect.succeed<Array<string>>([])),
      Effect.mapError(persistenceError(`listing ${files.directory}`))
    )
    const prefix = `${id}.lock.`
    for (const name of names) {
      if (!name.startsWith(prefix)) continue
      // Only `<id>.lock.<token>.break|tmp`: a token has no dots, so other ids' files never match.
      if (!/^[A-Za-z0-9-]{1,64}\.(break|tmp)$/.test(name.slice(prefix.length))) continue
      yield* files.fs.remove(files.path.join(files.directory, name)).pipe(
        Effect.catchIf(isNotFound, () => Effect.void),
        Effect.mapError(persistenceError(`removing ${name}`))
      )
    }
  })
