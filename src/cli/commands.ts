/**
 * `effect-agent sessions list | show | export | verify | repair | break-lock | rm` (CLI-01), on
 * `@effect/cli`. Every command takes the store flags (exactly one of `--dir`, `--sqlite`,
 * `--postgres`) and `--json`. Read commands (`list`, `show`, `export`, `verify`) open the store
 * read-only and never take a lock; `repair` writes like a resume would, under the session's lock;
 * `break-lock` uses the backend's operator tool; `rm` refuses a locked session.
 *
 * @internal
 */
import { Args, Command, Options } from "@effect/cli"
import { FileSystem, Path } from "@effect/platform"
import { Chunk, Clock, Effect, Either, Option, Stream } from "effect"
import type { Scope } from "effect"
import * as Message from "../Message.js"
import type { SessionId } from "../Message.js"
import * as Repair from "../Repair.js"
import * as SessionError from "../SessionError.js"
import type { SessionEvent } from "../SessionEvent.js"
import type { CorruptTail, SessionSummary, UnreadableSession } from "../SessionPersistence.js"
import { CommandFailed, ExitCode, exitCodeOf, LiveLockHolder, UsageError } from "./errors.js"
import * as inspect from "./inspect.js"
import { fields, iso, progress, table, writeJson, writeStderr, writeStdout } from "./output.js"
import * as serve from "./serve.js"
import * as store from "./store.js"
import type { Access, LockHolder, Store, Writer } from "./store.js"

// --- Shared flags ---

const storeFlags = {
  dir: Options.text("dir").pipe(
    Options.withDescription("a directory of session files (FileSessionPersistence)"),
    Options.optional
  ),
  sqlite: Options.text("sqlite").pipe(
    Options.withDescription("a SQLite database file (SqlSessionPersistence)"),
    Options.optional
  ),
  postgres: Options.redacted("postgres").pipe(
    Options.withDescription("a Postgres URL (SqlSessionPersistence)"),
    Options.optional
  ),
  json: Options.boolean("json").pipe(Options.withDescription("print exactly one JSON document on stdout"))
}

interface Flags extends store.StoreFlags {
  readonly json: boolean
}

const idArg = Args.text({ name: "id" }).pipe(Args.withDescription("the session id"))

/** A command's result: the JSON document, and the text people read. */
interface Result {
  readonly json: unknown
  readonly human: string
}

type Failure = { readonly _tag: string; readonly message: string }

/** Says why a command failed (stderr; also stdout under `--json`) and ends it with the error's exit code. */
const fail = (flags: Flags, error: Failure) =>
  Effect.gen(function*() {
    const code = exitCodeOf(error)
    yield* writeStderr(`effect-agent: ${error.message}`)
    if (flags.json) yield* writeJson({ error: { _tag: error._tag, message: error.message, exitCode: code } })
    return yield* new CommandFailed({ code })
  })

/** Runs `body` on the store the flags name, then prints its result the way the flags ask. */
const withStore = <E extends Failure>(
  flags: Flags,
  access: Access,
  body: (store: Store) => Effect.Effect<Result, E, Scope.Scope | FileSystem.FileSystem | Path.Path>
): Effect.Effect<void, CommandFailed, FileSystem.FileSystem | Path.Path> =>
  Effect.scoped(Effect.flatMap(store.open(flags, access), body)).pipe(
    Effect.flatMap((result) => (flags.json ? writeJson(result.json) : writeStdout(result.human))),
    Effect.catchAll((error) => fail(flags, error))
  )

const parseId = (raw: string): Effect.Effect<SessionId, UsageError> =>
  Either.match(Message.sessionId(raw), {
    onLeft: (error) => Effect.fail(new UsageError({ reason: error.message })),
    onRight: Effect.succeed
  })

/** A command on one session: the id is checked before the store is opened. */
const onSession = <E extends Failure>(
  flags: Flags,
  raw: string,
  access: Access,
  body: (store: Store, id: SessionId) => Effect.Effect<Result, E, Scope.Scope | FileSystem.FileSystem | Path.Path>
) =>
  Effect.flatMap(Effect.either(parseId(raw)), (id) =>
    Either.isLeft(id) ? fail(flags, id.left) : withStore(flags, access, (opened) => body(opened, id.right)))

