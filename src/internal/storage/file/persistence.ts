/**
 * The JSONL file store behind `FileSessionPersistence.layer` (SPEC §4.3, PERS-05): the layer's state
 * record, the per-session writer and the service's methods. The public module holds the options,
 * the layers and their documentation; this module builds no runtime (ARCH-02).
 *
 * @internal
 */
import { FileSystem, Path } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import type { Array as Arr } from "effect"
import { Chunk, Deferred, Effect, Either, Option, Stream } from "effect"
import * as os from "node:os"
import type { Durability, Options } from "../../../FileSessionPersistence.js"
import type { SessionId } from "../../../Message.js"
import { sessionId } from "../../../Message.js"
import * as SessionError from "../../../SessionError.js"
import type { SessionEvent, SessionHeader } from "../../../SessionEvent.js"
import type { CorruptTail, SessionWriter, StoredSession } from "../../../SessionPersistence.js"
import { SessionPersistence } from "../../../SessionPersistence.js"
import * as finalizer from "../../finalizer.js"
import { storedHeader } from "../../log/eventCodec.js"
import * as recordSize from "../../log/recordSize.js"
import * as truncation from "../../log/truncation.js"
import * as internalOptions from "../../options.js"
import type { ListEntry } from "../listing.js"
import { unreadable } from "../listing.js"
import { discardRefused, inWriterScope } from "../writerScope.js"
import * as jsonl from "./jsonl.js"
import { encode, headerLine } from "./jsonl.js"
import * as fileLock from "./lock.js"
import * as hostFileSummary from "./summary.js"

const HEADER_CHUNK_BYTES = 4096

/**
 * Who `<id>.jsonl` belongs to (DUR-07). `Absent`: no file answers to the name, or the file that
 * does is another session's (on a case-insensitive file system `ABC.jsonl` opens `abc.jsonl`).
 * `Stored`: the file is this id's by name; `named` is the session its header names, if readable.
 */
type Identity =
  | { readonly _tag: "Absent" }
  | { readonly _tag: "Stored"; readonly named: string | undefined }

const absent: Identity = { _tag: "Absent" }

type WriteError =
  | SessionError.SessionConflict
  | SessionError.InvalidEventData
  | SessionError.SessionFull
  | SessionError.PersistenceError

/** An append made while a write was in flight: it goes out with the next write. */
interface PendingAppend {
  readonly events: Arr.NonEmptyReadonlyArray<SessionEvent>
  /** Encoded by its own caller as it joined: one that cannot be encoded fails alone (DUR-04). */
  readonly records: Either.Either<ReadonlyArray<string>, SessionError.InvalidEventData>
  readonly done: Deferred.Deferred<void, WriteError>
}

/** A batch that may be written: its records and their lines' size. */
interface Admitted {
  readonly records: ReadonlyArray<string>
  readonly bytes: number
}

interface WriterState {
  /**
   * Byte length of the acknowledged records: where the next batch is written, and the session's
   * size that `maxSessionBytes` bounds (DUR-05).
   */
  offset: number
  nextSeq: number
  /** Set when a failed write could not be undone: every later append fails with it (SES-02b). */
  failed: SessionError.PersistenceError | undefined
  /** Released or discarded: appends are refused. */
  isClosed: boolean
  /** A caller holds the permit and writes: appends made meanwhile join the next write. */
  isWriting: boolean
}

const conflict = (id: SessionId, expectedSeq: number, actualSeq: number) =>
  new SessionError.SessionConflict({ id, expectedSeq, actualSeq })

/** PERS-02: the batch must start at the stored length and be contiguous. */
const fence = (
  id: SessionId,
  events: Arr.NonEmptyReadonlyArray<SessionEvent>,
  nextSeq: number
): SessionError.SessionConflict | undefined => {
  for (let i = 0; i < events.length; i++) {
    const seq = events[i]!.seq
    if (seq !== nextSeq + i) return conflict(id, seq, nextSeq + i)
  }
  return undefined
}

