/**
 * The Agent: the live driver around one Session in this process — an inbox of pending work, a
 * turn/step loop, its own Scope of per-agent resources and a cancellation boundary (SPEC §7, §8).
 * Its owner holds an {@link AgentHandle}; looking an agent up never gives the handle.
 *
 * @since 0.1.0
 */
import type { Context, Duration, Option, Schema, Scope, Stream } from "effect"
import { Effect, Layer } from "effect"
import { AgentRegistry } from "./AgentRegistry.js"
import type * as AgentError from "./AgentError.js"
import type { AgentEvent, AgentStatus } from "./AgentEvent.js"
import type * as Compaction from "./Compaction.js"
import type { Inbox } from "./Inbox.js"
import type { SessionId, UserMessage } from "./Message.js"
import type { ModelSettings, OutputFormat } from "./ModelSettings.js"
import type * as Pending from "./Pending.js"
import type { Session } from "./Session.js"
import type { SessionAppendError } from "./SessionError.js"
import type { CancelCause, ChildOf, InboxTarget, JsonRecord, SessionEvent } from "./SessionEvent.js"
import type { LoopHooksShape, ToolRegistryShape } from "./Tool.js"
import type { TurnPart } from "./TurnPart.js"
import type { TurnResult, TypedTurnResult } from "./TurnResult.js"

/**
 * How an agent talks to its model.
 *
 * @since 0.1.0
 * @category options
 */
export interface AgentOptions {
  readonly provider?: string | undefined
  readonly model?: string | undefined
  /** A positive safe integer. */
  readonly maxTokens?: number | undefined
  readonly system?: string | undefined
  /** Default 10. */
  readonly maxParallelToolCalls?: number | undefined
  /** The turn ends `{kind:"max-steps"}` after this many steps; default 100. */
  readonly maxStepsPerTurn?: number | undefined
  /** Cap on `requestError` retries; default 3. */
  readonly maxRequestRetries?: number | undefined
  /**
   * SUB-02: how deep a chain of sub-agents (`Tool.agent`) may go below a root agent. A call that would
   * make a child deeper than this (the calling agent's own value) is an error result
   * `MAX_AGENT_DEPTH` and no child is made. Default 4; 0 forbids sub-agents.
   *
   * @since 0.3.0
   */
  readonly maxAgentDepth?: number | undefined
  /**
   * APP-03: a turn that ends `error` logs one `Warning` line through Effect's logger (session id,
   * turn, code, message) unless a `run`/`stream` caller receives the error; `false` turns it off.
   * Default `true`.
   *
   * @since 0.3.0
   */
  readonly logTurnErrors?: boolean | undefined
  /**
   * The model's context window in tokens (a positive integer). When set, a step whose estimated
   * prompt exceeds `compaction.threshold` of it compacts the older turns first (CMP-01); unset, the
   * agent never compacts on its own.
   *
   * @since 0.2.0
   */
  readonly contextWindow?: number | undefined
  /**
   * How the agent compacts (CMP-01): automatically when `contextWindow` is set, and on
   * `agent.compact()`. Defaults as documented on `Compaction.Policy`.
   *
   * @since 0.2.0
   */
  readonly compaction?: Compaction.Policy | undefined
  /**
   * APP-04: model settings for every request (see `ModelSettings.ModelSettings`), validated with
   * the other options and, when the model can judge them, refused at create if the provider cannot
   * take one (`InvalidAgentOptions`, never dropped). Stored in `request/config`; a resume without
   * them keeps the stored ones. `maxOutputTokens` and `maxTokens` are one value (set one, or both
   * equal). A message's own settings (`send(m, { settings })`) go over these for its turn.
   *
   * @since 0.3.0
   */
  readonly settings?: ModelSettings | undefined
  /**
   * OUT-01: every turn's final answer is JSON decoded with this Schema (its JSON Schema goes in the
   * request, named by its `identifier` annotation or `"output"`). A resume without it keeps the
   * stored JSON Schema and checks only that answers are JSON.
   *
   * @since 0.3.0
   */
  readonly output?: Schema.Schema<any, any, never> | undefined
  /**
   * OUT-02: how many correction steps a turn may take when its answer does not decode; then it ends
   * `error {code: "OUTPUT_INVALID"}`. An integer >= 0; default 2.
   *
   * @since 0.3.0
   */
  readonly outputRetries?: number | undefined
  /**
   * how long an approval request may wait (a positive duration) before it is rejected
   * automatically with reason `"timeout"`, for tools that have no `approvalTimeout` of their own.
   * The deadline is stored in the request (the Clock's time), so it holds across a restart. No limit
   * when unset.
   *
   * @since 0.3.0
   */
  readonly approvalTimeout?: Duration.DurationInput | undefined
}

