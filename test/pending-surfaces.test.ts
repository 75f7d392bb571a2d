/**
 * HIL-04 and HIL-06 where a person (or an operator) looks without activating anything: the recovery
 * summaries of every store say which sessions are suspended, what they wait for and their earliest
 * deadline, the same as the pure derivation over the log (`log/pending.ts`) — the memory store, the
 * file sidecar, SQLite and Postgres.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Stream } from "effect"
import type { SessionId } from "../src/Message.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { summariesByReading } from "../src/internal/host/recovery.js"
import * as pending from "../src/internal/log/pending.js"
import { emptyState, foldEvent, needsRecovery, summaryOf } from "../src/internal/log/summary.js"
import { CliOutput } from "../src/cli/output.js"
import { program } from "../src/cli/program.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { Store } from "./fixtures/host.js"
import { fileStore as httpFileStore, request, serve } from "./fixtures/httpServer.js"
import { route } from "./fixtures/runtime.js"
import { fileStoreAt, postgresStoreAt, sqliteStoreAt } from "./fixtures/host.js"
import { tempDirectory } from "./fixtures/backends.js"
import {
  answered,
  approvedNotDispatched,
  asked,
  awaitingAnswer,
  awaitingApproval,
  called,
  calling,
  decided,
  interrupted,
  opening,
  requested,
  resulted,
  settled,
  stamp,
  T
} from "./fixtures/hilSessions.js"
import { header, sid } from "./fixtures/persistenceConformance.js"

const logs: Record<string, () => readonly [SessionEvent, ...Array<SessionEvent>]> = {
  "awaiting-approval": () => awaitingApproval(T + 60_000),
  "awaiting-answer": awaitingAnswer,
  "approved-not-dispatched": approvedNotDispatched,
  settled,
  interrupted
}

const fold = (events: ReadonlyArray<SessionEvent>) => {
  const state = emptyState()
  for (const event of events) foldEvent(state, event.seq, event.type, event.data, 0)
  return summaryOf("s" as SessionId, state)
}

/** What the pure derivation says the summary must carry. */
const expectedAwaiting = (events: ReadonlyArray<SessionEvent>) => {
  const requests = pending.openStepRequests(events)
  if (Option.isNone(requests) || !requests.value.suspended) return undefined
  const { approvedUndispatched, earliestDeadline, pending: items } = requests.value
  const counts = {
    approvals: items.filter((item) => item._tag === "Approval").length,
    questions: items.filter((item) => item._tag === "Question").length,
    approvedUndispatched: approvedUndispatched.length
  }
  return earliestDeadline === undefined ? counts : { ...counts, earliestDeadline }
}

describe("HIL-04 summaries of suspended sessions", () => {
  it("HIL-04 the summary fold agrees with the pure derivation on every prefix of approval and question rounds", () => {
    const rounds = [
      stamp([
        ...opening(),
        calling(1, 1, "c1", "c2", "c3"),
        requested("c1", { deadline: T + 5 }),
        requested("c2"),
        called("c3"),
        asked("c3", "q1", { deadline: T + 3 }),
        decided("c1", "approved"),
        decided("c1", "rejected"),
        decided("c2", "rejected", { message: "no" }),
        called("c2"),
        resulted("c2"),
        answered("c3", "q1", "eu"),
        asked("c3", "q2"),
        called("c1"),
        resulted("c3"),
        resulted("c1"),
        { type: "step/end", data: { turn: 1, step: 1 } },
        { type: "step/start", data: { turn: 1, step: 2 } },
        requested("c9"),
        { type: "turn/end", data: { turn: 1, reason: { kind: "aborted", cause: "user" } } }
      ] as const)
    ]
    for (const log of rounds) {
      for (let n = 0; n <= log.length; n++) {
        const prefix = log.slice(0, n)
        const summary = fold(prefix)
        assert.deepStrictEqual(summary.awaiting, expectedAwaiting(prefix), `prefix of ${n} events`)
      }
    }
  })

  it("HIL-04 recovery activates a suspended session only for an approved call to dispatch or a due deadline", () => {
    const approval = fold(awaitingApproval(T + 60_000))
    assert.isTrue(approval.openTurn)
    assert.deepStrictEqual(approval.awaiting, { approvals: 1, questions: 0, approvedUndispatched: 0, earliestDeadline: T + 60_000 })
    assert.isFalse(needsRecovery(approval, T))
    assert.isTrue(needsRecovery(approval, T + 60_000))
    assert.isFalse(needsRecovery(fold(awaitingAnswer()), T + 1e9))
    assert.isTrue(needsRecovery(fold(approvedNotDispatched()), T))
    // an open turn with nothing pending is interrupted: repaired by resume, as ever
    assert.isTrue(needsRecovery(fold(interrupted()), T))
    assert.isFalse(needsRecovery(fold(settled()), T))
    // a child is never a root (SUB-02), suspended or not
    assert.isFalse(needsRecovery({ ...fold(approvedNotDispatched()), parent: "p" as SessionId }, T))
  })
})

