/**
 * APP-01: `agent.run`, `agent.awaitTurn` and `agent.turnResult`. A run listens to the agent's feed
 * before it sends (so nothing it waits for can pass unseen), learns which turn claims its message
 * from the inbox's own notifications — read in the claiming turn's step, when that turn is the open
 * one — and, once that turn's `TurnEnded` says its `turn/end` is durable, derives the result from the
 * log (`turnResult.ts`), exactly as a reader after a restart would.
 *
 * @internal
 */
import type { Schema, Scope } from "effect"
import { Cause, Deferred, Effect, Exit, FiberId, Option, Schema as SchemaModule } from "effect"
import * as AgentError from "../../AgentError.js"
import type { AgentEvent } from "../../AgentEvent.js"
import type { SendOptions } from "../../Agent.js"
import type { MessageId, UserMessage } from "../../Message.js"
import type { OutputFormat } from "../../ModelSettings.js"
import type { TurnResult } from "../../TurnResult.js"
import type { Driver } from "./driver/driver.js"
import type * as Feed from "../feed.js"
import type { InboxInternal } from "./inbox.js"
import type { SessionCore } from "../log/session.js"
import * as turnResult from "./turnResult.js"

/**
 * What a run needs of its agent.
 *
 * @internal
 */
export interface RunDeps {
  readonly id: string
  readonly driver: Driver
  readonly feed: Feed.Feed<AgentEvent>
  readonly inbox: InboxInternal
}

/**
 * OUT-01: how this agent's results decode their output: the run's own Schema for the turn it asked
 * it of, else the agent's `output` Schema for the agent's format, else the JSON as it is.
 */
const decodingOf = (deps: RunDeps, own?: Schema.Schema<any, any, never> | undefined): turnResult.OutputDecoding => {
  const agent = deps.driver.agentOutput()
  return {
    agent: agent.output,
    schemaOf: (format) =>
      own !== undefined
        ? own
        : agent.schema !== undefined && agent.output !== undefined && sameFormat(format, agent.output)
        ? agent.schema
        : undefined
  }
}

const sameFormat = (a: OutputFormat, b: OutputFormat): boolean =>
  a === b || (a.name === b.name && JSON.stringify(a.schema) === JSON.stringify(b.schema))

/**
 * OUT-01: the Schema a run or stream was given for its output, if any (an `OutputFormat` given as
 * data has none: its answer is JSON as it is).
 *
 * @internal
 */
export const ownSchema = (
  turnOptions: Pick<SendOptions, "output"> | undefined
): Schema.Schema<any, any, never> | undefined =>
  turnOptions?.output !== undefined && SchemaModule.isSchema(turnOptions.output) ? turnOptions.output : undefined

/** How a waited-for turn ended: its number and the seq of its `turn/end`. */
interface Ended {
  readonly turn: number
  readonly endSeq: number
}

type WaitError = AgentError.MessageDiscarded | AgentError.AgentInactive | AgentError.AgentBroken

/**
 * One waiter on the agent's feed: for a run, the message it sent (its turn is learnt from the
 * claim); for `awaitTurn`, the turn itself. Updated by its listener in the publishing step.
 *
 * @internal
 */
