/**
 * The driver of one agent: one state machine (`Idle | Maintenance | Running`) changed under one lock
 * (as a SynchronizedRef would be, `driver/state.ts`); its activities requested under that lock and
 * started by one drain fiber that takes wake-ups from a `Queue` (CORE-04) and observes how each ends
 * (CORE-01, `driver/activity.ts`); cancellation as interruption plus a set-once cause
 * (`driver/verbs.ts`), and the turn/step loop (SPEC §8: `driver/drain.ts`, `driver/turn.ts`,
 * `driver/model.ts`, `driver/tools.ts`, `driver/closers.ts`).
 *
 * @internal
 */
import type { Option } from "effect"
import { Effect } from "effect"
import type { SendOptions } from "../../../Agent.js"
import type * as AgentError from "../../../AgentError.js"
import type { AgentStatus } from "../../../AgentEvent.js"
import type * as Compaction from "../../../Compaction.js"
import type { UserMessage } from "../../../Message.js"
import type * as SessionError from "../../../SessionError.js"
import type { CancelCause, InboxTarget } from "../../../SessionEvent.js"
import type { DriverDeps } from "./state.js"
import { DriverState, unusable } from "./state.js"
import type { SessionCore } from "../../log/session.js"
import * as compaction from "../compaction.js"
import * as questions from "./questions.js"
import * as turnOptions from "./turnOptions.js"
import * as verbs from "./verbs.js"
import * as approvals from "./approvals.js"
import * as decisions from "./decisions.js"
import type * as Pending from "../../../Pending.js"

export type { DriverDeps } from "./state.js"

/** @internal */
export interface Driver {
  readonly status: Effect.Effect<AgentStatus>
  readonly send: (message: UserMessage, target: InboxTarget, wake: boolean) => Effect.Effect<void, AgentError.SendError>
  /** OUT-01: the agent's own output format (its options', else its log's) and the Schema that decodes it. */
  readonly agentOutput: () => ReturnType<typeof turnOptions.agentOutput>
  /** APP-04, OUT-01: `send` of a message with its turn's own `settings` and `output` stored on it. */
  readonly sendWith: (
    message: UserMessage,
    target: InboxTarget,
    wake: boolean,
    options: Pick<SendOptions, "settings" | "output">
  ) => Effect.Effect<void, AgentError.SendError>
  readonly cancel: (
    cause: CancelCause,
    options?: { readonly keepInbox?: boolean | undefined }
  ) => Effect.Effect<void, SessionError.SessionAppendError>
  /** APP-01: cancels turn `turn` if it is the open one (keeping the inbox and the latch of what is pending). */
  readonly cancelTurn: (turn: number) => Effect.Effect<void, SessionError.SessionAppendError>
  /** APP-01: why the agent takes no input now (disposing or broken), if so. */
  readonly unusable: () => AgentError.AgentInactive | AgentError.AgentBroken | undefined
  /** The agent's session core: its log and turn bookkeeping, read synchronously (APP-01). */
  readonly sessionCore: SessionCore
  readonly whenIdle: Effect.Effect<void>
  readonly runMaintenance: <A, E, R>(
    task: Effect.Effect<A, E, R>
  ) => Effect.Effect<
    A,
    E | AgentError.AgentBusy | AgentError.AgentCanceled | AgentError.AgentInactive | AgentError.AgentBroken,
    R
  >
  /** CMP-01: `agent.compact`, a compaction between turns claiming the agent like `runMaintenance`. */
  readonly compact: (
    options: Compaction.CompactOptions | undefined
  ) => Effect.Effect<
    Option.Option<Compaction.Compacted>,
    | AgentError.InvalidAgentOptions
    | AgentError.ModelError
    | SessionError.SessionAppendError
    | AgentError.AgentBusy
    | AgentError.AgentCanceled
    | AgentError.AgentInactive
    | AgentError.AgentBroken
  >
  /** HIL-03: answers a tool's question. */
  readonly respond: (
    requestId: string,
    value: unknown
  ) => Effect.Effect<{ readonly duplicate: boolean }, AgentError.RespondError>
  /** HIL-03: declines a tool's question. */
  readonly decline: (
    requestId: string,
    options?: { readonly reason?: string | undefined }
  ) => Effect.Effect<{ readonly duplicate: boolean }, AgentError.DeclineError>
  /** HOST-03: starts a drain when idle and some pending message was sent waking; a no-op otherwise. */
  readonly wake: Effect.Effect<void>
  /** Publication finished (`true`) or was vetoed (`false`): releases gated senders (PUB-11). */
  readonly open: (published: boolean) => Effect.Effect<void>
  /** Teardown step 1 (LIFE-01/06): refuse new work, cancel with `disposed` keeping the inbox, await convergence. */
  readonly stop: Effect.Effect<void>
  /** Never had an activity: `stop` then only refuses new work, in one synchronous step (B1). */
  readonly neverActive: () => boolean
  readonly isActive: () => boolean
  /** OBS-02: the agent was torn down: its inbox leaves `Metrics.inboxDepth`. */
  readonly unmeter: () => void
  /** HIL-02: decides an approval request (by call id or approval id). */
  readonly decide: (
    ref: string,
    input: decisions.DecisionInput
  ) => Effect.Effect<
    Pending.Decision,
    | AgentError.ApprovalNotFound
    | AgentError.ApprovalAlreadyDecided
    | AgentError.InvalidApprovalArguments
    | AgentError.AgentInactive
    | SessionError.SessionAppendError
  >
  /** HIL-02: `decide` of a rejection (which never fails `InvalidApprovalArguments`). */
  readonly decideReject: (
    ref: string,
    input: Extract<decisions.DecisionInput, { readonly kind: "reject" }>
  ) => Effect.Effect<
    Pending.Decision,
    | AgentError.ApprovalNotFound
    | AgentError.ApprovalAlreadyDecided
    | AgentError.AgentInactive
    | SessionError.SessionAppendError
  >
  /** HIL-06: the pending items of the open step. */
  readonly pending: Effect.Effect<ReadonlyArray<Pending.Item>>
}