const storeSessions = (store: Store) =>
  Effect.gen(function*() {
    const persistence = yield* SessionPersistence.SessionPersistence
    for (const [id, log] of Object.entries(logs)) {
      yield* Effect.scoped(Effect.flatMap(persistence.create(header(sid(id))), (writer) => writer.append(log())))
    }
    const cheap = yield* Stream.runCollect(persistence.summaries!)
    const full = yield* Stream.runCollect(summariesByReading(persistence))
    return { cheap: Array.from(cheap), full: Array.from(full) }
  }).pipe(Effect.provide(store.context))

const checkSummaries = (summaries: { readonly cheap: ReadonlyArray<unknown>; readonly full: ReadonlyArray<unknown> }) => {
  assert.deepStrictEqual(summaries.cheap, summaries.full)
  const byId = Object.fromEntries(
    summaries.cheap.map((entry) => [(entry as SessionPersistence.RecoverySummary).id, entry])
  ) as Record<string, SessionPersistence.RecoverySummary>
  for (const [id, log] of Object.entries(logs)) {
    assert.deepStrictEqual(byId[id]!.awaiting, expectedAwaiting(log()), id)
  }
  assert.deepStrictEqual(byId["awaiting-approval"]!.awaiting?.earliestDeadline, T + 60_000)
  assert.deepStrictEqual(byId["awaiting-answer"]!.awaiting?.questions, 1)
  assert.deepStrictEqual(byId["approved-not-dispatched"]!.awaiting?.approvedUndispatched, 1)
  assert.isUndefined(byId["settled"]!.awaiting)
  assert.isUndefined(byId["interrupted"]!.awaiting)
}

const memoryStore = Effect.flatMap(SessionPersistence.makeMemoryStorage, (storage) =>
  Effect.map(Layer.build(SessionPersistence.layerMemory(storage)), (context): Store => ({ name: "memory", context })))

const pgUrl = process.env["EFFECT_AGENT_PG_URL"]

