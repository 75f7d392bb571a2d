import { Command, FileSystem } from "@effect/platform"
import { NodeContext, NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Context, Deferred, Effect, Either, Exit, FastCheck, Fiber, Layer, Option, Scope, Stream } from "effect"
import * as nodeFs from "node:fs"
import * as os from "node:os"
import { fileURLToPath } from "node:url"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import type { SessionId } from "../src/Message.js"
import * as SessionError from "../src/SessionError.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import { caseInsensitiveFiles } from "./fixtures/caseInsensitiveFiles.js"
import {
  conformance,
  header,
  hostile,
  lineSize,
  notes,
  sid,
  sized,
  unencodable,
  unreadableOf
} from "./fixtures/persistenceConformance.js"
import { inDirectory, newFilePlan, newGate, withFilePlan } from "./fixtures/instrumentedFiles.js"
import { withLogs } from "./fixtures/logs.js"
import { VERSION } from "../src/SessionEvent.js"

class Directory extends Context.Tag("test/Directory")<Directory, string>() {}

const temporaryDirectory = Layer.scoped(
  Directory,
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.makeTempDirectoryScoped({ prefix: "effect-agent-" }))
)

const fileOf = (directory: string, id: SessionId) => `${directory}/${id}.jsonl`
const lockOf = (directory: string, id: SessionId) => `${directory}/${id}.lock`

conformance(
  "FileSessionPersistence.layer conformance (PERS-06)",
  (limits) =>
    Layer.unwrapEffect(
      Effect.map(Directory, (directory) => FileSessionPersistence.layer({ directory, ...limits }))
    ).pipe(
      Layer.provideMerge(temporaryDirectory),
      Layer.provideMerge(NodeContext.layer)
    ),
  {
    tearTail: (id) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const directory = yield* Directory
        yield* fs.writeFileString(fileOf(directory, id), "{\"seq\":3,\"time\":17,\"type\":\"test/no", { flag: "a" })
      }),
    replaceHeader: (id, text) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const file = fileOf(yield* Directory, id)
        const stored = yield* fs.readFileString(file)
        yield* fs.writeFileString(file, text + stored.slice(stored.indexOf("\n")))
      })
  }
)

/** Runs `body` with a fresh temp directory on Node's file system. */
/** The file persistence of one "process" over `directory`. */
const persistenceAt = (directory: string, options?: Omit<FileSessionPersistence.Options, "directory">) =>
  Effect.provide(SessionPersistence, FileSessionPersistence.layer({ directory, ...options }))

const readBytes = (file: string) => Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFile(file))
const readText = (file: string) => Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(file))
const writeText = (file: string, text: string) =>
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.writeFileString(file, text))

const storedSession = (directory: string, id: SessionId, events: number) =>
  Effect.flatMap(persistenceAt(directory, { durability: "buffered" }), (persistence) =>
    Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(notes(0, events)))))

const line = (value: unknown) => JSON.stringify(value) + "\n"

