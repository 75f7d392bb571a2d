/**
 * Session format version 3 (DUR-00): the people-in-the-loop events (`tool/approval-requested`,
 * `tool/approval-decided`, `tool/input-requested`, `tool/input-provided`), `tool/child` and the header's
 * `child` are core events the writer and the reader agree on (DUR-01), a real file holding them reads
 * back, and what a person still has to settle in the open step is derived from the log alone.
 */
import { NodeContext } from "@effect/platform-node"
import { FileSystem } from "@effect/platform"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option } from "effect"
import * as codec from "../src/internal/log/eventCodec.js"
import * as pending from "../src/internal/log/pending.js"
import * as Message from "../src/Message.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as Session from "../src/Session.js"
import * as SessionEvent from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"

type Input = { readonly type: string; readonly data: unknown }

const samples: ReadonlyArray<Input> = [
  {
    type: "tool/approval-requested",
    data: { turn: 1, step: 1, callId: "c1", approvalId: "ap-1", tool: "rm", arguments: "{\"path\":\"/\"}", deadline: 5 }
  },
  { type: "tool/approval-requested", data: { turn: 1, step: 1, callId: "c1", approvalId: "a", tool: "t", arguments: "" } },
  { type: "tool/approval-decided", data: { turn: 1, step: 1, callId: "c1", decision: "approved", initiator: null } },
  {
    type: "tool/approval-decided",
    data: { turn: 1, step: 1, callId: "c1", decision: "rejected", reason: "timeout", message: "no", initiator: "boss" }
  },
  {
    type: "tool/approval-decided",
    data: { turn: 2, step: 3, callId: "c1", decision: "approved", arguments: "{}", initiator: null }
  },
  {
    type: "tool/input-requested",
    data: { turn: 1, step: 1, callId: "c2", requestId: "q-1", question: "Which?", jsonSchema: { type: "string" } }
  },
  {
    type: "tool/input-provided",
    data: { turn: 1, step: 1, callId: "c2", requestId: "q-1", outcome: "provided", value: { pick: [1, "a", null] } }
  },
  { type: "tool/input-provided", data: { turn: 1, step: 1, callId: "c2", requestId: "q-1", outcome: "declined" } },
  { type: "tool/child", data: { turn: 1, step: 1, callId: "c3", child: "parent.sub-1a2b" } }
]

const refused: ReadonlyArray<Input> = [
  { type: "tool/approval-requested", data: { turn: 1, step: 1, callId: "", approvalId: "a", tool: "t", arguments: "" } },
  { type: "tool/approval-requested", data: { turn: 1, step: 1, callId: "c", approvalId: "a/b", tool: "t", arguments: "" } },
  { type: "tool/approval-requested", data: { turn: 0, step: 1, callId: "c", approvalId: "a", tool: "t", arguments: "" } },
  { type: "tool/approval-decided", data: { turn: 1, step: 1, callId: "c", decision: "maybe", initiator: null } },
  { type: "tool/approval-decided", data: { turn: 1, step: 1, callId: "c", decision: "approved" } },
  { type: "tool/approval-decided", data: { turn: 1, step: 1, callId: "c", decision: "approved", initiator: "../x" } },
  { type: "tool/input-requested", data: { turn: 1, step: 1, callId: "c", requestId: "q", question: "?", jsonSchema: 3 } },
  { type: "tool/input-provided", data: { turn: 1, step: 1, callId: "c", requestId: "q", outcome: "provided" } },
  { type: "tool/input-provided", data: { turn: 1, step: 1, callId: "c", requestId: "q", outcome: "declined", value: 1 } },
  { type: "tool/child", data: { turn: 1, step: 1, callId: "c", child: "no spaces allowed" } },
  { type: "tool/child", data: { turn: 1, step: 1, callId: "c", child: "no spaces allowed", extra: true } }
]

/** Valid but for a field this version does not know: refused at append, a newer version's at read (DUR-00). */
const newer: ReadonlyArray<Input> = [
  { type: "tool/child", data: { turn: 1, step: 1, callId: "c", child: "ok", extra: true } },
  { type: "tool/approval-decided", data: { turn: 1, step: 1, callId: "c", decision: "approved", initiator: null, note: "" } }
]

const stamp = (inputs: ReadonlyArray<Input>): ReadonlyArray<SessionEvent.SessionEvent> =>
  inputs.map(({ data, type }, seq) => ({ seq, time: 0, type, data }) as SessionEvent.SessionEvent)

const assistantCalling = (turn: number, step: number, ...calls: ReadonlyArray<string>): Input => ({
  type: "assistant/message",
  data: {
    turn,
    step,
    message: {
      id: `a${turn}.${step}`,
      role: "assistant",
      content: calls.map((callId) => ({ type: "tool-call", callId, name: "t", arguments: "{}" })),
      source: { kind: "model", provider: "scripted", model: "test" }
    },
    finish: "tool-calls"
  }
})