/** The layer's state record: its directory on the file system, its lock context and its limits. */
interface FileLayer {
  readonly fs: FileSystem.FileSystem
  readonly path: Path.Path
  readonly directory: string
  readonly durability: Durability
  readonly maxEventBytes: number
  readonly maxSessionBytes: number
  readonly chunkBytes: number
  readonly lockContext: fileLock.LockContext
  readonly makeDirectory: Effect.Effect<void, SessionError.PersistenceError>
  /**
   * A new directory entry is durable only once the directory itself is synced; not every platform
   * can open a directory, and the data is synced either way, so this is best effort.
   */
  readonly syncDirectory: Effect.Effect<void>
}

/** PERS-01, DUR-06: who this process is in lock files, and how it judges another holder. */
const lockContextOf = (
  options: Either.Either.Right<ReturnType<typeof internalOptions.decodeFileOptions>>,
  fs: FileSystem.FileSystem,
  path: Path.Path,
  directory: string,
  durability: Durability
): fileLock.LockContext => {
  const startTimeOf = options.processStartTime ?? fileLock.procStartTime
  const startTime = startTimeOf(process.pid)
  const pidNamespace = fileLock.procPidNamespace()
  return {
    fs,
    path,
    directory,
    self: {
      host: os.hostname(),
      pid: process.pid,
      ...(startTime === undefined ? {} : { startTime }),
      ...(pidNamespace === undefined ? {} : { pidNamespace }),
      instanceId: options.instanceId ?? globalThis.crypto.randomUUID()
    },
    isProcessAlive: options.isProcessAlive ?? fileLock.processIsAlive,
    processStartTime: startTimeOf,
    inNamespace: fileLock.procInNamespace,
    isDurable: durability === "fsync"
  }
}

const dataPath = (s: FileLayer, id: string) => s.path.join(s.directory, `${id}.jsonl`)

/** PERS-01: the lock of `id`, released with the current Scope. */
const lockSession = (s: FileLayer, id: SessionId) =>
  Effect.acquireRelease(
    fileLock.acquire(s.lockContext, id),
    (owner) => fileLock.release(s.lockContext, id, owner)
  )

/**
 * DUR-07: whether the directory lists `<id>.jsonl` under exactly that name. Asked only when the header
 * does not name the id, so a case-insensitive file system cannot pass off another session's file as
 * this one.
 */
const isListedExactly = (s: FileLayer, id: SessionId) =>
  s.fs.readDirectory(s.directory).pipe(
    Effect.map((names) => names.includes(`${id}.jsonl`)),
    Effect.catchIf(fileLock.isNotFound, () => Effect.succeed(false)),
    Effect.mapError(fileLock.persistenceError(`listing ${s.directory}`))
  )

/** Opens the data file of `id`; a missing file is `SessionNotFound`. */
const openData = (s: FileLayer, id: SessionId, flag: "r" | "r+") => {
  const file = dataPath(s, id)
  return s.fs.open(file, { flag }).pipe(
    Effect.catchIf(fileLock.isNotFound, () => new SessionError.SessionNotFound({ id })),
    Effect.mapError((error) =>
      error._tag === "SessionNotFound" ? error : fileLock.persistenceError(`opening ${file}`)(error)
    )
  )
}

/**
 * Reads the log of `id` from `handle` by streaming (DUR-05). A refused record fails it — unless the
 * file is not this id's by name (DUR-07), then the id is simply not stored.
 */
const readLogFrom = (s: FileLayer, id: SessionId, handle: FileSystem.File) =>
  Effect.gen(function*() {
    const file = dataPath(s, id)
    const log = yield* jsonl.readLog(id, handle, s.chunkBytes).pipe(
      Effect.mapError(fileLock.persistenceError(`reading ${file}`))
    )
    if (Either.isRight(log)) return log.right
    if (!(yield* isListedExactly(s, id))) return yield* new SessionError.SessionNotFound({ id })
    return yield* log.left
  })

/** Who `<id>.jsonl` belongs to (DUR-07): its header, and when that does not name `id`, its name. */
const identify = (s: FileLayer, id: SessionId): Effect.Effect<Identity, SessionError.PersistenceError> =>
  Effect.scoped(Effect.gen(function*() {
    const file = dataPath(s, id)
    const handle = yield* openData(s, id, "r")
    const first = yield* jsonl.readFirstLine(handle, Math.min(HEADER_CHUNK_BYTES, s.chunkBytes)).pipe(
      Effect.mapError(fileLock.persistenceError(`reading ${file}`))
    )
    const named = first === undefined ? undefined : jsonl.namedSession(first)
    if (named === id || (yield* isListedExactly(s, id))) return { _tag: "Stored", named } as const
    return absent
  })).pipe(
    Effect.catchTag("SessionNotFound", () => Effect.succeed(absent))
  )