/**
 * What `setup` may touch: composition only, never driving.
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentSetup {
  readonly id: SessionId
  readonly session: Session
  readonly tools: ToolRegistryShape
  readonly hooks: LoopHooksShape
  readonly spawn: Agent["spawn"]
  /** Non-waking seeding of context. */
  readonly inbox: Pick<Inbox, "append" | "prepend">
}

/**
 * Runs with the agent's Scope while the agent is built, before it is published. What it acquires
 * lives exactly as long as the agent. It may return a `commit` that runs inside the short critical
 * section of the creation transaction. If the owner Scope closes meanwhile, setup is interrupted
 * and the creation fails `AgentCreationVetoed{cause: AgentInactive}`; if the AgentLoop closes, it
 * fails `AgentLoopInactive` (PUB-06, FAC-04).
 *
 * @since 0.1.0
 * @category options
 */
export type Setup<E, R> = (
  agent: AgentSetup
) => Effect.Effect<void | { readonly commit: Effect.Effect<void, E> }, E, R | Scope.Scope>

/**
 * @since 0.1.0
 * @category options
 */
export interface CreateOptions<E = never, R = never> {
  /** Validated (ID-01). */
  readonly sessionId: SessionId | string
  readonly options?: AgentOptions | undefined
  /** Stored in the header. */
  readonly meta?: JsonRecord | undefined
  /** Replays a prefix. */
  readonly seed?: ReadonlyArray<SessionEvent> | undefined
  /** Seeds from another session (FORK-01). */
  readonly fork?: { readonly from: Session; readonly upTo?: number | undefined } | undefined
  /** The runtime owner relation (`roots`/`isOwnedBy`). */
  readonly parentAgent?: Agent | undefined
  /**
   * SUB-01: the parent session and tool call this session is a child of, written in its header
   * (`Tool.agent` sets it). Recovery never activates such a session as a root: its parent's resume
   * reads it. Ignored when an existing session is resumed (its header stays as stored).
   *
   * @since 0.3.0
   */
  readonly child?: ChildOf | undefined
  readonly setup?: Setup<E, R> | undefined
}

/**
 * @since 0.1.0
 * @category options
 */
export interface ResumeOptions<E = never, R = never> {
  readonly sessionId: SessionId | string
  /** Else the route of the last `request/config` in the log. */
  readonly options?: AgentOptions | undefined
  readonly parentAgent?: Agent | undefined
  readonly setup?: Setup<E, R> | undefined
}

/**
 * Where `agent.send` puts a message and whether it wakes the agent (PKG-03).
 *
 * @since 0.2.0
 * @category options
 */