// --- list ---

const summaryJson = (entry: SessionSummary | UnreadableSession) =>
  entry._tag === "UnreadableSession"
    ? { _tag: entry._tag, id: entry.id, problem: entry.problem }
    : {
      _tag: entry._tag,
      id: entry.id,
      eventCount: entry.eventCount,
      createdAt: iso(entry.header.createdAt),
      updatedAt: iso(entry.updatedAt),
      ...(entry.header.parentSession === undefined ? {} : { parentSession: entry.header.parentSession })
    }

const listRows = (entries: ReadonlyArray<SessionSummary | UnreadableSession>) =>
  entries.map((entry) =>
    entry._tag === "UnreadableSession"
      ? [entry.id, "-", "-", `UNREADABLE: ${entry.problem}`]
      : [entry.id, String(entry.eventCount), iso(entry.header.createdAt), iso(entry.updatedAt)]
  )

const listSessions = (opened: Store) =>
  Effect.gen(function*() {
    const shown = progress()
    let count = 0
    const entries = yield* opened.persistence.list.pipe(
      Stream.tap(() => (++count % 100 === 0 ? shown.update(`listing sessions: ${count}`) : Effect.void)),
      Stream.runCollect,
      Effect.map(Chunk.toReadonlyArray),
      Effect.ensuring(shown.done)
    )
    const unreadable = entries.filter((entry) => entry._tag === "UnreadableSession").length
    const footer = `${entries.length} session(s) in ${opened.description}` +
      (unreadable === 0 ? "" : `, ${unreadable} unreadable`)
    return {
      json: { sessions: entries.map(summaryJson) },
      human: entries.length === 0
        ? `no sessions in ${opened.description}`
        : `${table(["ID", "EVENTS", "CREATED", "UPDATED"], listRows(entries))}\n\n${footer}`
    } satisfies Result
  })

const list = Command.make("list", storeFlags, (flags) => withStore(flags, "read", listSessions)).pipe(
  Command.withDescription("list the stored sessions, unreadable ones included (read-only)")
)

// --- show and verify ---

/** SEC-09: the writer holding the lock, as JSON (`null`: no lock). */
const writerJson = (lock: Option.Option<LockHolder>) =>
  Option.match(lock, {
    onNone: () => null,
    onSome: ({ writer }) =>
      writer._tag === "Running"
        ? { state: "running", pid: writer.pid, started: writer.started }
        : { state: writer._tag === "Gone" ? "gone" : "unknown" }
  })

const reportJson = (report: inspect.Report, lock: Option.Option<LockHolder>) => ({
  id: report.id,
  header: report.header,
  eventCount: report.eventCount,
  lastEventAt: report.lastEventAt === null ? null : iso(report.lastEventAt),
  turns: report.turns,
  lastTurn: report.lastTurn,
  tornTailDropped: report.tornTailDropped,
  repair: report.repair,
  inbox: report.inbox,
  pending: report.pending,
  lock: Option.getOrNull(Option.map(lock, (holder) => holder.description)),
  writer: writerJson(lock)
})

/** The writer of the lock, if any: what decides whether an open turn was interrupted (SEC-09). */
const lockWriter = (lock: Option.Option<LockHolder>): Writer | undefined =>
  Option.getOrUndefined(Option.map(lock, (holder) => holder.writer))

const lockText = (lock: Option.Option<LockHolder>): string =>
  Option.match(lock, {
    onNone: () => "none",
    onSome: ({ description, writer }) =>
      writer._tag === "Running"
        ? `${description}: a live writer (process ${writer.pid}, ${writer.started}, running on this host)`
        : description
  })

