/**
 * The exclusive writer lock of a file-persisted session (PERS-01, DUR-06). The files of session
 * `<id>`'s lock, all next to its log:
 *
 * - `<id>.lock` names its owner `{host, pid, startTime, instanceId, token}`.
 * - `<id>.lock.<token>.tmp` is a file being prepared by the process that minted `token`. Lock and
 *   guard files are written there in full, then given their name in one step — `link` for a new
 *   lock (it fails when the name exists), `rename` for a takeover — so they are never observable
 *   empty or half-written.
 * - `<id>.lock.<key>.break` guards the takeover of the stale file whose key is `key` (its owner's
 *   token, or for an ownerless v1 leftover its inode, mtime and size). It names its owner too:
 *   only its holder replaces that stale file, and a guard left by a dead process is itself a stale
 *   file, taken over the same way under its own guard.
 *
 * A file of this host is stale when the process it names is gone: its pid does not run, or the
 * process running under that pid started at another time (another boot, or a reused pid such as a
 * restarted container's PID 1). A file of another host is never guessed stale (`breakLock` is the
 * operator's tool). Files that name no owner (v1 leftovers: an empty lock, an anonymous guard) are
 * stale once older than 60 s; younger ones may be being written right now.
 *
 * @internal
 */
import type { FileSystem, Path } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import { Clock, Data, Effect, Either, Option, Schedule, Schema } from "effect"
import { readdirSync, readFileSync, readlinkSync } from "node:fs"
import * as SessionError from "../../../SessionError.js"

const Token = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9-]{1,64}$/))

/** @internal */
export const LockOwner = Schema.Struct({
  host: Schema.String,
  pid: Schema.Int.pipe(Schema.positive()),
  /** Absent in v1 locks and where the platform cannot tell a process's start (then the pid alone decides). */
  startTime: Schema.optionalWith(Schema.String, { exact: true }),
  /**
   * The PID namespace the pid belongs to (Linux: `pid:[<inode>]`); absent in v1 locks and where it
   * cannot be read. A pid means something else in another namespace.
   */
  pidNamespace: Schema.optionalWith(Schema.String, { exact: true }),
  instanceId: Schema.String,
  token: Token
})

/** @internal */
export type LockOwner = typeof LockOwner.Type

const decodeOwner = Schema.decodeUnknownOption(Schema.parseJson(LockOwner))

/** DUR-06: an ownerless file younger than this may be being written now. @internal */
export const v1LeftoverAgeMillis = 60_000

/** A lock file larger than this is not one we wrote: it is not read (it names no owner). */
const maxLockBytes = 64 * 1024

/** Guards of guards: a chain this long means something other than crashes is at work. */
const maxTakeoverDepth = 8

/** @internal */
export interface LockFiles {
  readonly fs: FileSystem.FileSystem
  readonly path: Path.Path
  readonly directory: string
}

/** How the lock protocol tells whether a process of this host still runs (DUR-06). @internal */
export interface ProcessProbe {
  readonly isProcessAlive: (pid: number) => boolean
  /** The start of the process running under `pid` (boot and start time), `undefined` if it cannot tell. */
  readonly processStartTime: (pid: number) => string | undefined
  /**
   * Looks for the process `pid` of another PID namespace from here: `"Running"` or `"Gone"` when
   * that namespace is visible (this process is in an ancestor namespace), `"Invisible"` when it is not.
   */
  readonly inNamespace?: ((namespace: string, pid: number, startTime: string | undefined) => NamespaceLookup) | undefined
}

/** @internal */
export type NamespaceLookup = "Running" | "Gone" | "Invisible"

/** @internal */
export interface LockContext extends LockFiles, ProcessProbe {
  /** This process: who new locks and guards are written for. */
  readonly self: Omit<LockOwner, "token">
  /** Sync each lock or guard file before it gets its name, so that even a power loss cannot empty it. */
  readonly isDurable: boolean
}

/** What is found at a lock or guard path, read without following a symbolic link. */
type Entry =
  | { readonly _tag: "Missing" }
  | { readonly _tag: "Owned"; readonly owner: LockOwner; readonly ageMillis: number }
  | { readonly _tag: "Anonymous"; readonly key: string; readonly ageMillis: number; readonly isEmpty: boolean }
  | { readonly _tag: "Foreign"; readonly what: string; readonly isDirectory: boolean }

const missing: Entry = { _tag: "Missing" }

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

