/**
 * The model-visible history derived from a log (SES-03), folded one event at a time so it is
 * maintained incrementally at commit.
 *
 * @internal
 */
import type { Message, MessageId, UserMessage } from "../../Message.js"
import type { SessionEvent } from "../../SessionEvent.js"
import { deepFreeze } from "../json.js"

/**
 * The fixed text the model sees after a turn that a crash interrupted.
 *
 * @internal
 */
export const interruptedNote =
  "[The previous turn was interrupted before it finished (the process stopped). Each tool result of that " +
  "turn says whether the tool may have run; verify side effects before retrying anything.]"

/** @internal */
export const interruptedMessage = (turn: number): UserMessage =>
  deepFreeze({
    id: `interrupted:${turn}` as MessageId,
    role: "user" as const,
    content: [{ type: "text" as const, text: interruptedNote }],
    source: { kind: "system" as const }
  })

/**
 * The fixed text the model sees after a turn that a dispose (a graceful shutdown, a hot reload)
 * interrupted (PKG-05).
 *
 * @internal
 */
export const shutdownNote =
  "[The previous turn was interrupted because the agent was shut down before it finished. Each tool result of " +
  "that turn says whether the tool may have run; verify side effects before retrying anything.]"

/** @internal */
export const shutdownMessage = (turn: number): UserMessage =>
  deepFreeze({
    id: `shutdown:${turn}` as MessageId,
    role: "user" as const,
    content: [{ type: "text" as const, text: shutdownNote }],
    source: { kind: "system" as const }
  })

interface TurnEndData {
  readonly turn: number
  readonly reason: { readonly kind: string; readonly cause?: { readonly kind: string } }
}

/**
 * The note a closed turn leaves in the history: after a crash (SES-03, `interrupted`) or after a
 * dispose (PKG-05, `aborted` with cause `disposed`, already in v1 logs); none otherwise.
 */
const turnEndNote = (data: TurnEndData): UserMessage | undefined => {
  if (data.reason.kind === "interrupted") return interruptedMessage(data.turn)
  if (data.reason.kind === "aborted" && data.reason.cause?.kind === "disposed") return shutdownMessage(data.turn)
  return undefined
}

/**
 * The text the summary of a compaction (CMP-01) opens with in the history.
 *
 * @internal
 */
export const summaryPreamble =
  "[Summary of the earlier conversation: its first turns were compacted to fit the context window. " +
  "The turns after this summary follow verbatim.]"

/**
 * The model-visible form of a `session/compacted` event's summary: a `{kind:"system"}` user message
 * whose id names the event's seq (deterministic, so the history stays a pure function of the log).
 *
 * @internal
 */
export const summaryMessage = (seq: number, summary: string): UserMessage =>
  deepFreeze({
    id: `compacted:${seq}` as MessageId,
    role: "user" as const,
    content: [{ type: "text" as const, text: `${summaryPreamble}\n\n${summary}` }],
    source: { kind: "system" as const }
  })

interface CompactedData {
  readonly upTo: number
  readonly summary: string
}

/**
 * What one event other than a compaction contributes (SES-03). A `session/compacted` contributes
 * nothing here: only the latest compaction of a log counts, and `fold` rebuilds from it.
 *
 * @internal
 */
export const foldPlain = (messages: Array<Message>, event: SessionEvent): boolean => {
  switch (event.type) {
    case "user/message":
    case "tool/result": {
      messages.push((event.data as { readonly message: Message }).message)
      return true
    }
    case "assistant/message": {
      const message = (event.data as { readonly message: Message }).message
      if (message.content.length === 0) return false
      messages.push(message)
      return true
    }
    case "turn/end": {
      const note = turnEndNote(event.data as TurnEndData)
      if (note === undefined) return false
      messages.push(note)
      return true
    }
    default:
      return false
  }
}

/**
 * Where a compaction's kept events start in its log: its `upTo`, never past the event itself.
 *
 * @internal
 */
export const keptFrom = (event: SessionEvent): number => Math.min((event.data as CompactedData).upTo, event.seq)

/**
 * Adds what `event` contributes to the history, if anything. Returns whether it changed. `log` holds
 * the log's events up to `event` at least (indexed by seq from its first event's seq): a
 * `session/compacted` replaces the whole history by its summary followed by what the events from
 * its `upTo` up to itself contribute (CMP-01, REQ-03), and the events after it then fold as usual.
 *
 * @internal
 */
export const fold = (messages: Array<Message>, event: SessionEvent, log: ReadonlyArray<SessionEvent>): boolean => {
  if (event.type !== "session/compacted") return foldPlain(messages, event)
  messages.length = 0
  messages.push(summaryMessage(event.seq, (event.data as CompactedData).summary))
  const base = log.length > 0 ? log[0]!.seq : 0
  const end = Math.min(event.seq - base, log.length)
  for (let i = Math.max(keptFrom(event) - base, 0); i < end; i++) foldPlain(messages, log[i]!)
  return true
}

/**
 * The history of a whole log, from scratch (used to check the incremental fold, REQ-03).
 *
 * @internal
 */
export const derive = (events: ReadonlyArray<SessionEvent>): ReadonlyArray<Message> => {
  const out: Array<Message> = []
  for (const event of events) fold(out, event, events)
  return Object.freeze(out)
}