const reportFields = (report: inspect.Report, lock: Option.Option<LockHolder>): Array<readonly [string, string]> => [
  ["Session", report.id],
  ["Created", `${iso(report.header.createdAt)} (format version ${report.header.version})`],
  ...(report.header.parentSession === undefined
    ? []
    : [["Forked from", `${report.header.parentSession} (${report.header.seedLength} seed events)`] as const]),
  ["Events", `${report.eventCount}${report.lastEventAt === null ? "" : `, the last at ${iso(report.lastEventAt)}`}`],
  ["Turns", `${report.turns}; ${inspect.describeLastTurn(report.lastTurn, lockWriter(lock))}`],
  ["Inbox", `${report.inbox.nextTurn} pending for the next turn, ${report.inbox.nextStep} for the next step`],
  // HIL-06: what a person has to settle (decide it through the host, the gateway or HTTP)
  ...(report.pending.length === 0
    ? [["Pending", "nothing to approve or answer"] as const]
    : report.pending.map((item, i) => [i === 0 ? "Pending" : "", inspect.describePending(item)] as const)),
  ["Lock", lockText(lock)]
]

/** Reads `id` read-only and runs the checks of a resume on it. */
const examine = (opened: Store, id: SessionId) =>
  Effect.gen(function*() {
    const shown = progress()
    yield* shown.update(`reading session ${id}…`)
    const stored = yield* opened.persistence.read(id).pipe(Effect.ensuring(shown.done))
    yield* shown.update(`checking ${stored.events.length} events…`)
    const report = yield* inspect.report(id, stored).pipe(Effect.ensuring(shown.done))
    const lock = yield* opened.lockHolder(id)
    return { report, lock }
  })

const show = Command.make("show", { ...storeFlags, id: idArg }, ({ id, ...flags }) =>
  onSession(flags, id, "read", (opened, sessionId) =>
    Effect.map(examine(opened, sessionId), ({ lock, report }) => ({
      json: reportJson(report, lock),
      human: fields(reportFields(report, lock))
    })))).pipe(Command.withDescription(
      "show a session's header, size, last turn, inbox, pending approvals and questions, and lock (read-only)"
    ))

const repairLines = (closers: ReadonlyArray<inspect.Closer>) =>
  closers.map((closer) => `  seq ${closer.seq} ${closer.type}: ${closer.description}`)

/**
 * What `repair` would write. SEC-09: while a live writer holds the session nothing — a repair is
 * refused, and the writer closes its own turn — so no closer is listed as if the turn were interrupted.
 */
const repairText = (report: inspect.Report, writer: Writer | undefined): string => {
  if (writer?._tag === "Running") return "nothing: its writer is running (a repair is refused until it stops)"
  return report.repair.length === 0 ? "nothing to write" : `would write ${report.repair.length} event(s):`
}

const verifyText = (report: inspect.Report, lock: Option.Option<LockHolder>) => {
  const writer = lockWriter(lock)
  const torn = report.tornTailDropped === 0
    ? ""
    : `; ${report.tornTailDropped} unterminated last record (a torn write) is dropped by a resume or repair`
  const rows: Array<readonly [string, string]> = [
    ["Session", report.id],
    ["Header", `ok (format version ${report.header.version})`],
    ["Records", `ok: ${report.eventCount} events${torn}`],
    ["Inbox", `ok: replays; ${report.inbox.nextTurn} + ${report.inbox.nextStep} messages pending after repair`],
    ["Last turn", inspect.describeLastTurn(report.lastTurn, writer)],
    ["Repair", repairText(report, writer)],
    ["Lock", lockText(lock)]
  ]
  const lines = fields(rows).split("\n")
  const verdict = writer?._tag === "Running"
    ? `ok: the session is sound; a live writer holds it (process ${writer.pid}, ${writer.started}), so it is ` +
      "resumed nowhere else while that process runs"
    : "ok: the session can be resumed"
  // the closers go under their row, before the lock
  const closers = writer?._tag === "Running" ? [] : repairLines(report.repair)
  return [...lines.slice(0, 6), ...closers, ...lines.slice(6), "", verdict].join("\n")
}

const verify = Command.make("verify", { ...storeFlags, id: idArg }, ({ id, ...flags }) =>
  onSession(flags, id, "read", (opened, sessionId) =>
    Effect.map(examine(opened, sessionId), ({ lock, report }) => ({
      json: { ok: true, ...reportJson(report, lock) },
      human: verifyText(report, lock)
    })))).pipe(
    Command.withDescription(
      "check a session as a resume would — header, every record, the inbox replay, the open turn and what repair " +
        "would write — without writing (read-only)"
    )
  )