/**
 * The writer of one session, its state record. An append that finds no write in flight marks one
 * (`isWriting`, checked and set in one synchronous step) and writes and syncs in the calling fiber;
 * appends made while it does join `pending` and go out together as its next write, with one sync
 * (SES-02 group commit, PERS-04). The Session's writer fiber already batches everything queued behind
 * its write into one `append`, so on that path `pending` stays empty and an append costs no hand-off
 * between fibers and no lock.
 */
interface FileWriter extends WriterState {
  readonly layer: FileLayer
  readonly id: SessionId
  readonly file: FileSystem.File
  readonly owner: fileLock.LockOwner
  readonly pathOfData: string
  /**
   * Held by discard and by the finalizer, so they do not race each other; each of them sets `isClosed`
   * (no write starts after that) and then waits for the write in flight.
   */
  readonly permit: Effect.Semaphore
  pending: Array<PendingAppend>
  /** Resumed when the write in flight (and what it drained) is done. */
  idle: Array<() => void>
}

/** Why `events` cannot be written at `nextSeq`, if they cannot (SES-02b, PERS-02). */
const refusal = (
  w: FileWriter,
  events: Arr.NonEmptyReadonlyArray<SessionEvent>,
  nextSeq: number
): WriteError | undefined =>
  w.failed ?? (w.isClosed ? conflict(w.id, events[0].seq, w.nextSeq) : fence(w.id, events, nextSeq))

/**
 * Whether a batch, placed at `nextSeq` in a file of `size` bytes, may be written: PERS-02, then DUR-05
 * (an event that could not be encoded or is too big, then the session's limit).
 */
const admit = (
  w: FileWriter,
  events: Arr.NonEmptyReadonlyArray<SessionEvent>,
  records: Either.Either<ReadonlyArray<string>, SessionError.InvalidEventData>,
  nextSeq: number,
  size: number
): Either.Either<Admitted, WriteError> => {
  const refused = refusal(w, events, nextSeq)
  if (refused !== undefined) return Either.left(refused)
  if (Either.isLeft(records)) return Either.left(records.left)
  const bytes = recordSize.recordsBytes(records.right)
  const full = recordSize.overLimit(w.id, size, bytes, w.layer.maxSessionBytes)
  return full !== undefined ? Either.left(full) : Either.right({ records: records.right, bytes })
}

/** SES-02b: undo the partial write so the file ends at the last acknowledged record. */
const undo = (w: FileWriter, cause: PlatformError): Effect.Effect<never, SessionError.PersistenceError> =>
  w.file.truncate(w.offset).pipe(
    Effect.zipRight(w.file.seek(w.offset, "start")),
    Effect.catchAll((undone) => {
      w.failed = new SessionError.PersistenceError({
        reason: `the writer of session ${JSON.stringify(w.id)} failed: a write failed (${cause.message}) ` +
          `and ${w.pathOfData} could not be truncated back to its last acknowledged record ` +
          `(${undone.message}); reopen the session to append again`,
        cause: undone
      })
      return Effect.logError(w.failed.reason)
    }),
    Effect.zipRight(Effect.fail(fileLock.persistenceError(`appending to ${w.pathOfData}`)(cause)))
  )

/** Appends the batch after the acknowledged records; acknowledged up to `nextSeq` once stored (PERS-04). */
const commit = (
  w: FileWriter,
  batch: Admitted,
  nextSeq: number
): Effect.Effect<void, SessionError.PersistenceError> => {
  const bytes = recordSize.linesOf(batch.records, batch.bytes)
  const written = w.layer.durability === "fsync"
    ? Effect.zipRight(w.file.writeAll(bytes), w.file.sync)
    : w.file.writeAll(bytes)
  return Effect.matchEffect(written, {
    onFailure: (cause) => undo(w, cause),
    onSuccess: () => {
      w.offset += bytes.length
      w.nextSeq = nextSeq
      return Effect.void
    }
  })
}

