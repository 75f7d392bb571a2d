import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc, Option, Schema } from "effect"
import type { MessageId, UserMessage } from "../src/Message.js"
import * as Repair from "../src/Repair.js"
import { CoreEvent } from "../src/SessionEvent.js"
import type { SessionEvent } from "../src/SessionEvent.js"

const decodeCore = Schema.decodeUnknownSync(CoreEvent)

const event = (seq: number, type: string, data: unknown, time = 1_000 + seq): SessionEvent =>
  ({ seq, time, type, data }) as SessionEvent

/** Builds a log with contiguous seqs; `time` advances by one per event. */
const log = (...entries: ReadonlyArray<readonly [string, unknown]>): Array<SessionEvent> =>
  entries.map(([type, data], seq) => event(seq, type, data))

const userMessage = (id: string, text = id): UserMessage => ({
  id: id as MessageId,
  role: "user",
  content: [{ type: "text", text }],
  source: { kind: "user" }
})

const assistant = (turn: number, step: number, callIds: ReadonlyArray<string>) =>
  [
    "assistant/message",
    {
      turn,
      step,
      message: {
        id: `a-${turn}-${step}`,
        role: "assistant",
        content: [
          { type: "text", text: "working" },
          ...callIds.map((callId) => ({ type: "tool-call", callId, name: `tool-${callId}`, arguments: "{}" }))
        ],
        source: { kind: "model", provider: "test", model: "m" }
      },
      finish: callIds.length > 0 ? "tool-calls" : "stop"
    }
  ] as const

const toolCall = (turn: number, step: number, callId: string) =>
  ["tool/call", { turn, step, callId, name: `tool-${callId}`, arguments: "{}" }] as const

const toolResult = (turn: number, step: number, callId: string) =>
  [
    "tool/result",
    {
      turn,
      step,
      message: {
        id: `r-${callId}`,
        role: "tool",
        toolCallId: callId,
        toolName: `tool-${callId}`,
        content: [{ type: "text", text: "ok" }],
        isError: false
      }
    }
  ] as const

const splice = (
  target: "next-turn" | "next-step",
  start: number,
  removed: ReadonlyArray<string>,
  inserted: ReadonlyArray<UserMessage>,
  outcome?: "canceled" | "rejected" | "restored"
) => ["agent/inbox/spliced", { target, start, removed, inserted, ...(outcome ? { outcome } : {}) }] as const

const isDeepFrozen = (value: unknown): boolean =>
  typeof value !== "object" || value === null ||
  (Object.isFrozen(value) && Object.values(value).every(isDeepFrozen))

/** Every closer is a frozen, schema-valid core event stamped after the log with the last event's time. */
const assertWellStamped = (events: ReadonlyArray<SessionEvent>, closers: ReadonlyArray<CoreEvent>) => {
  const last = events[events.length - 1]
  closers.forEach((closer, i) => {
    assert.deepStrictEqual(decodeCore(closer), closer)
    assert.isTrue(isDeepFrozen(closer), "closers are deep-frozen")
    assert.strictEqual(closer.seq, events.length + i)
    assert.strictEqual(closer.time, last!.time)
  })
}

