/**
 * Where sessions are stored: the `SessionPersistence` service, its exclusive writers, and the
 * in-memory implementation used by tests and by processes that need no durability (SPEC §4.3).
 *
 * @since 0.1.0
 */
import type { Array as Arr, Option, Stream } from "effect"
import { Context, Effect, Either, Layer, Scope, Stream as S } from "effect"
import * as internalOptions from "./internal/options.js"
import * as recordSize from "./internal/log/recordSize.js"
import * as summary from "./internal/log/summary.js"
import type { SessionId } from "./Message.js"
import * as SessionError from "./SessionError.js"
import type { SessionEvent, SessionHeader } from "./SessionEvent.js"

/**
 * The exclusive writer of one stored session. At most one exists per id at a time, across
 * processes (PERS-01); it is released when the Scope it was acquired in closes.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionWriter {
  /**
   * Stores a batch. The batch must start at {@link nextSeq} (fencing, PERS-02): otherwise it fails
   * `SessionConflict` and writes nothing. Resolves once the batch is stored according to the
   * layer's durability (PERS-04). A failed write stores nothing.
   *
   * Every layer encodes and measures the batch alike (DUR-05, DUR-09, {@link SizeLimits}): an
   * event that cannot be encoded as JSON or is over `maxEventBytes` fails `InvalidEventData`, a
   * batch that would take the session over `maxSessionBytes` fails `SessionFull`; either way
   * nothing is written and smaller appends still go in.
   */
  readonly append: (
    events: Arr.NonEmptyReadonlyArray<SessionEvent>
  ) => Effect.Effect<
    void,
    | SessionError.SessionConflict
    | SessionError.InvalidEventData
    | SessionError.SessionFull
    | SessionError.PersistenceError
  >
  /** The seq the next batch must start at. */
  readonly nextSeq: Effect.Effect<number>
  /**
   * Only for a writer obtained by `create`: deletes the new session and frees its id (a rolled-back
   * creation). Releases the writer.
   */
  readonly discard: Effect.Effect<void, SessionError.PersistenceError>
}

/**
 * The size limits every persistence layer enforces at append (DUR-05), with the same defaults and
 * the same errors on all of them (DUR-09). Sizes are UTF-8 bytes of the records as the file store
 * writes them: an event counts its JSON record and a newline; a session counts its header line and
 * all its event lines, those stored before `openWrite` included. A refused batch writes nothing,
 * and the session stays readable and writable for appends that fit.
 *
 * @since 0.2.0
 * @category limits
 */
export interface SizeLimits {
  /**
   * The largest event record (default {@link defaultMaxEventBytes}, 16 MiB). A batch with a larger
   * event fails `InvalidEventData`.
   */
  readonly maxEventBytes?: number | undefined
  /**
   * The largest session (default {@link defaultMaxSessionBytes}, 512 MiB: a live session is held
   * in memory). A batch that would take the session over it fails `SessionFull`.
   */
  readonly maxSessionBytes?: number | undefined
}

/**
 * The default of {@link SizeLimits.maxEventBytes}: 16 MiB.
 *
 * @since 0.2.0
 * @category limits
 */
export const defaultMaxEventBytes: number = recordSize.defaultMaxEventBytes

/**
 * The default of {@link SizeLimits.maxSessionBytes}: 512 MiB.
 *
 * @since 0.2.0
 * @category limits
 */
export const defaultMaxSessionBytes: number = recordSize.defaultMaxSessionBytes

/**
 * A stored session as read.
 *
 * @since 0.1.0
 * @category models
 */
export interface StoredSession {
  readonly header: SessionHeader
  readonly events: ReadonlyArray<SessionEvent>
  /**
   * How many torn trailing records were dropped (PERS-03): 0, or 1 for an unterminated last record
   * of a file. A complete record that is invalid is never dropped (DUR-11).
   */
  readonly tornTailDropped: number
}

/**
 * An entry of `list`: a stored session that was read.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionSummary {
  /** Tells it from an {@link UnreadableSession} (since 0.2.0). */
  readonly _tag: "SessionSummary"
  readonly id: SessionId
  readonly header: SessionHeader
  readonly eventCount: number
  /** Epoch milliseconds of the last write. */
  readonly updatedAt: number
}

