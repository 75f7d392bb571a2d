/**
 * Sessions persisted as JSONL files (SPEC §4.3, PERS-05): one `<id>.jsonl` per session in a
 * directory — the header record on line 1, then one event per line — and one `<id>.lock` per open
 * writer.
 *
 * @since 0.1.0
 */
import { FileSystem, Path } from "@effect/platform"
import { Effect, Layer } from "effect"
import type { FactoryAlreadySet } from "./AgentError.js"
import * as AgentRuntime from "./AgentRuntime.js"
import * as fileLock from "./internal/storage/file/lock.js"
import * as filePersistence from "./internal/storage/file/persistence.js"
import type { SessionId } from "./Message.js"
import type { Model } from "./Model.js"
import type * as SessionError from "./SessionError.js"
import type { SizeLimits } from "./SessionPersistence.js"
import { SessionPersistence } from "./SessionPersistence.js"


/**
 * When an append is acknowledged (PERS-04): `"fsync"` once the data is on disk (appends queued
 * meanwhile share one sync), `"buffered"` once it was handed to the OS (for tests and benchmarks).
 *
 * @since 0.1.0
 * @category models
 */
export type Durability = "fsync" | "buffered"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options extends SizeLimits {
  /** Where the session files live; created if missing. */
  readonly directory: string
  /** Default `"fsync"`. */
  readonly durability?: Durability | undefined
  /** Names this process in lock files (default: a random id). */
  readonly instanceId?: string | undefined
  /**
   * Whether a process of this host is running; decides if a lock of this host is stale. Default:
   * `process.kill(pid, 0)`.
   */
  readonly isProcessAlive?: ((pid: number) => boolean) | undefined
  /**
   * When the process running under `pid` on this host started (any string that differs between two
   * processes that had the same pid), or `undefined` if that cannot be told. Recorded in locks, so
   * that a lock whose pid now runs another process is stale (DUR-06). Default: {@link processStartTime}.
   */
  readonly processStartTime?: ((pid: number) => string | undefined) | undefined
  /**
   * Whether the layer's start clears the locks that crashed writers of this host left on any session
   * of the directory (default `true`): without it, such a lock stays until the session is resumed
   * (which takes it over, DUR-06) or an operator breaks it. Locks of live writers and of other hosts
   * are never touched. Turn it off for a very large directory whose start must not read every lock.
   *
   * @since 0.2.0
   */
  readonly clearStaleLocks?: boolean | undefined
  /**
   * How many bytes one read of a session file asks for (default 1 MiB). Files are read by
   * streaming, one chunk at a time (DUR-05); tests lower it to cross chunk boundaries.
   *
   * @internal
   */
  readonly readChunkBytes?: number | undefined
  /**
   * Reads only (the operator CLI's read commands): the layer neither creates the directory nor
   * sweeps lock leftovers, and fails `PersistenceError` when the directory does not exist; writing
   * through it is not supported.
   *
   * @internal
   */
  readonly readOnly?: boolean | undefined
}

/** The first line (the header) is read this much at a time by the DUR-07 identity checks. */
/**
 * Whether a process of this host is running (signal 0 probes without signalling).
 *
 * @since 0.1.0
 * @category locks
 */
export const isProcessAlive = (pid: number): boolean => fileLock.processIsAlive(pid)

/**
 * When the process running under `pid` started, as recorded in lock files (DUR-06): on Linux the
 * boot id and the start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`),
 * `"<boot id>:<ticks>"`. `undefined` when the process is gone or the platform has no `/proc`; a
 * lock then decides staleness by its pid alone.
 *
 * @since 0.2.0
 * @category locks
 */
export const processStartTime = (pid: number): string | undefined => fileLock.procStartTime(pid)