describe("FileSessionPersistence", () => {
  it.effect("PERS-05 the file is JSONL: the header record on line 1, then one event per line", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const id = sid("format")
        yield* storedSession(directory, id, 3)
        assert.strictEqual(
          yield* readText(fileOf(directory, id)),
          line(header(id)) + notes(0, 3).map(line).join("")
        )
        // The lock is gone with its writer.
        const fs = yield* FileSystem.FileSystem
        assert.isFalse(yield* fs.exists(lockOf(directory, id)))
      })))

  it.effect("PERS-03 openWrite drops an unterminated tail, reports it and truncates the file; read leaves it", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const id = sid("torn")
        yield* storedSession(directory, id, 3)
        const file = fileOf(directory, id)
        const intact = yield* readText(file)
        const torn = intact + "{\"seq\":3,\"time\":1,\"ty"
        yield* writeText(file, torn)
        const persistence = yield* persistenceAt(directory)

        const read = yield* persistence.read(id)
        assert.strictEqual(read.tornTailDropped, 1)
        assert.deepStrictEqual(read.events, notes(0, 3))
        assert.strictEqual(yield* readText(file), torn)

        const [opened, logs] = yield* withLogs(Effect.scoped(Effect.gen(function*() {
          const { stored, writer } = yield* persistence.openWrite(id)
          assert.strictEqual(yield* readText(file), intact)
          yield* writer.append(notes(3, 1))
          return stored
        })))
        assert.strictEqual(opened.tornTailDropped, 1)
        assert.deepStrictEqual(opened.events, notes(0, 3))
        assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes("torn")), logs.join("\n"))
        assert.strictEqual(yield* readText(file), intact + line(notes(3, 1)[0]))
      })))

  it.effect("DUR-11 a complete last record that fails validation is SessionCorrupt{line}; the file is untouched", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const persistence = yield* persistenceAt(directory)
        const tails = [
          ["garbage", "garbage\n"],
          ["schema", line({ seq: 2, time: -1, type: "x/y", data: 1 })],
          ["seq", line({ ...notes(0, 1)[0], seq: 5 })],
          ["complete-json-of-a-torn-write", "{\"seq\":2}\n"]
        ] as const
        for (const [name, tail] of tails) {
          const id = sid(`last-${name}`)
          yield* storedSession(directory, id, 2)
          const file = fileOf(directory, id)
          yield* writeText(file, (yield* readText(file)) + tail)
          const before = yield* readBytes(file)
          const read = yield* Effect.flip(persistence.read(id))
          assert.strictEqual(read._tag, "SessionCorrupt", name)
          if (read._tag === "SessionCorrupt") assert.strictEqual(read.line, 4, name)
          const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(opened._tag, "SessionCorrupt", name)
          if (opened._tag === "SessionCorrupt") assert.strictEqual(opened.line, 4, name)
          // openWrite did not truncate it, and released its lock.
          assert.deepStrictEqual(yield* readBytes(file), before, name)
          assert.isFalse(yield* fs.exists(lockOf(directory, id)), name)
        }
      })))

  it.effect("PERS-03 a bad record before the last fails SessionCorrupt{line} and leaves the file byte-identical", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const persistence = yield* persistenceAt(directory)
        const [e0, e1, e2] = notes(0, 3)
        const cases: ReadonlyArray<readonly [string, string, number]> = [
          ["garbage", line(e0) + "not json\n" + line(e2), 3],
          ["schema", line(e0) + line({ seq: 1, time: 0, type: "turn/start", data: { turn: 0 } }) + line(e2), 3],
          ["seq-gap", line(e0) + line(e2) + line({ ...e2, seq: 3 }), 3],
          ["empty-line", line(e0) + "\n" + line(e1) + line(e2), 3],
          ["torn-middle", line(e0) + "{\"seq\":1\n" + line(e2), 3],
          // An unterminated tail does not excuse a bad terminated record before it.
          ["bad-then-torn", line(e0) + line(e1) + "oops\n{\"seq\":", 4]
        ]
        for (const [name, body, expectedLine] of cases) {
          const id = sid(`corrupt-${name}`)
          const file = fileOf(directory, id)
          yield* writeText(file, line(header(id)) + body)
          const before = yield* readBytes(file)

          const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(opened._tag, "SessionCorrupt", name)
          if (opened._tag === "SessionCorrupt") assert.strictEqual(opened.line, expectedLine, name)
          const read = yield* Effect.flip(persistence.read(id))
          assert.strictEqual(read._tag, "SessionCorrupt", name)
          assert.deepStrictEqual(yield* readBytes(file), before, name)
          // The failed openWrite released its lock.
          assert.isFalse(yield* fs.exists(lockOf(directory, id)), name)
        }
      })))

  it.effect("EVT-04 a header of a newer version fails SessionFormatUnsupported", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const id = sid("newer")
        const file = fileOf(directory, id)
        yield* writeText(file, line({ ...header(id), version: VERSION + 1, extra: "new" }) + line(notes(0, 1)[0]))
        const before = yield* readBytes(file)
        const persistence = yield* persistenceAt(directory)
        const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
        assert.strictEqual(opened._tag, "SessionFormatUnsupported")
        assert.strictEqual((yield* Effect.flip(persistence.read(id)))._tag, "SessionFormatUnsupported")
        assert.deepStrictEqual(yield* readBytes(file), before)
      })))

  it.effect("EVT-01 EVT-04 an unknown core type fails SessionFormatUnsupported, even as the last record", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const persistence = yield* persistenceAt(directory)
        const unknown = { seq: 1, time: 5, type: "turn/foo", data: {} }
        const cases = [
          ["last", [notes(0, 1)[0], unknown]],
          ["middle", [notes(0, 1)[0], unknown, notes(2, 1)[0]]]
        ] as const
        for (const [name, body] of cases) {
          const id = sid(`unknown-${name}`)
          const file = fileOf(directory, id)
          yield* writeText(file, line(header(id)) + body.map(line).join(""))
          const before = yield* readBytes(file)
          const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(opened._tag, "SessionFormatUnsupported", name)
          assert.strictEqual((yield* Effect.flip(persistence.read(id)))._tag, "SessionFormatUnsupported", name)
          assert.deepStrictEqual(yield* readBytes(file), before, name)
        }
      })))

  it.effect("PERS-03 a file that is not a session (foreign JSON, empty, other id) fails SessionCorrupt at line 1", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const persistence = yield* persistenceAt(directory)
        const cases: ReadonlyArray<readonly [string, (id: SessionId) => string]> = [
          ["foreign", () => line({ name: "package", version: 1 }) + line({ seq: 0 })],
          ["empty", () => ""],
          ["unterminated-header", (id) => JSON.stringify(header(id))],
          ["other-id", () => line(header(sid("someone-else")))]
        ]
        for (const [name, content] of cases) {
          const id = sid(`foreign-${name}`)
          yield* writeText(fileOf(directory, id), content(id))
          const read = yield* Effect.flip(persistence.read(id))
          assert.strictEqual(read._tag, "SessionCorrupt", name)
          if (read._tag === "SessionCorrupt") assert.strictEqual(read.line, 1, name)
          const opened = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(opened._tag, "SessionCorrupt", name)
          assert.strictEqual(yield* readText(fileOf(directory, id)), content(id), name)
        }
        // DUR-08: list reports what it cannot read instead of failing.
        const listed = Array.from(yield* Stream.runCollect(persistence.list))
        assert.deepStrictEqual(listed.map((entry) => entry._tag), Array(cases.length).fill("UnreadableSession"))
      })))

  it.effect("PERS-01 two instances in one process exclude each other; concurrent creates have one winner", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const first = yield* persistenceAt(directory, { instanceId: "first" })
        const second = yield* persistenceAt(directory, { instanceId: "second" })
        const id = sid("shared")
        const scope = yield* Scope.make()
        yield* first.create(header(id)).pipe(Scope.extend(scope))
        const locked = yield* Effect.flip(Effect.scoped(second.openWrite(id)))
        assert.strictEqual(locked._tag, "SessionLocked")
        if (locked._tag === "SessionLocked") {
          assert.include(locked.holder, `process ${process.pid}`)
          assert.include(locked.holder, "\"first\"")
        }
        yield* Scope.close(scope, Exit.void)

        const race = sid("race")
        const outcomes = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? first : second)),
          (persistence) => Effect.either(persistence.create(header(race))),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(outcomes.filter(Either.isRight).length, 1)
        for (const outcome of outcomes) {
          if (Either.isLeft(outcome)) assert.include(["SessionLocked", "SessionAlreadyExists"], outcome.left._tag)
        }
      })))

  it.effect("PERS-01 a lock of a dead process on this host is taken over, with a warning", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const id = sid("stale")
        yield* storedSession(directory, id, 1)
        const dead = { host: os.hostname(), pid: 999_999, instanceId: "crashed", token: "dead-token" }
        yield* writeText(lockOf(directory, id), JSON.stringify(dead))
        // the takeover at open; the layer's start would clear the lock first (test below)
        const persistence = yield* persistenceAt(directory, {
          instanceId: "taker",
          isProcessAlive: (pid) => pid !== dead.pid,
          clearStaleLocks: false
        })

        const [taken, logs] = yield* withLogs(Effect.scoped(Effect.gen(function*() {
          const { stored, writer } = yield* persistence.openWrite(id)
          const lock = JSON.parse(yield* readText(lockOf(directory, id)))
          assert.strictEqual(lock.instanceId, "taker")
          assert.strictEqual(lock.pid, process.pid)
          assert.notStrictEqual(lock.token, dead.token)
          yield* writer.append(notes(1, 1))
          return stored
        })))
        assert.deepStrictEqual(taken.events, notes(0, 1))
        assert.isTrue(
          logs.some((l) => l.startsWith("WARN") && l.includes("took over") && l.includes("999999")),
          logs.join("\n")
        )
        // Released on close, and no takeover leftovers.
        assert.deepStrictEqual((yield* fs.readDirectory(directory)).sort(), [`${id}.jsonl`])
        assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 2))
      })))

  it.effect(
    "PERS-01 DUR-06 a layer's start clears the locks dead writers of this host left on sessions nobody resumes",
    () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const [dead, live, remote] = [sid("nobody-resumes"), sid("held-live"), sid("held-remote")]
          for (const id of [dead, live, remote]) yield* storedSession(directory, id, 1)
          const owner = (pid: number, host: string, token: string) =>
            JSON.stringify({ host, pid, instanceId: "other", token })
          yield* writeText(lockOf(directory, dead), owner(999_999, os.hostname(), "dead-token"))
          yield* writeText(lockOf(directory, live), owner(process.pid, os.hostname(), "live-token"))
          yield* writeText(lockOf(directory, remote), owner(4242, "another-host.example", "remote-token"))
          const isProcessAlive = (pid: number) => pid !== 999_999

          // Turned off: the start leaves every lock alone.
          yield* persistenceAt(directory, { isProcessAlive, clearStaleLocks: false })
          assert.isTrue(nodeFs.existsSync(lockOf(directory, dead)))

          const [, logs] = yield* withLogs(persistenceAt(directory, { isProcessAlive }))
          const names = (yield* fs.readDirectory(directory)).sort()
          assert.deepStrictEqual(names, [dead, live, remote].flatMap((id) => [`${id}.jsonl`]).concat(
            [`${live}.lock`, `${remote}.lock`]
          ).sort())
          assert.isTrue(
            logs.some((l) => l.startsWith("WARN") && l.includes("took over") && l.includes(dead)),
            logs.join("\n")
          )
          assert.include(yield* readText(lockOf(directory, live)), "live-token")
          assert.include(yield* readText(lockOf(directory, remote)), "remote-token")
        })).pipe(Effect.scoped)
  )

  it.effect("PERS-01 a lock from another host is never taken over; breakLock removes it", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const id = sid("remote")
        yield* storedSession(directory, id, 1)
        const remote = { host: "another-host.example", pid: 4242, instanceId: "remote", token: "remote-token" }
        yield* writeText(lockOf(directory, id), JSON.stringify(remote))
        const persistence = yield* persistenceAt(directory, { isProcessAlive: () => false })

        const locked = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
        assert.strictEqual(locked._tag, "SessionLocked")
        if (locked._tag === "SessionLocked") assert.include(locked.holder, "another-host.example")
        assert.strictEqual((yield* Effect.flip(persistence.remove(id)))._tag, "SessionLocked")
        assert.strictEqual(yield* readText(lockOf(directory, id)), JSON.stringify(remote))

        // An unreadable lock is never guessed stale either.
        yield* writeText(lockOf(directory, id), "")
        assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(id))))._tag, "SessionLocked")

        yield* writeText(lockOf(directory, id), JSON.stringify(remote))
        yield* writeText(`${directory}/${id}.lock.remote-token.break`, "{}")
        const [, logs] = yield* withLogs(FileSessionPersistence.breakLock(id, { directory }))
        assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes("another-host.example")), logs.join("\n"))
        assert.deepStrictEqual((yield* fs.readDirectory(directory)).sort(), [`${id}.jsonl`])
        const { stored } = yield* Effect.scoped(persistence.openWrite(id))
        assert.deepStrictEqual(stored.events, notes(0, 1))
      })))

  describe("with another Node process", () => {
    const fixture = fileURLToPath(new URL("./fixtures/holdSessionLock.ts", import.meta.url))
    const repository = fileURLToPath(new URL("..", import.meta.url))

    /** Starts a process that holds the writer of `id`; resolves with its pid once it does. */
    const holder = (directory: string, id: SessionId) =>
      Effect.gen(function*() {
        const child = yield* Command.make(process.execPath, "--import", "tsx", fixture, directory, id).pipe(
          Command.workingDirectory(repository),
          Command.start
        )
        const ready = yield* child.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runHead)
        if (Option.isNone(ready) || !ready.value.startsWith("locked ")) {
          const stderr = yield* child.stderr.pipe(Stream.decodeText(), Stream.mkString)
          return yield* Effect.dieMessage(`the lock holder did not start: ${stderr}`)
        }
        return { child, pid: Number(ready.value.slice("locked ".length)) }
      })

    it.effect("PERS-01 a live writer in another process blocks openWrite, create, remove; its release frees it", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const id = sid("cross-process")
          yield* storedSession(directory, id, 2)
          const persistence = yield* persistenceAt(directory)
          const { child, pid } = yield* holder(directory, id)
          assert.notStrictEqual(pid, process.pid)

          const locked = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(locked._tag, "SessionLocked")
          if (locked._tag === "SessionLocked") {
            assert.include(locked.holder, `process ${pid}`)
            assert.include(locked.holder, "child-process")
          }
          assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.create(header(id)))))._tag, "SessionLocked")
          assert.strictEqual((yield* Effect.flip(persistence.remove(id)))._tag, "SessionLocked")

          // SIGTERM interrupts the child's runtime: its writer scope closes and removes the lock.
          yield* child.kill("SIGTERM")
          yield* Effect.ignore(child.exitCode)
          const fs = yield* FileSystem.FileSystem
          assert.isFalse(yield* fs.exists(lockOf(directory, id)), "the child removed its lock")
          const { stored } = yield* Effect.scoped(persistence.openWrite(id))
          assert.deepStrictEqual(stored.events, notes(0, 2))
        })).pipe(Effect.scoped))

    it.effect("PERS-01 the lock of a killed process is taken over by the next writer", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const id = sid("killed")
          yield* storedSession(directory, id, 1)
          const persistence = yield* persistenceAt(directory)
          const { child, pid } = yield* holder(directory, id)
          assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(id))))._tag, "SessionLocked")

          yield* child.kill("SIGKILL")
          yield* Effect.ignore(child.exitCode)
          const lock = JSON.parse(yield* readText(lockOf(directory, id)))
          assert.strictEqual(lock.pid, pid)

          const [{ stored }, logs] = yield* withLogs(Effect.scoped(persistence.openWrite(id)))
          assert.deepStrictEqual(stored.events, notes(0, 1))
          assert.isTrue(logs.some((l) => l.includes("took over") && l.includes(`process ${pid}`)), logs.join("\n"))
        })).pipe(Effect.scoped))
  })

  describe("writes", () => {
    const newPlan = newFilePlan
    const withPlan = withFilePlan

    it.effect("SES-02 PERS-04 appends queued while a write is in flight go out as one write with one sync", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const plan = newPlan()
          const persistence = yield* withPlan(directory, plan)
          const id = sid("group-commit")
          const writer = yield* persistence.create(header(id))
          assert.isAtLeast(plan.syncs, 1, "the header is synced")
          plan.syncs = 0
          plan.writes = 0

          const gate = yield* newGate
          plan.gate = gate
          const first = yield* Effect.fork(writer.append(notes(0, 1)))
          yield* Deferred.await(gate.entered)
          // The first write is in flight: everything appended now waits in the queue.
          const rest: Array<Fiber.RuntimeFiber<void, unknown>> = []
          for (let seq = 1; seq < 64; seq++) {
            rest.push(yield* Effect.fork(writer.append(notes(seq, 1))))
            yield* Effect.yieldNow()
          }
          assert.strictEqual(yield* writer.nextSeq, 0)
          yield* Deferred.succeed(gate.open, undefined)
          yield* Fiber.join(first)
          yield* Fiber.join(Fiber.all(rest))

          assert.strictEqual(plan.writes, 2)
          assert.strictEqual(plan.syncs, 2)
          assert.strictEqual(yield* writer.nextSeq, 64)
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 64))
        }).pipe(Effect.scoped)))

    it.effect("PERS-04 buffered durability never syncs; fsync syncs every batch", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const buffered = newPlan()
          const fast = yield* withPlan(directory, buffered, { durability: "buffered" })
          yield* Effect.scoped(Effect.flatMap(fast.create(header(sid("buffered"))), (writer) =>
            Effect.zipRight(writer.append(notes(0, 2)), writer.append(notes(2, 1)))))
          assert.strictEqual(buffered.syncs, 0)
          assert.strictEqual(buffered.writes, 3)

          const synced = newPlan()
          const durable = yield* withPlan(directory, synced)
          yield* Effect.scoped(Effect.flatMap(durable.create(header(sid("synced"))), (writer) =>
            Effect.zipRight(writer.append(notes(0, 2)), writer.append(notes(2, 1)))))
          assert.strictEqual(synced.writes, 3)
          assert.isAtLeast(synced.syncs, 3)
          // A restarted process reads both.
          const restarted = yield* persistenceAt(directory)
          assert.deepStrictEqual((yield* restarted.read(sid("buffered"))).events, notes(0, 3))
          assert.deepStrictEqual((yield* restarted.read(sid("synced"))).events, notes(0, 3))
        })))

    it.effect("PERS-02 a batch whose seqs are not contiguous fails SessionConflict and writes nothing", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const plan = newPlan()
          const persistence = yield* withPlan(directory, plan)
          const id = sid("gaps")
          const writer = yield* persistence.create(header(id))
          yield* writer.append(notes(0, 1))
          const writes = plan.writes
          const refused = yield* Effect.flip(writer.append([notes(1, 1)[0], notes(3, 1)[0]]))
          assert.strictEqual(refused._tag, "SessionConflict")
          assert.strictEqual(plan.writes, writes)
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 1))
        }).pipe(Effect.scoped)))

    it.effect("SES-02b a failed write is truncated back to the last acknowledged record and the writer goes on", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const plan = newPlan()
          const persistence = yield* withPlan(directory, plan)
          const id = sid("write-fails")
          const writer = yield* persistence.create(header(id))
          yield* writer.append(notes(0, 2))
          const acknowledged = yield* readText(fileOf(directory, id))

          plan.failWrites = true
          const failed = yield* Effect.flip(writer.append(notes(2, 2)))
          assert.strictEqual(failed._tag, "PersistenceError")
          assert.strictEqual(yield* readText(fileOf(directory, id)), acknowledged)
          assert.strictEqual(yield* writer.nextSeq, 2)

          plan.failWrites = false
          yield* writer.append(notes(2, 2))
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 4))
        }).pipe(Effect.scoped)))

    it.effect("SES-02b a write that cannot be truncated back fails the writer until the session is reopened", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const plan = newPlan()
          const persistence = yield* withPlan(directory, plan)
          const id = sid("writer-fails")
          yield* Effect.scoped(Effect.gen(function*() {
            const writer = yield* persistence.create(header(id))
            yield* writer.append(notes(0, 2))
            plan.failWrites = true
            plan.failTruncate = true
            assert.strictEqual((yield* Effect.flip(writer.append(notes(2, 1))))._tag, "PersistenceError")
            plan.failWrites = false
            plan.failTruncate = false
            const writes = plan.writes
            assert.strictEqual((yield* Effect.flip(writer.append(notes(2, 1))))._tag, "PersistenceError")
            assert.strictEqual((yield* Effect.flip(writer.append(notes(0, 1))))._tag, "PersistenceError")
            assert.strictEqual(plan.writes, writes, "a failed writer writes nothing")
          }))
          // The partial record is a torn tail for the next writer.
          const { stored, writer } = yield* persistence.openWrite(id)
          assert.strictEqual(stored.tornTailDropped, 1)
          assert.deepStrictEqual(stored.events, notes(0, 2))
          yield* writer.append(notes(2, 1))
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 3))
        }).pipe(Effect.scoped)))

    it.effect("DUR-04 DUR-05 appends joined to a write in flight are admitted one by one: the refused fail alone, the others are written", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const plan = newPlan()
          const id = sid("joined")
          const first = notes(0, 1)
          // room for the header, the first write and two small notes: an event of 200 bytes no longer fits
          const limit = lineSize(header(id)) + lineSize(first[0]) + 2 * lineSize(notes(1, 1)[0]) + 100
          const persistence = yield* withPlan(directory, plan, { maxEventBytes: 400, maxSessionBytes: limit })
          const writer = yield* persistence.create(header(id))
          const gate = yield* newGate
          plan.gate = gate
          plan.writes = 0
          const inFlight = yield* Effect.fork(writer.append(first))
          yield* Deferred.await(gate.entered)
          const joined: Array<Fiber.RuntimeFiber<void, unknown>> = []
          for (const batch of [
            notes(1, 1),
            [hostile(2, unencodable()[0]![0])] as const,
            [sized(2, 401)] as const,
            notes(2, 1),
            [sized(3, 200)] as const,
            [hostile(3, unencodable()[3]![0])] as const
          ]) {
            joined.push(yield* Effect.fork(writer.append(batch)))
            yield* Effect.yieldNow()
          }
          yield* Deferred.succeed(gate.open, undefined)
          yield* Fiber.join(inFlight)
          const outcomes = yield* Effect.forEach(joined, (fiber) =>
            Effect.map(Fiber.await(fiber), (exit) =>
              Exit.isSuccess(exit) ? "ok" : Option.getOrElse(Option.map(Cause.failureOption(exit.cause), (e) =>
                (e as { readonly _tag: string })._tag), () => "defect")))
          assert.deepStrictEqual(outcomes, [
            "ok",
            "InvalidEventData",
            "InvalidEventData",
            "ok",
            "SessionFull",
            "InvalidEventData"
          ])
          // one write for the first append, one for everything that joined it
          assert.strictEqual(plan.writes, 2)
          assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 3))
          const size = yield* Effect.map(readBytes(fileOf(directory, id)), (bytes) => bytes.length)
          assert.strictEqual(size, limit - 100)
          // the session size is the file's: 100 bytes are left, and exactly 100 fit
          yield* writer.append([sized(3, 100)])
          assert.strictEqual(yield* Effect.map(readBytes(fileOf(directory, id)), (bytes) => bytes.length), limit)
          const full = yield* Effect.flip(writer.append([sized(4, 80)]))
          assert.deepStrictEqual(full, new SessionError.SessionFull({ id, size: limit + 80, limit }))
        }).pipe(Effect.scoped)))

    it.effect("DUR-04 the file store shares nothing between sessions: of many concurrent appends, the refused fail alone", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const persistence = yield* persistenceAt(directory, { durability: "buffered", maxEventBytes: 1_024 })
          const sessions = yield* Effect.forEach(Array.from({ length: 12 }, (_, i) => sid(`shared-${i}`)), (id) =>
            Effect.map(persistence.create(header(id)), (writer) => ({ id, writer })))
          const bad = unencodable().map(([data]) => [hostile(1, data)] as const)
          const batchOf = (i: number) =>
            i % 2 === 1 ? [...notes(0, 1), ...(i === 11 ? [sized(1, 1_025)] : bad[(i - 1) / 2]!)] as const : notes(0, 2)
          const before = yield* Effect.forEach(sessions, ({ id }) => readBytes(fileOf(directory, id)))
          const outcomes = yield* Effect.forEach(
            sessions,
            ({ writer }, i) => Effect.either(writer.append(batchOf(i))),
            { concurrency: "unbounded" }
          )
          for (const [i, { id }] of sessions.entries()) {
            const outcome = outcomes[i]!
            if (i % 2 === 1) {
              assert.isTrue(Either.isLeft(outcome) && outcome.left._tag === "InvalidEventData")
              assert.deepStrictEqual(yield* readBytes(fileOf(directory, id)), before[i])
            } else {
              assert.isTrue(Either.isRight(outcome))
              assert.deepStrictEqual((yield* persistence.read(id)).events, notes(0, 2))
            }
          }
        }).pipe(Effect.scoped)))
  })
})

