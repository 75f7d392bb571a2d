/**
 * A step's tool calls (SPEC §8, TOOL): grouped (consecutive parallel calls run together up to
 * `maxParallelToolCalls`; an exclusive call is a barrier of its own), each run with its `tool/call`
 * written first and only its body interruptible (CAN-05), under its `timeout` (PKG-03); the results
 * logged in model order, each as soon as every call before it is done (EVS-02 announces each after
 * it is durable), the last one with `step/end`. What a tool returns is checked before it
 * is logged (DUR-02): the model sees a tool's mistake, the agent is never broken by it.
 *
 * @internal
 */
import type { Tracer } from "effect"
import { Cause, Clock, Deferred, Duration, Effect, Either, Exit, FiberId, Option } from "effect"
import { MaxAgentDepthExceeded, SubAgentFailed, ToolUnavailable } from "../../../AgentError.js"
import { AgentEvent } from "../../../AgentEvent.js"
import type { ContentPart, MessageId } from "../../../Message.js"
import type { CoreEventInput } from "../../../SessionEvent.js"
import type * as Tool from "../../../Tool.js"
import { make as makeLock } from "../../lock.js"
import * as modelOutput from "../../model/output.js"
import * as observability from "../../observability.js"
import { CurrentCall } from "../ask.js"
import { toolCallFinished } from "./liveEvents.js"
import * as questions from "./questions.js"
import type { DriverState } from "./state.js"
import type { PendingCall, ToolOutcome, TurnContext } from "./turnContext.js"
import { isNonEmpty, isUndecided, resultEvent, textResult, write } from "./turnContext.js"

const DEFECT_TEXT = "The tool failed unexpectedly (a defect); its side effects are unknown."

/** PKG-03: what the model sees when a tool ran past its `timeout` and was interrupted. */
const timeoutText = (timeout: Duration.Duration) =>
  `The tool did not finish within its timeout of ${Duration.format(timeout)} and was interrupted. ` +
  "It may have partly run: verify its side effects before retrying it."

/**
 * PKG-03: a tool's body under its `timeout`, if it has one: `None` when the timeout interrupted it
 * (the interruption is awaited, so nothing of the call runs on after its result is logged). Time
 * spent waiting in `Tool.ask` does not count (HIL-03): the timer stops while an ask waits.
 */
const runWithTimeout = <A, E, R>(
  body: Effect.Effect<A, E, R>,
  timeout: Duration.Duration | undefined,
  channel: questions.CallChannel
): Effect.Effect<Option.Option<A>, E, R> =>
  timeout === undefined
    ? Effect.map(body, Option.some)
    : Effect.raceFirst(Effect.map(body, Option.some), Effect.as(workTimer(timeout, channel), Option.none<A>()))

/** Ends once the call has worked (not waited in an ask) for `timeout`. */
const workTimer = (timeout: Duration.Duration, channel: questions.CallChannel) =>
  Effect.gen(function*() {
    const start = yield* Clock.currentTimeMillis
    const limit = Duration.toMillis(timeout)
    while (true) {
      if (channel.waiting > 0) {
        yield* Deferred.await(channel.resumed ??= Deferred.unsafeMake<void>(FiberId.none))
        continue
      }
      const remaining = limit - ((yield* Clock.currentTimeMillis) - start - channel.waitedMillis)
      if (remaining <= 0) return
      yield* Effect.sleep(Duration.millis(remaining))
    }
  })

/**
 * DUR-02: what a tool returned, as the log can carry it: JSON content of known part shapes, or the
 * reason it is not (never throws, whatever the tool returned).
 */
const toolOutputOf = (
  value: unknown
): Either.Either<
  { readonly content: ReadonlyArray<ContentPart>; readonly isError: boolean; readonly concludesTurn: boolean },
  string
> => {
  try {
    const result = value as Tool.ToolResult
    const content = modelOutput.toolContent(result.content)
    if (Either.isLeft(content)) return Either.left(content.left)
    return Either.right({
      content: content.right,
      isError: result.isError === true,
      concludesTurn: result.concludesTurn === true
    })
  } catch (e) {
    return Either.left(`reading the result threw (${e instanceof Error ? e.message : String(e)})`)
  }
}