// --- export ---

const exportSession = Command.make(
  "export",
  {
    ...storeFlags,
    id: idArg,
    format: Options.choice("format", ["jsonl", "markdown"]).pipe(Options.withDefault("jsonl"))
  },
  ({ format, id, ...flags }) =>
    onSession(flags, id, "read", (opened, sessionId) =>
      Effect.map(opened.persistence.read(sessionId), (stored) => ({
        json: { header: stored.header, events: stored.events },
        human: format === "markdown" ? inspect.markdown(stored) : inspect.jsonl(stored)
      })))
).pipe(Command.withDescription("print a session as JSONL (its stored records) or a Markdown transcript (read-only)"))

// --- repair ---

/** RES-03 without an agent: the closers of the open turn, checked by the inbox replay, written under the lock. */
const repairSession = (opened: Store, id: SessionId) =>
  Effect.gen(function*() {
    const { stored, writer } = yield* opened.persistence.openWrite(id)
    const closers = Repair.closers(stored.events, { seedLength: stored.header.seedLength })
    yield* inspect.report(id, stored)
    if (closers.length > 0) yield* writer.append(closers as unknown as readonly [SessionEvent, ...Array<SessionEvent>])
    const written = closers.map((event) => ({
      seq: event.seq,
      type: event.type,
      description: inspect.describeCloser(event)
    }))
    const torn = stored.tornTailDropped === 0
      ? []
      : [`dropped ${stored.tornTailDropped} unterminated last record (a torn write)`]
    const human = written.length === 0
      ? [...torn, `session ${id} needs no repair: nothing written`]
      : [...torn, `repaired session ${id}: wrote ${written.length} event(s)`, ...repairLines(written)]
    return {
      json: { id, tornTailDropped: stored.tornTailDropped, written },
      human: human.join("\n")
    } satisfies Result
  })

// --- repair --truncate-at-corruption (DOC-05) ---

/** What is dropped, for people: each record's line and size, the first ten of them. */
const droppedText = (cut: CorruptTail): string => {
  const shown = cut.dropped.slice(0, 10).map((record) => `line ${record.line} (${record.bytes} bytes)`)
  const more = cut.dropped.length > 10 ? `, and ${cut.dropped.length - 10} more` : ""
  return `${shown.join(", ")}${more}`
}

const truncationJson = (cut: CorruptTail, backup: string) => ({
  line: cut.line,
  seq: cut.seq,
  reason: cut.reason,
  keptEvents: cut.keptEvents,
  keptBytes: cut.keptBytes,
  dropped: cut.dropped,
  droppedBytes: cut.droppedBytes,
  backup
})

/** Writes the dropped records to a new file (never over one) and syncs it before anything is dropped. */
const writeBackup = (file: string, data: Uint8Array) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const handle = yield* fs.open(file, { flag: "wx" })
    yield* handle.writeAll(data)
    yield* handle.sync
  }).pipe(
    Effect.scoped,
    Effect.mapError((error) =>
      new SessionError.PersistenceError({
        reason: `cannot write the backup ${file} (${error.message}); nothing was dropped`,
        cause: error
      })
    )
  )

/**
 * DOC-05: under the session's lock, the corrupt record and everything after it are described (on
 * stderr), backed up to a file, and only then dropped. A record of a newer format is never dropped.
 */
const truncateSession = (opened: Store, id: SessionId, backupDirectory: Option.Option<string>) =>
  Effect.gen(function*() {
    const truncate = opened.persistence.truncateAtCorruption
    if (truncate === undefined) {
      return yield* new UsageError({ reason: `${opened.description} cannot truncate a session` })
    }
    const path = yield* Path.Path
    const fs = yield* FileSystem.FileSystem
    const stamp = new Date(yield* Clock.currentTimeMillis).toISOString().replace(/[:.]/g, "-")
    const backup = path.resolve(
      Option.getOrElse(backupDirectory, () => opened.backupDirectory),
      opened.backupName(id, stamp)
    )
    const cut = yield* truncate(id, (cut) =>
      Effect.zipRight(
        Effect.provideService(writeBackup(backup, cut.data), FileSystem.FileSystem, fs),
        writeStderr(
          `effect-agent: session ${id}: line ${cut.line} (seq ${cut.seq}) is corrupt: ${cut.reason}\n` +
            `effect-agent: dropping it and everything after it: ${cut.dropped.length} record(s), ` +
            `${cut.droppedBytes} bytes: ${droppedText(cut)}\n` +
            `effect-agent: keeping ${cut.keptEvents} event(s), ${cut.keptBytes} bytes; the dropped records are ` +
            `backed up in ${backup}`
        )
      ))
    return Option.map(cut, (dropped) => ({ cut: dropped, backup }))
  })

