/**
 * HOST-04 for SQL stores: the recovery summaries as a query. Per page of sessions, only the rows of
 * the fold's `summaryTypes` are read — turns, steps, inbox splices and the HIL-04 requests, never
 * the messages, tool results or custom events that make up most of a log — and folded by
 * `log/summary.ts`. A session whose open step has requests that a dispatch or a result could settle
 * (rare: a person is deciding) then has that step's `tool/call` and `tool/result` rows read too.
 *
 * @internal
 */
import type { SqlClient } from "@effect/sql/SqlClient"
import { Chunk, Effect, Either, Option, Stream } from "effect"
import type { SessionId } from "../../../Message.js"
import { sessionId as parseSessionId } from "../../../Message.js"
import type * as SessionError from "../../../SessionError.js"
import type { RecoverySummary, UnreadableSession } from "../../../SessionPersistence.js"
import type { SummaryState } from "../../log/summary.js"
import { emptyState, foldEvent, foldRequest, hasOpenRequests, stepCallTypes, summaryOf, summaryTypes } from "../../log/summary.js"
import { persistenceError } from "./log.js"

interface SessionRow {
  readonly session_id: string
  readonly header: string
}

interface EventRow {
  readonly session_id: string
  readonly seq: number | string
  readonly event_type: string
  readonly record: string
}

const PAGE = 500

type Entry = RecoverySummary | UnreadableSession

/** A page's entry: unreadable, or the fold of its session (the step's calls still to fold in). */
type Folded = UnreadableSession | { readonly _tag: "Folded"; readonly id: SessionId; readonly state: SummaryState }

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const foldPage = (sessions: ReadonlyArray<SessionRow>, events: ReadonlyArray<EventRow>): Array<Folded> => {
  const bySession = new Map<string, Array<EventRow>>()
  for (const row of events) {
    const rows = bySession.get(row.session_id)
    if (rows === undefined) bySession.set(row.session_id, [row])
    else rows.push(row)
  }
  return sessions.map((session): Folded => {
    const id = parseSessionId(session.session_id)
    if (Either.isLeft(id)) return { _tag: "UnreadableSession", id: session.session_id, problem: id.left.message }
    const header = parse(session.header) as
      | { readonly seedLength?: unknown; readonly child?: { readonly parent?: unknown } }
      | undefined
    if (typeof header?.seedLength !== "number") {
      return { _tag: "UnreadableSession", id: session.session_id, problem: "the header is not a session header" }
    }
    const parent = header.child?.parent
    const state = emptyState(typeof parent === "string" ? parent : undefined)
    for (const row of bySession.get(session.session_id) ?? []) {
      const record = parse(row.record) as { readonly data?: unknown } | undefined
      if (record === undefined) {
        return { _tag: "UnreadableSession", id: session.session_id, problem: `event ${row.seq} is not JSON` }
      }
      foldEvent(state, Number(row.seq), row.event_type, record.data, header.seedLength)
    }
    return { _tag: "Folded", id: id.right, state }
  })
}

/** HIL-04: the open step's dispatches and results folded in, for a session with requests they may settle. */
const settleStep = (sql: SqlClient, folded: Folded) => {
  if (folded._tag !== "Folded" || !hasOpenRequests(folded.state)) return Effect.succeed<Entry>(entryOf(folded))
  const open = folded.state.open!
  return Effect.map(
    sql<EventRow>`SELECT session_id, seq, event_type, record FROM effect_agent_events
      WHERE session_id = ${folded.id} AND seq > ${open.seq} AND event_type IN ${sql.in(stepCallTypes)}
      ORDER BY seq`,
    (rows): Entry => {
      for (const row of rows) {
        const record = parse(row.record) as { readonly data?: unknown } | undefined
        if (record === undefined) {
          return { _tag: "UnreadableSession", id: folded.id, problem: `event ${row.seq} is not JSON` }
        }
        foldRequest(open, row.event_type, record.data)
      }
      return entryOf(folded)
    }
  )
}

const entryOf = (folded: Folded): Entry => folded._tag === "Folded" ? summaryOf(folded.id, folded.state) : folded

/** @internal */
export const summaries = (sql: SqlClient): Stream.Stream<Entry, SessionError.PersistenceError> => {
  const page = (after: string) =>
    Effect.gen(function*() {
      const sessions = yield* sql<SessionRow>`SELECT session_id, header FROM effect_agent_sessions
        WHERE session_id > ${after} ORDER BY session_id LIMIT ${PAGE}`
      const last = sessions[sessions.length - 1]
      if (last === undefined) return { entries: [], last: undefined }
      const events = yield* sql<EventRow>`SELECT session_id, seq, event_type, record FROM effect_agent_events
        WHERE session_id > ${after} AND session_id <= ${last.session_id}
          AND event_type IN ${sql.in(summaryTypes)}
        ORDER BY session_id, seq`
      const entries = yield* Effect.forEach(foldPage(sessions, events), (folded) => settleStep(sql, folded))
      return { entries, last: sessions.length === PAGE ? last.session_id : undefined }
    }).pipe(
      Effect.catchTag("SqlError", (error) => Effect.fail(persistenceError("summarising the stored sessions")(error)))
    )
  return Stream.paginateChunkEffect("", (after) =>
    Effect.map(page(after), ({ entries, last }): [Chunk.Chunk<Entry>, Option.Option<string>] => [
      Chunk.unsafeFromArray(entries),
      Option.fromNullable(last)
    ])).pipe(Stream.withSpan("SqlSessionPersistence.summaries"))
}
