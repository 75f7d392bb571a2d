/**
 * HIL-03: questions from tools. Each running call gets a question channel (`CallChannel`, provided
 * to its body as `CurrentCall`): `ask` logs `tool/input-requested` and waits for the settlement
 * `respond`, `decline`, its timeout or the turn's end writes as `tool/input-provided`. A call that
 * runs again after a restart is given its logged questions: the n-th `ask` is matched with the n-th
 * logged question by a hash of its question and JSON Schema; a logged answer is returned at once, a
 * pending question is waited for again (asked nothing twice), and a mismatch ends the call
 * `ASK_REPLAY_MISMATCH`. Time spent waiting does not count against the tool's `timeout`.
 *
 * @internal
 */
import type { Array as Arr } from "effect"
import { Cause, Clock, Deferred, Duration, Effect, Either, Exit, FiberId, Option, ParseResult, Schema } from "effect"
import * as AgentError from "../../../AgentError.js"
import { AgentEvent } from "../../../AgentEvent.js"
import type { SessionAppendError } from "../../../SessionError.js"
import type { CoreEventInput, InputOutcome, JsonRecord, JsonValue, SessionEvent } from "../../../SessionEvent.js"
import { snapshot } from "../../json.js"
import type { AskRequest, QuestionChannel } from "../ask.js"
import { answerJsonSchema, askHash, canonicalJson } from "../ask.js"
import type { SessionId } from "../../../Message.js"
import type { SessionCore } from "../../log/session.js"
import type { DriverState } from "./state.js"
import { unusable } from "./state.js"
import { LogWriteFailed } from "./turnContext.js"

/** How a question was settled, as its `ask` sees it. @internal */
export type Settlement =
  | { readonly outcome: "provided"; readonly value: unknown }
  | { readonly outcome: "declined"; readonly reason?: string | undefined }
  | { readonly outcome: "timeout" }
  | { readonly outcome: "canceled" }

/** A question of a call as the log has it: what replay gives the call's n-th `ask`. @internal */
export interface LoggedQuestion {
  readonly requestId: string
  readonly question: string
  readonly jsonSchema: JsonRecord
  readonly deadline?: number | undefined
  readonly settled?: { readonly outcome: InputOutcome; readonly value?: JsonValue | undefined } | undefined
}

/** A question a call waits on in this process. @internal */
export interface LiveQuestion {
  readonly requestId: string
  readonly callId: string
  readonly turn: number
  readonly step: number
  /** Decodes an answer with the asking tool's own Schema. */
  readonly decode: (value: unknown) => Either.Either<unknown, string>
  readonly answer: Deferred.Deferred<Settlement>
  /** Set (synchronously) by the first settlement: a second one finds it and writes nothing. */
  settled: boolean
}

/**
 * The live questions of an agent and the signal of any change to them (a question registered or
 * settled, the turn ended): what a `respond` waits on when the log has a question not live yet.
 *
 * @internal
 */
export class QuestionBook {
  readonly live = new Map<string, LiveQuestion>()
  changed: Deferred.Deferred<void> | undefined = undefined
}

/**
 * What questions need of a driver: its log, its id and live events, and its book. A `DriverState`
 * is one; a test can make one over a real session.
 *
 * @internal
 */
export interface QuestionHost {
  readonly sessionCore: SessionCore
  readonly deps: { readonly id: SessionId; readonly emit: (event: AgentEvent) => Effect.Effect<void> }
  questions: QuestionBook | undefined
}

const bookOf = (state: QuestionHost): QuestionBook => state.questions ??= new QuestionBook()

const signalChange = (state: QuestionHost): void => {
  const book = state.questions
  if (book?.changed !== undefined) {
    Deferred.unsafeDone(book.changed, Exit.void)
    book.changed = undefined
  }
}

const awaitChange = (state: QuestionHost): Effect.Effect<void> =>
  Effect.suspend(() => Deferred.await(bookOf(state).changed ??= Deferred.unsafeMake<void>(FiberId.none)))

