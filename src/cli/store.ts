/**
 * The store an operator command works on (CLI-01): exactly one of `--dir` (files), `--sqlite`
 * (a SQLite file) or `--postgres` (a URL). Read commands open it read-only — no directory or table
 * is created, nothing is migrated or swept, no lock is taken — and a store that does not exist is
 * an error, never created. The SQL drivers are loaded only when their flag is used.
 *
 * @internal
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { FileSystem, Path } from "@effect/platform"
import { Cause, Context, Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import type { Scope } from "effect"
import * as os from "node:os"
import * as FileSessionPersistence from "../FileSessionPersistence.js"
import * as fileLock from "../internal/storage/file/lock.js"
import * as sqlLease from "../internal/storage/sql/lease.js"
import { SqlNumber } from "../internal/storage/sql/log.js"
import type { SessionId } from "../Message.js"
import * as SessionError from "../SessionError.js"
import { SessionPersistence } from "../SessionPersistence.js"
import * as SqlSessionPersistence from "../SqlSessionPersistence.js"
import { UsageError } from "./errors.js"

/** The store flags as parsed. @internal */
export interface StoreFlags {
  readonly dir: Option.Option<string>
  readonly sqlite: Option.Option<string>
  readonly postgres: Option.Option<Redacted.Redacted>
}

/** `read`: nothing is created, changed or locked. `write`: the store is opened as a writer would. @internal */
export type Access = "read" | "write"

/**
 * Whether the writer that holds a lock still runs, as this host can tell (SEC-07, SEC-09): `Running`
 * is a process of this host found running under its pid with the start time the lock recorded;
 * `Gone` a lock the next writer takes over (its process of this host died, or its SQL lease
 * expired); `Unknown` a process of another host, or a lock that names no process.
 *
 * @internal
 */
export type Writer =
  | { readonly _tag: "Running"; readonly pid: number; readonly started: string }
  | { readonly _tag: "Gone" }
  | { readonly _tag: "Unknown" }

/** Who holds the writer lock of a session. @internal */
export interface LockHolder {
  /** For people: the holder as the lock names it, and what becomes of the lock. */
  readonly description: string
  readonly writer: Writer
}

/** An open store. @internal */
export interface Store {
  /** What was opened, for messages (a Postgres URL without its password). */
  readonly description: string
  readonly persistence: SessionPersistence["Type"]
  /** Who holds the writer lock of `id`, if anyone (read without taking or changing it). */
  readonly lockHolder: (id: SessionId) => Effect.Effect<Option.Option<LockHolder>, SessionError.PersistenceError>
  /** The backend's operator tool: removes the lock of `id`, whoever holds it. */
  readonly breakLock: (id: SessionId) => Effect.Effect<void, SessionError.PersistenceError>
  /**
   * DOC-05: where a backup of what `repair --truncate-at-corruption` drops goes, unless the
   * operator names a directory: beside the store (files, SQLite) or the current directory (Postgres).
   */
  readonly backupDirectory: string
  /** The backup's file name for `id` at `stamp`, so the backups of several stores in one directory differ. */
  readonly backupName: (id: SessionId, stamp: string) => string
}

const INSTANCE_ID = "effect-agent-cli"

type Chosen =
  | { readonly _tag: "Dir"; readonly directory: string }
  | { readonly _tag: "Sqlite"; readonly file: string }
  | { readonly _tag: "Postgres"; readonly url: Redacted.Redacted }

/** Exactly one of the three flags (CLI-01). @internal */
export const choose = (flags: StoreFlags): Either.Either<Chosen, UsageError> => {
  const chosen: Array<Chosen> = [
    ...Option.toArray(Option.map(flags.dir, (directory) => ({ _tag: "Dir", directory }) as const)),
    ...Option.toArray(Option.map(flags.sqlite, (file) => ({ _tag: "Sqlite", file }) as const)),
    ...Option.toArray(Option.map(flags.postgres, (url) => ({ _tag: "Postgres", url }) as const))
  ]
  if (chosen.length === 1) return Either.right(chosen[0]!)
  return Either.left(
    new UsageError({
      reason: chosen.length === 0
        ? "name the session store: one of --dir <directory>, --sqlite <file> or --postgres <url>"
        : "name one session store only: --dir, --sqlite and --postgres exclude each other"
    })
  )
}