/** The appends that joined while the previous write was in flight, as one write (SES-02). */
const commitPending = (w: FileWriter, batch: ReadonlyArray<PendingAppend>) =>
  Effect.gen(function*() {
    let nextSeq = w.nextSeq
    const records: Array<string> = []
    let bytes = 0
    const accepted: Array<PendingAppend> = []
    for (const request of batch) {
      // each against what the appends before it in this write leave (PERS-02, DUR-05)
      const admitted = admit(w, request.events, request.records, nextSeq, w.offset + bytes)
      if (Either.isLeft(admitted)) {
        yield* Deferred.fail(request.done, admitted.left)
        continue
      }
      for (const record of admitted.right.records) records.push(record)
      bytes += admitted.right.bytes
      accepted.push(request)
      nextSeq += request.events.length
    }
    if (accepted.length === 0) return
    const written = yield* Effect.exit(commit(w, { records, bytes }, nextSeq))
    for (const request of accepted) yield* Deferred.done(request.done, written)
  }).pipe(
    // A defect here is a bug; its callers see it rather than wait forever.
    Effect.catchAllCause((cause) =>
      Effect.forEach(batch, (request) => Deferred.failCause(request.done, cause), { discard: true })
    )
  )

/** Writes what joined meanwhile until nothing has; then the next append writes itself. */
const drain = (w: FileWriter): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (w.pending.length === 0) {
      w.isWriting = false
      const waiting = w.idle
      w.idle = []
      for (const resume of waiting) resume()
      return Effect.void
    }
    const batch = w.pending
    w.pending = []
    return Effect.zipRight(commitPending(w, batch), drain(w))
  })

/** Once no write is in flight. */
const whenIdle = (w: FileWriter): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    if (!w.isWriting) return resume(Effect.void)
    const waiter = () => resume(Effect.void)
    w.idle.push(waiter)
    return Effect.sync(() => {
      w.idle = w.idle.filter((other) => other !== waiter)
    })
  })

/**
 * Runs with `isWriting` set, uninterruptibly: a write is either acknowledged or undone. The drain is
 * installed around everything after the flag, encoding included: a value that cannot be encoded fails
 * this append (`InvalidEventData`, DUR-04), and even a defect there fails only this append, not every
 * later one.
 */
const write = (w: FileWriter, events: Arr.NonEmptyReadonlyArray<SessionEvent>) =>
  Effect.ensuring(
    Effect.suspend((): Effect.Effect<void, WriteError> => {
      const records = recordSize.encodeRecords(events, w.layer.maxEventBytes)
      const admitted = admit(w, events, records, w.nextSeq, w.offset)
      return Either.isRight(admitted)
        ? commit(w, admitted.right, w.nextSeq + events.length)
        : Effect.fail(admitted.left)
    }),
    drain(w)
  )

/**
 * SES-02: uninterruptible from the check on: an append is written (alone or with the write in flight)
 * and then acknowledged or undone, never left unknown to its caller.
 */
const appendFile = (
  w: FileWriter,
  events: Arr.NonEmptyReadonlyArray<SessionEvent>
): Effect.Effect<void, WriteError> =>
  Effect.uninterruptible(Effect.withFiberRuntime((fiber) => {
    if (w.failed !== undefined) return Effect.fail(w.failed)
    if (w.isClosed) return Effect.fail(conflict(w.id, events[0].seq, w.nextSeq))
    if (w.isWriting) {
      // Checked and joined in one synchronous step: the write in flight drains it.
      const done = Deferred.unsafeMake<void, WriteError>(fiber.id())
      w.pending.push({ events, records: recordSize.encodeRecords(events, w.layer.maxEventBytes), done })
      return Deferred.await(done)
    }
    w.isWriting = true
    return write(w, events)
  }))

