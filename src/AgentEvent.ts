/**
 * The live events of agents (SPEC §6): published by each agent on one PubSub in causal order and
 * mirrored to `AgentRegistry.events`. Live only: the durable record is the session log.
 *
 * @since 0.1.0
 */
import type { Duration } from "effect"
import { Data } from "effect"
import type { MessageId, SessionId, UserMessage } from "./Message.js"
import type { InboxTarget, TurnEndReason, Usage } from "./SessionEvent.js"

/**
 * `"idle"` or `"running"` (maintenance counts as idle).
 *
 * @since 0.1.0
 * @category models
 */
export type AgentStatus = "idle" | "running"

interface Base {
  /** The agent the event is about. */
  readonly agent: SessionId
  /** The agent whose work caused it, when known. */
  readonly initiator?: SessionId | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export type AgentEvent = Data.TaggedEnum<{
  AgentCreated: Base
  AgentSessionStart: Base & { readonly source: "startup" | "resume" }
  AgentStatusChanged: Base & { readonly status: AgentStatus }
  InboxInserted: Base & { readonly target: InboxTarget; readonly messages: ReadonlyArray<UserMessage> }
  InboxDiscarded: Base & {
    readonly target: InboxTarget
    readonly ids: ReadonlyArray<MessageId>
    readonly outcome: "canceled" | "rejected"
  }
  InboxClaimed: Base & { readonly turn: number; readonly messages: ReadonlyArray<UserMessage> }
  TurnStarted: Base & { readonly turn: number }
  ModelDelta: Base & {
    readonly turn: number
    readonly step: number
    readonly kind: "text" | "reasoning"
    readonly text: string
  }
  ToolCallStarted: Base & { readonly turn: number; readonly step: number; readonly callId: string; readonly name: string }
  ToolCallFinished: Base & {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly isError: boolean
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
  Compacted: Base & {
    readonly seq: number
    readonly upTo: number
    readonly summary: string
    readonly usage: Usage
    readonly turn?: number | undefined
    readonly step?: number | undefined
  }
  TurnEnded: Base & { readonly turn: number; readonly reason: TurnEndReason }
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
