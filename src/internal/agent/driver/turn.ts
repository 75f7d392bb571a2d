/**
 * One turn (SPEC §8, TURN): steps until its end reason is known — each step's input through the
 * `preStep` hooks and claimed from the inbox (INB-06, DLV-09), the request config written when it
 * changes, the model's reply logged, its tool calls run — then the closers and `turn/end` in one
 * batch (CAN-05), whatever ended it. A failed durable write breaks the agent instead (SES-02b).
 *
 * @internal
 */
import type { Tracer } from "effect"
import { Array as Arr, Cause, Effect, Exit, Option } from "effect"
import * as AgentError from "../../../AgentError.js"
import { AgentEvent } from "../../../AgentEvent.js"
import type { AssistantMessage, MessageId, UserMessage } from "../../../Message.js"
import type { OutputFormat } from "../../../ModelSettings.js"
import type { ModelRequest, ToolSchema } from "../../../Model.js"
import type { CancelCause, CoreEventInput, TurnEndReason } from "../../../SessionEvent.js"
import type * as Tool from "../../../Tool.js"
import * as compaction from "../compaction.js"
import * as run from "../run.js"
import * as observability from "../../observability.js"
import * as approvals from "./approvals.js"
import { closers, streamedContent, suspendedClosers } from "./closers.js"
import { assistantMessage, closerMirrors } from "./liveEvents.js"
import { callModel, resolveRoute } from "./model.js"
import type { DriverState } from "./state.js"
import { markBroken } from "./state.js"
import * as questions from "./questions.js"
import { runTools } from "./tools.js"
import * as turnOptions from "./turnOptions.js"
import type { PendingCall } from "./turnContext.js"
import { asWriteFailure, isUndecided, LogWriteFailed, TurnContext, write } from "./turnContext.js"

type NonEmpty = Arr.NonEmptyReadonlyArray<CoreEventInput>

/** HIL-04: the agent is disposed while its step waits for a person. */
const isDisposedWhileWaiting = (ctx: TurnContext, cause: Option.Option<CancelCause>): boolean =>
  Option.isSome(cause) && cause.value.kind === "disposed" && ctx.openStep !== undefined && isStepSuspended(ctx)

/** What a finished turn tells its drain. @internal */
export interface TurnOutcome {
  readonly reason: TurnEndReason | undefined
  /** A normal end after at least one step: pending follow-ups start the next turn (TURN-07, DLV-09). */
  readonly continues: boolean
  /** HIL-04: the turn did not end: its open step waits for a person (its context, to go on with). */
  readonly suspended?: TurnContext | undefined
}

/** HIL-04: what a turn body returns when its step waits for a person (no end reason: the turn stays open). */
const SUSPENDED = "suspended" as const

/** A reply of the model as the turn logs it (calls and finish normalized, DUR-02). */
type Reply = Effect.Effect.Success<ReturnType<typeof callModel>>

const completed: TurnEndReason = { kind: "completed" }

/** RES-07/08: no provider or model in the options nor in the log. */
const noRoute: TurnEndReason = {
  kind: "error",
  error: { message: "no provider/model: set them in the agent options", code: "NO_ROUTE" }
}

/**
 * The `request/config` of a step: its route and the tools offered (RES-07/08), its settings
 * (APP-04) and output (OUT-01), marked `turnOnly` when the turn has its own (restored after it).
 */
const configOf = (
  route: Tool.Route,
  schemas: ReadonlyArray<ToolSchema>,
  output: OutputFormat | undefined,
  turnOnly: boolean
) => ({
  provider: route.provider,
  model: route.model,
  ...(route.maxTokens !== undefined ? { maxTokens: route.maxTokens } : {}),
  ...(route.system !== undefined ? { system: route.system } : {}),
  tools: schemas.map((s) => ({ name: s.name, description: s.description, parameters: s.jsonSchema })),
  ...(route.settings !== undefined ? { settings: route.settings } : {}),
  ...(output !== undefined ? { output } : {}),
  ...(turnOnly ? { turnOnly: true as const } : {})
})
type RequestConfig = ReturnType<typeof configOf>

const requestOf = (
  state: DriverState,
  config: RequestConfig,
  messages: ModelRequest["messages"],
  schemas: ReadonlyArray<ToolSchema>
): ModelRequest => ({
  sessionId: state.deps.id,
  provider: config.provider,
  model: config.model,
  ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}),
  ...(config.system !== undefined ? { system: config.system } : {}),
  messages,
  tools: schemas,
  ...(config.settings !== undefined ? { settings: config.settings } : {}),
  ...(config.output !== undefined ? { output: config.output } : {})
})

