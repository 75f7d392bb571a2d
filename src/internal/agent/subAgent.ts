/**
 * Agents as tools (SUB-01, SUB-02): each call of a `Tool.agent` runs one child agent, owned by the
 * calling agent, in a session whose id is derived from the parent's id and the call id. The call is
 * recorded (`tool/child`) before the child exists, so a resumed parent finds the child's session and,
 * when the child's turn for that call had ended, takes its result from the child's log instead of
 * running anything again.
 *
 * @internal
 */
import { Effect, Option } from "effect"
import type { Schema, Scope } from "effect"
import type { Agent, AgentOptions, Setup } from "../../Agent.js"
import { MaxAgentDepthExceeded, SubAgentFailed } from "../../AgentError.js"
import { AgentRegistry } from "../../AgentRegistry.js"
import type { MessageId, SessionId, ToolResultMessage } from "../../Message.js"
import * as Message from "../../Message.js"
import * as Repair from "../../Repair.js"
import type { SessionEvent, ToolChild, TurnEndReason } from "../../SessionEvent.js"
import type { SessionPersistence } from "../../SessionPersistence.js"
import type { ToolContext, ToolResult } from "../../Tool.js"
import * as session from "../log/session.js"
import * as turnResult from "./turnResult.js"

/** SUB-02: how deep a chain of sub-agents may go below its root when the agent does not say. */
const DEFAULT_MAX_AGENT_DEPTH = 4

const MAX_SESSION_ID = 128
const MAX_MESSAGE_ID = 256

/** FNV-1a over `text` from the offset basis `seed`: a pure hash (no `node:crypto`), 8 hex digits. */
const fnv1a = (text: string, seed: number): string => {
  let h = seed
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0).toString(16).padStart(8, "0")
}

/**
 * The child session id of call `callId` of `parent` (SUB-01): `<parent prefix>.sub-<16 hex digits>`,
 * the digits two FNV-1a hashes of the parent id and the call id. The parent's id is cut so the whole
 * stays within ID-01's 128 characters; the parent's id is valid, so its prefix starts with a letter
 * or digit and the rest are ID-01 characters.
 *
 * @internal
 */
export const childSessionId = (parent: SessionId, callId: string): SessionId => {
  const key = `${parent}\u0000${callId}`
  const suffix = `.sub-${fnv1a(key, 0x811c9dc5)}${fnv1a(key, 0x050c5d1f)}`
  return `${parent.slice(0, MAX_SESSION_ID - suffix.length)}${suffix}` as SessionId
}

/** The id of the message a call sends its child: found again in the child's log on the parent's resume. */
export const promptMessageId = (callId: string): MessageId => {
  const id = `sub-agent:${callId}`
  if (id.length <= MAX_MESSAGE_ID) return id as MessageId
  return `sub-agent:${callId.slice(0, MAX_MESSAGE_ID - 20)}~${fnv1a(callId, 0x811c9dc5)}` as MessageId
}

/** The tool result text of a child that finished: its id on the first line, then its final text. */
export const resultText = (child: SessionId, text: string): string => `[sub-agent ${child}]\n${text}`

/** An end reason in a few words (the reason of a `SubAgentFailed`). */
const describe = (reason: TurnEndReason): string => {
  switch (reason.kind) {
    case "error":
      return `its turn ended with an error (${reason.error.code}: ${reason.error.message})`
    case "blocked":
      return `its turn was blocked by a preStep hook (${reason.reason})`
    case "aborted":
      return `its turn was canceled (${reason.cause.kind})`
    default:
      return `its turn ended ${reason.kind}`
  }
}

/**
 * How far below its root `agent` is: 0 for an agent whose header names no parent, else one more than
 * its parent's, followed through the live agents of the registry (a parent outlives its running
 * children, OWN-03). A parent that is not live ends the walk.
 */
const depthOf = (registry: AgentRegistry["Type"], agent: Agent): Effect.Effect<number> =>
  Effect.gen(function*() {
    let depth = 0
    let parent = agent.session.header.child?.parent
    const seen = new Set<string>([agent.id])
    while (parent !== undefined && !seen.has(parent)) {
      depth++
      seen.add(parent)
      const found = yield* registry.get(parent)
      parent = Option.isSome(found) ? found.value.session.header.child?.parent : undefined
    }
    return depth
  })

/**
 * What a sub-agent tool runs with.
 *
 * @internal
 */
export interface SubAgentConfig<Args, E, R> {
  readonly name: string
  readonly options: AgentOptions | undefined
  readonly setup: Setup<E, R> | undefined
  readonly prompt: (args: Args) => string
}

/**
 * One call (SUB-01): the depth check (SUB-02), `tool/child` written through the parent session's
 * core path (validated like every core event), the child spawned owned by the parent (resumed when
 * its session is stored), the prompt run; the child's final text is the result. Interrupting the call
 * cancels the child's turn with cause `parent`; the child is disposed when the call ends either way
 * (its session stays stored).
 *
 * @internal
 */