/** The result of a call whose body returned `value` (DUR-02), and whether it concludes the turn. */
const returnedOutcome = (call: PendingCall, value: unknown): readonly [ToolOutcome, boolean] => {
  const output = toolOutputOf(value)
  if (Either.isLeft(output)) {
    // DUR-02: the model sees the tool's mistake; the agent is never broken by it
    return [{
      message: textResult(call, `The tool returned output that cannot be logged: ${output.left}`, true),
      error: { name: "InvalidToolOutput", code: "INVALID_TOOL_OUTPUT" }
    }, false]
  }
  const message = {
    id: `tool:${call.callId}` as MessageId,
    role: "tool" as const,
    toolCallId: call.callId,
    toolName: call.name,
    content: output.right.content,
    isError: output.right.isError
  }
  return [{ message }, output.right.concludesTurn]
}

/**
 * The result of a call whose body failed with `error`: the model sees the failure (TOOL).
 * `ToolUnavailable` (an MCP server that is down, MCP-02) has its own code, and so have a sub-agent's
 * `SubAgentFailed` and `MaxAgentDepthExceeded` (SUB-01/02).
 */
const failedOutcome = (call: PendingCall, error: unknown): ToolOutcome => {
  const name = typeof error === "object" && error !== null && "_tag" in error
    ? String((error as { readonly _tag: unknown })._tag)
    : "ToolFailed"
  const text = error instanceof Error ? error.message : typeof error === "string" ? error : name
  const code = error instanceof ToolUnavailable
    ? "TOOL_UNAVAILABLE"
    : error instanceof SubAgentFailed
    ? "SUBAGENT_FAILED"
    : error instanceof MaxAgentDepthExceeded
    ? "MAX_AGENT_DEPTH"
    : "TOOL_FAILED"
  return { message: textResult(call, `The tool failed: ${text}`, true), error: { name, code } }
}

/**
 * Records on `call` what its body's exit makes of it, and returns whether it concludes the turn;
 * or the cause the call must fail with: an interruption (the call stays `started`, its closer logs
 * `ABORTED`), or a defect, which ends the turn `error` (the call still gets a result that says so).
 */
const settleRun = (
  call: PendingCall,
  tool: Tool.Any,
  exit: Exit.Exit<Option.Option<unknown>, unknown>
): boolean | Cause.Cause<unknown> => {
  if (Exit.isSuccess(exit)) {
    if (Option.isNone(exit.value)) {
      call.result = {
        message: textResult(call, timeoutText(tool.timeout ?? Duration.zero), true),
        error: { name: "ToolTimeout", code: "TOOL_TIMEOUT" }
      }
      return false
    }
    const [outcome, concludes] = returnedOutcome(call, exit.value.value)
    call.result = outcome
    return concludes
  }
  if (Cause.isInterruptedOnly(exit.cause)) return exit.cause
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) {
    call.result = { message: textResult(call, DEFECT_TEXT, true), error: { name: "ToolDefect", code: "TOOL_DEFECT" } }
    call.state = "done"
    return exit.cause
  }
  call.result = failedOutcome(call, failure.value)
  return false
}

/** HIL-03: a call its question channel ended (a replay mismatch, a question the log refused). */
const abortedRun = (call: PendingCall, abort: questions.CallAbort): boolean => {
  call.result = { message: textResult(call, abort.text, true), error: { name: abort.name, code: abort.code } }
  return false
}

/** OBS-02: a finished call's outcome tag: `ok`, `error` (its result says so), or its error's code. */
const outcomeOf = (call: PendingCall): string => {
  const result = call.result
  if (result?.error !== undefined) return result.error.code.toLowerCase()
  return result?.message.isError === true ? "error" : "ok"
}

/** OBS-01/02: what a call that ran leaves on its span and in the metrics. */
const recordCall = (
  state: DriverState,
  call: PendingCall,
  started: number,
  outcome: string,
  span: Tracer.Span | undefined
): void => {
  observability.recordToolCall(call.name, outcome, state.deps.telemetry.clock.unsafeCurrentTimeMillis() - started)
  if (span === undefined) return
  span.attribute(observability.attr.isError, call.result?.message.isError === true)
  if (call.result?.error !== undefined) span.attribute(observability.attr.errorType, call.result.error.code)
}

/**
 * Runs one call: its `tool/call` is written and the call marked started together, then only the body
 * is interruptible (CAN-05). An interrupted body leaves the call `started` (closers log `ABORTED`).
 * With a tracer, in an `effect-agent.tool.call` span (OBS-01): a child of the step's, the parent of
 * the tool's own spans.
 */
