/**
 * Deduplication of sends by MessageId (CLU-03), in two places:
 * - the cluster's message storage dedups by the request's primary key: the MessageId, the mode
 *   and a digest of what the message says, so an exact retry is answered from storage without
 *   reaching the agent, while the same id with other content does reach it;
 * - the agent's inbox refuses an id it accepted before (`DuplicateMessage`, INB-01): the entity
 *   looks the accepted message up in the log and turns the refusal into a success when it says
 *   the same (nothing is appended), keeping `DuplicateMessage` for a different message.
 *
 * @internal
 */
import type { SendOptions } from "../Agent.js"
import type { UserMessage } from "../Message.js"
import type { SessionEvent } from "../SessionEvent.js"

/** JSON with object keys sorted, so two equal values print the same whatever their key order. */
const canonical = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`
  if (value !== null && typeof value === "object") {
    const record = value as Record<string, unknown>
    const keys = Object.keys(record).filter((key) => record[key] !== undefined).sort()
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonical(record[key])}`).join(",")}}`
  }
  return JSON.stringify(value) ?? "null"
}

/** What a message says: its content and source (its id is the key, its role always "user"). */
const meaningOf = (message: UserMessage): string => canonical({ content: message.content, source: message.source })

/**
 * A 64-bit digest (two 32-bit FNV-1a variants) in hex: only a storage shortcut, so a collision
 * costs nothing worse than a trip to the agent, which compares the messages themselves.
 */
const digest = (text: string): string => {
  let a = 0x811c9dc5
  let b = 0x01000193
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    a = Math.imul(a ^ code, 0x01000193)
    b = Math.imul(b ^ code, 0x5bd1e995) ^ (b >>> 13)
  }
  return (a >>> 0).toString(16).padStart(8, "0") + (b >>> 0).toString(16).padStart(8, "0")
}

/** The primary key of a `Send` request (CLU-03). @internal */
export const primaryKeyOf = (message: UserMessage, mode: string): string =>
  `${message.id}/${mode}/${digest(meaningOf(message))}`

/** Whether two messages say the same (content and source, whatever the key order). @internal */
export const sameMeaning = (a: UserMessage, b: UserMessage): boolean => meaningOf(a) === meaningOf(b)

/** The message the log accepted under `id` (its first inbox splice inserting it), if any. @internal */
export const acceptedMessage = (events: ReadonlyArray<SessionEvent>, id: string): UserMessage | undefined => {
  for (const event of events) {
    if (event.type !== "agent/inbox/spliced") continue
    const inserted = (event.data as { readonly inserted: ReadonlyArray<UserMessage> }).inserted
    for (const message of inserted) if (message.id === id) return message
  }
  return undefined
}

/** PKG-03: the `agent.send` options of a mode. @internal */
export const sendOptionsOf = (mode: "followup" | "steer" | "inject"): SendOptions =>
  mode === "followup"
    ? { target: "next-turn", wake: true }
    : mode === "steer"
    ? { target: "next-step", wake: true }
    : { target: "next-step", wake: false }