/** The step's `assistant/message`: streamed content, then the calls (none at `max-tokens`). */
const assistantEventOf = (
  ctx: TurnContext,
  step: number,
  config: RequestConfig,
  reply: Reply,
  calls: ReadonlyArray<PendingCall>
): CoreEventInput => {
  const content = streamedContent(ctx)
  for (const call of calls) {
    content.push({
      type: "tool-call",
      callId: call.callId,
      name: call.name,
      arguments: call.arguments,
      ...(call.providerCallId !== undefined ? { providerCallId: call.providerCallId } : {})
    })
  }
  const message: AssistantMessage = {
    id: `assistant:${ctx.turn}:${step}` as MessageId,
    role: "assistant",
    content,
    source: { kind: "model", provider: config.provider, model: config.model }
  }
  const event: CoreEventInput = {
    type: "assistant/message",
    data: {
      turn: ctx.turn,
      step,
      message,
      finish: reply.finish.reason === "tool-calls" && calls.length === 0 ? "stop" : reply.finish.reason,
      ...(reply.finish.usage !== undefined ? { usage: reply.finish.usage } : {})
    }
  }
  return event
}

/** Opens a step: `step/start` (alone, when nothing enters it). */
const openStep = (state: DriverState, ctx: TurnContext, step: number) =>
  Effect.map(write(state, [{ type: "step/start", data: { turn: ctx.turn, step } }]), () => {
    ctx.openStep = step
    ctx.steps++
  })

/**
 * The step's input (TURN-04/05, DLV-09): every proposal goes through the `preStep` hooks, which may
 * add to an empty batch or reject it; what enters is claimed with the step's opening (INB-06) unless
 * a cancel landed first. `undefined` when the step is open, else the turn's end reason. A plain
 * generator that `turnBody` delegates to (`yield*`): a function call, no Effect of its own (B5).
 */
function* enterStep(state: DriverState, ctx: TurnContext, step: number, extra: ReadonlyArray<UserMessage>) {
  const deps = state.deps
  const isCanceled = () => Option.isSome(state.cancelCell)
  // a cancel was called (its interruption may still be on its way, SEC-11): no further step opens
  if (isCanceled()) return yield* Effect.interrupt
  const peeked = yield* deps.inbox.peek(step === 1 ? "turn" : "step")
  // OUT-02: a correction message is proposed with the inbox's batch (it is no inbox message)
  const proposed = extra.length === 0 ? peeked : [...peeked, ...extra]
  // the hooks run interruptible (their runner makes them so)
  const decision = yield* deps.hooks.runPreStep({ agent: deps.agent(), turn: ctx.turn, step }, proposed)
  if (decision.kind === "reject") {
    if (peeked.length > 0) {
      yield* asWriteFailure(deps.inbox.reject(peeked.map((m) => m.id), { guard: () => !isCanceled() }))
    }
    // a cancel that landed first wins: with keepInbox the batch stays pending
    if (isCanceled()) return yield* Effect.interrupt
    return { kind: "blocked", reason: decision.reason } as TurnEndReason
  }
  const entering = decision.messages
  // nothing to enter the first step: the turn ends without one (DLV-09)
  if (step === 1 && peeked.length === 0 && entering.length === 0) return completed
  if (peeked.length === 0 && entering.length === 0) {
    yield* openStep(state, ctx, step)
    return undefined
  }
  const claimed = yield* asWriteFailure(deps.inbox.claim({
    turn: ctx.turn,
    step,
    peeked: peeked.map((m) => m.id),
    entering,
    guard: () => !isCanceled()
  }))
  if (Option.isNone(claimed)) return yield* Effect.interrupt
  if (claimed.value.entered.length > 0) {
    // APP-04, OUT-01: a message's own settings and output apply from here to the turn's end
    turnOptions.enterMessages(state, ctx.ask, claimed.value.entered)
    ctx.openStep = step
    ctx.steps++
    return undefined
  }
  // nothing entered the first step: the turn ends without one (DLV-09)
  if (step === 1) return completed
  yield* openStep(state, ctx, step)
  return undefined
}

