/**
 * The driver: one state machine (`Idle | Maintenance | Running`) changed under one lock (as a
 * SynchronizedRef would be, `modifyPhase`); its activities requested under that lock and started by
 * one drain fiber that takes wake-ups from a `Queue` (CORE-04) and observes how each ends (CORE-01);
 * cancellation as interruption plus a set-once cause, and the turn/step loop (SPEC §8).
 *
 * @internal
 */
import type { Array as Arr } from "effect"
import {
  Cause,
  Chunk,
  Data,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  Fiber,
  FiberId,
  FiberRef,
  Option,
  Queue,
  Stream
} from "effect"
import type { Agent, AgentOptions } from "../Agent.js"
import * as AgentError from "../AgentError.js"
import { AgentEvent, type AgentStatus } from "../AgentEvent.js"
import type { AssistantMessage, ContentPart, MessageId, SessionId, ToolResultMessage, UserMessage } from "../Message.js"
import type { ModelChunk, ModelRequest, ToolSchema } from "../Model.js"
import type { Model } from "../Model.js"
import type { Session } from "../Session.js"
import type * as SessionError from "../SessionError.js"
import type { CancelCause, CoreEventInput, FinishReason, InboxTarget, TurnEndReason, Usage } from "../SessionEvent.js"
import type * as Tool from "../Tool.js"
import type { HookRunners } from "./hooks.js"
import type { InboxInternal } from "./inbox.js"
import type { Lock } from "./lock.js"
import { make as makeLock } from "./lock.js"
import * as compaction from "./compaction.js"
import * as modelOutput from "./modelOutput.js"
import * as modelRetry from "./modelRetry.js"
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
  /**
   * Forks the driver's drain fiber (CORE-01, CORE-04): into the agent's Scope, with the FiberRefs
   * of the factory's runtime, never the builder's or a waker's (§6.3).
   */
  readonly forkDrain: (drain: Effect.Effect<never>) => Effect.Effect<Fiber.RuntimeFiber<never>>
  /** The route of the last `request/config` in the log at construction. */
  readonly storedRoute: Partial<Tool.Route>
  /** A FiberRef whose value is the id of the agent whose creation hooks are running (PUB-11). */
  readonly publishing: FiberRef.FiberRef<Option.Option<SessionId>>
}

/**
 * One activity (a drain or a maintenance task): requested under the state lock, started by the
 * drain fiber when it takes the wake-up (CORE-04), interrupted by a cancel whenever it comes.
 */
interface Activity {
  readonly work: Effect.Effect<void>
  /** Set by the drain fiber when it starts the activity. */
  fiber: Fiber.RuntimeFiber<void> | undefined
  /** An interruption was requested (a cancel, or the maintenance caller's interruption). */
  interrupted: boolean
}

type Phase =
  | { readonly _tag: "Idle" }
  | {
    readonly _tag: "Maintenance"
    readonly activity: Activity
    readonly cause: Option.Option<CancelCause>
    readonly wakeRequested: boolean
  }
  | {
    readonly _tag: "Running"
    readonly activity: Activity
    readonly cause: Option.Option<CancelCause>
    readonly wakeRequested: boolean
  }

/**
 * The activity the current fiber belongs to (set in an activity's fiber, inherited by the fibers it
 * forks — tool calls): `whenIdle` from inside it would wait for itself (CORE-07).
 */
const currentActivity = FiberRef.unsafeMake<Activity | undefined>(undefined)

/** Interrupts an activity now if it started, else as soon as the drain fiber starts it. */
const interruptActivity = (activity: Activity): Effect.Effect<void> => {
  activity.interrupted = true
  return activity.fiber === undefined ? Effect.void : Fiber.interruptFork(activity.fiber)
}

const whenIdleFromOwnActivity = (id: SessionId) =>
  Effect.dieMessage(
    `whenIdle of agent ${JSON.stringify(id)} was awaited from inside that agent's own activity (a tool, a hook ` +
      "or a maintenance task): it waits for the activity to end, so it would wait for itself. Await whenIdle " +
      "from outside the agent (CORE-07)."
  )

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
  /** HOST-03: starts a drain when idle and some pending message was sent waking; a no-op otherwise. */
  readonly wake: Effect.Effect<void>
  /** Publication finished (`true`) or was vetoed (`false`): releases gated senders (PUB-11). */
  readonly open: (published: boolean) => Effect.Effect<void>
  /** Teardown step 1 (LIFE-01/06): refuse new work, cancel with `disposed` keeping the inbox, await convergence. */
  readonly stop: Effect.Effect<void>
  /** Never had an activity: `stop` then only refuses new work, in one synchronous step (B1). */
  readonly neverActive: () => boolean
  readonly isActive: () => boolean
}

const ABORTED_TEXT = "The tool was interrupted by a cancellation while it was running. It may have partly run: " +
  "verify its side effects before retrying it."
const ABORTED_BEFORE_DISPATCH_TEXT = "The tool was not started: the turn was cancelled before it was dispatched."
const DEFECT_TEXT = "The tool failed unexpectedly (a defect); its side effects are unknown."
/** PKG-03: what the model sees when a tool ran past its `timeout` and was interrupted. */
const timeoutText = (timeout: Duration.Duration) =>
  `The tool did not finish within its timeout of ${Duration.format(timeout)} and was interrupted. ` +
  "It may have partly run: verify its side effects before retrying it."

/**
 * A tool's body under its `timeout`, if it has one: `None` when the timeout interrupted it (the
 * interruption is awaited, so nothing of the call runs on after its result is logged).
 */
const runWithTimeout = <A, E, R>(
  body: Effect.Effect<A, E, R>,
  timeout: Duration.Duration | undefined
): Effect.Effect<Option.Option<A>, E, R> =>
  timeout === undefined ? Effect.map(body, Option.some) : Effect.timeoutOption(body, timeout)