/** Why a call ends otherwise than its body says (HIL-03): its result instead of the body's. @internal */
export interface CallAbort {
  readonly name: string
  readonly code: string
  readonly text: string
}

/**
 * One call's question channel: its asks in order, what replay gives them, and the time spent
 * waiting (the tool's `timeout` excludes it).
 *
 * @internal
 */
export class CallChannel implements QuestionChannel {
  asked = 0
  /** Set when the call must end with this error result (a replay mismatch, a question the log refused). */
  abort: CallAbort | undefined = undefined
  /** A durable write of an ask failed: the agent is broken (SES-02b). */
  failure: LogWriteFailed | undefined = undefined
  /** Asks waiting now, since when, and the time spent waiting in asks that ended. */
  waiting = 0
  pausedAt = 0
  waitedMillis = 0
  resumed: Deferred.Deferred<void> | undefined = undefined
  constructor(
    readonly state: QuestionHost,
    readonly turn: number,
    readonly step: number,
    readonly callId: string,
    readonly replay: ReadonlyArray<LoggedQuestion>
  ) {}
  ask<A, I>(request: AskRequest<A, I>): Effect.Effect<A, AgentError.QuestionDeclined | AgentError.QuestionTimedOut> {
    return askOn(this, request)
  }
}

/** @internal */
export const makeChannel = (
  state: QuestionHost,
  turn: number,
  step: number,
  callId: string,
  replay: ReadonlyArray<LoggedQuestion>
): CallChannel => new CallChannel(state, turn, step, callId, replay)

const decoderOf = <A, I>(schema: Schema.Schema<A, I, never>) => {
  const decode = Schema.decodeUnknownEither(schema)
  return (value: unknown): Either.Either<unknown, string> =>
    Either.mapLeft(decode(value), (error) => ParseResult.TreeFormatter.formatErrorSync(error))
}

/** Ends the call with `abort` (its result), from inside its body: the body is interrupted. */
const abandon = (channel: CallChannel, abort: CallAbort): Effect.Effect<never> =>
  Effect.suspend(() => {
    channel.abort ??= abort
    return Effect.interrupt
  })

const mismatch = (channel: CallChannel, position: number, detail: string): Effect.Effect<never> =>
  abandon(channel, {
    name: "AskReplayMismatch",
    code: "ASK_REPLAY_MISMATCH",
    text: `The tool ran again after a restart and its ask #${position + 1} ${detail}, so its logged answers ` +
      "cannot be used and nobody was asked again. The tool's run must ask the same questions in the same " +
      "order each time it runs; call it again if it is still needed."
  })

/** What an `ask` returns for a settlement. */
const outcomeOf = <A>(
  requestId: string,
  settlement: Settlement
): Effect.Effect<A, AgentError.QuestionDeclined | AgentError.QuestionTimedOut> => {
  switch (settlement.outcome) {
    case "provided":
      return Effect.succeed(settlement.value as A)
    case "declined":
      return Effect.fail(
        new AgentError.QuestionDeclined(
          settlement.reason === undefined ? { requestId } : { requestId, reason: settlement.reason }
        )
      )
    case "timeout":
      return Effect.fail(new AgentError.QuestionTimedOut({ requestId }))
    case "canceled":
      return Effect.interrupt
  }
}

