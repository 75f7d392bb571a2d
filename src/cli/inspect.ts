/**
 * What the operator CLI reports about a stored session (CLI-01), as pure functions of what was
 * read: the summary of `show`, the checks of `verify` (those a resume runs, RES-03: the records,
 * the inbox replay on the repaired log, the open turn and the closers repair would write, REP-02),
 * and the transcript of `export --format markdown`.
 *
 * @internal
 */
import { Effect, Option } from "effect"
import type * as AgentError from "../AgentError.js"
import * as inbox from "../internal/agent/inbox.js"
import * as pendingItems from "../internal/log/pending.js"
import type { ContentPart, SessionId } from "../Message.js"
import type * as Pending from "../Pending.js"
import * as Repair from "../Repair.js"
import type { CoreEvent, SessionEvent, SessionHeader } from "../SessionEvent.js"
import type { StoredSession } from "../SessionPersistence.js"
import type { Writer } from "./store.js"

/** The last turn of a log. @internal */
export type LastTurn =
  | { readonly state: "none" }
  | { readonly state: "closed"; readonly turn: number; readonly reason: string }
  | { readonly state: "open"; readonly turn: number; readonly openStep: number | null }

/** @internal */
export interface InboxCounts {
  readonly nextTurn: number
  readonly nextStep: number
}

/** A closer repair writes, described. @internal */
export interface Closer {
  readonly seq: number
  readonly type: string
  readonly description: string
}

/** `verify`'s findings; `show` reports a part of them. @internal */
export interface Report {
  readonly id: SessionId
  readonly header: SessionHeader
  readonly eventCount: number
  readonly lastEventAt: number | null
  readonly turns: number
  readonly lastTurn: LastTurn
  /** Unterminated last records this read dropped (a resume or `repair` truncates them on disk). */
  readonly tornTailDropped: number
  /** What a resume (or `repair`) would append to close the open turn, in order; empty when none. */
  readonly repair: ReadonlyArray<Closer>
  /** The pending inbox after that repair. */
  readonly inbox: InboxCounts
  /** HIL-06: what a person still has to settle in the suspended turn (approvals, questions), oldest first. */
  readonly pending: ReadonlyArray<Pending.Item>
}

const field = <A>(event: SessionEvent, key: string): A => (event.data as Record<string, unknown>)[key] as A

const lastTurnOf = (events: ReadonlyArray<SessionEvent>): LastTurn => {
  const open = Repair.openTurn(events)
  if (Option.isSome(open)) return { state: "open", turn: open.value.turn, openStep: open.value.openStep ?? null }
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type === "turn/end") {
      return {
        state: "closed",
        turn: field<number>(event, "turn"),
        reason: field<{ readonly kind: string }>(event, "reason").kind
      }
    }
  }
  return { state: "none" }
}

/** One line about a closer (REP-02). @internal */
export const describeCloser = (event: CoreEvent): string => {
  switch (event.type) {
    case "tool/result":
      return `error result ${event.data.error?.code ?? ""} ` +
        `for the call ${JSON.stringify(event.data.message.toolCallId)} ` +
        `of the tool ${JSON.stringify(event.data.message.toolName)}`
    case "step/end":
      return `end of step ${event.data.step} of turn ${event.data.turn}`
    case "turn/end":
      return `end of turn ${event.data.turn} (${event.data.reason.kind})`
    case "agent/inbox/spliced":
      return `${event.data.inserted.length} claimed message(s) put back at the front of ${event.data.target}`
    default:
      return event.type
  }
}

/**
 * The checks a resume runs, without writing (RES-03): the closers of the open turn, then the inbox
 * replayed on the repaired log; fails `InvalidInboxLog` as a resume would.
 *
 * @internal
 */
export const report = (
  id: SessionId,
  stored: StoredSession
): Effect.Effect<Report, AgentError.InvalidInboxLog> =>
  Effect.gen(function*() {
    const { events, header } = stored
    const closers = Repair.closers(events, { seedLength: header.seedLength })
    const repaired = closers.length === 0 ? events : [...events, ...closers]
    const projection = yield* inbox.replay(id, repaired, header.seedLength)
    return {
      id,
      header,
      eventCount: events.length,
      lastEventAt: events.length === 0 ? null : events[events.length - 1]!.time,
      turns: events.reduce((n, event) => (event.type === "turn/start" ? n + 1 : n), 0),
      lastTurn: lastTurnOf(events),
      tornTailDropped: stored.tornTailDropped,
      repair: closers.map((event) => ({ seq: event.seq, type: event.type, description: describeCloser(event) })),
      inbox: { nextTurn: projection.lists["next-turn"].length, nextStep: projection.lists["next-step"].length },
      pending: pendingItems.itemsOf(id, events)
    }
  })