/** PKG-03's rollback of a create: once it has refused new appends it also removes the file (uninterruptible). */
const discardFile = (w: FileWriter): Effect.Effect<void, SessionError.PersistenceError> =>
  w.permit.withPermits(1)(Effect.suspend(() => {
    if (w.isClosed) return Effect.void
    w.isClosed = true
    return whenIdle(w).pipe(
      Effect.zipRight(w.layer.fs.remove(w.pathOfData)),
      Effect.catchIf(fileLock.isNotFound, () => Effect.void),
      Effect.mapError(fileLock.persistenceError(`discarding ${w.pathOfData}`)),
      Effect.zipRight(fileLock.release(w.layer.lockContext, w.id, w.owner))
    )
  })).pipe(Effect.uninterruptible, Effect.withSpan("FileSessionPersistence.discard"))

/** The writer of one session (see `FileWriter`), from the acknowledged `start`. */
const makeWriter = Effect.fnUntraced(function*(
  s: FileLayer,
  id: SessionId,
  file: FileSystem.File,
  owner: fileLock.LockOwner,
  start: { readonly offset: number; readonly nextSeq: number },
  isCreateMode: boolean
) {
  const w: FileWriter = {
    layer: s,
    id,
    file,
    owner,
    pathOfData: dataPath(s, id),
    permit: yield* Effect.makeSemaphore(1),
    offset: start.offset,
    nextSeq: start.nextSeq,
    failed: undefined,
    isClosed: false,
    isWriting: false,
    pending: [],
    idle: []
  }
  // `writeAll` writes at the handle's position. Only this writer moves it, and every write either
  // advances it together with `offset` or is truncated back to it, so one seek here keeps the two equal
  // and no write needs its own.
  yield* file.seek(start.offset, "start")
  // Finalizers run in reverse: refuse new appends, let the write in flight finish (what joined it is
  // refused), then (registered by the caller earlier) close the file and release the lock.
  yield* finalizer.addFinalizer(
    Effect.suspend(() => {
      w.isClosed = true
      return w.permit.withPermits(1)(whenIdle(w))
    })
  )
  return {
    append: (events) => appendFile(w, events),
    nextSeq: Effect.sync(() => w.nextSeq),
    discard: isCreateMode ? discardFile(w) : discardRefused(id)
  } satisfies SessionWriter
})

/**
 * PERS-03: a new session's file, its header written (and synced, with its directory entry, under
 * `fsync`) under its lock. A plain generator that `create`'s traced body delegates to (`yield*`).
 */
function* createIn(s: FileLayer, header: SessionHeader) {
  const id = header.id
  if (Either.isLeft(storedHeader(header))) {
    return yield* Effect.dieMessage(`bug: the header of session ${JSON.stringify(id)} would not read back`)
  }
  const file = dataPath(s, id)
  // DUR-07: on a case-insensitive file system the name may already answer with another session's file
  // (`ABC.jsonl` opens `abc.jsonl`), whose lock is that session's too.
  const isTaken = yield* s.fs.exists(file).pipe(Effect.mapError(fileLock.persistenceError(`checking ${file}`)))
  if (isTaken && (yield* identify(s, id))._tag === "Absent") {
    return yield* new SessionError.SessionAlreadyExists({ id })
  }
  return yield* inWriterScope(Effect.gen(function*() {
    yield* s.makeDirectory
    const owner = yield* lockSession(s, id)
    const handle = yield* s.fs.open(file, { flag: "wx" }).pipe(
      Effect.catchIf(fileLock.isAlreadyExists, () => new SessionError.SessionAlreadyExists({ id })),
      Effect.mapError((error) =>
        error._tag === "SessionAlreadyExists" ? error : fileLock.persistenceError(`creating ${file}`)(error)
      )
    )
    const bytes = encode(headerLine(header))
    yield* handle.writeAll(bytes).pipe(
      Effect.zipRight(s.durability === "fsync" ? Effect.zipRight(handle.sync, s.syncDirectory) : Effect.void),
      Effect.mapError(fileLock.persistenceError(`writing the header of ${file}`)),
      // We hold the lock, so the half-created file is ours to remove: the id stays free.
      Effect.onError(() => Effect.ignore(s.fs.remove(file)))
    )
    return yield* makeWriter(s, id, handle, owner, { offset: bytes.length, nextSeq: 0 }, true)
  }))
}

