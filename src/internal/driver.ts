/**
 * The driver: one state machine (`Idle | Maintenance | Running`) in a SynchronizedRef, its work in
 * fibers forked from a runtime captured when the agent was built, cancellation as interruption plus
 * a set-once cause, and the turn/step loop (SPEC §8).
 *
 * @internal
 */
import type { Array as Arr, Runtime } from "effect"
import {
  Cause,
  Deferred,
  Effect,
  Either,
  Exit,
  Fiber,
  FiberRef,
  Option,
  Ref,
  Runtime as RuntimeModule,
  RuntimeFlags,
  Stream,
  SynchronizedRef
} from "effect"
import type { Agent, AgentOptions } from "../Agent.js"
import * as AgentError from "../AgentError.js"
import { AgentEvent, type AgentStatus } from "../AgentEvent.js"
import type { AssistantMessage, MessageId, SessionId, ToolResultMessage, UserMessage } from "../Message.js"
import type { ModelChunk, ModelRequest, ToolSchema } from "../Model.js"
import type { Model } from "../Model.js"
import type { Session } from "../Session.js"
import type * as SessionError from "../SessionError.js"
import type { CancelCause, CoreEventInput, InboxTarget, TurnEndReason, Usage } from "../SessionEvent.js"
import type * as Tool from "../Tool.js"
import type { HookRunners } from "./hooks.js"
import type { InboxInternal } from "./inbox.js"
import { core } from "./session.js"

/** @internal */
export interface DriverDeps {
  readonly id: SessionId
  readonly session: Session
  readonly inbox: InboxInternal
  readonly options: AgentOptions
  readonly model: Model["Type"]
  readonly tools: Effect.Effect<ReadonlyArray<Tool.Any>>
  readonly toSchema: (tool: Tool.Any) => ToolSchema
  readonly decodeArguments: (tool: Tool.Any, raw: string) => Either.Either<unknown, string>
  readonly hooks: HookRunners
  readonly emit: (event: AgentEvent) => Effect.Effect<void>
  readonly withInitiator: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, unknown, R>
  readonly agent: () => Agent
  readonly runtime: Runtime.Runtime<never>
  /** The route of the last `request/config` in the log at construction. */
  readonly storedRoute: Partial<Tool.Route>
  /** A FiberRef whose value is the id of the agent whose creation hooks are running (PUB-11). */
  readonly publishing: FiberRef.FiberRef<Option.Option<SessionId>>
}

type Activity = Fiber.RuntimeFiber<unknown, unknown>

type Phase =
  | { readonly _tag: "Idle" }
  | {
    readonly _tag: "Maintenance"
    readonly fiber: Activity
    readonly cause: Option.Option<CancelCause>
    readonly wakeRequested: boolean
  }
  | {
    readonly _tag: "Running"
    readonly fiber: Activity
    readonly cause: Option.Option<CancelCause>
    readonly wakeRequested: boolean
  }

/** @internal */
export interface Driver {
  readonly status: Effect.Effect<AgentStatus>
  readonly send: (message: UserMessage, target: InboxTarget, wake: boolean) => Effect.Effect<void, AgentError.SendError>
  readonly cancel: (
    cause: CancelCause,
    options?: { readonly keepInbox?: boolean | undefined }
  ) => Effect.Effect<void, SessionError.SessionAppendError>
  readonly whenIdle: Effect.Effect<void>
  readonly runMaintenance: <A, E, R>(
    task: Effect.Effect<A, E, R>
  ) => Effect.Effect<
    A,
    E | AgentError.AgentBusy | AgentError.AgentCanceled | AgentError.AgentInactive | AgentError.AgentBroken,
    R
  >
  /** Publication finished (`true`) or was vetoed (`false`): releases gated senders (PUB-11). */
  readonly open: (published: boolean) => Effect.Effect<void>
  /** Teardown step 1 (LIFE-01/06): refuse new work, cancel with `disposed` keeping the inbox, await convergence. */
  readonly stop: Effect.Effect<void>
  readonly isActive: () => boolean
}

