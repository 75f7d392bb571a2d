/**
 * The SQL persistence on a real Postgres server: the conformance suite, leases across connection
 * pools (each pool stands for a process), and concurrent migration.
 *
 * `EFFECT_AGENT_PG_URL` names the server (`.ci/run` starts a throwaway one). Without it the suite
 * is skipped with a message — unless `CI` is set, where a missing server is a failure.
 */
import { SqlClient } from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Clock, Context, Deferred, Effect, Either, Exit, Fiber, Layer, Scope, Stream, TestClock } from "effect"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
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
import { freshDatabase } from "./fixtures/postgres.js"
import { allSuspended, allSuspendedOrDone, eventually } from "./fixtures/waiting.js"

const url = process.env["EFFECT_AGENT_PG_URL"]
const ci = process.env["CI"]
const isCI = ci !== undefined && ci !== "" && ci !== "0" && ci.toLowerCase() !== "false"

const TTL = 30_000

/** A clock that reads `clock`'s time but whose sleeps never end: a stalled process. */
const stalled = (clock: Clock.Clock): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => clock.unsafeCurrentTimeMillis(),
  unsafeCurrentTimeNanos: () => clock.unsafeCurrentTimeNanos(),
  currentTimeMillis: clock.currentTimeMillis,
  currentTimeNanos: clock.currentTimeNanos,
  sleep: () => Effect.never
})