/** HIL-06: one line about a pending item, saying how to settle it. @internal */
export const describePending = (item: Pending.Item): string => {
  const deadline = item.deadline === undefined ? "" : `, rejected automatically at ${new Date(item.deadline).toISOString()}`
  return item._tag === "Approval"
    ? `approval of ${JSON.stringify(item.tool)} (call ${item.callId}, approval ${item.approvalId}) with arguments ` +
      `${item.arguments.length > 200 ? `${item.arguments.slice(0, 200)}…` : item.arguments}${deadline}`
    : `question ${JSON.stringify(item.question)} (call ${item.callId}, request ${item.requestId})${deadline}`
}

/** @internal */
export const describeLastTurn = (turn: LastTurn, writer?: Writer | undefined): string => {
  switch (turn.state) {
    case "none":
      return "no turn yet"
    case "closed":
      return `turn ${turn.turn} closed (${turn.reason})`
    case "open": {
      const open = `turn ${turn.turn} is open${turn.openStep === null ? "" : ` in step ${turn.openStep}`}`
      // SEC-09: an open turn is interrupted only when no live writer may be running it
      switch (writer?._tag) {
        case "Running":
          return `${open}: in progress, held by a live writer (process ${writer.pid}, ${writer.started})`
        case "Unknown":
          return `${open}: its writer (the lock's holder) may still be running it; if that writer is gone, ` +
            "a resume or `repair` closes it"
        default:
          return `${open}: it was interrupted (a resume or \`repair\` closes it)`
      }
    }
  }
}

// --- Markdown transcript ---

const textOf = (content: ReadonlyArray<ContentPart | { readonly type: string }>): string =>
  content.map((part) => {
    if (part.type === "text") return (part as { readonly text: string }).text
    if (part.type === "image") return `[image ${(part as { readonly mediaType: string }).mediaType}]`
    return ""
  }).filter((text) => text !== "").join("\n\n")

const quote = (text: string): string => text.split("\n").map((line) => `> ${line}`).join("\n")

const fenced = (text: string, language: string): string => {
  const longest = Math.max(2, ...Array.from(text.matchAll(/`+/g), (match) => match[0].length))
  const fence = "`".repeat(longest + 1)
  return `${fence}${language}\n${text}\n${fence}`
}

const markdownOf = (event: SessionEvent): string | undefined => {
  switch (event.type) {
    case "turn/start":
      return `## Turn ${field<number>(event, "turn")}`
    case "user/message": {
      const message = field<{ readonly content: ReadonlyArray<ContentPart>; readonly source: { kind: string } }>(
        event,
        "message"
      )
      return `**User** (${message.source.kind}):\n\n${quote(textOf(message.content))}`
    }
    case "assistant/message": {
      const message = field<{
        readonly content: ReadonlyArray<{ readonly type: string; readonly [key: string]: unknown }>
        readonly source: { readonly provider: string; readonly model: string }
      }>(event, "message")
      const parts = message.content.map((part) => {
        if (part.type === "text") return quote(String(part["text"]))
        if (part.type === "reasoning") return `_reasoning:_\n\n${quote(String(part["text"]))}`
        return `Tool call \`${String(part["name"])}\` (${String(part["callId"])}):\n\n` +
          fenced(String(part["arguments"]), "json")
      })
      return `**Assistant** (${message.source.provider}/${message.source.model}):\n\n${parts.join("\n\n")}`
    }
    case "tool/result": {
      const message = field<{ readonly toolName: string; readonly content: ReadonlyArray<ContentPart> }>(
        event,
        "message"
      )
      const error = field<{ readonly code: string } | undefined>(event, "error")
      const label = error === undefined ? "" : ` — error ${error.code}`
      return `**Tool result** \`${message.toolName}\`${label}:\n\n${quote(textOf(message.content))}`
    }
    case "turn/end":
      return `_Turn ${field<number>(event, "turn")} ended: ${field<{ readonly kind: string }>(event, "reason").kind}._`
    case "step/start":
    case "step/end":
    case "tool/call":
    case "agent/inbox/spliced":
    case "request/config":
      return undefined
    default:
      return `Event \`${event.type}\` (seq ${event.seq}):\n\n${fenced(JSON.stringify(event.data, null, 2), "json")}`
  }
}

/** The session as a Markdown transcript (a reading aid: the JSONL export is the lossless form). @internal */
export const markdown = (stored: StoredSession): string => {
  const { events, header } = stored
  const lines = [
    `# Session \`${header.id}\``,
    "",
    `- created: ${new Date(header.createdAt).toISOString()}`,
    `- format version: ${header.version}`,
    `- events: ${events.length}`,
    ...(header.parentSession === undefined ? [] : [`- forked from: \`${header.parentSession}\``]),
    ""
  ]
  for (const event of events) {
    const text = markdownOf(event)
    if (text !== undefined) lines.push(text, "")
  }
  return lines.join("\n")
}

/** The session as JSONL, exactly the file store's format: the header line, then one event per line. @internal */
export const jsonl = (stored: StoredSession): string =>
  [JSON.stringify(stored.header), ...stored.events.map((event) => JSON.stringify(event))].join("\n") + "\n"