const tempPath = (files: LockFiles, id: string, token: string): string =>
  files.path.join(files.directory, `${id}.lock.${token}.tmp`)

const guardPath = (files: LockFiles, id: string, key: string): string =>
  files.path.join(files.directory, `${id}.lock.${key}.break`)

/** `<id>.lock.<token>.tmp|break`: a token has no dots, so another id's files never match as this id's. */
const leftoverName = /^(.+)\.lock\.([A-Za-z0-9-]{1,64})\.(tmp|break)$/

/** @internal */
export const describeOwner = (owner: LockOwner): string =>
  `process ${owner.pid} on host ${JSON.stringify(owner.host)} (instance ${JSON.stringify(owner.instanceId)})`

// --- Process identity (DUR-06) ---

let cachedBootId: string | undefined | null = null

const bootId = (): string | undefined => {
  if (cachedBootId === null) {
    try {
      cachedBootId = readFileSync("/proc/sys/kernel/random/boot_id", "latin1").trim() || undefined
    } catch {
      cachedBootId = undefined
    }
  }
  return cachedBootId
}

/**
 * DUR-06 on Linux: `<boot id>:<start time>`, the start time being field 22 of `/proc/<pid>/stat`
 * (clock ticks since boot). `undefined` when the process is gone or there is no `/proc`.
 *
 * @internal
 */
export const procStartTime = (pid: number): string | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1")
    // Field 2 is the command in parentheses and may hold anything; field 3 follows the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    const ticks = fields[22 - 3]
    if (ticks === undefined || !/^\d+$/.test(ticks)) return undefined
    return `${bootId() ?? "unknown-boot"}:${ticks}`
  } catch {
    return undefined
  }
}

/** Clock ticks per second in `/proc/<pid>/stat` (the kernel's USER_HZ, 100 on Linux). */
const ticksPerSecond = 100

/**
 * When a process started, from its {@link procStartTime}, for people (SEC-07: the operator CLI
 * names the process it refuses to break the lock of): `undefined` when the start time is of another
 * boot or not of this form.
 *
 * @internal
 */
export const startTimeMillis = (startTime: string): number | undefined => {
  const colon = startTime.lastIndexOf(":")
  const ticks = startTime.slice(colon + 1)
  if (colon < 0 || startTime.slice(0, colon) !== bootId() || !/^\d+$/.test(ticks)) return undefined
  try {
    const btime = /^btime (\d+)$/m.exec(readFileSync("/proc/stat", "latin1"))
    return btime === null ? undefined : Number(btime[1]) * 1000 + Math.round((Number(ticks) * 1000) / ticksPerSecond)
  } catch {
    return undefined
  }
}

/**
 * This process's PID namespace (Linux: the target of `/proc/self/ns/pid`), `undefined` elsewhere.
 *
 * @internal
 */
export const procPidNamespace = (): string | undefined => {
  try {
    return readlinkSync("/proc/self/ns/pid")
  } catch {
    return undefined
  }
}

/** The pid a process of `/proc` has in its own (innermost) namespace: the last `NSpid` field. */
const innermostPid = (procPid: string): number | undefined => {
  const status = readFileSync(`/proc/${procPid}/status`, "latin1")
  const line = status.split("\n").find((l) => l.startsWith("NSpid:"))
  const last = line?.trim().split(/\s+/).pop()
  return last === undefined || !/^\d+$/.test(last) ? undefined : Number(last)
}

/**
 * DUR-06 across PID namespaces on Linux: the processes of `/proc` that live in `namespace`, if any
 * are visible from here, and among them the one whose own pid is `pid` (with `startTime`, when the
 * lock recorded one; the start time counts from boot, the same in every namespace).
 *
 * @internal
 */
export const procInNamespace = (namespace: string, pid: number, startTime: string | undefined): NamespaceLookup => {
  let visible = false
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readlinkSync(`/proc/${entry}/ns/pid`) !== namespace) continue
      visible = true
      if (innermostPid(entry) !== pid) continue
      if (startTime === undefined || procStartTime(Number(entry)) === startTime) return "Running"
    } catch {
      // the process ended while we looked, or is not ours to inspect
    }
  }
  return visible ? "Gone" : "Invisible"
}

/**
 * Whether a process of this host is running (signal 0 probes without signalling).
 *
 * @internal
 */
export const processIsAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as { readonly code?: unknown }).code === "EPERM"
  }
}