if (url === undefined) {
  if (isCI) {
    describe("SqlSessionPersistence on Postgres", () => {
      it("has a server in CI (EFFECT_AGENT_PG_URL)", () => {
        assert.fail("CI is set but EFFECT_AGENT_PG_URL is not: .ci/run must start Postgres and export it")
      })
    })
  } else {
    // eslint-disable-next-line no-console
    console.log(
      "SqlPostgres.test.ts: skipped — set EFFECT_AGENT_PG_URL (e.g. postgres://postgres@127.0.0.1:54329/postgres) " +
        "to run the Postgres persistence tests; .ci/run starts a server and sets it"
    )
    describe.skip("SqlSessionPersistence on Postgres (EFFECT_AGENT_PG_URL is not set)", () => {
      it("needs a server", () => {})
    })
  }
} else {
  const base = url

  conformance(
    "SqlSessionPersistence.layer on Postgres conformance (PERS-06)",
    (limits) =>
      Layer.unwrapScoped(
        Effect.map(
          freshDatabase(base),
          (client) => SqlSessionPersistence.layer(limits).pipe(Layer.provideMerge(client()))
        )
      ),
    {
      propertyRuns: 15,
      replaceHeader: (id, text) =>
        Effect.flatMap(SqlClient, (sql) =>
          sql`UPDATE effect_agent_sessions SET header = ${text} WHERE session_id = ${id}`)
    }
  )

  /** Runs `body` with a fresh schema and a factory of "processes" over it. */
  const withDatabase = <A, E>(
    body: (
      process: (
        instanceId: string,
        options?: SqlSessionPersistence.Options
      ) => Effect.Effect<SessionPersistence.SessionPersistence["Type"], unknown, Scope.Scope>,
      sql: SqlClient
    ) => Effect.Effect<A, E, Scope.Scope>
  ) =>
    Effect.scoped(Effect.gen(function*() {
      const client = yield* freshDatabase(base)
      const process = (instanceId: string, options?: SqlSessionPersistence.Options) =>
        Effect.map(
          Layer.build(
            SqlSessionPersistence.layer({ leaseTtl: TTL, instanceId, ...options }).pipe(Layer.provide(client()))
          ),
          Context.get(SessionPersistence.SessionPersistence)
        )
      const sql = yield* Effect.map(Layer.build(client()), Context.get(SqlClient))
      return yield* body(process, sql)
    }))

  describe("SqlSessionPersistence on Postgres", () => {
    it.effect("PERS-05 processes that start at once migrate once (advisory lock)", () =>
      withDatabase((process, sql) =>
        Effect.gen(function*() {
          yield* Effect.forEach(["a", "b", "c", "d"], (id) => process(id), { concurrency: "unbounded" })
          const versions = yield* sql<{ readonly version: number }>`SELECT version FROM effect_agent_migrations
            ORDER BY version`
          assert.deepStrictEqual(versions.map((row) => row.version), [1, 2])
        })))

    it.effect("PERS-01 concurrent creates of one id from separate pools have exactly one winner", () =>
      withDatabase((process) =>
        Effect.gen(function*() {
          yield* assertOneCreateWins(yield* Effect.forEach(["a", "b", "c"], (id) => process(id)))
        })))

    it.effect("PERS-01 a valid lease blocks other processes; renewal every ttl/3 keeps it valid", () =>
      withDatabase((process, sql) =>
        Effect.gen(function*() {
          const first = yield* process("first")
          const second = yield* process("second")
          const id = sid("leased")
          const scope = yield* Scope.make()
          const writer = yield* first.create(header(id)).pipe(Scope.extend(scope))
          yield* writer.append(notes(0, 1))
          const locked = yield* Effect.flip(Effect.scoped(second.openWrite(id)))
          assert.strictEqual(locked._tag, "SessionLocked")
          if (locked._tag === "SessionLocked") assert.include(locked.holder, "\"first\"")
          // Each tick of ttl/3 renews the lease (the renewal's query is real I/O: wait until it landed).
          const expiresAt = Effect.map(
            sql<{ readonly expires_at: string }>`SELECT expires_at FROM effect_agent_leases WHERE session_id = ${id}`,
            (rows) => Number(rows[0]?.expires_at)
          )
          for (let i = 0; i < 9; i++) {
            const before = yield* expiresAt
            yield* TestClock.adjust(TTL / 3)
            const after = yield* Effect.repeat(expiresAt, { until: (at) => at > before, times: 10_000 })
            assert.isAbove(after, before)
          }
          assert.strictEqual((yield* Effect.flip(Effect.scoped(second.openWrite(id))))._tag, "SessionLocked")
          assert.strictEqual((yield* Effect.flip(second.remove(id)))._tag, "SessionLocked")
          yield* writer.append(notes(1, 1))
          yield* Scope.close(scope, Exit.void)
          const { stored } = yield* Effect.scoped(second.openWrite(id))
          assert.deepStrictEqual(stored.events, notes(0, 2))
        })))

    it.effect("PERS-05 an expired lease is taken over with a new token; the stale writer fails SessionConflict", () =>
      withDatabase((process, sql) =>
        Effect.gen(function*() {
          const first = yield* process("stalled")
          const second = yield* process("taker")
          const id = sid("takeover")
          const clock = yield* Effect.clock
          const stale = yield* first.create(header(id)).pipe(Effect.withClock(stalled(clock)))
          yield* stale.append(notes(0, 2))
          const [before] = yield* sql<{ readonly token: string }>`SELECT token FROM effect_agent_leases`

          yield* TestClock.adjust(TTL - 1)
          assert.strictEqual((yield* Effect.flip(Effect.scoped(second.openWrite(id))))._tag, "SessionLocked")
          yield* TestClock.adjust(1)
          const [{ stored, writer }, logs] = yield* withLogs(second.openWrite(id))
          assert.deepStrictEqual(stored.events, notes(0, 2))
          assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes("took over")), logs.join("\n"))
          const [after] = yield* sql<{ readonly token: string }>`SELECT token FROM effect_agent_leases`
          assert.notStrictEqual(after?.token, before?.token)

          const refused = yield* Effect.flip(stale.append(notes(2, 1)))
          assert.strictEqual(refused._tag, "SessionConflict")
          assert.deepStrictEqual((yield* second.read(id)).events, notes(0, 2))
          yield* writer.append(notes(2, 1))
          yield* stale.discard
          assert.deepStrictEqual((yield* second.read(id)).events, notes(0, 3))
        })))

    it.effect("PERS-02 a stale writer racing its successor never interleaves: the log stays contiguous", () =>
      withDatabase((process) =>
        Effect.gen(function*() {
          const first = yield* process("stalled")
          const second = yield* process("taker")
          const id = sid("racing")
          const clock = yield* Effect.clock
          const stale = yield* first.create(header(id)).pipe(Effect.withClock(stalled(clock)))
          yield* stale.append(notes(0, 1))
          yield* TestClock.adjust(TTL)
          const { writer } = yield* second.openWrite(id)
          // Both write seq 1.. at once: only the lease holder's batches land.
          const outcomes = yield* Effect.all([
            Effect.either(Effect.forEach([1, 2, 3], (seq) => stale.append(notes(seq, 1)), { discard: true })),
            Effect.either(Effect.forEach([1, 2, 3], (seq) => writer.append(notes(seq, 1)), { discard: true }))
          ], { concurrency: "unbounded" })
          assert.strictEqual(outcomes[0]._tag, "Left")
          assert.strictEqual(outcomes[1]._tag, "Right")
          assert.deepStrictEqual((yield* second.read(id)).events, notes(0, 4))
        })))

    it.effect("SES-02 PERS-02 SES-02b batches waiting behind a commit share the next one; failures stay with their batch", () =>
      withDatabase((process, sql) =>
        Effect.gen(function*() {
          const recording = yield* recordingTracer
          yield* Effect.gen(function*() {
            const persistence = yield* process("group")
            const sessions = yield* Effect.forEach(
              Array.from({ length: 6 }, (_, i) => sid(`group-${i}`)),
              (id) => Effect.map(persistence.create(header(id)), (writer) => ({ id, writer }))
            )
            const [first, ...rest] = sessions
            const stolen = rest[1]!
            const broken = rest[3]!
            // Another process took one lease; a trigger refuses the rows of another session.
            yield* sql`UPDATE effect_agent_leases SET token = 'someone else' WHERE session_id = ${stolen.id}`
            yield* sql.unsafe(`CREATE FUNCTION refuse_rows() RETURNS trigger AS $$
              BEGIN RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql`)
            yield* sql.unsafe(`CREATE TRIGGER refuse_rows BEFORE INSERT ON effect_agent_events FOR EACH ROW
              WHEN (NEW.session_id = '${broken.id}') EXECUTE FUNCTION refuse_rows()`)
            // Another connection locks the sessions table: the first commit waits at its last statement.
            const locked = yield* Deferred.make<void>()
            const gate = yield* Deferred.make<void>()
            const holder = yield* Effect.fork(sql.withTransaction(
              sql`LOCK TABLE effect_agent_sessions IN EXCLUSIVE MODE`.pipe(
                Effect.zipRight(Deferred.succeed(locked, undefined)),
                Effect.zipRight(Deferred.await(gate))
              )
            ))
            yield* Deferred.await(locked)
            const inFlight = yield* Effect.fork(first!.writer.append(notes(0, 2)))
            yield* recording.awaitCommits(1)
            const waiting = yield* Effect.forEach(rest, ({ writer }) => Effect.fork(Effect.either(writer.append(notes(0, 2)))))
            yield* eventually(allSuspended(waiting))
            yield* Deferred.succeed(gate, undefined)
            yield* Fiber.join(holder)
            yield* Fiber.join(inFlight)
            const outcomes = yield* Effect.forEach(waiting, Fiber.join)
            assert.deepStrictEqual(recording.commits(), [1, 5])
            assert.deepStrictEqual(outcomes.map((outcome) => Either.isRight(outcome) ? "ok" : outcome.left._tag), [
              "ok",
              "SessionConflict",
              "ok",
              "PersistenceError",
              "ok"
            ])
            for (const { id } of sessions) {
              const expected = id === stolen.id || id === broken.id ? [] : notes(0, 2)
              assert.deepStrictEqual((yield* persistence.read(id)).events, expected)
            }
            assert.strictEqual(yield* broken.writer.nextSeq, 0)
            yield* sql.unsafe(`DROP TRIGGER refuse_rows ON effect_agent_events`)
            yield* broken.writer.append(notes(0, 2))
            assert.deepStrictEqual((yield* persistence.read(broken.id)).events, notes(0, 2))
          }).pipe(Effect.withTracer(recording.tracer))
        })))

    it.effect("DUR-07 a database whose collation folds case never hands out or removes another id's session", () =>
      withDatabase((process, sql) =>
        Effect.gen(function*() {
          const persistence = yield* process("folded")
          // A nondeterministic ICU collation: "abc" = "ABC".
          const fold = Effect.zipRight(
            sql.unsafe(`CREATE COLLATION folded (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`),
            sql.unsafe(`ALTER TABLE effect_agent_sessions ALTER COLUMN session_id TYPE text COLLATE folded`)
          )
          yield* assertCaseFoldedIds(persistence, fold)
        })))

    it.effect("DUR-08 list reports a row whose id is not a valid session id and lists the rest", () =>
      withDatabase((process, sql) =>
        Effect.gen(function*() {
          yield* assertInvalidIdRowListed(yield* process("lister"), sql)
        })))

    it.effect("DUR-04 in a shared commit a batch that cannot be encoded, is oversize or breaks a constraint fails alone; the others commit", () =>
      withDatabase((process, sql) =>
        Effect.gen(function*() {
          const recording = yield* recordingTracer
          yield* Effect.gen(function*() {
            const persistence = yield* process("dur-04", { maxEventBytes: 1_024 })
            const sessions = yield* Effect.forEach(
              Array.from({ length: 25 }, (_, i) => sid(`dur-04-${i}`)),
              (id) => Effect.map(persistence.create(header(id)), (writer) => ({ id, writer }))
            )
            const [first, ...rest] = sessions
            const broken = rest[16]!
            yield* sql.unsafe(`CREATE FUNCTION refuse_dur_04() RETURNS trigger AS $$
              BEGIN RAISE EXCEPTION 'injected constraint failure'; END $$ LANGUAGE plpgsql`)
            yield* sql.unsafe(`CREATE TRIGGER refuse_dur_04 BEFORE INSERT ON effect_agent_events FOR EACH ROW
              WHEN (NEW.session_id = '${broken.id}') EXECUTE FUNCTION refuse_dur_04()`)
            // rest 2, 5, 8, 11 and 14 get a value the encoder refuses, 20 an event over maxEventBytes
            const refusedAt = new Map(unencodable().map(([data], i) => [2 + 3 * i, data] as const))
            const batchOf = (i: number) => {
              if (i === 20) return [...notes(0, 1), sized(1, 1_025)] as const
              const data = refusedAt.get(i)
              return data === undefined ? notes(0, 3) : [...notes(0, 2), hostile(2, data)] as const
            }
            // Another connection locks the sessions table: the first commit waits at its last
            // statement, and every other batch gathers behind it.
            const locked = yield* Deferred.make<void>()
            const gate = yield* Deferred.make<void>()
            const holder = yield* Effect.fork(sql.withTransaction(
              sql`LOCK TABLE effect_agent_sessions IN EXCLUSIVE MODE`.pipe(
                Effect.zipRight(Deferred.succeed(locked, undefined)),
                Effect.zipRight(Deferred.await(gate))
              )
            ))
            yield* Deferred.await(locked)
            const inFlight = yield* Effect.fork(first!.writer.append(notes(0, 3)))
            yield* recording.awaitCommits(1)
            const waiting = yield* Effect.forEach(rest, ({ writer }, i) =>
              Effect.fork(Effect.either(writer.append(batchOf(i)))))
            yield* eventually(allSuspendedOrDone(waiting))
            yield* Deferred.succeed(gate, undefined)
            yield* Fiber.join(holder)
            yield* Fiber.join(inFlight)
            const outcomes = yield* Effect.forEach(waiting, Fiber.join)
            // the batches refused at encoding never reached the commit; the one the trigger refuses did
            assert.deepStrictEqual(recording.commits(), [1, 24 - refusedAt.size - 1])
            const tags = outcomes.map((outcome) => Either.isRight(outcome) ? "ok" : outcome.left._tag)
            assert.deepStrictEqual(tags, rest.map((_, i) =>
              i === 16 ? "PersistenceError" : i === 20 || refusedAt.has(i) ? "InvalidEventData" : "ok"))
            for (const [i, { id, writer }] of rest.entries()) {
              const isRefused = tags[i] !== "ok"
              assert.deepStrictEqual((yield* persistence.read(id)).events, isRefused ? [] : notes(0, 3))
              assert.strictEqual(yield* writer.nextSeq, isRefused ? 0 : 3)
            }
            assert.deepStrictEqual((yield* persistence.read(first!.id)).events, notes(0, 3))
            yield* sql.unsafe(`DROP TRIGGER refuse_dur_04 ON effect_agent_events`)
            for (const [i, { id, writer }] of rest.entries()) {
              if (tags[i] === "ok") continue
              yield* writer.append(notes(0, 1))
              assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 1))
            }
          }).pipe(Effect.withTracer(recording.tracer))
        })))

    it.effect("PERS-04 a big batch is one transaction and round-trips", () =>
      withDatabase((process) =>
        Effect.gen(function*() {
          const persistence = yield* process("big")
          const id = sid("big")
          yield* Effect.scoped(
            Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(notes(0, 1_000)))
          )
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 1_000))
          const listed = Chunk.toArray(yield* Stream.runCollect(persistence.list))
          assert.deepStrictEqual(listed.map((s) => [s.id, s._tag === "SessionSummary" ? s.eventCount : s.problem]), [
            [id, 1_000]
          ])
        })))
  })
}
