/**
 * The host's application surface: `host.run` (APP-05), creating on demand (APP-06), and HOST-04's
 * cheap summaries for the memory store (it keeps them as it appends; recovery reads no log).
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Stream } from "effect"
import * as AgentError from "../src/AgentError.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as SessionError from "../src/SessionError.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { summariesByReading } from "../src/internal/host/recovery.js"
import type { Store } from "./fixtures/host.js"
import { hostOver } from "./fixtures/host.js"
import { route } from "./fixtures/runtime.js"

/** A memory store over `storage`; with `opened`, every `read` and `openWrite` is recorded by id. */
const memoryStore = (storage: SessionPersistence.MemoryStorage, opened?: Array<string>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(SessionPersistence.layerMemory(storage))
    if (opened === undefined) return { name: "memory", context } satisfies Store
    const inner = Context.get(context, SessionPersistence.SessionPersistence)
    const counted = SessionPersistence.SessionPersistence.of({
      ...inner,
      read: (id) => Effect.zipRight(Effect.sync(() => opened.push(`read:${id}`)), inner.read(id)),
      openWrite: (id) => Effect.zipRight(Effect.sync(() => opened.push(`openWrite:${id}`)), inner.openWrite(id))
    })
    return { name: "memory", context: Context.make(SessionPersistence.SessionPersistence, counted) } satisfies Store
  })

describe("APP-05 APP-06 the host runs turns", () => {
  it.scoped("APP-05 host.run activates (creating with its create argument), holds the agent while the turn runs, and returns its TurnResult", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const store = yield* memoryStore(storage)
      const { host } = yield* hostOver(store, [Model.text("hello there"), Model.fail("AUTH")])
      const result = yield* host.run("greeter", "hi", undefined, { options: route })
      assert.strictEqual(result.text, "hello there")
      assert.strictEqual(result.turn, 1)
      const failed = yield* Effect.exit(host.run("greeter", Message.user("again")))
      assert.isTrue(Exit.isFailure(failed) && failed.cause._tag === "Fail" && failed.cause.error instanceof AgentError.TurnFailed)
    }))

  it.scoped("APP-06 without createOnDemand an unknown id fails SessionNotFound saying how to create it; with it, get/use/run create with the host's agentOptions", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const store = yield* memoryStore(storage)
      const strict = yield* hostOver(store, [])
      const missing = yield* Effect.exit(strict.host.get("unknown"))
      assert.isTrue(Exit.isFailure(missing))
      const error = Exit.isFailure(missing) && missing.cause._tag === "Fail" ? missing.cause.error : undefined
      assert.isTrue(error instanceof SessionError.SessionNotFound)
      assert.include(String((error as SessionError.SessionNotFound).message), "createOnDemand: true")
      assert.include(String((error as SessionError.SessionNotFound).message), "host.get(id, { options })")
      yield* strict.close
      const lenient = yield* hostOver(store, [Model.text("made on demand"), Model.text("used")], {
        createOnDemand: true,
        agentOptions: route
      })
      const result = yield* lenient.host.run("fresh", "hello")
      assert.strictEqual(result.text, "made on demand")
      const used = yield* lenient.host.use("other", (agent) => agent.run("hi"))
      assert.strictEqual(used.text, "used")
      const agent = yield* lenient.host.get("third")
      assert.deepStrictEqual(agent.options, route)
      assert.isTrue(storage.sessions.has("fresh") && storage.sessions.has("other") && storage.sessions.has("third"))
    }))
})

describe("HOST-04 the memory store", () => {
  it.scoped("HOST-04 the memory store keeps summaries as it appends: they agree with a full read, and recovery reads no idle session's log", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const seeding = yield* memoryStore(storage)
      yield* Effect.scoped(Effect.gen(function*() {
        const { host, model } = yield* hostOver(seeding, {
          done: [Model.text("done")],
          hanging: [Model.hang("")]
        }, { drainTimeout: 0 })
        const done = yield* host.get("done", { options: route })
        yield* done.followup(Message.user("hi"))
        yield* done.whenIdle
        const parked = yield* host.get("parked", { options: route })
        yield* parked.inject(Message.user("context", { id: "inj" }))
        const hanging = yield* host.get("hanging", { options: route })
        yield* hanging.followup(Message.user("long"))
        yield* model.awaitRequest(2)
        yield* hanging.followup(Message.user("queued", { id: "queued" }))
      }))
      // truncated to inside the hanging turn: an open turn, as a crash leaves it
      const hangingEvents = (yield* storage.events("hanging" as Message.SessionId))!
      const open = hangingEvents.map((event) => event.type).lastIndexOf("turn/end")
      yield* storage.truncate("hanging" as Message.SessionId, open)
      const persistence = SessionPersistence.SessionPersistence
      const cheap = yield* Effect.flatMap(persistence, (p) => Stream.runCollect(p.summaries!)).pipe(
        Effect.provide(seeding.context)
      )
      const full = yield* Effect.flatMap(persistence, (p) => Stream.runCollect(summariesByReading(p))).pipe(
        Effect.provide(seeding.context)
      )
      assert.deepStrictEqual(Array.from(cheap), Array.from(full))
      const byId = Object.fromEntries(Array.from(cheap, (entry) => [entry.id, entry]))
      assert.deepInclude(byId["done"], { openTurn: false, pending: 0, pendingWaking: 0 })
      assert.deepInclude(byId["parked"], { openTurn: false, pending: 1, pendingWaking: 0 })
      assert.deepInclude(byId["hanging"], { openTurn: true, pending: 1, pendingWaking: 1 })
      // a new process: recovery opens only the session that needs it, and reads no log
      const opened: Array<string> = []
      const counting = yield* memoryStore(storage, opened)
      const { host } = yield* hostOver(counting, [Model.text("recovered")], { recover: true })
      const report = yield* host.recovery
      assert.deepStrictEqual<ReadonlyArray<string>>(report.candidates, ["hanging"])
      assert.deepStrictEqual<ReadonlyArray<string>>(report.activated, ["hanging"])
      assert.deepStrictEqual(opened, ["openWrite:hanging"])
    }))
})
