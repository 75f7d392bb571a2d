/**
 * CMP-01, long sessions: the pure parts — the policy with its defaults, token estimates, the
 * decision "compact now? up to where?", the history a summarizer sees and its request — and the two
 * ways a compaction runs: at a step boundary inside a turn (`atStepBoundary`, the driver's hook)
 * and between turns (`compactAgent`, `agent.compact`, claiming the agent like `runMaintenance`).
 *
 * A compaction is one durable `session/compacted {upTo, summary, usage}` event: a crash leaves it
 * whole or absent (a torn last line is dropped, PERS-03), so resume and repair need nothing of
 * their own; the model-visible history folds it (log/history.ts), so requests (REQ-03), forks
 * (FORK-01) and resumed sessions (RES) honour it from the log alone.
 *
 * @internal
 */
import type { Either } from "effect"
import { Duration, Effect, Option, Stream } from "effect"
import type { AgentOptions } from "../../Agent.js"
import type * as AgentError from "../../AgentError.js"
import { ModelError } from "../../AgentError.js"
import { AgentEvent } from "../../AgentEvent.js"
import * as Compaction from "../../Compaction.js"
import type { ContentPart, Message, MessageId, SessionId, UserMessage } from "../../Message.js"
import type { ModelChunk, ModelRequest, ToolSchema } from "../../Model.js"
import type { Model } from "../../Model.js"
import type { Session } from "../../Session.js"
import type * as SessionError from "../../SessionError.js"
import type {
  AssistantMessageLogged,
  CoreEventInput,
  SessionCompacted,
  SessionEvent,
  Usage
} from "../../SessionEvent.js"
import type * as Tool from "../../Tool.js"
import * as history from "../log/history.js"
import { deepFreeze } from "../json.js"
import * as modelOutput from "../model/output.js"
import * as modelRetry from "../model/retry.js"
import { decodeCompactOptions } from "../options.js"
import { utf8Length } from "../log/recordSize.js"
import { core } from "../log/session.js"

// -------------------------------------------------------------------------------------------------
// The policy

/** @internal */
export interface ResolvedPolicy {
  readonly threshold: number
  readonly keepLastTurns: number
  readonly prompt: string
  readonly onFailure: "continue" | "fail"
}

/**
 * The policy with its defaults filled in (`options` validated at create/resume, CORE-08), and an
 * `agent.compact` call's overrides applied.
 *
 * @internal
 */
export const resolvePolicy = (
  policy: Compaction.Policy | undefined,
  override?: Compaction.CompactOptions | undefined
): ResolvedPolicy => ({
  threshold: policy?.threshold ?? Compaction.defaultThreshold,
  keepLastTurns: override?.keepLastTurns ?? policy?.keepLastTurns ?? Compaction.defaultKeepLastTurns,
  prompt: override?.prompt ?? policy?.prompt ?? Compaction.defaultPrompt,
  onFailure: policy?.onFailure ?? "continue"
})

// -------------------------------------------------------------------------------------------------
// Token estimates: provider usage when known, a byte heuristic otherwise

/** @internal */
export const BYTES_PER_TOKEN = 4
/** What an image part is counted as (providers bill images by pixels, not by their base64 bytes). @internal */
export const IMAGE_TOKENS = 1_600
/** The framing of one message (role, separators). @internal */
export const MESSAGE_TOKENS = 4

/** The byte heuristic: UTF-8 bytes / 4, rounded up. @internal */
export const textTokens = (text: string): number => Math.ceil(utf8Length(text) / BYTES_PER_TOKEN)

type Part = ContentPart | Extract<Message, { readonly role: "assistant" }>["content"][number]

const partTokens = (part: Part): number => {
  switch (part.type) {
    case "image":
      return IMAGE_TOKENS
    case "tool-call":
      return textTokens(part.name) + textTokens(part.arguments)
    default:
      return textTokens(part.text)
  }
}

/** Per-message estimates: messages are frozen log values, shared by every snapshot of the history. */
const messageSizes = new WeakMap<Message, number>()

/**
 * A message's byte estimate in tokens.
 *
 * @internal
 */
export const messageTokens = (message: Message): number => {
  const known = messageSizes.get(message)
  if (known !== undefined) return known
  let tokens = MESSAGE_TOKENS
  for (const part of message.content as ReadonlyArray<Part>) tokens += partTokens(part)
  if (message.role === "tool") tokens += textTokens(message.toolName) + textTokens(message.toolCallId)
  messageSizes.set(message, tokens)
  return tokens
}

