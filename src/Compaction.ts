/**
 * Long sessions (CMP-01): an agent whose prompt outgrows its model's context window folds its older
 * turns into a summary. Set `options.contextWindow` (tokens) and, optionally, a {@link Policy} as
 * `options.compaction`; `agent.compact()` does the same on demand between turns.
 *
 * What happens, in order:
 * 1. At each step of a turn, after the step's input entered the log and before its model request,
 *    the agent estimates the request's prompt in tokens. When the estimate exceeds
 *    `threshold × contextWindow`, it compacts inside the running turn (no extra turn, no
 *    `turn/start`). The estimate uses provider usage when it is known: the latest
 *    `assistant/message` after the latest compaction that reports usage gives its request's prompt
 *    (`inputTokens`, plus `cachedInputTokens` when that exceeds `inputTokens`, as providers that
 *    count cache reads apart report them) plus its `outputTokens`, and a byte estimate is added for
 *    what the history gained since. Otherwise the whole request is estimated from bytes: UTF-8
 *    bytes / 4 for text, system prompt, tool calls and tool definitions, 1,600 tokens per image,
 *    4 tokens per message.
 * 2. Compacting asks the same `Model`, on the turn's route, for a summary of the closed turns
 *    before the last `keepLastTurns` (the running turn is always kept): the request carries the
 *    history of those turns (the previous summary included) followed by the policy's `prompt`.
 * 3. One durable `session/compacted {upTo, summary, usage}` event is appended (`upTo` an event
 *    count, as a fork's). From then on every request carries the summary followed by what the
 *    events from `upTo` on contribute; the full log stays, and a crash can never leave half a
 *    compaction (it is one event). A live `Compacted` agent event mirrors it, with its seq.
 *
 * When the summarizer request fails, `onFailure` decides: `"continue"` (the default) logs a warning
 * and sends the step's request uncompacted (if it does not fit, the provider's `CONTEXT_LENGTH`
 * error ends the turn as any model failure does); `"fail"` ends the turn `{kind:"error"}` with the
 * summarizer's error.
 *
 * @since 0.2.0
 */
import type { Usage } from "./SessionEvent.js"
import { summaryPreamble as preamble } from "./internal/log/history.js"

/**
 * How an agent compacts. Every field is optional; the defaults are {@link defaultThreshold},
 * {@link defaultKeepLastTurns}, {@link defaultPrompt} and `onFailure: "continue"`. Validated at
 * create/resume with the other agent options (`InvalidAgentOptions` names each bad field).
 *
 * @since 0.2.0
 * @category models
 */
export interface Policy {
  /** The fraction of `contextWindow` above which a step compacts first: a number in (0, 1]; default 0.8. */
  readonly threshold?: number | undefined
  /** How many of the latest closed turns stay verbatim (an integer ≥ 0); default 2. */
  readonly keepLastTurns?: number | undefined
  /** The instruction sent to the model after the history it summarises; default {@link defaultPrompt}. */
  readonly prompt?: string | undefined
  /**
   * What a failed summarizer request does inside a turn: `"continue"` (default) logs a warning and
   * sends the request uncompacted, `"fail"` ends the turn with the error. (`agent.compact` always
   * fails with it.)
   */
  readonly onFailure?: "continue" | "fail" | undefined
}

/**
 * What `agent.compact` takes: the policy's `keepLastTurns` and `prompt`, overridden for this call.
 *
 * @since 0.2.0
 * @category models
 */
export interface CompactOptions {
  readonly keepLastTurns?: number | undefined
  readonly prompt?: string | undefined
}

/**
 * A compaction that was written: the seq of its `session/compacted` event, the event count it
 * summarised (`upTo`), the summary and the summarizer call's usage (`{}` when unreported).
 *
 * @since 0.2.0
 * @category models
 */
export interface Compacted {
  readonly seq: number
  readonly upTo: number
  readonly summary: string
  readonly usage: Usage
}

/**
 * @since 0.2.0
 * @category defaults
 */
export const defaultThreshold: number = 0.8

/**
 * @since 0.2.0
 * @category defaults
 */
export const defaultKeepLastTurns: number = 2

/**
 * The summarizer's default instruction.
 *
 * @since 0.2.0
 * @category defaults
 */
export const defaultPrompt: string =
  "Summarize the conversation above for your own later use: you will continue it with only this summary " +
  "and the most recent turns. Keep the user's goals and requests, decisions made, facts learned, the tools " +
  "called with their important results (files, identifiers, values), and any unfinished work or open " +
  "questions. Write concise notes. Do not call any tool: answer with the summary only."

/**
 * The text a summary opens with in the model-visible history (a `{kind:"system"}` user message with
 * id `compacted:<seq>`, followed by a blank line and the summary).
 *
 * @since 0.2.0
 * @category constants
 */
export const summaryPreamble: string = preamble