/**
 * RES-02, PERS-03, DUR-11: the writer of a stored session under its lock, and its log read once; a torn
 * last record is dropped and truncated on disk (with a warning).
 */
const openStored = (s: FileLayer, id: SessionId) =>
  Effect.gen(function*() {
    const file = dataPath(s, id)
    const owner = yield* lockSession(s, id)
    const handle = yield* openData(s, id, "r+")
    const log = yield* readLogFrom(s, id, handle)
    if (log.tornTailDropped > 0) {
      yield* handle.truncate(log.validBytes).pipe(
        Effect.zipRight(s.durability === "fsync" ? handle.sync : Effect.void),
        Effect.mapError(fileLock.persistenceError(`truncating the torn tail of ${file}`))
      )
      yield* Effect.logWarning(
        `effect-agent: session ${JSON.stringify(id)} ended with ${log.tornTailDropped} torn record ` +
          `(an interrupted write); it was dropped and ${file} truncated to ${log.validBytes} bytes`
      )
    }
    const start = { offset: log.validBytes, nextSeq: log.events.length }
    const writer = yield* makeWriter(s, id, handle, owner, start, false)
    const stored: StoredSession = {
      header: log.header,
      events: log.events,
      tornTailDropped: log.tornTailDropped
    }
    return { writer, stored }
  })

/**
 * The list entry of the file `name` (DUR-08): its summary, or what keeps it from being read. `None` for
 * a file removed since the directory was listed.
 */
const entryOf = (s: FileLayer, name: string): Effect.Effect<Option.Option<ListEntry>> => {
  const stem = name.slice(0, -".jsonl".length)
  const file = s.path.join(s.directory, name)
  const id = sessionId(stem)
  if (Either.isLeft(id)) {
    return Effect.map(
      unreadable(stem, `the file name is not a valid session id (${id.left.message})`, file),
      Option.some
    )
  }
  return Effect.scoped(Effect.gen(function*() {
    const handle = yield* openData(s, id.right, "r")
    const info = yield* handle.stat.pipe(Effect.mapError(fileLock.persistenceError(`reading ${file}`)))
    const log = yield* jsonl.readLog(id.right, handle, s.chunkBytes).pipe(
      Effect.mapError(fileLock.persistenceError(`reading ${file}`)),
      Effect.flatten
    )
    return Option.some<ListEntry>({
      _tag: "SessionSummary",
      id: id.right,
      header: log.header,
      eventCount: log.events.length,
      updatedAt: Option.match(info.mtime, {
        onNone: () => log.header.createdAt,
        onSome: (mtime) => mtime.getTime()
      })
    })
  })).pipe(
    Effect.catchAll((error) =>
      error._tag === "SessionNotFound"
        ? Effect.succeed(Option.none())
        : Effect.map(unreadable(stem, error.message, file), Option.some)
    )
  )
}

/** PERS-03: every session file in name order (DUR-08: unreadable files listed as such). */
const listIn = (s: FileLayer): Stream.Stream<ListEntry, SessionError.PersistenceError> =>
  Stream.unwrap(
    s.fs.readDirectory(s.directory).pipe(
      Effect.catchIf(fileLock.isNotFound, () => Effect.succeed<Array<string>>([])),
      Effect.mapError(fileLock.persistenceError(`listing ${s.directory}`)),
      Effect.map((names) => {
        const files = names.filter((name) => name.endsWith(".jsonl")).sort()
        return Stream.fromIterable(files).pipe(
          Stream.mapEffect((name) => entryOf(s, name)),
          Stream.filterMap((entry) => entry)
        )
      })
    )
  ).pipe(Stream.withSpan("FileSessionPersistence.list"))

/**
 * Removes the session's file holding its lock (a session that has a writer is refused, and none can
 * open it halfway through); DUR-07: a file whose header names another session is not removed.
 */
