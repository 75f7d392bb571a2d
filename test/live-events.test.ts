/**
 * EVS-02: the live events carry what a UI needs and the `seq` of the durable event they mirror,
 * published only once that event is durable.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Ref, Schema, Stream } from "effect"
import type { Agent } from "../src/Agent.js"
import type { AgentEvent } from "../src/AgentEvent.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as Tool from "../src/Tool.js"
import { hasType, makeHarness, msg, ofType, recordEvents } from "./fixtures/driverHarness.js"

const noParams = Schema.Struct({})

/** The live event and the log as it was when the event was received. */
interface Seen {
  readonly event: AgentEvent
  readonly log: ReadonlyArray<SessionEvent>
}

/**
 * Records every live event of `agent` from now on together with the log as it stood when the
 * event was received: a mirrored event's durable event must already be there (EVS-02).
 */
const recordWithLog = (agent: Agent) =>
  Effect.gen(function*() {
    const stream = yield* agent.subscribe
    const withLog = Stream.mapEffect(stream, (event) => Effect.map(agent.session.events, (log) => ({ event, log })))
    const fiber = yield* Effect.fork(Stream.runCollect(withLog))
    return Effect.map(Fiber.join(fiber), (chunk): ReadonlyArray<Seen> => Array.from(chunk))
  })

const byTag = <T extends AgentEvent["_tag"]>(seen: ReadonlyArray<Seen>, tag: T) =>
  seen.flatMap((s) => s.event._tag === tag ? [{ event: s.event as Extract<AgentEvent, { _tag: T }>, log: s.log }] : [])