export class Waiter {
  turn: number | undefined
  settled = false
  readonly done = Deferred.unsafeMake<Ended, WaitError>(FiberId.none)
  constructor(readonly deps: RunDeps, readonly messageId: MessageId | undefined, turn?: number) {
    this.turn = turn
  }
  /** The turn's number became known (APP-03: its error is received by this caller). */
  claim(turn: number): void {
    this.turn = turn
    receiversOf(this.deps.driver.sessionCore).add(this)
  }
  /** APP-02: the waiter of a stream hands each event of its turn on (in the publishing step). */
  forward: ((event: AgentEvent) => void) | undefined = undefined
  /** APP-02: and is told how the wait ended. */
  onFinish: ((exit: Exit.Exit<Ended, WaitError>) => void) | undefined = undefined
  finish(exit: Exit.Exit<Ended, WaitError>): void {
    if (this.settled) return
    this.settled = true
    Deferred.unsafeDone(this.done, exit)
    this.onFinish?.(exit)
  }
  /** One live event of the agent (runs in the publishing step: no Effect, no throw). */
  see(event: AgentEvent): void {
    if (this.settled) return
    const forward = this.forward
    if (forward !== undefined && this.turn !== undefined && "turn" in event && event.turn === this.turn) {
      forward(event)
    }
    this.track(event)
  }
  private track(event: AgentEvent): void {
    switch (event._tag) {
      case "InboxClaimed": {
        if (this.turn === undefined && this.messageId !== undefined && event.messages.some(this.isMine, this)) {
          this.claim(event.turn)
        }
        return
      }
      case "InboxDiscarded": {
        if (this.turn !== undefined || this.messageId === undefined || !event.ids.includes(this.messageId)) return
        if (event.outcome === "canceled") {
          return this.finish(Exit.fail(new AgentError.MessageDiscarded({ id: this.deps.id, messageId: this.messageId })))
        }
        // rejected by a preStep hook (or replaced by it): the turn whose step is open now is the run's
        const open = this.deps.driver.sessionCore.openTurn()
        if (open !== undefined) this.claim(open)
        return
      }
      case "TurnEnded": {
        if (event.turn === this.turn && event.seq !== undefined) {
          this.finish(Exit.succeed({ turn: event.turn, endSeq: event.seq }))
        }
        return
      }
      case "AgentError": {
        const reason = this.deps.driver.unusable()
        if (reason !== undefined && reason._tag === "AgentBroken") this.finish(Exit.fail(reason))
        return
      }
      default:
        return
    }
  }
  private isMine(message: UserMessage): boolean {
    return message.id === this.messageId
  }
  readonly listener: Feed.Listener<AgentEvent> = {
    one: (event) => this.see(event),
    many: (events) => {
      for (const event of events) this.see(event)
    },
    end: () => this.finish(Exit.fail(new AgentError.AgentInactive({ id: this.deps.id })))
  }
}

/** APP-03: the waiters that know their turn, per session: a turn error one of them receives is not logged. */
const receivers = new WeakMap<SessionCore, Set<Waiter>>()

const receiversOf = (core: SessionCore): Set<Waiter> => {
  let set = receivers.get(core)
  if (set === undefined) {
    set = new Set()
    receivers.set(core, set)
  }
  return set
}

/**
 * APP-03: whether a `run`/`stream` (or `awaitTurn`) caller waits for turn `turn` of this session.
 *
 * @internal
 */
export const isReceived = (core: SessionCore, turn: number): boolean => {
  const set = receivers.get(core)
  if (set === undefined) return false
  for (const waiter of set) if (waiter.turn === turn) return true
  return false
}

/**
 * Listens with a new waiter on the agent's feed for as long as the Scope is open.
 *
 * @internal
 */
export const listen = (
  deps: RunDeps,
  messageId: MessageId | undefined,
  turn?: number
): Effect.Effect<Waiter, never, Scope.Scope> =>
  Effect.suspend(() => {
    const waiter = new Waiter(deps, messageId, turn)
    if (turn !== undefined) waiter.claim(turn)
    return Effect.as(
      Effect.zipRight(
        deps.feed.listen(waiter.listener),
        Effect.addFinalizer(() => Effect.sync(() => receivers.get(deps.driver.sessionCore)?.delete(waiter)))
      ),
      waiter
    )
  })

/**
 * The result of a turn that ended, or `TurnFailed` with it as `partial` when it did not complete:
 * a plain function, so a stream's listener can call it in the publishing step.
 *
 * @internal
 */
export const outcomeOf = (
  deps: RunDeps,
  ended: Ended,
  own?: Schema.Schema<any, any, never> | undefined
): TurnResult | AgentError.TurnFailed => {
  const result = turnResult.fromLog(deps.driver.sessionCore.log(), ended.turn, ended.endSeq, decodingOf(deps, own))
  if (result === undefined) {
    throw new Error(`bug: turn ${ended.turn} of ${deps.id} ended, but its turn/end is not in the log`)
  }
  return result.reason.kind === "completed"
    ? result
    : new AgentError.TurnFailed({ id: deps.id, turn: result.turn, reason: result.reason, partial: result })
}