const opening = (turn = 1, step = 1): ReadonlyArray<Input> => [
  { type: "turn/start", data: { turn } },
  { type: "step/start", data: { turn, step } },
  { type: "user/message", data: { turn, step, message: Message.user("go", { id: `u${turn}` }) } }
]

const requested = (callId: string, extra: Record<string, unknown> = {}): Input => ({
  type: "tool/approval-requested",
  data: { turn: 1, step: 1, callId, approvalId: `ap-${callId}`, tool: "t", arguments: "{}", ...extra }
})
const decided = (callId: string, decision: string, extra: Record<string, unknown> = {}): Input => ({
  type: "tool/approval-decided",
  data: { turn: 1, step: 1, callId, decision, initiator: null, ...extra }
})
const called = (callId: string): Input => ({
  type: "tool/call",
  data: { turn: 1, step: 1, callId, name: "t", arguments: "{}" }
})
const resulted = (callId: string): Input => ({
  type: "tool/result",
  data: {
    turn: 1,
    step: 1,
    message: { id: `r-${callId}`, role: "tool", toolCallId: callId, toolName: "t", content: [], isError: false }
  }
})
const asked = (callId: string, requestId: string, extra: Record<string, unknown> = {}): Input => ({
  type: "tool/input-requested",
  data: { turn: 1, step: 1, callId, requestId, question: "?", jsonSchema: { type: "string" }, ...extra }
})
const answered = (callId: string, requestId: string, value: string): Input => ({
  type: "tool/input-provided",
  data: { turn: 1, step: 1, callId, requestId, outcome: "provided", value }
})

const requestsOf = (inputs: ReadonlyArray<Input>) => Option.getOrThrow(pending.openStepRequests(stamp(inputs)))

describe("session format v3 (DUR-00)", () => {
  it("DUR-00 new sessions are written as format version 3, and versions 1 to 3 are read", () => {
    assert.strictEqual(SessionEvent.VERSION, 3)
    assert.deepStrictEqual([...SessionEvent.SUPPORTED_VERSIONS], [1, 2, 3])
    const header = { format: SessionEvent.FORMAT, id: "s", createdAt: 0, seedLength: 0, meta: {} }
    for (const version of [1, 2, 3]) assert.isTrue(Either.isRight(codec.storedHeader({ ...header, version })))
    const newer = codec.storedHeader({ ...header, version: 4 })
    assert.isTrue(Either.isLeft(newer) && newer.left._tag === "Unsupported")
    const child = codec.storedHeader({ ...header, version: 3, child: { parent: "p", callId: "c1" } })
    assert.isTrue(Either.isRight(child))
    assert.isTrue(Either.isLeft(codec.storedHeader({ ...header, version: 3, child: { parent: "p" } })))
  })

  it("DUR-00 DUR-01 the v3 events are core events: accepted at append exactly as the reader accepts them", () => {
    for (const { data, type } of samples) {
      const label = `${type} ${JSON.stringify(data)}`
      assert.isTrue(Either.isRight(codec.coreEvent({ type, data } as SessionEvent.CoreEventInput)), label)
      assert.isTrue(Either.isRight(codec.storedEvent({ seq: 3, time: 0, type, data }, 3)), label)
      const parsed = codec.parsedEvent(JSON.parse(JSON.stringify({ seq: 3, time: 0, type, data })), 3)
      assert.isTrue(Either.isRight(parsed), label)
      // only the loop writes them (SES-00)
      assert.isTrue(Either.isLeft(codec.customInput({ type, data })), label)
    }
    for (const { data, type } of refused) {
      const label = `${type} ${JSON.stringify(data)}`
      assert.isTrue(Either.isLeft(codec.coreEvent({ type, data } as SessionEvent.CoreEventInput)), label)
      const stored = codec.storedEvent({ seq: 0, time: 0, type, data }, 0)
      assert.isTrue(Either.isLeft(stored) && stored.left._tag === "Invalid", label)
    }
    for (const { data, type } of newer) {
      const label = `${type} ${JSON.stringify(data)}`
      assert.isTrue(Either.isLeft(codec.coreEvent({ type, data } as SessionEvent.CoreEventInput)), label)
      const stored = codec.storedEvent({ seq: 0, time: 0, type, data }, 0)
      assert.isTrue(Either.isLeft(stored) && stored.left._tag === "Unsupported", label)
    }
  })

  it("DUR-00 SES-03 the v3 events add nothing to the model-visible history", () => {
    const log = stamp([
      ...opening(),
      assistantCalling(1, 1, "c1", "c2"),
      requested("c1"),
      decided("c1", "approved"),
      called("c1"),
      asked("c1", "q1"),
      answered("c1", "q1", "yes"),
      resulted("c1"),
      { type: "tool/child", data: { turn: 1, step: 1, callId: "c2", child: "kid" } },
      called("c2"),
      resulted("c2")
    ])
    const roles = Session.deriveMessages(log).map((m) => `${m.role}:${m.id}`)
    assert.deepStrictEqual(roles, ["user:u1", "assistant:a1.1", "tool:r-c1", "tool:r-c2"])
  })

  it.scoped("DUR-00 a version-3 file with approvals, questions and a child header reads back from disk", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-v3-" })
      const header = {
        format: SessionEvent.FORMAT,
        version: 3,
        id: "kid",
        createdAt: 0,
        seedLength: 0,
        meta: {},
        child: { parent: "parent", callId: "c9" }
      }
      const events = stamp([...opening(), assistantCalling(1, 1, "c1", "c2"), ...samples.slice(0, 1), asked("c2", "q1")])
      yield* fs.writeFileString(
        `${directory}/kid.jsonl`,
        [header, ...events].map((record) => JSON.stringify(record) + "\n").join("")
      )
      const stored = yield* Effect.gen(function*() {
        const persistence = yield* SessionPersistence
        return yield* persistence.read("kid" as Message.SessionId)
      }).pipe(Effect.provide(NodeFileSessionPersistence.layer({ directory })))
      assert.deepStrictEqual(stored.header.child, { parent: "parent", callId: "c9" })
      assert.deepStrictEqual(stored.events, events)
      const requests = Option.getOrThrow(pending.openStepRequests(stored.events))
      assert.deepStrictEqual(requests.pending.map((item) => item._tag), ["Approval", "Question"])
      assert.strictEqual(requests.earliestDeadline, 5)
    }).pipe(Effect.provide(NodeContext.layer)))
})

