/**
 * The journal of the crash-consistency suite (DUR-13): what a worker acknowledged, as the driver
 * read it from the worker's stdout and appended it to a file before any kill could matter. Each
 * line is one worker line, verbatim:
 *
 * - `open <session>`: the session exists (created or resumed) — it must stay resumable;
 * - `ack <session> <messageId> <verb>`: the send (`followup`, `steer`, `inject`, `big`) succeeded;
 * - `cancel-start <session> drop|keep`: a cancel is about to be requested (`drop`: it may discard
 *   pending input); `cancel <session> drop|keep`: it returned;
 * - `event <session> <key>`: a custom `chaos/note` event with that key was appended.
 */

/** The worker lines the driver journals. */
export const journaledKinds: ReadonlySet<string> = new Set(["open", "ack", "cancel-start", "cancel", "event"])

/** What the journal says about one session. */
export interface SessionJournal {
  readonly id: string
  /** Whether some worker reported the session open (so it must exist and be resumable). */
  opened: boolean
  /** Acknowledged inputs, with the journal line each was acknowledged on. */
  readonly acked: Array<{ readonly id: string; readonly line: number }>
  /** The journal lines of `cancel-start … drop`: cancels that may discard pending input. */
  readonly dropCancels: Array<number>
  /** Keys of acknowledged custom events. */
  readonly eventKeys: Array<string>
}

/** A session the journal does not mention. */
export const emptyJournal = (id: string): SessionJournal => ({
  id,
  opened: false,
  acked: [],
  dropCancels: [],
  eventKeys: []
})

/** Parses a journal file's text into one record per session (in order of first mention). */
export const parseJournal = (text: string): Map<string, SessionJournal> => {
  const sessions = new Map<string, SessionJournal>()
  const of = (id: string) => {
    const existing = sessions.get(id)
    if (existing !== undefined) return existing
    const created = emptyJournal(id)
    sessions.set(id, created)
    return created
  }
  text.split("\n").forEach((line, index) => {
    const [kind, session, arg] = line.split(" ")
    if (kind === undefined || session === undefined || !journaledKinds.has(kind)) return
    const journal = of(session)
    if (kind === "open") journal.opened = true
    else if (kind === "ack" && arg !== undefined) journal.acked.push({ id: arg, line: index })
    else if (kind === "cancel-start" && arg === "drop") journal.dropCancels.push(index)
    else if (kind === "event" && arg !== undefined) journal.eventKeys.push(arg)
  })
  return sessions
}