const repairTruncated = (opened: Store, id: SessionId, backupDirectory: Option.Option<string>) =>
  Effect.gen(function*() {
    const truncated = yield* truncateSession(opened, id, backupDirectory)
    const repaired = yield* repairSession(opened, id)
    const said = Option.match(truncated, {
      onNone: () => `session ${id} has no corrupt record: nothing dropped`,
      onSome: ({ backup, cut }) =>
        `truncated session ${id} at line ${cut.line} (seq ${cut.seq}): dropped ${cut.dropped.length} record(s), ` +
        `${cut.droppedBytes} bytes (${droppedText(cut)}); kept ${cut.keptEvents} event(s); backup: ${backup}`
    })
    return {
      json: {
        ...(repaired.json as Record<string, unknown>),
        truncated: Option.getOrNull(Option.map(truncated, ({ backup, cut }) => truncationJson(cut, backup)))
      },
      human: `${said}\n${repaired.human}`
    } satisfies Result
  })

/** A corrupt session refused by `repair`: the message says how to get past it. */
const withTruncationHint = <A, E extends Failure, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.mapError(effect, (error): Failure =>
    error._tag === "SessionCorrupt" && (error as unknown as SessionError.SessionCorrupt).line > 1
      ? {
        _tag: error._tag,
        message: `${error.message} To drop this record and everything after it (keeping a backup), run ` +
          "`effect-agent sessions repair <id> --truncate-at-corruption` with the same store."
      }
      : error)

const repair = Command.make(
  "repair",
  {
    ...storeFlags,
    id: idArg,
    truncateAtCorruption: Options.boolean("truncate-at-corruption").pipe(
      Options.withDescription(
        "first drop a corrupt record and every record after it, printing what is dropped and keeping a backup " +
          "(a record of a newer format is never dropped)"
      )
    ),
    backupDir: Options.text("backup-dir").pipe(
      Options.withDescription("where --truncate-at-corruption writes its backup (default: beside the store)"),
      Options.optional
    )
  },
  ({ backupDir, id, truncateAtCorruption, ...flags }) =>
    onSession(flags, id, "write", (opened, sessionId) =>
      truncateAtCorruption
        ? repairTruncated(opened, sessionId, backupDir)
        : withTruncationHint(repairSession(opened, sessionId)))
).pipe(
  Command.withDescription(
    "close an interrupted last turn as a resume would, under the session's lock; with --truncate-at-corruption, " +
      "first drop a corrupt record and everything after it"
  )
)

// --- break-lock and rm ---

/**
 * SEC-07: the lock of a writer that runs on this host is refused (exit 4) unless `force`, which
 * warns; a dead holder's lock, another host's and one naming no process are broken as asked.
 */
const breakSessionLock = (opened: Store, id: SessionId, force: boolean) =>
  Effect.gen(function*() {
    const holder = yield* opened.lockHolder(id)
    if (Option.isNone(holder) && !(yield* opened.persistence.exists(id))) {
      return yield* new SessionError.SessionNotFound({ id })
    }
    // judged once, then broken: a holder that starts in between is not seen (the operator's window, as before)
    const writer = lockWriter(holder)
    const isLive = writer?._tag === "Running"
    if (writer?._tag === "Running") {
      if (!force) return yield* new LiveLockHolder({ id, pid: writer.pid, started: writer.started })
      yield* writeStderr(
        `effect-agent: warning: --force: breaking the lock of session ${JSON.stringify(id)} although its holder, ` +
          `process ${writer.pid} (${writer.started}), is running on this host; if it writes again, two writers ` +
          "share the session"
      )
    }
    yield* opened.breakLock(id)
    const description = Option.map(holder, (held) => held.description)
    return {
      json: { id, broken: Option.isSome(holder), holder: Option.getOrNull(description), forced: isLive },
      human: Option.match(description, {
        onNone: () => `session ${id} was not locked: nothing to break`,
        onSome: (who) => `broke the lock of session ${id}, held by ${who}`
      })
    } satisfies Result
  })