/** The n-th `ask` of a call (HIL-03): replayed from the log when it has it, else asked now. */
const askOn = <A, I>(
  channel: CallChannel,
  request: AskRequest<A, I>
): Effect.Effect<A, AgentError.QuestionDeclined | AgentError.QuestionTimedOut> =>
  Effect.suspend(() => {
    const position = channel.asked++
    const jsonSchema = answerJsonSchema(request.schema)
    const decode = decoderOf(request.schema)
    const logged = channel.replay[position]
    if (logged === undefined) {
      return Effect.flatMap(requestNew(channel, request, jsonSchema, decode), (q) => waitFor<A>(channel, q.live, q.deadline))
    }
    if (askHash(logged.question, logged.jsonSchema) !== askHash(request.question, jsonSchema)) {
      return mismatch(channel, position, "is not the question it asked before (its text or its schema changed)")
    }
    const settled = logged.settled
    if (settled === undefined) {
      // pending in the log: wait for it again, asking nothing twice
      const live = register(channel, logged.requestId, decode)
      return waitFor<A>(channel, live, logged.deadline)
    }
    if (settled.outcome !== "provided") return outcomeOf<A>(logged.requestId, { outcome: settled.outcome })
    const value = decode(settled.value)
    if (Either.isLeft(value)) return mismatch(channel, position, `has a logged answer its schema refuses (${value.left})`)
    return Effect.succeed(value.right as A)
  })

const register = (
  channel: CallChannel,
  requestId: string,
  decode: (value: unknown) => Either.Either<unknown, string>
): LiveQuestion => {
  const live: LiveQuestion = {
    requestId,
    callId: channel.callId,
    turn: channel.turn,
    step: channel.step,
    decode,
    answer: Deferred.unsafeMake<Settlement>(FiberId.none),
    settled: false
  }
  bookOf(channel.state).live.set(requestId, live)
  signalChange(channel.state)
  return live
}

/** A new question: `tool/input-requested` made durable and the question registered, together. */
const requestNew = <A, I>(
  channel: CallChannel,
  request: AskRequest<A, I>,
  jsonSchema: JsonRecord,
  decode: (value: unknown) => Either.Either<unknown, string>
) =>
  Effect.uninterruptible(Effect.gen(function*() {
    const state = channel.state
    const now = yield* Clock.currentTimeMillis
    const deadline = request.timeout === undefined
      ? undefined
      : now + Duration.toMillis(Duration.decode(request.timeout))
    const requestId = `q-${globalThis.crypto.randomUUID()}`
    const data = {
      turn: channel.turn,
      step: channel.step,
      callId: channel.callId,
      requestId,
      question: request.question,
      jsonSchema,
      ...(deadline !== undefined ? { deadline } : {})
    }
    const written = yield* Effect.either(state.sessionCore.appendCore([{ type: "tool/input-requested", data }]))
    if (Either.isLeft(written)) {
      const error = written.left
      if (error._tag === "InvalidEventData") {
        return yield* abandon(channel, {
          name: "InvalidQuestion",
          code: "INVALID_QUESTION",
          text: `The tool asked a question that cannot be logged: ${error.message}`
        })
      }
      channel.failure = new LogWriteFailed({ cause: error })
      return yield* Effect.interrupt
    }
    const live = register(channel, requestId, decode)
    yield* state.deps.emit(AgentEvent.InputRequested({
      agent: state.deps.id,
      turn: channel.turn,
      step: channel.step,
      callId: channel.callId,
      requestId,
      question: request.question,
      jsonSchema,
      deadline,
      seq: written.right[0].seq
    }))
    return { live, deadline }
  }))

/** The tool's `timeout` stops counting while any of its asks waits. */
const pause = (channel: CallChannel) =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.sync(() => {
      if (channel.waiting++ === 0) channel.pausedAt = now
    }))

const resume = (channel: CallChannel) =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.sync(() => {
      if (--channel.waiting > 0) return
      channel.waitedMillis += now - channel.pausedAt
      if (channel.resumed !== undefined) {
        Deferred.unsafeDone(channel.resumed, Exit.void)
        channel.resumed = undefined
      }
    }))