/**
 * An entry of `list` that could not be read (DUR-08): a file or row that is corrupt, of a newer
 * format, unreadable (permissions), or stored under a name that is not a valid session id. `list`
 * reports it (and logs a warning) and goes on with the other sessions.
 *
 * @example
 * ```ts
 * import { Effect, Option, Stream } from "effect"
 * import { SessionPersistence } from "effect-agent/SessionPersistence"
 *
 * const readableIds = Effect.flatMap(SessionPersistence, (persistence) =>
 *   Stream.runCollect(
 *     persistence.list.pipe(Stream.filterMap((entry) =>
 *       entry._tag === "SessionSummary" ? Option.some(entry.id) : Option.none()
 *     ))
 *   ))
 * ```
 *
 * @since 0.2.0
 * @category models
 */
export interface UnreadableSession {
  readonly _tag: "UnreadableSession"
  /**
   * The entry's stored name: a file's name without `.jsonl`, a row's `session_id`. Not always a
   * valid `SessionId` (that may be the problem).
   */
  readonly id: string
  /** What is wrong with it, in words (the typed error's message when there is one). */
  readonly problem: string
}

/**
 * What the start-up recovery of `AgentHost` needs to know about a stored session (HOST-04), read
 * cheaply (a sidecar index for files, a query for SQL) rather than by reading its whole log.
 *
 * @since 0.2.0
 * @category models
 */
export interface RecoverySummary {
  readonly _tag: "RecoverySummary"
  readonly id: SessionId
  /** The log ends inside a turn (a crash interrupted it): resume repairs it. */
  readonly openTurn: boolean
  /** Pending inbox messages (both lists). */
  readonly pending: number
  /** Pending messages that were sent waking (HOST-03). */
  readonly pendingWaking: number
  /**
   * The parent session when this is a sub-agent's child session (its header's `child`, SUB-02):
   * recovery never activates it as a root. A backend that leaves it out makes recovery treat every
   * session as a root.
   *
   * @since 0.3.0
   */
  readonly parent?: SessionId | undefined
  /**
   * HIL-04: present when the open step is suspended — it waits for a person (an unsettled approval
   * or question) or has an approved call not yet dispatched. A suspended turn is open but not
   * interrupted: recovery activates it only for an approved call or a due deadline.
   *
   * @since 0.3.0
   */
  readonly awaiting?: AwaitingSummary | undefined
}

/**
 * What a suspended session waits for (HIL-04), as a {@link RecoverySummary} carries it.
 *
 * @since 0.3.0
 * @category models
 */
export interface AwaitingSummary {
  /** Approval requests without a decision. */
  readonly approvals: number
  /** Questions without an answer. */
  readonly questions: number
  /** Approved calls not yet dispatched: they run as soon as the agent is live. */
  readonly approvedUndispatched: number
  /** The earliest deadline (epoch milliseconds) of a pending item, when one has a time limit. */
  readonly earliestDeadline?: number | undefined
}

/**
 * The storage of sessions.
 *
 * @since 0.1.0
 * @category services
 */
