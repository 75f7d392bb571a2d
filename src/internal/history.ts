/**
 * The model-visible history derived from a log (SES-03), folded one event at a time so it is
 * maintained incrementally at commit.
 *
 * @internal
 */
import type { Message, MessageId, UserMessage } from "../Message.js"
import type { SessionEvent } from "../SessionEvent.js"
import { deepFreeze } from "./json.js"

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
 * Adds what `event` contributes to the history, if anything. Returns whether it changed.
 *
 * @internal
 */
export const fold = (messages: Array<Message>, event: SessionEvent): boolean => {
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
      const data = event.data as { readonly turn: number; readonly reason: { readonly kind: string } }
      if (data.reason.kind !== "interrupted") return false
      messages.push(interruptedMessage(data.turn))
      return true
    }
    default:
      return false
  }
}

/**
 * The history of a whole log, from scratch (used to check the incremental fold, REQ-03).
 *
 * @internal
 */
export const derive = (events: ReadonlyArray<SessionEvent>): ReadonlyArray<Message> => {
  const out: Array<Message> = []
  for (const event of events) fold(out, event)
  return Object.freeze(out)
}