/** Custom events whose data is `texts`, seqs from 0. */
const textEvents = (texts: ReadonlyArray<string>): Array<SessionEvent> =>
  texts.map((text, seq) => ({ seq, time: 1_700_000_000_000 + seq, type: "test/text", data: { text } }))

/** Stores `events` (one batch) as session `id` with the default layer. */
const storedEvents = (directory: string, id: SessionId, events: ReadonlyArray<SessionEvent>) =>
  Effect.flatMap(persistenceAt(directory, { durability: "buffered" }), (persistence) =>
    Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) =>
      events.length === 0 ? Effect.void : writer.append(events as [SessionEvent, ...Array<SessionEvent>]))))

/**
 * Node's file system, recording the size of every read of a session file and refusing to read one
 * whole (`readFile`, `readFileString`, `stream`): DUR-05's streaming reader is the only way in.
 */
const streamingOnly = (reads: Array<number>) =>
  Layer.effect(
    FileSystem.FileSystem,
    Effect.map(FileSystem.FileSystem, (fs): FileSystem.FileSystem => {
      const whole = (path: string) => Effect.dieMessage(`${path} was read whole`)
      return {
        ...fs,
        readFile: (path) => (path.endsWith(".jsonl") ? whole(path) : fs.readFile(path)),
        readFileString: (path, encoding) => (path.endsWith(".jsonl") ? whole(path) : fs.readFileString(path, encoding)),
        stream: (path, options) =>
          path.endsWith(".jsonl") ? Stream.fromEffect(whole(path)) : fs.stream(path, options),
        open: (path, options) =>
          Effect.map(fs.open(path, options), (file): FileSystem.File => {
            if (!path.endsWith(".jsonl")) return file
            return {
              [FileSystem.FileTypeId]: FileSystem.FileTypeId,
              fd: file.fd,
              get stat() {
                return file.stat
              },
              seek: (offset, from) => file.seek(offset, from),
              read: (buffer) =>
                Effect.suspend(() => {
                  reads.push(buffer.length)
                  return file.read(buffer)
                }),
              readAlloc: (size) =>
                Effect.suspend(() => {
                  reads.push(Number(size))
                  return file.readAlloc(size)
                }),
              write: (buffer) => file.write(buffer),
              sync: file.sync,
              truncate: (length) => file.truncate(length),
              writeAll: (buffer) => file.writeAll(buffer)
            }
          })
      }
    })
  ).pipe(Layer.provide(NodeFileSystem.layer))

