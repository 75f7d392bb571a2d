/**
 * Repair of an interrupted turn (REP-01..03): a pure function from a log to the events that close
 * its open final turn, plus the small turn-boundary queries that forking and resuming need.
 *
 * `closers` never touches a session: `resume` appends what it returns durably (REP-03), so the
 * same log always gets the same closers (ids and times included).
 *
 * @since 0.1.0
 */
import { Option } from "effect"
import type { MessageId, ToolResultMessage, UserMessage } from "./Message.js"
import type { CoreEvent, CoreType, InboxTarget, SessionEvent } from "./SessionEvent.js"
import * as history from "./internal/log/history.js"
import { isSuspended, openStepRequests } from "./internal/log/pending.js"
import { deepFreeze } from "./internal/json.js"

type Core<T extends CoreType> = Extract<CoreEvent, { readonly type: T }>

// Core types are validated on append and decode (EVT-01), so a core `type` implies its data shape.
const narrow = <T extends CoreType>(event: SessionEvent, _type: T): Core<T> => event as Core<T>

/**
 * The fixed, model-visible text that a `turn/end {kind:"interrupted"}` contributes to the history
 * as a `{kind:"system"}` user message (SES-03).
 *
 * @since 0.1.0
 * @category constants
 */
export const interruptedNote: string = history.interruptedNote

/**
 * The error a closer `tool/result` carries when the call's `tool/call` was logged: the tool may
 * have run, partly or fully.
 *
 * @since 0.1.0
 * @category constants
 */
export const ToolOutcomeUnknown = { name: "ToolOutcomeUnknown", code: "TOOL_OUTCOME_UNKNOWN" } as const

/**
 * The error a closer `tool/result` carries when the call was requested by the model but never
 * dispatched.
 *
 * @since 0.1.0
 * @category constants
 */
export const ToolNotStarted = { name: "ToolNotStarted", code: "TOOL_NOT_STARTED" } as const

/**
 * The model-visible text of a closer for a call whose outcome is unknown.
 *
 * @since 0.1.0
 * @category constants
 */
export const outcomeUnknownText = (toolName: string): string =>
  `Error: the turn was interrupted while the tool "${toolName}" was running, so its result was lost. ` +
  "The tool may have run, partly or fully: verify its side effects before retrying it."

/**
 * The model-visible text of a closer for a call that was never started.
 *
 * @since 0.1.0
 * @category constants
 */
export const notStartedText = (toolName: string): string =>
  `Error: the turn was interrupted before the tool "${toolName}" was started, so it never ran ` +
  "and had no effect. Call it again if it is still needed."

/**
 * The turn a log (or a prefix of it) ends inside.
 *
 * - `turn`: the turn number of its `turn/start`.
 * - `startIndex`: the index of that `turn/start` in the log.
 * - `openStep`: the step that was started and not yet ended, if any.
 *
 * @since 0.1.0
 * @category models
 */
export interface OpenTurn {
  readonly turn: number
  readonly startIndex: number
  readonly openStep?: number
}

const clamp = (n: number, length: number): number => (n < 0 ? 0 : n > length ? length : Math.floor(n))

/**
 * Whether the first `upTo` events end inside an open turn (a `turn/start` without its `turn/end`),
 * and which. `upTo` is clamped to `[0, events.length]`. Scans back to the last turn boundary and
 * forward through that turn only: O(length of the final turn).
 *
 * @since 0.1.0
 * @category queries
 */
export const isInsideOpenTurn = (events: ReadonlyArray<SessionEvent>, upTo: number): Option.Option<OpenTurn> => {
  const end = clamp(upTo, events.length)
  let startIndex = -1
  for (let i = end - 1; i >= 0; i--) {
    const type = events[i]!.type
    if (type === "turn/end") return Option.none()
    if (type === "turn/start") {
      startIndex = i
      break
    }
  }
  if (startIndex < 0) return Option.none()
  const turn = narrow(events[startIndex]!, "turn/start").data.turn
  let openStep: number | undefined
  for (let i = startIndex + 1; i < end; i++) {
    const event = events[i]!
    if (event.type === "step/start") openStep = narrow(event, "step/start").data.step
    else if (event.type === "step/end") openStep = undefined
  }
  return Option.some(openStep === undefined ? { turn, startIndex } : { turn, startIndex, openStep })
}