export class SessionPersistence extends Context.Tag("effect-agent/SessionPersistence")<SessionPersistence, {
  /** Stores a new session (header only) and returns its exclusive writer. */
  readonly create: (
    header: SessionHeader
  ) => Effect.Effect<
    SessionWriter,
    SessionError.SessionAlreadyExists | SessionError.SessionLocked | SessionError.PersistenceError,
    Scope.Scope
  >
  /** The exclusive writer of a stored session, with its log read once (a torn tail is truncated). */
  readonly openWrite: (
    id: SessionId
  ) => Effect.Effect<
    { readonly writer: SessionWriter; readonly stored: StoredSession },
    | SessionError.SessionNotFound
    | SessionError.SessionLocked
    | SessionError.SessionCorrupt
    | SessionError.SessionFormatUnsupported
    | SessionError.PersistenceError,
    Scope.Scope
  >
  /** Reads without writing (a torn tail is dropped in memory only). */
  readonly read: (
    id: SessionId
  ) => Effect.Effect<
    StoredSession,
    | SessionError.SessionNotFound
    | SessionError.SessionCorrupt
    | SessionError.SessionFormatUnsupported
    | SessionError.PersistenceError
  >
  /**
   * Every stored session, in id order where the backend can. Total (DUR-08): an entry that cannot
   * be read is an {@link UnreadableSession}, the others are still listed; it fails only when the
   * storage itself cannot be listed.
   */
  readonly list: Stream.Stream<SessionSummary | UnreadableSession, SessionError.PersistenceError>
  readonly exists: (id: SessionId) => Effect.Effect<boolean, SessionError.PersistenceError>
  /**
   * HOST-04 (since 0.2.0, optional): a cheap summary of every stored session — an entry that
   * cannot be summarised is listed as unreadable. A backend without it is read in full by
   * `AgentHost`'s recovery.
   */
  readonly summaries?: Stream.Stream<RecoverySummary | UnreadableSession, SessionError.PersistenceError> | undefined
  /**
   * DOC-05 (since 0.3.0, optional): an operator's way past a corrupt record. Under the session's
   * writer lock, reads the log; when a stored record (not a torn tail) is corrupt, hands `keep` what
   * would be dropped — that record and every one after it, exactly as stored — and only once `keep`
   * succeeded (a backup written, say) drops them, so the session ends with the events before it.
   * A sound log drops nothing: `Option.none()`. It never drops a record of a newer format: one such
   * record, at the cut or after it, fails `SessionFormatUnsupported`; a corrupt header fails
   * `SessionCorrupt` (there is nothing to keep). Committed events are lost by design: for operators.
   */
  readonly truncateAtCorruption?:
    | (<E>(
      id: SessionId,
      keep: (cut: CorruptTail) => Effect.Effect<void, E>
    ) => Effect.Effect<
      Option.Option<CorruptTail>,
      | E
      | SessionError.SessionNotFound
      | SessionError.SessionLocked
      | SessionError.SessionCorrupt
      | SessionError.SessionFormatUnsupported
      | SessionError.PersistenceError
    >)
    | undefined
  /**
   * Deletes a stored session; refuses while a writer holds it. Never deletes another session's
   * data (DUR-07): a stored entry whose header names another session fails `SessionCorrupt` and
   * stays; an id that is not stored (including one that differs from a stored id only by case, on
   * a case-insensitive file system) is not an error and removes nothing.
   */
  readonly remove: (
    id: SessionId
  ) => Effect.Effect<void, SessionError.SessionLocked | SessionError.SessionCorrupt | SessionError.PersistenceError>
}>() {}

/**
 * What `truncateAtCorruption` drops (DOC-05): the first corrupt record of a session and every
 * record after it. Lines count as the file store counts them (1 is the header, an event's line is
 * its seq + 2), on every backend.
 *
 * @since 0.3.0
 * @category models
 */
export interface CorruptTail {
  readonly id: SessionId
  /** The corrupt record: its line, the seq of its position, and why it was refused. */
  readonly line: number
  readonly seq: number
  readonly reason: string
  /** The events kept: seq 0 up to `seq - 1`, and their stored size in bytes (the header included). */
  readonly keptEvents: number
  readonly keptBytes: number
  /** Each record dropped, in order: its line and its size in bytes as stored (a torn tail too). */
  readonly dropped: ReadonlyArray<{ readonly line: number; readonly bytes: number }>
  readonly droppedBytes: number
  /**
   * The dropped records as stored: for a file, its bytes from the cut to its end (appending them
   * restores it); for SQL, each dropped row's record text on a line.
   */
  readonly data: Uint8Array
}

/** The lock of one memory writer: which instance holds it, and which of its writers. */
interface MemoryLock {
  readonly instanceId: string
  readonly token: number
}

interface MemoryEntry {
  readonly header: SessionHeader
  readonly events: Array<SessionEvent>
  /** The session's size as the file store would count it (DUR-05): header and event lines. */
  bytes: number
  updatedAt: number
  lock: MemoryLock | undefined
  /** HOST-04: the recovery summary, folded as events are appended (recovery reads no log). */
  summary: summary.SummaryState
}

/** HOST-04: a summary folded from scratch (after `truncate`). */
const summaryFrom = (header: SessionHeader, events: ReadonlyArray<SessionEvent>): summary.SummaryState => {
  const state = summary.emptyState()
  for (const event of events) summary.foldEvent(state, event.seq, event.type, event.data, header.seedLength)
  return state
}

/**
 * Storage shared by every `layerMemory` built over it, standing in for a disk that outlives
 * processes. `crash(instanceId)` simulates the death of one process: its locks vanish and its
 * writers stop working, while what it stored stays.
 *
 * @since 0.1.0
 * @category memory
 */
export interface MemoryStorage {
  readonly crash: (instanceId: string) => Effect.Effect<void>
  /** The stored events of a session (for tests). */
  readonly events: (id: SessionId) => Effect.Effect<ReadonlyArray<SessionEvent> | undefined>
  /** Replaces a session's stored events (for tests that simulate a crash at an append boundary). */
  readonly truncate: (id: SessionId, length: number) => Effect.Effect<void>
  /** @internal */
  readonly sessions: Map<string, MemoryEntry>
}

