/**
 * Printing helpers shared by the examples: one-line descriptions of live agent events and durable
 * session events, and a `watch` that prints an agent's live events as they happen.
 *
 * Not part of the library: examples may print, `src` may not.
 */
import type { Scope } from "effect"
import { Console, Duration, Effect, Fiber, Stream, SubscriptionRef } from "effect"
import type { Agent, AgentEvent } from "../../src/index.js"
import { Message } from "../../src/index.js"
import type { Message as AnyMessage } from "../../src/Message.js"
import type { SessionEvent, TurnEndReason } from "../../src/SessionEvent.js"

const quote = (text: string, max = 72): string =>
  JSON.stringify(text.length > max ? `${text.slice(0, max - 1)}…` : text)

/** A turn's end reason as text: `completed`, `aborted (user)`, `error NO_ROUTE`, … */
export const reasonText = (reason: TurnEndReason): string => {
  switch (reason.kind) {
    case "aborted":
      return `aborted (${reason.cause.kind})`
    case "blocked":
      return `blocked (${reason.reason})`
    case "error":
      return `error ${reason.error.code}`
    default:
      return reason.kind
  }
}

const messageText = (
  message: { readonly content: ReadonlyArray<{ readonly type: string; readonly text?: string }> },
  max?: number
) => quote(Message.textOf(message.content), max)

/** One line for a live agent event. */
export const describeEvent = (event: AgentEvent.AgentEvent): string => {
  const by = event.initiator !== undefined && event.initiator !== event.agent ? ` (initiator ${event.initiator})` : ""
  switch (event._tag) {
    case "AgentCreated":
      return `created${by}`
    case "AgentSessionStart":
      return `session start (${event.source})`
    case "AgentStatusChanged":
      return `status → ${event.status}`
    case "InboxInserted":
      return `inbox ${event.target} + ${event.messages.map((m) => `[${m.id}] ${messageText(m)}`).join(", ")}`
    case "InboxDiscarded":
      return `inbox ${event.target} − ${event.ids.map((id) => `[${id}]`).join(", ")} (${event.outcome})`
    case "InboxClaimed":
      return `turn ${event.turn} claims ${event.messages.map((m) => `[${m.id}]`).join(", ")}`
    case "TurnStarted":
      return `turn ${event.turn} started`
    case "ModelDelta":
      return `  model ${event.kind}: ${quote(event.text)}`
    case "AssistantMessage":
      return `  assistant message #${event.seq}` +
        (event.toolCalls.length > 0 ? `, ${event.toolCalls.length} tool call(s)` : "")
    case "ToolCallStarted":
      return `  tool ${event.name} (${event.callId}) started`
    case "ToolCallFinished":
      return `  tool ${event.callId} finished${event.isError ? " with an error" : ""}`
    case "ModelRetry":
      return `  model retry ${event.attempt} after ${event.code} (in ${Duration.format(event.delay)})`
    case "Compacted":
      return `  compacted the first ${event.upTo} events into a summary (#${event.seq})`
    case "InputRequested":
      return `  tool ${event.callId} asks [${event.requestId}]: ${quote(event.question)}`
    case "InputProvided":
      return `  question [${event.requestId}] ${event.outcome}`
    case "ApprovalRequested":
      return `  tool ${event.tool} (${event.callId}) waits for approval`
    case "ApprovalDecided":
      return `  tool call ${event.callId} ${event.decision}`
    case "TurnEnded":
      return `turn ${event.turn} ended: ${reasonText(event.reason)}`
    case "AgentError":
      return `error ${event.error.code}: ${event.error.message}`
    case "AgentDisposed":
      return "disposed"
  }
}

/** One line for a durable session event, as stored in the log. */
export const describeSessionEvent = (event: SessionEvent): string => {
  const head = `#${String(event.seq).padStart(2, " ")} ${event.type}`
  const data = event.data as Record<string, unknown>
  switch (event.type) {
    case "agent/inbox/spliced": {
      const removed = data["removed"] as ReadonlyArray<string>
      const inserted = data["inserted"] as ReadonlyArray<{ readonly id: string }>
      const parts = [
        `${data["target"]}`,
        removed.length > 0 ? `removed [${removed.join(", ")}]` : undefined,
        inserted.length > 0 ? `inserted [${inserted.map((m) => m.id).join(", ")}]` : undefined,
        data["outcome"] !== undefined ? `outcome ${data["outcome"]}` : undefined
      ]
      return `${head} ${parts.filter((p) => p !== undefined).join(" ")}`
    }
    case "turn/start":
      return `${head} turn ${data["turn"]}`
    case "step/start":
    case "step/end":
      return `${head} turn ${data["turn"]} step ${data["step"]}`
    case "user/message": {
      const message = data["message"] as AnyMessage
      return `${head} [${message.id}] ${messageText(message)}`
    }
    case "assistant/message": {
      const message = data["message"] as AnyMessage & { readonly role: "assistant" }
      const calls = message.content.filter((part) => part.type === "tool-call").length
      const finish = data["interrupted"] === true ? "interrupted" : `finish ${data["finish"]}`
      return `${head} ${messageText(message)}${calls > 0 ? ` + ${calls} tool call(s)` : ""} (${finish})`
    }
    case "tool/call":
      return `${head} ${data["name"]} (${data["callId"]}) ${data["arguments"]}`
    case "tool/result": {
      const message = data["message"] as AnyMessage & { readonly role: "tool" }
      const error = data["error"] as { readonly code: string } | undefined
      return `${head} ${message.toolName} (${message.toolCallId})${error !== undefined ? ` ${error.code}` : ""}: ` +
        messageText(message)
    }
    case "turn/end":
      return `${head} turn ${data["turn"]} ${JSON.stringify(data["reason"])}`
    case "request/config":
      return `${head} ${data["provider"]}/${data["model"]}, ${(data["tools"] as ReadonlyArray<unknown>).length} tool(s)`
    default:
      return `${head} ${JSON.stringify(event.data)}`
  }
}