/**
 * The result of a turn that ended: success when `completed`, else `TurnFailed` with it as `partial`.
 *
 * @internal
 */
export const settle = (
  deps: RunDeps,
  ended: Ended,
  own?: Schema.Schema<any, any, never> | undefined
): Effect.Effect<TurnResult, AgentError.TurnFailed> =>
  Effect.suspend(() => {
    const outcome = outcomeOf(deps, ended, own)
    return outcome instanceof AgentError.TurnFailed ? Effect.fail(outcome) : Effect.succeed(outcome)
  })

/**
 * `cancelOnInterrupt`: withdraw the run's own message while it is pending, else cancel its own turn
 * while it runs (APP-01). A removal that finds the message claimed already knows its turn: the claim
 * was published under the inbox lock the removal took.
 *
 * @internal
 */
export const withdraw = (waiter: Waiter): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (waiter.settled) return Effect.void
    const { driver, inbox } = waiter.deps
    const cancelOwnTurn = Effect.suspend(() =>
      waiter.turn === undefined || waiter.settled ? Effect.void : driver.cancelTurn(waiter.turn)
    )
    const removed = waiter.turn === undefined && waiter.messageId !== undefined
      ? inbox.remove(waiter.messageId)
      : Effect.succeed(false)
    return Effect.flatMap(removed, (gone) => gone ? Effect.void : cancelOwnTurn).pipe(
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.void
          : Effect.logWarning(`effect-agent: cancelOnInterrupt could not withdraw a run of agent ${waiter.deps.id}`, cause)
      )
    )
  })

/**
 * APP-01: `agent.run`.
 *
 * @internal
 */
export const run = (
  deps: RunDeps,
  message: UserMessage,
  cancelOnInterrupt: boolean,
  turnOptions?: Pick<SendOptions, "settings" | "output"> | undefined
): Effect.Effect<TurnResult, AgentError.RunError> =>
  Effect.scoped(Effect.gen(function*() {
    const waiter = yield* listen(deps, message.id)
    // APP-04, OUT-01: the run's own settings and output go with its message
    yield* turnOptions?.settings !== undefined || turnOptions?.output !== undefined
      ? deps.driver.sendWith(message, "next-turn", true, turnOptions)
      : deps.driver.send(message, "next-turn", true)
    const wait = Deferred.await(waiter.done)
    const ended = yield* cancelOnInterrupt ? Effect.onInterrupt(wait, () => withdraw(waiter)) : wait
    return yield* settle(deps, ended, ownSchema(turnOptions))
  }))

/**
 * APP-01: `agent.turnResult`: the result of a turn that ended, from the log.
 *
 * @internal
 */
export const resultOf = (deps: RunDeps, turn: number): Effect.Effect<Option.Option<TurnResult>> =>
  Effect.sync(() => Option.fromNullable(turnResult.fromLog(deps.driver.sessionCore.log(), turn, undefined, decodingOf(deps))))

/**
 * APP-01: `agent.awaitTurn`: the result of an ended turn at once; of the open one when it ends.
 *
 * @internal
 */
export const awaitTurn = (deps: RunDeps, turn: number): Effect.Effect<TurnResult, AgentError.AwaitTurnError> =>
  Effect.scoped(Effect.gen(function*() {
    // listening first: a turn open at the look below ends after it, in the listener's sight
    const waiter = yield* listen(deps, undefined, turn)
    const core = deps.driver.sessionCore
    const location = turnResult.locate(core.log(), turn)
    if (location._tag === "Ended") return yield* settle(deps, { turn, endSeq: location.to })
    if (location._tag === "Absent") {
      return yield* new AgentError.TurnNotFound({ id: deps.id, turn, lastTurn: core.lastTurn() })
    }
    const broken = deps.driver.unusable()
    if (broken !== undefined && broken._tag === "AgentBroken") return yield* broken
    const ended = yield* Effect.catchTag(
      Deferred.await(waiter.done),
      "MessageDiscarded",
      () => Effect.dieMessage("bug: awaitTurn's waiter has no message to discard")
    )
    return yield* settle(deps, ended)
  }))
