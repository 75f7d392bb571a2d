/**
 * `effect-agent/Cluster` on one in-process runner (CLU-01, CLU-03): the agent entity's protocol
 * through the cluster client, which is also the `SessionGateway` (HTTP-00), over a real Postgres
 * (`EFFECT_AGENT_PG_URL`, a fresh schema) and a real socket runner. The multi-process behaviour
 * (failover, fencing) is in `Cluster-processes.test.ts`.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Option, Schedule, Stream } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Cluster from "../src/Cluster.js"
import * as Message from "../src/Message.js"
import { SessionGateway } from "../src/SessionGateway.js"
import type * as TurnResult from "../src/TurnResult.js"
import * as inProcess from "./fixtures/clusterInProcess.js"

const url = process.env["EFFECT_AGENT_PG_URL"]
const ci = process.env["CI"]
const isCI = ci !== undefined && ci !== "" && ci !== "0" && ci.toLowerCase() !== "false"

const options = { provider: "echo", model: "echo" }
const same = Message.MessageId.make("same")

/** The types of a stream of gateway events, durable ones only. */
const durableTypes = (events: Chunk.Chunk<{ readonly _tag: string; readonly event: { readonly type?: string } }>) =>
  Chunk.toReadonlyArray(events).filter((item) => item._tag === "Durable").map((item) => item.event.type ?? "")

