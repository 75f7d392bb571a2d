/**
 * HOST-04 for the file store: the recovery summary of each `<id>.jsonl` from a sidecar index
 * `.summaries/<id>.json` — the summary fold's state (HOST-04, `log/summary.ts`) at a byte offset of
 * the log. Only the bytes appended since are read and folded; the sidecar is then rewritten. It is
 * a cache: written without fsync (appends never touch it, so B6 is unchanged), rebuilt from the
 * whole log when missing, unreadable, or not matching the log (another session under the same id,
 * a log shorter than its offset, a first new record whose seq is not the expected one).
 *
 * @internal
 */
import type { FileSystem, Path } from "@effect/platform"
import { Effect, Either, Stream } from "effect"
import type { SessionId } from "../../../Message.js"
import { sessionId as parseSessionId } from "../../../Message.js"
import type * as SessionError from "../../../SessionError.js"
import type { RecoverySummary, UnreadableSession } from "../../../SessionPersistence.js"
import * as fileLock from "./lock.js"
import type { OpenStepState, SummaryState } from "../../log/summary.js"
import { emptyState, foldEvent, summaryOf } from "../../log/summary.js"

/** The open step's requests in a sidecar (HIL-04): the fold's {@link OpenStepState} as JSON. */
interface SidecarStep {
  readonly turn: number
  readonly step: number
  readonly seq: number
  readonly approvals: ReadonlyArray<readonly [string, number | null]>
  readonly approved: ReadonlyArray<string>
  readonly questions: ReadonlyArray<readonly [string, readonly [string, number | null]]>
}

/**
 * The sidecar's shape (version 2: version 1 had no open step, so a version-1 sidecar is rebuilt — it
 * may have folded requests it did not keep).
 */
interface Sidecar {
  readonly v: 2
  readonly createdAt: number
  readonly seedLength: number
  /** Bytes of the log folded: always the end of a complete record. */
  readonly offset: number
  readonly nextSeq: number
  readonly openTurn: number
  readonly pending: ReadonlyArray<readonly [string, boolean]>
  /** The parent of a sub-agent's child session (its header's `child`). */
  readonly parent?: string
  /** HIL-04: the open step's requests, while a step is open. */
  readonly open?: SidecarStep
}

const SIDECAR_DIRECTORY = ".summaries"

const decoder = new TextDecoder("utf-8")

const isSidecar = (u: unknown): u is Sidecar => {
  if (typeof u !== "object" || u === null) return false
  const s = u as Record<string, unknown>
  return s["v"] === 2 && typeof s["createdAt"] === "number" && typeof s["seedLength"] === "number" &&
    typeof s["offset"] === "number" && typeof s["nextSeq"] === "number" && typeof s["openTurn"] === "number" &&
    Array.isArray(s["pending"]) && (s["open"] === undefined || isSidecarStep(s["open"]))
}

const isSidecarStep = (u: unknown): u is SidecarStep => {
  if (typeof u !== "object" || u === null) return false
  const s = u as Record<string, unknown>
  return typeof s["turn"] === "number" && typeof s["step"] === "number" && typeof s["seq"] === "number" &&
    Array.isArray(s["approvals"]) &&
    Array.isArray(s["approved"]) && Array.isArray(s["questions"])
}

const stepFromSidecar = (open: SidecarStep | undefined): OpenStepState | undefined =>
  open === undefined ? undefined : {
    turn: open.turn,
    step: open.step,
    seq: open.seq,
    approvals: new Map(open.approvals),
    approved: new Set(open.approved),
    questions: new Map(open.questions)
  }

const stepToSidecar = (open: OpenStepState): SidecarStep => ({
  turn: open.turn,
  step: open.step,
  seq: open.seq,
  approvals: Array.from(open.approvals),
  approved: Array.from(open.approved),
  questions: Array.from(open.questions)
})

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** What folding the complete records of `bytes` gave, or why the sidecar does not fit the log. */
type Folded =
  | { readonly _tag: "Folded"; readonly consumed: number; readonly header?: { createdAt: number; seedLength: number } }
  | { readonly _tag: "Mismatch" }
  | { readonly _tag: "Corrupt"; readonly problem: string }

/**
 * Folds the complete (newline-terminated) records of `bytes` into `state`; an unterminated tail
 * (a write in flight or torn) is left for next time. `withHeader`: the first record is the header.
 */