const ABORTED_TEXT = "The tool was interrupted by a cancellation while it was running. It may have partly run: " +
  "verify its side effects before retrying it."
const ABORTED_BEFORE_DISPATCH_TEXT = "The tool was not started: the turn was cancelled before it was dispatched."

interface PendingCall {
  readonly callId: string
  readonly name: string
  readonly arguments: string
  state: "waiting" | "started" | "done"
  result: { readonly message: ToolResultMessage; readonly error?: { readonly name: string; readonly code: string } } | undefined
}

/** What the current turn has written so far, for landing a cancel safely (CAN-05). */
class TurnContext {
  openStep: number | undefined = undefined
  streamedText = ""
  streamedReasoning = ""
  streaming = false
  calls: Array<PendingCall> = []
  logged = 0
  constructor(readonly turn: number) {}
}

const textResult = (
  call: { readonly callId: string; readonly name: string },
  text: string,
  isError: boolean
): ToolResultMessage => ({
  id: `tool:${call.callId}` as MessageId,
  role: "tool",
  toolCallId: call.callId,
  toolName: call.name,
  content: [{ type: "text", text }],
  isError
})

/** @internal */
export const make = (deps: DriverDeps): Effect.Effect<Driver> =>
  Effect.gen(function*() {
    const sessionCore = core(deps.session)
    const state = yield* SynchronizedRef.make<Phase>({ _tag: "Idle" })
    const status = yield* Ref.make<AgentStatus>("idle")
    const gate = yield* Deferred.make<boolean>()
    let disposing = false
    let broken: Option.Option<unknown> = Option.none()
    let latchedWake = false
    let lastConfig: string | undefined = undefined
    /** The cancel cause of the current activity, readable without effects (the claim guard, INB-06). */
    let cancelCell: Option.Option<CancelCause> = Option.none()
    const maxSteps = deps.options.maxStepsPerTurn ?? 100
    const maxParallel = deps.options.maxParallelToolCalls ?? 10
    const maxRetries = deps.options.maxRequestRetries ?? 3
    const hasNextStep = () => deps.inbox.sizes().nextStep > 0

    const setStatus = (next: AgentStatus) =>
      Effect.flatMap(Ref.getAndSet(status, next), (previous) =>
        previous === next ? Effect.void : deps.emit(AgentEvent.AgentStatusChanged({ agent: deps.id, status: next })))

    // Activities start uninterruptible, so an interruption that arrives before a fiber runs its first
    // instruction still lets it write its closers; only the marked regions are interruptible.
    const activityRuntime = RuntimeModule.disableRuntimeFlag(deps.runtime, RuntimeFlags.Interruption)
    const fork = <A, E>(effect: Effect.Effect<A, E>): Fiber.RuntimeFiber<A, E> => {
      cancelCell = Option.none()
      return RuntimeModule.runFork(activityRuntime)(effect)
    }

    const markBroken = (cause: unknown, turn?: number) =>
      Effect.suspend(() => {
        if (Option.isNone(broken)) broken = Option.some(cause)
        return deps.emit(AgentEvent.AgentError({
          agent: deps.id,
          turn,
          error: { message: "a durable write failed; the agent takes no more input until it is resumed", code: "PERSISTENCE" }
        }))
      })

    const appendCore = (events: Arr.NonEmptyReadonlyArray<CoreEventInput>) => sessionCore.appendCore(events)

    // ---------------------------------------------------------------------------------------------
    // the turn/step loop

    const currentCause = Effect.map(SynchronizedRef.get(state), (phase) =>
      phase._tag === "Idle" ? Option.none<CancelCause>() : phase.cause)

    const resolveRoute = (turn: number, step: number) =>
      Effect.gen(function*() {
        const provider = deps.options.provider ?? deps.storedRoute.provider
        const model = deps.options.model ?? deps.storedRoute.model
        const maxTokens = deps.options.maxTokens ?? deps.storedRoute.maxTokens
        const system = deps.options.system ?? deps.storedRoute.system
        if (provider === undefined || model === undefined) return Option.none<Tool.Route>()
        const route: Tool.Route = {
          provider,
          model,
          ...(maxTokens !== undefined ? { maxTokens } : {}),
          ...(system !== undefined ? { system } : {})
        }
        return Option.some(yield* deps.hooks.runRequest({ agent: deps.agent(), turn, step }, route))
      })

    const runTool = (ctx: TurnContext, step: number, call: PendingCall, tools: ReadonlyMap<string, Tool.Any>) =>
      Effect.gen(function*() {
        call.state = "started"
        yield* appendCore([{
          type: "tool/call",
          data: { turn: ctx.turn, step, callId: call.callId, name: call.name, arguments: call.arguments }
        }])
        yield* deps.emit(AgentEvent.ToolCallStarted({ agent: deps.id, turn: ctx.turn, step, callId: call.callId, name: call.name }))
        const tool = tools.get(call.name)
        let concludes = false
        if (tool === undefined) {
          call.result = {
            message: textResult(call, `Unknown tool ${JSON.stringify(call.name)}.`, true),
            error: { name: "ToolNotFound", code: "TOOL_NOT_FOUND" }
          }
        } else {
          const args = deps.decodeArguments(tool, call.arguments)
          if (Either.isLeft(args)) {
            call.result = {
              message: textResult(call, args.left, true),
              error: { name: "InvalidToolArguments", code: "INVALID_ARGUMENTS" }
            }
          } else {
            const exit = yield* Effect.exit(
              tool.run(args.right, { agent: deps.agent(), turn: ctx.turn, step, callId: call.callId })
            )
            if (Exit.isSuccess(exit)) {
              call.result = {
                message: {
                  id: `tool:${call.callId}` as MessageId,
                  role: "tool",
                  toolCallId: call.callId,
                  toolName: call.name,
                  content: exit.value.content,
                  isError: exit.value.isError === true
                }
              }
              concludes = exit.value.concludesTurn === true
            } else {
              const failure = Cause.failureOption(exit.cause)
              if (Option.isNone(failure)) return yield* Effect.failCause(exit.cause)
              const error = failure.value
              const name = typeof error === "object" && error !== null && "_tag" in error
                ? String((error as { readonly _tag: unknown })._tag)
                : "ToolFailed"
              const text = error instanceof Error ? error.message : typeof error === "string" ? error : name
              call.result = {
                message: textResult(call, `The tool failed: ${text}`, true),
                error: { name, code: "TOOL_FAILED" }
              }
            }
          }
        }
        call.state = "done"
        yield* deps.emit(AgentEvent.ToolCallFinished({
          agent: deps.id,
          turn: ctx.turn,
          step,
          callId: call.callId,
          isError: call.result?.message.isError === true
        }))
        return concludes
      })

    /** Logs, in model order, the results of calls that are done and come before any unfinished one. */
    const flushResults = (ctx: TurnContext, step: number) =>
      Effect.suspend(() => {
        const events: Array<CoreEventInput> = []
        while (ctx.logged < ctx.calls.length) {
          const call = ctx.calls[ctx.logged]!
          if (call.state !== "done" || call.result === undefined) break
          events.push({
            type: "tool/result",
            data: {
              turn: ctx.turn,
              step,
              message: call.result.message,
              ...(call.result.error !== undefined ? { error: call.result.error } : {})
            }
          })
          ctx.logged++
        }
        return events.length === 0 ? Effect.void : Effect.asVoid(appendCore(events as unknown as Arr.NonEmptyReadonlyArray<CoreEventInput>))
      })

    const runTools = (ctx: TurnContext, step: number) =>
      Effect.gen(function*() {
        const available = yield* deps.tools
        const byName = new Map(available.map((tool) => [tool.name, tool] as const))
        let concludes = false
        // consecutive parallel calls form a group; an exclusive call is a barrier of its own
        const groups: Array<Array<PendingCall>> = []
        for (const call of ctx.calls) {
          const tool = byName.get(call.name)
          const exclusive = tool?.mode === "exclusive"
          const last = groups[groups.length - 1]
          if (exclusive || last === undefined || (last.length > 0 && byName.get(last[0]!.name)?.mode === "exclusive")) {
            groups.push([call])
          } else {
            last.push(call)
          }
        }
        for (const group of groups) {
          const results = yield* Effect.forEach(group, (call) => runTool(ctx, step, call, byName), {
            concurrency: maxParallel
          })
          if (results.some((c) => c)) concludes = true
          yield* flushResults(ctx, step)
        }
        return concludes
      })

    const callModel = (ctx: TurnContext, step: number, request: ModelRequest) =>
      Effect.gen(function*() {
        let attempt = 0
        while (true) {
          attempt++
          ctx.streamedText = ""
          ctx.streamedReasoning = ""
          ctx.streaming = true
          const calls: Array<{ readonly callId: string; readonly name: string; readonly arguments: string }> = []
          let finish: { readonly reason: "stop" | "tool-calls" | "max-tokens"; readonly usage?: Usage | undefined } | undefined
          const exit = yield* Effect.exit(
            deps.model.stream(request).pipe(
              Stream.runForEach((chunk: ModelChunk) => {
                switch (chunk._tag) {
                  case "TextDelta":
                    ctx.streamedText += chunk.text
                    return deps.emit(AgentEvent.ModelDelta({ agent: deps.id, turn: ctx.turn, step, kind: "text", text: chunk.text }))
                  case "ReasoningDelta":
                    ctx.streamedReasoning += chunk.text
                    return deps.emit(
                      AgentEvent.ModelDelta({ agent: deps.id, turn: ctx.turn, step, kind: "reasoning", text: chunk.text })
                    )
                  case "ToolCall":
                    calls.push({ callId: chunk.callId, name: chunk.name, arguments: chunk.arguments })
                    return Effect.void
                  case "Finish":
                    finish = { reason: chunk.reason, usage: chunk.usage }
                    return Effect.void
                }
              })
            )
          )
          if (Exit.isSuccess(exit)) {
            ctx.streaming = false
            return { calls, finish: finish ?? { reason: calls.length > 0 ? "tool-calls" as const : "stop" as const } }
          }
          const failure = Cause.failureOption(exit.cause)
          if (Option.isNone(failure)) return yield* Effect.failCause(exit.cause)
          ctx.streaming = false
          const error = failure.value
          if (attempt <= maxRetries) {
            const decision = yield* deps.hooks.runRequestError({ agent: deps.agent(), turn: ctx.turn, step, error, attempt })
            if (decision === "retry") continue
          }
          return yield* Effect.fail(error)
        }
      })

    /** Runs steps until the turn's end reason is known. Writes everything but the closers and `turn/end`. */
    const turnBody = (ctx: TurnContext) =>
      Effect.gen(function*() {
        const agent = deps.agent()
        let step = 0
        while (true) {
          if (step >= maxSteps) return { kind: "max-steps" } as TurnEndReason
          step++
          const peeked = yield* deps.inbox.peek(step === 1 ? "turn" : "step")
          if (step === 1 && peeked.length === 0) return { kind: "completed" } as TurnEndReason
          let entering: ReadonlyArray<UserMessage> = peeked
          if (peeked.length > 0) {
            const decision = yield* deps.hooks.runPreStep({ agent, turn: ctx.turn, step }, peeked)
            if (decision.kind === "reject") {
              yield* deps.inbox.reject(peeked.map((m) => m.id))
              return { kind: "blocked", reason: decision.reason } as TurnEndReason
            }
            entering = decision.messages
          }
          const guard = () => Option.isNone(cancelCell)
          if (peeked.length > 0 || entering.length > 0) {
            const claimed = yield* deps.inbox.claim({
              turn: ctx.turn,
              step,
              peeked: peeked.map((m) => m.id),
              entering,
              guard
            })
            if (Option.isNone(claimed)) return yield* Effect.interrupt
            if (claimed.value.entered.length === 0) {
              if (step === 1) return { kind: "completed" } as TurnEndReason
              yield* appendCore([{ type: "step/start", data: { turn: ctx.turn, step } }])
            }
          } else {
            yield* appendCore([{ type: "step/start", data: { turn: ctx.turn, step } }])
          }
          ctx.openStep = step
          ctx.calls = []
          ctx.logged = 0

          const route = yield* resolveRoute(ctx.turn, step)
          if (Option.isNone(route)) {
            return {
              kind: "error",
              error: { message: "no provider/model: set them in the agent options", code: "NO_ROUTE" }
            } as TurnEndReason
          }
          const tools = yield* deps.tools
          const schemas = tools.map(deps.toSchema)
          const config = {
            provider: route.value.provider,
            model: route.value.model,
            ...(route.value.maxTokens !== undefined ? { maxTokens: route.value.maxTokens } : {}),
            ...(route.value.system !== undefined ? { system: route.value.system } : {}),
            tools: schemas.map((s) => ({ name: s.name, description: s.description, parameters: s.jsonSchema }))
          }
          const configKey = JSON.stringify(config)
          if (configKey !== lastConfig) {
            yield* appendCore([{ type: "request/config", data: config }])
            lastConfig = configKey
          }
          const request: ModelRequest = {
            sessionId: deps.id,
            provider: config.provider,
            model: config.model,
            ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}),
            ...(config.system !== undefined ? { system: config.system } : {}),
            messages: yield* deps.session.messages,
            tools: schemas
          }
          const reply = yield* callModel(ctx, step, request)
          const maxTokens = reply.finish.reason === "max-tokens"
          const content: Array<AssistantMessage["content"][number]> = []
          if (ctx.streamedReasoning !== "") content.push({ type: "reasoning", text: ctx.streamedReasoning })
          if (ctx.streamedText !== "") content.push({ type: "text", text: ctx.streamedText })
          if (!maxTokens) {
            for (const call of reply.calls) {
              content.push({ type: "tool-call", callId: call.callId, name: call.name, arguments: call.arguments })
            }
          }
          const message: AssistantMessage = {
            id: `assistant:${ctx.turn}:${step}` as MessageId,
            role: "assistant",
            content,
            source: { kind: "model", provider: config.provider, model: config.model }
          }
          ctx.calls = maxTokens
            ? []
            : reply.calls.map((call) => ({ ...call, state: "waiting" as const, result: undefined }))
          ctx.streamedText = ""
          ctx.streamedReasoning = ""
          yield* appendCore([{
            type: "assistant/message",
            data: {
              turn: ctx.turn,
              step,
              message,
              finish: reply.finish.reason === "tool-calls" && ctx.calls.length === 0 ? "stop" : reply.finish.reason,
              ...(reply.finish.usage !== undefined ? { usage: reply.finish.usage } : {})
            }
          }])
          const hadCalls = ctx.calls.length > 0
          const concludes = hadCalls ? yield* runTools(ctx, step) : false
          yield* appendCore([{ type: "step/end", data: { turn: ctx.turn, step } }])
          ctx.openStep = undefined
          ctx.calls = []
          // fresh next-step input always gets another step (TURN-04/05)
          if (hasNextStep()) continue
          if (hadCalls && !concludes) continue
          if (!hadCalls) {
            yield* deps.hooks.runTurnStopping({ agent, turn: ctx.turn })
            if (hasNextStep()) continue
          }
          return maxTokens ? { kind: "max-tokens" } as TurnEndReason : { kind: "completed" } as TurnEndReason
        }
      })

    /** The events that land a cancel or a failure safely wherever it happened (CAN-05). */
    const closers = (ctx: TurnContext, reason: TurnEndReason): Array<CoreEventInput> => {
      const events: Array<CoreEventInput> = []
      const step = ctx.openStep
      if (step !== undefined) {
        if (ctx.streaming && (ctx.streamedText !== "" || ctx.streamedReasoning !== "")) {
          const content: Array<AssistantMessage["content"][number]> = []
          if (ctx.streamedReasoning !== "") content.push({ type: "reasoning", text: ctx.streamedReasoning })
          if (ctx.streamedText !== "") content.push({ type: "text", text: ctx.streamedText })
          events.push({
            type: "assistant/message",
            data: {
              turn: ctx.turn,
              step,
              message: {
                id: `assistant:${ctx.turn}:${step}` as MessageId,
                role: "assistant",
                content,
                source: {
                  kind: "model",
                  provider: deps.options.provider ?? deps.storedRoute.provider ?? "unknown",
                  model: deps.options.model ?? deps.storedRoute.model ?? "unknown"
                }
              },
              interrupted: true
            }
          })
        }
        for (let i = ctx.logged; i < ctx.calls.length; i++) {
          const call = ctx.calls[i]!
          if (call.state === "waiting") {
            events.push({
              type: "tool/call",
              data: { turn: ctx.turn, step, callId: call.callId, name: call.name, arguments: call.arguments }
            })
            events.push({
              type: "tool/result",
              data: {
                turn: ctx.turn,
                step,
                message: textResult(call, ABORTED_BEFORE_DISPATCH_TEXT, true),
                error: { name: "ToolAbortedBeforeDispatch", code: "ABORTED_BEFORE_DISPATCH" }
              }
            })
          } else if (call.state === "started" || call.result === undefined) {
            events.push({
              type: "tool/result",
              data: {
                turn: ctx.turn,
                step,
                message: textResult(call, ABORTED_TEXT, true),
                error: { name: "ToolAborted", code: "ABORTED" }
              }
            })
          } else {
            events.push({
              type: "tool/result",
              data: {
                turn: ctx.turn,
                step,
                message: call.result.message,
                ...(call.result.error !== undefined ? { error: call.result.error } : {})
              }
            })
          }
        }
        events.push({ type: "step/end", data: { turn: ctx.turn, step } })
      }
      events.push({ type: "turn/end", data: { turn: ctx.turn, reason } })
      return events
    }

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
      return { kind: "error", error: { message: Cause.pretty(cause), code: "DEFECT" } }
    }

    /** Runs one opened turn to its end; returns its end reason (or None when the log could not be written). */
    const runTurn = (turn: number) =>
      Effect.uninterruptible(
        Effect.gen(function*() {
          const ctx = new TurnContext(turn)
          yield* deps.emit(AgentEvent.TurnStarted({ agent: deps.id, turn }))
          const exit = yield* Effect.exit(Effect.interruptible(turnBody(ctx)))
          const cause = yield* currentCause
          let reason: TurnEndReason
          if (Exit.isSuccess(exit)) {
            reason = exit.value
          } else if (Option.isSome(cause)) {
            reason = { kind: "aborted", cause: cause.value }
          } else {
            reason = errorReason(exit.cause)
          }
          const written = yield* Effect.exit(appendCore(closers(ctx, reason) as unknown as Arr.NonEmptyReadonlyArray<CoreEventInput>))
          if (Exit.isFailure(written)) {
            yield* markBroken(Cause.squash(written.cause), turn)
            return Option.none<TurnEndReason>()
          }
          if (reason.kind === "error") {
            yield* deps.emit(AgentEvent.AgentError({ agent: deps.id, turn, error: reason.error }))
          }
          yield* deps.emit(AgentEvent.TurnEnded({ agent: deps.id, turn, reason }))
          return Option.some(reason)
        })
      )

    /**
     * A drain: the opened turn, then further turns while follow-ups are pending (TURN-07). Ends by
     * handing over to a latched wake or going idle.
     */
    const drain = (firstTurn: number): Effect.Effect<void> =>
      Effect.gen(function*() {
        let turn = firstTurn
        while (true) {
          const reason = yield* deps.withInitiator(runTurn(turn)).pipe(
            Effect.catchAllCause((cause) =>
              Effect.as(markBroken(Cause.squash(cause), turn), Option.none<TurnEndReason>())
            )
          )
          const next = yield* SynchronizedRef.modifyEffect(state, (phase) =>
            Effect.gen(function*() {
              const continues = Option.isSome(reason) &&
                (reason.value.kind === "completed" || reason.value.kind === "max-tokens" ||
                  reason.value.kind === "max-steps") &&
                !disposing && Option.isNone(broken) && phase._tag === "Running" && Option.isNone(phase.cause)
              if (continues && (yield* deps.inbox.hasPending)) {
                const nextTurn = sessionCore.lastTurn() + 1
                const opened = yield* Effect.exit(appendCore([{ type: "turn/start", data: { turn: nextTurn } }]))
                if (Exit.isSuccess(opened)) return [Option.some(nextTurn), phase] as const
                yield* markBroken(Cause.squash(opened.cause))
              }
              return yield* settle(phase)
            })
          )
          if (Option.isNone(next)) return
          turn = next.value
        }
      })

    /**
     * The current activity converged: start the latched wake (DLV-06) as a new activity, still
     * `running`, or go idle. Runs inside `SynchronizedRef.modifyEffect`.
     */
    const settle = (phase: Phase) =>
      Effect.gen(function*() {
        const latched = phase._tag !== "Idle" && phase.wakeRequested
        if (latched && !disposing && Option.isNone(broken) && (yield* deps.inbox.hasPending)) {
          const opened = yield* startDrain
          if (Option.isSome(opened)) return [Option.none<number>(), opened.value] as const
        }
        yield* setStatus("idle")
        return [Option.none<number>(), { _tag: "Idle" } as Phase] as const
      })

    /** Writes `turn/start` of the next turn and forks a drain for it. */
    const startDrain = Effect.gen(function*() {
      const turn = sessionCore.lastTurn() + 1
      const opened = yield* Effect.exit(appendCore([{ type: "turn/start", data: { turn } }]))
      if (Exit.isFailure(opened)) {
        yield* markBroken(Cause.squash(opened.cause))
        return Option.none<Phase>()
      }
      yield* setStatus("running")
      const fiber = fork(drain(turn))
      return Option.some<Phase>({ _tag: "Running", fiber, cause: Option.none(), wakeRequested: false })
    })

    // ---------------------------------------------------------------------------------------------
    // verbs

    const ensureUsable = Effect.suspend((): Effect.Effect<void, AgentError.AgentInactive | AgentError.AgentBroken> => {
      if (disposing) return Effect.fail(new AgentError.AgentInactive({ id: deps.id }))
      if (Option.isSome(broken)) return Effect.fail(new AgentError.AgentBroken({ id: deps.id, cause: broken.value }))
      return Effect.void
    })

    /** PUB-11: sends wait for publication, except those of this creation's own hooks. */
    const awaitGate = Effect.gen(function*() {
      if (yield* Deferred.isDone(gate)) {
        if (!(yield* Deferred.await(gate))) return yield* new AgentError.AgentInactive({ id: deps.id })
        return "open" as const
      }
      const publishing = yield* FiberRef.get(deps.publishing)
      if (Option.isSome(publishing) && publishing.value === deps.id) return "own-hook" as const
      if (!(yield* Deferred.await(gate))) return yield* new AgentError.AgentInactive({ id: deps.id })
      return "open" as const
    })

    const send = (message: UserMessage, target: InboxTarget, wake: boolean) =>
      Effect.gen(function*() {
        yield* ensureUsable
        const passage = yield* awaitGate
        yield* ensureUsable
        if (passage === "own-hook") {
          yield* deps.inbox.insert(target, message, "end")
          if (wake) latchedWake = true
          return
        }
        yield* SynchronizedRef.updateEffect(state, (phase) =>
          Effect.gen(function*() {
            yield* ensureUsable
            switch (phase._tag) {
              case "Idle": {
                if (!wake) {
                  yield* deps.inbox.insert(target, message, "end")
                  return phase
                }
                const turn = sessionCore.lastTurn() + 1
                yield* deps.inbox.insert(target, message, "end", () => [{ type: "turn/start", data: { turn } }])
                yield* setStatus("running")
                const fiber = fork(drain(turn))
                return { _tag: "Running", fiber, cause: Option.none(), wakeRequested: false } as Phase
              }
              case "Maintenance": {
                yield* deps.inbox.insert(target, message, "end")
                return wake ? { ...phase, wakeRequested: true } : phase
              }
              case "Running": {
                if (Option.isSome(phase.cause) && wake) {
                  yield* deps.inbox.insert("next-turn", message, "end")
                  return { ...phase, wakeRequested: true }
                }
                yield* deps.inbox.insert(target, message, "end")
                return phase
              }
            }
          })
        )
      })

    const cancel = (cause: CancelCause, options?: { readonly keepInbox?: boolean | undefined }) =>
      Effect.gen(function*() {
        if (disposing && cause.kind !== "disposed") return
        const fiber = yield* SynchronizedRef.modify(state, (phase): readonly [Activity | undefined, Phase] => {
          if (phase._tag === "Idle") return [undefined, phase]
          if (Option.isNone(phase.cause)) {
            cancelCell = Option.some(cause)
            return [phase.fiber, { ...phase, cause: Option.some(cause), wakeRequested: false }]
          }
          return [phase.fiber, { ...phase, wakeRequested: false }]
        })
        const cleared = options?.keepInbox === true ? Exit.void : yield* Effect.exit(deps.inbox.clearCanceled)
        if (fiber !== undefined) yield* Fiber.interruptFork(fiber)
        if (Exit.isFailure(cleared)) return yield* Effect.failCause(cleared.cause)
      })

    const whenIdle: Effect.Effect<void> = Effect.gen(function*() {
      while (true) {
        const phase = yield* SynchronizedRef.get(state)
        if (phase._tag === "Idle") return
        yield* Fiber.await(phase.fiber)
        // an activity settles the state before it ends; if one died before that, settle for it
        yield* SynchronizedRef.updateEffect(state, (current) =>
          current === phase ? Effect.map(settle(current), ([, next]) => next) : Effect.succeed(current))
      }
    })

    const runMaintenance = <A, E, R>(task: Effect.Effect<A, E, R>) =>
      Effect.gen(function*() {
        yield* ensureUsable
        const context = yield* Effect.context<R>()
        const done = yield* Deferred.make<Exit.Exit<A, E>>()
        const fiber = yield* SynchronizedRef.modifyEffect(state, (phase) =>
          Effect.gen(function*() {
            yield* ensureUsable
            if (phase._tag !== "Idle") return yield* new AgentError.AgentBusy({ id: deps.id })
            const work = Effect.interruptible(deps.withInitiator(Effect.provide(task, context))).pipe(
              Effect.exit,
              Effect.flatMap((exit) => Deferred.succeed(done, exit as Exit.Exit<A, E>)),
              Effect.zipRight(SynchronizedRef.updateEffect(state, (phase) => Effect.map(settle(phase), ([, next]) => next)))
            )
            const activity = fork(work)
            return [activity, { _tag: "Maintenance", fiber: activity, cause: Option.none(), wakeRequested: false } as Phase] as const
          })
        )
        const exit = yield* Deferred.await(done).pipe(Effect.onInterrupt(() => Fiber.interruptFork(fiber)))
        if (Exit.isSuccess(exit)) return exit.value
        if (Cause.isInterruptedOnly(exit.cause)) {
          const cause = Option.getOrElse(cancelCell, (): CancelCause => ({ kind: "user" }))
          return yield* new AgentError.AgentCanceled({ id: deps.id, cause })
        }
        return yield* Effect.failCause(exit.cause)
      })

    const open = (published: boolean) =>
      Effect.gen(function*() {
        yield* Deferred.succeed(gate, published)
        if (!published) {
          disposing = true
          return
        }
        if (latchedWake) {
          latchedWake = false
          yield* SynchronizedRef.updateEffect(state, (phase) =>
            Effect.gen(function*() {
              if (phase._tag !== "Idle" || !(yield* deps.inbox.hasPending)) return phase
              const opened = yield* startDrain
              return Option.getOrElse(opened, () => phase)
            })
          )
        }
      })

    const stop = Effect.gen(function*() {
      disposing = true
      yield* Deferred.succeed(gate, false)
      yield* cancel({ kind: "disposed" }, { keepInbox: true }).pipe(Effect.ignore)
      yield* whenIdle
    })

    return {
      status: Ref.get(status),
      send,
      cancel,
      whenIdle,
      runMaintenance,
      open,
      stop,
      isActive: () => !disposing
    }
  })