/**
 * The open final turn of a log, if any (REP-01: none means no repair is needed).
 *
 * @since 0.1.0
 * @category queries
 */
export const openTurn = (events: ReadonlyArray<SessionEvent>): Option.Option<OpenTurn> =>
  isInsideOpenTurn(events, events.length)

/**
 * The log length at the end of the last closed turn: the whole length when no turn is open,
 * otherwise the index right after the last `turn/end` before the open turn (0 if there is none).
 * This is the default `upTo` of a fork (FORK-01): forking a running agent copies only closed turns.
 *
 * @since 0.1.0
 * @category queries
 */
export const lastClosedBoundary = (events: ReadonlyArray<SessionEvent>): number => {
  let i = events.length - 1
  while (i >= 0 && events[i]!.type !== "turn/end" && events[i]!.type !== "turn/start") i--
  if (i < 0 || events[i]!.type === "turn/end") return events.length
  for (i--; i >= 0; i--) if (events[i]!.type === "turn/end") return i + 1
  return 0
}

interface PendingCall {
  readonly callId: string
  readonly toolName: string
  readonly step: number
  readonly dispatched: boolean
}

interface Claim {
  readonly index: number
  readonly target: InboxTarget
  readonly id: MessageId
}

const MAX_ID = 256
const PREFIX = "repair:"

// FNV-1a, only to keep an over-long closer id deterministic (and distinct in practice) within the 256-char limit.
const fnv1a = (s: string): string => {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0).toString(16).padStart(8, "0")
}

/**
 * The deterministic id of the closer `tool/result` for a call: `repair:<callId>` (shortened with a
 * hash when it would exceed the 256-character `MessageId` limit).
 *
 * @since 0.1.0
 * @category constructors
 */
export const closerMessageId = (callId: string): MessageId => {
  const id = PREFIX + callId
  if (id.length <= MAX_ID) return id as MessageId
  const hash = fnv1a(callId)
  return (PREFIX + callId.slice(0, MAX_ID - PREFIX.length - hash.length - 1) + "~" + hash) as MessageId
}

/**
 * A call's result known from elsewhere when its turn is repaired (SUB-02: a sub-agent call whose
 * child session finished): written by {@link closers} in place of the call's error closer.
 *
 * @since 0.3.0
 * @category models
 */
export interface SettledResult {
  readonly message: ToolResultMessage
  readonly error?: { readonly name: string; readonly code: string } | undefined
}

/**
 * The events that close the open final turn of a log (REP-02), stamped with seqs continuing after
 * the last event and the time of the last event; `[]` for an empty log, a log without a turn, or one
 * whose last turn is closed (REP-01). In order:
 *
 * 1. if the log ends inside a claim batch (INB-07) — a claim splice of the open turn whose messages
 *    never got a `user/message` — one `restored` splice per list (next-step first) putting those
 *    messages back at the front of their list;
 * 2. one error `tool/result` per call of the open turn without a result, in log order:
 *    `TOOL_OUTCOME_UNKNOWN` when its `tool/call` was logged (also for a `tool/call` with no
 *    assistant tool-call part), `TOOL_NOT_STARTED` otherwise; message id `repair:<callId>`;
 * 3. `step/end` if a step is open;
 * 4. `turn/end {kind:"interrupted"}`.
 *
 * A suspended step (since 0.3.0: one that waits for a person's decision or answer, HIL-04) is not
 * interrupted: only its dispatched calls without a result get step 2's closer, and no `step/end` or
 * `turn/end` is written.
 *
 * `options.seedLength` (the header's) makes splices of a fork's seed invisible, like the inbox
 * replay (INB-05). `options.settled` (since 0.3.0) gives the results of calls known from elsewhere
 * — a sub-agent call whose child's turn had ended (SUB-02) — written in that call's place in step 2
 * instead of its error closer (the caller reads them; `closers` stays pure). Pure: the result is a deep-frozen array of plain, schema-valid core events.
 *
 * @example
 * ```ts
 * import { Repair } from "effect-agent"
 *
 * declare const events: Parameters<typeof Repair.closers>[0]
 * const closers = Repair.closers(events)
 * // e.g. [step/end {turn:1, step:1}, turn/end {turn:1, reason:{kind:"interrupted"}}]
 * ```
 *
 * @since 0.1.0
 * @category repair
 */