describe("EVS-02 live events", () => {
  it.scoped(
    "EVS-02 TOOL-01 each ToolCallFinished carries its tool/result's seq, is published after that event is readable " +
      "from the session, in the log's order",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness([
          [Model.toolCall("c1", "first", "{\"wait\":true}"), Model.toolCall("c2", "second", "{}")],
          Model.text("ok")
        ])
        const secondDone = yield* Deferred.make<void>()
        const first = Tool.make({
          name: "first",
          description: "waits for the second",
          parameters: Schema.Struct({ wait: Schema.Boolean }),
          run: () => Deferred.await(secondDone).pipe(Effect.as(Tool.text("one")))
        })
        const second = Tool.make({
          name: "second",
          description: "finishes at once",
          parameters: noParams,
          run: () => Deferred.succeed(secondDone, undefined).pipe(Effect.as(Tool.text("two failed", { isError: true })))
        })
        const handle = yield* h.create("finished-seq", {
          setup: (a) => Effect.all([a.tools.register(first), a.tools.register(second)], { discard: true })
        })
        const agent = handle.agent
        const seen = yield* recordWithLog(agent)
        // the results' batch waits at the writer: nothing may announce them before it is stored
        const held = yield* h.writes.holdNext(hasType("tool/result"))
        yield* agent.followup(msg("go"))
        yield* held.reached
        yield* held.release
        yield* agent.whenIdle
        yield* handle.dispose
        const all = yield* seen
        const log = yield* agent.session.events
        const finished = byTag(all, "ToolCallFinished")
        assert.deepStrictEqual(finished.map((f) => f.event.callId), ["c1", "c2"])
        const results = ofType(log, "tool/result")
        assert.deepStrictEqual(finished.map((f) => f.event.seq), results.map((r) => r.seq))
        for (const { event, log: then } of finished) {
          const mirrored = then[event.seq]
          assert.isDefined(mirrored, `ToolCallFinished ${event.callId} came before its tool/result was readable`)
          assert.strictEqual(mirrored!.type, "tool/result")
          const result = mirrored as (typeof results)[number]
          assert.strictEqual(result.data.message.toolCallId, event.callId)
          assert.strictEqual(event.isError, result.data.message.isError === true)
          assert.strictEqual(event.summary, Message.textOf(result.data.message.content))
        }
        assert.deepStrictEqual(finished.map((f) => [f.event.isError, f.event.summary]), [
          [false, "one"],
          [true, "two failed"]
        ])
      })
  )

  it.scoped("EVS-02 ToolCallStarted carries the raw argument text and its tool/call's seq", () =>
    Effect.gen(function*() {
      const raw = "{ \"path\" : \"a.txt\",\n \"n\": 1 }"
      const h = yield* makeHarness([[Model.toolCall("c1", "read", raw)], Model.text("done")])
      const read = Tool.make({
        name: "read",
        description: "reads",
        parameters: Schema.Struct({ path: Schema.String, n: Schema.Number }),
        run: ({ path }) => Effect.succeed(Tool.text(`read ${path}`))
      })
      const handle = yield* h.create("started-args", { setup: (a) => a.tools.register(read) })
      const seen = yield* recordWithLog(handle.agent)
      yield* handle.agent.followup(msg("go"))
      yield* handle.agent.whenIdle
      yield* handle.dispose
      const [started] = byTag(yield* seen, "ToolCallStarted")
      assert.isDefined(started)
      assert.strictEqual(started!.event.arguments, raw)
      const call = started!.log[started!.event.seq]
      assert.strictEqual(call?.type, "tool/call")
      assert.deepStrictEqual(call?.data, { turn: 1, step: 1, callId: "c1", name: "read", arguments: raw })
    }))

  it.scoped("EVS-02 AssistantMessage follows the durable assistant/message: its text, tool calls, usage, seq", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness([
        [Model.reasoning("thinking"), Model.text("let me look"), Model.toolCall("c1", "look", "{}")],
        Model.text("all done")
      ])
      const look = Tool.make({
        name: "look",
        description: "looks",
        parameters: noParams,
        run: () => Effect.succeed(Tool.text("seen"))
      })
      const handle = yield* h.create("assistant", { setup: (a) => a.tools.register(look) })
      const seen = yield* recordWithLog(handle.agent)
      yield* handle.agent.followup(msg("go"))
      yield* handle.agent.whenIdle
      yield* handle.dispose
      const all = yield* seen
      const messages = byTag(all, "AssistantMessage")
      assert.strictEqual(messages.length, 2)
      for (const { event, log } of messages) {
        const logged = log[event.seq]
        assert.strictEqual(logged?.type, "assistant/message", "announced before its assistant/message was readable")
        const data = (logged as Extract<SessionEvent, { type: "assistant/message" }>).data
        assert.strictEqual(event.step, data.step)
        assert.deepStrictEqual(event.usage, data.usage)
        assert.strictEqual(event.finish, data.finish)
        assert.isDefined(event.usage?.outputTokens)
      }
      assert.deepStrictEqual(messages.map((m) => m.event.text), ["let me look", "all done"])
      assert.deepStrictEqual(messages.map((m) => m.event.toolCalls), [
        [{ callId: "c1", name: "look", arguments: "{}" }],
        []
      ])
      assert.deepStrictEqual(messages.map((m) => m.event.finish), ["tool-calls", "stop"])
      // each precedes its step's tool calls and follows its step's deltas
      const tags = all.map((s) => s.event._tag)
      assert.isBelow(tags.indexOf("AssistantMessage"), tags.indexOf("ToolCallStarted"))
    }))

  it.scoped("EVS-02 TurnStarted, InboxInserted, InboxClaimed, TurnEnded carry the seq of the event they mirror", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness([Model.text("one"), Model.text("two")])
      const handle = yield* h.create("mirrors")
      const seen = yield* recordWithLog(handle.agent)
      yield* handle.agent.followup(msg("a"))
      yield* handle.agent.whenIdle
      yield* handle.agent.inject(msg("b"))
      yield* handle.agent.followup(msg("c"))
      yield* handle.agent.whenIdle
      yield* handle.dispose
      const all = yield* seen
      const check = (tag: AgentEvent["_tag"], type: string) => {
        const found = all.filter((s) => s.event._tag === tag)
        assert.isAbove(found.length, 0, tag)
        for (const { event, log } of found) {
          const seq = (event as { readonly seq?: number }).seq
          assert.isDefined(seq, `${tag} has no seq`)
          assert.strictEqual(log[seq!]?.type, type, `${tag} mirrors ${type}`)
        }
        return found
      }
      const started = check("TurnStarted", "turn/start")
      const ended = check("TurnEnded", "turn/end")
      const inserted = check("InboxInserted", "agent/inbox/spliced")
      const claimed = check("InboxClaimed", "step/start")
      assert.strictEqual(started.length, 2)
      assert.strictEqual(ended.length, 2)
      assert.strictEqual(inserted.length, 3)
      // the claimed messages' user/messages follow the step/start the claim mirrors
      for (const { event, log } of claimed) {
        if (event._tag !== "InboxClaimed") continue
        const entered = log.slice(event.seq! + 1, event.seq! + 1 + event.messages.length)
        assert.deepStrictEqual(entered.map((e) => e.type), event.messages.map(() => "user/message"))
      }
      // the turn/start of each turn, and the turn/end of the same turn
      const turnOf = (s: Seen, seq: number) => (s.log[seq]!.data as { readonly turn: number }).turn
      assert.deepStrictEqual(started.map((s) => turnOf(s, (s.event as { seq: number }).seq)), [1, 2])
      assert.deepStrictEqual(ended.map((s) => turnOf(s, (s.event as { seq: number }).seq)), [1, 2])
    }))

  it.scoped("EVS-02 CAN-05 cancelled: a started call gets its ABORTED ToolCallFinished, an unstarted one neither", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness([[
        Model.text("working on it"),
        Model.toolCall("c1", "slow", "{}"),
        Model.toolCall("c2", "barrier", "{}")
      ]])
      const started = yield* Deferred.make<void>()
      const slow = Tool.make({
        name: "slow",
        description: "never finishes",
        parameters: noParams,
        run: () => Deferred.succeed(started, undefined).pipe(Effect.zipRight(Effect.never))
      })
      const barrier = Tool.make({
        name: "barrier",
        description: "exclusive",
        mode: "exclusive",
        parameters: noParams,
        run: () => Effect.succeed(Tool.text("ran"))
      })
      const handle = yield* h.create("cancelled", {
        setup: (a) => Effect.all([a.tools.register(slow), a.tools.register(barrier)], { discard: true })
      })
      const seen = yield* recordWithLog(handle.agent)
      yield* handle.agent.followup(msg("go"))
      yield* Deferred.await(started)
      yield* handle.agent.cancel({ kind: "user" })
      yield* handle.agent.whenIdle
      yield* handle.dispose
      const all = yield* seen
      const startedCalls = byTag(all, "ToolCallStarted").map((s) => s.event.callId)
      const finished = byTag(all, "ToolCallFinished")
      // c2 never started: neither event; c1 started and is finished by the closers' ABORTED result
      assert.deepStrictEqual(startedCalls, ["c1"])
      assert.deepStrictEqual(finished.map((f) => f.event.callId), ["c1"])
      const [f] = finished
      assert.isTrue(f!.event.isError)
      assert.match(f!.event.summary, /interrupted by a cancellation/)
      const result = f!.log[f!.event.seq]
      assert.strictEqual(result?.type, "tool/result")
      assert.strictEqual((result as Extract<SessionEvent, { type: "tool/result" }>).data.error?.code, "ABORTED")
      const tags = all.map((s) => s.event._tag)
      assert.isBelow(tags.indexOf("ToolCallFinished"), tags.indexOf("TurnEnded"))
      const ended = byTag(all, "TurnEnded")[0]!
      assert.strictEqual(ended.log[ended.event.seq!]?.type, "turn/end")
    }))

  it.scoped("EVS-02 CAN-05 a stream cut off by a cancel is announced as an interrupted AssistantMessage", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness([[Model.hang("partial answer")]])
      const handle = yield* h.create("interrupted")
      const agent = handle.agent
      const seen = yield* recordWithLog(agent)
      const delta = yield* Deferred.make<void>()
      const onDelta = (e: AgentEvent) => e._tag === "ModelDelta" ? Deferred.succeed(delta, undefined) : Effect.void
      yield* agent.subscribe.pipe(Effect.flatMap((stream) => Effect.fork(Stream.runForEach(stream, onDelta))))
      yield* agent.followup(msg("go"))
      yield* Deferred.await(delta)
      yield* agent.cancel({ kind: "user" })
      yield* agent.whenIdle
      yield* handle.dispose
      const [message] = byTag(yield* seen, "AssistantMessage")
      assert.isDefined(message)
      assert.strictEqual(message!.event.text, "partial answer")
      assert.isTrue(message!.event.interrupted)
      assert.deepStrictEqual(message!.event.toolCalls, [])
      assert.strictEqual(message!.log[message!.event.seq]?.type, "assistant/message")
    }))

  it.scoped("EVS-02 a ToolCallFinished summary: the result's text, 2,000 characters, no half surrogate pair", () =>
    Effect.gen(function*() {
      const long = "x".repeat(2_500)
      const emoji = "a".repeat(1_999) + "😀" + "tail"
      const h = yield* makeHarness([
        [Model.toolCall("c1", "long", "{}"), Model.toolCall("c2", "emoji", "{}")],
        Model.text("ok")
      ])
      const texts = yield* Ref.make(0)
      const make = (name: string, text: string) =>
        Tool.make({
          name,
          description: name,
          parameters: noParams,
          // two text parts: the summary joins them
          run: () =>
            Effect.as(Ref.update(texts, (n) => n + 1), {
              content: [
                { type: "text" as const, text: text.slice(0, 1_000) },
                { type: "text" as const, text: text.slice(1_000) }
              ]
            })
        })
      const handle = yield* h.create("summary", {
        setup: (a) =>
          Effect.all([a.tools.register(make("long", long)), a.tools.register(make("emoji", emoji))], { discard: true })
      })
      const events = yield* recordEvents(handle.agent)
      yield* handle.agent.followup(msg("go"))
      yield* handle.agent.whenIdle
      yield* handle.dispose
      const summaries = (yield* events).flatMap((e) => e._tag === "ToolCallFinished" ? [e.summary] : [])
      assert.strictEqual(yield* Ref.get(texts), 2)
      assert.deepStrictEqual(summaries, [long.slice(0, 2_000), "a".repeat(1_999)])
    }))
})
