/**
 * MOD-06: a session's token usage, the sum of what its `assistant/message` events recorded.
 *
 * @internal
 */
import type { AssistantMessageLogged, SessionEvent, Usage } from "../SessionEvent.js"

type Field = keyof Usage

const fields: ReadonlyArray<Field> = ["inputTokens", "outputTokens", "reasoningTokens", "cachedInputTokens"]

/**
 * The totals of every usage field any `assistant/message` of `events` reported; a field no message
 * reported is absent (unknown, not zero).
 *
 * @internal
 */
export const total = (events: ReadonlyArray<SessionEvent>): Usage => {
  const sums: { -readonly [K in Field]?: number } = {}
  for (const event of events) {
    if (event.type !== "assistant/message") continue
    // the codec admits an `assistant/message` only with this shape (DUR-01)
    const usage = (event as typeof AssistantMessageLogged.Type).data.usage
    if (usage === undefined) continue
    for (const field of fields) {
      const value = usage[field]
      if (value !== undefined) sums[field] = (sums[field] ?? 0) + value
    }
  }
  return sums
}
