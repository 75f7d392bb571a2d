/**
 * APP-02: `agent.stream`: the send of `run`, as the parts of the turn that claims its message. The
 * waiter of `run.ts` (listening before the send) hands on each live event of that turn, in the
 * publishing step, to a mapper that puts its parts in the stream's queue; `TurnEnded` becomes the
 * last part, with the result derived from the log, or the stream's `TurnFailed`.
 *
 * @internal
 */
import { Effect, Exit, Queue, Stream, Take } from "effect"
import type { Schema } from "effect"
import type { SendOptions } from "../../Agent.js"
import * as AgentError from "../../AgentError.js"
import type { AgentEvent } from "../../AgentEvent.js"
import type { UserMessage } from "../../Message.js"
import { TurnPart } from "../../TurnPart.js"
import * as run from "./run.js"

type Out = Take.Take<TurnPart, AgentError.RunError>

/** Maps one turn's live events to its parts, closing each step before the next one's first part. */
class PartMapper {
  step = 0
  constructor(
    readonly deps: run.RunDeps,
    readonly queue: Queue.Queue<Out>,
    readonly output: Schema.Schema<any, any, never> | undefined
  ) {}
  private put(part: TurnPart): void {
    Queue.unsafeOffer(this.queue, Take.of(part))
  }
  /** Parts of step `step` begin: the step before it (if any) has finished. */
  private enter(step: number): void {
    if (step <= this.step) return
    if (this.step > 0) this.put(TurnPart.StepFinished({ step: this.step }))
    this.step = step
  }
  event(event: AgentEvent): void {
    switch (event._tag) {
      case "ModelDelta": {
        this.enter(event.step)
        const part = event.kind === "text"
          ? TurnPart.TextDelta({ step: event.step, text: event.text })
          : TurnPart.ReasoningDelta({ step: event.step, text: event.text })
        return this.put(part)
      }
      case "ModelRetry":
        this.enter(event.step)
        return this.put(TurnPart.Retry({ step: event.step, attempt: event.attempt, code: event.code }))
      case "AssistantMessage":
        return this.enter(event.step)
      case "ToolCallStarted":
        this.enter(event.step)
        return this.put(TurnPart.ToolCallStarted({
          step: event.step,
          callId: event.callId,
          name: event.name,
          arguments: event.arguments
        }))
      case "ToolCallFinished":
        return this.put(TurnPart.ToolCallFinished({
          step: event.step,
          callId: event.callId,
          isError: event.isError,
          summary: event.summary
        }))
      case "TurnEnded":
        return this.end(event.turn, event.seq)
      default:
        return
    }
  }
  /** The turn's `turn/end` is durable: the last step's end, then its result or `TurnFailed`. */
  private end(turn: number, seq: number | undefined): void {
    if (this.step > 0) this.put(TurnPart.StepFinished({ step: this.step }))
    if (seq === undefined) return
    const outcome = run.outcomeOf(this.deps, { turn, endSeq: seq }, this.output)
    if (outcome instanceof AgentError.TurnFailed) {
      Queue.unsafeOffer(this.queue, Take.fail(outcome))
    } else {
      this.put(TurnPart.TurnFinished({ result: outcome }))
      Queue.unsafeOffer(this.queue, Take.end)
    }
  }
}

/**
 * APP-02: `agent.stream`.
 *
 * @internal
 */
export const stream = (
  deps: run.RunDeps,
  message: UserMessage,
  cancelOnInterrupt: boolean,
  turnOptions?: Pick<SendOptions, "settings" | "output"> | undefined
): Stream.Stream<TurnPart, AgentError.RunError> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Out>(), Queue.shutdown)
    const waiter = yield* run.listen(deps, message.id)
    const mapper = new PartMapper(deps, queue, run.ownSchema(turnOptions))
    waiter.forward = (event) => mapper.event(event)
    waiter.onFinish = (exit) => {
      if (Exit.isFailure(exit)) Queue.unsafeOffer(queue, Take.failCause(exit.cause))
    }
    // a consumer that stops early is the stream's interruption (`cancelOnInterrupt`, APP-01)
    if (cancelOnInterrupt) yield* Effect.addFinalizer(() => run.withdraw(waiter))
    // APP-04, OUT-01: the stream's own settings and output go with its message, as run's do
    yield* turnOptions?.settings !== undefined || turnOptions?.output !== undefined
      ? deps.driver.sendWith(message, "next-turn", true, turnOptions)
      : deps.driver.send(message, "next-turn", true)
    return Stream.flattenTake(Stream.fromQueue(queue))
  }))