const persistenceError = (what: string) => (error: unknown): SessionError.PersistenceError =>
  error instanceof SessionError.PersistenceError
    ? error
    : new SessionError.PersistenceError({
      reason: `${what}: ${error instanceof Error ? error.message : String(error)}`,
      cause: error
    })

const decodeOwner = Schema.decodeUnknownOption(Schema.parseJson(fileLock.LockOwner))

/** How this host tells whether a process runs: the lock protocol's own probe (DUR-06). */
const probe: fileLock.ProcessProbe = {
  isProcessAlive: fileLock.processIsAlive,
  processStartTime: fileLock.procStartTime,
  inNamespace: fileLock.procInNamespace
}

/** A process's start for people: its date when this host can tell it, else the start time as recorded. */
const describeStart = (startTime: string | undefined): string => {
  if (startTime === undefined) return "start time not recorded"
  const millis = fileLock.startTimeMillis(startTime)
  return millis === undefined ? `start time ${startTime}` : `started ${new Date(millis).toISOString()}`
}

/** SEC-07: whether the process a lock or lease names runs, judged as the lock protocol judges it (DUR-06). */
const writerOf = (owner: {
  readonly host: string
  readonly pid: number
  readonly startTime?: string | undefined
  readonly pidNamespace?: string | undefined
}): Writer => {
  const self = { host: os.hostname(), pidNamespace: fileLock.procPidNamespace() }
  switch (fileLock.processLiveness(probe, self, owner)) {
    case "Running":
      return { _tag: "Running", pid: owner.pid, started: describeStart(owner.startTime) }
    case "Gone":
      return { _tag: "Gone" }
    case "Elsewhere":
      return { _tag: "Unknown" }
  }
}

const unknownWriter: Writer = { _tag: "Unknown" }

/** Reads `<id>.lock` as it is (a symbolic link is described, never followed). */
const fileLockHolder = (directory: string, id: SessionId) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const file = path.join(directory, `${id}.lock`)
    const link = yield* Effect.either(fs.readLink(file))
    if (Either.isRight(link)) {
      return Option.some<LockHolder>({
        description: `a symbolic link to ${JSON.stringify(link.right)} at ${file}`,
        writer: unknownWriter
      })
    }
    const text = yield* fs.readFileString(file).pipe(
      Effect.map(Option.some),
      Effect.catchIf(fileLock.isNotFound, () => Effect.succeedNone)
    )
    return Option.map(text, (content): LockHolder => {
      const owner = decodeOwner(content)
      if (Option.isNone(owner)) {
        return { description: `an unknown writer (${file} names no owner)`, writer: unknownWriter }
      }
      const writer = writerOf(owner.value)
      const state = writer._tag === "Gone" ? ", no longer running: the next writer takes it over" : ""
      return { description: `${fileLock.describeOwner(owner.value)}${state}`, writer }
    })
  }).pipe(Effect.mapError(persistenceError(`reading the lock of session ${JSON.stringify(id)}`)))

const openFiles = (directory: string, access: Access) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const resolved = path.resolve(directory)
    const type = yield* fs.stat(resolved).pipe(
      Effect.map((info) => info.type),
      Effect.orElseSucceed(() => undefined)
    )
    if (type !== "Directory") {
      return yield* new SessionError.PersistenceError({
        reason: type === undefined
          ? `there is no session directory at ${resolved}`
          : `--dir ${resolved} is not a directory (a session store is a directory of session files)`
      })
    }
    const layer = FileSessionPersistence.layer({
      directory: resolved,
      instanceId: INSTANCE_ID,
      readOnly: access === "read"
    })
    const persistence = yield* Effect.map(
      Layer.build(layer.pipe(Layer.provide(Layer.succeedContext(Context.make(FileSystem.FileSystem, fs).pipe(
        Context.add(Path.Path, path)
      ))))),
      Context.get(SessionPersistence)
    )
    const withPlatform = <A, E>(effect: Effect.Effect<A, E, FileSystem.FileSystem | Path.Path>) =>
      effect.pipe(Effect.provideService(FileSystem.FileSystem, fs), Effect.provideService(Path.Path, path))
    return {
      description: `the session directory ${resolved}`,
      persistence,
      lockHolder: (id) => withPlatform(fileLockHolder(resolved, id)),
      breakLock: (id) => withPlatform(FileSessionPersistence.breakLock(id, { directory: resolved })),
      backupDirectory: resolved,
      // not `.jsonl` at the end: the store lists only `<id>.jsonl` files as sessions
      backupName: (id, stamp) => `${id}.jsonl.dropped-${stamp}`
    } satisfies Store
  })