describe("what a person still has to settle (format v3)", () => {
  it("DUR-00 an unsettled approval or question suspends the open step; a settled one does not", () => {
    const waiting = requestsOf([...opening(), assistantCalling(1, 1, "c1", "c2"), requested("c1", { deadline: 9 })])
    assert.isTrue(waiting.suspended)
    assert.deepStrictEqual(waiting.pending.map((item) => item.callId), ["c1"])
    assert.strictEqual(waiting.earliestDeadline, 9)

    const approvedNotRun = requestsOf([
      ...opening(),
      assistantCalling(1, 1, "c1"),
      requested("c1"),
      decided("c1", "approved", { arguments: "{\"edited\":true}" })
    ])
    assert.isTrue(approvedNotRun.suspended)
    assert.deepStrictEqual(approvedNotRun.pending, [])
    assert.deepStrictEqual(approvedNotRun.approvedUndispatched.map((c) => [c.callId, c.arguments]), [
      ["c1", "{\"edited\":true}"]
    ])

    const running = requestsOf([...opening(), assistantCalling(1, 1, "c1"), requested("c1"), decided("c1", "approved"), called("c1")])
    assert.isFalse(running.suspended)

    const rejected = requestsOf([
      ...opening(),
      assistantCalling(1, 1, "c1"),
      requested("c1"),
      decided("c1", "rejected", { message: "not today" })
    ])
    assert.isFalse(rejected.suspended)
    assert.deepStrictEqual(rejected.refusedUnresolved.map((c) => [c.callId, c.decision, c.message]), [
      ["c1", "rejected", "not today"]
    ])
  })

  it("DUR-00 questions: pending until answered, answers kept in the order asked for replay", () => {
    const base = [...opening(), assistantCalling(1, 1, "c1"), called("c1")]
    const asking = requestsOf([...base, asked("c1", "q1"), answered("c1", "q1", "a"), asked("c1", "q2", { deadline: 3 })])
    assert.isTrue(asking.suspended)
    assert.deepStrictEqual(asking.pending.map((item) => item._tag === "Question" ? item.requestId : ""), ["q2"])
    assert.deepStrictEqual(asking.answers.get("c1"), [{ requestId: "q1", outcome: "provided", value: "a" }])
    assert.strictEqual(asking.earliestDeadline, 3)

    // a question whose call already has its result is not pending (a crash left it behind)
    const done = requestsOf([...base, asked("c1", "q1"), resulted("c1")])
    assert.isFalse(done.suspended)
    // a later duplicate decision or answer does not change the first
    const twice = requestsOf([
      ...opening(),
      assistantCalling(1, 1, "c1"),
      requested("c1"),
      decided("c1", "rejected"),
      decided("c1", "approved")
    ])
    assert.deepStrictEqual(twice.refusedUnresolved.map((c) => c.decision), ["rejected"])
  })

  it("DUR-00 no open step, no requests: a closed step or turn has nothing pending", () => {
    const closed = stamp([
      ...opening(),
      assistantCalling(1, 1, "c1"),
      requested("c1"),
      { type: "step/end", data: { turn: 1, step: 1 } }
    ])
    assert.isTrue(Option.isNone(pending.openStepRequests(closed)))
    assert.isFalse(pending.isSuspended(closed))
    assert.isTrue(Option.isNone(pending.openStepRequests([])))
  })
})