/** Waits for a question's settlement; at its deadline, settles it as `timeout` (HIL-03). */
const waitFor = <A>(
  channel: CallChannel,
  live: LiveQuestion,
  deadline: number | undefined
): Effect.Effect<A, AgentError.QuestionDeclined | AgentError.QuestionTimedOut> => {
  const timer = deadline === undefined ? Effect.never : Clock.currentTimeMillis.pipe(
    Effect.flatMap((now) => Effect.sleep(Duration.millis(Math.max(0, deadline - now)))),
    Effect.zipRight(Effect.catchAll(settle(channel.state, live, { outcome: "timeout" }, undefined), (error) =>
      Effect.suspend(() => {
        channel.failure ??= new LogWriteFailed({ cause: error })
        return Effect.interrupt
      }))),
    Effect.zipRight(Effect.never)
  )
  return pause(channel).pipe(
    Effect.zipRight(Effect.raceFirst(Deferred.await(live.answer), timer)),
    Effect.ensuring(resume(channel)),
    Effect.flatMap((settlement) => outcomeOf<A>(live.requestId, settlement))
  )
}

/**
 * Settles a live question (once: a second settlement finds it settled and returns false): its
 * `tool/input-provided` made durable, then its `ask` resumed and `InputProvided` announced.
 *
 * @internal
 */
export const settle = (
  state: QuestionHost,
  live: LiveQuestion,
  settlement: Settlement,
  value: JsonValue | undefined
) =>
  Effect.uninterruptible(Effect.suspend(() => {
    if (live.settled) return Effect.succeed(false)
    live.settled = true
    const data = {
      turn: live.turn,
      step: live.step,
      callId: live.callId,
      requestId: live.requestId,
      outcome: settlement.outcome,
      ...(value !== undefined ? { value } : {})
    }
    return Effect.matchCauseEffect(state.sessionCore.appendCore([{ type: "tool/input-provided", data }]), {
      onFailure: (cause) => {
        live.settled = false
        signalChange(state)
        return Effect.failCause(cause)
      },
      onSuccess: ([event]) => {
        settled(state, live, settlement)
        return Effect.as(state.deps.emit(providedEvent(state, event)), true)
      }
    })
  }))

/** A settlement is durable: the question leaves the book and its `ask` resumes. */
const settled = (state: QuestionHost, live: LiveQuestion, settlement: Settlement): void => {
  state.questions?.live.delete(live.requestId)
  Deferred.unsafeDone(live.answer, Exit.succeed(settlement))
  signalChange(state)
}

const providedEvent = (state: QuestionHost, event: SessionEvent): AgentEvent => {
  const data = event.data as {
    readonly turn: number
    readonly step: number
    readonly callId: string
    readonly requestId: string
    readonly outcome: InputOutcome
    readonly value?: JsonValue
  }
  return AgentEvent.InputProvided({
    agent: state.deps.id,
    turn: data.turn,
    step: data.step,
    callId: data.callId,
    requestId: data.requestId,
    outcome: data.outcome,
    value: data.value,
    seq: event.seq
  })
}

/**
 * HIL-03: the questions still unsettled when a turn ends are settled `canceled` in its closing
 * batch: marked settled now (a racing `respond` writes nothing), their events to put first in it.
 *
 * @internal
 */
export const takeUnsettled = (state: QuestionHost, turn: number): ReadonlyArray<LiveQuestion> => {
  const book = state.questions
  if (book === undefined || book.live.size === 0) return []
  const taken: Array<LiveQuestion> = []
  for (const live of book.live.values()) {
    if (live.turn !== turn || live.settled) continue
    live.settled = true
    taken.push(live)
  }
  return taken
}

/** The `canceled` settlements of `takeUnsettled`'s questions. @internal */
export const canceledEvents = (taken: ReadonlyArray<LiveQuestion>): Array<CoreEventInput> =>
  taken.map((live) => ({
    type: "tool/input-provided",
    data: {
      turn: live.turn,
      step: live.step,
      callId: live.callId,
      requestId: live.requestId,
      outcome: "canceled"
    }
  }))