/**
 * Makes empty memory storage.
 *
 * @since 0.1.0
 * @category memory
 */
export const makeMemoryStorage: Effect.Effect<MemoryStorage> = Effect.sync(() => {
  const sessions = new Map<string, MemoryEntry>()
  return {
    sessions,
    crash: (instanceId) =>
      Effect.sync(() => {
        for (const entry of sessions.values()) {
          if (entry.lock?.instanceId === instanceId) entry.lock = undefined
        }
      }),
    events: (id) => Effect.sync(() => sessions.get(id)?.events.slice()),
    truncate: (id, length) =>
      Effect.sync(() => {
        const entry = sessions.get(id)
        if (entry === undefined) return
        entry.events.length = Math.min(entry.events.length, length)
        entry.bytes = sizeOf(entry.header, entry.events)
        entry.summary = summaryFrom(entry.header, entry.events)
      })
  }
})

/** A stored session's size, recomputed (only `truncate` needs it: appends keep it up to date). */
const sizeOf = (header: SessionHeader, events: ReadonlyArray<SessionEvent>): number =>
  recordSize.headerBytes(header) + recordSize.recordsBytes(events.map((event) => JSON.stringify(event)))

let nextToken = 0

const lockedError = (id: string, lock: { readonly instanceId: string }) =>
  new SessionError.SessionLocked({ id, holder: `memory writer of instance ${JSON.stringify(lock.instanceId)}` })

/** A memory layer's state: its process id, its size limits and the sessions of its storage. */
interface MemoryLayer {
  readonly instanceId: string
  readonly limits: { readonly maxEventBytes: number; readonly maxSessionBytes: number }
  readonly sessions: Map<string, MemoryEntry>
}

/**
 * PERS-01: takes the session's lock for this writer and releases it with the current Scope. The
 * release is registered first and the lock taken in the continuation, one synchronous step: an
 * interruption before that step leaves a release with nothing to do, so no mask is needed (B1).
 */
const acquireMemory = (layer: MemoryLayer, id: SessionId, entry: MemoryEntry, createMode: boolean) =>
  Effect.withFiberRuntime<SessionWriter, SessionError.SessionLocked, Scope.Scope>((fiber) => {
    let lock: MemoryLock | undefined
    const scope = Context.unsafeGet(fiber.currentContext, Scope.Scope)
    const release = Effect.sync(() => {
      if (lock !== undefined && entry.lock === lock) entry.lock = undefined
    })
    return Effect.flatMap(Scope.addFinalizer(scope, release), () => {
      if (entry.lock !== undefined) return Effect.fail(lockedError(id, entry.lock))
      const held = { instanceId: layer.instanceId, token: ++nextToken }
      lock = held
      entry.lock = held
      return Effect.succeed(memoryWriter(layer, id, entry, held, createMode))
    })
  })

/**
 * PERS-02, DUR-05/09: appends `events` if this writer still holds the session, contiguous from the
 * stored length, encoded and measured as the file store would write them; nothing is stored if refused.
 */
const appendMemory = (
  layer: MemoryLayer,
  id: SessionId,
  entry: MemoryEntry,
  holds: () => boolean,
  events: Parameters<SessionWriter["append"]>[0]
): ReturnType<SessionWriter["append"]> => {
  if (!holds()) {
    return Effect.fail(
      new SessionError.SessionConflict({ id, expectedSeq: events[0].seq, actualSeq: entry.events.length })
    )
  }
  // PERS-02: contiguous from the stored length, as on the other layers
  for (let i = 0; i < events.length; i++) {
    const seq = events[i]!.seq
    if (seq !== entry.events.length + i) {
      return Effect.fail(new SessionError.SessionConflict({ id, expectedSeq: seq, actualSeq: entry.events.length + i }))
    }
  }
  // DUR-05/DUR-09: encoded and measured as the file store would write it, nothing stored if refused
  const records = recordSize.encodeRecords(events, layer.limits.maxEventBytes)
  if (Either.isLeft(records)) return Effect.fail(records.left)
  const added = recordSize.recordsBytes(records.right)
  const full = recordSize.overLimit(id, entry.bytes, added, layer.limits.maxSessionBytes)
  if (full !== undefined) return Effect.fail(full)
  for (const event of events) {
    entry.events.push(event)
    summary.foldEvent(entry.summary, event.seq, event.type, event.data, entry.header.seedLength)
  }
  entry.bytes += added
  entry.updatedAt = Date.now()
  return Effect.void
}

