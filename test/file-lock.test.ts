/**
 * The file store's lock protocol (DUR-06): process identity by start time, lock and guard files
 * that are never observable incomplete, takeover of dead guards and old v1 leftovers, cleanup of
 * leftovers, and an operator's `breakLock` that clears whatever is at the lock path.
 */
import { Command, FileSystem, Path } from "@effect/platform"
import type { CommandExecutor } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, Schema, Stream, TestClock } from "effect"
import { spawn } from "node:child_process"
import * as nodeFs from "node:fs"
import * as os from "node:os"
import { fileURLToPath } from "node:url"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import * as fileLock from "../src/internal/storage/file/lock.js"
import type { SessionId } from "../src/Message.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import { nodeArguments } from "./fixtures/bundle.js"
import { inDirectory } from "./fixtures/instrumentedFiles.js"
import { dyingFiles, newWatch, watchedFiles } from "./fixtures/lockFiles.js"
import { withLogs } from "./fixtures/logs.js"
import { header, notes, sid } from "./fixtures/persistenceConformance.js"

const fixture = fileURLToPath(new URL("./fixtures/holdSessionLock.ts", import.meta.url))
const repository = fileURLToPath(new URL("..", import.meta.url))
const host = os.hostname()

const lockOf = (directory: string, id: string) => `${directory}/${id}.lock`

const persistenceAt = (directory: string, options?: Omit<FileSessionPersistence.Options, "directory">) =>
  Effect.provide(SessionPersistence, FileSessionPersistence.layer({ directory, ...options }))

const storedSession = (directory: string, id: SessionId, events: number) =>
  Effect.flatMap(persistenceAt(directory, { durability: "buffered" }), (persistence) =>
    Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(notes(0, events)))))

interface OwnerFields {
  readonly pid: number
  readonly token: string
  readonly startTime?: string
  readonly host?: string
  readonly instanceId?: string
}

const ownerJson = (fields: OwnerFields) =>
  JSON.stringify({
    host: fields.host ?? host,
    pid: fields.pid,
    ...(fields.startTime === undefined ? {} : { startTime: fields.startTime }),
    instanceId: fields.instanceId ?? "test",
    token: fields.token
  })

const decodeOwner = Schema.decodeUnknownOption(Schema.parseJson(fileLock.LockOwner))

const readOwner = (file: string) =>
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(file)).pipe(
    Effect.map((text) => Option.getOrThrowWith(decodeOwner(text), () => new Error(`not a lock: ${text}`)))
  )

const writeText = (file: string, text: string) =>
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.writeFileString(file, text))

const namesIn = (directory: string) =>
  Effect.map(Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readDirectory(directory)), (names) => names.sort())

/** Sets the TestClock to `ageMillis` after the file's mtime: how the lock protocol sees its age. */
const ageOf = (file: string, ageMillis: number) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const mtime = Option.getOrThrow((yield* fs.stat(file)).mtime).getTime()
    yield* TestClock.setTime(mtime + ageMillis)
  })

/** The pid of a process of this host that ran and exited (reaped): a dead process, for real. */
const deadPid = Effect.scoped(Effect.gen(function*() {
  const child = yield* Command.start(Command.make(process.execPath, "-e", ""))
  yield* child.exitCode
  return Number(child.pid)
}))

/** What the test reads itself from /proc, independently of the library: boot id and field 22. */
const startTimeFromProc = (pid: number): string => {
  const stat = nodeFs.readFileSync(`/proc/${pid}/stat`, "utf8")
  const afterCommand = stat.slice(stat.lastIndexOf(")") + 1).trim().split(/\s+/)
  const bootId = nodeFs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()
  return `${bootId}:${afterCommand[22 - 3]}`
}

type Child = CommandExecutor.Process

/** Starts `command` (the lock holder, possibly inside `unshare`) and waits for its `locked <pid>`. */
const startHolder = (command: Command.Command) =>
  Effect.gen(function*() {
    const child = yield* command.pipe(Command.workingDirectory(repository), Command.start)
    // Read from the start (the pipe is not kept for later): the child's log, complete once it exits.
    const log = yield* Effect.forkScoped(child.stderr.pipe(Stream.decodeText(), Stream.mkString))
    const ready = yield* child.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runHead)
    if (Option.isNone(ready) || !ready.value.startsWith("locked ")) {
      yield* child.kill("SIGKILL")
      return yield* Effect.dieMessage(`the lock holder did not start: ${yield* Fiber.join(log)}`)
    }
    return { child, pid: Number(ready.value.slice("locked ".length)), log }
  })