/** After the closing batch is durable: the canceled asks end and `InputProvided` is announced for each. @internal */
export const afterCanceled = (
  state: QuestionHost,
  taken: ReadonlyArray<LiveQuestion>,
  written: Arr.NonEmptyReadonlyArray<SessionEvent>
): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (taken.length === 0) return Effect.void
    const events: Array<AgentEvent> = []
    for (let i = 0; i < taken.length; i++) {
      settled(state, taken[i]!, { outcome: "canceled" })
      events.push(providedEvent(state, written[i]!))
    }
    return Effect.forEach(events, state.deps.emit, { discard: true })
  })

/** What `respond` and `decline` settle a question with. @internal */
export type Answer =
  | { readonly kind: "respond"; readonly value: unknown }
  | { readonly kind: "decline"; readonly reason?: string | undefined }

interface FoundQuestion {
  readonly callId: string
  readonly settled?: { readonly outcome: InputOutcome; readonly value?: JsonValue | undefined } | undefined
  /** The call has its result: an unsettled question of it was left behind (a crash) and is not pending. */
  readonly resulted: boolean
}

/** A question of the log by its request id (newest first: where a question being answered is). */
const findQuestion = (events: ReadonlyArray<SessionEvent>, requestId: string): FoundQuestion | undefined => {
  let settled: FoundQuestion["settled"]
  const resulted = new Set<string>()
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i]!
    if (event.type === "tool/result") {
      resulted.add((event.data as { readonly message: { readonly toolCallId: string } }).message.toolCallId)
    } else if (event.type === "tool/input-provided" || event.type === "tool/input-requested") {
      const data = event.data as {
        readonly requestId: string
        readonly callId: string
        readonly outcome?: InputOutcome
        readonly value?: JsonValue
      }
      if (data.requestId !== requestId) continue
      if (event.type === "tool/input-requested") return { callId: data.callId, settled, resulted: resulted.has(data.callId) }
      settled = { outcome: data.outcome!, value: data.value }
    }
  }
  return undefined
}

/** The same answer again is a duplicate; anything else after a settlement fails (the idempotency ruling). */
const againstLogged = (
  state: QuestionHost,
  requestId: string,
  answer: Answer,
  found: FoundQuestion
): Effect.Effect<{ readonly duplicate: boolean }, AgentError.InputAlreadyProvided> => {
  const settled = found.settled!
  const same = answer.kind === "decline"
    ? settled.outcome === "declined"
    : settled.outcome === "provided" && canonicalJson(answer.value) === canonicalJson(settled.value)
  return same
    ? Effect.succeed({ duplicate: true })
    : Effect.fail(new AgentError.InputAlreadyProvided({ sessionId: state.deps.id, requestId, outcome: settled.outcome }))
}

/** A live question settled with a person's answer; false when something else settled it first. */
const settleLive = (
  state: QuestionHost,
  live: LiveQuestion,
  requestId: string,
  answer: Answer
): Effect.Effect<boolean, AgentError.InvalidResponse | SessionAppendError> =>
  Effect.suspend((): Effect.Effect<boolean, AgentError.InvalidResponse | SessionAppendError> => {
    if (answer.kind === "decline") return settle(state, live, { outcome: "declined", reason: answer.reason }, undefined)
    const json = snapshot(answer.value)
    if (json._tag === "Left") {
      const where = json.problem.path === "" ? "" : ` at ${json.problem.path}`
      return Effect.fail(new AgentError.InvalidResponse({
        sessionId: state.deps.id,
        requestId,
        reason: `the value is not JSON${where}: ${json.problem.reason}`
      }))
    }
    const decoded = live.decode(json.value)
    if (Either.isLeft(decoded)) {
      return Effect.fail(new AgentError.InvalidResponse({ sessionId: state.deps.id, requestId, reason: decoded.left }))
    }
    return settle(state, live, { outcome: "provided", value: decoded.right }, json.value)
  })