const schemaSizes = new WeakMap<object, number>()

/** The tool definitions' byte estimate (each tool's JSON Schema is measured once). */
const toolTokens = (tools: ReadonlyArray<Pick<ToolSchema, "name" | "description" | "jsonSchema">>): number => {
  let tokens = 0
  for (const tool of tools) {
    let schema = schemaSizes.get(tool.jsonSchema)
    if (schema === undefined) {
      schema = textTokens(JSON.stringify(tool.jsonSchema))
      schemaSizes.set(tool.jsonSchema, schema)
    }
    tokens += textTokens(tool.name) + textTokens(tool.description) + schema
  }
  return tokens
}

/**
 * The prompt of the request a usage was reported for: `inputTokens` (the whole prompt, as
 * `@effect/ai` defines it), plus `cachedInputTokens` when that exceeds it (it cannot be a part of it
 * then: the provider counted cache reads apart, as Anthropic's wire does). Unknown without
 * `inputTokens`.
 *
 * @internal
 */
export const promptTokensOf = (usage: Usage): number | undefined => {
  const input = usage.inputTokens
  if (input === undefined) return undefined
  const cached = usage.cachedInputTokens ?? 0
  return cached > input ? input + cached : input
}

/**
 * An estimate of a prompt in tokens, and what it rests on.
 *
 * @internal
 */
export interface Estimate {
  readonly tokens: number
  readonly source: "usage" | "bytes"
}

type AssistantData = typeof AssistantMessageLogged.Type["data"]

/**
 * The latest `assistant/message` after the latest compaction whose usage gives the size of the
 * request it answered: its index and that prompt plus the message itself (its `outputTokens`).
 */
const usageAnchor = (
  log: ReadonlyArray<SessionEvent>
): { readonly index: number; readonly tokens: number } | undefined => {
  for (let i = log.length - 1; i >= 0; i--) {
    const event = log[i]!
    // the history changed at a compaction: usage from before it measured another prompt
    if (event.type === "session/compacted") return undefined
    if (event.type !== "assistant/message") continue
    const data = event.data as AssistantData
    const prompt = data.usage === undefined ? undefined : promptTokensOf(data.usage)
    if (prompt === undefined) continue
    return { index: i, tokens: prompt + (data.usage?.outputTokens ?? messageTokens(data.message)) }
  }
  return undefined
}

/**
 * The estimated prompt of the next request (CMP-01): provider usage when known — the prompt and
 * output of the latest reported request after the latest compaction, plus the byte estimate of what
 * the history gained since — else the byte estimate of the whole request (system prompt, tool
 * definitions, messages). `messages` is the log's history (`session.messages`); `log` a whole log.
 *
 * @internal
 */
export const estimatePrompt = (input: {
  readonly log: ReadonlyArray<SessionEvent>
  readonly messages: ReadonlyArray<Message>
  readonly system?: string | undefined
  readonly tools: ReadonlyArray<Pick<ToolSchema, "name" | "description" | "jsonSchema">>
}): Estimate => {
  const anchor = usageAnchor(input.log)
  if (anchor !== undefined) {
    const since: Array<Message> = []
    for (let i = anchor.index + 1; i < input.log.length; i++) history.foldPlain(since, input.log[i]!)
    let tokens = anchor.tokens
    for (const message of since) tokens += messageTokens(message)
    return { tokens, source: "usage" }
  }
  let tokens = (input.system === undefined ? 0 : textTokens(input.system)) + toolTokens(input.tools)
  for (const message of input.messages) tokens += messageTokens(message)
  return { tokens, source: "bytes" }
}

// -------------------------------------------------------------------------------------------------
// The decision: compact now? up to where?

/**
 * Whether a prompt of `tokens` exceeds `threshold` of the window.
 *
 * @internal
 */
export const exceedsThreshold = (tokens: number, contextWindow: number, threshold: number): boolean =>
  tokens > threshold * contextWindow

/**
 * The log length at the end of the closed turn that precedes the last `keepLastTurns` closed ones
 * (an open turn at the end of the log is always kept), if there is such a turn.
 *
 * @internal
 */