const removeIn = (s: FileLayer, id: SessionId) =>
  Effect.scoped(Effect.gen(function*() {
    const file = dataPath(s, id)
    yield* lockSession(s, id)
    const identity = yield* identify(s, id)
    if (identity._tag === "Absent") return
    if (identity.named !== undefined && identity.named !== id) {
      return yield* new SessionError.SessionCorrupt({
        id,
        line: 1,
        reason: `the header of ${file} names session ${JSON.stringify(identity.named)}, so it was not removed`
      })
    }
    yield* s.fs.remove(file).pipe(
      Effect.catchIf(fileLock.isNotFound, () => Effect.void),
      Effect.mapError(fileLock.persistenceError(`removing ${file}`))
    )
    // DOC-02: the summary goes with its log
    yield* hostFileSummary.removeSidecar(s, id)
  }))

// -------------------------------------------------------------------------------------------------
// DOC-05: past a corrupt record

/** Where line `line` (1-based) of `file` starts, streaming the file (DUR-05); undefined past its end. */
const lineStart = (s: FileLayer, file: string, line: number) =>
  Effect.suspend(() => {
    let seen = 1
    let read = 0
    let at: number | undefined = line === 1 ? 0 : undefined
    return s.fs.stream(file).pipe(
      Stream.runForEachWhile((chunk) =>
        Effect.sync(() => {
          for (let i = 0; i < chunk.length && at === undefined; i++) {
            if (chunk[i] === 0x0a && ++seen === line) at = read + i + 1
          }
          read += chunk.length
          return at === undefined
        })
      ),
      Effect.map(() => at),
      Effect.mapError(fileLock.persistenceError(`reading ${file}`))
    )
  })

/** The bytes of `file` from `offset` to its end. */
const bytesFrom = (s: FileLayer, file: string, offset: number) =>
  s.fs.stream(file, { offset: BigInt(offset) }).pipe(
    Stream.runCollect,
    Effect.map((chunks) => {
      const out = new Uint8Array(Chunk.reduce(chunks, 0, (total, chunk) => total + chunk.length))
      let at = 0
      for (const chunk of chunks) {
        out.set(chunk, at)
        at += chunk.length
      }
      return out
    }),
    Effect.mapError(fileLock.persistenceError(`reading ${file}`))
  )

/** The cut of a corrupt file log: where it starts and what it drops; refused if a dropped record is newer. */
const corruptTailOf = (s: FileLayer, id: SessionId, corrupt: SessionError.SessionCorrupt) =>
  Effect.gen(function*() {
    const file = dataPath(s, id)
    // a header that cannot be read leaves nothing to keep: inspect it by hand
    if (corrupt.line <= 1) return yield* corrupt
    const offset = yield* lineStart(s, file, corrupt.line)
    if (offset === undefined) return yield* corrupt
    const data = yield* bytesFrom(s, file, offset)
    const records = truncation.recordsOf(data, corrupt.line)
    const newer = truncation.newerFormatAmong(id, records)
    if (newer !== undefined) return yield* newer
    return {
      id,
      line: corrupt.line,
      seq: corrupt.line - 2,
      reason: corrupt.reason,
      keptEvents: corrupt.line - 2,
      keptBytes: offset,
      dropped: records.map((record) => ({ line: record.line, bytes: record.bytes })),
      droppedBytes: data.length,
      data
    } satisfies CorruptTail
  })

/**
 * DOC-05: under the session's lock, a log whose read fails `SessionCorrupt` is cut at the corrupt
 * record once `keep` has what is dropped; the file is synced and its summary sidecar removed.
 */
const truncateIn = <E>(s: FileLayer, id: SessionId, keep: (cut: CorruptTail) => Effect.Effect<void, E>) =>
  Effect.scoped(Effect.gen(function*() {
    if ((yield* identify(s, id))._tag === "Absent") return yield* new SessionError.SessionNotFound({ id })
    yield* lockSession(s, id)
    const file = dataPath(s, id)
    const read = yield* Effect.scoped(Effect.flatMap(openData(s, id, "r"), (handle) => readLogFrom(s, id, handle))).pipe(
      Effect.as(undefined),
      Effect.catchTag("SessionCorrupt", (corrupt) => Effect.succeed(corrupt))
    )
    if (read === undefined) return Option.none<CorruptTail>()
    const cut = yield* corruptTailOf(s, id, read)
    yield* keep(cut)
    const handle = yield* openData(s, id, "r+")
    yield* handle.truncate(BigInt(cut.keptBytes)).pipe(
      Effect.zipRight(handle.sync),
      Effect.mapError(fileLock.persistenceError(`truncating ${file}`))
    )
    yield* hostFileSummary.removeSidecar(s, id)
    yield* Effect.logWarning(
      `effect-agent: session ${id}: dropped ${cut.dropped.length} record(s) (${cut.droppedBytes} bytes) from line ` +
        `${cut.line}, the first corrupt record (${cut.reason})`
    )
    return Option.some(cut)
  }))