/**
 * File persistence over `@effect/platform`'s `FileSystem` (PERS-05). Fails at build if the
 * directory cannot be created.
 *
 * - PERS-01: one writer per session across processes, through `<id>.lock`; a second writer fails
 *   `SessionLocked` at once. A lock of this host whose process is gone is taken over (with a
 *   warning); a lock of another host is never guessed stale — see {@link breakLock}.
 * - DUR-06: a process is identified by pid and start time ({@link processStartTime}), so a reused
 *   pid does not keep a stale lock alive; lock and guard files are written in full, then linked or
 *   renamed into place; guards of dead processes are taken over at once, ownerless leftovers of
 *   older versions once 60 s old; leftover temp and guard files are removed when the layer starts.
 * - PERS-03, DUR-11: `openWrite` drops an unterminated last record (a torn write) and truncates
 *   it on disk (warning, `tornTailDropped`); any complete record that is invalid — the last one
 *   included — fails `SessionCorrupt{line}` and changes nothing.
 * - DUR-05: files are read by streaming, one bounded chunk at a time, never whole.
 * - DUR-07: every path checks that the file is the id's own (its header names the id, or the
 *   directory lists the exact name), so on a case-insensitive file system `abc` and `ABC` never
 *   share a session: the second `create` fails `SessionAlreadyExists`, and the other id is not
 *   found by `read`, `openWrite`, `exists` and `remove`.
 * - DUR-08: `list` reports a file it cannot read as an `UnreadableSession` and lists the others.
 * - PERS-04: with `durability: "fsync"` (default) an append resolves once synced; appends queued
 *   while a write is in flight share the next write and sync.
 * - DUR-04/DUR-05: sessions share nothing (a file, a handle and a writer each). An append is
 *   encoded by its own caller and admitted on its own, also when it joins a write in flight: one
 *   that cannot be encoded or has an event over `maxEventBytes` fails `InvalidEventData`, one that
 *   would take the file over `maxSessionBytes` fails `SessionFull` (see {@link SizeLimits}); the
 *   appends written with it are unaffected, and nothing of it is written.
 *
 * @example
 * ```ts
 *  * import { Layer } from "effect"
 * import * as FileSessionPersistence from "effect-agent/FileSessionPersistence"
 *
 * const PersistenceLive = FileSessionPersistence.layer({ directory: "./sessions" }).pipe(
 *   Layer.provide(NodeContext.layer)
 * )
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: Options
): Layer.Layer<SessionPersistence, SessionError.PersistenceError, FileSystem.FileSystem | Path.Path> =>
  Layer.effect(SessionPersistence, filePersistence.make(options))

/**
 * The agent runtime (`AgentRuntime.layer`: registry, session store, AgentLoop factory, global tool and
 * hook registries) with JSONL files in `options.directory`, over the `FileSystem` and `Path` of the
 * context (`NodeContext.layer` on Node; `NodeFileSessionPersistence.layerRuntime` provides it).
 *
 * @example
 * ```ts
 * import { NodeContext } from "@effect/platform-node"
 * import { Layer } from "effect"
 * import * as FileSessionPersistence from "effect-agent/FileSessionPersistence"
 *
 * // Still needs a Model.
 * const RuntimeLive = FileSessionPersistence.layerRuntime({ directory: "./sessions" }).pipe(
 *   Layer.provide(NodeContext.layer)
 * )
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layerRuntime = (
  options: Options
): Layer.Layer<
  AgentRuntime.Services | SessionPersistence,
  FactoryAlreadySet | SessionError.PersistenceError,
  Model | FileSystem.FileSystem | Path.Path
> => AgentRuntime.layer.pipe(Layer.provideMerge(layer(options)))

/**
 * Removes the lock of session `id` in `directory`, whoever holds it (and any leftovers of an
 * interrupted takeover), with a warning naming the holder. Whatever is at the lock path goes,
 * a dangling symbolic link too; a link is removed, never what it points to (DUR-06). A directory
 * there fails `PersistenceError` and stays. For operators only: use it when the holder is known to
 * be gone — for example a lock left by a process of another host, which is never guessed stale.
 * Breaking the lock of a live writer lets two writers corrupt the log.
 *
 * @since 0.1.0
 * @category locks
 */
export const breakLock = Effect.fn("FileSessionPersistence.breakLock")(function*(
  id: SessionId,
  options: { readonly directory: string }
) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  yield* fileLock.breakLock({ fs, path, directory: path.resolve(options.directory) }, id)
})
