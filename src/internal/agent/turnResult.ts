/**
 * APP-01: a turn's `TurnResult`, derived from the log in one place — what `run` returns, what
 * `turnResult` reads back after a restart and what `TurnFailed` carries — so the three never differ.
 *
 * @internal
 */
import type { Schema } from "effect"
import type { AssistantMessage, ToolResultMessage } from "../../Message.js"
import type { OutputFormat } from "../../ModelSettings.js"
import { textOf } from "../../Message.js"
import type { SessionEvent, TurnEndReason } from "../../SessionEvent.js"
import { ToolCallOutcome, TurnResult } from "../../TurnResult.js"
import type { TurnMessage } from "../../TurnResult.js"
import * as usage from "../log/usage.js"
import { decodeOutput } from "./driver/turnOptions.js"

/**
 * OUT-01: how a result's `output` is decoded: the agent's own output format (a turn without a
 * `request/config` of its own asked for the one in force before it), and the Schema this process
 * holds for a format (none after a restart: the answer's JSON as it is).
 *
 * @internal
 */
export interface OutputDecoding {
  readonly agent: OutputFormat | undefined
  readonly schemaOf: (format: OutputFormat) => Schema.Schema<any, any, never> | undefined
}

type ConfigData = { readonly output?: OutputFormat | undefined }

/**
 * Where a turn stands in a log: ended (with the seqs of its `turn/start` and `turn/end`), open (its
 * `turn/start` is the last one, without an end), or absent.
 *
 * @internal
 */
export type TurnLocation =
  | { readonly _tag: "Ended"; readonly from: number; readonly to: number }
  | { readonly _tag: "Open"; readonly from: number }
  | { readonly _tag: "Absent" }

const absent: TurnLocation = { _tag: "Absent" }

const turnOf = (event: SessionEvent): number => (event.data as { readonly turn: number }).turn

/**
 * Finds turn `turn` by walking back from the end of the log (turns are numbered in log order, so a
 * recent turn costs only the events after it). `endHint`, the seq of its `turn/end` when the caller
 * knows it, starts the walk there.
 *
 * @internal
 */
export const locate = (log: ReadonlyArray<SessionEvent>, turn: number, endHint?: number): TurnLocation => {
  let end: number | undefined
  const startAt = endHint !== undefined && log[endHint]?.seq === endHint ? endHint : log.length - 1
  for (let i = startAt; i >= 0; i--) {
    const event = log[i]!
    if (event.type === "turn/end") {
      if (turnOf(event) === turn) end = i
      else if (turnOf(event) < turn) return absent
    } else if (event.type === "turn/start") {
      const started = turnOf(event)
      if (started === turn) {
        return end === undefined ? { _tag: "Open", from: event.seq } : { _tag: "Ended", from: event.seq, to: log[end]!.seq }
      }
      if (started < turn) return absent
    }
  }
  return absent
}

/** What a walk over a turn's events collects. */
interface Collected {
  readonly messages: Array<TurnMessage>
  readonly calls: Array<{ readonly callId: string; readonly name: string; readonly arguments: string }>
  readonly results: Map<string, ToolResultMessage>
  lastAssistant: AssistantMessage | undefined
  sums: usage.Sums | undefined
  /** The turn's last `request/config` (OUT-01: the output it asked for). */
  config: ConfigData | undefined
}

const collect = (log: ReadonlyArray<SessionEvent>, from: number, to: number): Collected => {
  const collected: Collected = {
    messages: [],
    calls: [],
    results: new Map(),
    lastAssistant: undefined,
    sums: undefined,
    config: undefined
  }
  const first = log[from]?.seq === from ? from : log.findIndex((event) => event.seq === from)
  for (let i = first; i < log.length && log[i]!.seq <= to; i++) {
    const event = log[i]!
    if (event.type === "assistant/message") {
      const message = (event.data as { readonly message: AssistantMessage }).message
      collected.messages.push(message)
      collected.lastAssistant = message
      for (const part of message.content) {
        if (part.type === "tool-call") {
          collected.calls.push({ callId: part.callId, name: part.name, arguments: part.arguments })
        }
      }
    } else if (event.type === "request/config") {
      collected.config = event.data as ConfigData
    } else if (event.type === "tool/result") {
      const message = (event.data as { readonly message: ToolResultMessage }).message
      collected.messages.push(message)
      collected.results.set(message.toolCallId, message)
    }
    // the turn's own model calls: its replies and the compactions it ran (children log elsewhere)
    collected.sums = usage.add(collected.sums, event)
  }
  return collected
}

/**
 * The `TurnResult` of the turn between the seqs `from` (its `turn/start`) and `to` (its `turn/end`).
 * Every call of the turn has a result in a well-formed log (REP-02); one without is reported as an
 * error with an empty result rather than dropped.
 *
 * @internal
 */
export const derive = (
  log: ReadonlyArray<SessionEvent>,
  turn: number,
  from: number,
  to: number,
  decoding?: OutputDecoding | undefined
): TurnResult => {
  const collected = collect(log, from, to)
  const end = log[to]?.seq === to ? log[to] : log.find((event) => event.seq === to)
  const reason = (end?.data as { readonly reason: TurnEndReason } | undefined)?.reason ?? { kind: "interrupted" }
  const toolCalls = collected.calls.map((call) => {
    const result = collected.results.get(call.callId)
    return new ToolCallOutcome({
      ...call,
      result: result === undefined ? "" : textOf(result.content),
      isError: result === undefined ? true : result.isError
    }, true)
  })
  const text = collected.lastAssistant === undefined ? "" : textOf(collected.lastAssistant.content)
  const output = reason.kind === "completed" ? outputOf(log, from, collected.config, text, decoding) : undefined
  return new TurnResult({
    turn,
    reason,
    text,
    ...(output !== undefined ? { output: output.value } : {}),
    messages: collected.messages,
    toolCalls,
    usage: usage.snapshot(collected.sums),
    seq: { from, to }
  }, true)
}

/** The output format in force before seq `from`: the last `request/config` before it. */
const configBefore = (log: ReadonlyArray<SessionEvent>, from: number): ConfigData | undefined => {
  for (let i = Math.min(from, log.length) - 1; i >= 0; i--) {
    if (log[i]!.type === "request/config") return log[i]!.data as ConfigData
  }
  return undefined
}

/**
 * OUT-01: the decoded output of a completed turn that asked for one (its own config's, else the one
 * in force before it — looked up only when the agent has an output format, so plain agents pay
 * nothing); `undefined` when it asked for none or its answer does not decode.
 */
const outputOf = (
  log: ReadonlyArray<SessionEvent>,
  from: number,
  config: ConfigData | undefined,
  text: string,
  decoding: OutputDecoding | undefined
): { readonly value: unknown } | undefined => {
  const format = config !== undefined
    ? config.output
    : decoding?.agent === undefined
    ? undefined
    : configBefore(log, from)?.output
  if (format === undefined) return undefined
  const decoded = decodeOutput(text, decoding?.schemaOf(format))
  return decoded._tag === "Right" ? { value: decoded.right } : undefined
}

/**
 * The `TurnResult` of turn `turn` when it has ended in `log`; `undefined` when it is open or absent.
 *
 * @internal
 */
export const fromLog = (
  log: ReadonlyArray<SessionEvent>,
  turn: number,
  endHint?: number,
  decoding?: OutputDecoding | undefined
): TurnResult | undefined => {
  const location = locate(log, turn, endHint)
  return location._tag === "Ended" ? derive(log, turn, location.from, location.to, decoding) : undefined
}