/**
 * `respond` and `decline` (HIL-03): a live question is settled (decoded with its tool's Schema first);
 * one the log settled already is a duplicate or `InputAlreadyProvided`; one the log has pending but
 * no call waits on yet (a replay on its way) is waited for.
 */
export const answerWith = (
  state: QuestionHost,
  requestId: string,
  answer: Answer,
  unusableNow: () => AgentError.AgentInactive | AgentError.AgentBroken | undefined
): Effect.Effect<{ readonly duplicate: boolean }, AgentError.RespondError> =>
  Effect.gen(function*() {
    while (true) {
      const reason = unusableNow()
      if (reason !== undefined) return yield* Effect.fail(reason)
      const live = state.questions?.live.get(requestId)
      if (live !== undefined && !live.settled) {
        if (yield* settleLive(state, live, requestId, answer)) return { duplicate: false }
        continue
      }
      const found = findQuestion(state.sessionCore.log(), requestId)
      if (found === undefined) {
        return yield* Effect.fail(new AgentError.InputNotFound({ sessionId: state.deps.id, requestId }))
      }
      if (found.settled !== undefined) return yield* againstLogged(state, requestId, answer, found)
      if (found.resulted) {
        return yield* Effect.fail(
          new AgentError.InputAlreadyProvided({ sessionId: state.deps.id, requestId, outcome: "canceled" })
        )
      }
      // logged and pending, but no call waits on it yet (its settlement is being written, or the
      // call is replayed up to it after a restart): answered once it is
      yield* awaitChange(state)
    }
  })

/** `agent.respond` (HIL-03). @internal */
export const respond = (state: DriverState, requestId: string, value: unknown) =>
  answerWith(state, requestId, { kind: "respond", value }, () => unusable(state))

/** `agent.decline` (HIL-03). @internal */
export const decline = (
  state: DriverState,
  requestId: string,
  options?: { readonly reason?: string | undefined }
): Effect.Effect<{ readonly duplicate: boolean }, AgentError.DeclineError> =>
  Effect.catchTag(
    answerWith(state, requestId, { kind: "decline", reason: options?.reason }, () => unusable(state)),
    "InvalidResponse",
    (error) => Effect.die(error)
  )

/**
 * The questions a call asked, in order, from the open step's events (what a call run again after a
 * restart is given, so each `ask` with a logged answer returns it and a pending one is waited for).
 *
 * @internal
 */
export const loggedQuestions = (events: ReadonlyArray<SessionEvent>, callId: string): ReadonlyArray<LoggedQuestion> => {
  const questions: Array<LoggedQuestion> = []
  const byId = new Map<string, number>()
  let start = events.length - 1
  while (start >= 0 && events[start]!.type !== "step/start") start--
  for (let i = start + 1; i < events.length; i++) {
    const event = events[i]!
    if (event.type === "tool/input-requested") {
      const data = event.data as {
        readonly callId: string
        readonly requestId: string
        readonly question: string
        readonly jsonSchema: JsonRecord
        readonly deadline?: number
      }
      if (data.callId !== callId) continue
      byId.set(data.requestId, questions.length)
      questions.push({
        requestId: data.requestId,
        question: data.question,
        jsonSchema: data.jsonSchema,
        ...(data.deadline !== undefined ? { deadline: data.deadline } : {})
      })
    } else if (event.type === "tool/input-provided") {
      const data = event.data as { readonly requestId: string; readonly outcome: InputOutcome; readonly value?: JsonValue }
      const index = byId.get(data.requestId)
      if (index === undefined || questions[index]!.settled !== undefined) continue
      questions[index] = { ...questions[index]!, settled: { outcome: data.outcome, value: data.value } }
    }
  }
  return questions
}

/** Whether an exit of a call's body is only a cancel's interruption (no abort of the channel applies then). @internal */
export const isCancel = (state: DriverState, exit: Exit.Exit<unknown, unknown>): boolean =>
  Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause) && Option.isSome(state.cancelCell)
