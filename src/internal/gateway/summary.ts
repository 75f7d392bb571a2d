/**
 * What the gateway says about a session (HTTP-00): its summary read from a live agent or folded
 * from a stored log, the accepted message behind a reused `MessageId` (for idempotent re-sends),
 * and the live events a front end streams.
 *
 * @internal
 */
import { Effect, Option, Schema } from "effect"
import type { Agent } from "../../Agent.js"
import type { AgentEvent } from "../../AgentEvent.js"
import { ContentPart } from "../../Message.js"
import type { UserMessage } from "../../Message.js"
import type {
  Awaiting,
  ListRequest,
  LiveEvent,
  SessionInfo,
  SessionListEntry,
  SessionStatus,
  UnreadableSession
} from "../../SessionGateway.js"
import type { InboxTarget, SessionEvent, SessionHeader } from "../../SessionEvent.js"
import { wakeByDefault } from "../agent/inbox.js"
import * as pendingRequests from "../log/pending.js"
import { utf8Length } from "../log/recordSize.js"
import * as usage from "../log/usage.js"

interface SpliceData {
  readonly target: InboxTarget
  readonly removed: ReadonlyArray<string>
  readonly inserted: ReadonlyArray<UserMessage>
  readonly outcome?: string | undefined
  readonly wake?: boolean | undefined
}

const headerFields = (header: SessionHeader) => ({
  createdAt: header.createdAt,
  ...(header.parentSession === undefined ? {} : { parentSession: header.parentSession }),
  meta: header.meta
})

/** Whether the log ends inside a turn: the last `turn/*` boundary event is a `turn/start`. @internal */
export const endsInsideTurn = (events: ReadonlyArray<SessionEvent>): boolean => {
  for (let i = events.length - 1; i >= 0; i--) {
    const type = events[i]!.type
    if (type === "turn/end") return false
    if (type === "turn/start") return true
  }
  return false
}

/**
 * HIL-04: what the log's open step waits for, as a summary shows it (the pure derivation of
 * `log/pending.ts`); undefined when the step is not suspended.
 *
 * @internal
 */
export const awaitingOf = (events: ReadonlyArray<SessionEvent>): Awaiting | undefined => {
  const requests = pendingRequests.openStepRequests(events)
  if (Option.isNone(requests) || !requests.value.suspended) return undefined
  const { approvedUndispatched, earliestDeadline, pending } = requests.value
  let approvals = 0
  for (const item of pending) if (item._tag === "Approval") approvals++
  const awaiting = { approvals, questions: pending.length - approvals, approvedUndispatched: approvedUndispatched.length }
  return earliestDeadline === undefined ? awaiting : { ...awaiting, earliestDeadline }
}

/** `awaiting-input` for a suspended turn (HIL-04), else the agent's own status. */
const statusWith = (status: SessionStatus, awaiting: Awaiting | undefined): SessionStatus =>
  awaiting !== undefined && status !== "running" ? "awaiting-input" : status

/**
 * The summary of a stored session from its log: pending messages per inbox list (splices after
 * the seed, as the inbox replays them, INB-05), the open turn, usage sums (MOD-06).
 *
 * @internal
 */
export const fromStored = (header: SessionHeader, events: ReadonlyArray<SessionEvent>): SessionInfo => {
  const pending = new Map<string, InboxTarget>()
  let sums: usage.Sums | undefined
  for (const event of events) {
    if (event.type === "agent/inbox/spliced" && event.seq >= header.seedLength) {
      const splice = event.data as SpliceData
      for (const id of splice.removed) pending.delete(id)
      for (const message of splice.inserted) pending.set(message.id, splice.target)
    }
    sums = usage.add(sums, event)
  }
  let nextTurn = 0
  for (const target of pending.values()) if (target === "next-turn") nextTurn++
  const awaiting = awaitingOf(events)
  return {
    _tag: "SessionInfo",
    id: header.id,
    status: statusWith("passive", awaiting),
    pending: { nextTurn, nextStep: pending.size - nextTurn },
    openTurn: endsInsideTurn(events),
    eventCount: events.length,
    usage: usage.snapshot(sums),
    ...headerFields(header),
    ...(awaiting === undefined ? {} : { awaiting })
  }
}