/** @internal */
export type Liveness = "Running" | "Gone" | "Elsewhere"

/**
 * DUR-06, PKG-04: whether the process a lock or lease names still runs, as seen from `host`. A
 * process of another host is never judged (`Elsewhere`). A probe that throws cannot tell, and must
 * not let us steal a lock: the process counts as running.
 *
 * @internal
 */
export const processLiveness = (
  probe: ProcessProbe,
  self: { readonly host: string; readonly pidNamespace?: string | undefined },
  owner: {
    readonly host: string
    readonly pid: number
    readonly startTime?: string | undefined
    readonly pidNamespace?: string | undefined
  }
): Liveness => {
  if (owner.host !== self.host) return "Elsewhere"
  try {
    // A pid of another PID namespace is judged in that namespace when it is visible from here
    // (PERS-01: a pid of ours that happens to equal the owner's says nothing about the owner). When
    // it is not (a sibling namespace, or one that is gone, as after a container restart) the pid and
    // start time are judged as seen here, which lets a restarted container's PID 1 take over its own
    // stale lock; processes of sibling PID namespaces sharing a store need distinct host names.
    const namespace = owner.pidNamespace
    if (
      namespace !== undefined && self.pidNamespace !== undefined && namespace !== self.pidNamespace &&
      probe.inNamespace !== undefined
    ) {
      const found = probe.inNamespace(namespace, owner.pid, owner.startTime)
      if (found !== "Invisible") return found
    }
    if (!probe.isProcessAlive(owner.pid)) return "Gone"
    // A v1 lock, or one written where start times cannot be read: the pid alone decides.
    if (owner.startTime === undefined) return "Running"
    const current = probe.processStartTime(owner.pid)
    return current === undefined || current === owner.startTime ? "Running" : "Gone"
  } catch {
    return "Running"
  }
}

const livenessOf = (ctx: LockContext, owner: LockOwner): Liveness => processLiveness(ctx, ctx.self, owner)

// --- Reading and writing lock files ---

const fileTypeName = (type: FileSystem.File.Type): string =>
  type === "Directory" ? "a directory" : `a file of type ${type}`

/** Reads `file` without following a symbolic link, and without reading what is not a regular file. */
const inspect = (files: LockFiles, file: string): Effect.Effect<Entry, SessionError.PersistenceError> =>
  Effect.gen(function*() {
    const link = yield* Effect.either(files.fs.readLink(file))
    if (Either.isRight(link)) {
      return { _tag: "Foreign", what: `a symbolic link to ${JSON.stringify(link.right)}`, isDirectory: false } as const
    }
    if (isNotFound(link.left)) return missing
    const info = yield* files.fs.stat(file)
    if (info.type !== "File") {
      return { _tag: "Foreign", what: fileTypeName(info.type), isDirectory: info.type === "Directory" } as const
    }
    const now = yield* Clock.currentTimeMillis
    const mtime = Option.match(info.mtime, { onNone: () => now, onSome: (date) => date.getTime() })
    const ageMillis = now - mtime
    const content = info.size > maxLockBytes ? "" : yield* files.fs.readFileString(file)
    const owner = decodeOwner(content)
    if (Option.isSome(owner)) return { _tag: "Owned", owner: owner.value, ageMillis } as const
    const inode = Option.getOrElse(info.ino, () => 0)
    return {
      _tag: "Anonymous",
      key: `v1-${inode}-${mtime}-${info.size}`.slice(0, 64),
      ageMillis,
      isEmpty: Number(info.size) === 0
    } as const
  }).pipe(
    Effect.catchIf(isNotFound, () => Effect.succeed(missing)),
    Effect.mapError(persistenceError(`reading ${file}`))
  )

/** The key a guard names: which version of a file it protects (`undefined`: nothing to protect). */
const keyOf = (entry: Entry): string | undefined =>
  entry._tag === "Owned" ? entry.owner.token : entry._tag === "Anonymous" ? entry.key : undefined

const newOwner = (ctx: LockContext): LockOwner => ({ ...ctx.self, token: globalThis.crypto.randomUUID() })

/** Syncs a file written by path (its data reaches the disk before the file gets another name). */
const syncFile = (ctx: LockContext, file: string) =>
  Effect.scoped(Effect.flatMap(ctx.fs.open(file, { flag: "r" }), (handle) => handle.sync))