/** The service over the layer's state; each method traced (`Effect.fn`). */
const serviceOf = (s: FileLayer) => {
  const exists = Effect.fn("FileSessionPersistence.exists")(function*(id: SessionId) {
      return (yield* identify(s, id))._tag === "Stored"
  })
  // HOST-04: recovery summaries from a sidecar index (not fsynced, rebuilt when missing)
  const { summaries } = hostFileSummary.make({ fs: s.fs, path: s.path, directory: s.directory })
  return SessionPersistence.of({
    create: Effect.fn("FileSessionPersistence.create")(function*(header: SessionHeader) {
      return yield* createIn(s, header)
    }),
    openWrite: Effect.fn("FileSessionPersistence.openWrite")(function*(id: SessionId) {
          // Spares a missing id the lock (and a missing directory its error); the read below is the
      // authoritative check.
      if (!(yield* exists(id))) return yield* new SessionError.SessionNotFound({ id })
      return yield* inWriterScope(openStored(s, id))
    }),
    read: Effect.fn("FileSessionPersistence.read")(function*(id: SessionId) {
          const log = yield* Effect.scoped(Effect.flatMap(openData(s, id, "r"), (handle) => readLogFrom(s, id, handle)))
      return { header: log.header, events: log.events, tornTailDropped: log.tornTailDropped } satisfies StoredSession
    }),
    list: listIn(s),
    exists,
    remove: Effect.fn("FileSessionPersistence.remove")(function*(id: SessionId) {
          // DUR-07: a name that answers with another session's file removes nothing.
      if ((yield* identify(s, id))._tag === "Absent") return
      yield* removeIn(s, id)
    }),
    truncateAtCorruption: <E>(id: SessionId, keep: (cut: CorruptTail) => Effect.Effect<void, E>) =>
      Effect.suspend(() => truncateIn(s, id, keep)).pipe(
        Effect.withSpan("FileSessionPersistence.truncateAtCorruption")
      ),
    summaries
  })
}

export const make = (input: Options) =>
  Effect.gen(function*() {
    // CORE-08: the options decoded once by their Schema; a bad one fails the layer naming each field
    const options = yield* internalOptions.decodeFileOptions(input)
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const directory = path.resolve(options.directory)
    const durability: Durability = options.durability ?? "fsync"
    const s: FileLayer = {
      fs,
      path,
      directory,
      durability,
      maxEventBytes: options.limits.maxEventBytes,
      maxSessionBytes: options.limits.maxSessionBytes,
      chunkBytes: options.readChunkBytes ?? jsonl.DEFAULT_READ_CHUNK_BYTES,
      lockContext: lockContextOf(options, fs, path, directory, durability),
      makeDirectory: fs.makeDirectory(directory, { recursive: true }).pipe(
        Effect.mapError(fileLock.persistenceError(`creating the session directory ${directory}`))
      ),
      syncDirectory: Effect.scoped(Effect.flatMap(fs.open(directory, { flag: "r" }), (dir) => dir.sync)).pipe(
        Effect.ignore
      )
    }
    if (options.readOnly === true) {
      const info = yield* fs.stat(directory).pipe(
        Effect.mapError(fileLock.persistenceError(`reading the session directory ${directory}`))
      )
      if (info.type !== "Directory") {
        return yield* new SessionError.PersistenceError({ reason: `${directory} is not a directory` })
      }
    } else {
      yield* s.makeDirectory
      // DUR-06: temp and guard files that crashed lock operations left behind.
      yield* fileLock.sweepQuietly(s.lockContext)
      // Issue 15: locks of dead writers on sessions nobody resumes do not stay forever.
      if (options.clearStaleLocks !== false) yield* fileLock.clearStaleLocks(s.lockContext)
    }
    return serviceOf(s)
  })
