/**
 * What a person settles through the host (HIL-06): `pending` reads a session's pending items —
 * from the live agent, or from a passive session's log without activating it (HIL-04: a suspended
 * turn needs no agent to be looked at); the decisions activate the agent through the host, as a
 * send does, and hold it live while it writes them (HIL-04: a decision wakes the agent).
 *
 * @internal
 */
import { Effect, Either, Option } from "effect"
import type * as AgentHost from "../../AgentHost.js"
import type { SessionId } from "../../Message.js"
import { sessionId as parseSessionId } from "../../Message.js"
import type * as Pending from "../../Pending.js"
import * as SessionError from "../../SessionError.js"
import { itemsOf } from "../log/pending.js"
import type { HostState } from "./state.js"

/** `AgentHost.pending`: the live agent's pending items, else the stored log's (no activation). @internal */
export const pending = (
  s: HostState,
  id: SessionId | string
): Effect.Effect<ReadonlyArray<Pending.Item>, AgentHost.PendingError> =>
  Effect.gen(function*() {
    const parsed = parseSessionId(id)
    if (Either.isLeft(parsed)) return yield* parsed.left
    const key = parsed.right
    const slot = s.slots.get(key)
    if (slot?._tag === "Live") return itemsOf(key, yield* slot.hosted.agent.session.events)
    if (Option.isNone(s.persistence)) return yield* new SessionError.SessionNotFound({ id: key })
    const stored = yield* s.persistence.value.read(key)
    return itemsOf(key, stored.events)
  }).pipe(Effect.withSpan("AgentHost.pending"))
