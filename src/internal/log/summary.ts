/**
 * The recovery summary of a session as an incremental fold over its events (HOST-04): whether the
 * log ends inside a turn, which inbox messages are pending, with their wake flag (HOST-03), and what
 * a person still has to settle in the open step (HIL-04: the same rule as `log/pending.ts`, kept as
 * counts and deadlines). Only the {@link summaryTypes} matter, so a backend may feed just those
 * (SQL) or resume the fold from a saved state (the file sidecar). It trusts the log (it was
 * validated when written): a log that does not replay is found out by resume, not here.
 *
 * @internal
 */
import type { SessionId } from "../../Message.js"
import type { AwaitingSummary, RecoverySummary } from "../../SessionPersistence.js"

/**
 * What a splice without a `wake` flag means (HOST-03; every v1 splice): next-turn messages were sent
 * waking, next-step ones not; `restored` ones had been claimed into a turn, so they were on their way
 * to the model and run again.
 *
 * @internal
 */
export const wakeByDefault = (data: { readonly target: string; readonly outcome?: string | undefined }) =>
  data.outcome === "restored" || data.target === "next-turn"

/**
 * HIL-04: the open step's requests as the fold keeps them — only what a summary needs (which are
 * unsettled, their deadlines, which approved calls have no `tool/call` yet), so the state stays
 * small and a sidecar can hold it.
 *
 * @internal
 */
export interface OpenStepState {
  readonly turn: number
  readonly step: number
  /** The seq of its `step/start`. */
  readonly seq: number
  /** Undecided approvals: call id → deadline (`null`: none). */
  readonly approvals: Map<string, number | null>
  /** Approved calls without a `tool/call`. */
  readonly approved: Set<string>
  /** Unsettled questions: request id → [call id, deadline (`null`: none)]. */
  readonly questions: Map<string, readonly [string, number | null]>
}

/** @internal */
export const emptyStep = (turn: number, step: number, seq: number): OpenStepState => ({
  turn,
  step,
  seq,
  approvals: new Map(),
  approved: new Set(),
  questions: new Map()
})

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
  /** HIL-04: the open step of the open turn, while one is open. */
  open: OpenStepState | undefined
}

/** @internal */
export const emptyState = (parent?: string | undefined): SummaryState => ({
  nextSeq: 0,
  openTurn: 0,
  pending: new Map(),
  parent,
  open: undefined
})

/**
 * The event types the fold looks at besides `tool/call` and `tool/result` ({@link stepCallTypes}),
 * which only matter in a step with requests: a SQL store reads those for such sessions only.
 *
 * @internal
 */
export const summaryTypes: ReadonlyArray<string> = [
  "turn/start",
  "turn/end",
  "agent/inbox/spliced",
  "step/start",
  "step/end",
  "tool/approval-requested",
  "tool/approval-decided",
  "tool/input-requested",
  "tool/input-provided"
]

/** HIL-04: the events that settle a request's call (dispatch, result). @internal */
export const stepCallTypes: ReadonlyArray<string> = ["tool/call", "tool/result"]

/** Whether the open step has a request the `tool/call` and `tool/result` events could change. @internal */
export const hasOpenRequests = (state: SummaryState): boolean =>
  state.open !== undefined && (state.open.approved.size > 0 || state.open.questions.size > 0)

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
      state.open = undefined
      return
    case "turn/end":
      state.openTurn = 0
      state.open = undefined
      return
    case "step/start": {
      const { step, turn } = data as { readonly turn: number; readonly step: number }
      state.open = emptyStep(turn, step, seq)
      return
    }
    case "step/end":
      state.open = undefined
      return
    case "agent/inbox/spliced": {
      if (seq < seedLength) return
      const splice = data as SpliceLike
      for (const id of splice.removed) state.pending.delete(id)
      const wake = splice.wake ?? wakeByDefault(splice)
      for (const message of splice.inserted) state.pending.set(message.id, wake)
      return
    }
    default:
      if (state.open !== undefined) foldRequest(state.open, type, data)
  }
}

interface RequestLike {
  readonly callId: string
  readonly requestId?: string
  readonly deadline?: number
  readonly decision?: string
  readonly message?: { readonly toolCallId: string }
}

/**
 * HIL-04: a request event of the open step, as `log/pending.ts` reads it (the first decision wins).
 * `tool/call` and `tool/result` only ever settle what came before them, so a store may fold them
 * after the step's other events (SQL does).
 *
 * @internal
 */
export const foldRequest = (open: OpenStepState, type: string, data: unknown): void => {
  const d = data as RequestLike
  switch (type) {
    case "tool/approval-requested":
      open.approvals.set(d.callId, d.deadline ?? null)
      return
    case "tool/approval-decided":
      if (!open.approvals.delete(d.callId)) return
      if (d.decision === "approved") open.approved.add(d.callId)
      return
    case "tool/input-requested":
      open.questions.set(d.requestId!, [d.callId, d.deadline ?? null])
      return
    case "tool/input-provided":
      open.questions.delete(d.requestId!)
      return
    case "tool/call":
      open.approved.delete(d.callId)
      return
    case "tool/result": {
      // a question of a call that has its result was left behind by a crash: not pending
      const callId = d.message?.toolCallId
      for (const [requestId, [asker]] of open.questions) if (asker === callId) open.questions.delete(requestId)
      return
    }
  }
}

/** HIL-04: what the open step waits for, when it is suspended. @internal */
export const awaitingOf = (open: OpenStepState | undefined): AwaitingSummary | undefined => {
  if (open === undefined) return undefined
  const { approvals, approved, questions } = open
  if (approvals.size === 0 && approved.size === 0 && questions.size === 0) return undefined
  let earliest: number | null = null
  for (const deadline of approvals.values()) if (deadline !== null && (earliest === null || deadline < earliest)) earliest = deadline
  for (const [, deadline] of questions.values()) {
    if (deadline !== null && (earliest === null || deadline < earliest)) earliest = deadline
  }
  const awaiting = { approvals: approvals.size, questions: questions.size, approvedUndispatched: approved.size }
  return earliest === null ? awaiting : { ...awaiting, earliestDeadline: earliest }
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
  const awaiting = state.openTurn > 0 ? awaitingOf(state.open) : undefined
  const withAwaiting = awaiting === undefined ? summary : { ...summary, awaiting }
  return state.parent === undefined ? withAwaiting : { ...withAwaiting, parent: state.parent as SessionId }
}

/**
 * HIL-04: whether a suspended session has something for the host to do now: an approved
 * call to dispatch, or a deadline that is due at `now` (the agent writes its timeout decision).
 *
 * @internal
 */
export const hasDueWork = (awaiting: AwaitingSummary, now: number): boolean =>
  awaiting.approvedUndispatched > 0 || (awaiting.earliestDeadline !== undefined && awaiting.earliestDeadline <= now)

/**
 * HOST-04: the session needs the host: an open turn to repair or waking input to run. A suspended
 * turn (HIL-04) is neither: it waits for a person, so only an approved call to dispatch or a due
 * deadline activates it (the Rulings for v3). A sub-agent's child session never does (SUB-02): its
 * parent's resume reads it; it is never activated as a root.
 *
 * @internal
 */
export const needsRecovery = (summary: RecoverySummary, now: number): boolean => {
  if (summary.parent !== undefined) return false
  if (summary.awaiting !== undefined) return hasDueWork(summary.awaiting, now)
  return summary.openTurn || summary.pendingWaking > 0
}
