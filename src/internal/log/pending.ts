/**
 * What a person still has to settle in a session's open step, derived from the log alone (format v3:
 * approvals and questions). Pure, like the repair closers: the driver's suspended phase,
 * resume, the host's summaries and `agent.pending` all read the same answer from the same events.
 *
 * A step is **suspended** when one of its approval or question requests is unsettled, or one of its
 * approved calls has no `tool/call` yet (the rule the v3 rulings give repair and recovery).
 *
 * @internal
 */
import { Option } from "effect"
import type { SessionId } from "../../Message.js"
import type * as Pending from "../../Pending.js"
import type { CoreEvent, CoreType, JsonRecord, JsonValue, SessionEvent } from "../../SessionEvent.js"

type Core<T extends CoreType> = Extract<CoreEvent, { readonly type: T }>

// Core types are validated on append and decode (EVT-01), so a core `type` implies its data shape.
const narrow = <T extends CoreType>(event: SessionEvent, _type: T): Core<T> => event as Core<T>

/** @internal */
export interface PendingApproval {
  readonly _tag: "Approval"
  readonly seq: number
  readonly turn: number
  readonly step: number
  readonly callId: string
  readonly approvalId: string
  readonly tool: string
  readonly arguments: string
  readonly deadline?: number
}

/** @internal */
export interface PendingQuestion {
  readonly _tag: "Question"
  readonly seq: number
  readonly turn: number
  readonly step: number
  readonly callId: string
  readonly requestId: string
  readonly question: string
  readonly jsonSchema: JsonRecord
  readonly deadline?: number
}

/** @internal */
export type PendingItem = PendingApproval | PendingQuestion

/** A settled question of a call, in the order its tool asked: what a replayed `ask` returns. @internal */
export interface SettledQuestion {
  readonly requestId: string
  readonly outcome: "provided" | "declined" | "canceled" | "timeout"
  readonly value?: JsonValue
}

/** A decided call that still needs its `tool/call` (approved) or its result (rejected, canceled). @internal */
export interface DecidedCall {
  readonly callId: string
  readonly tool: string
  /** The arguments to run with: the decision's edited ones, else the requested ones. */
  readonly arguments: string
  readonly decision: "approved" | "rejected" | "canceled"
  readonly message?: string
}

/** The requests of the open step of a log's open turn. @internal */
export interface StepRequests {
  readonly turn: number
  readonly step: number
  /** Unsettled approvals and questions, in log order. */
  readonly pending: ReadonlyArray<PendingItem>
  /** Approved calls without a `tool/call`: dispatched when the step goes on. */
  readonly approvedUndispatched: ReadonlyArray<DecidedCall>
  /** Rejected or canceled calls without a `tool/result`: their error result is still to be written. */
  readonly refusedUnresolved: ReadonlyArray<DecidedCall>
  /** Each call's settled questions, in the order asked. */
  readonly answers: ReadonlyMap<string, ReadonlyArray<SettledQuestion>>
  /** The earliest deadline of a pending item, if any has one. */
  readonly earliestDeadline?: number
  /** Whether the step waits for a person (see the module's rule). */
  readonly suspended: boolean
}

interface Scan {
  readonly turn: number
  readonly step: number
  readonly approvals: Map<string, Core<"tool/approval-requested">>
  readonly decisions: Map<string, Core<"tool/approval-decided">>
  readonly questions: Map<string, Core<"tool/input-requested">>
  readonly settled: Map<string, Core<"tool/input-provided">>
  readonly dispatched: Set<string>
  readonly resulted: Set<string>
}

/** The index of the open step's `step/start` in the open turn, or -1 when no step is open. */
const openStepStart = (events: ReadonlyArray<SessionEvent>): number => {
  for (let i = events.length - 1; i >= 0; i--) {
    const type = events[i]!.type
    if (type === "step/start") return i
    if (type === "step/end" || type === "turn/end" || type === "turn/start") return -1
  }
  return -1
}

const scanStep = (events: ReadonlyArray<SessionEvent>, start: number): Scan => {
  const { step, turn } = narrow(events[start]!, "step/start").data
  const scan: Scan = {
    turn,
    step,
    approvals: new Map(),
    decisions: new Map(),
    questions: new Map(),
    settled: new Map(),
    dispatched: new Set(),
    resulted: new Set()
  }
  for (let i = start + 1; i < events.length; i++) recordEvent(scan, events[i]!)
  return scan
}