export const closers = (
  events: ReadonlyArray<SessionEvent>,
  options?: {
    readonly seedLength?: number | undefined
    readonly settled?: ReadonlyMap<string, SettledResult> | undefined
  }
): ReadonlyArray<CoreEvent> => {
  const open = openTurn(events)
  if (Option.isNone(open)) return emptyClosers
  const { openStep, startIndex, turn } = open.value
  const seedLength = options?.seedLength ?? 0

  // One pass over the open turn: its calls, their results and dispatches, and its claims.
  const calls = new Map<string, PendingCall>()
  const answered = new Set<string>()
  const claims: Array<Claim> = []
  const entered = new Set<string>()
  // DUR-12: messages an earlier, torn repair already put back (its `restored` splice survived)
  const restored = new Set<string>()
  for (let i = startIndex + 1; i < events.length; i++) {
    const event = events[i]!
    switch (event.type) {
      case "assistant/message": {
        const { data } = narrow(event, "assistant/message")
        for (const part of data.message.content) {
          if (part.type === "tool-call" && !calls.has(part.callId)) {
            calls.set(part.callId, { callId: part.callId, toolName: part.name, step: data.step, dispatched: false })
          }
        }
        break
      }
      case "tool/call": {
        const { data } = narrow(event, "tool/call")
        const known = calls.get(data.callId)
        calls.set(
          data.callId,
          known === undefined
            ? { callId: data.callId, toolName: data.name, step: data.step, dispatched: true }
            : { ...known, dispatched: true }
        )
        break
      }
      case "tool/result": {
        answered.add(narrow(event, "tool/result").data.message.toolCallId)
        break
      }
      case "user/message": {
        entered.add(narrow(event, "user/message").data.message.id)
        break
      }
      case "agent/inbox/spliced": {
        const { data } = narrow(event, "agent/inbox/spliced")
        if (i >= seedLength && data.outcome === undefined) {
          for (const id of data.removed) claims.push({ index: i, target: data.target, id })
        } else if (i >= seedLength && data.outcome === "restored") {
          for (const message of data.inserted) restored.add(message.id)
        }
        break
      }
    }
  }

  const stamp = stamper(events)
  const out: Array<CoreEvent> = []

  // (a) Claimed but never entered: the batch was torn by a crash; give the messages back, unless a
  // repair whose own batch was torn already did (DUR-12: repair converges, nothing is put back twice).
  // Only repair writes `restored`, after everything else of the turn, so it follows every claim.
  const lost = claims.filter((claim) => !entered.has(claim.id) && !restored.has(claim.id))
  if (lost.length > 0) {
    const bodies = claimedBodies(events, seedLength, lost)
    for (const target of ["next-step", "next-turn"] as const) {
      const inserted: Array<UserMessage> = []
      for (const claim of lost) {
        const body = claim.target === target ? bodies.get(claim.id) : undefined
        // A claim of a message never inserted is an invalid inbox log; its replay reports it (INB-05).
        if (body !== undefined && !inserted.includes(body)) inserted.push(body)
      }
      if (inserted.length > 0) {
        out.push(stamp({
          type: "agent/inbox/spliced",
          data: { target, start: 0, removed: [], inserted, outcome: "restored" }
        }))
      }
    }
  }

  // HIL-04: a suspended step waits for a person, it was not interrupted: only its dispatched calls
  // without a result are closed (REP-02), and the step and turn stay open
  // and a call that waits in `Tool.ask` for an answer (HIL-03) is not closed either: it is run again
  // from its start when the session is resumed, its logged answers replayed
  if (lost.length === 0 && isSuspended(events)) {
    const asking = askingCalls(events)
    for (const call of calls.values()) {
      if (call.dispatched && !answered.has(call.callId) && !asking.has(call.callId)) {
        out.push(stamp(callCloser(turn, call, options?.settled)))
      }
    }
    return out.length === 0 ? emptyClosers : Object.freeze(out)
  }

  // (b) One error result per call without a result, in the order the calls appeared.
  for (const call of calls.values()) {
    if (!answered.has(call.callId)) out.push(stamp(callCloser(turn, call, options?.settled)))
  }

  // (c) The open step, then (d) the turn.
  if (openStep !== undefined) out.push(stamp({ type: "step/end", data: { turn, step: openStep } }))
  out.push(stamp({ type: "turn/end", data: { turn, reason: { kind: "interrupted" } } }))
  return Object.freeze(out)
}