/**
 * The verbs over one state record. Its methods live on the prototype: a driver is two small objects,
 * not a closure per verb (B2). Call them on the driver (`driver.send(…)`), not detached.
 */
class DriverHandle implements Driver {
  constructor(private readonly state: DriverState) {}
  /** AGT-02: made when read (an idle agent holds none, B2). */
  get status(): Effect.Effect<AgentStatus> {
    return Effect.sync(() => this.state.status)
  }
  send(message: UserMessage, target: InboxTarget, wake: boolean) {
    return verbs.send(this.state, message, target, wake)
  }
  agentOutput() {
    return turnOptions.agentOutput(this.state)
  }
  sendWith(message: UserMessage, target: InboxTarget, wake: boolean, options: Pick<SendOptions, "settings" | "output">) {
    const state = this.state
    return Effect.flatMap(turnOptions.withTurnOptions(state, message, options), (withOptions) =>
      withOptions === message
        ? verbs.send(state, message, target, wake)
        : Effect.tapError(verbs.send(state, withOptions, target, wake), () =>
          Effect.sync(() => state.outputSchemas?.delete(message.id))))
  }
  cancel(cause: CancelCause, options?: { readonly keepInbox?: boolean | undefined }) {
    return verbs.cancel(this.state, cause, options)
  }
  cancelTurn(turn: number) {
    return verbs.cancelTurn(this.state, turn)
  }
  unusable() {
    return unusable(this.state)
  }
  get sessionCore() {
    return this.state.sessionCore
  }
  get whenIdle() {
    return verbs.whenIdle(this.state)
  }
  runMaintenance<A, E, R>(task: Effect.Effect<A, E, R>) {
    return verbs.runMaintenance(this.state, task)
  }
  compact(options: Compaction.CompactOptions | undefined) {
    return compaction.compactAgent((task) => verbs.runMaintenance(this.state, task), this.state.deps, options)
  }
  respond(requestId: string, value: unknown) {
    return questions.respond(this.state, requestId, value)
  }
  decline(requestId: string, options?: { readonly reason?: string | undefined }) {
    return questions.decline(this.state, requestId, options)
  }
  get wake() {
    return verbs.wake(this.state)
  }
  open(published: boolean) {
    return verbs.open(this.state, published)
  }
  get stop() {
    return verbs.stop(this.state)
  }
  unmeter() {
    this.state.deps.inbox.unmeter()
  }
  decide(ref: string, input: decisions.DecisionInput) {
    const state = this.state
    return Effect.flatMap(approvals.currentInitiator, (initiator) => decisions.decide(state, ref, input, initiator))
  }
  decideReject(ref: string, input: Extract<decisions.DecisionInput, { readonly kind: "reject" }>) {
    // a rejection carries no arguments to decode
    return Effect.catchIf(
      this.decide(ref, input),
      (e): e is AgentError.InvalidApprovalArguments => e._tag === "InvalidApprovalArguments",
      (e) => Effect.die(e)
    )
  }
  get pending() {
    const state = this.state
    return Effect.sync(() => approvals.pendingOf(state.deps.id, state.sessionCore.log()))
  }
  neverActive() {
    return this.state.phaseLock === undefined
  }
  isActive() {
    return !this.state.disposing
  }
}

/** @internal */
export const make = (deps: DriverDeps): Effect.Effect<Driver> => Effect.sync(() => unsafeMake(deps))

/**
 * `make` as a plain constructor: building a driver only allocates (its state machine, gate and
 * fibers are made on first use), so a caller already running an operation pays none (B1).
 *
 * @internal
 */
export const unsafeMake = (deps: DriverDeps): Driver => {
  const state = new DriverState(deps)
  state.armDeadline = (callId, deadline) => decisions.armDeadline(state, callId, deadline)
  // HIL-04: a resumed session whose turn waits for a person comes up suspended, with its pending items
  const suspended = approvals.resumeContext(state.sessionCore.log())
  if (suspended !== undefined) {
    state.phase = { _tag: "Suspended", ctx: suspended }
    state.status = "awaiting-input"
  }
  return new DriverHandle(state)
}