const recordEvent = (scan: Scan, event: SessionEvent): void => {
  switch (event.type) {
    case "tool/approval-requested": {
      const e = narrow(event, "tool/approval-requested")
      scan.approvals.set(e.data.callId, e)
      return
    }
    case "tool/approval-decided": {
      const e = narrow(event, "tool/approval-decided")
      if (!scan.decisions.has(e.data.callId)) scan.decisions.set(e.data.callId, e)
      return
    }
    case "tool/input-requested": {
      const e = narrow(event, "tool/input-requested")
      scan.questions.set(e.data.requestId, e)
      return
    }
    case "tool/input-provided": {
      const e = narrow(event, "tool/input-provided")
      if (!scan.settled.has(e.data.requestId)) scan.settled.set(e.data.requestId, e)
      return
    }
    case "tool/call":
      scan.dispatched.add(narrow(event, "tool/call").data.callId)
      return
    case "tool/result":
      scan.resulted.add(narrow(event, "tool/result").data.message.toolCallId)
      return
  }
}

const pendingApproval = (e: Core<"tool/approval-requested">): PendingApproval => {
  const { approvalId, arguments: args, callId, deadline, step, tool, turn } = e.data
  const item = { _tag: "Approval" as const, seq: e.seq, turn, step, callId, approvalId, tool, arguments: args }
  return deadline === undefined ? item : { ...item, deadline }
}

const pendingQuestion = (e: Core<"tool/input-requested">): PendingQuestion => {
  const { callId, deadline, jsonSchema, question, requestId, step, turn } = e.data
  const item = { _tag: "Question" as const, seq: e.seq, turn, step, callId, requestId, question, jsonSchema }
  return deadline === undefined ? item : { ...item, deadline }
}

const decidedCall = (request: Core<"tool/approval-requested">, decided: Core<"tool/approval-decided">): DecidedCall => {
  const { decision, message } = decided.data
  const call = {
    callId: request.data.callId,
    tool: request.data.tool,
    arguments: decided.data.arguments ?? request.data.arguments,
    decision
  }
  return message === undefined ? call : { ...call, message }
}

const settledQuestion = (e: Core<"tool/input-provided">): SettledQuestion => {
  const { outcome, requestId, value } = e.data
  return value === undefined ? { requestId, outcome } : { requestId, outcome, value }
}

const summarize = (scan: Scan): StepRequests => {
  const pending: Array<PendingItem> = []
  const approvedUndispatched: Array<DecidedCall> = []
  const refusedUnresolved: Array<DecidedCall> = []
  for (const [callId, request] of scan.approvals) {
    const decided = scan.decisions.get(callId)
    if (decided === undefined) pending.push(pendingApproval(request))
    else if (decided.data.decision === "approved") {
      if (!scan.dispatched.has(callId)) approvedUndispatched.push(decidedCall(request, decided))
    } else if (!scan.resulted.has(callId)) refusedUnresolved.push(decidedCall(request, decided))
  }
  const answers = new Map<string, Array<SettledQuestion>>()
  for (const [requestId, question] of scan.questions) {
    const settled = scan.settled.get(requestId)
    if (settled === undefined) {
      // a question of a call that already has its result was left behind by a crash: not pending
      if (!scan.resulted.has(question.data.callId)) pending.push(pendingQuestion(question))
      continue
    }
    const list = answers.get(question.data.callId) ?? []
    list.push(settledQuestion(settled))
    answers.set(question.data.callId, list)
  }
  pending.sort((a, b) => a.seq - b.seq)
  let earliestDeadline: number | undefined
  for (const item of pending) {
    if (item.deadline !== undefined && (earliestDeadline === undefined || item.deadline < earliestDeadline)) {
      earliestDeadline = item.deadline
    }
  }
  const requests = {
    turn: scan.turn,
    step: scan.step,
    pending,
    approvedUndispatched,
    refusedUnresolved,
    answers,
    suspended: pending.length > 0 || approvedUndispatched.length > 0
  }
  return earliestDeadline === undefined ? requests : { ...requests, earliestDeadline }
}

/**
 * The requests of the open step of the log's open turn; `None` when no turn or step is open. Reads
 * only the open step's events: O(length of that step).
 *
 * @internal
 */
export const openStepRequests = (events: ReadonlyArray<SessionEvent>): Option.Option<StepRequests> => {
  const start = openStepStart(events)
  return start < 0 ? Option.none() : Option.some(summarize(scanStep(events, start)))
}

/**
 * Whether the log ends in a suspended step: a turn waiting for a person, which resume and recovery
 * must leave open (not repair as interrupted).
 *
 * @internal
 */
export const isSuspended = (events: ReadonlyArray<SessionEvent>): boolean => {
  const requests = openStepRequests(events)
  return Option.isSome(requests) && requests.value.suspended
}

/**
 * HIL-06: the pending items of the log's open step as the public `Pending.Item`s of session `id`
 * (what `pending` answers for a passive session, read without activating it).
 *
 * @internal
 */
export const itemsOf = (id: SessionId, events: ReadonlyArray<SessionEvent>): ReadonlyArray<Pending.Item> => {
  const requests = openStepRequests(events)
  if (Option.isNone(requests)) return []
  return requests.value.pending.map((item): Pending.Item => ({ ...item, sessionId: id }))
}
