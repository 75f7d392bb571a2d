/**
 * B6: durable appends per second with `fsync` durability: one session appending sequentially, 64
 * sessions appending concurrently, and one session with 64 concurrent appenders (group commit: one
 * write and one sync per batch).
 *
 * File persistence (one file per session): the raw reference is `fs.write` + `fs.fdatasync` of the
 * same line, one file sequentially and 64 files concurrently; raw 64 files / raw 1 file is what the
 * disk at hand gives a design with one file per session.
 *
 * SQL persistence on SQLite (`synchronous = FULL`, one database): the layer commits the batches of
 * every session waiting at once in one transaction. The raw reference is better-sqlite3 alone
 * inserting the same record, one row per transaction and 64 rows per transaction.
 *
 * And 64 sessions on memory persistence (no I/O at all): what the session machinery itself allows on
 * this machine, the ceiling of any storage's 64-session figure.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import Sqlite from "better-sqlite3"
import { Effect, Either, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { Session, SessionPersistence } from "../src/index.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { tempDirectory } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, ratios, settle, stat } from "./harness.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

const line = {
  type: "bench/append",
  data: { text: "one durable fact of about a hundred bytes, as a plugin would log it" }
}

/** `sessions` sessions each appending `perSession` events with `appenders` concurrent appenders each. */
const appendAll = (round: string, sessions: number, appenders: number, perAppender: number) =>
  Effect.scoped(Effect.gen(function*() {
    const persistence = yield* SessionPersistence.SessionPersistence
    const live = yield* Effect.forEach(Array.from({ length: sessions }, (_, i) => i), (i) =>
      Effect.gen(function*() {
        const plan = Session.plan({ id: `b6-${round}-${i}`, createdAt: 1_700_000_000_000 })
        if (Either.isLeft(plan)) return yield* Effect.die(plan.left)
        const writer = yield* persistence.create(plan.right.header)
        return yield* Session.fromPlan(plan.right, writer)
      }))
    const start = now()
    yield* Effect.forEach(live, (session) =>
      Effect.forEach(Array.from({ length: appenders }), () =>
        Effect.gen(function*() {
          for (let i = 0; i < perAppender; i++) yield* session.append(line)
        }), { concurrency: "unbounded", discard: true }), { concurrency: "unbounded", discard: true })
    const elapsed = now() - start
    return (sessions * appenders * perAppender) / (elapsed / 1000)
  }))

const ours = (directory: string, round: string, sessions: number, appenders: number, perAppender: number) =>
  appendAll(round, sessions, appenders, perAppender).pipe(
    Effect.provide(NodeFileSessionPersistence.layer({ directory, durability: "fsync" })),
    Effect.orDie
  )

/** The same on the SQL persistence of one SQLite database (the layer stays up across rounds). */
const sqliteLayer = (file: string): Layer.Layer<SessionPersistence.SessionPersistence> =>
  SqlSessionPersistence.layer({ durability: "fsync" }).pipe(
    Layer.provide(SqliteClient.layer({ filename: file })),
    Layer.orDie
  )

/** better-sqlite3 alone: `rows` rows per transaction, `synchronous = FULL`, WAL (as the client sets). */
const rawSqlite = (file: string, round: string, transactions: number, rows: number): number => {
  const db = new Sqlite(file)
  try {
    db.pragma("journal_mode = WAL")
    db.pragma("synchronous = FULL")
    db.exec(`CREATE TABLE IF NOT EXISTS raw_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
      record TEXT NOT NULL, PRIMARY KEY (session_id, seq))`)
    const record = JSON.stringify({ seq: 0, time: 1_700_000_000_000, ...line })
    const insert = db.prepare("INSERT INTO raw_events VALUES (?, ?, ?)")
    const begin = db.prepare("BEGIN")
    const commit = db.prepare("COMMIT")
    const start = now()
    for (let t = 0; t < transactions; t++) {
      begin.run()
      for (let r = 0; r < rows; r++) insert.run(`${round}-${r}`, t, record)
      commit.run()
    }
    return (transactions * rows) / ((now() - start) / 1000)
  } finally {
    db.close()
  }
}