export const keptTurnsBoundary = (log: ReadonlyArray<SessionEvent>, keepLastTurns: number): number | undefined => {
  let closed = 0
  for (let i = log.length - 1; i >= 0; i--) {
    if (log[i]!.type !== "turn/end") continue
    if (closed === keepLastTurns) return i + 1
    closed++
  }
  return undefined
}

/**
 * The index of the latest `session/compacted` of a log, if any.
 *
 * @internal
 */
export const latestCompaction = (log: ReadonlyArray<SessionEvent>): number | undefined => {
  for (let i = log.length - 1; i >= 0; i--) if (log[i]!.type === "session/compacted") return i
  return undefined
}

/**
 * A compaction to run: its `upTo` and the history its summarizer sees (the latest summary, if any,
 * and what the events it folds contribute).
 *
 * @internal
 */
export interface Plan {
  readonly upTo: number
  readonly history: ReadonlyArray<Message>
}

/**
 * Up to where a compaction that keeps the last `keepLastTurns` closed turns would fold, and what it
 * would summarise — `None` when that folds nothing the latest compaction did not fold already.
 * Pure: a function of the log alone.
 *
 * @internal
 */
export const planCompaction = (log: ReadonlyArray<SessionEvent>, keepLastTurns: number): Option.Option<Plan> => {
  const upTo = keptTurnsBoundary(log, keepLastTurns)
  if (upTo === undefined) return Option.none()
  const latest = latestCompaction(log)
  const covered = latest === undefined ? 0 : history.keptFrom(log[latest]!)
  if (upTo <= covered) return Option.none()
  const folded: Array<Message> = []
  for (let i = covered; i < upTo; i++) history.foldPlain(folded, log[i]!)
  if (folded.length === 0) return Option.none()
  if (latest === undefined) return Option.some({ upTo, history: folded })
  const previous = log[latest] as typeof SessionCompacted.Type
  return Option.some({ upTo, history: [history.summaryMessage(previous.seq, previous.data.summary), ...folded] })
}

// -------------------------------------------------------------------------------------------------
// The summarizer request

/**
 * The instruction after the history a summarizer sees: a `{kind:"system"}` user message with a
 * deterministic id.
 *
 * @internal
 */
export const promptMessage = (upTo: number, prompt: string): UserMessage =>
  deepFreeze({
    id: `compaction-prompt:${upTo}` as MessageId,
    role: "user" as const,
    content: [{ type: "text" as const, text: prompt }],
    source: { kind: "system" as const }
  })

/**
 * The summarizer's request: the agent's route (its system prompt too: the summary is the agent's
 * own notes), its tools (providers refuse a history with tool calls and no tool definitions; the
 * prompt asks for none), and the plan's history followed by the prompt.
 *
 * @internal
 */
export const summarizerRequest = (input: {
  readonly sessionId: SessionId
  readonly route: Tool.Route
  readonly tools: ReadonlyArray<ToolSchema>
  readonly plan: Plan
  readonly prompt: string
}): ModelRequest => ({
  sessionId: input.sessionId,
  provider: input.route.provider,
  model: input.route.model,
  ...(input.route.maxTokens !== undefined ? { maxTokens: input.route.maxTokens } : {}),
  ...(input.route.system !== undefined ? { system: input.route.system } : {}),
  messages: [...input.plan.history, promptMessage(input.plan.upTo, input.prompt)],
  tools: input.tools
})

/** What a summarizer stream delivered. */
interface Reply {
  readonly text: string
  readonly usage: Usage | undefined
}

const collect = (reply: Reply, chunk: ModelChunk): Reply => {
  switch (chunk._tag) {
    case "TextDelta":
      return { text: reply.text + chunk.text, usage: reply.usage }
    case "Finish":
      return { text: reply.text, usage: modelOutput.normalizeUsage(chunk.usage) }
    default:
      // reasoning is not the summary; a tool call is ignored (the prompt asks for none)
      return reply
  }
}

/** One summarizer attempt: its text, trimmed, or `EMPTY_SUMMARY` when there is none. */
const attemptSummary = (model: Model["Type"], request: ModelRequest) =>
  Effect.flatMap(
    Stream.runFold(model.stream(request), { text: "", usage: undefined } as Reply, collect),
    (reply) => {
      const summary = reply.text.trim()
      return summary === ""
        ? Effect.fail(new ModelError({ code: "EMPTY_SUMMARY", reason: "the summarizer answered without text" }))
        : Effect.succeed({ summary, usage: reply.usage ?? {} })
    }
  )