const foldRecords = (bytes: Uint8Array, state: SummaryState, withHeader: boolean, seedLength: number): Folded => {
  let start = 0
  let header: { createdAt: number; seedLength: number } | undefined
  let seed = seedLength
  let first = true
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] !== 0x0a) continue
    const line = decoder.decode(bytes.subarray(start, i))
    start = i + 1
    const record = parseJson(line) as Record<string, unknown> | undefined
    if (record === undefined || typeof record !== "object") {
      return { _tag: "Corrupt", problem: "a record is not JSON" }
    }
    if (withHeader && header === undefined) {
      if (typeof record["createdAt"] !== "number" || typeof record["seedLength"] !== "number") {
        return { _tag: "Corrupt", problem: "the first record is not a session header" }
      }
      header = { createdAt: record["createdAt"], seedLength: record["seedLength"] }
      seed = header.seedLength
      const child = record["child"] as { readonly parent?: unknown } | undefined
      if (typeof child?.parent === "string") state.parent = child.parent
      continue
    }
    const seq = record["seq"]
    if (typeof seq !== "number" || typeof record["type"] !== "string") {
      return { _tag: "Corrupt", problem: "a record is not an event" }
    }
    if (first && !withHeader && seq !== state.nextSeq) return { _tag: "Mismatch" }
    first = false
    foldEvent(state, seq, record["type"], record["data"], seed)
  }
  return header === undefined ? { _tag: "Folded", consumed: start } : { _tag: "Folded", consumed: start, header }
}

/** Where the file store's logs and their sidecars are. */
interface Files {
  readonly fs: FileSystem.FileSystem
  readonly path: Path.Path
  readonly directory: string
  readonly sidecarDirectory: string
}

const sidecarPathIn = (d: Files, id: string) => d.path.join(d.sidecarDirectory, `${id}.json`)

/**
 * Removes the sidecar of `id` (DOC-02: a removed or truncated log takes its summary with it, so a
 * later session under the same id never starts from a stale one). A missing sidecar is fine.
 *
 * @internal
 */
export const removeSidecar = (
  deps: { readonly fs: FileSystem.FileSystem; readonly path: Path.Path; readonly directory: string },
  id: string
): Effect.Effect<void, SessionError.PersistenceError> =>
  deps.fs.remove(deps.path.join(deps.directory, SIDECAR_DIRECTORY, `${id}.json`)).pipe(
    Effect.catchIf(fileLock.isNotFound, () => Effect.void),
    Effect.mapError(fileLock.persistenceError(`removing the summary of session ${JSON.stringify(id)}`))
  )

/** The bytes of `file` from `offset` to its end, in one array. */
const readBytes = (d: Files, file: string, offset: number) =>
  d.fs.stream(file, { offset: BigInt(offset) }).pipe(
    Stream.runCollect,
    Effect.map((chunks) => {
      let total = 0
      for (const chunk of chunks) total += chunk.length
      const out = new Uint8Array(total)
      let at = 0
      for (const chunk of chunks) {
        out.set(chunk, at)
        at += chunk.length
      }
      return out
    })
  )

/** The sidecar of `id`, or undefined when it is missing or not one. */
const readSidecar = (d: Files, id: string) =>
  d.fs.readFileString(sidecarPathIn(d, id)).pipe(
    Effect.map((text) => {
      const parsed = parseJson(text)
      return isSidecar(parsed) ? parsed : undefined
    }),
    Effect.orElseSucceed(() => undefined)
  )

// a cache: not synced, and a failure to write it only costs a fuller read next time
const writeSidecar = (d: Files, id: string, sidecar: Sidecar) =>
  d.fs.makeDirectory(d.sidecarDirectory, { recursive: true }).pipe(
    Effect.zipRight(d.fs.writeFileString(sidecarPathIn(d, id), JSON.stringify(sidecar))),
    Effect.catchAll((error) => Effect.logDebug(`effect-agent: could not write the summary of ${id}`, error))
  )

/** The header's identity, read from the first line only (to check the sidecar is this log's). */
const headerOf = (d: Files, file: string) =>
  d.fs.stream(file, { bytesToRead: BigInt(64 * 1024) }).pipe(
    Stream.runHead,
    Effect.map((chunk) => {
      if (chunk._tag === "None") return undefined
      const end = chunk.value.indexOf(0x0a)
      if (end < 0) return undefined
      const header = parseJson(decoder.decode(chunk.value.subarray(0, end))) as Record<string, unknown> | undefined
      return typeof header?.["createdAt"] === "number" ? header["createdAt"] : undefined
    })
  )