/**
 * Writes `owner` in full to its own temporary file, created exclusively (`wx`: the token is fresh,
 * so the name is new), and syncs it when durable. CORE-09's `writeFileString(…, { flag: "wx" })`
 * creates the temporary file, never the lock itself: a lock created that way would exist, empty,
 * before its content is written, and a reader seeing it then could only respect it as an unknown
 * writer for 60 s (DUR-06 forbids an observable empty lock) — the lock gets its name by `link`.
 */
const writeTemp = (ctx: LockContext, file: string, owner: LockOwner) =>
  ctx.fs.writeFileString(file, JSON.stringify(owner), { flag: "wx" }).pipe(
    Effect.zipRight(ctx.isDurable ? syncFile(ctx, file) : Effect.void),
    Effect.mapError(persistenceError(`writing ${file}`))
  )

const removeQuietly = (files: LockFiles, file: string) => Effect.ignore(files.fs.remove(file))

/** Runs `use` with `owner` written to its temp file; the temp name is removed afterwards, whatever happened. */
const withPrepared = <A, E>(
  ctx: LockContext,
  id: string,
  owner: LockOwner,
  use: (temp: string) => Effect.Effect<A, E>
): Effect.Effect<A, E | SessionError.PersistenceError> => {
  const temp = tempPath(ctx, id, owner.token)
  return writeTemp(ctx, temp, owner).pipe(Effect.zipRight(use(temp)), Effect.ensuring(removeQuietly(ctx, temp)))
}

/** Gives the complete `temp` the name `file` unless that name exists (`false` then): `link` never replaces. */
const linkTo = (ctx: LockContext, temp: string, file: string) =>
  ctx.fs.link(temp, file).pipe(
    Effect.as(true),
    Effect.catchIf(isAlreadyExists, () => Effect.succeed(false)),
    Effect.mapError(persistenceError(`creating ${file}`))
  )

// --- Takeover ---

const locked = (id: string, holder: string) => new SessionError.SessionLocked({ id, holder })

/** A stale lock or guard: the key its guard is named after, and who left it (for warnings). */
interface Stale {
  readonly key: string
  readonly left: string
}

type Role = "lock" | "guard"

/**
 * DUR-06: what may be done about the file found at `file`. `None` when it is gone (start over);
 * `SessionLocked` when it belongs to a live writer, another host, or may still be being written.
 */
const judge = (
  ctx: LockContext,
  id: string,
  file: string,
  entry: Entry,
  role: Role
): Effect.Effect<Option.Option<Stale>, SessionError.SessionLocked> => {
  switch (entry._tag) {
    case "Missing":
      return Effect.succeed(Option.none())
    case "Foreign":
      return Effect.fail(locked(
        id,
        `${file} is ${entry.what}, not a ${role} file of effect-agent; it is never followed or replaced — ` +
          "if no writer holds the session, clear it with FileSessionPersistence.breakLock"
      ))
    case "Owned": {
      if (livenessOf(ctx, entry.owner) !== "Gone") {
        return Effect.fail(locked(
          id,
          role === "lock"
            ? describeOwner(entry.owner)
            : `${describeOwner(entry.owner)}, which is taking over a stale lock (guard file ${file}; ` +
              "if no process is doing so, break the lock)"
        ))
      }
      return Effect.succeed(Option.some({
        key: entry.owner.token,
        left: `${describeOwner(entry.owner)}, which is no longer running`
      }))
    }
    case "Anonymous": {
      const what = `the ${role} file ${file} ${entry.isEmpty ? "is empty" : "does not name a valid owner"}`
      if (entry.ageMillis < v1LeftoverAgeMillis) {
        return Effect.fail(locked(
          id,
          `an unknown writer (${what}: it may be being written by an older version, so it is respected ` +
            "until it is 60 s old, then taken over; or break the lock)"
        ))
      }
      return Effect.succeed(Option.some({ key: entry.key, left: `a crashed writer (${what} and is over 60 s old)` }))
    }
  }
}

/**
 * Replaces the stale file `target`, whose key is `staleKey`, with the complete file `replacement`:
 * under the guard of `staleKey` nobody else replaces that file and nobody creates one in its place,
 * so if it still has that key the rename is the only change to it. `false` when it changed
 * meanwhile or the guard moved under us (the caller starts over).
 */