const write = (fd: number, text: string) =>
  new Promise<void>((resolve, reject) =>
    fs.write(fd, text, (error) =>
      error !== null ? reject(error) : fs.fdatasync(fd, (error2) => (error2 !== null ? reject(error2) : resolve()))))

/** `files` files, each appended `perFile` lines with write + fdatasync, concurrently across files. */
const raw = async (directory: string, round: string, files: number, perFile: number): Promise<number> => {
  const text = JSON.stringify({ seq: 0, time: 1_700_000_000_000, ...line }) + "\n"
  const fds = Array.from({ length: files }, (_, i) => fs.openSync(path.join(directory, `raw-${round}-${i}`), "a"))
  const start = now()
  await Promise.all(fds.map(async (fd) => {
    for (let i = 0; i < perFile; i++) await write(fd, text)
  }))
  const elapsed = now() - start
  for (const fd of fds) fs.closeSync(fd)
  return (files * perFile) / (elapsed / 1000)
}

export const scenario: Scenario = {
  id: "B6",
  title: "durable appends per second, fsync, 1 and 64 concurrent sessions",
  run: async ({ quick, log }) =>
    Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const directory = yield* tempDirectory("b6")
      const rounds = quick ? 1 : 3
      const single = 1_500
      const perSession = 100
      yield* ours(directory, "warm", 4, 1, 200)
      yield* Effect.promise(() => raw(directory, "warm", 4, 200))
      const sqlite = yield* Layer.build(sqliteLayer(path.join(directory, "sessions.db")))
      const onSqlite = (round: string, sessions: number, perSession: number) =>
        appendAll(round, sessions, 1, perSession).pipe(Effect.provide(sqlite), Effect.orDie)
      const rawFile = path.join(directory, "raw.db")
      const sqlSingle = 600
      const sqlPerSession = 50
      yield* onSqlite("warm", 8, 50)
      rawSqlite(rawFile, "warm", 50, 8)
      const memoryLayer = Layer.unwrapEffect(
        Effect.map(SessionPersistence.makeMemoryStorage, (storage) => SessionPersistence.layerMemory(storage))
      )
      const onMemory = (round: string) =>
        appendAll(round, 64, 1, perSession).pipe(Effect.provide(memoryLayer), Effect.orDie)
      const memoryMany: Array<number> = []
      const sqlOne: Array<number> = []
      const sqlMany: Array<number> = []
      const rawSqlOne: Array<number> = []
      const rawSqlMany: Array<number> = []
      const one: Array<number> = []
      const many: Array<number> = []
      const grouped: Array<number> = []
      const rawOne: Array<number> = []
      const rawMany: Array<number> = []
      for (let r = 0; r < rounds; r++) {
        yield* Effect.promise(settle)
        one.push(yield* ours(directory, `one-${r}`, 1, 1, single))
        rawOne.push(yield* Effect.promise(() => raw(directory, `one-${r}`, 1, single)))
        many.push(yield* ours(directory, `many-${r}`, 64, 1, perSession))
        rawMany.push(yield* Effect.promise(() => raw(directory, `many-${r}`, 64, perSession)))
        grouped.push(yield* ours(directory, `group-${r}`, 1, 64, perSession))
        sqlOne.push(yield* onSqlite(`one-${r}`, 1, sqlSingle))
        rawSqlOne.push(rawSqlite(rawFile, `one-${r}`, sqlSingle, 1))
        sqlMany.push(yield* onSqlite(`many-${r}`, 64, sqlPerSession))
        rawSqlMany.push(rawSqlite(rawFile, `many-${r}`, sqlPerSession, 64))
        memoryMany.push(yield* onMemory(`memory-${r}`))
        log(
          `B6 round ${r}: files: 1 session ${fmt(one[r]!)}/s (raw ${fmt(rawOne[r]!)}), 64 sessions ${fmt(many[r]!)}/s ` +
            `(raw ${fmt(rawMany[r]!)}), 1 session × 64 appenders ${fmt(grouped[r]!)}/s; SQLite: 1 session ` +
            `${fmt(sqlOne[r]!)}/s (raw ${fmt(rawSqlOne[r]!)}), 64 sessions ${fmt(sqlMany[r]!)}/s (raw ${fmt(rawSqlMany[r]!)}); ` +
            `memory, 64 sessions ${fmt(memoryMany[r]!)}/s`
        )
      }
      const cost = (rates: ReadonlyArray<number>) => rates.map((r) => 1 / r)
      const speedup = stat(many.map((m, i) => m / one[i]!))
      const rawSpeedup = stat(rawMany.map((m, i) => m / rawOne[i]!))
      const sqlSpeedup = stat(sqlMany.map((m, i) => m / sqlOne[i]!))
      const rawSqlSpeedup = stat(rawSqlMany.map((m, i) => m / rawSqlOne[i]!))
      const rows: Array<Row> = [
        {
          id: "B6",
          scenario: "durable appends, fsync, 1 session, sequential",
          ours: stat(one),
          unit: "events/s",
          raw: { label: "write+fdatasync, 1 file", value: stat(rawOne) },
          costRatio: ratios(cost(one), cost(rawOne))
        },
        {
          id: "B6",
          scenario: "durable appends, fsync, 64 sessions, concurrent",
          ours: stat(many),
          unit: "events/s",
          raw: { label: "write+fdatasync, 64 files", value: stat(rawMany) },
          costRatio: ratios(cost(many), cost(rawMany)),
          // With one file per session, 64 sessions scale about as far as 64 raw files do over one
          // raw file: when that is far below 20×, the target is a property of the disk.
          notes: `64 sessions / 1 session: ${fmt(speedup.median)}× ` +
            `(what the disk gives one file per session — raw 64 files / raw 1 file: ${fmt(rawSpeedup.median)}×)`,
          peer: "target: 64 sessions ≥20× one session",
          extra: { speedup: speedup.median, rawSpeedup: rawSpeedup.median }
        },
        {
          id: "B6",
          scenario: "durable appends, fsync, 1 session × 64 concurrent appenders (group commit)",
          ours: stat(grouped),
          unit: "events/s",
          raw: { label: "write+fdatasync, 1 file", value: stat(rawOne) },
          costRatio: ratios(cost(grouped), cost(rawOne)),
          notes: `vs 1 appender: ${fmt(stat(grouped.map((g, i) => g / one[i]!)).median)}×`
        },
        {
          id: "B6",
          scenario: "durable appends, SQLite synchronous=FULL, 1 session, sequential",
          ours: stat(sqlOne),
          unit: "events/s",
          raw: { label: "better-sqlite3, 1 row per transaction", value: stat(rawSqlOne) },
          costRatio: ratios(cost(sqlOne), cost(rawSqlOne))
        },
        {
          id: "B6",
          scenario: "durable appends, SQLite synchronous=FULL, 64 sessions, concurrent (group commit across sessions)",
          ours: stat(sqlMany),
          unit: "events/s",
          raw: { label: "better-sqlite3, 64 rows per transaction", value: stat(rawSqlMany) },
          costRatio: ratios(cost(sqlMany), cost(rawSqlMany)),
          notes: `64 sessions / 1 session: ${fmt(sqlSpeedup.median)}× ` +
            `(raw 64 rows per transaction / 1 row per transaction: ${fmt(rawSqlSpeedup.median)}×)`,
          peer: "target: 64 sessions ≥20× one session",
          extra: { speedup: sqlSpeedup.median, rawSpeedup: rawSqlSpeedup.median }
        },
        {
          id: "B6",
          scenario: "appends, memory persistence (no I/O), 64 sessions, concurrent: the session machinery's ceiling",
          ours: stat(memoryMany),
          unit: "events/s",
          notes: `vs 1 fsync'd file session: ${fmt(stat(memoryMany.map((m, i) => m / one[i]!)).median)}×, ` +
            `vs 1 SQLite session: ${fmt(stat(memoryMany.map((m, i) => m / sqlOne[i]!)).median)}×`
        }
      ]
      return rows
    })))
}