/** How an opened step ended: its reply asked for tools (and whether a result concludes the turn), or hit max-tokens. */
interface StepOutcome {
  readonly hadCalls: boolean
  readonly concludes: boolean
  readonly maxTokens: boolean
  /** The text of the step's reply (OUT-01 checks the last one). */
  readonly text: string
  /** HIL-01: a call of the step waits for a decision: the step stays open. */
  readonly suspended: boolean
}

/** HIL-01: the step waits for a person: some call has no decision, and no rejection ended the turn. */
const isStepSuspended = (ctx: TurnContext): boolean => ctx.hasApprovals && !ctx.endTurn && ctx.calls.some(isUndecided)

/**
 * One opened step: the request config when it changed, the model's reply logged (and announced,
 * EVS-02), its tool calls run; the step is closed when it returns. The turn's end reason instead
 * when there is no route. A plain generator that `turnBody` delegates to (B5).
 */
function* runStep(state: DriverState, ctx: TurnContext, step: number) {
  const deps = state.deps
  observability.countStep()
  ctx.calls = []
  ctx.logged = 0
  const route = yield* resolveRoute(state, ctx, step)
  if (Option.isNone(route)) return noRoute
  ctx.route = route.value
  const tools = yield* deps.tools
  const schemas = tools.map(deps.toSchema)
  const config = configOf(route.value, schemas, outputOf(state, ctx).output, ctx.ask.turnOnly)
  const configKey = JSON.stringify(config)
  if (configKey !== state.lastConfig) {
    yield* write(state, [{ type: "request/config", data: config }])
    state.lastConfig = configKey
  }
  // CMP-01: compaction at this step boundary when the prompt outgrows the window (agent/compaction.ts)
  if (deps.options.contextWindow !== undefined) {
    yield* compaction.atStepBoundary({
      ...deps,
      route: route.value,
      tools: schemas,
      turn: ctx.turn,
      step,
      append: (event) => Effect.map(write(state, [event]), (events) => events[0])
    })
  }
  const request = requestOf(state, config, yield* deps.session.messages, schemas)
  const reply = yield* callModel(state, ctx, step, request)
  const maxTokens = reply.finish.reason === "max-tokens"
  const calls: Array<PendingCall> = maxTokens
    ? []
    : reply.calls.map((call) => ({ ...call, state: "waiting" as const, result: undefined }))
  const hadCalls = calls.length > 0
  const assistantEvent = assistantEventOf(ctx, step, config, reply, calls)
  const text = ctx.streamedText
  if (ctx.stepSpan !== undefined) stepAttributes(ctx, ctx.stepSpan, reply)
  // HIL-01: a plain check when no tool asks for approval (PERF: a plain turn pays nothing more)
  const requests = hadCalls && approvals.anyApproval(tools)
    ? yield* approvals.requestsOf(state, ctx, step, tools, calls)
    : []
  if (hadCalls) {
    // HIL-02: with approval requests, the calls are in the context before the requests are durable:
    // a decision made as soon as the writer published a request must find its call
    const batch: NonEmpty = [assistantEvent, ...requests]
    if (requests.length > 0) ctx.calls = calls
    const [logged, ...requested] = yield* (requests.length > 0
      ? Effect.onError(write(state, batch), () => Effect.sync(() => void (ctx.calls = [])))
      : write(state, batch))
    ctx.calls = calls
    yield* deps.emit(assistantMessage(state, logged))
    if (requested.length > 0) yield* approvals.announceRequests(state, requested)
  } else {
    // no calls: nothing waits between the message and `step/end`, so they are one batch
    const [logged] = yield* write(state, [assistantEvent, { type: "step/end", data: { turn: ctx.turn, step } }])
    ctx.openStep = undefined
    ctx.calls = []
    yield* deps.emit(assistantMessage(state, logged))
  }
  ctx.streamedText = ""
  ctx.streamedReasoning = ""
  const concludes = hadCalls ? yield* runTools(state, ctx, step) : false
  if (isStepSuspended(ctx)) return { hadCalls, concludes, maxTokens, text, suspended: true } as StepOutcome
  yield* closeStepIfOpen(state, ctx, step)
  const outcome: StepOutcome = { hadCalls, concludes, maxTokens, text, suspended: false }
  return outcome
}