const runTool = (
  state: DriverState,
  ctx: TurnContext,
  step: number,
  call: PendingCall,
  tools: ReadonlyMap<string, Tool.Any>,
  closeStep: boolean
) =>
  observability.spanned(state.deps.telemetry, "effect-agent.tool.call", () => ({
    [observability.attr.agentId]: state.deps.id,
    [observability.attr.turn]: ctx.turn,
    [observability.attr.step]: step,
    [observability.attr.toolName]: call.name,
    [observability.attr.toolCallId]: call.callId
  }), (span) => runToolBody(state, ctx, step, call, tools, closeStep, span))

/** A call's `tool/call` made durable and announced (`ToolCallStarted`). */
const dispatch = (state: DriverState, ctx: TurnContext, step: number, call: PendingCall, args: string) =>
  Effect.flatMap(write(state, [{
    type: "tool/call",
    data: { turn: ctx.turn, step, callId: call.callId, name: call.name, arguments: args }
  }]), ([logged]) =>
    state.deps.emit(AgentEvent.ToolCallStarted({
      agent: state.deps.id,
      turn: ctx.turn,
      step,
      callId: call.callId,
      name: call.name,
      arguments: args,
      seq: logged.seq
    })))

const runToolBody = (
  state: DriverState,
  ctx: TurnContext,
  step: number,
  call: PendingCall,
  tools: ReadonlyMap<string, Tool.Any>,
  closeStep: boolean,
  span: Tracer.Span | undefined
) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const deps = state.deps
      const started = deps.telemetry.clock.unsafeCurrentTimeMillis()
      // HIL-02: an approval with edited arguments runs with those (logged in the decision)
      const args = call.approval?.arguments ?? call.arguments
      // HIL-03: a call run again after a restart was dispatched (and announced) before it
      if (call.replay === undefined) yield* dispatch(state, ctx, step, call, args)
      call.state = "started"
      const tool = tools.get(call.name)
      let concludes = false
      const refused = refusedOutcome(call)
      if (refused !== undefined) {
        // HIL-02, HIL-05: a rejected or canceled call gets its `tool/call` and its error result
        call.result = refused
      } else if (tool === undefined) {
        call.result = {
          message: textResult(call, `Unknown tool ${JSON.stringify(call.name)}.`, true),
          error: { name: "ToolNotFound", code: "TOOL_NOT_FOUND" }
        }
      } else {
        const decoded = deps.decodeArguments(tool, args)
        if (Either.isLeft(decoded)) {
          call.result = {
            message: textResult(call, decoded.left, true),
            error: { name: "InvalidToolArguments", code: "INVALID_ARGUMENTS" }
          }
        } else {
          // HIL-03: the call's question channel reaches `Tool.ask` in its body
          const channel = questions.makeChannel(state, ctx.turn, step, call.callId, call.replay ?? [])
          const exit = yield* Effect.exit(restore(runWithTimeout(
            Effect.provideService(
              tool.run(decoded.right, { agent: deps.agent(), turn: ctx.turn, step, callId: call.callId }),
              CurrentCall,
              channel
            ),
            tool.timeout,
            channel
          )))
          if (channel.failure !== undefined) return yield* Effect.fail(channel.failure)
          const settled = channel.abort !== undefined && !questions.isCancel(state, exit)
            ? abortedRun(call, channel.abort)
            : settleRun(call, tool, exit)
          if (typeof settled !== "boolean") {
            recordCall(state, call, started, Cause.isInterruptedOnly(settled) ? "aborted" : "tool_defect", span)
            return yield* Effect.failCause(settled)
          }
          concludes = settled
        }
      }
      call.state = "done"
      recordCall(state, call, started, outcomeOf(call), span)
      // TOOL-01, EVS-02: its result is logged as soon as every call before it is, by the fiber that
      // completes that prefix; one at a time, so the log keeps the model's order
      yield* (ctx.resultsLock ??= makeLock()).withLock(flushResults(state, ctx, step, closeStep))
      return concludes
    })
  )

/**
 * Logs, in model order, the results of calls that are done and come before any unfinished one, then
 * publishes their `ToolCallFinished` with each result's seq (EVS-02). With `closeStep` (the last
 * group, every call done), `step/end` goes in the same batch. Runs under the step's results lock.
 */