/** A lease row of any schema version: the `holder_*` columns came with version 2 (PKG-04). */
const LeaseRow = Schema.Struct({
  session_id: Schema.String,
  holder: Schema.String,
  expires_at: SqlNumber,
  holder_host: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null }),
  holder_pid: Schema.optionalWith(Schema.NullOr(SqlNumber), { default: () => null }),
  holder_start: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null })
})

const decodeLeaseRows = Schema.decodeUnknown(Schema.Array(LeaseRow))

/**
 * Reads the lease row of `id` (`SELECT *`, so a database of schema version 1 is read too). SEC-07:
 * its holder runs when the lease is valid and names a running process of this host.
 */
const sqlLockHolder = (sql: SqlClient, id: SessionId) =>
  Effect.gen(function*() {
    const rows = yield* decodeLeaseRows(
      yield* sql.withoutTransforms()`SELECT * FROM effect_agent_leases WHERE session_id = ${id}`
    )
    const row = rows.find((candidate) => candidate.session_id === id)
    if (row === undefined) return Option.none<LockHolder>()
    const until = new Date(row.expires_at).toISOString()
    if (row.expires_at <= Date.now()) {
      return Option.some<LockHolder>({
        description: `${row.holder}, lease expired at ${until}: the next writer takes it over`,
        writer: { _tag: "Gone" }
      })
    }
    const owner = sqlLease.holderOfRow(row)
    const writer = owner === undefined ? unknownWriter : writerOf(owner)
    const state = writer._tag === "Gone" ? ", no longer running: the next writer takes it over" : ""
    return Option.some<LockHolder>({ description: `${row.holder}, lease valid until ${until}${state}`, writer })
  }).pipe(Effect.mapError(persistenceError(`reading the lease of session ${JSON.stringify(id)}`)))

const openSql = (
  description: string,
  client: Layer.Layer<SqlClient, unknown>,
  access: Access,
  backups: Pick<Store, "backupDirectory" | "backupName">
) =>
  Effect.gen(function*() {
    const built = yield* Layer.build(
      SqlSessionPersistence.layer({ instanceId: INSTANCE_ID, readOnly: access === "read" }).pipe(
        Layer.provideMerge(client)
      )
    ).pipe(Effect.mapError(persistenceError(`opening ${description}`)))
    const persistence = Context.get(built, SessionPersistence)
    const sql = Context.get(built, SqlClient)
    return {
      description,
      persistence,
      lockHolder: (id) => sqlLockHolder(sql, id),
      breakLock: (id) => Effect.provide(SqlSessionPersistence.breakLock(id), built),
      ...backups
    } satisfies Store
  })

const driver = <A>(name: string, load: () => Promise<A>) =>
  Effect.tryPromise({
    try: load,
    catch: (cause) =>
      new SessionError.PersistenceError({
        reason: `this store needs the package ${name}, which could not be loaded (${String(cause)}); install it`,
        cause
      })
  })

/** The first bytes of every SQLite database file (an empty file is an empty database). */
const sqliteMagic = "SQLite format 3\u0000"

/** SEC-09: a file that is not a SQLite database is refused in one line before the driver opens it. */
const checkSqliteHeader = (file: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const handle = yield* fs.open(file, { flag: "r" })
    const head = yield* handle.readAlloc(sqliteMagic.length)
    const text = Option.match(head, { onNone: () => "", onSome: (bytes) => new TextDecoder("latin1").decode(bytes) })
    if (text !== "" && text !== sqliteMagic) {
      return yield* new SessionError.PersistenceError({
        reason: `--sqlite ${file} is not a SQLite database (it does not start with the SQLite header)`
      })
    }
  }).pipe(
    Effect.scoped,
    Effect.catchTags({
      BadArgument: (error) => Effect.fail(persistenceError(`reading ${file}`)(error)),
      SystemError: (error) => Effect.fail(persistenceError(`reading ${file}`)(error))
    })
  )