interface Finish {
  readonly reason: FinishReason
  readonly usage?: Usage | undefined
}

interface ToolOutcome {
  readonly message: ToolResultMessage
  readonly error?: { readonly name: string; readonly code: string }
}

interface PendingCall {
  readonly callId: string
  readonly providerCallId?: string | undefined
  readonly name: string
  readonly arguments: string
  state: "waiting" | "started" | "done"
  result: ToolOutcome | undefined
}

/** What the current turn has written so far, for landing a cancel safely (CAN-05). */
class TurnContext {
  /** Steps opened so far: a turn that opened none ends its drain (DLV-09). */
  steps = 0
  openStep: number | undefined = undefined
  /** The route of the current step's request (the source of an interrupted assistant message). */
  route: Tool.Route | undefined = undefined
  streamedText = ""
  streamedReasoning = ""
  streaming = false
  calls: Array<PendingCall> = []
  logged = 0
  constructor(readonly turn: number) {}
}

/**
 * A durable write of the loop failed. The activity ends without writing anything more and the
 * agent is broken until it is resumed, which repairs the open turn (SES-02b).
 */
class LogWriteFailed extends Data.TaggedError("LogWriteFailed")<{ readonly cause: unknown }> {}

/** What a finished turn tells its drain. */
interface TurnOutcome {
  readonly reason: TurnEndReason
  /** A normal end after at least one step: pending follow-ups start the next turn (TURN-07, DLV-09). */
  readonly continues: boolean
}

/** The `tool/result` event of a finished call. */
const resultEvent = (
  turn: number,
  step: number,
  result: NonNullable<PendingCall["result"]>
): CoreEventInput => ({
  type: "tool/result",
  data: { turn, step, message: result.message, ...(result.error !== undefined ? { error: result.error } : {}) }
})

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

/**
 * What a tool returned, as the log can carry it (DUR-02): JSON content of known part shapes, or the
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

const isNonEmpty = <A>(as: Array<A>): as is Arr.NonEmptyArray<A> => as.length > 0

const isInvalidEventData = (error: unknown): error is SessionError.InvalidEventData =>
  typeof error === "object" && error !== null && "_tag" in error && error._tag === "InvalidEventData"

/** @internal */
export const make = (deps: DriverDeps): Effect.Effect<Driver> => Effect.sync(() => unsafeMake(deps))

/**
 * `make` as a plain constructor: building a driver only allocates (its state machine, gate and
 * fibers are made on first use), so a caller already running an operation pays none (B1).
 *
 * @internal
 */
