/**
 * AgentHost recovery at start (HOST-04) over real stores: a child process killed mid-turn with a
 * steer and a follow-up pending, then a host with `recover: true` repairs the turn and runs both
 * without a new message; the cheap summaries (file sidecar index, SQL query) agree with a full read.
 */
import { Command, FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { fileURLToPath } from "node:url"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import { summariesByReading } from "../src/internal/host/recovery.js"
import { emptyState, foldEvent, summaryOf } from "../src/internal/log/summary.js"
import type { SessionId } from "../src/Message.js"
import type { Store } from "./fixtures/host.js"
import { fileStoreAt, hostOver, postgresStoreAt, sqliteStoreAt } from "./fixtures/host.js"
import { route } from "./fixtures/runtime.js"

const create = { options: route }

const backends = [
  { name: "files", child: "files", at: (dir: string) => dir, store: fileStoreAt },
  { name: "SQLite", child: "sqlite", at: (dir: string) => `${dir}/sessions.sqlite`, store: sqliteStoreAt }
] as const

/** Sessions in three states: done (nothing to run), a parked inject alone, a pending follow-up. */
const seedSessions = (store: Store) =>
  Effect.scoped(Effect.gen(function*() {
    const { host, model } = yield* hostOver(store, { done: [Model.text("done")], parked: [Model.hang("")] }, {
      drainTimeout: 0
    })
    const done = yield* host.get("done", create)
    yield* done.followup(Message.user("hi"))
    yield* done.whenIdle
    const parked = yield* host.get("parked", create)
    yield* parked.inject(Message.user("context", { id: "inj" }))
    const pending = yield* host.get("pending", create)
    yield* pending.inbox.append("next-turn", Message.user("seeded, not waking", { id: "seed" }))
    const hanging = yield* host.get("hanging", create)
    yield* hanging.followup(Message.user("long"))
    yield* model.awaitRequest(2)
    yield* hanging.followup(Message.user("queued", { id: "queued" }))
  }))

const summariesOf = (store: Store) =>
  Effect.gen(function*() {
    const persistence = yield* SessionPersistence
    const cheap = yield* Stream.runCollect(persistence.summaries!)
    const full = yield* Stream.runCollect(summariesByReading(persistence))
    return { cheap: Array.from(cheap), full: Array.from(full) }
  }).pipe(Effect.provide(store.context))

const idsOf = (events: ReadonlyArray<SessionEvent>) =>
  events.flatMap((event) =>
    event.type === "user/message" ? [(event.data as { message: { id: string } }).message.id] : []
  )

describe("AgentHost summaries", () => {
  it("HOST-03 HOST-04 v1 splices (no wake field) read as: next-turn waking, next-step not, restored waking", () => {
    const message = (id: string) => ({ id, role: "user", content: [{ type: "text", text: id }], source: { kind: "user" } })
    const splice = (target: string, ids: ReadonlyArray<string>, extra: Record<string, unknown> = {}) => ({
      target,
      start: 0,
      removed: [],
      inserted: ids.map(message),
      ...extra
    })
    const fold = (splices: ReadonlyArray<ReturnType<typeof splice>>) => {
      const state = emptyState()
      splices.forEach((data, seq) => foldEvent(state, seq, "agent/inbox/spliced", data, 0))
      return summaryOf("s" as SessionId, state)
    }
    assert.deepInclude(fold([splice("next-step", ["a"])]), { pending: 1, pendingWaking: 0 })
    assert.deepInclude(fold([splice("next-turn", ["a"])]), { pending: 1, pendingWaking: 1 })
    assert.deepInclude(fold([splice("next-step", ["a"], { outcome: "restored" })]), { pendingWaking: 1 })
    assert.deepInclude(fold([splice("next-step", ["a"], { wake: true })]), { pendingWaking: 1 })
    assert.deepInclude(fold([splice("next-turn", ["a"], { wake: false })]), { pending: 1, pendingWaking: 0 })
    // splices of the seed are not replayed (INB-05)
    const seeded = emptyState()
    foldEvent(seeded, 0, "agent/inbox/spliced", splice("next-turn", ["a"]), 1)
    assert.deepInclude(summaryOf("s" as SessionId, seeded), { pending: 0 })
  })
})

const pgUrl = process.env["EFFECT_AGENT_PG_URL"]

describe("AgentHost summaries over Postgres", () => {
  // .ci/run starts a server (SqlPostgres.test.ts fails in CI without one); skipped locally without it
  it.scoped.skipIf(pgUrl === undefined)(
    "HOST-04 the SQL summaries query on Postgres agrees with a full read: open turns and pending waking input",
    () =>
      Effect.gen(function*() {
        const store = yield* postgresStoreAt(pgUrl!)
        yield* seedSessions(store)
        const { cheap, full } = yield* summariesOf(store)
        assert.deepStrictEqual(cheap, full)
        const byId = Object.fromEntries(cheap.map((entry) => [entry.id, entry]))
        assert.deepInclude(byId["done"], { openTurn: false, pending: 0, pendingWaking: 0 })
        assert.deepInclude(byId["parked"], { openTurn: false, pending: 1, pendingWaking: 0 })
        assert.deepInclude(byId["pending"], { openTurn: false, pending: 1, pendingWaking: 0 })
        assert.deepInclude(byId["hanging"], { openTurn: false, pending: 1, pendingWaking: 1 })
      })
  )
})

for (const backend of backends) {
  describe(`AgentHost recovery over ${backend.name}`, () => {
    it.scoped("HOST-04 the cheap summaries agree with a full read: open turns and pending waking input", () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-summaries-" })
        const store = yield* backend.store(backend.at(directory))
        yield* seedSessions(store)
        const first = yield* summariesOf(store)
        assert.deepStrictEqual(first.cheap, first.full)
        const byId = Object.fromEntries(first.cheap.map((entry) => [entry.id, entry]))
        assert.deepInclude(byId["done"], { openTurn: false, pending: 0, pendingWaking: 0 })
        assert.deepInclude(byId["parked"], { openTurn: false, pending: 1, pendingWaking: 0 })
        assert.deepInclude(byId["pending"], { openTurn: false, pending: 1, pendingWaking: 0 })
        // the hanging turn was ended by the drain (aborted, disposed); its queued follow-up waits
        assert.deepInclude(byId["hanging"], { openTurn: false, pending: 1, pendingWaking: 1 })
        if (backend.name === "files") {
          // the sidecar index exists, is used after more appends, and is rebuilt when removed
          assert.isTrue(yield* fs.exists(`${directory}/.summaries/hanging.json`))
          yield* Effect.scoped(Effect.gen(function*() {
            const { host } = yield* hostOver(store, [Model.text("ran")])
            const agent = yield* host.get("parked")
            yield* agent.followup(Message.user("now run", { id: "run" }))
            yield* agent.whenIdle
          }))
          const second = yield* summariesOf(store)
          assert.deepStrictEqual(second.cheap, second.full)
          yield* fs.remove(`${directory}/.summaries`, { recursive: true })
          const third = yield* summariesOf(store)
          assert.deepStrictEqual(third.cheap, second.full)
        }
      }).pipe(Effect.provide(NodeContext.layer)))

    it.scoped(
      "HOST-04 HOST-03 a child killed mid-turn with a steer and a follow-up pending: a host with recover: true runs both",
      () =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-recover-" })
          const where = backend.at(directory)
          // a session with nothing to run and one with a parked inject: recovery leaves them alone
          yield* Effect.scoped(Effect.gen(function*() {
            const store = yield* backend.store(where)
            yield* Effect.scoped(Effect.gen(function*() {
              const { host } = yield* hostOver(store, [Model.text("done")])
              const done = yield* host.get("quiet", create)
              yield* done.followup(Message.user("hi"))
              yield* done.whenIdle
              const parked = yield* host.get("parked", create)
              yield* parked.inject(Message.user("context only"))
            }))
          }))
          const fixture = fileURLToPath(new URL("./fixtures/hostChild.ts", import.meta.url))
          const repository = fileURLToPath(new URL("..", import.meta.url))
          const child = yield* Command.make(process.execPath, "--import", "tsx", fixture, backend.child, where, "crashed")
            .pipe(Command.workingDirectory(repository), Command.start)
          const ready = yield* child.stdout.pipe(
            Stream.decodeText(),
            Stream.takeUntil((text) => text.includes("ready")),
            Stream.mkString
          )
          assert.include(ready, "ready")
          yield* child.kill("SIGKILL")
          yield* child.exitCode.pipe(Effect.ignore)

          const store = yield* backend.store(where)
          const { host, model } = yield* hostOver(store, [Model.text("recovered")], { recover: true })
          const report = yield* host.recovery
          assert.deepStrictEqual<ReadonlyArray<string>>(report.candidates, ["crashed"])
          assert.deepStrictEqual<ReadonlyArray<string>>(report.activated, ["crashed"])
          assert.deepStrictEqual(report.failed, [])
          const agent = yield* host.get("crashed")
          yield* agent.whenIdle
          const events = yield* agent.session.events
          const ends = events.filter((event) => event.type === "turn/end").map((event) =>
            (event.data as { reason: { kind: string } }).reason.kind
          )
          assert.deepStrictEqual(ends, ["interrupted", "completed"])
          assert.deepStrictEqual(idsOf(events), ["first-1", "steer-1", "followup-1"])
          const requests = yield* model.requests
          assert.strictEqual(requests.length, 1)
          assert.deepStrictEqual(yield* agent.inbox.nextTurn, [])
          assert.deepStrictEqual<ReadonlyArray<string>>(yield* host.live, ["crashed"])
        }).pipe(Effect.provide(NodeContext.layer)),
      120_000
    )
  })
}