/** The exclusive writer of one session in memory (PERS-01), holding `lock`. */
const memoryWriter = (
  layer: MemoryLayer,
  id: SessionId,
  entry: MemoryEntry,
  lock: MemoryLock,
  createMode: boolean
): SessionWriter => {
  const holds = () => entry.lock === lock && layer.sessions.get(id) === entry
  return {
    nextSeq: Effect.sync(() => entry.events.length),
    append: (events) => Effect.suspend(() => appendMemory(layer, id, entry, holds, events)),
    discard: Effect.suspend(() => {
      if (!createMode) {
        return Effect.fail(
          new SessionError.PersistenceError({ reason: `discard of ${id}: only a writer from create may discard` })
        )
      }
      if (holds()) {
        layer.sessions.delete(id)
        entry.lock = undefined
      }
      return Effect.void
    })
  }
}

/** PERS-03: a new session's entry and its writer; an existing one is `SessionAlreadyExists` (or locked). */
const createMemory = (layer: MemoryLayer, header: SessionHeader) =>
  // plain code around the acquire, no generator (B1)
  Effect.suspend(() => {
    const existing = layer.sessions.get(header.id)
    if (existing !== undefined) {
      return Effect.fail(
        existing.lock !== undefined
          ? lockedError(header.id, existing.lock)
          : new SessionError.SessionAlreadyExists({ id: header.id })
      )
    }
    const entry: MemoryEntry = {
      header,
      events: [],
      bytes: recordSize.headerBytes(header),
      updatedAt: Date.now(),
      lock: undefined,
      summary: summary.emptyState()
    }
    layer.sessions.set(header.id, entry)
    return acquireMemory(layer, header.id, entry, true)
  })

/** The persistence service over a memory layer's state (PERS). */
const memoryPersistence = (layer: MemoryLayer) => {
  const sessions = layer.sessions
  return SessionPersistence.of({
    create: (header) => createMemory(layer, header),
    openWrite: (id) =>
      Effect.gen(function*() {
        const entry = sessions.get(id)
        if (entry === undefined) return yield* new SessionError.SessionNotFound({ id })
        const writer = yield* acquireMemory(layer, id, entry, false)
        return { writer, stored: { header: entry.header, events: entry.events.slice(), tornTailDropped: 0 } }
      }),
    read: (id) =>
      Effect.suspend(() => {
        const entry = sessions.get(id)
        return entry === undefined
          ? Effect.fail(new SessionError.SessionNotFound({ id }))
          : Effect.succeed({ header: entry.header, events: entry.events.slice(), tornTailDropped: 0 })
      }),
    list: S.suspend(() =>
      S.fromIterable(
        Array.from(sessions.entries(), ([id, entry]): SessionSummary => ({
          _tag: "SessionSummary",
          id: id as SessionId,
          header: entry.header,
          eventCount: entry.events.length,
          updatedAt: entry.updatedAt
        }))
      )
    ),
    // HOST-04: the summaries kept as events were appended; no log is read
    summaries: S.suspend(() =>
      S.fromIterable(
        Array.from(sessions.entries(), ([id, entry]) => summary.summaryOf(id as SessionId, entry.summary))
      )
    ),
    exists: (id) => Effect.sync(() => sessions.has(id)),
    remove: (id) =>
      Effect.suspend(() => {
        const entry = sessions.get(id)
        if (entry === undefined) return Effect.void
        if (entry.lock !== undefined) return Effect.fail(lockedError(id, entry.lock))
        sessions.delete(id)
        return Effect.void
      })
  })
}

/**
 * Persistence in memory over `storage`, as process `instanceId` (default: a random id).
 * Acknowledged means stored (PERS-04). Appends are encoded and measured as the other layers do
 * (DUR-05, DUR-09): a value the file store could not write, or a batch over the limits, is refused
 * here too, with the same error.
 *
 * @since 0.1.0
 * @category memory
 */
export const layerMemory = (
  storage: MemoryStorage,
  options?: { readonly instanceId?: string | undefined } & SizeLimits
): Layer.Layer<SessionPersistence> =>
  Layer.sync(SessionPersistence, () => {
    // CORE-08: options decoded by their Schema; a bad one is a defect of the layer (it has no error channel)
    const decoded = Either.getOrThrowWith(internalOptions.decodeMemoryOptions(options), (error) => error)
    return memoryPersistence({
      instanceId: decoded.instanceId ?? globalThis.crypto.randomUUID(),
      limits: decoded.limits,
      sessions: storage.sessions
    })
  })