/** The summary of a live agent's session. @internal */
export const fromLive = (agent: Agent): Effect.Effect<SessionInfo> =>
  Effect.gen(function*() {
    const status = yield* agent.status
    const nextTurn = yield* agent.inbox.nextTurn
    const nextStep = yield* agent.inbox.nextStep
    const events = yield* agent.session.events
    const awaiting = awaitingOf(events)
    return {
      _tag: "SessionInfo" as const,
      id: agent.id,
      status: statusWith(status, awaiting),
      pending: { nextTurn: nextTurn.length, nextStep: nextStep.length },
      openTurn: endsInsideTurn(events),
      eventCount: events.length,
      usage: yield* agent.session.usage,
      ...headerFields(agent.session.header),
      ...(awaiting === undefined ? {} : { awaiting })
    }
  })

/** SEC-06: the most of one session's `meta` a listing carries by default (its UTF-8 JSON length). @internal */
export const DEFAULT_LIST_META_BYTES = 8 * 1024

/**
 * A summary as a listing shows it (SEC-06): without `meta` unless asked; with it when its JSON
 * fits `maxMetaBytes`, else flagged `metaTruncated`. The same for every gateway, so a listing is
 * bounded whatever the sessions' headers hold.
 *
 * @internal
 */
export const listed = (
  info: SessionInfo | SessionListEntry,
  options: { readonly includeMeta?: boolean | undefined; readonly maxMetaBytes?: number | undefined }
): SessionListEntry => {
  const { meta, metaTruncated, ...summary } = info as SessionListEntry
  if (options.includeMeta !== true) return summary
  // an entry a gateway already left its meta out of stays flagged
  if (meta === undefined) return metaTruncated === true ? { ...summary, metaTruncated } : summary
  const limit = options.maxMetaBytes ?? DEFAULT_LIST_META_BYTES
  const text = JSON.stringify(meta)
  // a UTF-8 length is at least the string's length: most oversize values are known without counting
  return text.length <= limit && utf8Length(text) <= limit ? { ...summary, meta } : { ...summary, metaTruncated: true }
}

/** An entry of a gateway's page (SEC-06): a summary as {@link listed} shows it, an unreadable entry as it is. @internal */
export const listedEntry = (
  entry: SessionInfo | UnreadableSession,
  request: ListRequest | undefined
): SessionListEntry | UnreadableSession => entry._tag === "SessionInfo" ? listed(entry, request ?? {}) : entry

/** A message the session accepted: how it was first inserted. @internal */
export interface Accepted {
  readonly message: UserMessage
  readonly target: InboxTarget
  readonly wake: boolean
}

/**
 * The first insertion of message `id` after the seed (the send that accepted it), if any: a later
 * insertion of the same id can only be a crash restore of it.
 *
 * @internal
 */
export const findAccepted = (
  events: ReadonlyArray<SessionEvent>,
  seedLength: number,
  id: string
): Option.Option<Accepted> => {
  for (const event of events) {
    if (event.type !== "agent/inbox/spliced" || event.seq < seedLength) continue
    const splice = event.data as SpliceData
    const message = splice.inserted.find((candidate) => candidate.id === id)
    if (message !== undefined) {
      return Option.some({ message, target: splice.target, wake: splice.wake ?? wakeByDefault(splice) })
    }
  }
  return Option.none()
}

const sameContent = Schema.equivalence(Schema.Array(ContentPart))

/** Whether a re-sent message repeats the accepted one: same content, same list, same wake. @internal */
export const isRepeat = (
  accepted: Accepted,
  content: ReadonlyArray<ContentPart>,
  target: InboxTarget,
  wake: boolean
): boolean => accepted.target === target && accepted.wake === wake && sameContent(accepted.message.content, content)