/** A multi-byte text (2, 3 and 4 bytes per character in UTF-8) of about `bytes` bytes. */
const multiByteText = (bytes: number) => "é中😀a".repeat(Math.ceil(bytes / 10))

describe("FileSessionPersistence durable reads (DUR)", () => {
  it.effect.prop(
    "DUR-05 a session read in chunks of any size reads back what was stored (lines and UTF-8 split across chunks)",
    {
      chunk: FastCheck.integer({ min: 1, max: 48 }),
      texts: FastCheck.array(FastCheck.string({ unit: "binary", maxLength: 24 }), { maxLength: 10 }),
      tail: FastCheck.option(FastCheck.string({ unit: "binary", minLength: 1, maxLength: 40 }), { nil: undefined })
    },
    ({ chunk, tail, texts }) =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const id = sid("chunks")
          const events = textEvents(texts)
          yield* storedEvents(directory, id, events)
          const file = fileOf(directory, id)
          const intact = yield* readBytes(file)
          // An unterminated tail (a torn write) that may span chunks and split characters.
          if (tail !== undefined) yield* writeText(file, new TextDecoder().decode(intact) + tail.replaceAll("\n", " "))
          const reads: Array<number> = []
          const persistence = yield* Effect.provide(
            SessionPersistence,
            FileSessionPersistence.layer({ directory, readChunkBytes: chunk }).pipe(
              Layer.provide(Layer.merge(NodeContext.layer, streamingOnly(reads)))
            )
          )
          const read = yield* persistence.read(id)
          assert.deepStrictEqual(read.events, events)
          assert.strictEqual(read.tornTailDropped, tail === undefined ? 0 : 1)
          const { stored } = yield* Effect.scoped(persistence.openWrite(id))
          assert.deepStrictEqual(stored.events, events)
          assert.deepStrictEqual(yield* readBytes(file), intact)
          assert.isTrue(reads.length > 0 && reads.every((size) => size <= chunk), `reads of ${reads.join(",")}`)
        })),
    { fastCheck: { numRuns: 60 } }
  )

  it.effect("DUR-05 huge lines, a file of many chunks and multi-byte text are streamed, never read whole", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const id = sid("huge")
        // One line of ~1.5 MiB (more than the default chunk), small lines around it.
        const small = Array.from({ length: 300 }, (_, i) => `n${i}`)
        const events = textEvents(["small", multiByteText(1_500_000), ...small])
        yield* storedEvents(directory, id, events)
        const size = (yield* readBytes(fileOf(directory, id))).length
        for (const chunk of [4096, 65_536, undefined]) {
          const reads: Array<number> = []
          const persistence = yield* Effect.provide(
            SessionPersistence,
            FileSessionPersistence.layer({ directory, readChunkBytes: chunk }).pipe(
              Layer.provide(Layer.merge(NodeContext.layer, streamingOnly(reads)))
            )
          )
          const read = yield* persistence.read(id)
          assert.deepStrictEqual(read.events, events)
          const limit = chunk ?? 1024 * 1024
          assert.isTrue(reads.every((n) => n <= limit), `reads of at most ${limit} bytes`)
          // The file was read in many reads: at least size / chunk of them.
          assert.isAtLeast(reads.length, Math.floor(size / limit), `${reads.length} reads of a ${size}-byte file`)
          // And through the writer: resumable, appendable, and listed.
          yield* Effect.scoped(Effect.gen(function*() {
            const { stored, writer } = yield* persistence.openWrite(id)
            assert.strictEqual(stored.events.length, events.length)
            yield* writer.append([{ ...textEvents(["after"])[0]!, seq: events.length }])
          }))
          const listed = Array.from(yield* Stream.runCollect(persistence.list))
          assert.deepStrictEqual(listed.map((entry) => entry._tag === "SessionSummary" ? entry.eventCount : -1), [
            (yield* persistence.read(id)).events.length
          ])
          events.push({ ...textEvents(["after"])[0]!, seq: events.length })
        }
      })))

  it.effect("DUR-05 PERS-03 bytes that are not UTF-8 fail SessionCorrupt at their line, whatever the chunk size", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const id = sid("not-utf8")
        yield* storedEvents(directory, id, textEvents(["a", "b", "c"]))
        const file = fileOf(directory, id)
        const text = yield* readText(file)
        const lines = text.split("\n")
        const bad = new TextEncoder().encode(lines.slice(0, 2).join("\n") + "\n")
        const rest = new TextEncoder().encode("\n" + lines.slice(3).join("\n"))
        const fs = yield* FileSystem.FileSystem
        // Line 3 is a lone continuation byte and an overlong encoding.
        yield* fs.writeFile(file, new Uint8Array([...bad, 0x80, 0xc0, 0xaf, ...rest]))
        const before = yield* readBytes(file)
        for (const chunk of [1, 3, 64, undefined]) {
          const persistence = yield* persistenceAt(directory, { readChunkBytes: chunk })
          const read = yield* Effect.flip(persistence.read(id))
          assert.strictEqual(read._tag, "SessionCorrupt")
          if (read._tag === "SessionCorrupt") {
            assert.strictEqual(read.line, 3)
            assert.include(read.reason, "UTF-8")
          }
          assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(id))))._tag, "SessionCorrupt")
          assert.deepStrictEqual(yield* readBytes(file), before)
        }
      })))

  it.effect.prop(
    "DUR-11 only an unterminated tail is torn: any complete record that fails validation is SessionCorrupt",
    {
      chunk: FastCheck.integer({ min: 1, max: 64 }),
      bad: FastCheck.constantFrom(
        "garbage",
        "{\"seq\":2}",
        "[]",
        "{\"seq\":2,\"time\":1,\"type\":\"x\",\"data\":1}",
        ""
      ),
      terminated: FastCheck.boolean()
    },
    ({ bad, chunk, terminated }) =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const id = sid("dur-11")
          yield* storedEvents(directory, id, textEvents(["a", "b"]))
          const file = fileOf(directory, id)
          const intact = yield* readText(file)
          yield* writeText(file, intact + bad + (terminated ? "\n" : ""))
          const before = yield* readBytes(file)
          const persistence = yield* persistenceAt(directory, { readChunkBytes: chunk })
          if (terminated) {
            const read = yield* Effect.flip(persistence.read(id))
            assert.strictEqual(read._tag, "SessionCorrupt")
            if (read._tag === "SessionCorrupt") assert.strictEqual(read.line, 4)
            assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(id))))._tag, "SessionCorrupt")
            assert.deepStrictEqual(yield* readBytes(file), before)
          } else {
            assert.strictEqual((yield* persistence.read(id)).tornTailDropped, bad === "" ? 0 : 1)
            const { stored } = yield* Effect.scoped(persistence.openWrite(id))
            assert.deepStrictEqual(stored.events, textEvents(["a", "b"]))
            assert.strictEqual(yield* readText(file), intact)
          }
        })),
    { fastCheck: { numRuns: 40 } }
  )

  it.effect("DUR-07 on a case-insensitive file system ids that differ only by case never share a session", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-case-" })
      // The fixture folds case: what is written as "Probe" is read as "PROBE".
      yield* fs.writeFileString(`${directory}/Probe.txt`, "folded")
      assert.strictEqual(yield* fs.readFileString(`${directory}/PROBE.TXT`), "folded")

      const persistence = yield* FileSessionPersistence.layer({ directory, durability: "buffered" }).pipe(
        (layer) => Effect.provide(SessionPersistence, layer)
      )
      const abc = sid("abc")
      const ABC = sid("ABC")
      yield* Effect.scoped(Effect.flatMap(persistence.create(header(abc)), (writer) => writer.append(notes(0, 2))))
      const stored = yield* fs.readFile(fileOf(directory, abc))

      // Refused at create: whether abc is held by a writer or not.
      const second = yield* Effect.flip(Effect.scoped(persistence.create(header(ABC))))
      assert.strictEqual(second._tag, "SessionAlreadyExists")
      yield* Effect.scoped(Effect.gen(function*() {
        yield* persistence.openWrite(abc)
        const held = yield* Effect.flip(Effect.scoped(persistence.create(header(ABC))))
        assert.strictEqual(held._tag, "SessionAlreadyExists")
        // remove of the other id neither waits for abc's lock nor touches it.
        yield* persistence.remove(ABC)
      }))

      // ABC is not stored, on every path; nothing of abc's is handed out or removed.
      assert.strictEqual((yield* Effect.flip(persistence.read(ABC)))._tag, "SessionNotFound")
      assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(ABC))))._tag, "SessionNotFound")
      assert.isFalse(yield* persistence.exists(ABC))
      yield* persistence.remove(ABC)
      assert.deepStrictEqual(yield* fs.readFile(fileOf(directory, abc)), stored)
      assert.deepStrictEqual((yield* persistence.read(abc)).events, notes(0, 2))
      assert.isTrue(yield* persistence.exists(abc))
      assert.deepStrictEqual(Array.from(yield* Stream.runCollect(persistence.list)).map((entry) => entry.id), [abc])
      // And abc itself is removed by its own id.
      yield* persistence.remove(abc)
      assert.isFalse(yield* persistence.exists(abc))
      yield* Effect.scoped(persistence.create(header(ABC)))
      assert.strictEqual((yield* Effect.flip(persistence.read(abc)))._tag, "SessionNotFound")
      assert.deepStrictEqual((yield* persistence.read(ABC)).header, header(ABC))
    }).pipe(Effect.scoped, Effect.provide(Layer.merge(NodeContext.layer, caseInsensitiveFiles))))

  it.effect("DUR-08 list reports a garbage file, a newer header and a file named by no valid id; lists the rest", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const good = sid("good")
        yield* storedSession(directory, good, 2)
        yield* writeText(`${directory}/garbage.jsonl`, "\u0000\u0001 not a session\n")
        yield* writeText(`${directory}/newer.jsonl`, line({ ...header(sid("newer")), version: 99 }))
        yield* writeText(`${directory}/-bad name.jsonl`, line(header(good)))
        yield* writeText(`${directory}/notes.txt`, "not a session file at all")
        const persistence = yield* persistenceAt(directory)
        const [entries, logs] = yield* withLogs(Effect.map(Stream.runCollect(persistence.list), Chunk.toArray))
        assert.deepStrictEqual(entries.map((entry) => [entry.id, entry._tag]), [
          ["-bad name", "UnreadableSession"],
          ["garbage", "UnreadableSession"],
          ["good", "SessionSummary"],
          ["newer", "UnreadableSession"]
        ])
        const problems = unreadableOf(entries).map((entry) => entry.problem)
        assert.include(problems[0], "not a valid session id")
        assert.include(problems[1], "not JSON")
        assert.include(problems[2], "newer")
        const warnings = logs.filter((l) => l.startsWith("WARN"))
        assert.strictEqual(warnings.length, 3, logs.join("\n"))
        assert.isTrue(warnings.every((w) => w.includes(directory)), warnings.join("\n"))
      })))
})