/** Defensive: `runTools` closes the step with its last results (with approvals, a resumed step may need it). */
const closeStepIfOpen = (state: DriverState, ctx: TurnContext, step: number) =>
  ctx.openStep === undefined ? Effect.void : Effect.map(
    write(state, [{ type: "step/end", data: { turn: ctx.turn, step } }]),
    () => {
      ctx.openStep = undefined
      ctx.calls = []
    }
  )

/**
 * HIL-02/04: the open step of a suspended turn goes on: a cancel called meanwhile ends the turn
 * (its closers settle what waits); the decided calls run; the step closes once nothing waits.
 */
function* continueStep(state: DriverState, ctx: TurnContext, step: number) {
  if (Option.isSome(state.cancelCell)) return yield* Effect.interrupt
  const concludes = yield* runTools(state, ctx, step)
  if (isStepSuspended(ctx)) return { hadCalls: true, concludes, maxTokens: false, text: "", suspended: true } as StepOutcome
  yield* closeStepIfOpen(state, ctx, step)
  return { hadCalls: true, concludes, maxTokens: false, text: "", suspended: false } as StepOutcome
}

/** OBS-01: the step's finish reason and usage on its span, summed into the turn's. */
const stepAttributes = (ctx: TurnContext, span: Tracer.Span, reply: Reply): void => {
  span.attribute(observability.attr.finish, reply.finish.reason)
  const usage = reply.finish.usage
  observability.usageAttributes(span, usage)
  ctx.inputTokens += usage?.inputTokens ?? 0
  ctx.outputTokens += usage?.outputTokens ?? 0
}

/** OBS-01: `runStep` in its `effect-agent.step` span (a child of the turn's, the parent of its requests and calls). */
const tracedStep = (state: DriverState, ctx: TurnContext, step: number) =>
  observability.spanned(state.deps.telemetry, "effect-agent.step", () => ({
    [observability.attr.agentId]: state.deps.id,
    [observability.attr.turn]: ctx.turn,
    [observability.attr.step]: step
  }), (span) =>
    Effect.gen(function*() {
      ctx.stepSpan = span
      return yield* runStep(state, ctx, step)
    }).pipe(Effect.ensuring(Effect.sync(() => {
      ctx.stepSpan = undefined
    }))))

/**
 * Runs steps until the turn's end reason is known (or its step waits for a person, HIL-04: then
 * `SUSPENDED`). Writes everything but the closers and `turn/end`. `resumed`: the turn goes on from
 * its open step (a decision, or a cancel, came for it).
 */
const turnBody = (state: DriverState, ctx: TurnContext, resumed: boolean) =>
  Effect.gen(function*() {
    const deps = state.deps
    const agent = deps.agent()
    const maxSteps = deps.options.maxStepsPerTurn ?? 100
    const hasNextStep = () => deps.inbox.sizes().nextStep > 0
    let step = resumed ? (ctx.openStep ?? 1) - 1 : 0
    let goOn = resumed
    let correction: ReadonlyArray<UserMessage> = []
    while (true) {
      if (!goOn && step >= maxSteps) return { kind: "max-steps" } as TurnEndReason
      step++
      let stepped: StepOutcome | TurnEndReason
      if (goOn) {
        goOn = false
        stepped = yield* continueStep(state, ctx, step)
      } else {
        const ended = yield* enterStep(state, ctx, step, correction)
        correction = []
        if (ended !== undefined) return ended
        // OBS-01: a span per step only when a tracer is installed (no operation added otherwise, B5)
        stepped = ctx.span === undefined ? yield* runStep(state, ctx, step) : yield* tracedStep(state, ctx, step)
      }
      if (!("hadCalls" in stepped)) return stepped
      if (stepped.suspended) return SUSPENDED
      // HIL-02: `reject(…, {endTurn: true})`: the turn ends once the result is written
      if (ctx.endTurn) return completed
      const { concludes, hadCalls, maxTokens } = stepped
      // fresh next-step input always gets another step (TURN-04/05)
      if (hasNextStep()) continue
      if (hadCalls && !concludes) continue
      // the turn is about to stop: turnStopping hooks may steer it on
      yield* deps.hooks.runTurnStopping({ agent, turn: ctx.turn })
      if (hasNextStep()) continue
      if (maxTokens) return { kind: "max-tokens" } as TurnEndReason
      // OUT-01/02: a typed turn completes with an answer that decodes, else corrects or fails (a
      // tool that concluded the turn gave its answer)
      const checked = hadCalls ? undefined : checkAnswer(state, ctx, step, stepped.text)
      if (checked === undefined) return completed
      if ("kind" in checked) return checked
      correction = [checked]
    }
  })