const replaceStale = (
  ctx: LockContext,
  id: string,
  target: string,
  staleKey: string,
  replacement: string,
  depth: number
): Effect.Effect<boolean, SessionError.SessionLocked | SessionError.PersistenceError> =>
  Effect.gen(function*() {
    const guard = guardPath(ctx, id, staleKey)
    const held = yield* holdGuard(ctx, id, guard, depth)
    if (Option.isNone(held)) return false
    return yield* Effect.gen(function*() {
      if (keyOf(yield* inspect(ctx, target)) !== staleKey) return false
      yield* ctx.fs.rename(replacement, target).pipe(Effect.mapError(persistenceError(`replacing ${target}`)))
      return true
    }).pipe(Effect.ensuring(releaseGuard(ctx, guard, held.value)))
  })

/** Takes the guard file `guard` (taking over one left by a dead process); `None`: start over. */
const holdGuard = (
  ctx: LockContext,
  id: string,
  guard: string,
  depth: number
): Effect.Effect<Option.Option<string>, SessionError.SessionLocked | SessionError.PersistenceError> => {
  const owner = newOwner(ctx)
  return withPrepared(ctx, id, owner, (temp) =>
    Effect.gen(function*() {
      if (yield* linkTo(ctx, temp, guard)) return Option.some(owner.token)
      const stale = yield* judge(ctx, id, guard, yield* inspect(ctx, guard), "guard")
      if (Option.isNone(stale)) return Option.none()
      if (depth >= maxTakeoverDepth) {
        return yield* locked(id, `a chain of ${depth} interrupted takeovers ending at ${guard}; break the lock`)
      }
      if (!(yield* replaceStale(ctx, id, guard, stale.value.key, temp, depth + 1))) return Option.none()
      yield* Effect.logWarning(
        `effect-agent: took over the guard file ${guard} of session ${JSON.stringify(id)} from ${stale.value.left}`
      )
      return Option.some(owner.token)
    }))
}

/** Removes our guard; never fails (a guard left behind is swept once we are gone). */
const releaseGuard = (ctx: LockContext, guard: string, token: string): Effect.Effect<void> =>
  inspect(ctx, guard).pipe(
    Effect.flatMap((entry) =>
      entry._tag === "Owned" && entry.owner.token === token ? ctx.fs.remove(guard) : Effect.void
    ),
    Effect.ignore
  )

/**
 * Takes the lock of session `id`, or fails `SessionLocked` at once with its holder. Not
 * interruptible in the middle: run it as the acquire of an `acquireRelease`.
 *
 * @internal
 */
export const acquire = (
  ctx: LockContext,
  id: string
): Effect.Effect<LockOwner, SessionError.SessionLocked | SessionError.PersistenceError> =>
  attemptLock(ctx, id).pipe(
    // CORE-09: an attempt that found the lock changing under it looks again, at once, up to 3 times
    Effect.retry({ schedule: Schedule.recurs(3), while: (error) => error._tag === "LockChanged" }),
    Effect.catchTag("LockChanged", () => Effect.fail(locked(id, "a writer that keeps changing")))
  )

/** The lock or guard changed between two looks (taken, released, replaced): look again. */
class LockChanged extends Data.TaggedError("LockChanged") {}

/** One attempt at the lock: ours, `SessionLocked` with its holder, or `LockChanged` under us. */
const attemptLock = (
  ctx: LockContext,
  id: string
): Effect.Effect<LockOwner, SessionError.SessionLocked | SessionError.PersistenceError | LockChanged> => {
  const file = lockPath(ctx, id)
  const owner = newOwner(ctx)
  const taken = withPrepared(ctx, id, owner, (temp) =>
    Effect.gen(function*() {
      if (yield* linkTo(ctx, temp, file)) return Option.some(false)
      const stale = yield* judge(ctx, id, file, yield* inspect(ctx, file), "lock")
      if (Option.isNone(stale)) return Option.none()
      if (!(yield* replaceStale(ctx, id, file, stale.value.key, temp, 0))) return Option.none()
      yield* Effect.logWarning(
        `effect-agent: took over the lock of session ${JSON.stringify(id)} from ${stale.value.left}`
      )
      return Option.some(true)
    }))
  return Effect.flatMap(taken, (outcome) => {
    if (Option.isNone(outcome)) return Effect.fail(new LockChanged())
    // A crash left this lock stale: it may have left temp and guard files of this id too.
    return outcome.value ? Effect.as(sweepQuietly(ctx, id), owner) : Effect.succeed(owner)
  })
}