/** The sidecar's state with the records appended since folded in; undefined when it does not fit the log. */
const fromSidecar = (d: Files, file: string, size: number, sidecar: Sidecar) =>
  Effect.gen(function*() {
    if (sidecar.offset > size || (yield* headerOf(d, file)) !== sidecar.createdAt) return undefined
    const state: SummaryState = {
      nextSeq: sidecar.nextSeq,
      openTurn: sidecar.openTurn,
      pending: new Map(sidecar.pending),
      parent: typeof sidecar.parent === "string" ? sidecar.parent : undefined,
      open: stepFromSidecar(sidecar.open)
    }
    if (sidecar.offset === size) return { state, sidecar }
    const folded = foldRecords(yield* readBytes(d, file, sidecar.offset), state, false, sidecar.seedLength)
    if (folded._tag !== "Folded") return undefined
    return { state, sidecar: { ...sidecar, offset: sidecar.offset + folded.consumed } }
  })

/** The whole log folded from its start, or why it cannot be. */
const rebuild = (d: Files, file: string) =>
  Effect.gen(function*() {
    const state = emptyState()
    const folded = foldRecords(yield* readBytes(d, file, 0), state, true, 0)
    if (folded._tag !== "Folded") return folded._tag === "Corrupt" ? folded.problem : "the log does not fold"
    if (folded.header === undefined) return "the log has no complete header"
    return { state, createdAt: folded.header.createdAt, seedLength: folded.header.seedLength, offset: folded.consumed }
  })

/** HOST-04: the summary of one log, from its sidecar when it fits, else rebuilt (the sidecar rewritten). */
const summaryOfFile = (d: Files, id: SessionId) =>
  Effect.gen(function*() {
    const file = d.path.join(d.directory, `${id}.jsonl`)
    const size = Number((yield* d.fs.stat(file)).size)
    const sidecar = yield* readSidecar(d, id)
    const cached = sidecar === undefined ? undefined : yield* fromSidecar(d, file, size, sidecar)
    if (cached !== undefined) {
      if (cached.sidecar.offset !== sidecar!.offset) yield* writeSidecar(d, id, toSidecar(cached.sidecar, cached.state))
      return summaryOf(id, cached.state)
    }
    const rebuilt = yield* rebuild(d, file)
    if (typeof rebuilt === "string") {
      return { _tag: "UnreadableSession", id, problem: rebuilt } satisfies UnreadableSession
    }
    yield* writeSidecar(d, id, toSidecar(rebuilt, rebuilt.state))
    return summaryOf(id, rebuilt.state)
  })

/** The entry of one `<id>.jsonl`: its summary, or unreadable with the reason. */
const entryOf = (d: Files, name: string): Effect.Effect<RecoverySummary | UnreadableSession> => {
  const stem = name.slice(0, -".jsonl".length)
  const id = parseSessionId(stem)
  if (Either.isLeft(id)) {
    return Effect.succeed({ _tag: "UnreadableSession", id: stem, problem: id.left.message })
  }
  return summaryOfFile(d, id.right).pipe(
    Effect.catchAll((error) =>
      Effect.succeed<UnreadableSession>({ _tag: "UnreadableSession", id: stem, problem: String(error) })
    )
  )
}

/** HOST-04: every session of the directory, summarised from its sidecar and its new bytes. */
const summariesIn = (d: Files): Stream.Stream<RecoverySummary | UnreadableSession, SessionError.PersistenceError> =>
  Stream.unwrap(
    d.fs.readDirectory(d.directory).pipe(
      Effect.catchIf(fileLock.isNotFound, () => Effect.succeed<Array<string>>([])),
      Effect.mapError(fileLock.persistenceError(`listing ${d.directory}`)),
      Effect.map((names) =>
        Stream.fromIterable(names.filter((name) => name.endsWith(".jsonl")).sort()).pipe(
          Stream.mapEffect((name) => entryOf(d, name))
        )
      )
    )
  ).pipe(Stream.withSpan("FileSessionPersistence.summaries"))

/** @internal */
export const make = (deps: {
  readonly fs: FileSystem.FileSystem
  readonly path: Path.Path
  readonly directory: string
}) => {
  const d: Files = { ...deps, sidecarDirectory: deps.path.join(deps.directory, SIDECAR_DIRECTORY) }
  return { summaries: summariesIn(d), sidecarPath: (id: string) => sidecarPathIn(d, id) }
}

const toSidecar = (
  at: { readonly createdAt: number; readonly seedLength: number; readonly offset: number },
  state: SummaryState
): Sidecar => ({
  v: 2,
  createdAt: at.createdAt,
  seedLength: at.seedLength,
  offset: at.offset,
  nextSeq: state.nextSeq,
  openTurn: state.openTurn,
  pending: Array.from(state.pending),
  ...(state.parent !== undefined ? { parent: state.parent } : {}),
  ...(state.open !== undefined ? { open: stepToSidecar(state.open) } : {})
})