/** HIL-03: the calls of the open step with an unsettled question (they wait in `Tool.ask`). */
const askingCalls = (events: ReadonlyArray<SessionEvent>): ReadonlySet<string> => {
  const open = openStepRequests(events)
  if (Option.isNone(open)) return new Set()
  return new Set(open.value.pending.flatMap((item) => item._tag === "Question" ? [item.callId] : []))
}

/**
 * The `tool/result` that closes a call without a result: the result known from elsewhere for a
 * dispatched call (SUB-02), else `TOOL_OUTCOME_UNKNOWN` when it was dispatched, `TOOL_NOT_STARTED`
 * otherwise (REP-02).
 */
const callCloser = (
  turn: number,
  call: PendingCall,
  settled: ReadonlyMap<string, SettledResult> | undefined
): Unstamped => {
  const known = call.dispatched ? settled?.get(call.callId) : undefined
  if (known !== undefined) {
    return {
      type: "tool/result",
      data: {
        turn,
        step: call.step,
        message: deepFreeze({ ...known.message, toolCallId: call.callId }),
        ...(known.error !== undefined ? { error: { name: known.error.name, code: known.error.code } } : {})
      }
    }
  }
  const message: ToolResultMessage = {
    id: closerMessageId(call.callId),
    role: "tool",
    toolCallId: call.callId,
    toolName: call.toolName,
    content: [{
      type: "text",
      text: call.dispatched ? outcomeUnknownText(call.toolName) : notStartedText(call.toolName)
    }],
    isError: true
  }
  return {
    type: "tool/result",
    data: {
      turn,
      step: call.step,
      message,
      error: call.dispatched ? { ...ToolOutcomeUnknown } : { ...ToolNotStarted }
    }
  }
}

const emptyClosers: ReadonlyArray<CoreEvent> = Object.freeze([])

type Unstamped = CoreEvent extends infer E ? E extends CoreEvent ? Omit<E, "seq" | "time"> : never : never

const stamper = (events: ReadonlyArray<SessionEvent>) => {
  // Only called when a turn is open, so the log has a last event.
  const last = events[events.length - 1]!
  let seq = last.seq
  return (event: Unstamped): CoreEvent =>
    deepFreeze({ seq: ++seq, time: last.time, type: event.type, data: event.data } as CoreEvent)
}

// The body of each lost message: the latest insertion of its id before its claim, counting only
// splices after the seed (a fork's child starts with an empty inbox, INB-05).
const claimedBodies = (
  events: ReadonlyArray<SessionEvent>,
  seedLength: number,
  lost: ReadonlyArray<Claim>
): ReadonlyMap<MessageId, UserMessage> => {
  const firstClaim = new Map<string, number>()
  for (const claim of lost) if (!firstClaim.has(claim.id)) firstClaim.set(claim.id, claim.index)
  const bodies = new Map<MessageId, UserMessage>()
  const end = lost[lost.length - 1]!.index
  for (let i = clamp(seedLength, events.length); i < end; i++) {
    const event = events[i]!
    if (event.type !== "agent/inbox/spliced") continue
    for (const message of narrow(event, "agent/inbox/spliced").data.inserted) {
      const claimedAt = firstClaim.get(message.id)
      if (claimedAt !== undefined && i < claimedAt) bodies.set(message.id, message)
    }
  }
  return bodies
}