export const runCall = <Args, E, R>(
  config: SubAgentConfig<Args, E, R>,
  args: Args,
  context: ToolContext
): Effect.Effect<ToolResult, SubAgentFailed | MaxAgentDepthExceeded, AgentRegistry | Exclude<R, Scope.Scope>> =>
  Effect.gen(function*() {
    const parent = context.agent
    const registry = yield* AgentRegistry
    const depth = yield* depthOf(registry, parent)
    const max = parent.options.maxAgentDepth ?? DEFAULT_MAX_AGENT_DEPTH
    if (depth + 1 > max) return yield* new MaxAgentDepthExceeded({ tool: config.name, depth, max })
    const child = childSessionId(parent.id, context.callId)
    const failed = (reason: string) => new SubAgentFailed({ tool: config.name, child, reason })
    yield* session.core(parent.session).appendCore([{
      type: "tool/child",
      data: { turn: context.turn, step: context.step, callId: context.callId, child }
    }]).pipe(Effect.mapError((error) => failed(`its call could not be recorded (${error.message})`)))
    const handle = yield* parent.spawn({
      sessionId: child,
      resume: true,
      options: config.options,
      setup: config.setup,
      child: { parent: parent.id, callId: context.callId }
    }).pipe(Effect.mapError((error) => failed(`it could not be started (${messageOf(error)})`)))
    const message = Message.user(config.prompt(args), {
      id: promptMessageId(context.callId),
      source: { kind: "agent", agent: parent.id }
    })
    const result = yield* handle.agent.run(message).pipe(
      Effect.onInterrupt(() => Effect.ignore(handle.agent.cancel({ kind: "parent" }))),
      Effect.ensuring(Effect.ignore(handle.dispose)),
      Effect.mapError((error) => failed(error._tag === "TurnFailed" ? describe(error.reason) : messageOf(error)))
    )
    return { content: [{ type: "text", text: resultText(child, result.text) }] }
  })

const messageOf = (error: unknown): string =>
  error instanceof Error ? error.message : typeof error === "string" ? error : String(error)

/** The calls of the open final turn that record a child (`tool/child`) and have no result yet. */
const unansweredChildren = (events: ReadonlyArray<SessionEvent>): Map<string, SessionId> => {
  const children = new Map<string, SessionId>()
  const open = Repair.openTurn(events)
  if (Option.isNone(open)) return children
  for (let i = open.value.startIndex + 1; i < events.length; i++) {
    const event = events[i]!
    if (event.type === "tool/child") {
      const data = (event as unknown as typeof ToolChild.Type).data
      children.set(data.callId, data.child)
    } else if (event.type === "tool/result") {
      children.delete((event.data as { readonly message: ToolResultMessage }).message.toolCallId)
    }
  }
  return children
}

/** The name of the tool of call `callId` in the open turn (its `tool/call`). */
const toolNameOf = (events: ReadonlyArray<SessionEvent>, callId: string): string | undefined => {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type === "turn/start") return undefined
    if (event.type === "tool/call") {
      const data = event.data as { readonly callId: string; readonly name: string }
      if (data.callId === callId) return data.name
    }
  }
  return undefined
}

/**
 * The result a call gets from its child's log (SUB-02): the child's turn that entered the call's
 * prompt ended `completed` → its final text, exactly as the live call returns it; it ended otherwise
 * (but not `interrupted` by a repair) → the `SUBAGENT_FAILED` result the live call gives. `undefined`
 * while that turn is open or absent: the call is then closed like any interrupted call (REP-02).
 */
const settledFromChild = (
  callId: string,
  toolName: string,
  child: SessionId,
  log: ReadonlyArray<SessionEvent>
): Repair.SettledResult | undefined => {
  const promptId = promptMessageId(callId)
  const entered = log.find((event) =>
    event.type === "user/message" && (event.data as { readonly message: { readonly id: string } }).message.id === promptId
  )
  if (entered === undefined) return undefined
  const result = turnResult.fromLog(log, (entered.data as { readonly turn: number }).turn)
  if (result === undefined || result.reason.kind === "interrupted") return undefined
  const base = { id: `tool:${callId}` as MessageId, role: "tool" as const, toolCallId: callId, toolName }
  if (result.reason.kind === "completed") {
    return { message: { ...base, content: [{ type: "text", text: resultText(child, result.text) }], isError: false } }
  }
  const error = new SubAgentFailed({ tool: toolName, child, reason: describe(result.reason) })
  return {
    message: { ...base, content: [{ type: "text", text: `The tool failed: ${error.message}` }], isError: true },
    error: { name: error._tag, code: "SUBAGENT_FAILED" }
  }
}

/**
 * SUB-02, on the parent's resume: for each call of the open turn that recorded a child and has no
 * result, the child's stored log is read (never written, never resumed) and a finished child's
 * result returned, keyed by call id, for `Repair.closers` to write in place of `TOOL_OUTCOME_UNKNOWN`.
 * A child that is not stored or cannot be read leaves its call to the v1 rule.
 *
 * @internal
 */
export const settledChildren = (
  persistence: SessionPersistence["Type"],
  events: ReadonlyArray<SessionEvent>
): Effect.Effect<ReadonlyMap<string, Repair.SettledResult>> =>
  Effect.gen(function*() {
    const settled = new Map<string, Repair.SettledResult>()
    const children = unansweredChildren(events)
    for (const [callId, child] of children) {
      const toolName = toolNameOf(events, callId)
      if (toolName === undefined) continue
      const stored = yield* Effect.option(persistence.read(child))
      if (Option.isNone(stored)) continue
      const result = settledFromChild(callId, toolName, child, stored.value.events)
      if (result !== undefined) settled.set(callId, result)
    }
    return settled
  })

/** The default parameters of a sub-agent tool: one prompt. @internal */
export type DefaultFields = { readonly prompt: typeof Schema.String }
