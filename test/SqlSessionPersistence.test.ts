import { SqlClient } from "@effect/sql/SqlClient"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Clock, Context, Deferred, Effect, Either, Exit, Fiber, Layer, Option, Schema, Scope, Stream, TestClock, Tracer } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as SessionError from "../src/SessionError.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import * as Tool from "../src/Tool.js"
import {
  assertOneCreateWins,
  conformance,
  header,
  hostile,
  notes,
  sid,
  sized,
  unencodable
} from "./fixtures/persistenceConformance.js"
import { recordingTracer } from "./fixtures/groupCommit.js"
import { assertCaseFoldedIds, assertInvalidIdRowListed } from "./fixtures/sqlIdentity.js"
import { withLogs } from "./fixtures/logs.js"
import { allSuspended, allSuspendedOrDone, eventually } from "./fixtures/waiting.js"
import { VERSION } from "../src/SessionEvent.js"

/** A fresh in-memory SQLite database per build. */
const sqliteMemory = SqliteClient.layer({ filename: ":memory:" })

/** Overwrites the header row of a stored session (DUR-07, DUR-08). */
const replaceHeaderRow = (id: string, text: string) =>
  Effect.flatMap(SqlClient, (sql) => sql`UPDATE effect_agent_sessions SET header = ${text} WHERE session_id = ${id}`)

conformance(
  "SqlSessionPersistence.layer on SQLite conformance (PERS-06)",
  (limits) => SqlSessionPersistence.layer(limits).pipe(Layer.provideMerge(sqliteMemory)),
  { replaceHeader: replaceHeaderRow }
)

const TTL = 30_000

/**
 * The persistence of one "process" (`instanceId`) over the database of the context, alive until
 * the Scope of the context closes (the layer's committer lives in it).
 */
const instance = (instanceId: string, options?: SqlSessionPersistence.Options) =>
  Layer.build(SqlSessionPersistence.layer({ leaseTtl: TTL, instanceId, ...options })).pipe(
    Effect.map(Context.get(SessionPersistence.SessionPersistence))
  )

/**
 * A clock that reads the time of `clock` but whose sleeps never end: a process stalled (a long
 * GC pause, a frozen VM) whose lease renewal never comes.
 */
const stalled = (clock: Clock.Clock): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => clock.unsafeCurrentTimeMillis(),
  unsafeCurrentTimeNanos: () => clock.unsafeCurrentTimeNanos(),
  currentTimeMillis: clock.currentTimeMillis,
  currentTimeNanos: clock.currentTimeNanos,
  sleep: () => Effect.never
})

const inSqlite = <A, E>(body: Effect.Effect<A, E, SqlClient | Scope.Scope>) =>
  Effect.scoped(body).pipe(Effect.provide(sqliteMemory))