export const unsafeMake = (deps: DriverDeps): Driver => {
  const sessionCore = core(deps.session)
  // the state machine's phase, changed only under its lock; the lock and the gate's Deferred are
  // made on first use (an agent that never had input has neither)
  let phase: Phase = { _tag: "Idle" }
  let phaseLock: Lock | undefined
  let status: AgentStatus = "idle"
  /** PUB-11: the gate's value once set (first wins), and the Deferred senders wait on before. */
  let gateValue: boolean | undefined
  let gateWaiters: Deferred.Deferred<boolean> | undefined
  let disposing = false
  let broken: Option.Option<unknown> = Option.none()
  let latchedWake = false
  let lastConfig: string | undefined = undefined
  /** The cancel cause of the current activity, readable without effects (the claim guard, INB-06). */
  let cancelCell: Option.Option<CancelCause> = Option.none()
  const maxSteps = deps.options.maxStepsPerTurn ?? 100
  const maxParallel = deps.options.maxParallelToolCalls ?? 10
  const maxRetries = deps.options.maxRequestRetries ?? 3
  /** The drain fiber's wake-ups (CORE-04): one pending is enough, the drain starts what the phase holds. */
  let wakes: Queue.Queue<void> | undefined
  /** Completed (and cleared) when the phase next becomes `Idle`: what `whenIdle` callers wait on. */
  let idleSignal: Deferred.Deferred<void> | undefined

  /** Per-agent helpers as methods (no per-agent named closures to build). */
  const h = {
    /**
     * `SynchronizedRef.modifyEffect` over the phase: `f` runs under the state lock with the phase
     * current then, and its new phase is set before the lock is released; at a fraction of the cost
     * of `withPermits(1)` (B3, B5). Only the wait for the lock keeps the caller's interruptibility:
     * `f` runs uninterruptibly, because what it changes (a durable splice with its `turn/start`, a
     * forked activity) must be recorded in the phase it returns, or a drain is lost or orphaned.
     */
    modifyPhase<A, E>(f: (current: Phase) => Effect.Effect<readonly [A, Phase], E>): Effect.Effect<A, E> {
      return (phaseLock ??= makeLock()).withLockUninterruptibly(
        Effect.flatMap(Effect.suspend(() => f(phase)), (result) => {
          h.setPhase(result[1])
          return Effect.succeed(result[0])
        })
      )
    },
    /** The one place the phase changes: going idle releases the `whenIdle` callers. */
    setPhase(next: Phase): void {
      phase = next
      if (next._tag === "Idle" && idleSignal !== undefined) {
        Deferred.unsafeDone(idleSignal, Exit.void)
        idleSignal = undefined
      }
    },
    /** `SynchronizedRef.updateEffect` over the phase (see `modifyPhase`). */
    updatePhase<E>(f: (current: Phase) => Effect.Effect<Phase, E>): Effect.Effect<void, E> {
      return (phaseLock ??= makeLock()).withLockUninterruptibly(
        Effect.flatMap(Effect.suspend(() => f(phase)), (next) => {
          h.setPhase(next)
          return Effect.void
        })
      )
    },
    /**
     * Sets the gate (first wins) and wakes the senders waiting on it, in one synchronous step: a
     * sender either sees the value or is woken by it.
     */
    openGateNow(published: boolean): void {
      if (gateValue !== undefined) return
      gateValue = published
      if (gateWaiters !== undefined) Deferred.unsafeDone(gateWaiters, Exit.succeed(published))
    },
    /**
     * What a latched wake does once the gate is open: a drain for what is pending, if idle (the wake
     * of a send made by the creation's own hooks, AGT-04, PUB-11).
     */
    get wakeIfIdle(): Effect.Effect<void> {
      return h.updatePhase((phase) =>
        Effect.gen(function*() {
          if (phase._tag !== "Idle" || !(yield* deps.inbox.hasPending)) return phase
          const opened = yield* (loopCache ??= buildLoop()).startDrain
          return Option.getOrElse(opened, () => phase)
        })
      )
    },
    setStatus(next: AgentStatus): Effect.Effect<void> {
      return Effect.suspend(() => {
        const previous = status
        status = next
        return previous === next
          ? Effect.void
          : deps.emit(AgentEvent.AgentStatusChanged({ agent: deps.id, status: next }))
      })
    },
    /**
     * Requests an activity (under the state lock): the drain fiber starts it when it takes the
     * wake-up (CORE-04), so it never runs with the FiberRefs of the fiber that requested it (§6.3).
     */
    request(work: Effect.Effect<void>): Effect.Effect<Activity> {
      const activity: Activity = { work, fiber: undefined, interrupted: false }
      if (wakes !== undefined) {
        wakes.unsafeOffer(undefined)
        return Effect.succeed(activity)
      }
      // the drain fiber is forked once, by the agent's first activity: an agent that never had
      // input has none (B1, B2)
      return Effect.flatMap(Queue.dropping<void>(1), (queue) => {
        wakes = queue
        queue.unsafeOffer(undefined)
        return Effect.as(deps.forkDrain(drainFiber(queue)), activity)
      })
    },
    markBroken(cause: unknown, turn?: number, defect?: boolean): Effect.Effect<void> {
      return Effect.suspend(() => {
        if (Option.isNone(broken)) broken = Option.some(cause)
        return deps.emit(AgentEvent.AgentError({
          agent: deps.id,
          turn,
          error: defect === true
            ? {
              message: "a background fiber of the agent died (a defect); it takes no more input until it is resumed",
              code: "DEFECT"
            }
            : {
              message: "a durable write failed; the agent takes no more input until it is resumed",
              code: "PERSISTENCE"
            }
        }))
      })
    },
    /** Why the agent takes no input now (disposing, or broken by a failed write), if so. */
    unusable(): AgentError.AgentInactive | AgentError.AgentBroken | undefined {
      if (disposing) return new AgentError.AgentInactive({ id: deps.id })
      if (Option.isSome(broken)) return new AgentError.AgentBroken({ id: deps.id, cause: broken.value })
      return undefined
    },
    get ensureUsable(): Effect.Effect<void, AgentError.AgentInactive | AgentError.AgentBroken> {
      return Effect.suspend((): Effect.Effect<void, AgentError.AgentInactive | AgentError.AgentBroken> => {
        const unusable = h.unusable()
        return unusable === undefined ? Effect.void : Effect.fail(unusable)
      })
    },
    /** PUB-11: sends wait for publication, except those of this creation's own hooks. */
    get awaitGate(): Effect.Effect<"open" | "own-hook", AgentError.AgentInactive> {
      return Effect.gen(function*() {
        if (gateValue !== undefined) {
          if (!gateValue) return yield* new AgentError.AgentInactive({ id: deps.id })
          return "open" as const
        }
        const publishing = yield* FiberRef.get(deps.publishing)
        if (Option.isSome(publishing) && publishing.value === deps.id) return "own-hook" as const
        const passed = yield* Effect.suspend(() =>
          gateValue !== undefined
            ? Effect.succeed(gateValue)
            : Deferred.await(gateWaiters ??= Deferred.unsafeMake<boolean>(FiberId.none))
        )
        if (!passed) return yield* new AgentError.AgentInactive({ id: deps.id })
        return "open" as const
      })
    }
  }

  /** The turn/step loop, built when the first activity needs it (an idle agent never runs one). */
  const buildLoop = () => {
    const hasNextStep = () => deps.inbox.sizes().nextStep > 0
    const appendCore = (events: Arr.NonEmptyReadonlyArray<CoreEventInput>) => sessionCore.appendCore(events)

    /**
     * A durable write of the loop that failed, or died, breaks the agent (SES-02b, SPEC §9). Invalid
     * data is not a write failure: only a `preStep` hook can supply it (messages it enters), and
     * that ends the turn `error` like any hook failure.
     */
    const asWriteFailure = <A, E>(
      self: Effect.Effect<A, E>
    ): Effect.Effect<A, LogWriteFailed | SessionError.InvalidEventData> =>
      Effect.catchAllCause(self, (cause): Effect.Effect<never, LogWriteFailed | SessionError.InvalidEventData> => {
        if (Cause.isInterruptedOnly(cause)) return Effect.interrupt
        const failure = Cause.failureOption(cause)
        if (Option.isSome(failure) && isInvalidEventData(failure.value)) return Effect.fail(failure.value)
        return Effect.fail(new LogWriteFailed({ cause: Cause.squash(cause) }))
      })

    /** Appends core events as one batch. */
    const write = (events: Arr.NonEmptyReadonlyArray<CoreEventInput>) => asWriteFailure(appendCore(events))

    /** The activity's cancel cause has been set (read without effects; reset when an activity forks). */
    const isCanceled = () => Option.isSome(cancelCell)

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
        const hooked = yield* Effect.interruptible(deps.hooks.runRequest({ agent: deps.agent(), turn, step }, route))
        return Option.some(hooked)
      })

    /**
     * Runs one call: its `tool/call` is written and the call marked started together, then only the
     * body is interruptible. An interrupted body leaves the call `started` (closers log `ABORTED`).
     */
    const runTool = (ctx: TurnContext, step: number, call: PendingCall, tools: ReadonlyMap<string, Tool.Any>) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          yield* write([{
            type: "tool/call",
            data: { turn: ctx.turn, step, callId: call.callId, name: call.name, arguments: call.arguments }
          }])
          call.state = "started"
          yield* deps.emit(
            AgentEvent.ToolCallStarted({ agent: deps.id, turn: ctx.turn, step, callId: call.callId, name: call.name })
          )
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
              const exit = yield* Effect.exit(restore(runWithTimeout(
                tool.run(args.right, { agent: deps.agent(), turn: ctx.turn, step, callId: call.callId }),
                tool.timeout
              )))
              if (Exit.isSuccess(exit)) {
                const value = exit.value
                if (Option.isNone(value)) {
                  call.result = {
                    message: textResult(call, timeoutText(tool.timeout ?? Duration.zero), true),
                    error: { name: "ToolTimeout", code: "TOOL_TIMEOUT" }
                  }
                } else {
                  const output = toolOutputOf(value.value)
                  call.result = Either.isRight(output)
                    ? {
                      message: {
                        id: `tool:${call.callId}` as MessageId,
                        role: "tool",
                        toolCallId: call.callId,
                        toolName: call.name,
                        content: output.right.content,
                        isError: output.right.isError
                      }
                    }
                    : {
                      // DUR-02: the model sees the tool's mistake; the agent is never broken by it
                      message: textResult(call, `The tool returned output that cannot be logged: ${output.left}`, true),
                      error: { name: "InvalidToolOutput", code: "INVALID_TOOL_OUTPUT" }
                    }
                  concludes = Either.isRight(output) && output.right.concludesTurn
                }
              } else if (Cause.isInterruptedOnly(exit.cause)) {
                return yield* Effect.failCause(exit.cause)
              } else {
                const failure = Cause.failureOption(exit.cause)
                if (Option.isNone(failure)) {
                  // a defect ends the turn `error`; the call still gets a result that says so
                  call.result = {
                    message: textResult(call, DEFECT_TEXT, true),
                    error: { name: "ToolDefect", code: "TOOL_DEFECT" }
                  }
                  call.state = "done"
                  return yield* Effect.failCause(exit.cause)
                }
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
      )

    /**
     * Logs, in model order, the results of calls that are done and come before any unfinished one.
     * With `closeStep` (the last group, every call done), `step/end` goes in the same batch.
     */
    const flushResults = (ctx: TurnContext, step: number, closeStep: boolean) =>
      Effect.suspend(() => {
        const events: Array<CoreEventInput> = []
        let logged = ctx.logged
        while (logged < ctx.calls.length) {
          const call = ctx.calls[logged]!
          if (call.state !== "done" || call.result === undefined) break
          events.push(resultEvent(ctx.turn, step, call.result))
          logged++
        }
        const closing = closeStep && logged === ctx.calls.length
        if (closing) events.push({ type: "step/end", data: { turn: ctx.turn, step } })
        if (!isNonEmpty(events)) return Effect.void
        return Effect.map(write(events), () => {
          ctx.logged = logged
          if (closing) {
            ctx.openStep = undefined
            ctx.calls = []
          }
        })
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
        for (let g = 0; g < groups.length; g++) {
          // interruptible, so a cancel reaches the running bodies (each guards its own bookkeeping)
          const results = yield* Effect.interruptible(
            Effect.forEach(groups[g]!, (call) => runTool(ctx, step, call, byName), { concurrency: maxParallel })
          )
          if (results.some((c) => c)) concludes = true
          // the last group's results close the step in the same batch
          yield* flushResults(ctx, step, g === groups.length - 1)
        }
        return concludes
      })

    /** One attempt of a model request: nothing of a failed attempt is kept (MOD-04). */
    const attemptModel = (ctx: TurnContext, step: number, request: ModelRequest) =>
      Effect.gen(function*() {
        ctx.streamedText = ""
        ctx.streamedReasoning = ""
        ctx.streaming = true
        const calls: Array<{ readonly callId: unknown; readonly name: unknown; readonly arguments: unknown }> = []
        let finish: Finish | undefined
        // one Effect per chunk, its elements handled in order: a state update, then its emit
        const onChunk = (chunk: Chunk.Chunk<ModelChunk>): Effect.Effect<void> => {
          const items = Chunk.toReadonlyArray(chunk)
          const from = (start: number): Effect.Effect<void> => {
            for (let i = start; i < items.length; i++) {
              const item = items[i]!
              switch (item._tag) {
                case "TextDelta": {
                  ctx.streamedText += item.text
                  const next = i + 1
                  const emitted = deps.emit(
                    AgentEvent.ModelDelta({ agent: deps.id, turn: ctx.turn, step, kind: "text", text: item.text })
                  )
                  return next < items.length ? Effect.flatMap(emitted, () => from(next)) : emitted
                }
                case "ReasoningDelta": {
                  ctx.streamedReasoning += item.text
                  const next = i + 1
                  const emitted = deps.emit(AgentEvent.ModelDelta({
                    agent: deps.id,
                    turn: ctx.turn,
                    step,
                    kind: "reasoning",
                    text: item.text
                  }))
                  return next < items.length ? Effect.flatMap(emitted, () => from(next)) : emitted
                }
                case "ToolCall":
                  calls.push({ callId: item.callId, name: item.name, arguments: item.arguments })
                  break
                case "Finish":
                  // DUR-02: only what the log can carry (known usage fields, a known or "other" reason)
                  finish = { reason: modelOutput.normalizeFinishReason(item.reason), usage: modelOutput.normalizeUsage(item.usage) }
                  break
              }
            }
            return Effect.void
          }
          return Effect.suspend(() => from(0))
        }
        // pulled chunk by chunk in a scope (cheaper than `Stream.runForEach*`, same order and finalization)
        const drained = Effect.scoped(Effect.flatMap(Stream.toPull(deps.model.stream(request)), (pull) => {
          const loop: Effect.Effect<void, AgentError.ModelError> = Effect.matchEffect(pull, {
            onFailure: (error) => Option.isNone(error) ? Effect.void : Effect.fail(error.value),
            onSuccess: (chunk) => Effect.flatMap(onChunk(chunk), () => loop)
          })
          return loop
        }))
        const exit = yield* Effect.exit(Effect.interruptible(drained))
        if (Exit.isSuccess(exit)) {
          ctx.streaming = false
          return {
            // DUR-02: call ids the log, the results and the next request can carry
            calls: modelOutput.normalizeCalls(ctx.turn, step, calls),
            finish: finish ?? { reason: calls.length > 0 ? "tool-calls" as const : "stop" as const }
          }
        }
        // interrupted (a cancel): the closers keep what was delivered so far (CAN-05)
        if (Cause.isInterrupted(exit.cause)) return yield* Effect.failCause(exit.cause)
        // a failed attempt delivers nothing the model will be shown
        ctx.streaming = false
        return yield* Effect.failCause(exit.cause)
      })

    /**
     * MOD-04: retryable codes back off on the Schedule (Retry-After honoured), others retry when
     * the requestError hooks say so; each retry is announced live as `ModelRetry`.
     */
    const callModel = (ctx: TurnContext, step: number, request: ModelRequest) =>
      modelRetry.retrying(() => attemptModel(ctx, step, request), {
        policy: { maxRetries },
        decide: ({ attempt, error }) =>
          Effect.interruptible(deps.hooks.runRequestError({ agent: deps.agent(), turn: ctx.turn, step, error, attempt })),
        onRetry: ({ attempt, delay, error }) =>
          deps.emit(AgentEvent.ModelRetry({ agent: deps.id, turn: ctx.turn, step, attempt, code: error.code, delay }))
      })

    /** Opens a step: `step/start` (alone, when nothing enters it). */
    const openStep = (ctx: TurnContext, step: number) =>
      Effect.map(write([{ type: "step/start", data: { turn: ctx.turn, step } }]), () => {
        ctx.openStep = step
        ctx.steps++
      })

    /** Runs steps until the turn's end reason is known. Writes everything but the closers and `turn/end`. */
    const turnBody = (ctx: TurnContext) =>
      Effect.gen(function*() {
        const agent = deps.agent()
        let step = 0
        while (true) {
          if (step >= maxSteps) return { kind: "max-steps" } as TurnEndReason
          step++
          // every step proposal goes through the preStep hooks, which may add to an empty batch
          const peeked = yield* deps.inbox.peek(step === 1 ? "turn" : "step")
          const decision = yield* Effect.interruptible(deps.hooks.runPreStep({ agent, turn: ctx.turn, step }, peeked))
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
          if (step === 1 && peeked.length === 0 && entering.length === 0) return { kind: "completed" } as TurnEndReason
          if (peeked.length > 0 || entering.length > 0) {
            const claimed = yield* asWriteFailure(deps.inbox.claim({
              turn: ctx.turn,
              step,
              peeked: peeked.map((m) => m.id),
              entering,
              guard: () => !isCanceled()
            }))
            if (Option.isNone(claimed)) return yield* Effect.interrupt
            if (claimed.value.entered.length === 0) {
              // nothing entered the first step: the turn ends without one (DLV-09)
              if (step === 1) return { kind: "completed" } as TurnEndReason
              yield* openStep(ctx, step)
            } else {
              ctx.openStep = step
              ctx.steps++
            }
          } else {
            yield* openStep(ctx, step)
          }
          ctx.calls = []
          ctx.logged = 0

          const route = yield* resolveRoute(ctx.turn, step)
          if (Option.isNone(route)) {
            return {
              kind: "error",
              error: { message: "no provider/model: set them in the agent options", code: "NO_ROUTE" }
            } as TurnEndReason
          }
          ctx.route = route.value
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
            yield* write([{ type: "request/config", data: config }])
            lastConfig = configKey
          }
          // CMP-01: compaction at this step boundary when the prompt outgrows the window (compaction.ts)
          if (deps.options.contextWindow !== undefined) {
            yield* compaction.atStepBoundary({
              ...deps,
              route: route.value,
              tools: schemas,
              turn: ctx.turn,
              step,
              append: (event) => Effect.map(write([event]), (events) => events[0])
            })
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
              content.push({
                type: "tool-call",
                callId: call.callId,
                name: call.name,
                arguments: call.arguments,
                ...(call.providerCallId !== undefined ? { providerCallId: call.providerCallId } : {})
              })
            }
          }
          const message: AssistantMessage = {
            id: `assistant:${ctx.turn}:${step}` as MessageId,
            role: "assistant",
            content,
            source: { kind: "model", provider: config.provider, model: config.model }
          }
          const calls: Array<PendingCall> = maxTokens
            ? []
            : reply.calls.map((call) => ({ ...call, state: "waiting" as const, result: undefined }))
          const hadCalls = calls.length > 0
          const assistantEvent: CoreEventInput = {
            type: "assistant/message",
            data: {
              turn: ctx.turn,
              step,
              message,
              finish: reply.finish.reason === "tool-calls" && calls.length === 0 ? "stop" : reply.finish.reason,
              ...(reply.finish.usage !== undefined ? { usage: reply.finish.usage } : {})
            }
          }
          if (hadCalls) {
            yield* write([assistantEvent])
            ctx.calls = calls
            ctx.streamedText = ""
            ctx.streamedReasoning = ""
          } else {
            // no calls: nothing waits between the message and `step/end`, so they are one batch
            yield* write([assistantEvent, { type: "step/end", data: { turn: ctx.turn, step } }])
            ctx.streamedText = ""
            ctx.streamedReasoning = ""
            ctx.openStep = undefined
            ctx.calls = []
          }
          const concludes = hadCalls ? yield* runTools(ctx, step) : false
          if (ctx.openStep !== undefined) {
            // defensive: `runTools` closes the step with its last results, so this does not run today
            yield* write([{ type: "step/end", data: { turn: ctx.turn, step } }])
            ctx.openStep = undefined
            ctx.calls = []
          }
          // fresh next-step input always gets another step (TURN-04/05)
          if (hasNextStep()) continue
          if (hadCalls && !concludes) continue
          // the turn is about to stop: turnStopping hooks may steer it on
          yield* Effect.interruptible(deps.hooks.runTurnStopping({ agent, turn: ctx.turn }))
          if (hasNextStep()) continue
          return maxTokens ? { kind: "max-tokens" } as TurnEndReason : { kind: "completed" } as TurnEndReason
        }
      })

    /** The events that land a cancel or a failure safely wherever it happened (CAN-05). */
    const closers = (ctx: TurnContext, reason: TurnEndReason): Arr.NonEmptyReadonlyArray<CoreEventInput> => {
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
                  provider: ctx.route?.provider ?? "unknown",
                  model: ctx.route?.model ?? "unknown"
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
            events.push(resultEvent(ctx.turn, step, call.result))
          }
        }
        events.push({ type: "step/end", data: { turn: ctx.turn, step } })
      }
      events.push({ type: "turn/end", data: { turn: ctx.turn, reason } })
      return events as unknown as Arr.NonEmptyReadonlyArray<CoreEventInput>
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

    /**
     * Runs one opened turn to its end; returns its outcome, or None when the log could not be
     * written (the agent is broken then, and the open turn is left for repair).
     */
    const runTurn = (turn: number) =>
      Effect.uninterruptible(
        Effect.gen(function*() {
          const ctx = new TurnContext(turn)
          yield* deps.emit(AgentEvent.TurnStarted({ agent: deps.id, turn }))
          const exit = yield* Effect.exit(turnBody(ctx))
          if (Exit.isFailure(exit)) {
            const failure = Cause.failureOption(exit.cause)
            if (Option.isSome(failure) && failure.value instanceof LogWriteFailed) {
              yield* h.markBroken(failure.value.cause, turn)
              return Option.none<TurnOutcome>()
            }
          }
          // the activity's own cause (set before anything else by `cancel`, CAN-04)
          const cause = cancelCell
          const reason: TurnEndReason = Exit.isSuccess(exit)
            ? exit.value
            : Option.isSome(cause)
            ? { kind: "aborted", cause: cause.value }
            : errorReason(exit.cause)
          const written = yield* Effect.exit(appendCore(closers(ctx, reason)))
          if (Exit.isFailure(written)) {
            yield* h.markBroken(Cause.squash(written.cause), turn)
            return Option.none<TurnOutcome>()
          }
          if (reason.kind === "error") {
            yield* deps.emit(AgentEvent.AgentError({ agent: deps.id, turn, error: reason.error }))
          }
          yield* deps.emit(AgentEvent.TurnEnded({ agent: deps.id, turn, reason }))
          const continues = ctx.steps > 0 &&
            (reason.kind === "completed" || reason.kind === "max-tokens" || reason.kind === "max-steps")
          return Option.some<TurnOutcome>({ reason, continues })
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
          const outcome = yield* deps.withInitiator(runTurn(turn)).pipe(
            Effect.catchAllCause((cause) =>
              Effect.as(h.markBroken(Cause.squash(cause), turn), Option.none<TurnOutcome>())
            )
          )
          const next = yield* h.modifyPhase((phase) =>
            Effect.gen(function*() {
              const continues = Option.isSome(outcome) && outcome.value.continues &&
                !disposing && Option.isNone(broken) && phase._tag === "Running" && Option.isNone(phase.cause)
              if (continues && (yield* deps.inbox.hasPending)) {
                const nextTurn = sessionCore.lastTurn() + 1
                const opened = yield* Effect.exit(appendCore([{ type: "turn/start", data: { turn: nextTurn } }]))
                if (Exit.isSuccess(opened)) return [Option.some(nextTurn), phase] as const
                yield* h.markBroken(Cause.squash(opened.cause))
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
     * `running`, or go idle. Runs under the state lock (`modifyPhase`).
     */
    const settle = (phase: Phase) =>
      Effect.gen(function*() {
        const latched = phase._tag !== "Idle" && phase.wakeRequested
        if (latched && !disposing && Option.isNone(broken) && (yield* deps.inbox.hasPending)) {
          const opened = yield* startDrain
          if (Option.isSome(opened)) return [Option.none<number>(), opened.value] as const
        }
        yield* h.setStatus("idle")
        return [Option.none<number>(), { _tag: "Idle" } as Phase] as const
      })

    /** Writes `turn/start` of the next turn and forks a drain for it. */
    const startDrain = Effect.gen(function*() {
      const turn = sessionCore.lastTurn() + 1
      const opened = yield* Effect.exit(appendCore([{ type: "turn/start", data: { turn } }]))
      if (Exit.isFailure(opened)) {
        yield* h.markBroken(Cause.squash(opened.cause))
        return Option.none<Phase>()
      }
      yield* h.setStatus("running")
      const activity = yield* h.request(drain(turn))
      return Option.some<Phase>({ _tag: "Running", activity, cause: Option.none(), wakeRequested: false })
    })
    return { drain, settle, startDrain }
  }
  let loopCache: ReturnType<typeof buildLoop> | undefined

  // ---------------------------------------------------------------------------------------------
  // verbs

  /** A send under the state lock: into the inbox, and a drain started or a wake latched (DLV, AGT-04). */
  const sendLocked = (
    phase: Phase,
    message: UserMessage,
    target: InboxTarget,
    wake: boolean
  ): Effect.Effect<Phase, AgentError.SendError> => {
    const unusable = h.unusable()
    if (unusable !== undefined) return Effect.fail(unusable)
    switch (phase._tag) {
      case "Idle": {
        if (!wake) return Effect.as(deps.inbox.insert(target, message, "end"), phase)
        const turn = sessionCore.lastTurn() + 1
        return deps.inbox.insert(target, message, "end", () => [{ type: "turn/start", data: { turn } }], true).pipe(
          Effect.zipRight(h.setStatus("running")),
          Effect.zipRight(Effect.suspend(() => h.request((loopCache ??= buildLoop()).drain(turn)))),
          Effect.map((activity): Phase => ({ _tag: "Running", activity, cause: Option.none(), wakeRequested: false }))
        )
      }
      case "Maintenance":
      case "Running": {
        // after a cancel, waking input waits for the next turn and is latched to run when the
        // cancelled activity converges (DLV-06, AGT-04)
        if (Option.isSome(phase.cause) && wake) {
          return Effect.as(deps.inbox.insert("next-turn", message, "end", undefined, true), {
            ...phase,
            wakeRequested: true
          })
        }
        // a running drain takes it at its next boundary; maintenance latches it (AGT-04)
        return Effect.as(
          deps.inbox.insert(target, message, "end", undefined, wake),
          wake && phase._tag === "Maintenance" ? { ...phase, wakeRequested: true } : phase
        )
      }
    }
  }

  const driver: Driver = {
    status: Effect.sync(() => status),
    send(message: UserMessage, target: InboxTarget, wake: boolean) {
      return Effect.suspend((): Effect.Effect<void, AgentError.SendError> => {
        const unusable = h.unusable()
        if (unusable !== undefined) return Effect.fail(unusable)
        // published (the usual case): no gate to wait for, straight to the state lock (B3)
        if (gateValue === true) return h.updatePhase((phase) => sendLocked(phase, message, target, wake))
        return Effect.gen(function*() {
          const passage = yield* h.awaitGate
          yield* h.ensureUsable
          if (passage === "own-hook") {
            yield* deps.inbox.insert(target, message, "end", undefined, wake)
            if (!wake) return
            // the gate is looked at in the same step as the latch is set: before the creation
            // opens it, the latch is seen by `open`; after (a fiber its hook forked may get here
            // late), this send wakes the agent itself, as `open` would have
            if (gateValue === undefined) {
              latchedWake = true
              return
            }
            if (gateValue) yield* h.wakeIfIdle
            return
          }
          yield* h.updatePhase((phase) => sendLocked(phase, message, target, wake))
        })
      })
    },

    /**
     * Sets the cause (first wins, CAN-04) and resets the latch, writes the canceled splices — all
     * under the state lock, so a send that sees the cause is never canceled by it — then requests
     * the interruption, even when the splices could not be written.
     */
    cancel(cause: CancelCause, options?: { readonly keepInbox?: boolean | undefined }) {
      return Effect.gen(function*() {
        if (disposing && cause.kind !== "disposed") return
        const keepInbox = options?.keepInbox === true
        type Outcome = readonly [Activity | undefined, Exit.Exit<void, SessionError.SessionAppendError>]
        const [activity, cleared] = yield* h.modifyPhase(
          (phase): Effect.Effect<readonly [Outcome, Phase]> =>
            Effect.gen(function*() {
              if (phase._tag !== "Idle" && Option.isNone(phase.cause)) cancelCell = Option.some(cause)
              // a wake latched by the creation's own hooks is reset like any other latch (PUB-11)
              latchedWake = false
              const cleared = keepInbox ? Exit.void : yield* Effect.exit(deps.inbox.clearCanceled)
              if (phase._tag === "Idle") return [[undefined, cleared], phase] as const
              const next: Phase = Option.isNone(phase.cause)
                ? { ...phase, cause: Option.some(cause), wakeRequested: false }
                : { ...phase, wakeRequested: false }
              return [[phase.activity, cleared], next] as const
            })
        )
        if (activity !== undefined) yield* interruptActivity(activity)
        if (Exit.isFailure(cleared)) return yield* Effect.failCause(cleared.cause)
      })
    },

    get whenIdle(): Effect.Effect<void> {
      // AGT-05 stays infallible: awaiting it from the agent's own activity is a defect (CORE-07)
      return Effect.withFiberRuntime((fiber) => {
        if (phase._tag === "Idle") return Effect.void
        if (fiber.getFiberRef(currentActivity) === phase.activity) return whenIdleFromOwnActivity(deps.id)
        return Deferred.await(idleSignal ??= Deferred.unsafeMake<void>(FiberId.none))
      })
    },

    runMaintenance<A, E, R>(task: Effect.Effect<A, E, R>) {
      return Effect.gen(function*() {
        yield* h.ensureUsable
        const context = yield* Effect.context<R>()
        // the task's exit with the activity's cause, read before a latched wake forks the next one
        const done = yield* Deferred.make<readonly [Exit.Exit<A, E>, Option.Option<CancelCause>]>()
        const start = h.modifyPhase((phase) =>
          Effect.gen(function*() {
            yield* h.ensureUsable
            if (phase._tag !== "Idle") return yield* new AgentError.AgentBusy({ id: deps.id })
            const work = Effect.interruptible(deps.withInitiator(Effect.provide(task, context))).pipe(
              Effect.exit,
              Effect.flatMap((exit) => Deferred.succeed(done, [exit as Exit.Exit<A, E>, cancelCell] as const)),
              Effect.zipRight(
                h.updatePhase((phase) => Effect.map((loopCache ??= buildLoop()).settle(phase), ([, next]) => next))
              )
            )
            const activity = yield* h.request(work)
            const maintenance: Phase = {
              _tag: "Maintenance",
              activity,
              cause: Option.none(),
              wakeRequested: false
            }
            return [activity, maintenance] as const
          })
        )
        // the activity is forked and the handler that interrupts it with its caller installed in one
        // uninterruptible stretch: an interrupted caller never leaves its task running
        const [exit, cause] = yield* Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(start, (activity) =>
            restore(Deferred.await(done)).pipe(Effect.onInterrupt(() => interruptActivity(activity))))
        )
        if (Exit.isSuccess(exit)) return exit.value
        if (Cause.isInterruptedOnly(exit.cause)) {
          return yield* new AgentError.AgentCanceled({
            id: deps.id,
            cause: Option.getOrElse(cause, (): CancelCause => ({ kind: "user" }))
          })
        }
        return yield* Effect.failCause(exit.cause)
      })
    },

    get wake(): Effect.Effect<void> {
      return Effect.suspend(() =>
        disposing || Option.isSome(broken) || gateValue !== true || !deps.inbox.hasPendingWaking()
          ? Effect.void
          : h.updatePhase((phase) =>
            phase._tag !== "Idle" || !deps.inbox.hasPendingWaking()
              ? Effect.succeed(phase)
              : Effect.map((loopCache ??= buildLoop()).startDrain, Option.getOrElse(() => phase))
          )
      )
    },

    open(published: boolean) {
      // one operation unless a send from the creation's own hooks latched a wake (B1)
      return Effect.suspend((): Effect.Effect<void> => {
        h.openGateNow(published)
        if (!published) {
          // inactive, the waiting senders told in the same step
          disposing = true
          return Effect.void
        }
        if (!latchedWake) return Effect.void
        latchedWake = false
        return h.wakeIfIdle
      })
    },

    get stop(): Effect.Effect<void> {
      return Effect.suspend(() => {
        disposing = true
        if (phaseLock === undefined) {
          // never active: Idle, nothing to cancel or await; only a latched wake to reset (B1)
          latchedWake = false
          h.openGateNow(false)
          return Effect.void
        }
        h.openGateNow(false)
        return Effect.gen(function*() {
          yield* driver.cancel({ kind: "disposed" }, { keepInbox: true }).pipe(Effect.ignore)
          yield* driver.whenIdle
        })
      })
    },
    neverActive() {
      return phaseLock === undefined
    },
    isActive() {
      return !disposing
    }
  }

  // ---------------------------------------------------------------------------------------------
  // the drain fiber (CORE-01, CORE-04)

  /**
   * The drain fiber: forked once (by the agent's first activity), it takes each wake-up from the Queue and
   * starts the activity the phase requested, as its own child, then observes its end. Only the
   * waits are interruptible (the agent's Scope closing ends it); its child activities end with it.
   */
  const drainFiber = (queue: Queue.Queue<void>): Effect.Effect<never> =>
    Effect.uninterruptible(Effect.forever(Effect.flatMap(
      Effect.interruptible(Queue.take(queue)),
      () => Effect.catchAllCause(startRequested, (cause) => recoverDead(undefined, cause))
    )))

  /**
   * Starts the requested activity, if one waits, and observes its end (CORE-01). Without the state
   * lock (turn gate, B5: taking it here cost 30 Effect operations per turn, 808 > 800): only this
   * fiber starts activities and only a started activity settles, so the requested one cannot change
   * meanwhile; a cancel that comes meanwhile marks it `interrupted` (seen below, after the fork) and
   * records its cause in the phase, which is read again once the fiber exists.
   */
  const startRequested: Effect.Effect<void> = Effect.suspend(() => {
    const requested = phase
    if (requested._tag === "Idle" || requested.activity.fiber !== undefined) return Effect.void
    const activity = requested.activity
    // the activity's cancel cause, readable without effects (the claim guard, INB-06)
    cancelCell = requested.cause
    // the activity starts uninterruptible (forked from this uninterruptible fiber): an interruption
    // that arrives before its first instruction still lets it write its closers
    return Effect.flatMap(
      Effect.fork(Effect.zipRight(FiberRef.set(currentActivity, activity), activity.work)),
      (fiber) => {
        activity.fiber = fiber
        const current = phase
        if (current._tag !== "Idle" && current.activity === activity) cancelCell = current.cause
        if (activity.interrupted) fiber.unsafeInterruptAsFork(FiberId.none)
        return Effect.flatMap(Effect.interruptible(Fiber.await(fiber)), (exit) => afterActivity(activity, exit))
      }
    )
  })

  /**
   * An activity settles the phase before it ends. One that ended without (it died — a defect in
   * its state update) leaves the agent broken with the cause, and idle: never `Running` on a dead
   * fiber (CORE-01).
   */
  const afterActivity = (activity: Activity, exit: Exit.Exit<void>): Effect.Effect<void> =>
    phase._tag !== "Idle" && phase.activity === activity
      ? recoverDead(activity, Exit.isFailure(exit) ? exit.cause : Cause.die(new Error("the activity ended unsettled")))
      : Effect.void

  /** The agent broken by a dead background fiber, and idle (whatever the recovery itself runs into). */
  const recoverDead = (activity: Activity | undefined, cause: Cause.Cause<unknown>): Effect.Effect<void> =>
    h.updatePhase((current) => {
      if (activity !== undefined && (current._tag === "Idle" || current.activity !== activity)) {
        return Effect.succeed(current)
      }
      if (Option.isNone(broken)) broken = Option.some(Cause.squash(cause))
      const idle: Phase = { _tag: "Idle" }
      return Effect.as(
        Effect.ignore(Effect.catchAllCause(
          Effect.zipRight(h.markBroken(Cause.squash(cause), undefined, true), h.setStatus("idle")),
          () => Effect.void
        )),
        idle
      )
    })
  return driver
}
