/**
 * MOD-06: a session's token usage, the sum of what its `assistant/message` events recorded, kept up
 * to date as events commit (O(1) per append).
 *
 * @internal
 */
import type { AssistantMessageLogged, SessionEvent, Usage } from "../SessionEvent.js"

type Field = keyof Usage

/** Running sums; made on the first event that reports usage (an idle agent holds none, B2). @internal */
export type Sums = { -readonly [K in Field]?: number }

const fields: ReadonlyArray<Field> = ["inputTokens", "outputTokens", "reasoningTokens", "cachedInputTokens"]

/**
 * Adds the usage `event` reports, if it is an `assistant/message` that reports one, to `sums`
 * (made when missing); returns the sums to keep.
 *
 * @internal
 */
export const add = (sums: Sums | undefined, event: SessionEvent): Sums | undefined => {
  if (event.type !== "assistant/message") return sums
  // the codec admits an `assistant/message` only with this shape (DUR-01)
  const usage = (event as typeof AssistantMessageLogged.Type).data.usage
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