/** OUT-01: the turn's output format (its own, else the agent's) and the Schema that decodes it. */
const outputOf = (state: DriverState, ctx: TurnContext) =>
  ctx.ask.output !== undefined ? { output: ctx.ask.output, schema: ctx.ask.schema } : turnOptions.agentOutput(state)

/**
 * OUT-01/02: nothing when the turn has no output format or its last answer decodes; else the
 * correction message of the next step while `outputRetries` allows one, then the `OUTPUT_INVALID`
 * end reason.
 */
const checkAnswer = (
  state: DriverState,
  ctx: TurnContext,
  step: number,
  text: string
): UserMessage | TurnEndReason | undefined => {
  const { output, schema } = outputOf(state, ctx)
  if (output === undefined) return undefined
  const decoded = turnOptions.decodeOutput(text, schema)
  if (decoded._tag === "Right") return undefined
  const retries = state.deps.options.outputRetries ?? turnOptions.defaultOutputRetries
  if (ctx.ask.corrections < retries) {
    ctx.ask.corrections++
    return turnOptions.correctionMessage(ctx.turn, step, output, decoded.left)
  }
  return {
    kind: "error",
    error: {
      code: "OUTPUT_INVALID",
      message: `the answer is not valid ${output.name} output after ${retries} correction(s): ${decoded.left}`
    }
  }
}

/** SPEC §9: the `error` end reason of a turn that failed (a model error, a hook's failure, a defect). */
const errorReason = (cause: Cause.Cause<unknown>): TurnEndReason => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    if (error instanceof AgentError.ModelError) {
      return { kind: "error", error: { message: error.message, code: error.code } }
    }
    const tag = typeof error === "object" && error !== null && "_tag" in error
      ? String((error as { readonly _tag: unknown })._tag)
      : "HOOK_FAILED"
    const message = error instanceof Error ? error.message : String(error)
    return { kind: "error", error: { message, code: tag } }
  }
  // SEC-03: what the log, the event stream and the inspector keep of a defect is a short message,
  // never its stack or the paths in it; `turnRun` logs the whole cause at Error for the operator
  const defect = Cause.squash(cause)
  const name = defect instanceof Error && /^[A-Za-z0-9_$]{1,40}$/.test(defect.name) ? defect.name : "Error"
  return {
    kind: "error",
    error: { message: `the turn failed unexpectedly (a defect, ${name}); the process's log has the details`, code: "DEFECT" }
  }
}

/** OBS-01: the turn's attributes once it ended (its end reason, steps, usage, error). */
const turnEndAttributes = (ctx: TurnContext, span: Tracer.Span, reason: TurnEndReason): void => {
  span.attribute(observability.attr.endReason, reason.kind)
  span.attribute(observability.attr.steps, ctx.steps)
  span.attribute(observability.attr.inputTokens, ctx.inputTokens)
  span.attribute(observability.attr.outputTokens, ctx.outputTokens)
  if (reason.kind === "error") span.attribute(observability.attr.errorType, reason.error.code)
  if (reason.kind === "aborted") span.attribute(observability.attr.errorType, `aborted:${reason.cause.kind}`)
}

/** APP-03: a turn error nobody receives is one Warning line, so a failing app does not fail silently. */
const logTurnError = (id: string, turn: number, error: { readonly message: string; readonly code: string }) =>
  Effect.logWarning(
    `effect-agent: turn ${turn} of agent ${JSON.stringify(id)} ended with an error (${error.code}): ${error.message}`
  ).pipe(Effect.annotateLogs({ sessionId: id, turn, code: error.code }))

