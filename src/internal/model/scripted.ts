/**
 * The deterministic scripted model behind `Model.scripted`: replies are taken from a script in
 * request order (or per session), streamed without timers, and every request is recorded so tests
 * can wait for the n-th one instead of sleeping.
 *
 * @internal
 */
import { Effect, Option, Stream, SubscriptionRef } from "effect"
import { ModelError } from "./error.js"
import type { ModelChunk, ModelRequest, Reply, ReplyPart, Script } from "../../Model.js"
import type { Usage } from "../../SessionEvent.js"

/** @internal */
export type ScriptSource = Script | Readonly<Record<string, Script>> | ((request: ModelRequest, n: number) => Reply)

/** @internal */
export interface ScriptedModel {
  readonly stream: (request: ModelRequest) => Stream.Stream<ModelChunk, ModelError>
  readonly requests: Effect.Effect<ReadonlyArray<ModelRequest>>
  readonly awaitRequest: (n: number) => Effect.Effect<ModelRequest>
}

const isScript = (source: ScriptSource): source is Script => Array.isArray(source)

const isParts = (reply: Reply): reply is ReadonlyArray<ReplyPart> => Array.isArray(reply)

/**
 * Splits text in two halves on a code point boundary, so a consumer of the stream sees more than
 * one delta (and never half of a surrogate pair).
 */
const halves = (text: string): ReadonlyArray<string> => {
  // counted in place: an array of a long text's code points cost ~190 ms per 1 MB reply (SEC-10's test)
  const count = codePointCount(text)
  if (count === 0) return []
  if (count === 1) return [text]
  const middle = codeUnitOffset(text, Math.ceil(count / 2))
  return [text.slice(0, middle), text.slice(middle)]
}

/** Whether the code units at `i` and `i + 1` are a surrogate pair (one code point). */
const isPairAt = (text: string, i: number): boolean =>
  (text.charCodeAt(i) & 0xfc00) === 0xd800 && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00

/** The number of code points of `text` (as `Array.from` counts them: a lone surrogate is one). */
const codePointCount = (text: string): number => {
  let count = 0
  for (let i = 0; i < text.length; i++, count++) if (isPairAt(text, i)) i++
  return count
}

/** The code unit offset of code point number `n` of `text`. */
const codeUnitOffset = (text: string, n: number): number => {
  let i = 0
  for (let seen = 0; seen < n; seen++) i += isPairAt(text, i) ? 2 : 1
  return i
}

const textDelta = (text: string): ModelChunk => Object.freeze({ _tag: "TextDelta", text })
const reasoningDelta = (text: string): ModelChunk => Object.freeze({ _tag: "ReasoningDelta", text })

/**
 * The chunks of one reply. Parts stream in order; `fail` and `hang` end the reply (later parts are
 * never reached). Otherwise a `Finish` closes it: `tool-calls` when any tool call was streamed,
 * else `max-tokens` when a `maxTokens` part was, else `stop`. Usage is deterministic: one input
 * token per request message, one output token per character of text, reasoning and arguments.
 *
 * @internal
 */
export const replyStream = (request: ModelRequest, reply: Reply): Stream.Stream<ModelChunk, ModelError> => {
  const parts: ReadonlyArray<ReplyPart> = isParts(reply) ? reply : [reply]
  const chunks: Array<ModelChunk> = []
  let outputTokens = 0
  let hasToolCalls = false
  let hitMaxTokens = false
  for (const part of parts) {
    switch (part._tag) {
      case "Text":
      case "MaxTokens": {
        for (const text of halves(part.text)) chunks.push(textDelta(text))
        outputTokens += part.text.length
        if (part._tag === "MaxTokens") hitMaxTokens = true
        break
      }
      case "Reasoning": {
        for (const text of halves(part.text)) chunks.push(reasoningDelta(text))
        outputTokens += part.text.length
        break
      }
      case "ToolCall": {
        chunks.push(Object.freeze({ _tag: "ToolCall", callId: part.callId, name: part.name, arguments: part.arguments }))
        outputTokens += part.arguments.length
        hasToolCalls = true
        break
      }
      case "Fail":
        return Stream.concat(
          Stream.fromIterable(chunks),
          Stream.fail(new ModelError({ code: part.code, reason: "scripted failure" }))
        )
      case "Hang": {
        if (part.prefix.length > 0) chunks.push(textDelta(part.prefix))
        return Stream.concat(Stream.fromIterable(chunks), Stream.never)
      }
    }
  }
  const usage: Usage = Object.freeze({ inputTokens: request.messages.length, outputTokens })
  chunks.push(Object.freeze({
    _tag: "Finish",
    reason: hasToolCalls ? "tool-calls" : hitMaxTokens ? "max-tokens" : "stop",
    usage
  }))
  return Stream.fromIterable(chunks)
}

const exhausted = (reason: string): Stream.Stream<never, ModelError> =>
  Stream.fail(new ModelError({ code: "SCRIPT_EXHAUSTED", reason }))

/**
 * Builds a scripted model. A request is recorded (and numbered from 1) when its stream starts
 * running, and its reply is chosen in the same atomic update.
 *
 * @internal
 */
export const make = (source: ScriptSource): Effect.Effect<ScriptedModel> =>
  Effect.map(SubscriptionRef.make<ReadonlyArray<ModelRequest>>([]), (recorded) => {
    const choose = (request: ModelRequest, all: ReadonlyArray<ModelRequest>): Stream.Stream<ModelChunk, ModelError> => {
      const n = all.length
      if (typeof source === "function") return replyStream(request, source(request, n))
      if (isScript(source)) {
        const reply = source[n - 1]
        return reply === undefined
          ? exhausted(`request ${n} arrived, but the script has only ${source.length} replies`)
          : replyStream(request, reply)
      }
      const script = Object.hasOwn(source, request.sessionId) ? source[request.sessionId] : undefined
      if (script === undefined) return exhausted(`no script for session ${JSON.stringify(request.sessionId)}`)
      let index = 0
      for (const earlier of all) if (earlier.sessionId === request.sessionId) index++
      const reply = script[index - 1]
      return reply === undefined
        ? exhausted(
          `request ${index} of session ${JSON.stringify(request.sessionId)} arrived, ` +
            `but its script has only ${script.length} replies`
        )
        : replyStream(request, reply)
    }

    const stream = (request: ModelRequest): Stream.Stream<ModelChunk, ModelError> =>
      Stream.unwrap(
        SubscriptionRef.modify(recorded, (all): [ReadonlyArray<ModelRequest>, ReadonlyArray<ModelRequest>] => {
          const next = [...all, request]
          return [next, next]
        }).pipe(Effect.map((all) => choose(request, all)))
      )

    const awaitRequest = (n: number): Effect.Effect<ModelRequest> =>
      !Number.isSafeInteger(n) || n < 1
        ? Effect.dieMessage(`awaitRequest: requests are numbered from 1, got ${n}`)
        : recorded.changes.pipe(
          Stream.filterMap((all) => Option.fromNullable(all[n - 1])),
          Stream.runHead,
          Effect.flatMap((found) =>
            Option.isSome(found)
              ? Effect.succeed(found.value)
              : Effect.dieMessage("awaitRequest: the request log ended")
          )
        )

    return { stream, requests: SubscriptionRef.get(recorded), awaitRequest }
  })