/** The lock holder as a child process, its fixture bundled for the Scope (test/fixtures/bundle.ts). */
const holderCommand = (directory: string, id: string) =>
  Effect.map(nodeArguments(fixture), (node) => Command.make(process.execPath, ...node, directory, id))

/** The lock holder as PID 1 of a PID namespace of its own (a container's process). */
const namespacedHolderCommand = (directory: string, id: string) =>
  Effect.map(nodeArguments(fixture), (node) =>
    Command.make(
      "unshare",
      "--pid",
      "--fork",
      "--mount-proc",
      "--kill-child",
      process.execPath,
      ...node,
      directory,
      id
    ))

/** SIGKILLs the namespace's PID 1 (found from outside) and waits until it is gone. */
const crashNamespace = (child: Child) =>
  Effect.gen(function*() {
    const outer = Number(child.pid)
    const children = nodeFs.readFileSync(`/proc/${outer}/task/${outer}/children`, "utf8").trim()
    process.kill(Number(children.split(/\s+/)[0]), "SIGKILL")
    // unshare waits for its child, so its exit means PID 1 of the namespace is gone.
    yield* Effect.ignore(child.exitCode)
  })

/** Whether `unshare` can make a PID namespace here; asked without blocking the worker (DOC-04). */
const hasPidNamespaces = process.platform === "linux" && await new Promise<boolean>((resolve) => {
  const child = spawn("unshare", ["--pid", "--fork", "--mount-proc", "--kill-child", "true"], { stdio: "ignore" })
  child.once("error", () => resolve(false))
  child.once("exit", (code) => resolve(code === 0))
})