describe("HIL-04 every store's cheap summaries carry what a suspended session waits for", () => {
  it.scoped("HIL-04 HOST-04 memory store", () =>
    Effect.gen(function*() {
      checkSummaries(yield* storeSessions(yield* memoryStore))
    }))

  it.scoped("HIL-04 HOST-04 file store: the sidecar keeps the open step's requests, and is rebuilt from the log", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-hil-summaries-")
      const store = yield* fileStoreAt(directory)
      checkSummaries(yield* storeSessions(store))
      // the sidecars written by the first listing are read back (and appended to) the same
      const again = yield* Effect.gen(function*() {
        const persistence = yield* SessionPersistence.SessionPersistence
        const { writer } = yield* persistence.openWrite(sid("awaiting-answer"))
        yield* writer.append(stamp([answered("c1", "q1", "eu")], awaitingAnswer().length))
        return Array.from(yield* Stream.runCollect(persistence.summaries!))
      }).pipe(Effect.scoped, Effect.provide(store.context))
      const answeredNow = again.find((entry) => entry.id === "awaiting-answer") as SessionPersistence.RecoverySummary
      assert.isUndefined(answeredNow.awaiting)
      assert.isTrue(answeredNow.openTurn)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("HIL-04 HOST-04 SQLite: the query folds the request rows, and a step's calls only where they matter", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-hil-sqlite-")
      checkSummaries(yield* storeSessions(yield* sqliteStoreAt(`${directory}/sessions.sqlite`)))
    }))

  it.scoped.skipIf(pgUrl === undefined)("HIL-04 HOST-04 Postgres", () =>
    Effect.gen(function*() {
      checkSummaries(yield* storeSessions(yield* postgresStoreAt(pgUrl!)))
    }))
})

/** The logs stored in a file store of a temp directory, served over HTTP (an idle live session beside them). */
const servedWithLogs = Effect.gen(function*() {
  const store = yield* httpFileStore
  yield* storeSessions(store)
  const served = yield* serve(store, [Model.text("hello")])
  const live = yield* served.host.get("live-idle", { options: route })
  yield* live.followup(Message.user("hi"))
  yield* live.whenIdle
  return served
})

describe("HIL-06 summaries and listings", () => {
  it.scoped("HIL-06 a suspended session is awaiting-input in its summary and in GET /sessions?status=awaiting-input", () =>
    Effect.gen(function*() {
      const served = yield* servedWithLogs
      const approval = yield* served.gateway.summary("awaiting-approval")
      assert.strictEqual(approval.status, "awaiting-input")
      assert.deepStrictEqual(approval.awaiting, {
        approvals: 1,
        questions: 0,
        approvedUndispatched: 0,
        earliestDeadline: T + 60_000
      })
      const settledInfo = yield* served.gateway.summary("settled")
      assert.strictEqual(settledInfo.status, "passive")
      assert.isUndefined(settledInfo.awaiting)

      const awaiting = yield* request(`${served.url}/sessions?status=awaiting-input`)
      assert.strictEqual(awaiting.status, 200)
      const page = awaiting.body as { sessions: ReadonlyArray<{ id: string; status: string }>; next?: string }
      assert.deepStrictEqual(page.sessions.map((entry) => entry.id), [
        "approved-not-dispatched",
        "awaiting-answer",
        "awaiting-approval"
      ])
      assert.isTrue(page.sessions.every((entry) => entry.status === "awaiting-input"))
      // paged: a page of one, then the next from its cursor
      const first = yield* request(`${served.url}/sessions?status=awaiting-input&limit=1`)
      const firstPage = first.body as { sessions: ReadonlyArray<{ id: string }>; next?: string }
      assert.deepStrictEqual(firstPage.sessions.map((entry) => entry.id), ["approved-not-dispatched"])
      assert.strictEqual(firstPage.next, "approved-not-dispatched")
      const second = yield* request(`${served.url}/sessions?status=awaiting-input&limit=2&after=${firstPage.next}`)
      assert.deepStrictEqual((second.body as typeof page).sessions.map((entry) => entry.id), [
        "awaiting-answer",
        "awaiting-approval"
      ])
      // the other statuses filter too; a live agent is known by its own status
      const idle = yield* request(`${served.url}/sessions?status=idle`)
      assert.deepStrictEqual((idle.body as typeof page).sessions.map((entry) => entry.id), ["live-idle"])
      const passive = yield* served.gateway.list({ status: "passive" })
      assert.deepStrictEqual(passive.sessions.map((entry) => entry.id), ["interrupted", "settled"])
      const bad = yield* request(`${served.url}/sessions?status=sleeping`)
      assert.strictEqual(bad.status, 400)
      // reading a suspended session activated nothing
      assert.deepStrictEqual(Array.from(yield* served.host.live, String), ["live-idle"])
    }))
})