export interface SendOptions {
  /** Default `"next-turn"`. */
  readonly target?: InboxTarget | undefined
  /** Default `true`. */
  readonly wake?: boolean | undefined
  /**
   * APP-04: model settings for the turn this message enters, over the agent's (field by field);
   * stored with the message, so they still apply after a restart, and logged as a `request/config`
   * for that turn only. Refused with `InvalidAgentOptions` (nothing is written) when invalid or
   * when the agent's provider cannot take one.
   *
   * @since 0.3.0
   */
  readonly settings?: ModelSettings | undefined
  /**
   * OUT-01: the typed output of the turn this message enters, over the agent's `output`. Its JSON
   * Schema is stored with the message; the Schema itself decodes the answer while this process
   * lives (after a restart only the JSON is checked). An `OutputFormat` (a name and a JSON Schema,
   * as `POST /sessions/:id/runs` takes it) asks for the same output without a Schema: the answer is
   * checked to be JSON and is returned as such (the provider enforces the schema: OpenAI's
   * `strict`, Anthropic's forced tool).
   *
   * @since 0.3.0
   */
  readonly output?: Schema.Schema<any, any, never> | OutputFormat | undefined
}

/**
 * What `agent.run` takes beside its message (APP-01).
 *
 * @since 0.3.0
 * @category options
 */
export interface RunOptions extends Pick<SendOptions, "settings" | "output"> {
  /**
   * The id of a message given as text (else a fresh one is minted); a `UserMessage` keeps its own.
   * A `MessageId` the session accepted before fails `DuplicateMessage`, as `send` does.
   */
  readonly messageId?: string | undefined
  /**
   * When the caller is interrupted: `true` withdraws the run's message while it is still pending,
   * or cancels the run's own turn (keeping the inbox) while it runs; the default `false` leaves the
   * turn to the agent, as it belongs to the agent, not to the caller.
   */
  readonly cancelOnInterrupt?: boolean | undefined
}

/**
 * What `agent.spawn` takes: the options of a create, without `parentAgent` (the spawning agent is
 * the parent).
 *
 * @since 0.2.0
 * @category options
 */
export type SpawnOptions<E = never, R = never> = Omit<CreateOptions<E, R>, "parentAgent">

/**
 * The owner-only teardown capability.
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentHandle {
  readonly agent: Agent
  /**
   * Starts or joins the single teardown and returns its outcome (LIFE-02): every caller gets the
   * same `AgentDisposeError` when some step failed (LIFE-03). Called from inside the agent's own
   * teardown (e.g. a finalizer registered in `setup`), it only starts it and returns at once, since
   * it would otherwise await itself.
   */
  readonly dispose: Effect.Effect<void, AgentError.AgentDisposeError>
  /**
   * Who watches the agent's events, counted where they are published: every live subscription of
   * its `events`, `subscribe` and `statusChanges`, however the subscriber got the agent. A host
   * counts them to keep a watched agent live (HOST-02); without it, a host counts only what is
   * subscribed through the agent it hands out. `AgentLoop`'s handles have it (ARCH-01).
   *
   * @since 0.3.0
   */
  readonly watchers?: AgentWatchers | undefined
}

/**
 * What a handle tells of who watches its agent (`AgentHandle.watchers`).
 *
 * @since 0.3.0
 * @category models
 */