describe("SqlSessionPersistence on SQLite", () => {
  it.effect("PERS-05 tables are created by a versioned migration, once", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      yield* instance("first")
      yield* instance("second")
      const versions = yield* sql<{ readonly version: number }>`SELECT version FROM effect_agent_migrations`
      assert.deepStrictEqual(versions.map((row) => row.version), [1, 2])
      const tables = yield* sql<{ readonly name: string }>`SELECT name FROM sqlite_master
        WHERE type = 'table' AND name LIKE 'effect_agent_%' ORDER BY name`
      assert.deepStrictEqual(tables.map((row) => row.name), [
        "effect_agent_events",
        "effect_agent_leases",
        "effect_agent_migrations",
        "effect_agent_sessions"
      ])
    })))

  it.effect("PERS-05 a database migrated by a newer version fails the layer with PersistenceError", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      yield* instance("first")
      yield* sql`INSERT INTO effect_agent_migrations (version, name, applied_at) VALUES (3, 'future', 0)`
      const refused = yield* Effect.flip(instance("second"))
      assert.strictEqual(refused._tag, "PersistenceError")
      assert.include(refused.reason, "schema version 3")
    })))

  it.effect("PERS-05 one row per event with a unique (session_id, seq), one header row per session", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const persistence = yield* instance("rows")
      const id = sid("rows")
      yield* Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) =>
        Effect.zipRight(writer.append(notes(0, 2)), writer.append(notes(2, 1)))))
      const sessions = yield* sql<{ readonly session_id: string; readonly header: string }>`SELECT session_id, header
        FROM effect_agent_sessions`
      assert.deepStrictEqual(sessions.map((row) => [row.session_id, JSON.parse(row.header)]), [[id, header(id)]])
      const events = yield* sql<{ readonly seq: number; readonly event_type: string; readonly record: string }>`SELECT
        seq, event_type, record FROM effect_agent_events WHERE session_id = ${id} ORDER BY seq`
      assert.deepStrictEqual(events.map((row) => [row.seq, row.event_type, JSON.parse(row.record)]), [
        [0, "test/note", notes(0, 1)[0]],
        [1, "test/note", notes(1, 1)[0]],
        [2, "test/note", notes(2, 1)[0]]
      ])
      const duplicate = yield* Effect.flip(
        sql`INSERT INTO effect_agent_events (session_id, seq, event_time, event_type, record)
          VALUES (${id}, 1, 0, 'x/y', '{}')`
      )
      assert.strictEqual(duplicate._tag, "SqlError")
      // Released writers leave no lease behind.
      assert.deepStrictEqual(yield* sql`SELECT * FROM effect_agent_leases`, [])
    })))

  it.effect("PERS-04 fsync durability sets PRAGMA synchronous = FULL; buffered sets NORMAL", () =>
    Effect.gen(function*() {
      const synchronous = (durability: SqlSessionPersistence.Durability) =>
        inSqlite(Effect.gen(function*() {
          const sql = yield* SqlClient
          yield* instance("pragma", { durability })
          const rows = yield* sql<{ readonly synchronous: number }>`PRAGMA synchronous`
          return rows[0]?.synchronous
        }))
      assert.strictEqual(yield* synchronous("fsync"), 2)
      assert.strictEqual(yield* synchronous("buffered"), 1)
    }))

  it.effect("PERS-04 the appends of one batch are one transaction: a failing batch stores none of it", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const persistence = yield* instance("atomic")
      const id = sid("atomic")
      const writer = yield* persistence.create(header(id))
      yield* writer.append(notes(0, 1))
      // The row of seq 300 is refused, after the first INSERT of the batch went in.
      yield* sql.unsafe(`CREATE TRIGGER refuse_300 BEFORE INSERT ON effect_agent_events
        WHEN NEW.seq = 300 BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
      const failed = yield* Effect.flip(writer.append(notes(1, 500)))
      assert.strictEqual(failed._tag, "PersistenceError")
      const seqs = yield* sql<{ readonly seq: number }>`SELECT seq FROM effect_agent_events WHERE session_id = ${id}
        ORDER BY seq`
      assert.deepStrictEqual(seqs.map((row) => row.seq), [0])
      assert.strictEqual(yield* writer.nextSeq, 1)
      yield* sql`DROP TRIGGER refuse_300`
      yield* writer.append(notes(1, 500))
      assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 501))
    })))

  it.effect("PERS-01 a valid lease blocks every other instance; renewal every ttl/3 keeps it valid", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const first = yield* instance("first")
      const second = yield* instance("second")
      const id = sid("leased")
      const scope = yield* Scope.make()
      const writer = yield* first.create(header(id)).pipe(Scope.extend(scope))
      yield* writer.append(notes(0, 1))

      const locked = yield* Effect.flip(Effect.scoped(second.openWrite(id)))
      assert.strictEqual(locked._tag, "SessionLocked")
      if (locked._tag === "SessionLocked") assert.include(locked.holder, "\"first\"")
      assert.strictEqual((yield* Effect.flip(second.remove(id)))._tag, "SessionLocked")

      // Ten ttls later the lease is still held: each tick of ttl/3 renewed it.
      const expiresAt = Effect.map(
        sql<{ readonly expires_at: number }>`SELECT expires_at FROM effect_agent_leases WHERE session_id = ${id}`,
        (rows) => Number(rows[0]?.expires_at)
      )
      for (let i = 0; i < 30; i++) {
        const before = yield* expiresAt
        yield* TestClock.adjust(TTL / 3)
        assert.strictEqual(yield* expiresAt, before + TTL / 3)
      }
      assert.strictEqual((yield* Effect.flip(Effect.scoped(second.openWrite(id))))._tag, "SessionLocked")
      yield* writer.append(notes(1, 1))

      yield* Scope.close(scope, Exit.void)
      const { stored } = yield* Effect.scoped(second.openWrite(id))
      assert.deepStrictEqual(stored.events, notes(0, 2))
    })))

  it.effect("PERS-05 an expired lease is taken over with a new token; the stale writer fails SessionConflict", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const first = yield* instance("stalled")
      const second = yield* instance("taker")
      const id = sid("takeover")
      const clock = yield* Effect.clock
      // The first writer's process stalls right after creating: it never renews its lease.
      const stale = yield* first.create(header(id)).pipe(Effect.withClock(stalled(clock)))
      yield* stale.append(notes(0, 2))
      const [before] = yield* sql<{ readonly token: string }>`SELECT token FROM effect_agent_leases`

      yield* TestClock.adjust(TTL - 1)
      assert.strictEqual((yield* Effect.flip(Effect.scoped(second.openWrite(id))))._tag, "SessionLocked")
      yield* TestClock.adjust(1)

      const [{ stored, writer }, logs] = yield* withLogs(second.openWrite(id))
      assert.deepStrictEqual(stored.events, notes(0, 2))
      assert.isTrue(
        logs.some((l) => l.startsWith("WARN") && l.includes("took over") && l.includes("\"stalled\"")),
        logs.join("\n")
      )
      const [after] = yield* sql<{ readonly token: string; readonly holder: string }>`SELECT token, holder
        FROM effect_agent_leases`
      assert.notStrictEqual(after?.token, before?.token)
      assert.include(after?.holder ?? "", "\"taker\"")

      // The stale writer wakes up: its append is refused and writes nothing.
      const refused = yield* Effect.flip(stale.append(notes(2, 1)))
      assert.strictEqual(refused._tag, "SessionConflict")
      assert.deepStrictEqual((yield* second.read(id)).events, notes(0, 2))
      // Nor can it discard what is no longer its session, or release the new lease.
      yield* writer.append(notes(2, 1))
      assert.deepStrictEqual((yield* second.read(id)).events, notes(0, 3))
      yield* stale.discard
      assert.isTrue(yield* second.exists(id))
      assert.strictEqual((yield* Effect.flip(Effect.scoped(first.openWrite(id))))._tag, "SessionLocked")
    })))

  it.effect("PERS-05 a writer whose lease was taken over learns it at the next renewal and stops renewing", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const first = yield* instance("first")
      const second = yield* instance("second")
      const id = sid("lost")
      const [writer, logs] = yield* withLogs(Effect.gen(function*() {
        const writer = yield* first.create(header(id))
        yield* writer.append(notes(0, 1))
        // An operator (or a partition) let the lease expire behind the writer's back.
        yield* sql`UPDATE effect_agent_leases SET expires_at = 0`
        yield* Effect.scoped(Effect.flatMap(second.openWrite(id), ({ writer }) => writer.append(notes(1, 1))))
        yield* TestClock.adjust(TTL / 3)
        return writer
      }))
      assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes("taken over")), logs.join("\n"))
      const refused = yield* Effect.flip(writer.append(notes(1, 1)))
      assert.strictEqual(refused._tag, "SessionConflict")
      assert.deepStrictEqual((yield* second.read(id)).events, notes(0, 2))
    })))

  it.effect("PERS-03 a bad row fails SessionCorrupt{line} (or SessionFormatUnsupported) and changes nothing", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const persistence = yield* instance("reader")
      const cases: ReadonlyArray<readonly [string, string, number]> = [
        ["not-json", "{\"seq\":1,", 3],
        ["schema", JSON.stringify({ seq: 1, time: 0, type: "turn/start", data: { turn: 0 } }), 3],
        ["seq", JSON.stringify({ ...notes(1, 1)[0], seq: 7 }), 3]
      ]
      for (const [name, record, line] of cases) {
        const id = sid(`bad-${name}`)
        yield* Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(notes(0, 3))))
        yield* sql`UPDATE effect_agent_events SET record = ${record} WHERE session_id = ${id} AND seq = 1`
        const read = yield* Effect.flip(persistence.read(id))
        assert.strictEqual(read._tag, "SessionCorrupt", name)
        if (read._tag === "SessionCorrupt") assert.strictEqual(read.line, line, name)
        const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
        assert.strictEqual(opened._tag, "SessionCorrupt", name)
        const [row] = yield* sql<{ readonly record: string }>`SELECT record FROM effect_agent_events
          WHERE session_id = ${id} AND seq = 1`
        assert.strictEqual(row?.record, record, name)
        // The failed openWrite released its lease.
        assert.deepStrictEqual(yield* sql`SELECT * FROM effect_agent_leases`, [], name)
      }

      const newer = sid("newer")
      yield* Effect.scoped(persistence.create(header(newer)))
      yield* sql`UPDATE effect_agent_sessions SET header = ${JSON.stringify({ ...header(newer), version: VERSION + 1 })}
        WHERE session_id = ${newer}`
      assert.strictEqual((yield* Effect.flip(persistence.read(newer)))._tag, "SessionFormatUnsupported")
      const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(newer)))
      assert.strictEqual(opened._tag, "SessionFormatUnsupported")

      const foreign = sid("foreign")
      yield* Effect.scoped(persistence.create(header(foreign)))
      yield* sql`UPDATE effect_agent_sessions SET header = '{"name":"package"}' WHERE session_id = ${foreign}`
      const notSession = yield* Effect.flip(persistence.read(foreign))
      assert.strictEqual(notSession._tag, "SessionCorrupt")
      if (notSession._tag === "SessionCorrupt") assert.strictEqual(notSession.line, 1)
    })))

  it.effect("SEC-07 a row whose seq column disagrees with its record fails SessionCorrupt naming both; nothing changes", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const persistence = yield* instance("reader")
      // the last row (no later row hides the gap) and a middle row moved past the end
      for (const [name, from, to] of [["last", 2, 9], ["middle", 1, 7]] as const) {
        const id = sid(`misplaced-${name}`)
        yield* Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(notes(0, 3))))
        yield* sql`UPDATE effect_agent_events SET seq = ${to} WHERE session_id = ${id} AND seq = ${from}`
        const before = yield* sql`SELECT seq, record FROM effect_agent_events WHERE session_id = ${id} ORDER BY seq`
        const read = yield* Effect.flip(persistence.read(id))
        assert.strictEqual(read._tag, "SessionCorrupt", name)
        if (read._tag === "SessionCorrupt") {
          assert.include(read.message, `"${id}"`, name)
          if (name === "last") {
            assert.strictEqual(read.line, from + 2)
            assert.include(read.reason, `seq ${from}`)
            assert.include(read.reason, `seq ${to}`)
          } else {
            // in seq order the record of seq 2 stands where seq 1 belongs: the gap is named
            assert.strictEqual(read.line, 3)
          }
        }
        // a resume (and `repair`, which opens the same way) refuses it instead of failing every append later
        const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
        assert.strictEqual(opened._tag, "SessionCorrupt", name)
        assert.deepStrictEqual(
          yield* sql`SELECT seq, record FROM effect_agent_events WHERE session_id = ${id} ORDER BY seq`,
          before,
          name
        )
        assert.deepStrictEqual(yield* sql`SELECT * FROM effect_agent_leases`, [], name)
      }
    })))

  it.effect("PERS-01 concurrent creates of one id have exactly one winner", () =>
    inSqlite(Effect.gen(function*() {
      yield* assertOneCreateWins([yield* instance("a"), yield* instance("b"), yield* instance("c")])
    })))

  it.effect("PERS-05 RES-03 an agent runs over SQLite, and another process resumes it after a crash", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const model = yield* Model.scripted([
        [Model.text("let me look"), Model.toolCall("c1", "lookup", "{\"key\":\"a\"}")],
        Model.text("a is known"),
        Model.hang("")
      ])
      const lookup = Tool.make({
        name: "lookup",
        description: "Looks a key up.",
        parameters: Schema.Struct({ key: Schema.String }),
        run: ({ key }) => Effect.succeed(Tool.text(`value of ${key}`))
      })
      const runtime = (instanceId: string) =>
        Layer.build(
          AgentRuntime.layer.pipe(
            Layer.provideMerge(SqlSessionPersistence.layer({ instanceId, leaseTtl: TTL })),
            Layer.provide(model.layer)
          )
        )
      const clock = yield* Effect.clock
      // The first process runs a turn, starts another and stalls inside it: its lease lapses.
      const first = yield* runtime("first")
      const before = yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({
          sessionId: "sql-agent",
          options: { provider: "scripted", model: "test" },
          setup: (agent) => agent.tools.register(lookup)
        })
        yield* handle.agent.followup(Message.user("q1", { id: "m-q1" }))
        yield* handle.agent.whenIdle
        yield* handle.agent.followup(Message.user("q2", { id: "m-q2" }))
        yield* model.awaitRequest(3)
        return yield* handle.agent.session.events
      }).pipe(Effect.provide(first), Effect.withClock(stalled(clock)))
      const stored = yield* sql<{ readonly n: number }>`SELECT COUNT(*) AS n FROM effect_agent_events`
      assert.strictEqual(stored[0]?.n, before.length)

      yield* TestClock.adjust(TTL)
      const [resumed] = yield* withLogs(Effect.gen(function*() {
        const second = yield* runtime("second")
        return yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const handle = yield* registry.resume({ sessionId: "sql-agent" })
          const events = yield* handle.agent.session.events
          yield* handle.dispose
          return events
        }).pipe(Effect.provide(second))
      }))
      // The open turn 2 was closed durably by repair; turn 1 came back exactly.
      assert.deepStrictEqual(resumed.slice(0, before.length), before)
      assert.deepStrictEqual(resumed.slice(before.length).map((e) => e.type), ["step/end", "turn/end"])
      assert.deepStrictEqual(resumed[resumed.length - 1]?.data, { turn: 2, reason: { kind: "interrupted" } })
      const persistence = yield* instance("reader")
      assert.deepStrictEqual((yield* persistence.read(sid("sql-agent"))).events, resumed)
    })))

  it.effect("PERS-06 list pages through many sessions in id order", () =>
    inSqlite(Effect.gen(function*() {
      const persistence = yield* instance("lister")
      const ids = Array.from({ length: 1_001 }, (_, i) => sid(`s-${String(i).padStart(5, "0")}`))
      yield* Effect.forEach(ids, (id) => Effect.scoped(persistence.create(header(id))), { discard: true })
      const listed = Chunk.toArray(yield* Stream.runCollect(persistence.list))
      assert.deepStrictEqual(listed.map((summary) => summary.id), ids)
      assert.isTrue(listed.every((summary) => summary._tag === "SessionSummary" && summary.eventCount === 0))
    })))
})

/**
 * Holds SQLite's one connection in a transaction until `release`: every statement, the committer's
 * included, waits behind it.
 */
const holdConnection = Effect.gen(function*() {
  const sql = yield* SqlClient
  const held = yield* Deferred.make<void>()
  const gate = yield* Deferred.make<void>()
  const holder = yield* Effect.fork(sql.withTransaction(Deferred.succeed(held, undefined).pipe(
    Effect.zipRight(Deferred.await(gate))
  )))
  yield* Deferred.await(held)
  return Deferred.succeed(gate, undefined).pipe(Effect.zipRight(Fiber.join(holder)))
})

/**
 * Appends each batch from its own fiber while the connection is held, so that all of them wait for
 * the committer together; then lets them go and returns their outcomes in order.
 */
const appendTogether = (
  batches: ReadonlyArray<readonly [SessionPersistence.SessionWriter, Parameters<SessionPersistence.SessionWriter["append"]>[0]]>
) =>
  Effect.gen(function*() {
    const release = yield* holdConnection
    const appends = yield* Effect.forEach(batches, ([writer, events]) => Effect.fork(Effect.either(writer.append(events))))
    // a batch refused before it reaches the committer is done already
    yield* eventually(allSuspendedOrDone(appends))
    yield* release
    return yield* Effect.forEach(appends, Fiber.join)
  })

/** Writers of fresh sessions `${prefix}-0` … of one persistence instance, living in the test's Scope. */
const writersOf = (persistence: SessionPersistence.SessionPersistence["Type"], prefix: string, count: number) =>
  Effect.forEach(Array.from({ length: count }, (_, i) => sid(`${prefix}-${i}`)), (id) =>
    Effect.map(persistence.create(header(id)), (writer) => ({ id, writer })))

describe("SqlSessionPersistence identity and listing on SQLite (DUR)", () => {
  it.effect("DUR-07 a database whose collation folds case never hands out or removes another id's session", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const persistence = yield* instance("folded")
      // The sessions table rebuilt with a case-insensitive key, as a database could have it.
      const fold = Effect.forEach([
        "ALTER TABLE effect_agent_sessions RENAME TO effect_agent_sessions_cs",
        `CREATE TABLE effect_agent_sessions (session_id TEXT PRIMARY KEY COLLATE NOCASE, header TEXT NOT NULL,
          updated_at BIGINT NOT NULL)`,
        "INSERT INTO effect_agent_sessions SELECT * FROM effect_agent_sessions_cs",
        "DROP TABLE effect_agent_sessions_cs"
      ], (statement) => sql.unsafe(statement), { discard: true })
      yield* assertCaseFoldedIds(persistence, fold)
    })))

  it.effect("DUR-08 list reports a row whose id is not a valid session id and lists the rest", () =>
    inSqlite(Effect.gen(function*() {
      yield* assertInvalidIdRowListed(yield* instance("lister"), yield* SqlClient)
    })))
})

describe("SqlSessionPersistence group commit across sessions on SQLite", () => {
  it.effect("SES-02 batches of many sessions waiting behind a commit share one transaction", () =>
    inSqlite(Effect.gen(function*() {
      const recording = yield* recordingTracer
      yield* Effect.gen(function*() {
        const persistence = yield* instance("group")
        const sessions = yield* writersOf(persistence, "group", 8)
        const outcomes = yield* appendTogether(sessions.map(({ writer }) => [writer, notes(0, 3)] as const))
        assert.isTrue(outcomes.every(Either.isRight))
        // Without group commit across sessions this is eight transactions, eight syncs.
        assert.deepStrictEqual(recording.commits(), [8])
        for (const { id, writer } of sessions) {
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 3))
          assert.strictEqual(yield* writer.nextSeq, 3)
        }
        // A batch that finds the committer idle is committed at once, alone.
        yield* sessions[0]!.writer.append(notes(3, 1))
        assert.deepStrictEqual(recording.commits(), [8, 1])
      }).pipe(Effect.withTracer(recording.tracer))
    })))

  it.effect("SES-02 PERS-02 in a shared commit a batch that lost its lease or its seq fails alone", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const recording = yield* recordingTracer
      yield* Effect.gen(function*() {
        const persistence = yield* instance("fenced")
        const [a, stolen, stale, d] = yield* writersOf(persistence, "fenced", 4)
        yield* stale!.writer.append(notes(0, 1))
        // Another process took the lease of `stolen`; a row of `stale` went in behind its writer's back.
        yield* sql`UPDATE effect_agent_leases SET token = 'someone else' WHERE session_id = ${stolen!.id}`
        yield* sql`INSERT INTO effect_agent_events ${
          sql.insert({ session_id: stale!.id, seq: 1, event_time: 1, event_type: "test/note", record: "{}" })
        }`
        const earlier = recording.commits().length
        const [okA, lost, behind, okD] = yield* appendTogether([
          [a!.writer, notes(0, 2)],
          [stolen!.writer, notes(0, 2)],
          [stale!.writer, notes(1, 2)],
          [d!.writer, notes(0, 2)]
        ])
        assert.deepStrictEqual(recording.commits().slice(earlier), [4])
        assert.isTrue(okA!._tag === "Right" && okD!._tag === "Right")
        assert.deepStrictEqual(lost, Either.left(new SessionError.SessionConflict({ id: stolen!.id, expectedSeq: 0, actualSeq: 0 })))
        assert.deepStrictEqual(behind, Either.left(new SessionError.SessionConflict({ id: stale!.id, expectedSeq: 1, actualSeq: 2 })))
        assert.deepStrictEqual((yield* persistence.read(a!.id)).events, notes(0, 2))
        assert.deepStrictEqual((yield* persistence.read(d!.id)).events, notes(0, 2))
        assert.deepStrictEqual((yield* persistence.read(stolen!.id)).events, [])
        const leases = yield* sql<{ readonly token: string }>`SELECT token FROM effect_agent_leases
          WHERE session_id = ${stolen!.id}`
        assert.deepStrictEqual(leases.map((row) => row.token), ["someone else"])
      }).pipe(Effect.withTracer(recording.tracer))
    })))

  it.effect("SES-02b a statement failing on one session's rows in a shared commit fails that batch alone", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const recording = yield* recordingTracer
      yield* Effect.gen(function*() {
        const persistence = yield* instance("isolated")
        const sessions = yield* writersOf(persistence, "isolated", 3)
        const broken = sessions[1]!
        yield* sql.unsafe(`CREATE TRIGGER refuse_isolated BEFORE INSERT ON effect_agent_events
          WHEN NEW.session_id = '${broken.id}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
        const outcomes = yield* appendTogether(sessions.map(({ writer }) => [writer, notes(0, 2)] as const))
        assert.deepStrictEqual(recording.commits(), [3])
        assert.deepStrictEqual(outcomes.map((outcome) => Either.isRight(outcome)), [true, false, true])
        const failed = outcomes[1]!
        assert.isTrue(Either.isLeft(failed) && failed.left._tag === "PersistenceError")
        if (Either.isLeft(failed)) assert.include(failed.left.message, "injected failure")
        for (const { id } of [sessions[0]!, sessions[2]!]) {
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 2))
        }
        assert.deepStrictEqual((yield* persistence.read(broken.id)).events, [])
        assert.strictEqual(yield* broken.writer.nextSeq, 0)
        // Nothing was committed for it, so the same batch goes in once the fault is gone.
        yield* sql`DROP TRIGGER refuse_isolated`
        yield* broken.writer.append(notes(0, 2))
        assert.deepStrictEqual((yield* persistence.read(broken.id)).events, notes(0, 2))
      }).pipe(Effect.withTracer(recording.tracer))
    })))

  it.effect("CORE-01 DUR-04 a commit that dies outside its transaction answers its callers; later appends commit", () =>
    inSqlite(Effect.gen(function*() {
      // a tracer whose span for the commit throws while armed: a defect outside the transaction
      let armed = false
      const inner = yield* Effect.tracer
      const throwing = Tracer.make({
        span: (name, parent, context, links, startTime, kind, options) => {
          if (armed && name === "SqlSessionPersistence.commit") throw new Error("the tracer broke")
          return inner.span(name, parent, context, links, startTime, kind, options)
        },
        context: inner.context
      })
      const persistence = yield* Effect.withTracer(instance("dying"), throwing)
      const id = sid("dying-commit")
      const writer = yield* persistence.create(header(id))
      armed = true
      const refused = yield* Effect.flip(writer.append(notes(0, 2)))
      assert.strictEqual(refused._tag, "PersistenceError")
      if (refused._tag === "PersistenceError") assert.include(refused.reason, "the tracer broke")
      armed = false
      yield* writer.append(notes(0, 2))
      assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 2))
    })))

  it.effect("DUR-04 in a shared commit a batch that cannot be encoded, is oversize or breaks a constraint fails alone; the others commit", () =>
    inSqlite(Effect.gen(function*() {
      const sql = yield* SqlClient
      const recording = yield* recordingTracer
      yield* Effect.gen(function*() {
        const persistence = yield* instance("dur-04", { maxEventBytes: 1_024 })
        const sessions = yield* writersOf(persistence, "dur-04", 24)
        const broken = sessions[17]!
        yield* sql.unsafe(`CREATE TRIGGER refuse_dur_04 BEFORE INSERT ON effect_agent_events
          WHEN NEW.session_id = '${broken.id}' BEGIN SELECT RAISE(ABORT, 'injected constraint failure'); END`)
        // sessions 2, 5, 8, 11 and 14 get a value the encoder refuses, 20 an event over maxEventBytes
        const refusedAt = new Map(unencodable().map(([data], i) => [2 + 3 * i, data] as const))
        const batchOf = (i: number) => {
          if (i === 20) return [...notes(0, 1), sized(1, 1_025)] as const
          const data = refusedAt.get(i)
          return data === undefined ? notes(0, 3) : [...notes(0, 2), hostile(2, data)] as const
        }
        const outcomes = yield* appendTogether(sessions.map(({ writer }, i) => [writer, batchOf(i)] as const))
        // the batches refused at encoding never reached the commit; the one the trigger refuses did
        assert.deepStrictEqual(recording.commits(), [24 - refusedAt.size - 1])
        const tags = outcomes.map((outcome) => Either.isRight(outcome) ? "ok" : outcome.left._tag)
        assert.deepStrictEqual(tags, sessions.map((_, i) =>
          i === 17 ? "PersistenceError" : i === 20 || refusedAt.has(i) ? "InvalidEventData" : "ok"))
        for (const [i, { id, writer }] of sessions.entries()) {
          const isRefused = tags[i] !== "ok"
          assert.deepStrictEqual((yield* persistence.read(id)).events, isRefused ? [] : notes(0, 3))
          assert.strictEqual(yield* writer.nextSeq, isRefused ? 0 : 3)
        }
        // nothing of theirs was committed, and their writers go on
        yield* sql`DROP TRIGGER refuse_dur_04`
        for (const [i, { id, writer }] of sessions.entries()) {
          if (tags[i] === "ok") continue
          yield* writer.append(notes(0, 1))
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 1))
        }
      }).pipe(Effect.withTracer(recording.tracer))
    })))

  it.effect("SES-02 closing the layer commits every batch accepted before it and refuses later ones; nothing hangs", () =>
    inSqlite(Effect.gen(function*() {
      const recording = yield* recordingTracer
      yield* Effect.gen(function*() {
        const layerScope = yield* Scope.make()
        const persistence = yield* Layer.buildWithScope(
          SqlSessionPersistence.layer({ leaseTtl: TTL, instanceId: "closing" }),
          layerScope
        ).pipe(Effect.map(Context.get(SessionPersistence.SessionPersistence)))
        const [first, queued, late] = yield* writersOf(persistence, "closing", 3)
        const release = yield* holdConnection
        const inFlight = yield* Effect.fork(first!.writer.append(notes(0, 1)))
        // The committer took it and waits for the connection.
        yield* recording.awaitCommits(1)
        const waiting = yield* Effect.fork(Effect.either(queued!.writer.append(notes(0, 1))))
        yield* eventually(allSuspended([waiting]))
        const closing = yield* Effect.fork(Scope.close(layerScope, Exit.void))
        yield* eventually(allSuspended([closing]))
        // Refused at once, while the commit in flight still waits.
        const refused = yield* Effect.flip(late!.writer.append(notes(0, 1)))
        assert.strictEqual(refused._tag, "PersistenceError")
        assert.include(refused.message, "closed")
        yield* release
        yield* Fiber.join(closing)
        // The close returned only after the batch in flight and the one queued behind it committed.
        assert.isTrue(Option.isSome(yield* Fiber.poll(inFlight)))
        assert.isTrue(Option.isSome(yield* Fiber.poll(waiting)))
        yield* Fiber.join(inFlight)
        assert.deepStrictEqual(yield* Fiber.join(waiting), Either.right(undefined))
        assert.deepStrictEqual(recording.commits(), [1, 1])
        const reader = yield* instance("reader")
        assert.deepStrictEqual((yield* reader.read(first!.id)).events, notes(0, 1))
        assert.deepStrictEqual((yield* reader.read(queued!.id)).events, notes(0, 1))
        assert.deepStrictEqual((yield* reader.read(late!.id)).events, [])
      }).pipe(Effect.withTracer(recording.tracer))
    })))
})
