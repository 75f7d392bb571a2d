/**
 * A drain (TURN-07, DLV-06): the activity that runs the opened turn, then further turns while
 * follow-ups are pending, and ends by handing over to a latched wake or going idle — each decision
 * under the state lock, so a send either joins the drain or starts the next one.
 *
 * @internal
 */
import { Cause, Effect, Exit, Option } from "effect"
import { request } from "./activity.js"
import { applyLoggedDecisions } from "./approvals.js"
import type { DriverState, Phase } from "./state.js"
import { idle, markBroken, modifyPhase, setStatus, updatePhase } from "./state.js"
import type { TurnOutcome } from "./turn.js"
import type { TurnContext } from "./turnContext.js"
import { isUndecided } from "./turnContext.js"
import { runTurn } from "./turn.js"

/**
 * A drain: the opened turn, then further turns while follow-ups are pending (TURN-07). Ends by
 * handing over to a latched wake or going idle.
 *
 * @internal
 */
export const drain = (state: DriverState, firstTurn: number, resumed?: TurnContext): Effect.Effect<void> =>
  Effect.gen(function*() {
    let turn = firstTurn
    let ctx = resumed
    while (true) {
      const outcome = yield* state.deps.withInitiator(runTurn(state, turn, ctx)).pipe(
        Effect.catchAllCause((cause) =>
          Effect.as(markBroken(state, Cause.squash(cause), turn), Option.none<TurnOutcome>())
        )
      )
      const next = yield* modifyPhase(state, (phase) =>
        Option.isSome(outcome) && outcome.value.suspended !== undefined
          ? suspendOrGoOn(state, phase, outcome.value.suspended)
          : nextTurn(state, phase, outcome))
      if (Option.isNone(next)) return
      turn = next.value.turn
      ctx = next.value.ctx
    }
  })

/**
 * HIL-04, under the state lock: a turn that stopped suspended goes on at once when a decision came
 * after it last looked (or a cancel, or `endTurn`), unless the agent is being disposed (a disposed
 * agent's suspended turn stays open, writing nothing); else the phase becomes `Suspended`.
 */
const suspendOrGoOn = (state: DriverState, phase: Phase, ctx: TurnContext) =>
  Effect.gen(function*() {
    const cause = phase._tag === "Running" ? phase.activity.cause : Option.none()
    const canceled = Option.isSome(cause) && cause.value.kind !== "disposed"
    applyLoggedDecisions(state.sessionCore.log(), ctx)
    const runnable = ctx.calls.some((call) => call.state === "waiting" && !isUndecided(call))
    if (!state.disposing && Option.isNone(state.broken) && (canceled || runnable || ctx.endTurn)) {
      return [Option.some({ turn: ctx.turn, ctx }), phase] as const
    }
    yield* setStatus(state, "awaiting-input")
    const suspended: Phase = { _tag: "Suspended", ctx }
    return [Option.none<Next>(), suspended] as const
  })

interface Next {
  readonly turn: number
  readonly ctx: TurnContext | undefined
}

/**
 * TURN-07, under the state lock: the next turn's number once its `turn/start` is written, when the
 * turn ended normally and follow-ups are pending; else the drain settles (`settle`).
 */
const nextTurn = (state: DriverState, phase: Phase, outcome: Option.Option<TurnOutcome>) =>
  Effect.gen(function*() {
    const continues = Option.isSome(outcome) && outcome.value.continues &&
      !state.disposing && Option.isNone(state.broken) && phase._tag === "Running" &&
      Option.isNone(phase.activity.cause)
    if (continues && (yield* state.deps.inbox.hasPending)) {
      const turn = state.sessionCore.lastTurn() + 1
      const opened = yield* Effect.exit(state.sessionCore.appendCore([{ type: "turn/start", data: { turn } }]))
      if (Exit.isSuccess(opened)) return [Option.some<Next>({ turn, ctx: undefined }), phase] as const
      yield* markBroken(state, Cause.squash(opened.cause))
    }
    const [, settled] = yield* settle(state, phase)
    return [Option.none<Next>(), settled] as const
  })

/**
 * DLV-06, SEC-11: the latch of an activity. A cancelled one's is the waking input that arrived after
 * its latest cancel was called (input pending at that call stays parked, or was discarded); any
 * other's is the flag a waking send during maintenance set (AGT-04).
 */
const isLatched = (state: DriverState, phase: Phase): boolean =>
  (phase._tag === "Running" || phase._tag === "Maintenance") && (Option.isSome(phase.activity.cause)
    ? state.deps.inbox.hasPendingWakingFrom(phase.activity.cancelMark)
    : phase.wakeRequested)

/**
 * DLV-06: the current activity converged: start the latched wake as a new activity, still
 * `running`, or go idle. Runs under the state lock (`modifyPhase`).
 *
 * @internal
 */
export const settle = (state: DriverState, phase: Phase) =>
  Effect.gen(function*() {
    const latched = isLatched(state, phase)
    if (latched && !state.disposing && Option.isNone(state.broken) && (yield* state.deps.inbox.hasPending)) {
      const opened = yield* startDrain(state)
      if (Option.isSome(opened)) return [Option.none<number>(), opened.value] as const
    }
    yield* setStatus(state, "idle")
    return [Option.none<number>(), idle] as const
  })

/** Writes `turn/start` of the next turn and requests a drain for it (under the state lock). @internal */
export const startDrain = (state: DriverState) =>
  Effect.gen(function*() {
    const turn = state.sessionCore.lastTurn() + 1
    const opened = yield* Effect.exit(state.sessionCore.appendCore([{ type: "turn/start", data: { turn } }]))
    if (Exit.isFailure(opened)) {
      yield* markBroken(state, Cause.squash(opened.cause))
      return Option.none<Phase>()
    }
    yield* setStatus(state, "running")
    const activity = yield* request(state, drain(state, turn))
    return Option.some<Phase>({ _tag: "Running", activity, wakeRequested: false })
  })

/**
 * What a latched wake does once the gate is open: a drain for what is pending, if idle (the wake of a
 * send made by the creation's own hooks, AGT-04, PUB-11).
 *
 * @internal
 */
export const wakeIfIdle = (state: DriverState): Effect.Effect<void> =>
  updatePhase(state, (phase) =>
    Effect.gen(function*() {
      if (phase._tag !== "Idle" || !(yield* state.deps.inbox.hasPending)) return phase
      const opened = yield* startDrain(state)
      return Option.getOrElse(opened, () => phase)
    }))