const flushResults = (state: DriverState, ctx: TurnContext, step: number, closeStep: boolean) =>
  Effect.suspend(() => {
    const events: Array<CoreEventInput> = []
    let logged = ctx.logged
    while (logged < ctx.calls.length) {
      const call = ctx.calls[logged]!
      if (call.resulted === true) {
        // its result is in the log already (HIL-04: a resumed step)
        logged++
        continue
      }
      if (call.state !== "done" || call.result === undefined) break
      events.push(resultEvent(ctx.turn, step, call.result))
      logged++
    }
    const closing = closeStep && logged === ctx.calls.length
    if (closing) events.push({ type: "step/end", data: { turn: ctx.turn, step } })
    if (!isNonEmpty(events)) return Effect.void
    return Effect.flatMap(write(state, events), (written) => {
      ctx.logged = logged
      if (closing) {
        ctx.openStep = undefined
        ctx.calls = []
      }
      const finished: Array<AgentEvent> = []
      for (const event of written) if (event.type === "tool/result") finished.push(toolCallFinished(state, event))
      return Effect.forEach(finished, state.deps.emit, { discard: true })
    })
  })

/** Consecutive parallel calls form a group; an exclusive call is a barrier of its own (TOOL). */
const callGroups = (
  calls: ReadonlyArray<PendingCall>,
  byName: ReadonlyMap<string, Tool.Any>
): Array<Array<PendingCall>> => {
  const groups: Array<Array<PendingCall>> = []
  for (const call of calls) {
    const tool = byName.get(call.name)
    const exclusive = tool?.mode === "exclusive"
    const last = groups[groups.length - 1]
    if (exclusive || last === undefined || (last.length > 0 && byName.get(last[0]!.name)?.mode === "exclusive")) {
      groups.push([call])
    } else {
      last.push(call)
    }
  }
  return groups
}

/** HIL-02, HIL-05: the error result of a rejected or canceled call, if it was. */
const refusedOutcome = (call: PendingCall): ToolOutcome | undefined => {
  const decision = call.approval?.decision
  if (decision === "rejected") {
    return {
      message: textResult(call, call.approval?.message ?? REJECTED_TEXT, true),
      error: { name: "ToolRejected", code: "REJECTED" }
    }
  }
  if (decision === "canceled") {
    return { message: textResult(call, CANCELED_TEXT, true), error: { name: "ToolCanceled", code: "CANCELED" } }
  }
  return undefined
}

const REJECTED_TEXT = "The user rejected this tool call; it did not run."
const CANCELED_TEXT = "The tool call was canceled before it was approved; it did not run."

/**
 * HIL-01/02: the calls of a step with approvals, in passes: each pass runs the calls that need no
 * decision or got one (grouped as usual), while undecided ones wait; a decision that comes during a
 * pass is taken by the next. Ends when no call can run: the step is then done, or suspended.
 */
const runDecidedPasses = (
  state: DriverState,
  ctx: TurnContext,
  step: number,
  byName: ReadonlyMap<string, Tool.Any>,
  maxParallel: number
) =>
  Effect.gen(function*() {
    let concludes = false
    while (true) {
      const runnable = ctx.calls.filter((call) => call.state === "waiting" && !isUndecided(call))
      if (runnable.length === 0) return concludes
      // the step closes with the last results only when nothing waits for a decision
      const closes = !ctx.calls.some(isUndecided)
      const groups = callGroups(runnable, byName)
      for (let g = 0; g < groups.length; g++) {
        const isLast = closes && g === groups.length - 1
        const results = yield* Effect.interruptible(
          Effect.forEach(groups[g]!, (call) => runTool(state, ctx, step, call, byName, isLast), {
            concurrency: maxParallel
          })
        )
        if (results.some((c) => c)) concludes = true
      }
    }
  })

/** Runs the step's calls group by group; true when a result concludes the turn. @internal */
export const runTools = (state: DriverState, ctx: TurnContext, step: number) =>
  Effect.gen(function*() {
    const available = yield* state.deps.tools
    const byName = new Map(available.map((tool) => [tool.name, tool] as const))
    const maxParallel = state.deps.options.maxParallelToolCalls ?? 10
    if (ctx.hasApprovals) return yield* runDecidedPasses(state, ctx, step, byName, maxParallel)
    let concludes = false
    const groups = callGroups(ctx.calls, byName)
    for (let g = 0; g < groups.length; g++) {
      // the last group's results close the step in the same batch
      const isLast = g === groups.length - 1
      // interruptible, so a cancel reaches the running bodies (each guards its own bookkeeping); each
      // call's fiber logs the results its completion makes loggable (`flushResults`)
      const results = yield* Effect.interruptible(
        Effect.forEach(groups[g]!, (call) => runTool(state, ctx, step, call, byName, isLast), {
          concurrency: maxParallel
        })
      )
      if (results.some((c) => c)) concludes = true
    }
    return concludes
  })