/** One line for a message of the model-visible history (texts cut at `max` characters). */
export const describeMessage = (message: AnyMessage, max?: number): string => {
  switch (message.role) {
    case "user":
      return `user (${message.source.kind}): ${messageText(message, max)}`
    case "assistant": {
      const calls = message.content.flatMap((part) =>
        part.type === "tool-call" ? [`${part.name}(${part.callId})`] : []
      )
      return `assistant: ${messageText(message, max)}${calls.length > 0 ? ` + calls ${calls.join(", ")}` : ""}`
    }
    case "tool":
      const error = message.isError ? " error" : ""
      return `tool ${message.toolName} (${message.toolCallId})${error}: ${messageText(message, max)}`
  }
}

/** Prints the durable events of `agent`'s log from `fromSeq` on. */
export const printLog = (agent: Agent.Agent, fromSeq: number, indent = "    ") =>
  Effect.gen(function*() {
    const events = yield* agent.session.events
    for (const event of events.slice(fromSeq)) yield* Console.log(indent + describeSessionEvent(event))
  })

/** The length of `agent`'s log: a mark for {@link printLog}. */
export const logLength = (agent: Agent.Agent) => Effect.map(agent.session.events, (events) => events.length)

/** What {@link watchFeed} returns. */
export interface FeedWatcher {
  /** How many events were printed so far: a mark for {@link FeedWatcher.printed}. */
  readonly mark: Effect.Effect<number>
  /** Waits until an event matching `predicate`, published after `mark`, has been printed. */
  readonly printed: (mark: number, predicate: (event: AgentEvent.AgentEvent) => boolean) => Effect.Effect<void>
  /** Completes when the feed ended (an agent's feed ends with its teardown). */
  readonly ended: Effect.Effect<void>
}

/**
 * Prints every event of an eagerly subscribed feed (`agent.subscribe`, `registry.subscribe`) in a
 * fiber of the current Scope, each line prefixed with `label(event)`.
 */
export const watchFeed = (
  subscribe: Effect.Effect<Stream.Stream<AgentEvent.AgentEvent>, never, Scope.Scope>,
  label: (event: AgentEvent.AgentEvent) => string
): Effect.Effect<FeedWatcher, never, Scope.Scope> =>
  Effect.gen(function*() {
    const events = yield* subscribe
    const seen: Array<AgentEvent.AgentEvent> = []
    const count = yield* SubscriptionRef.make(0)
    const fiber = yield* events.pipe(
      Stream.runForEach((event) =>
        Console.log(`  [${label(event)}] ${describeEvent(event)}`).pipe(
          Effect.zipRight(Effect.sync(() => seen.push(event))),
          Effect.zipRight(SubscriptionRef.set(count, seen.length))
        )
      ),
      Effect.forkScoped
    )
    return {
      mark: SubscriptionRef.get(count),
      printed: (mark, predicate) =>
        count.changes.pipe(
          Stream.takeUntil(() => seen.slice(mark).some(predicate)),
          Stream.runDrain
        ),
      ended: Fiber.join(fiber)
    }
  })

/** What {@link watch} returns. */
export interface Watcher extends FeedWatcher {
  /**
   * Runs `effect` (which must wake the agent), waits until the agent is idle, then until the printer
   * has caught up with the `idle` status change — so narration never interleaves with live events.
   */
  readonly settle: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

const isIdle = (event: AgentEvent.AgentEvent) => event._tag === "AgentStatusChanged" && event.status === "idle"

/**
 * Subscribes to `agent.subscribe` (eagerly: nothing published after this returns is missed) and
 * prints every live event, prefixed with `label`, in a fiber of the current Scope.
 */
export const watch = (agent: Agent.Agent, label: string): Effect.Effect<Watcher, never, Scope.Scope> =>
  Effect.map(watchFeed(agent.subscribe, () => label), (feed) => ({
    ...feed,
    settle: (effect) =>
      Effect.gen(function*() {
        const mark = yield* feed.mark
        const result = yield* effect
        yield* agent.whenIdle
        yield* feed.printed(mark, isIdle)
        return result
      })
  }))