/** The turn, from its `TurnStarted` to its `TurnEnded` (see `runTurn`). */
const turnRun = (state: DriverState, turn: number, span: Tracer.Span | undefined, resumed: TurnContext | undefined) =>
  Effect.gen(function*() {
    const deps = state.deps
    const ctx = resumed ?? new TurnContext(turn)
    ctx.span = span
    // EVS-02: the turn's `turn/start` is durable (written when the drain opened the turn)
    if (resumed === undefined) {
      yield* deps.emit(AgentEvent.TurnStarted({ agent: deps.id, turn, seq: state.sessionCore.openTurnSeq() }))
    }
    state.turnCtx = ctx
    const exit = yield* Effect.exit(turnBody(state, ctx, resumed !== undefined))
    state.turnCtx = undefined
    if (Exit.isSuccess(exit) && exit.value === SUSPENDED) {
      return Option.some<TurnOutcome>({ reason: undefined, continues: false, suspended: ctx })
    }
    if (Exit.isFailure(exit)) {
      const failure = Cause.failureOption(exit.cause)
      if (Option.isSome(failure) && failure.value instanceof LogWriteFailed) {
        yield* markBroken(state, failure.value.cause, turn)
        return Option.none<TurnOutcome>()
      }
    }
    // the activity's own cause (set before anything else by `cancel`, CAN-04)
    const cause = state.cancelCell
    // HIL-04: disposal of a turn whose step waits for a person writes nothing of the turn's end: the
    // calls that ran get their results, and the step waits on
    if (Exit.isFailure(exit) && isDisposedWhileWaiting(ctx, cause)) {
      const results = suspendedClosers(ctx)
      if (results.length > 0) {
        const written = yield* Effect.exit(state.sessionCore.appendCore(results as unknown as NonEmpty))
        if (Exit.isFailure(written)) {
          yield* markBroken(state, Cause.squash(written.cause), turn)
          return Option.none<TurnOutcome>()
        }
      }
      return Option.some<TurnOutcome>({ reason: undefined, continues: false, suspended: ctx })
    }
    const reason: TurnEndReason = Exit.isSuccess(exit)
      ? exit.value as TurnEndReason
      : Option.isSome(cause)
      ? { kind: "aborted", cause: cause.value }
      : errorReason(exit.cause)
    if (Exit.isFailure(exit) && reason.kind === "error" && reason.error.code === "DEFECT") {
      yield* Effect.logError(`effect-agent: a defect ended turn ${turn} of agent ${deps.id}`, exit.cause)
    }
    // HIL-03: questions still unsettled are settled `canceled` in the same batch
    const unsettled = questions.takeUnsettled(state, turn)
    const closing = closers(ctx, reason)
    const written = yield* Effect.exit(state.sessionCore.appendCore(
      unsettled.length === 0 ? closing : Arr.appendAll(questions.canceledEvents(unsettled), closing)
    ))
    if (Exit.isFailure(written)) {
      yield* markBroken(state, Cause.squash(written.cause), turn)
      return Option.none<TurnOutcome>()
    }
    observability.countTurn(reason.kind)
    if (span !== undefined) turnEndAttributes(ctx, span, reason)
    // EVS-02: what the closers made durable that was not announced yet, then the turn's end
    yield* questions.afterCanceled(state, unsettled, written.value)
    const mirrors = closerMirrors(state, ctx, written.value.slice(unsettled.length))
    if (mirrors.length > 0) yield* Effect.forEach(mirrors, deps.emit, { discard: true })
    if (reason.kind === "error") {
      yield* deps.emit(AgentEvent.AgentError({ agent: deps.id, turn, error: reason.error }))
      if (deps.options.logTurnErrors !== false && !run.isReceived(state.sessionCore, turn)) {
        yield* logTurnError(deps.id, turn, reason.error)
      }
    }
    const turnEnd = written.value[written.value.length - 1]!
    yield* deps.emit(AgentEvent.TurnEnded({ agent: deps.id, turn, reason, seq: turnEnd.seq }))
    const continues = ctx.steps > 0 &&
      (reason.kind === "completed" || reason.kind === "max-tokens" || reason.kind === "max-steps")
    return Option.some<TurnOutcome>({ reason, continues })
  })

/**
 * Runs one opened turn to its end; returns its outcome, or None when the log could not be written
 * (the agent is broken then, and the open turn is left for repair, SES-02b). With a tracer
 * installed, in an `effect-agent.turn` span (OBS-01): the root of the turn's tree (the drain
 * carries no caller's span, §6.3).
 *
 * @internal
 */
export const runTurn = (state: DriverState, turn: number, resumed?: TurnContext | undefined) =>
  Effect.uninterruptible(
    observability.spanned(state.deps.telemetry, "effect-agent.turn", () => ({
      [observability.attr.agentId]: state.deps.id,
      ...(state.deps.parentId !== undefined ? { [observability.attr.parentId]: state.deps.parentId } : {}),
      [observability.attr.turn]: turn
    }), (span) => turnRun(state, turn, span, resumed))
  )