/**
 * The summarizer call, retried as the loop retries its requests (MOD-04: retryable codes on the
 * backoff Schedule, at most `maxRetries` times); each retry is logged (nothing of it is live).
 *
 * @internal
 */
export const summarize = (
  model: Model["Type"],
  request: ModelRequest,
  maxRetries: number
): Effect.Effect<{ readonly summary: string; readonly usage: Usage }, ModelError> =>
  modelRetry.retrying(() => attemptSummary(model, request), {
    policy: { maxRetries },
    onRetry: ({ attempt, delay, error }) =>
      Effect.logWarning(
        `compaction: the summarizer request failed (${error.code}); retry ${attempt} in ${Duration.format(delay)}`
      )
  })

// -------------------------------------------------------------------------------------------------
// Running a compaction

/**
 * What running a compaction needs: where the event goes (`append`: the driver's write at a step
 * boundary, the session's core append between turns) and how it is announced.
 *
 * @internal
 */
export interface Runner<E> {
  readonly id: SessionId
  readonly model: Model["Type"]
  readonly options: AgentOptions
  readonly append: (event: CoreEventInput) => Effect.Effect<SessionEvent, E>
  readonly emit: (event: AgentEvent) => Effect.Effect<void>
}

/**
 * Asks the model for the summary (interruptible: a cancel stops it and nothing is written), then
 * appends the one `session/compacted` event and publishes `Compacted` with its seq (EVS-02).
 *
 * @internal
 */
export const run = <E>(
  runner: Runner<E>,
  plan: Plan,
  request: ModelRequest,
  where?: { readonly turn: number; readonly step: number } | undefined
): Effect.Effect<Compaction.Compacted, ModelError | E> =>
  Effect.flatMap(
    Effect.interruptible(summarize(runner.model, request, runner.options.maxRequestRetries ?? 3)),
    ({ summary, usage }) =>
      Effect.uninterruptible(Effect.flatMap(
        runner.append({ type: "session/compacted", data: { upTo: plan.upTo, summary, usage } }),
        (event) => {
          const compacted: Compaction.Compacted = { seq: event.seq, upTo: plan.upTo, summary, usage }
          return Effect.as(runner.emit(AgentEvent.Compacted({ agent: runner.id, ...compacted, ...where })), compacted)
        }
      ))
  )

/**
 * What the driver's hook passes at a step boundary: the step's resolved route and tools.
 *
 * @internal
 */
export interface StepBoundary<E> extends Runner<E> {
  readonly session: Session
  readonly route: Tool.Route
  readonly tools: ReadonlyArray<ToolSchema>
  readonly turn: number
  readonly step: number
}

const isModelError = (error: unknown): error is ModelError => error instanceof ModelError

/**
 * CMP-01 inside a turn, at the step boundary after the step's input entered and before its request:
 * when `contextWindow` is set and the estimated prompt exceeds the threshold, compact the closed
 * turns before the last `keepLastTurns`. A failed summarizer request follows `onFailure`:
 * `"continue"` logs a warning and the request goes out uncompacted, `"fail"` fails with the
 * `ModelError` (the turn ends `error`). A failed append fails with the append's error (the driver
 * breaks the agent, SES-02b).
 *
 * @internal
 */
export const atStepBoundary = <E>(step: StepBoundary<E>): Effect.Effect<void, E | ModelError> =>
  Effect.suspend(() => {
    const window = step.options.contextWindow
    if (window === undefined) return Effect.void
    const policy = resolvePolicy(step.options.compaction)
    const log = core(step.session).log()
    return Effect.flatMap(step.session.messages, (messages): Effect.Effect<void, E | ModelError> => {
      const estimate = estimatePrompt({ log, messages, system: step.route.system, tools: step.tools })
      if (!exceedsThreshold(estimate.tokens, window, policy.threshold)) return Effect.void
      const annotations = {
        agent: step.id,
        turn: step.turn,
        step: step.step,
        estimate: estimate.tokens,
        source: estimate.source
      }
      const plan = planCompaction(log, policy.keepLastTurns)
      if (Option.isNone(plan)) {
        return Effect.annotateLogs(
          Effect.logDebug("compaction: the prompt exceeds the threshold but no closed turn is left to compact"),
          annotations
        )
      }
      const request = summarizerRequest({
        sessionId: step.id,
        route: step.route,
        tools: step.tools,
        plan: plan.value,
        prompt: policy.prompt
      })
      return run(step, plan.value, request, { turn: step.turn, step: step.step }).pipe(
        Effect.asVoid,
        Effect.catchIf(
          (error): error is ModelError => isModelError(error) && policy.onFailure === "continue",
          (error) =>
            Effect.logWarning(
              `compaction: the summarizer request failed (${error.message}); the request goes out uncompacted`
            )
        ),
        Effect.annotateLogs(annotations)
      )
    })
  })