describe("file lock (DUR-06)", () => {
  describe("process identity", () => {
    it.effect.skipIf(process.platform !== "linux")(
      "DUR-06 a lock records host, pid and start time; a live owner is respected, " +
        "the same pid with another start time is taken over",
      () =>
        inDirectory((directory) =>
          Effect.gen(function*() {
            const id = sid("reused-pid")
            yield* storedSession(directory, id, 1)
            const { child, pid } = yield* startHolder(yield* holderCommand(directory, id))
            const held = yield* readOwner(lockOf(directory, id))
            assert.strictEqual(held.host, host)
            assert.strictEqual(held.pid, pid)
            assert.strictEqual(held.instanceId, "child-process")
            assert.strictEqual(held.startTime, startTimeFromProc(pid))

            // The real probe: the holder runs, with the start time its lock records.
            const persistence = yield* persistenceAt(directory)
            const refused = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
            assert.strictEqual(refused._tag, "SessionLocked")
            if (refused._tag === "SessionLocked") assert.include(refused.holder, `process ${pid}`)

            // The same live pid, but the lock was written by a process that started at another time
            // (as after a container restart): that process is gone.
            yield* writeText(lockOf(directory, id), ownerJson({ ...held, startTime: `${held.startTime}0` }))
            const [{ stored }, logs] = yield* withLogs(Effect.scoped(Effect.gen(function*() {
              const opened = yield* persistence.openWrite(id)
              const lock = yield* readOwner(lockOf(directory, id))
              assert.strictEqual(lock.pid, process.pid)
              assert.strictEqual(lock.startTime, startTimeFromProc(process.pid))
              return opened
            })))
            assert.deepStrictEqual(stored.events, notes(0, 1))
            assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes(`took over the lock`)), logs.join("\n"))
            yield* child.kill("SIGKILL")
          })).pipe(Effect.scoped)
    )

    it.effect.skipIf(!hasPidNamespaces)(
      "DUR-06 a restarted container whose process is PID 1 again takes over its own stale lock (PID namespaces)",
      () =>
        inDirectory((directory) =>
          Effect.gen(function*() {
            const id = sid("container")
            yield* storedSession(directory, id, 2)
            const inNamespace = yield* namespacedHolderCommand(directory, id)

            const first = yield* startHolder(inNamespace)
            assert.strictEqual(first.pid, 1)
            const before = yield* readOwner(lockOf(directory, id))
            assert.strictEqual(before.pid, 1)
            yield* crashNamespace(first.child)

            // The "restarted container": PID 1 again, started later. A pid check alone sees its own
            // pid alive and would refuse its own stale lock forever.
            const second = yield* startHolder(inNamespace)
            assert.strictEqual(second.pid, 1)
            const after = yield* readOwner(lockOf(directory, id))
            assert.strictEqual(after.pid, 1)
            assert.notStrictEqual(after.startTime, before.startTime)
            assert.notStrictEqual(after.token, before.token)
            yield* crashNamespace(second.child)
            const childLog = yield* Fiber.join(second.log)
            assert.include(childLog, "took over the lock", childLog)

            // Seen from outside, pid 1 is this container's init: alive, started at another time.
            assert.isTrue(FileSessionPersistence.isProcessAlive(1))
            // The layer's start clears the stale lock (issue 15), or the open takes it over: either logs it.
            const [{ stored }, logs] = yield* withLogs(
              Effect.flatMap(persistenceAt(directory), (persistence) => Effect.scoped(persistence.openWrite(id)))
            )
            assert.deepStrictEqual(stored.events, notes(0, 2))
            const tookOver = logs.some((l) => l.includes("took over the lock") && l.includes("process 1 "))
            assert.isTrue(tookOver, logs.join("\n"))
          })).pipe(Effect.scoped)
    )

    it.effect.skipIf(!hasPidNamespaces)(
      "DUR-06 PERS-01 a live writer in another PID namespace keeps its lock, whatever our own pid of the same number is",
      () =>
        inDirectory((directory) =>
          Effect.gen(function*() {
            const id = sid("namespaced")
            yield* storedSession(directory, id, 1)
            const holder = yield* startHolder(yield* namespacedHolderCommand(directory, id))
            // The holder is PID 1 of its namespace; here, pid 1 is this host's init (alive, started
            // at another time): judged here, the live holder would look gone.
            const held = yield* readOwner(lockOf(directory, id))
            assert.strictEqual(held.pid, 1)
            assert.isDefined(held.pidNamespace)
            assert.notStrictEqual(held.pidNamespace, nodeFs.readlinkSync("/proc/self/ns/pid"))
            const persistence = yield* persistenceAt(directory)
            const refused = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
            assert.strictEqual(refused._tag, "SessionLocked")
            // Once it is gone (its namespace with it), the lock is stale and taken over.
            yield* crashNamespace(holder.child)
            const { stored } = yield* Effect.scoped(persistence.openWrite(id))
            assert.deepStrictEqual(stored.events, notes(0, 1))
          })).pipe(Effect.scoped)
    )
  })

  describe("v1 leftovers and guards", () => {
    it.effect("DUR-06 an empty or half-written lock file is respected while younger than 60 s, then taken over", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const persistence = yield* persistenceAt(directory)
          for (const [name, content] of [["empty", ""], ["half", "{\"host\":\"h\",\"pi"]] as const) {
            const id = sid(name)
            yield* storedSession(directory, id, 1)
            yield* writeText(lockOf(directory, id), content)
            yield* ageOf(lockOf(directory, id), 59_000)
            const refused = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
            assert.strictEqual(refused._tag, "SessionLocked", name)
            if (refused._tag === "SessionLocked") assert.include(refused.holder, "60 s", name)
            assert.strictEqual(nodeFs.readFileSync(lockOf(directory, id), "utf8"), content, name)

            yield* ageOf(lockOf(directory, id), 60_000)
            const [{ stored }, logs] = yield* withLogs(Effect.scoped(Effect.gen(function*() {
              const opened = yield* persistence.openWrite(id)
              assert.strictEqual((yield* readOwner(lockOf(directory, id))).pid, process.pid, name)
              return opened
            })))
            assert.deepStrictEqual(stored.events, notes(0, 1), name)
            assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes("took over the lock")), logs.join("\n"))
            const sessions = name === "half" ? ["empty.jsonl", "half.jsonl"] : ["empty.jsonl"]
            assert.deepStrictEqual(yield* namesIn(directory), sessions, name)
          }
        })))

    it.effect("DUR-06 a guard left by a dead process (and its own dead guard) is taken over at once", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const id = sid("dead-guard")
          yield* storedSession(directory, id, 1)
          const pid = yield* deadPid
          // A takeover killed after taking the guard of the dead lock, and another one killed while
          // taking over that guard: a chain of two guards, both of dead processes.
          yield* writeText(lockOf(directory, id), ownerJson({ pid, startTime: "s1", token: "stale-lock" }))
          yield* writeText(`${directory}/${id}.lock.stale-lock.break`, ownerJson({ pid, token: "guard-1" }))
          const guardOfGuard = ownerJson({ pid, startTime: "s3", token: "guard-2" })
          yield* writeText(`${directory}/${id}.lock.guard-1.break`, guardOfGuard)
          // The takeover at open (the layer's start would otherwise clear the lock first, by the same protocol)
          const persistence = yield* persistenceAt(directory, { clearStaleLocks: false })
          const [{ stored }, logs] = yield* withLogs(Effect.scoped(Effect.gen(function*() {
            const opened = yield* persistence.openWrite(id)
            const lock = yield* readOwner(lockOf(directory, id))
            assert.strictEqual(lock.pid, process.pid)
            assert.notStrictEqual(lock.token, "stale-lock")
            return opened
          })))
          assert.deepStrictEqual(stored.events, notes(0, 1))
          const warnings = logs.filter((l) => l.startsWith("WARN"))
          assert.isTrue(warnings.some((l) => l.includes("took over the guard file")), logs.join("\n"))
          assert.isTrue(warnings.some((l) => l.includes("took over the lock") && l.includes(`process ${pid}`)))
          // Released, and nothing left behind.
          assert.deepStrictEqual(yield* namesIn(directory), [`${id}.jsonl`])
        })))

    it.effect("DUR-06 an anonymous (v1) guard is respected while younger than 60 s, then taken over", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const id = sid("anonymous-guard")
          yield* storedSession(directory, id, 1)
          const pid = yield* deadPid
          const guard = `${directory}/${id}.lock.v1-token.break`
          yield* writeText(lockOf(directory, id), ownerJson({ pid, token: "v1-token" }))
          yield* writeText(guard, "")
          const persistence = yield* persistenceAt(directory)

          yield* ageOf(guard, 30_000)
          const refused = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(refused._tag, "SessionLocked")
          if (refused._tag === "SessionLocked") assert.include(refused.holder, "guard file")
          assert.strictEqual(nodeFs.readFileSync(guard, "utf8"), "")

          yield* ageOf(guard, 61_000)
          const [{ stored }, logs] = yield* withLogs(Effect.scoped(persistence.openWrite(id)))
          assert.deepStrictEqual(stored.events, notes(0, 1))
          assert.isTrue(logs.some((l) => l.includes("took over the guard file") && l.includes("over 60 s old")))
          assert.deepStrictEqual(yield* namesIn(directory), [`${id}.jsonl`])
        })))
  })

  describe("what is at the lock path", () => {
    it.effect("DUR-06 a symbolic link at the lock path is never followed; breakLock clears it, dangling or not", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const id = sid("linked")
          yield* storedSession(directory, id, 1)
          const persistence = yield* persistenceAt(directory)

          // Dangling.
          yield* fs.symlink(`${directory}/nowhere`, lockOf(directory, id))
          const refused = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(refused._tag, "SessionLocked")
          if (refused._tag === "SessionLocked") assert.include(refused.holder, "symbolic link")
          const [, logs] = yield* withLogs(FileSessionPersistence.breakLock(id, { directory }))
          assert.isTrue(logs.some((l) => l.startsWith("WARN") && l.includes("symbolic link")), logs.join("\n"))
          assert.deepStrictEqual(yield* namesIn(directory), [`${id}.jsonl`])
          assert.isFalse(yield* fs.exists(`${directory}/nowhere`))

          // Pointing at someone else's file that looks like a stale lock: neither read as a lock
          // nor replaced nor removed.
          const elsewhere = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-victim-" })
          const victim = `${elsewhere}/precious`
          const victimText = ownerJson({ pid: yield* deadPid, token: "victim" })
          yield* writeText(victim, victimText)
          yield* fs.symlink(victim, lockOf(directory, id))
          assert.strictEqual((yield* Effect.flip(Effect.scoped(persistence.openWrite(id))))._tag, "SessionLocked")
          yield* FileSessionPersistence.breakLock(id, { directory })
          assert.strictEqual(nodeFs.readFileSync(victim, "utf8"), victimText)
          assert.deepStrictEqual(yield* namesIn(directory), [`${id}.jsonl`])
          const { stored } = yield* Effect.scoped(persistence.openWrite(id))
          assert.deepStrictEqual(stored.events, notes(0, 1))
        })).pipe(Effect.scoped))

    it.effect("DUR-06 a FIFO or a directory at the lock path is refused unread; breakLock removes the FIFO", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const id = sid("special")
          yield* storedSession(directory, id, 1)
          const persistence = yield* persistenceAt(directory)

          // Reading a FIFO without a writer would block forever.
          assert.strictEqual(yield* Command.exitCode(Command.make("mkfifo", lockOf(directory, id))), 0)
          const refused = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(refused._tag, "SessionLocked")
          if (refused._tag === "SessionLocked") assert.include(refused.holder, "FIFO")
          yield* FileSessionPersistence.breakLock(id, { directory })
          assert.deepStrictEqual(yield* namesIn(directory), [`${id}.jsonl`])

          yield* fs.makeDirectory(lockOf(directory, id))
          const blocked = yield* Effect.flip(Effect.scoped(persistence.openWrite(id)))
          assert.strictEqual(blocked._tag, "SessionLocked")
          if (blocked._tag === "SessionLocked") assert.include(blocked.holder, "a directory")
          const notBroken = yield* Effect.flip(FileSessionPersistence.breakLock(id, { directory }))
          assert.strictEqual(notBroken._tag, "PersistenceError")
          assert.isTrue((yield* fs.stat(lockOf(directory, id))).type === "Directory")
        })))
  })

  it.effect("DUR-06 leftover temp and guard files are removed once their writer is gone or they are 60 s old", () =>
    inDirectory((directory) =>
      Effect.gen(function*() {
        const pid = yield* deadPid
        const self = { pid: process.pid, startTime: startTimeFromProc(process.pid) }
        const file = (name: string) => `${directory}/${name}`
        yield* writeText(file("notes.txt"), "not ours")
        yield* writeText(file("other.lock.dead-other.tmp"), ownerJson({ pid, token: "dead-other" }))
        yield* writeText(file("kept.lock"), ownerJson({ ...self, token: "live-lock" }))
        yield* writeText(file("kept.lock.dead-tmp.tmp"), ownerJson({ pid, token: "dead-tmp" }))
        yield* writeText(file("kept.lock.empty-tmp.tmp"), "")
        yield* writeText(file("kept.lock.live-tmp.tmp"), ownerJson({ ...self, token: "live-tmp" }))
        // A dead guard that protects nothing any more, and one whose key is the lock's.
        yield* writeText(file("kept.lock.gone-key.break"), ownerJson({ pid, token: "g1" }))
        yield* writeText(file("kept.lock.live-lock.break"), ownerJson({ pid, token: "g2" }))

        const [, logs] = yield* withLogs(persistenceAt(directory))
        assert.deepStrictEqual(yield* namesIn(directory), [
          "kept.lock",
          "kept.lock.empty-tmp.tmp",
          "kept.lock.live-lock.break",
          "kept.lock.live-tmp.tmp",
          "notes.txt"
        ])
        assert.strictEqual(logs.filter((l) => l.includes("removed") && l.includes("interrupted lock")).length, 3)

        // 60 s later the anonymous temp file goes; a live writer's stays however long it is paused
        // (it still needs it to link its lock), until that writer is gone.
        yield* ageOf(file("kept.lock.live-tmp.tmp"), 60_000)
        yield* persistenceAt(directory)
        assert.deepStrictEqual(yield* namesIn(directory), [
          "kept.lock",
          "kept.lock.live-lock.break",
          "kept.lock.live-tmp.tmp",
          "notes.txt"
        ])
        yield* writeText(file("kept.lock.live-tmp.tmp"), ownerJson({ pid, token: "live-tmp" }))
        yield* persistenceAt(directory)
        assert.deepStrictEqual(yield* namesIn(directory), ["kept.lock", "kept.lock.live-lock.break", "notes.txt"])
      })))

  describe("lock files are complete", () => {
    it.effect("DUR-06 the lock name only ever appears with complete content (checked after every file operation)", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const id = sid("observed")
          const lock = lockOf(directory, id)
          const watch = newWatch(lock)
          const observed = (instanceId: string) =>
            Effect.provide(
              SessionPersistence,
              FileSessionPersistence.layer({ directory, instanceId }).pipe(
                Layer.provide(Layer.merge(NodeContext.layer, watchedFiles(watch)))
              )
            )
          const first = yield* observed("first")
          const second = yield* observed("second")

          // Eight concurrent creates across two instances: one winner.
          const outcomes = yield* Effect.forEach(
            Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? first : second)),
            (persistence) => Effect.exit(Effect.scoped(persistence.create(header(id)))),
            { concurrency: "unbounded" }
          )
          assert.strictEqual(outcomes.filter((exit) => exit._tag === "Success").length, 1)
          assert.deepStrictEqual(watch.violations, [])
          assert.deepStrictEqual(watch.writesToLockName, [])

          // Takeovers of a dead lock and of a dead guard, by concurrent contenders.
          const pid = yield* deadPid
          for (const withGuard of [false, true]) {
            yield* writeText(lock, ownerJson({ pid, startTime: "x", token: `dead-${withGuard}` }))
            if (withGuard) yield* writeText(`${lock}.dead-${withGuard}.break`, ownerJson({ pid, token: "dead-guard" }))
            const taken = yield* Effect.forEach(
              [first, second, first, second],
              (persistence) => Effect.exit(Effect.scoped(persistence.openWrite(id))),
              { concurrency: "unbounded" }
            )
            assert.isAtLeast(taken.filter((exit) => exit._tag === "Success").length, 1)
          }
          assert.deepStrictEqual(watch.violations, [])
          assert.deepStrictEqual(watch.writesToLockName, [])
          assert.isAtLeast(watch.sightings, 10, "the lock was seen in place while it was held")
          assert.deepStrictEqual(yield* namesIn(directory), [`${id}.jsonl`])
        })))

    it.effect("DUR-06 a lock operation killed at any file operation leaves nothing that blocks the next writer", () =>
      inDirectory((directory) =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const pid = yield* deadPid
          const scenarios = ["free", "stale lock", "stale lock and dead guard"] as const
          let cases = 0
          for (const scenario of scenarios) {
            for (let crashAt = 0;; crashAt++) {
              const here = `${directory}/${scenario.replaceAll(" ", "-")}-${crashAt}`
              const id = sid("crashed")
              yield* fs.makeDirectory(here)
              yield* storedSession(here, id, 1)
              if (scenario !== "free") {
                yield* writeText(lockOf(here, id), ownerJson({ pid, startTime: "a", token: "old" }))
              }
              if (scenario === "stale lock and dead guard") {
                yield* writeText(`${lockOf(here, id)}.old.break`, ownerJson({ pid, startTime: "b", token: "guard" }))
              }
              // A process (dead once it stops) that is killed before its operation number `crashAt`.
              const plan = { operations: 0, crashAt }
              const killed = yield* Effect.exit(fileLock.acquire({
                fs: dyingFiles(fs, plan),
                path: yield* Path.Path,
                directory: here,
                self: { host, pid, startTime: "killed", instanceId: "killed" },
                isProcessAlive: FileSessionPersistence.isProcessAlive,
                processStartTime: FileSessionPersistence.processStartTime,
                inNamespace: () => "Invisible",
                isDurable: true
              }, id))
              cases++

              // The next writer gets in at once (the TestClock has not moved: nothing waited 60 s).
              const persistence = yield* persistenceAt(here)
              const { stored } = yield* Effect.scoped(persistence.openWrite(id))
              assert.deepStrictEqual(stored.events, notes(0, 1), `${scenario} @${crashAt}`)
              // Only temp files the killed process had not filled yet may be left, until 60 s old.
              const left = (yield* namesIn(here)).filter((name) => name !== `${id}.jsonl`)
              for (const name of left) {
                assert.match(name, /\.tmp$/, `${scenario} @${crashAt}`)
                assert.isTrue(Option.isNone(decodeOwner(nodeFs.readFileSync(`${here}/${name}`, "utf8"))))
              }
              if (killed._tag === "Success") break
            }
          }
          assert.isAtLeast(cases, 30)
          // Past 60 s the unfilled temp files go too.
          yield* TestClock.setTime(Date.now() + 61_000)
          for (const name of yield* namesIn(directory)) {
            yield* persistenceAt(`${directory}/${name}`)
            assert.deepStrictEqual(yield* namesIn(`${directory}/${name}`), ["crashed.jsonl"], name)
          }
        })))
  })
})
