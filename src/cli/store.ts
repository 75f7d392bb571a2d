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
import { Context, Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import type { Scope } from "effect"
import * as os from "node:os"
import * as FileSessionPersistence from "../FileSessionPersistence.js"
import * as fileLock from "../internal/fileLock.js"
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

/** An open store. @internal */
export interface Store {
  /** What was opened, for messages (a Postgres URL without its password). */
  readonly description: string
  readonly persistence: SessionPersistence["Type"]
  /** Who holds the writer lock of `id`, if anyone (read without taking or changing it). */
  readonly lockHolder: (id: SessionId) => Effect.Effect<Option.Option<string>, SessionError.PersistenceError>
  /** The backend's operator tool: removes the lock of `id`, whoever holds it. */
  readonly breakLock: (id: SessionId) => Effect.Effect<void, SessionError.PersistenceError>
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

/** Reads `<id>.lock` as it is (a symbolic link is described, never followed). */
const fileLockHolder = (directory: string, id: SessionId) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const file = path.join(directory, `${id}.lock`)
    const link = yield* Effect.either(fs.readLink(file))
    if (Either.isRight(link)) return Option.some(`a symbolic link to ${JSON.stringify(link.right)} at ${file}`)
    const text = yield* fs.readFileString(file).pipe(
      Effect.map(Option.some),
      Effect.catchIf(fileLock.isNotFound, () => Effect.succeedNone)
    )
    return Option.map(text, (content) => {
      const owner = decodeOwner(content)
      if (Option.isNone(owner)) return `an unknown writer (${file} names no owner)`
      const probe = {
        isProcessAlive: fileLock.processIsAlive,
        processStartTime: fileLock.procStartTime,
        inNamespace: fileLock.procInNamespace
      }
      const self = { host: os.hostname(), pidNamespace: fileLock.procPidNamespace() }
      const liveness = fileLock.processLiveness(probe, self, owner.value)
      const state = liveness === "Gone" ? ", no longer running: the next writer takes it over" : ""
      return `${fileLock.describeOwner(owner.value)}${state}`
    })
  }).pipe(Effect.mapError(persistenceError(`reading the lock of session ${JSON.stringify(id)}`)))

const openFiles = (directory: string, access: Access) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const resolved = path.resolve(directory)
    const isDirectory = yield* fs.stat(resolved).pipe(
      Effect.map((info) => info.type === "Directory"),
      Effect.orElseSucceed(() => false)
    )
    if (!isDirectory) {
      return yield* new SessionError.PersistenceError({ reason: `there is no session directory at ${resolved}` })
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
      breakLock: (id) => withPlatform(FileSessionPersistence.breakLock(id, { directory: resolved }))
    } satisfies Store
  })

interface LeaseRow {
  readonly session_id: string
  readonly holder: string
  readonly expires_at: number | string
}

/** Reads the lease row of `id` (the version 1 columns, so an unmigrated database is read too). */
const sqlLockHolder = (sql: SqlClient, id: SessionId) =>
  Effect.gen(function*() {
    const rows = yield* sql.withoutTransforms()<LeaseRow>`SELECT session_id, holder, expires_at
      FROM effect_agent_leases WHERE session_id = ${id}`
    const row = rows.find((candidate) => candidate.session_id === id)
    if (row === undefined) return Option.none<string>()
    const expiresAt = Number(row.expires_at)
    const until = new Date(expiresAt).toISOString()
    return Option.some(
      expiresAt > Date.now()
        ? `${row.holder}, lease valid until ${until}`
        : `${row.holder}, lease expired at ${until}: the next writer takes it over`
    )
  }).pipe(Effect.mapError(persistenceError(`reading the lease of session ${JSON.stringify(id)}`)))

const openSql = (
  description: string,
  client: Layer.Layer<SqlClient, unknown>,
  access: Access
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
      breakLock: (id) => Effect.provide(SqlSessionPersistence.breakLock(id), built)
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

const openSqlite = (file: string, access: Access) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const resolved = path.resolve(file)
    // SQLite creates a missing file: the CLI never creates a store.
    const isFile = yield* fs.stat(resolved).pipe(
      Effect.map((info) => info.type === "File"),
      Effect.orElseSucceed(() => false)
    )
    if (!isFile) {
      return yield* new SessionError.PersistenceError({ reason: `there is no SQLite database at ${resolved}` })
    }
    const sqlite = yield* driver("@effect/sql-sqlite-node", () => import("@effect/sql-sqlite-node"))
    return yield* openSql(`the SQLite database ${resolved}`, sqlite.SqliteClient.layer({ filename: resolved }), access)
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
    return yield* openSql(describeUrl(Redacted.value(url)), pg.PgClient.layer({ url, maxConnections: 2 }), access)
  })

/**
 * Opens the store the flags name, for as long as the Scope is open.
 *
 * @internal
 */
export const open = (
  flags: StoreFlags,
  access: Access
): Effect.Effect<Store, UsageError | SessionError.PersistenceError, Scope.Scope | FileSystem.FileSystem | Path.Path> =>
  Effect.flatMap(choose(flags), (chosen) => {
    switch (chosen._tag) {
      case "Dir":
        return openFiles(chosen.directory, access)
      case "Sqlite":
        return openSqlite(chosen.file, access)
      case "Postgres":
        return openPostgres(chosen.url, access)
    }
  })