const breakLock = Command.make(
  "break-lock",
  {
    ...storeFlags,
    id: idArg,
    force: Options.boolean("force").pipe(
      Options.withDescription("also break the lock of a holder that is running on this host (it is refused otherwise)")
    )
  },
  ({ force, id, ...flags }) =>
    onSession(flags, id, "read", (opened, sessionId) => breakSessionLock(opened, sessionId, force))
).pipe(
  Command.withDescription(
    "remove a session's writer lock when its holder is gone (another host's, a dead process's); the lock of a " +
      "process running on this host only with --force"
  )
)

const removeSession = (opened: Store, id: SessionId) =>
  Effect.gen(function*() {
    if (!(yield* opened.persistence.exists(id))) return yield* new SessionError.SessionNotFound({ id })
    yield* opened.persistence.remove(id)
    return { json: { id, removed: true }, human: `removed session ${id}` } satisfies Result
  })

const rm = Command.make("rm", { ...storeFlags, id: idArg }, ({ id, ...flags }) =>
  onSession(flags, id, "write", removeSession)).pipe(
    Command.withDescription("delete a stored session; refused while a writer holds it")
  )

// --- serve (HTTP-04) ---

const serveCommand = Command.make("serve", { ...storeFlags, ...serve.serveFlags }, (flags) =>
  Effect.scoped(serve.serve(flags)).pipe(Effect.catchAll((error) => fail(flags, error)))).pipe(
    Command.withDescription(
      "serve the HTTP API (sessions, messages, Server-Sent Events; OpenAPI at /openapi.json) over the store, " +
        "until SIGTERM, which drains running turns"
    )
  )

// --- The command tree ---

/** SEC-09: what a command line that names no command gets — the commands, on stderr, and exit 2. */
const usageOf = (lines: ReadonlyArray<string>) =>
  Effect.zipRight(writeStderr(lines.join("\n")), Effect.fail(new CommandFailed({ code: ExitCode.usage })))

const storeUsage = "(--dir <directory> | --sqlite <file> | --postgres <url>)"

const sessionsUsage = [
  `usage: effect-agent sessions <command> [<id>] ${storeUsage} [--json]`,
  "",
  "commands:",
  "  list                       the stored sessions, unreadable ones included",
  "  show <id>                  a session's header, size, last turn, inbox, pending approvals and lock",
  "  export <id> [--format f]   the session as JSONL or (--format markdown) a transcript",
  "  verify <id>                the checks a resume runs, without writing",
  "  repair <id>                close an interrupted last turn, under the session's lock",
  "    [--truncate-at-corruption] first drop a corrupt record and all after it (a backup is kept)",
  "  break-lock <id> [--force]  remove the lock of a writer that is gone",
  "  rm <id>                    delete a session",
  "",
  "`effect-agent sessions <command> --help` describes a command and its flags."
]

const sessions = Command.make("sessions", {}, () => usageOf(sessionsUsage)).pipe(
  Command.withDescription("inspect and maintain stored sessions"),
  Command.withSubcommands([list, show, exportSession, verify, repair, breakLock, rm])
)

/** The `effect-agent` command. @internal */
export const command = Command.make("effect-agent", {}, () =>
  usageOf([
    "usage: effect-agent sessions <command> [<id>] <store> [--json]",
    `       effect-agent serve [--host h] [--port p] [--token t] [--drain s] [--max-client-buffer b] ${storeUsage}`,
    "",
    "`effect-agent sessions` lists the session commands; `effect-agent <command> --help` describes one."
  ])).pipe(
    Command.withDescription("the operator tool of effect-agent"),
    Command.withSubcommands([sessions, serveCommand])
  )