/**
 * Removes the lock if it is still ours. Never fails: a lock that cannot be removed is reported by
 * a warning (an operator can break it).
 *
 * @internal
 */
export const release = (ctx: LockContext, id: string, owner: LockOwner): Effect.Effect<void> => {
  const file = lockPath(ctx, id)
  return inspect(ctx, file).pipe(
    Effect.flatMap((entry) => {
      if (entry._tag === "Missing") return Effect.void
      if (entry._tag === "Owned" && entry.owner.token === owner.token) {
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

// --- Leftovers ---

interface Leftover {
  readonly name: string
  readonly id: string
  readonly key: string
  readonly kind: "tmp" | "break"
}

const leftoversIn = (names: ReadonlyArray<string>, only: string | undefined): Array<Leftover> => {
  const found: Array<Leftover> = []
  for (const name of names) {
    const match = leftoverName.exec(name)
    if (match === null) continue
    const [, id = "", key = "", kind] = match
    if (only !== undefined && id !== only) continue
    found.push({ name, id, key, kind: kind === "tmp" ? "tmp" : "break" })
  }
  return found
}

const listDirectory = (files: LockFiles) =>
  files.fs.readDirectory(files.directory).pipe(
    Effect.catchIf(isNotFound, () => Effect.succeed<Array<string>>([])),
    Effect.mapError(persistenceError(`listing ${files.directory}`))
  )

/**
 * DUR-06: whether a leftover may go. A guard must protect nothing any more — no lock or guard has
 * its key, and none ever will (keys are not reused). A file that names its writer goes when that
 * writer is gone: a live one keeps it however long it is paused (it still needs its temp file). A
 * file of another host, or one that names nobody, goes once over 60 s old (then, at worst, a paused
 * writer's own attempt fails; nobody gets a lock wrongly).
 */
const isRemovable = (ctx: LockContext, leftover: Leftover, entry: Entry, keysInUse: ReadonlySet<string>): boolean => {
  if (entry._tag === "Missing" || entry._tag === "Foreign") return false
  if (leftover.kind === "break" && keysInUse.has(leftover.key)) return false
  if (entry._tag === "Owned") {
    const liveness = livenessOf(ctx, entry.owner)
    if (liveness !== "Elsewhere") return liveness === "Gone"
  }
  return entry.ageMillis >= v1LeftoverAgeMillis
}

const sweepSession = (ctx: LockContext, id: string, leftovers: ReadonlyArray<Leftover>) =>
  Effect.gen(function*() {
    const entries = yield* Effect.forEach(leftovers, (leftover) =>
      Effect.map(inspect(ctx, ctx.path.join(ctx.directory, leftover.name)), (entry) => ({ leftover, entry })))
    const keysInUse = new Set<string>()
    for (const { entry, leftover } of entries) {
      const key = leftover.kind === "break" ? keyOf(entry) : undefined
      if (key !== undefined) keysInUse.add(key)
    }
    // Read after the guards: a key gone from the lock never comes back, so a late read only adds keys.
    const lockKey = keyOf(yield* inspect(ctx, lockPath(ctx, id)))
    if (lockKey !== undefined) keysInUse.add(lockKey)
    for (const { entry, leftover } of entries) {
      if (!isRemovable(ctx, leftover, entry, keysInUse)) continue
      yield* ctx.fs.remove(ctx.path.join(ctx.directory, leftover.name)).pipe(
        Effect.catchIf(isNotFound, () => Effect.void),
        Effect.mapError(persistenceError(`removing ${leftover.name}`))
      )
      yield* Effect.logInfo(`effect-agent: removed ${leftover.name}, left by an interrupted lock operation`)
    }
  })

/**
 * DUR-06: removes the temp and guard files that crashed lock operations left in the directory (of
 * session `only`, or of every session), where that is safe (see {@link isRemovable}).
 *
 * @internal
 */
export const sweep = (ctx: LockContext, only?: string): Effect.Effect<void, SessionError.PersistenceError> =>
  Effect.gen(function*() {
    const bySession = new Map<string, Array<Leftover>>()
    for (const leftover of leftoversIn(yield* listDirectory(ctx), only)) {
      const group = bySession.get(leftover.id)
      if (group === undefined) bySession.set(leftover.id, [leftover])
      else group.push(leftover)
    }
    for (const [id, leftovers] of bySession) yield* sweepSession(ctx, id, leftovers)
  })

/** A sweep that only warns: leftovers are clutter, never a reason to refuse a writer. @internal */
export const sweepQuietly = (ctx: LockContext, only?: string): Effect.Effect<void> =>
  sweep(ctx, only).pipe(
    Effect.catchAll((error) => Effect.logWarning(`effect-agent: could not clean up lock leftovers: ${error.reason}`))
  )

/** `<id>.lock`, the lock file of session `id`. */
const lockName = /^(.+)\.lock$/

/** Whether a lock found at start is one its writer can never release (DUR-06's judgement, read-only). */
const isAbandoned = (ctx: LockContext, entry: Entry): boolean =>
  entry._tag === "Owned"
    ? livenessOf(ctx, entry.owner) === "Gone"
    : entry._tag === "Anonymous" && entry.ageMillis >= v1LeftoverAgeMillis

/** Takes over the abandoned lock of `id` and releases it at once; a writer that got there first wins. */
const clearLock = (ctx: LockContext, id: string, file: string) =>
  Effect.flatMap(inspect(ctx, file), (entry) =>
    isAbandoned(ctx, entry)
      ? Effect.scoped(Effect.acquireRelease(acquire(ctx, id), (owner) => release(ctx, id, owner)))
      : Effect.void).pipe(
      Effect.catchTag("SessionLocked", () => Effect.void),
      Effect.catchAll((error) =>
        Effect.logWarning(
          `effect-agent: could not clear the stale lock of session ${JSON.stringify(id)}: ${error.reason}`
        )
      )
    )

/**
 * Removes the locks that crashed writers of this host left on any session of the directory, by the
 * same guarded takeover a resume performs (DUR-06), then a release — so a session nobody resumes
 * does not stay locked (issue 15). Locks of live writers, of other hosts, and young files that do
 * not name an owner are not touched. Never fails: what cannot be cleared is reported by a warning
 * and stays for the takeover at resume, or for an operator's break-lock.
 *
 * @internal
 */
export const clearStaleLocks = (ctx: LockContext): Effect.Effect<void> =>
  Effect.gen(function*() {
    for (const name of yield* listDirectory(ctx)) {
      const id = lockName.exec(name)?.[1]
      if (id === undefined) continue
      yield* clearLock(ctx, id, ctx.path.join(ctx.directory, name))
    }
  }).pipe(
    Effect.catchAll((error) => Effect.logWarning(`effect-agent: could not clear stale session locks: ${error.reason}`))
  )

// --- Operator ---

const describeEntry = (entry: Entry): string => {
  switch (entry._tag) {
    case "Owned":
      return describeOwner(entry.owner)
    case "Anonymous":
      return `an unknown writer (${entry.isEmpty ? "an empty lock file" : "a lock file naming no owner"})`
    case "Foreign":
      return `nobody (the lock path is ${entry.what})`
    case "Missing":
      return "nobody"
  }
}

/** Removes what is at `file` itself — a symbolic link is removed, never what it points to. */
const removeEntry = (files: LockFiles, file: string, entry: Entry) =>
  entry._tag === "Foreign" && entry.isDirectory
    ? Effect.fail(
      new SessionError.PersistenceError({
        reason: `${file} is a directory, not a lock file: effect-agent does not delete it; remove it yourself`
      })
    )
    : files.fs.remove(file).pipe(
      Effect.catchIf(isNotFound, () => Effect.void),
      Effect.mapError(persistenceError(`removing ${file}`))
    )

/**
 * Removes the lock of `id` whatever holds it or is at its path (a dangling symbolic link too, DUR-06),
 * and the guard and temp files of interrupted lock operations. Only for an operator who knows the
 * holder is gone.
 *
 * @internal
 */
export const breakLock = (files: LockFiles, id: string): Effect.Effect<void, SessionError.PersistenceError> =>
  Effect.gen(function*() {
    const file = lockPath(files, id)
    const entry = yield* inspect(files, file)
    if (entry._tag !== "Missing") {
      yield* Effect.logWarning(
        `effect-agent: breaking the lock of session ${JSON.stringify(id)} held by ${describeEntry(entry)}`
      )
      yield* removeEntry(files, file, entry)
    }
    for (const leftover of leftoversIn(yield* listDirectory(files), id)) {
      const path = files.path.join(files.directory, leftover.name)
      yield* removeEntry(files, path, yield* inspect(files, path))
    }
  })
