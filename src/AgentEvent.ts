/**
 * The live events of agents (SPEC §6): published by each agent on one PubSub in causal order and
 * mirrored to `AgentRegistry.events`. Live only: the durable record is the session log.
 *
 * EVS-02: an event that mirrors a durable event is published after that event is durable and
 * carries its `seq` (`TurnStarted` its `turn/start`, `ToolCallFinished` its `tool/result`, …), so a
 * client that also reads the log (`session.eventsFrom`) can tell which live events the log already
 * covers. `ModelDelta`, `ModelRetry` and the status events mirror nothing durable.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { Data } from "effect"
import type { MessageId, SessionId, UserMessage } from "./Message.js"
import type {
  FinishReason,
  InboxTarget,
  InputOutcome,
  JsonRecord,
  JsonValue,
  TurnEndReason,
  Usage
} from "./SessionEvent.js"

/**
 * `"idle"` or `"running"` (maintenance counts as idle); `"awaiting-input"` (@since 0.3.0) when its
 * turn is suspended, waiting for a person's decision or answer, and nothing runs.
 *
 * @since 0.1.0
 * @category models
 */
export type AgentStatus = "idle" | "running" | "awaiting-input"

interface Base {
  /** The agent the event is about. */
  readonly agent: SessionId
  /** The agent whose work caused it, when known. */
  readonly initiator?: SessionId | undefined
}

interface Mirrored {
  /**
   * EVS-02: the `seq` of the durable event this one mirrors, published once that event is durable.
   * Set on every event an agent of this library publishes; absent only on events published by
   * other code through an `AgentPublisher`. (@since 0.2.0)
   */
  readonly seq?: number | undefined
}

/**
 * A tool call as {@link AgentEvent} `AssistantMessage` lists it: the raw argument text, as logged.
 *
 * @since 0.2.0
 * @category models
 */
export interface AssistantToolCall {
  readonly callId: string
  readonly name: string
  readonly arguments: string
}

/**
 * @since 0.1.0
 * @category models
 */
export type AgentEvent = Data.TaggedEnum<{
  AgentCreated: Base
  AgentSessionStart: Base & { readonly source: "startup" | "resume" }
  AgentStatusChanged: Base & { readonly status: AgentStatus }
  /** Messages inserted into the inbox; `seq`: their `agent/inbox/spliced` event. */
  InboxInserted: Base & Mirrored & { readonly target: InboxTarget; readonly messages: ReadonlyArray<UserMessage> }
  /** Pending messages removed without entering a turn; `seq`: their `agent/inbox/spliced` event. */
  InboxDiscarded: Base & Mirrored & {
    readonly target: InboxTarget
    readonly ids: ReadonlyArray<MessageId>
    readonly outcome: "canceled" | "rejected"
  }
  /** Messages that entered a step; `seq`: the `step/start` of that step (their `user/message`s follow it). */
  InboxClaimed: Base & Mirrored & { readonly turn: number; readonly messages: ReadonlyArray<UserMessage> }
  /** `seq`: the turn's `turn/start`. */
  TurnStarted: Base & Mirrored & { readonly turn: number }
  ModelDelta: Base & {
    readonly turn: number
    readonly step: number
    readonly kind: "text" | "reasoning"
    readonly text: string
  }
  /**
   * The step's `assistant/message` is durable (EVS-02): `seq` is its seq; `text` its text parts
   * joined, `toolCalls` the calls it asked for (none when it stopped at `max-tokens`), `usage` what
   * the provider reported, if anything. `interrupted`: a cancel cut the stream off, and this is what
   * it delivered (CAN-05). (@since 0.2.0)
   */
  AssistantMessage: Base & {
    readonly turn: number
    readonly step: number
    readonly seq: number
    readonly text: string
    readonly toolCalls: ReadonlyArray<AssistantToolCall>
    readonly usage?: Usage | undefined
    readonly finish?: FinishReason | undefined
    readonly interrupted?: boolean | undefined
  }
  /**
   * A tool call's `tool/call` is durable and its body starts. `arguments`: the raw argument text
   * the model sent, `seq`: the `tool/call`'s seq (both @since 0.2.0, EVS-02).
   */
  ToolCallStarted: Base & {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly name: string
    readonly arguments: string
    readonly seq: number
  }
  /**
   * A started call's `tool/result` is durable (EVS-02: so these come in the log's order, which is
   * the model's, TOOL-01). `summary`: the result's text parts joined, its first 2,000 characters;
   * `seq`: the `tool/result`'s seq (both @since 0.2.0). Every `ToolCallStarted` is followed by one
   * `ToolCallFinished`, also when a cancel ended the call (`isError`, the `ABORTED` result).
   */
  ToolCallFinished: Base & {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly isError: boolean
    readonly summary: string
    readonly seq: number
  }
  /**
   * A failed model request of this step is retried after `delay` (MOD-04; `attempt` counts from 1
   * for the first retry). Live only, as nothing of the failed attempt is durable: UIs drop the
   * partial text and reasoning the step streamed so far. (@since 0.2.0)
   */
  ModelRetry: Base & {
    readonly turn: number
    readonly step: number
    readonly attempt: number
    readonly code: string
    readonly delay: Duration.Duration
  }
  /**
   * A `session/compacted` event was appended (CMP-01, EVS-02): `seq` is its seq; `turn` and `step`
   * name the step it ran in, absent for `agent.compact` between turns. (@since 0.2.0)
   */
  Compacted: Base & Mirrored & {
    readonly upTo: number
    readonly summary: string
    readonly usage: Usage
    readonly turn?: number | undefined
    readonly step?: number | undefined
  }
  /**
   * HIL-03: a tool asked a question (`Tool.ask`); its `tool/input-requested` is durable
   * (`seq`). Answer it with `agent.respond(requestId, value)` or `agent.decline(requestId)`.
   * (@since 0.3.0)
   */
  InputRequested: Base & {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly requestId: string
    readonly question: string
    readonly jsonSchema: JsonRecord
    readonly deadline?: number | undefined
    readonly seq: number
  }
  /**
   * HIL-03: a question was settled (`outcome`: answered, declined, timed out or canceled
   * with the turn); its `tool/input-provided` is durable (`seq`). (@since 0.3.0)
   */
  InputProvided: Base & {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly requestId: string
    readonly outcome: InputOutcome
    readonly value?: JsonValue | undefined
    readonly seq: number
  }
  /**
   * A call waits for a person's approval: its `tool/approval-requested` is durable (`seq`).
   * `arguments` is the model's raw argument text; `deadline` (epoch ms) when it is rejected
   * automatically, if it has one. (@since 0.3.0)
   */
  ApprovalRequested: Base & {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly approvalId: string
    readonly tool: string
    readonly arguments: string
    readonly deadline?: number | undefined
    readonly seq: number
  }
  /** An approval request was settled: its `tool/approval-decided` is durable (`seq`). (@since 0.3.0) */
  ApprovalDecided: Base & {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly decision: "approved" | "rejected" | "canceled"
    readonly reason?: string | undefined
    readonly seq: number
  }
  /** `seq`: the turn's `turn/end`. */
  TurnEnded: Base & Mirrored & { readonly turn: number; readonly reason: TurnEndReason }
  AgentError: Base & {
    readonly turn?: number | undefined
    readonly step?: number | undefined
    readonly error: { readonly message: string; readonly code: string }
  }
  AgentDisposed: Base
}>

/**
 * Constructors and matchers for {@link AgentEvent}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const AgentEvent = Data.taggedEnum<AgentEvent>()