const optionalInitiator = (event: { readonly initiator?: AgentEvent["agent"] | undefined }) =>
  event.initiator === undefined ? {} : { initiator: event.initiator }

/**
 * The live event a front end streams for an agent event (EVS-02): deltas, tool calls, retries,
 * status changes and errors; `None` for the events whose record is the durable log (turns, inbox
 * changes) or that concern the agent's lifecycle.
 *
 * @internal
 */
export const toLive = (event: AgentEvent): Option.Option<LiveEvent> => {
  const base = { agent: event.agent, ...optionalInitiator(event) }
  switch (event._tag) {
    case "ModelDelta":
      return Option.some({
        _tag: "ModelDelta",
        ...base,
        turn: event.turn,
        step: event.step,
        kind: event.kind,
        text: event.text
      })
    case "ToolCallStarted":
      return Option.some({
        _tag: "ToolCallStarted",
        ...base,
        turn: event.turn,
        step: event.step,
        callId: event.callId,
        name: event.name
      })
    case "ToolCallFinished":
      return Option.some({
        _tag: "ToolCallFinished",
        ...base,
        turn: event.turn,
        step: event.step,
        callId: event.callId,
        isError: event.isError
      })
    case "ModelRetry":
      return Option.some({
        _tag: "ModelRetry",
        ...base,
        turn: event.turn,
        step: event.step,
        attempt: event.attempt,
        code: event.code,
        delay: event.delay
      })
    case "AgentStatusChanged":
      return Option.some({ _tag: "AgentStatusChanged", ...base, status: event.status })
    case "AgentError":
      return Option.some({
        _tag: "AgentError",
        ...base,
        ...(event.turn === undefined ? {} : { turn: event.turn }),
        ...(event.step === undefined ? {} : { step: event.step }),
        error: { message: event.error.message, code: event.error.code }
      })
    default:
      return Option.none()
  }
}

/** A listed entry: a session's summary or an unreadable entry. */
type Entry = SessionInfo | UnreadableSession

/**
 * A page of a listing from its candidate ids (sorted, after the cursor): the first `limit` entries;
 * with a `status` (HIL-06), the first `limit` sessions with that status — `known` gives the status
 * of an id when the gateway knows it without reading the session (a live agent, a store's cheap
 * summary), so those that do not match are not read. `entryOf` reads one (`None`: gone meanwhile).
 *
 * @internal
 */
export const pageOfIds = <E>(
  sorted: ReadonlyArray<string>,
  options: {
    readonly limit: number
    readonly status: SessionStatus | undefined
    readonly concurrency: number
    readonly known?: ((id: string) => SessionStatus | undefined) | undefined
  },
  entryOf: (id: string) => Effect.Effect<Option.Option<Entry>, E>
): Effect.Effect<{ readonly entries: ReadonlyArray<Entry>; readonly next: string | undefined }, E> => {
  const { concurrency, limit, status } = options
  if (status === undefined) {
    const page = sorted.slice(0, limit)
    return Effect.map(Effect.forEach(page, entryOf, { concurrency }), (entries) => ({
      entries: entries.flatMap((entry) => Option.isSome(entry) ? [entry.value] : []),
      next: sorted.length > limit ? page[page.length - 1] : undefined
    }))
  }
  const candidates = sorted.filter((id) => {
    const known = options.known?.(id)
    return known === undefined || known === status
  })
  return Effect.gen(function*() {
    const entries: Array<Entry> = []
    let at = 0
    while (at < candidates.length && entries.length < limit) {
      const chunk = candidates.slice(at, at + concurrency)
      at += chunk.length
      for (const entry of yield* Effect.forEach(chunk, entryOf, { concurrency })) {
        if (entries.length === limit) break
        if (Option.isSome(entry) && entry.value._tag === "SessionInfo" && entry.value.status === status) {
          entries.push(entry.value)
        }
      }
    }
    const last = entries[entries.length - 1]
    const more = entries.length === limit && last !== undefined && candidates[candidates.length - 1]! > last.id
    return { entries, next: more ? last.id : undefined }
  })
}