/** The first line of what a cause says, without a stack. */
const causeText = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  return (error instanceof Error ? error.message : String(error)).split("\n")[0]!
}

/**
 * Whether `serve` may create the database at `resolved` (DOC-02): nothing is there and its
 * directory exists. Anything else that is not a file is refused in one line.
 */
const mayCreateSqlite = (fs: FileSystem.FileSystem, path: Path.Path, resolved: string) =>
  Effect.gen(function*() {
    const type = yield* fs.stat(resolved).pipe(Effect.map((info) => info.type), Effect.orElseSucceed(() => undefined))
    if (type !== undefined) {
      return yield* new SessionError.PersistenceError({ reason: `--sqlite ${resolved} is not a file` })
    }
    const parent = path.dirname(resolved)
    const isDirectory = yield* fs.stat(parent).pipe(
      Effect.map((info) => info.type === "Directory"),
      Effect.orElseSucceed(() => false)
    )
    if (!isDirectory) {
      return yield* new SessionError.PersistenceError({
        reason: `cannot create the SQLite database ${resolved}: there is no directory ${parent}`
      })
    }
  })

const openSqlite = (file: string, access: Access, create: boolean) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const resolved = path.resolve(file)
    // SQLite creates a missing file: only `serve` may (DOC-02); the session commands never create a store.
    const isFile = yield* fs.stat(resolved).pipe(
      Effect.map((info) => info.type === "File"),
      Effect.orElseSucceed(() => false)
    )
    if (!isFile && create) {
      yield* mayCreateSqlite(fs, path, resolved)
    } else if (!isFile) {
      return yield* new SessionError.PersistenceError({ reason: `there is no SQLite database at ${resolved}` })
    } else {
      yield* checkSqliteHeader(resolved)
    }
    const sqlite = yield* driver("@effect/sql-sqlite-node", () => import("@effect/sql-sqlite-node"))
    const description = `the SQLite database ${resolved}`
    // the driver reports a database it cannot open (permissions, a damaged file) by throwing: a defect
    const client = sqlite.SqliteClient.layer({ filename: resolved }).pipe(
      Layer.catchAllCause((cause) =>
        Layer.fail(
          new SessionError.PersistenceError({ reason: `opening ${description}: ${causeText(cause)}`, cause })
        )
      )
    )
    return yield* openSql(description, client, access, {
      backupDirectory: path.dirname(resolved),
      backupName: (id, stamp) => `${path.basename(resolved)}.${id}.dropped-${stamp}.jsonl`
    })
  })

/** The URL without its password, for messages. */
const describeUrl = (url: string): string => {
  try {
    const parsed = new URL(url)
    if (parsed.password !== "") parsed.password = "***"
    return `the Postgres database ${parsed.toString()}`
  } catch {
    return "the Postgres database (an unparsable URL)"
  }
}

const openPostgres = (url: Redacted.Redacted, access: Access) =>
  Effect.gen(function*() {
    const pg = yield* driver("@effect/sql-pg", () => import("@effect/sql-pg"))
    const path = yield* Path.Path
    return yield* openSql(describeUrl(Redacted.value(url)), pg.PgClient.layer({ url, maxConnections: 2 }), access, {
      backupDirectory: path.resolve("."),
      backupName: (id, stamp) => `${id}.dropped-${stamp}.jsonl`
    })
  })

/**
 * Opens the store the flags name, for as long as the Scope is open.
 *
 * @internal
 */
export const open = (
  flags: StoreFlags,
  access: Access,
  options?: {
    /** DOC-02: a missing SQLite file is created (as `serve` does); never for the session commands. */
    readonly createSqlite?: boolean | undefined
  }
): Effect.Effect<Store, UsageError | SessionError.PersistenceError, Scope.Scope | FileSystem.FileSystem | Path.Path> =>
  Effect.flatMap(choose(flags), (chosen) => {
    switch (chosen._tag) {
      case "Dir":
        return openFiles(chosen.directory, access)
      case "Sqlite":
        return openSqlite(chosen.file, access, options?.createSqlite === true && access === "write")
      case "Postgres":
        return openPostgres(chosen.url, access)
    }
  })
