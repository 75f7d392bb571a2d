/**
 * Entries of `SessionPersistence.list` (DUR-08): every backend reports an entry it cannot read as
 * an `UnreadableSession` (and logs it) instead of failing the whole listing.
 *
 * @internal
 */
import { Effect } from "effect"
import type { SessionSummary, UnreadableSession } from "../../SessionPersistence.js"

/** @internal */
export type ListEntry = SessionSummary | UnreadableSession

/**
 * An entry that could not be read: logged with a warning naming `where` it is stored, then
 * listed.
 *
 * @internal
 */
export const unreadable = (id: string, problem: string, where: string): Effect.Effect<UnreadableSession> =>
  Effect.as(
    Effect.logWarning(`effect-agent: listing cannot read ${where}: ${problem}`),
    { _tag: "UnreadableSession", id, problem } as const
  )