export interface AgentWatchers {
  /** The live subscriptions of the agent's events now. */
  readonly subscribers: () => number
  /** Sets (or, with `undefined`, clears) what runs each time the last subscription ends. */
  readonly onQuiet: (listener: (() => Effect.Effect<void>) | undefined) => void
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Agent {
  readonly id: SessionId
  readonly options: AgentOptions
  readonly session: Session
  readonly inbox: Inbox
  readonly status: Effect.Effect<AgentStatus>
  /** Transitions only (never the current value first). */
  readonly statusChanges: Stream.Stream<AgentStatus>
  /** This agent's live events, in causal order. */
  readonly events: Stream.Stream<AgentEvent>
  /** The eager form of `events`. */
  readonly subscribe: Effect.Effect<Stream.Stream<AgentEvent>, never, Scope.Scope>
  /**
   * The general form of `followup`, `steer` and `inject` (PKG-03): `target` defaults to
   * `"next-turn"` and `wake` to `true`, so `send(m)` is `followup(m)`,
   * `send(m, { target: "next-step" })` is `steer(m)` and `send(m, { target: "next-step", wake: false })`
   * is `inject(m)`.
   */
  readonly send: {
    (message: UserMessage, options?: SendOptions | undefined): Effect.Effect<void, AgentError.SendError>
    /**
     * @deprecated since 0.2.0: use `send(message, { target, wake })`. The positional form stays so
     * v1 code keeps working.
     */
    (message: UserMessage, target: InboxTarget, wake: boolean): Effect.Effect<void, AgentError.SendError>
  }
  /** next-turn, wakes; `options` may carry the turn's own `settings` and `output` (APP-04, OUT-01). */
  readonly followup: (
    message: UserMessage,
    options?: Pick<SendOptions, "settings" | "output"> | undefined
  ) => Effect.Effect<void, AgentError.SendError>
  /** next-step, wakes. */
  readonly steer: (message: UserMessage) => Effect.Effect<void, AgentError.SendError>
  /** next-step, never wakes. */
  readonly inject: (message: UserMessage) => Effect.Effect<void, AgentError.SendError>
  /**
   * Cancels the current activity (and, unless `keepInbox`, the input pending at this call). It takes
   * effect when called (SEC-11): input sent after the call is never discarded by it, and input sent
   * waking after it runs once the cancelled activity has converged. Returns once the canceled splices
   * are durable and the interruption was requested.
   */
  readonly cancel: (
    cause: Exclude<CancelCause, { readonly kind: "disposed" }>,
    options?: { readonly keepInbox?: boolean | undefined }
  ) => Effect.Effect<void, SessionAppendError>
  /**
   * Starts a turn when the agent is idle and some pending message (either list) was sent waking
   * (a follow-up or a steer, not an inject); a no-op otherwise (HOST-03). So input accepted before a
   * crash or a shutdown runs after resume without a new message; `AgentHost` calls it on every
   * agent it resumes.
   *
   * @since 0.2.0
   */
  readonly wake: Effect.Effect<void>
  /**
   * Sends `message` as a follow-up (next turn, waking) and waits for the turn that claims it (one
   * turn per follow-up, in order) to end (APP-01). Succeeds with its {@link TurnResult} when it ends
   * `completed`; any other end fails `TurnFailed` with the partial result (a `preStep` hook's reject
   * is `blocked`). A message canceled before a turn claimed it fails `MessageDiscarded`; one parked
   * by `cancel({keepInbox: true})` keeps waiting for the turn that will claim it. Interrupting the
   * caller leaves the turn running unless `cancelOnInterrupt`. A string is sent as `Message.user`.
   *
   * @since 0.3.0
   */
  readonly run: {
    /**
     * OUT-01: with `output`, the turn's answer is decoded with that Schema: `result.output` is its
     * value (an answer that never decodes ends the turn `error {code: "OUTPUT_INVALID"}`, OUT-02).
     */
    <A, I>(
      message: UserMessage | string,
      options: RunOptions & { readonly output: Schema.Schema<A, I, never> }
    ): Effect.Effect<TypedTurnResult<A>, AgentError.RunError>
    (message: UserMessage | string, options?: RunOptions | undefined): Effect.Effect<TurnResult, AgentError.RunError>
  }
  /**
   * `run` as a stream of the claiming turn's parts (APP-02): `TextDelta`, `ReasoningDelta`,
   * `ToolCallStarted`, `ToolCallFinished`, `Retry`, `StepFinished` and, last, `TurnFinished` with
   * the `TurnResult`; it fails as `run` does. It listens before it sends, so no part is lost, and
   * two streams on one agent each see only their own turn. The message is sent when the stream
   * starts; a consumer that stops early leaves the turn running unless `cancelOnInterrupt`.
   *
   * @since 0.3.0
   */
  readonly stream: (
    message: UserMessage | string,
    options?: RunOptions | undefined
  ) => Stream.Stream<TurnPart, AgentError.RunError>
  /**
   * The result of turn `turn`, derived from the log (APP-01): the same value `run` returned for it,
   * also after a restart; `None` while it runs or when there is no such turn.
   *
   * @since 0.3.0
   */
  readonly turnResult: (turn: number) => Effect.Effect<Option.Option<TurnResult>>
  /**
   * Waits for turn `turn` to end, as `run` waits for its own (APP-01): at once when it has ended,
   * `TurnNotFound` when the log has no such turn.
   *
   * @since 0.3.0
   */
  readonly awaitTurn: (turn: number) => Effect.Effect<TurnResult, AgentError.AwaitTurnError>
  /** Resolves when no activity remains; never fails. */
  readonly whenIdle: Effect.Effect<void>
  /** Runs `task` exclusively while the agent is idle. */
  readonly runMaintenance: <A, E, R>(
    task: Effect.Effect<A, E, R>
  ) => Effect.Effect<
    A,
    E | AgentError.AgentBusy | AgentError.AgentCanceled | AgentError.AgentInactive | AgentError.AgentBroken,
    R
  >
  /**
   * Compacts now, between turns (CMP-01): claims the agent like `runMaintenance` (`AgentBusy` when
   * it is not idle; `cancel` interrupts it: `AgentCanceled`), asks the model for a summary of the
   * closed turns before the last `keepLastTurns` (the policy's, unless given), appends one
   * `session/compacted` event and publishes `Compacted`. `None` when there is nothing new to
   * compact (too few closed turns since the last compaction). Fails with the summarizer's
   * `ModelError` (`NO_ROUTE` when the agent has no provider/model yet), or the append's error;
   * nothing is written then. Invalid `options` fail `InvalidAgentOptions` before anything is claimed.
   *
   * @since 0.2.0
   */
  readonly compact: (
    options?: Compaction.CompactOptions | undefined
  ) => Effect.Effect<
    Option.Option<Compaction.Compacted>,
    | AgentError.InvalidAgentOptions
    | AgentError.ModelError
    | SessionAppendError
    | AgentError.AgentBusy
    | AgentError.AgentCanceled
    | AgentError.AgentInactive
    | AgentError.AgentBroken
  >
  /**
   * Creates an owned child, disposed with this agent (OWN-03). With `resume: true` (PKG-03) a child
   * whose session is stored is resumed instead (else created), owned all the same: the way to bring
   * an owned child back after a restart. As with `registry.resumeOrCreate`, `seed`, `meta` and
   * `fork` only apply when it is created; a child that is live already fails `SessionAlreadyLive`.
   */
  readonly spawn: {
    <E = never, R = never>(
      options: SpawnOptions<E, R> & { readonly resume?: false | undefined }
    ): Effect.Effect<AgentHandle, AgentError.CreateError | E, Exclude<R, Scope.Scope>>
    <E = never, R = never>(
      options: SpawnOptions<E, R> & { readonly resume: boolean }
    ): Effect.Effect<AgentHandle, AgentError.CreateError | AgentError.ResumeError | E, Exclude<R, Scope.Scope>>
  }
  /** Creates an agent seeded from this one's log (FORK-01), owned by the caller's Scope. */
  readonly fork: <E = never, R = never>(
    options:
      & { readonly childId: SessionId | string; readonly upTo?: number | undefined }
      & Omit<CreateOptions<E, R>, "sessionId" | "fork">
  ) => Effect.Effect<AgentHandle, AgentError.CreateError | E, Scope.Scope | Exclude<R, Scope.Scope>>
  /**
   * Answers the question `requestId` that a tool asked with `Tool.ask` (HIL-03): `value` is decoded
   * with the tool's own Schema (a failure is `InvalidResponse` and writes nothing; the question stays
   * pending), then `tool/input-provided` is logged and the tool's `ask` returns the decoded value.
   * The same answer again succeeds with `{duplicate: true}` and writes nothing; another answer to a
   * settled question fails `InputAlreadyProvided`; an id the session never asked fails
   * `InputNotFound`. A question that is pending in the log while its tool is being run again after
   * a restart is answered once the tool reached its `ask` again.
   *
   * @since 0.3.0
   */
  readonly respond: (
    requestId: string,
    value: unknown
  ) => Effect.Effect<Pending.Decision, AgentError.RespondError>
  /**
   * Declines the question `requestId` (HIL-03): its `ask` fails `QuestionDeclined` (with `reason`,
   * which the log does not keep). Idempotent as `respond`.
   *
   * @since 0.3.0
   */
  readonly decline: (
    requestId: string,
    options?: { readonly reason?: string | undefined } | undefined
  ) => Effect.Effect<Pending.Decision, AgentError.DeclineError>
  /**
   * Approves the call `callId` (or its `approvalId`) that waits for approval: logs
   * `tool/approval-decided {decision: "approved"}` and the call runs — with `arguments` (JSON text,
   * decoded with the tool's parameters: `InvalidApprovalArguments` otherwise) in place of the
   * model's. The same decision again returns `{duplicate: true}`; a different one fails
   * `ApprovalAlreadyDecided`; an unknown id `ApprovalNotFound`; none of these writes anything.
   *
   * @since 0.3.0
   */
  readonly approve: (
    callId: string,
    options?: { readonly reason?: string | undefined; readonly arguments?: string | undefined } | undefined
  ) => Effect.Effect<Pending.Decision, AgentError.ApproveError>
  /**
   * Rejects the call `callId` (or its `approvalId`): logs `tool/approval-decided {decision:
   * "rejected"}`; the call gets its `tool/call` and an error result `REJECTED` whose text is
   * `message` (what the model sees). With `endTurn`, the turn ends once that result is written.
   * Idempotent as `approve` is.
   *
   * @since 0.3.0
   */
  readonly reject: (
    callId: string,
    options?: {
      readonly reason?: string | undefined
      readonly message?: string | undefined
      readonly endTurn?: boolean | undefined
    } | undefined
  ) => Effect.Effect<Pending.Decision, AgentError.RejectError>
  /**
   * What waits for a person in the open step (approvals, questions), read from the log.
   *
   * @since 0.3.0
   */
  readonly pending: Effect.Effect<ReadonlyArray<Pending.Item>>
  /** Per-agent tools, scoped registrations. */
  readonly tools: ToolRegistryShape
  /** Per-agent hooks, scoped registrations. */
  readonly hooks: LoopHooksShape
}

/**
 * An agent as a layer (SPEC §7.4): building the layer creates the agent (or, with `resume: true`,
 * resumes it when stored and creates it otherwise) owned by the layer's Scope; releasing the layer
 * disposes it. So an application provides an agent to its services like any other dependency.
 *
 * @example
 * ```ts
 * import { Context, Effect, Layer } from "effect"
 * import { Agent, AgentRuntime, Message, Model } from "effect-agent"
 *
 * class Assistant extends Context.Tag("app/Assistant")<Assistant, Agent.Agent>() {}
 *
 * const AssistantLive = Agent.layer(Assistant, {
 *   sessionId: "assistant",
 *   options: { provider: "scripted", model: "demo" }
 * })
 *
 * const program = Effect.gen(function*() {
 *   const assistant = yield* Assistant
 *   yield* assistant.followup(Message.user("hello"))
 *   yield* assistant.whenIdle
 * })
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <I, E = never, R = never>(
  tag: Context.Tag<I, Agent>,
  options: CreateOptions<E, R> & { readonly resume?: boolean | undefined }
): Layer.Layer<I, AgentError.CreateError | AgentError.ResumeError | E, AgentRegistry | Exclude<R, Scope.Scope>> =>
  Layer.scoped(
    tag,
    Effect.gen(function*() {
      const registry = yield* AgentRegistry
      const { resume, ...createOptions } = options
      const handle = resume === true
        ? yield* registry.resumeOrCreate(createOptions)
        : yield* registry.create(createOptions)
      return handle.agent
    })
  )