/** The CLI run in-process (as `cli.test.ts` does): stdout and the exit code. */
const cli = (...args: ReadonlyArray<string>) =>
  Effect.suspend(() => {
    let stdout = ""
    return program([process.execPath, "effect-agent", ...args]).pipe(
      Effect.provideService(CliOutput, { stdout: (text) => void (stdout += text), stderr: () => undefined }),
      Effect.map((code) => ({ code, stdout }))
    )
  })

describe("HIL-06 pending items where a person looks", () => {
  it.scoped("HIL-06 host.pending, gateway.pending and GET /sessions/:id/pending read a passive session's items without activating it", () =>
    Effect.gen(function*() {
      const served = yield* servedWithLogs
      const fromHost = yield* served.host.pending("awaiting-approval")
      assert.deepStrictEqual(fromHost, [{
        _tag: "Approval",
        sessionId: sid("awaiting-approval"),
        seq: 4,
        turn: 1,
        step: 1,
        callId: "c1",
        approvalId: "ap-c1",
        tool: "deploy",
        arguments: "{\"env\":\"prod\"}",
        deadline: T + 60_000
      }])
      const fromGateway = yield* served.gateway.pending!("awaiting-answer")
      assert.deepStrictEqual(fromGateway.map((item) => [item._tag, item.sessionId, item.callId]), [
        ["Question", "awaiting-answer", "c1"]
      ])
      assert.deepStrictEqual(yield* served.gateway.pending!("settled"), [])
      const overHttp = yield* request(`${served.url}/sessions/awaiting-answer/pending`)
      assert.strictEqual(overHttp.status, 200)
      assert.deepStrictEqual(overHttp.body, {
        pending: [{
          _tag: "Question",
          sessionId: "awaiting-answer",
          seq: 5,
          turn: 1,
          step: 1,
          callId: "c1",
          requestId: "q1",
          question: "Which region?",
          jsonSchema: { type: "string" }
        }]
      })
      const missing = yield* request(`${served.url}/sessions/nobody/pending`)
      assert.strictEqual(missing.status, 404)
      assert.deepInclude(missing.body as object, { title: "SessionNotFound" })
      const invalid = yield* request(`${served.url}/sessions/${encodeURIComponent("no spaces")}/pending`)
      assert.strictEqual(invalid.status, 400)
      // nothing was activated to answer
      assert.deepStrictEqual(Array.from(yield* served.host.live, String), ["live-idle"])
      // a live agent answers from its own log (nothing pending in an idle one)
      assert.deepStrictEqual(yield* served.host.pending("live-idle"), [])
    }))

  it.scoped("HIL-06 sessions show lists the pending approvals and questions (human and --json)", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-hil-cli-")
      yield* storeSessions(yield* fileStoreAt(directory))
      const human = yield* cli("sessions", "show", "awaiting-approval", "--dir", directory)
      assert.strictEqual(human.code, 0, human.stdout)
      assert.match(
        human.stdout,
        /Pending\s+approval of "deploy" \(call c1, approval ap-c1\) with arguments \{"env":"prod"\}, rejected automatically at 2023-11-14T22:14:20\.000Z/
      )
      const json = yield* cli("sessions", "show", "awaiting-answer", "--dir", directory, "--json")
      assert.strictEqual(json.code, 0, json.stdout)
      const doc = JSON.parse(json.stdout) as { pending: ReadonlyArray<{ _tag: string; requestId: string }> }
      assert.deepStrictEqual(doc.pending.map((item) => [item._tag, item.requestId]), [["Question", "q1"]])
      const none = yield* cli("sessions", "show", "settled", "--dir", directory)
      assert.match(none.stdout, /Pending\s+nothing to approve or answer/)
    }).pipe(Effect.provide(NodeContext.layer)))
})
