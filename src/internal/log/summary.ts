/**
 * The recovery summary of a session as an incremental fold over its events (HOST-04): whether the
 * log ends inside a turn and which inbox messages are pending, with their wake flag (HOST-03). Only
 * `turn/start`, `turn/end` and `agent/inbox/spliced` matter, so a backend may feed just those (SQL)
 * or resume the fold from a saved state (the file sidecar). It trusts the log (it was validated when
 * written): a log that does not replay is found out by resume, not here.
 *
 * @internal
 */
import type { SessionId } from "../../Message.js"
import type { RecoverySummary } from "../../SessionPersistence.js"

/**
 * What a splice without a `wake` flag means (HOST-03; every v1 splice): next-turn messages were sent
 * waking, next-step ones not; `restored` ones had been claimed into a turn, so they were on their way
 * to the model and run again.
 *
 * @internal
 */
export const wakeByDefault = (data: { readonly target: string; readonly outcome?: string | undefined }) =>
  data.outcome === "restored" || data.target === "next-turn"

/** @internal */
export interface SummaryState {
  /** The seq the next event will have. */
  nextSeq: number
  /** The number of the open turn, 0 when none is open. */
  openTurn: number
  /** Pending message ids and whether each was sent waking. */
  readonly pending: Map<string, boolean>
  /** The parent session of a sub-agent's child session (its header's `child`), else undefined. */
  parent: string | undefined
}

/** @internal */
export const emptyState = (parent?: string | undefined): SummaryState => ({
  nextSeq: 0,
  openTurn: 0,
  pending: new Map(),
  parent
})

/** The event types the fold looks at. @internal */
export const summaryTypes: ReadonlyArray<string> = ["turn/start", "turn/end", "agent/inbox/spliced"]

interface SpliceLike {
  readonly target: "next-turn" | "next-step"
  readonly removed: ReadonlyArray<string>
  readonly inserted: ReadonlyArray<{ readonly id: string }>
  readonly outcome?: string | undefined
  readonly wake?: boolean | undefined
}

/**
 * Folds one event. Inbox splices before `seedLength` belong to the seed and are not replayed
 * (INB-05); turns count everywhere (a seed never ends inside a turn, FORK-01).
 *
 * @internal
 */
export const foldEvent = (
  state: SummaryState,
  seq: number,
  type: string,
  data: unknown,
  seedLength: number
): void => {
  state.nextSeq = seq + 1
  switch (type) {
    case "turn/start":
      state.openTurn = (data as { readonly turn: number }).turn
      return
    case "turn/end":
      state.openTurn = 0
      return
    case "agent/inbox/spliced": {
      if (seq < seedLength) return
      const splice = data as SpliceLike
      for (const id of splice.removed) state.pending.delete(id)
      const wake = splice.wake ?? wakeByDefault(splice)
      for (const message of splice.inserted) state.pending.set(message.id, wake)
      return
    }
  }
}

/** @internal */
export const summaryOf = (id: SessionId, state: SummaryState): RecoverySummary => {
  let pendingWaking = 0
  for (const wake of state.pending.values()) if (wake) pendingWaking++
  const summary: RecoverySummary = {
    _tag: "RecoverySummary",
    id,
    openTurn: state.openTurn > 0,
    pending: state.pending.size,
    pendingWaking
  }
  return state.parent === undefined ? summary : { ...summary, parent: state.parent as SessionId }
}

/**
 * HOST-04: the session needs the host: an open turn to repair or waking input to run. A sub-agent's
 * child session never does (SUB-02): its parent's resume reads it; it is never activated as a root.
 *
 * @internal
 */
export const needsRecovery = (summary: RecoverySummary): boolean =>
  summary.parent === undefined && (summary.openTurn || summary.pendingWaking > 0)
