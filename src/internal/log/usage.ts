/**
 * MOD-06: a session's token usage, the sum of what its `assistant/message` events recorded (and the
 * summarizer calls its `session/compacted` events recorded, CMP-01), kept up to date as events
 * commit (O(1) per append).
 *
 * @internal
 */
import type { AssistantMessageLogged, SessionCompacted, SessionEvent, Usage } from "../../SessionEvent.js"

type Field = keyof Usage

/** Running sums; made on the first event that reports usage (an idle agent holds none, B2). @internal */
export type Sums = { -readonly [K in Field]?: number }

const fields: ReadonlyArray<Field> = ["inputTokens", "outputTokens", "reasoningTokens", "cachedInputTokens"]

/** The usage an event reports: an `assistant/message`'s, a `session/compacted`'s summarizer call's. */
const usageOf = (event: SessionEvent): Usage | undefined => {
  // the codec admits these types only with these shapes (DUR-01)
  if (event.type === "assistant/message") return (event as typeof AssistantMessageLogged.Type).data.usage
  if (event.type === "session/compacted") return (event as typeof SessionCompacted.Type).data.usage
  return undefined
}

/**
 * Adds the usage `event` reports, if it is an `assistant/message` or a `session/compacted` that
 * reports one, to `sums` (made when missing); returns the sums to keep.
 *
 * @internal
 */
export const add = (sums: Sums | undefined, event: SessionEvent): Sums | undefined => {
  const usage = usageOf(event)
  if (usage === undefined) return sums
  const next = sums ?? {}
  for (const field of fields) {
    const value = usage[field]
    if (value !== undefined) next[field] = (next[field] ?? 0) + value
  }
  return next
}

/** What `session.usage` returns: a copy of the sums; a field no message reported is absent. @internal */
export const snapshot = (sums: Sums | undefined): Usage => (sums === undefined ? {} : { ...sums })