/**
 * What `agent.compact` needs from its agent.
 *
 * @internal
 */
export interface AgentDeps {
  readonly id: SessionId
  readonly session: Session
  readonly model: Model["Type"]
  readonly options: AgentOptions
  /** The route of the last `request/config` of a resumed log (the driver's, RES-07/08). */
  readonly storedRoute: Partial<Tool.Route>
  readonly tools: Effect.Effect<ReadonlyArray<Tool.Any>>
  readonly toSchema: (tool: Tool.Any) => ToolSchema
  readonly emit: (event: AgentEvent) => Effect.Effect<void>
}

/** The route a request would take now, before its `request` hooks: the options', else the stored one (RES-07/08). */
const currentRoute = (options: AgentOptions, stored: Partial<Tool.Route>): Tool.Route | undefined => {
  const provider = options.provider ?? stored.provider
  const model = options.model ?? stored.model
  if (provider === undefined || model === undefined) return undefined
  const maxTokens = options.maxTokens ?? stored.maxTokens
  const system = options.system ?? stored.system
  return {
    provider,
    model,
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    ...(system !== undefined ? { system } : {})
  }
}

/**
 * The maintenance task of `agent.compact` (the agent is idle, no turn is open): the same compaction
 * on the route (before `request` hooks, which belong to a step) and tools a request would use now.
 *
 * @internal
 */
export const betweenTurns = (
  deps: AgentDeps,
  override: Compaction.CompactOptions
): Effect.Effect<Option.Option<Compaction.Compacted>, ModelError | SessionError.SessionAppendError> =>
  Effect.suspend(() => {
    const policy = resolvePolicy(deps.options.compaction, override)
    const sessionCore = core(deps.session)
    const log = sessionCore.log()
    const plan = planCompaction(log, policy.keepLastTurns)
    if (Option.isNone(plan)) return Effect.succeed(Option.none())
    const route = currentRoute(deps.options, deps.storedRoute)
    if (route === undefined) {
      return Effect.fail(
        new ModelError({
          code: "NO_ROUTE",
          reason: "no provider/model to summarise with: set them in the agent options"
        })
      )
    }
    return Effect.flatMap(deps.tools, (tools) => {
      const schemas = tools.map(deps.toSchema)
      const request = summarizerRequest({
        sessionId: deps.id,
        route,
        tools: schemas,
        plan: plan.value,
        prompt: policy.prompt
      })
      const runner: Runner<SessionError.SessionAppendError> = {
        id: deps.id,
        model: deps.model,
        options: deps.options,
        append: (event) => Effect.map(sessionCore.appendCore([event]), (events) => events[0]),
        emit: deps.emit
      }
      return Effect.map(run(runner, plan.value, request), Option.some)
    })
  })

/**
 * `agent.compact` (CMP-01): the options checked first (`InvalidAgentOptions`, nothing claimed), then
 * the compaction as a maintenance task (AGT-03: `AgentBusy` unless idle, `AgentCanceled` on cancel).
 *
 * @internal
 */
export const compactAgent = (
  runMaintenance: <A, E>(
    task: Effect.Effect<A, E>
  ) => Effect.Effect<
    A,
    E | AgentError.AgentBusy | AgentError.AgentCanceled | AgentError.AgentInactive | AgentError.AgentBroken
  >,
  deps: AgentDeps,
  options: Compaction.CompactOptions | undefined
) => {
  const decoded: Either.Either<Compaction.CompactOptions, AgentError.InvalidAgentOptions> =
    decodeCompactOptions(options)
  return decoded._tag === "Left" ? Effect.fail(decoded.left) : runMaintenance(betweenTurns(deps, decoded.right))
}