if (url === undefined) {
  if (isCI) {
    describe("Cluster", () => {
      it("has a server in CI (EFFECT_AGENT_PG_URL)", () => {
        assert.fail("CI is set but EFFECT_AGENT_PG_URL is not: .ci/run must start Postgres and export it")
      })
    })
  } else {
    // eslint-disable-next-line no-console
    console.log(
      "Cluster.test.ts: skipped — set EFFECT_AGENT_PG_URL (e.g. postgres://postgres@127.0.0.1:54329/postgres) " +
        "to run the cluster tests (CLU-01, CLU-03); .ci/run starts a server and sets it"
    )
    describe.skip("Cluster (EFFECT_AGENT_PG_URL is not set)", () => {
      it("needs a server", () => {})
    })
  }
} else {
  layer(inProcess.layer(url), { timeout: 120_000, excludeTestServices: true })("Cluster on one runner", (it) => {
    it.effect("CLU-01 HTTP-00 create, send, summary, whenIdle and the event stream from a cursor, through the gateway", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const client = yield* Cluster.ClusterClient
        const first = yield* gateway.create("clu01-basic", { options })
        assert.isTrue(first.created)
        assert.strictEqual(first.session.status, "idle")
        const again = yield* gateway.create("clu01-basic", { options })
        assert.isFalse(again.created)
        const receipt = yield* gateway.send("clu01-basic", { text: "hello", id: Message.MessageId.make("m1") })
        assert.deepStrictEqual(receipt, { messageId: "m1", duplicate: false })
        yield* client.whenIdle("clu01-basic")
        const info = yield* gateway.summary("clu01-basic")
        assert.strictEqual(info.status, "idle")
        assert.isFalse(info.openTurn)
        assert.deepStrictEqual(info.pending, { nextTurn: 0, nextStep: 0 })
        // the whole log, then from a cursor inside it: no gap, no duplicate
        const all = yield* Stream.runCollect(
          gateway.eventsFrom("clu01-basic", 0).pipe(Stream.filter((item) => item._tag === "Durable"), Stream.take(info.eventCount))
        )
        const seqs = Chunk.toReadonlyArray(all).map((item) => item._tag === "Durable" ? item.event.seq : -1)
        assert.deepStrictEqual(seqs, Array.from({ length: info.eventCount }, (_, i) => i))
        assert.include(durableTypes(all), "user/message")
        assert.include(durableTypes(all), "assistant/message")
        const tail = yield* Stream.runCollect(
          gateway.eventsFrom("clu01-basic", 3).pipe(Stream.filter((item) => item._tag === "Durable"), Stream.take(info.eventCount - 3))
        )
        assert.deepStrictEqual(
          Chunk.toReadonlyArray(tail).map((item) => item._tag === "Durable" ? item.event.seq : -1),
          seqs.slice(3)
        )
      }))

    it.effect("CLU-03 HTTP-02 a MessageId sent again with the same content is a duplicate that appends nothing; with other content MessageIdConflict", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const client = yield* Cluster.ClusterClient
        yield* gateway.create("clu03-dedup", { options })
        yield* gateway.send("clu03-dedup", { text: "once", id: same })
        yield* client.whenIdle("clu03-dedup")
        const before = (yield* gateway.summary("clu03-dedup")).eventCount
        const again = yield* gateway.send("clu03-dedup", { text: "once", id: same })
        assert.deepStrictEqual(again, { messageId: "same", duplicate: true })
        const other = yield* Effect.flip(gateway.send("clu03-dedup", { text: "something else", id: same }))
        assert.strictEqual(other._tag, "MessageIdConflict")
        const otherMode = yield* Effect.flip(gateway.send("clu03-dedup", { text: "once", id: same, mode: "inject" }))
        assert.strictEqual(otherMode._tag, "MessageIdConflict")
        yield* client.whenIdle("clu03-dedup")
        assert.strictEqual((yield* gateway.summary("clu03-dedup")).eventCount, before)
      }))

    it.effect("CLU-01 entity concurrency is unbounded: a pending WhenIdle and an open event stream do not hold up Cancel", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const client = yield* Cluster.ClusterClient
        yield* gateway.create("clu01-cancel", { options })
        yield* gateway.send("clu01-cancel", { text: "hang until canceled" })
        const running = yield* Deferred.make<void>()
        const stream = yield* gateway.eventsFrom("clu01-cancel", 0).pipe(
          Stream.tap((item) =>
            item._tag === "Durable" && item.event.type === "turn/start" ? Deferred.succeed(running, undefined) : Effect.void
          ),
          Stream.runDrain,
          Effect.fork
        )
        yield* Deferred.await(running)
        const idle = yield* Effect.fork(client.whenIdle("clu01-cancel"))
        yield* Effect.yieldNow()
        assert.isNull(idle.unsafePoll())
        yield* gateway.cancel("clu01-cancel")
        yield* Fiber.join(idle)
        const info = yield* gateway.summary("clu01-cancel")
        assert.strictEqual(info.status, "idle")
        assert.isFalse(info.openTurn)
        yield* Fiber.interrupt(stream)
      }))

    it.effect("APP-05 CLU-01 run and turn through the entity: the result of the run's turn (settings stored with its message), a known id attaches, other content conflicts; past its wait RunAccepted, TurnRunning while it runs, the failed turn's result once canceled", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        yield* gateway.create("app05-run", { options })
        const run = gateway.run!
        const turn = gateway.turn!
        const first = yield* run("app05-run", { message: "hello", id: "r1", settings: { temperature: 0.4 } })
        assert.isFalse("_tag" in first)
        const result = first as TurnResult.TurnResult
        assert.strictEqual(result.text, "echo: hello")
        assert.strictEqual(result.turn, 1)
        assert.deepStrictEqual(yield* turn("app05-run", 1), result)
        const before = (yield* gateway.summary("app05-run")).eventCount
        assert.deepStrictEqual(yield* run("app05-run", { message: "hello", id: "r1" }), result)
        assert.strictEqual((yield* gateway.summary("app05-run")).eventCount, before)
        const conflict = yield* Effect.flip(run("app05-run", { message: "other", id: "r1" }))
        assert.strictEqual(conflict._tag, "MessageIdConflict")
        const bad = yield* Effect.flip(run("app05-run", { message: "x", settings: { temperature: 9 } }))
        assert.strictEqual(bad._tag, "InvalidAgentOptions")
        const missing = yield* Effect.flip(turn("app05-run", 9))
        assert.strictEqual(missing._tag, "TurnNotFound")
        // the run's settings are stored with its message (APP-04: durable, its turn only)
        const events = yield* Stream.runCollect(
          gateway.eventsFrom("app05-run", 0).pipe(Stream.filter((item) => item._tag === "Durable"), Stream.take(before))
        )
        const inserted = Chunk.toReadonlyArray(events).flatMap((item) =>
          item._tag === "Durable" && item.event.type === "agent/inbox/spliced"
            ? (item.event.data as { readonly inserted: ReadonlyArray<{ readonly id: string; readonly turnOptions?: unknown }> }).inserted
            : []
        )
        assert.deepStrictEqual(inserted.find((m) => m.id === "r1")?.turnOptions, { settings: { temperature: 0.4 } })
        // a turn that outlives the run's wait
        const accepted = yield* run("app05-run", { message: "hang on", id: "r2" }, { wait: "1 second" })
        assert.deepStrictEqual(accepted, { _tag: "RunAccepted", messageId: Message.MessageId.make("r2"), turn: 2 })
        const running = yield* Effect.flip(turn("app05-run", 2))
        assert.strictEqual(running._tag, "TurnRunning")
        yield* gateway.cancel("app05-run")
        const aborted = yield* turn("app05-run", 2, { wait: "30 seconds" })
        assert.strictEqual(aborted.reason.kind, "aborted")
      }))

    it.effect("CLU-01 sends keep their order: the log accepts them in the order they were sent", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const client = yield* Cluster.ClusterClient
        yield* gateway.create("clu01-order", { options })
        const ids = Array.from({ length: 12 }, (_, i) => `o${String(i).padStart(2, "0")}`)
        for (const id of ids) yield* gateway.send("clu01-order", { text: id, id: Message.MessageId.make(id), mode: "inject" })
        yield* client.wake("clu01-order")
        yield* client.whenIdle("clu01-order")
        const events = yield* Stream.runCollect(
          gateway.eventsFrom("clu01-order", 0).pipe(
            Stream.filter((item) => item._tag === "Durable"),
            Stream.take((yield* gateway.summary("clu01-order")).eventCount)
          )
        )
        const inserted = Chunk.toReadonlyArray(events).flatMap((item) =>
          item._tag === "Durable" && item.event.type === "agent/inbox/spliced"
            ? (item.event.data as { readonly inserted: ReadonlyArray<{ readonly id: string }> }).inserted.map((m) => m.id)
            : []
        )
        assert.deepStrictEqual(inserted, ids)
      }))

    it.effect("CLU-01 FORK-01 fork creates the child through its own entity; forking onto an existing session fails AgentAlreadyExists", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const client = yield* Cluster.ClusterClient
        yield* gateway.create("clu01-parent", { options })
        yield* gateway.send("clu01-parent", { text: "remember this" })
        yield* client.whenIdle("clu01-parent")
        const parent = yield* gateway.summary("clu01-parent")
        const child = yield* gateway.fork("clu01-parent", { childId: "clu01-child" })
        assert.strictEqual(child.id, "clu01-child")
        assert.strictEqual(child.parentSession, "clu01-parent")
        assert.strictEqual(child.eventCount, parent.eventCount)
        yield* gateway.send("clu01-child", { text: "and now?" })
        yield* client.whenIdle("clu01-child")
        assert.isAbove((yield* gateway.summary("clu01-child")).eventCount, parent.eventCount)
        const twice = yield* Effect.flip(gateway.fork("clu01-parent", { childId: "clu01-child" }))
        assert.strictEqual(twice._tag, "AgentAlreadyExists")
        const badChild = yield* Effect.flip(gateway.fork("clu01-parent", { childId: "" }))
        assert.strictEqual(badChild._tag, "InvalidSessionId")
      }))

    it.effect("CLU-01 dispose passivates the agent (the next send resumes it); remove deletes the log", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const client = yield* Cluster.ClusterClient
        const registry = yield* AgentRegistry
        yield* gateway.create("clu01-dispose", { options })
        yield* gateway.send("clu01-dispose", { text: "one" })
        yield* client.whenIdle("clu01-dispose")
        yield* gateway.dispose("clu01-dispose")
        assert.isTrue(Option.isNone(yield* registry.get("clu01-dispose")))
        assert.strictEqual((yield* gateway.summary("clu01-dispose")).status, "passive")
        yield* gateway.send("clu01-dispose", { text: "two" })
        yield* client.whenIdle("clu01-dispose")
        assert.isTrue(Option.isSome(yield* registry.get("clu01-dispose")))
        yield* gateway.remove("clu01-dispose")
        const gone = yield* Effect.flip(gateway.summary("clu01-dispose"))
        assert.strictEqual(gone._tag, "SessionNotFound")
        const missing = yield* Effect.flip(gateway.send("clu01-never-created", { text: "hi" }))
        assert.strictEqual(missing._tag, "SessionNotFound")
      }))

    it.effect("ID-01 HTTP-00 an invalid session id fails InvalidSessionId before it reaches the cluster", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const exit = yield* Effect.exit(gateway.send("../etc", { text: "x" }))
        assert.isTrue(Exit.isFailure(exit))
        const error = yield* Effect.flip(gateway.summary("../etc"))
        assert.strictEqual(error._tag, "InvalidSessionId")
      }))

    it.effect("HTTP-00 list pages the stored sessions with their summaries", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        for (const id of ["list-a", "list-b", "list-c"]) yield* gateway.create(id, { options })
        const page = yield* gateway.list({ limit: 2, after: "list-" })
        assert.deepStrictEqual(page.sessions.map((entry) => entry.id), ["list-a", "list-b"])
        assert.strictEqual(page.next, "list-b")
        const rest = yield* gateway.list({ limit: 2, after: "list-b" })
        assert.deepStrictEqual(rest.sessions.map((entry) => entry.id), ["list-c"])
        assert.isTrue(yield* gateway.ready)
      }))

    it.effect("SEC-06 the cluster gateway lists like the host's: no meta unless includeMeta, a meta over maxMetaBytes flagged metaTruncated; DUR-03 a __proto__ key of a meta crosses the wire as data", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const proto = JSON.parse("{\"__proto__\":{\"polluted\":true}}") as Record<string, never>
        yield* gateway.create("sec06-a", { options, meta: { title: "small" } })
        yield* gateway.create("sec06-b", { options, meta: { notes: "n".repeat(200) } })
        yield* gateway.create("sec06-c", { options, meta: proto })
        const page = { limit: 3, after: "sec06-" }
        const plain = yield* gateway.list(page)
        assert.deepStrictEqual(plain.sessions.map((entry) => entry.id), ["sec06-a", "sec06-b", "sec06-c"])
        assert.isTrue(plain.sessions.every((entry) => !("meta" in entry) && !("metaTruncated" in entry)))
        const withMeta = yield* gateway.list({ ...page, includeMeta: true, maxMetaBytes: 100 })
        const shown = withMeta.sessions.map((entry) =>
          entry._tag === "SessionInfo" ? [entry.meta === undefined ? undefined : JSON.stringify(entry.meta), entry.metaTruncated] : []
        )
        assert.deepStrictEqual(shown, [
          ["{\"title\":\"small\"}", undefined],
          [undefined, true],
          ["{\"__proto__\":{\"polluted\":true}}", undefined]
        ])
        const stored = (yield* gateway.summary("sec06-c")).meta
        assert.isTrue(Object.hasOwn(stored, "__proto__"))
        assert.strictEqual(Object.getPrototypeOf(stored), Object.prototype)
      }))
  })

  layer(inProcess.layer(url, { maxIdleTime: "1 second" }), { timeout: 120_000, excludeTestServices: true })("Cluster passivation", (it) => {
    it.effect("CLU-01 an entity without requests for the cluster's entityMaxIdleTime is passivated (the host's idleTimeout is off)", () =>
      Effect.gen(function*() {
        const gateway = yield* SessionGateway
        const client = yield* Cluster.ClusterClient
        const registry = yield* AgentRegistry
        yield* gateway.create("clu01-idle", { options })
        yield* gateway.send("clu01-idle", { text: "hello" })
        yield* client.whenIdle("clu01-idle")
        assert.isTrue(Option.isSome(yield* registry.get("clu01-idle")))
        // the cluster's reaper looks every 5 s at the least: bounded by 30 s
        yield* registry.get("clu01-idle").pipe(
          Effect.filterOrFail(Option.isNone, () => "still live"),
          Effect.retry(Schedule.spaced("250 millis").pipe(Schedule.upTo("30 seconds")))
        )
        assert.strictEqual((yield* gateway.summary("clu01-idle")).status, "passive")
      }))
  })
}