describe("Repair", () => {
  describe("closers", () => {
    it("REP-01 an empty log needs no repair", () => {
      assert.deepStrictEqual(Repair.closers([]), [])
    })

    it("REP-01 a log without a turn needs no repair", () => {
      const events = log(splice("next-turn", 0, [], [userMessage("m1")]), ["plugin/note", { x: 1 }])
      assert.deepStrictEqual(Repair.closers(events), [])
    })

    it("REP-01 a log whose last turn is closed needs no repair", () => {
      const events = log(
        ["turn/start", { turn: 1 }],
        ["step/start", { turn: 1, step: 1 }],
        assistant(1, 1, ["c1"]),
        ["step/end", { turn: 1, step: 1 }],
        ["turn/end", { turn: 1, reason: { kind: "completed" } }],
        ["plugin/note", {}]
      )
      assert.deepStrictEqual(Repair.closers(events), [])
    })

    it("REP-02 an open step is closed, then the turn: seqs continue and share the last event's time", () => {
      const events = [event(0, "turn/start", { turn: 1 }, 500), event(1, "step/start", { turn: 1, step: 1 }, 777)]
      const closers = Repair.closers(events)
      assert.deepStrictEqual(closers, [
        { seq: 2, time: 777, type: "step/end", data: { turn: 1, step: 1 } },
        { seq: 3, time: 777, type: "turn/end", data: { turn: 1, reason: { kind: "interrupted" } } }
      ])
      assertWellStamped(events, closers)
    })

    it("REP-02 an open turn with no open step gets turn/end only", () => {
      const events = log(
        ["turn/start", { turn: 1 }],
        ["step/start", { turn: 1, step: 1 }],
        assistant(1, 1, []),
        ["step/end", { turn: 1, step: 1 }]
      )
      assert.deepStrictEqual(Repair.closers(events), [
        { seq: 4, time: 1_003, type: "turn/end", data: { turn: 1, reason: { kind: "interrupted" } } }
      ])
      assert.deepStrictEqual(Repair.closers(log(["turn/start", { turn: 1 }])).map((e) => e.type), ["turn/end"])
    })

    it("REP-02 a dispatched call's outcome is unknown, an undispatched one was not started, in log order", () => {
      const events = log(
        ["turn/start", { turn: 1 }],
        ["step/start", { turn: 1, step: 1 }],
        assistant(1, 1, ["c1", "c2"]),
        toolCall(1, 1, "c1")
      )
      const closers = Repair.closers(events)
      assert.deepStrictEqual(closers, [
        {
          seq: 4,
          time: 1_003,
          type: "tool/result",
          data: {
            turn: 1,
            step: 1,
            message: {
              id: "repair:c1" as MessageId,
              role: "tool",
              toolCallId: "c1",
              toolName: "tool-c1",
              content: [{ type: "text", text: Repair.outcomeUnknownText("tool-c1") }],
              isError: true
            },
            error: { name: "ToolOutcomeUnknown", code: "TOOL_OUTCOME_UNKNOWN" }
          }
        },
        {
          seq: 5,
          time: 1_003,
          type: "tool/result",
          data: {
            turn: 1,
            step: 1,
            message: {
              id: "repair:c2" as MessageId,
              role: "tool",
              toolCallId: "c2",
              toolName: "tool-c2",
              content: [{ type: "text", text: Repair.notStartedText("tool-c2") }],
              isError: true
            },
            error: { name: "ToolNotStarted", code: "TOOL_NOT_STARTED" }
          }
        },
        { seq: 6, time: 1_003, type: "step/end", data: { turn: 1, step: 1 } },
        { seq: 7, time: 1_003, type: "turn/end", data: { turn: 1, reason: { kind: "interrupted" } } }
      ])
      assertWellStamped(events, closers)
    })

    it("REP-02 the model-visible texts say whether the tool may have run", () => {
      const unknown = Repair.outcomeUnknownText("deploy")
      assert.include(unknown, "deploy")
      assert.include(unknown, "may have run")
      assert.include(unknown, "verify its side effects before retrying")
      const notStarted = Repair.notStartedText("deploy")
      assert.include(notStarted, "deploy")
      assert.include(notStarted, "never ran")
      assert.include(Repair.interruptedNote, "interrupted before it finished")
      assert.include(Repair.interruptedNote, "may have run")
    })

    it("REP-02 answered calls get nothing; a tool/call without an assistant part is outcome-unknown", () => {
      const events = log(
        ["turn/start", { turn: 3 }],
        ["step/start", { turn: 3, step: 1 }],
        assistant(3, 1, ["c1", "c2"]),
        toolCall(3, 1, "c1"),
        toolResult(3, 1, "c1"),
        toolCall(3, 1, "orphan"),
        toolCall(3, 1, "c2")
      )
      const results = Repair.closers(events).filter((e) => e.type === "tool/result")
      assert.deepStrictEqual(
        results.map((e) => [e.data.message.toolCallId, e.data.error?.code, e.data.turn, e.data.step]),
        [["c2", "TOOL_OUTCOME_UNKNOWN", 3, 1], ["orphan", "TOOL_OUTCOME_UNKNOWN", 3, 1]]
      )
    })

    it("REP-02 calls of earlier closed turns are ignored", () => {
      const events = log(
        ["turn/start", { turn: 1 }],
        ["step/start", { turn: 1, step: 1 }],
        assistant(1, 1, ["old"]),
        toolCall(1, 1, "old"),
        ["step/end", { turn: 1, step: 1 }],
        ["turn/end", { turn: 1, reason: { kind: "aborted", cause: { kind: "user" } } }],
        ["turn/start", { turn: 2 }],
        ["step/start", { turn: 2, step: 1 }],
        assistant(2, 1, ["new"])
      )
      const closers = Repair.closers(events)
      assert.deepStrictEqual(closers.map((e) => e.type), ["tool/result", "step/end", "turn/end"])
      const [result, stepEnd, turnEnd] = closers
      assert.strictEqual(result?.type === "tool/result" && result.data.message.toolCallId, "new")
      assert.deepStrictEqual(stepEnd?.data, { turn: 2, step: 1 })
      assert.deepStrictEqual<unknown>(turnEnd?.data, { turn: 2, reason: { kind: "interrupted" } })
    })

    it("REP-02 a claim batch cut before its user/messages is restored, next-step first, before the closers", () => {
      const s1 = userMessage("s1", "steer one")
      const s2 = userMessage("s2", "steer two")
      const t1 = userMessage("t1", "prompt")
      const t2 = userMessage("t2", "later prompt")
      const events = log(
        splice("next-turn", 0, [], [t1]),
        splice("next-turn", 1, [], [t2]),
        splice("next-step", 0, [], [s1]),
        splice("next-step", 1, [], [userMessage("s2", "old text")]),
        splice("next-step", 1, ["s2"], [s2], "canceled"), // replace keeps the id, new body
        ["turn/start", { turn: 1 }],
        // The INB-07 batch: claims, step/start, user/messages; the crash kept only its first part.
        splice("next-step", 0, ["s1", "s2"], []),
        splice("next-turn", 0, ["t1"], []),
        ["step/start", { turn: 1, step: 1 }],
        ["user/message", { turn: 1, step: 1, message: s1 }]
      )
      const closers = Repair.closers(events)
      assert.deepStrictEqual(closers, [
        {
          seq: 10,
          time: 1_009,
          type: "agent/inbox/spliced",
          data: { target: "next-step", start: 0, removed: [], inserted: [s2], outcome: "restored" }
        },
        {
          seq: 11,
          time: 1_009,
          type: "agent/inbox/spliced",
          data: { target: "next-turn", start: 0, removed: [], inserted: [t1], outcome: "restored" }
        },
        { seq: 12, time: 1_009, type: "step/end", data: { turn: 1, step: 1 } },
        { seq: 13, time: 1_009, type: "turn/end", data: { turn: 1, reason: { kind: "interrupted" } } }
      ])
      assertWellStamped(events, closers)
    })

    it("REP-02 a claim torn before its step/start is restored and the turn closed without step/end", () => {
      const t1 = userMessage("t1")
      const events = log(
        splice("next-turn", 0, [], [t1]),
        ["turn/start", { turn: 1 }],
        splice("next-turn", 0, ["t1"], [])
      )
      assert.deepStrictEqual<unknown>(Repair.closers(events).map((e) => [e.type, e.data]), [
        ["agent/inbox/spliced", { target: "next-turn", start: 0, removed: [], inserted: [t1], outcome: "restored" }],
        ["turn/end", { turn: 1, reason: { kind: "interrupted" } }]
      ])
    })

    it("REP-02 claims that entered, and canceled or rejected removals, are not restored", () => {
      const events = log(
        splice("next-turn", 0, [], [userMessage("t1")]),
        splice("next-step", 0, [], [userMessage("s1"), userMessage("s2")]),
        ["turn/start", { turn: 1 }],
        splice("next-step", 0, ["s1"], [], "rejected"),
        splice("next-step", 0, ["s2"], []),
        ["step/start", { turn: 1, step: 1 }],
        ["user/message", { turn: 1, step: 1, message: userMessage("s2") }],
        splice("next-turn", 0, ["t1"], [], "canceled")
      )
      assert.deepStrictEqual(Repair.closers(events).map((e) => e.type), ["step/end", "turn/end"])
    })

    it("REP-02 splices of a fork's seed are not part of the child's inbox", () => {
      const events = log(
        splice("next-turn", 0, [], [userMessage("m1", "parent's")]),
        ["turn/start", { turn: 1 }],
        ["turn/end", { turn: 1, reason: { kind: "completed" } }],
        // seedLength = 3: the child's own history starts here.
        splice("next-turn", 0, [], [userMessage("m1", "child's")]),
        ["turn/start", { turn: 2 }],
        splice("next-turn", 0, ["m1"], [])
      )
      const restored = Repair.closers(events, { seedLength: 3 })[0]
      assert.deepStrictEqual(
        restored?.type === "agent/inbox/spliced" && restored.data.inserted,
        [userMessage("m1", "child's")]
      )
    })

    it("REP-02 closer ids are deterministic and stay valid message ids for long call ids", () => {
      const long = "x".repeat(300)
      const events = log(["turn/start", { turn: 1 }], ["step/start", { turn: 1, step: 1 }], assistant(1, 1, [long]))
      const first = Repair.closers(events)
      assert.deepStrictEqual(Repair.closers(events), first)
      assertWellStamped(events, first)
      const id = first[0]?.type === "tool/result" ? first[0].data.message.id : ""
      assert.isAtMost(id.length, 256)
      assert.isTrue(id.startsWith("repair:x"))
      assert.notStrictEqual(Repair.closerMessageId(long), Repair.closerMessageId(long.slice(0, 299) + "y"))
      assert.strictEqual(Repair.closerMessageId("c1"), "repair:c1")
    })
  })

  describe("turn boundaries", () => {
    const events = log(
      ["plugin/note", {}],
      ["turn/start", { turn: 1 }],
      ["step/start", { turn: 1, step: 1 }],
      ["step/end", { turn: 1, step: 1 }],
      ["turn/end", { turn: 1, reason: { kind: "completed" } }],
      splice("next-turn", 0, [], [userMessage("m")]),
      ["turn/start", { turn: 2 }],
      ["step/start", { turn: 2, step: 1 }]
    )

    it("REP-01 openTurn finds the open final turn and its open step", () => {
      assert.deepStrictEqual(Repair.openTurn(events), Option.some({ turn: 2, startIndex: 6, openStep: 1 }))
      assert.deepStrictEqual(Repair.openTurn(events.slice(0, 7)), Option.some({ turn: 2, startIndex: 6 }))
      assert.deepStrictEqual(Repair.openTurn(events.slice(0, 5)), Option.none())
      assert.deepStrictEqual(Repair.openTurn([]), Option.none())
    })

    it("FORK-01 isInsideOpenTurn tells whether a prefix ends inside an open turn", () => {
      const inside = [0, 1, 2, 3, 4, 5, 6, 7, 8].map((upTo) => Option.isSome(Repair.isInsideOpenTurn(events, upTo)))
      assert.deepStrictEqual(inside, [false, false, true, true, true, false, false, true, true])
      assert.deepStrictEqual(Repair.isInsideOpenTurn(events, 3), Option.some({ turn: 1, startIndex: 1, openStep: 1 }))
      assert.deepStrictEqual(Repair.isInsideOpenTurn(events, 99), Repair.openTurn(events))
    })

    it("FORK-01 lastClosedBoundary is the log length at the end of the last closed turn", () => {
      assert.strictEqual(Repair.lastClosedBoundary(events), 5)
      assert.strictEqual(Repair.lastClosedBoundary(events.slice(0, 6)), 6)
      assert.strictEqual(Repair.lastClosedBoundary(events.slice(0, 3)), 0)
      assert.strictEqual(Repair.lastClosedBoundary(events.slice(0, 1)), 1)
      assert.strictEqual(Repair.lastClosedBoundary([]), 0)
      for (let upTo = 0; upTo <= events.length; upTo++) {
        const prefix = events.slice(0, upTo)
        assert.isTrue(Option.isNone(Repair.isInsideOpenTurn(events, Repair.lastClosedBoundary(prefix))))
      }
    })
  })

  describe("REP-03 applying the closers balances every truncation of a realistic log", () => {
    const Step = fc.record({ steer: fc.integer({ min: 0, max: 2 }), calls: fc.integer({ min: 0, max: 3 }) })
    const Turn = fc.record({
      queued: fc.integer({ min: 0, max: 2 }),
      cancelOne: fc.boolean(),
      interruptedStream: fc.boolean(),
      steps: fc.array(Step, { minLength: 1, maxLength: 3 })
    })
    const Script = fc.array(Turn, { minLength: 1, maxLength: 3 })

    /**
     * Writes what the loop and inbox would write for a script, with the INB-07 claim batch
     * (claims, step/start, user/messages) and tool steps (assistant calls, tool/call, tool/result).
     */
    const simulate = (
      events: Array<SessionEvent>,
      script: typeof Script extends fc.Arbitrary<infer A> ? A : never,
      phase: string
    ) => {
      const push = (type: string, data: unknown) => events.push(event(events.length, type, data, 5_000 + events.length))
      const nextTurn: Array<UserMessage> = []
      const nextStep: Array<UserMessage> = []
      let ids = 0
      let turn = events.filter((e) => e.type === "turn/start").length
      const insert = (target: "next-turn" | "next-step") => {
        const list = target === "next-turn" ? nextTurn : nextStep
        const message = userMessage(`m${ids++}`, `${phase} ${target} ${ids}`)
        push("agent/inbox/spliced", { target, start: list.length, removed: [], inserted: [message] })
        list.push(message)
      }
      for (const t of script) {
        for (let i = 0; i <= t.queued; i++) insert("next-turn")
        if (t.cancelOne && nextTurn.length > 1) {
          const [dropped] = nextTurn.splice(1, 1)
          push("agent/inbox/spliced", {
            target: "next-turn",
            start: 1,
            removed: [dropped!.id],
            inserted: [],
            outcome: "canceled"
          })
        }
        turn++
        push("turn/start", { turn })
        push("plugin/turn-opened", { turn })
        let reason: unknown = { kind: "max-steps" }
        for (let s = 0; s < t.steps.length; s++) {
          const step = s + 1
          const { calls, steer } = t.steps[s]!
          for (let i = 0; i < steer; i++) insert("next-step")
          const claimed: Array<UserMessage> = nextStep.splice(0)
          if (claimed.length > 0) {
            push("agent/inbox/spliced", {
              target: "next-step",
              start: 0,
              removed: claimed.map((m) => m.id),
              inserted: []
            })
          }
          if (step === 1 && nextTurn.length > 0) {
            const prompt = nextTurn.shift()!
            push("agent/inbox/spliced", { target: "next-turn", start: 0, removed: [prompt.id], inserted: [] })
            claimed.push(prompt)
          }
          push("step/start", { turn, step })
          for (const message of claimed) push("user/message", { turn, step, message })
          if (step === 1) push("request/config", { provider: "test", model: "m", tools: [] })
          const callIds = Array.from({ length: calls }, (_, i) => `${phase}-${turn}-${step}-${i}`)
          if (t.interruptedStream && s === t.steps.length - 1) {
            const [type, data] = assistant(turn, step, [])
            const { finish: _, ...rest } = data
            push(type, { ...rest, interrupted: true })
            push("step/end", { turn, step })
            reason = { kind: "aborted", cause: { kind: "user" } }
            break
          }
          push(...assistant(turn, step, callIds))
          for (const callId of callIds) {
            push(...toolCall(turn, step, callId))
            push("plugin/tool-progress", { callId })
            push(...toolResult(turn, step, callId))
          }
          push("step/end", { turn, step })
          if (calls === 0) {
            reason = { kind: "completed" }
            break
          }
        }
        push("turn/end", { turn, reason })
      }
    }

    /** Every opened turn and step is closed and every call has exactly one result (in the same turn). */
    const assertBalanced = (events: ReadonlyArray<SessionEvent>) => {
      let turnOpen = false
      let stepOpen = false
      let unanswered = new Set<string>()
      let answered = new Set<string>()
      for (const e of events) {
        const data = e.data as Record<string, any>
        switch (e.type) {
          case "turn/start":
            assert.isFalse(turnOpen, `turn opened inside a turn at ${e.seq}`)
            turnOpen = true
            unanswered = new Set()
            answered = new Set()
            break
          case "step/start":
            assert.isTrue(turnOpen && !stepOpen, `step/start outside a turn or inside a step at ${e.seq}`)
            stepOpen = true
            break
          case "step/end":
            assert.isTrue(stepOpen, `step/end without step/start at ${e.seq}`)
            stepOpen = false
            break
          case "assistant/message":
            for (const part of data.message.content) if (part.type === "tool-call") unanswered.add(part.callId)
            break
          case "tool/call":
            unanswered.add(data.callId)
            break
          case "tool/result":
            assert.isFalse(answered.has(data.message.toolCallId), `second result for a call at ${e.seq}`)
            answered.add(data.message.toolCallId)
            unanswered.delete(data.message.toolCallId)
            break
          case "turn/end":
            assert.isTrue(turnOpen && !stepOpen, `turn/end outside a turn or inside a step at ${e.seq}`)
            assert.deepStrictEqual([...unanswered], [], `unanswered calls at turn/end ${e.seq}`)
            turnOpen = false
            break
        }
      }
      assert.isFalse(turnOpen, "the log ends inside a turn")
    }

    /**
     * Folds the inbox after `seedLength`, validating every splice (INB-05), and checks INB-07: every
     * accepted id is exactly one of entered, removed by a canceled/rejected splice, or still pending.
     */
    const assertNoInputLost = (events: ReadonlyArray<SessionEvent>, seedLength: number) => {
      const lists = { "next-turn": [] as Array<string>, "next-step": [] as Array<string> }
      const accepted = new Set<string>()
      const entered = new Set<string>()
      const discarded = new Set<string>()
      for (const e of events.slice(seedLength)) {
        const data = e.data as Record<string, any>
        if (e.type === "user/message") entered.add(data.message.id)
        if (e.type !== "agent/inbox/spliced") continue
        const list = lists[data.target as "next-turn" | "next-step"]
        assert.isAtMost(data.start, list.length)
        assert.deepStrictEqual(list.slice(data.start, data.start + data.removed.length), data.removed)
        list.splice(data.start, data.removed.length, ...data.inserted.map((m: UserMessage) => m.id))
        for (const m of data.inserted) accepted.add(m.id)
        if (data.outcome === "canceled" || data.outcome === "rejected") for (const id of data.removed) discarded.add(id)
      }
      const pending = new Set([...lists["next-turn"], ...lists["next-step"]])
      assert.strictEqual(pending.size, lists["next-turn"].length + lists["next-step"].length, "pending at most once")
      for (const id of accepted) {
        const fates = [entered.has(id), discarded.has(id), pending.has(id)].filter(Boolean).length
        assert.strictEqual(fates, 1, `message ${id} has ${fates} fates`)
      }
    }

    const checkEveryPrefix = (events: ReadonlyArray<SessionEvent>, seedLength: number) => {
      for (let k = seedLength; k <= events.length; k++) {
        const prefix = events.slice(0, k)
        const closers = Repair.closers(prefix, { seedLength })
        assertWellStamped(prefix, closers)
        assert.strictEqual(closers.length === 0, Option.isNone(Repair.openTurn(prefix)))
        const repaired = [...prefix, ...closers]
        assertBalanced(repaired)
        assertNoInputLost(repaired, seedLength)
        assert.deepStrictEqual(Repair.closers(repaired, { seedLength }), [], `repairing twice at k=${k}`)
        assert.strictEqual(Repair.lastClosedBoundary(repaired), repaired.length)
      }
      assert.deepStrictEqual(Repair.closers(events, { seedLength }), [])
    }

    it.prop("REP-03 every prefix of a scripted log, repaired, is balanced and loses no input", [Script], ([script]) => {
      const events: Array<SessionEvent> = []
      simulate(events, script, "solo")
      checkEveryPrefix(events, 0)
    })

    it.prop(
      "REP-03 every prefix of a forked child's log, repaired after its seed, is balanced and loses no input",
      [Script, Script],
      ([seed, child]) => {
        const events: Array<SessionEvent> = []
        simulate(events, seed, "parent")
        const seedLength = events.length
        simulate(events, child, "child") // reuses the parent's message ids with other bodies
        checkEveryPrefix(events, seedLength)
      }
    )
  })
})
