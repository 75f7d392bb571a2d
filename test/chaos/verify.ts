/**
 * What the verifier of the crash-consistency suite checks about one session after a crash (DUR-13),
 * on top of the log oracle of the reliability suites (`logViolations`): given what was stored
 * before the resume, what the resume left, what is pending in the resumed inbox and what the
 * journal says was acknowledged.
 */
import * as Repair from "../../src/Repair.js"
import type { SessionEvent } from "../../src/SessionEvent.js"
import { insertedIds, logViolations } from "../fixtures/faultyPersistence.js"
import type { SessionJournal } from "./journal.js"

/** The custom event type the workers append (`data: { key }`). */
export const noteType = "chaos/note"

/** What one resume of a session showed. */
export interface Observed {
  /** The stored log read just before the resume (`undefined`: the session was not stored). */
  readonly stored: ReadonlyArray<SessionEvent> | undefined
  /** The log right after the resume (repaired). */
  readonly resumed: ReadonlyArray<SessionEvent>
  /** Ids pending in the resumed inbox (next-step, then next-turn). */
  readonly pending: ReadonlyArray<string>
}

interface Splice {
  readonly outcome?: string
  readonly removed: ReadonlyArray<string>
}

/** Who removed each id: the outcome of the first `canceled`/`rejected` splice that removed it. */
const discards = (events: ReadonlyArray<SessionEvent>): Map<string, string> => {
  const byId = new Map<string, string>()
  for (const event of events) {
    if (event.type !== "agent/inbox/spliced") continue
    const data = event.data as Splice
    if (data.outcome !== "canceled" && data.outcome !== "rejected") continue
    for (const id of data.removed) if (!byId.has(id)) byId.set(id, data.outcome)
  }
  return byId
}

const enteredIds = (events: ReadonlyArray<SessionEvent>): Set<string> =>
  new Set(events.flatMap((e) =>
    e.type === "user/message" ? [(e.data as { readonly message: { readonly id: string } }).message.id] : []
  ))

/** DUR-12: the resume appended exactly the closers of the stored log (nothing for a closed log). */
const repairViolations = (stored: ReadonlyArray<SessionEvent>, resumed: ReadonlyArray<SessionEvent>) => {
  const prefix = resumed.slice(0, stored.length)
  if (prefix.length !== stored.length || prefix.some((e, i) => JSON.stringify(e) !== JSON.stringify(stored[i]))) {
    return [`the resume changed the stored log (stored ${stored.length} events, resumed ${resumed.length})`]
  }
  const appended = JSON.stringify(resumed.slice(stored.length))
  const closers = JSON.stringify(Repair.closers(stored))
  return appended === closers
    ? []
    : [`the resume appended ${resumed.length - stored.length} events, not the ${Repair.closers(stored).length} closers`]
}

/** Acknowledged inputs that were discarded: only by a `canceled` splice of a later dropping cancel. */
const discardViolations = (journal: SessionJournal, observed: Observed) => {
  const violations: Array<string> = []
  const entered = enteredIds(observed.resumed)
  const pending = new Set(observed.pending)
  const removed = discards(observed.resumed)
  for (const { id, line } of journal.acked) {
    if (entered.has(id) && pending.has(id)) violations.push(`input ${id} both entered and still pending`)
    if (entered.has(id) || pending.has(id)) continue
    const outcome = removed.get(id)
    if (outcome === "rejected") violations.push(`input ${id} was rejected, but no hook rejects input`)
    else if (outcome === "canceled" && !journal.dropCancels.some((cancel) => cancel > line)) {
      violations.push(`input ${id} was canceled, but no cancel that drops the inbox was requested after it`)
    }
  }
  if (pending.size !== observed.pending.length) violations.push(`an id is pending twice: ${observed.pending.join(",")}`)
  return violations
}

/** Custom events: each acknowledged key present exactly once, no key twice. */
const noteViolations = (journal: SessionJournal, events: ReadonlyArray<SessionEvent>) => {
  const counts = new Map<string, number>()
  for (const event of events) {
    if (event.type !== noteType) continue
    const key = (event.data as { readonly key: string }).key
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  const violations: Array<string> = []
  for (const key of journal.eventKeys) {
    if (!counts.has(key)) violations.push(`acknowledged custom event ${key} was lost`)
  }
  for (const [key, count] of counts) if (count > 1) violations.push(`custom event ${key} is stored ${count} times`)
  return violations
}

/** Everything wrong with one resumed session; `[]` when it is sound. */
export const sessionViolations = (journal: SessionJournal, observed: Observed): Array<string> => [
  ...(observed.stored === undefined
    ? journal.opened ? ["the session was acknowledged open, but nothing is stored"] : []
    : repairViolations(observed.stored, observed.resumed)),
  // An input whose insertion is durable counts as acknowledged even if the kill beat its `ack` line.
  ...logViolations(observed.resumed, {
    acknowledged: [...new Set([...journal.acked.map((a) => a.id), ...insertedIds(observed.resumed)])],
    pending: observed.pending
  }),
  ...discardViolations(journal, observed),
  ...noteViolations(journal, observed.resumed)
]
