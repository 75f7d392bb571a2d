/**
 * CORE-09 with DUR-06: a lock file's content is written with `FileSystem.writeFileString(…, { flag:
 * "wx" })` — to a fresh temporary file — and the lock gets its name by `link`, in one step. Creating
 * the lock name itself with `wx` would make the lock exist, empty, until its content is written.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as nodeFs from "node:fs"
import * as nodePath from "node:path"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import { header, sid } from "./fixtures/persistenceConformance.js"

/** Node's file system, recording each write by path (`writeFileString <flag> <name>`, `link <from> <to>`). */
const recordingFiles = (calls: Array<string>) =>
  Layer.effect(
    FileSystem.FileSystem,
    Effect.map(FileSystem.FileSystem, (fs): FileSystem.FileSystem => ({
      ...fs,
      writeFileString: (path, data, options) => {
        calls.push(`writeFileString ${options?.flag ?? "w"} ${nodePath.basename(path)}`)
        return fs.writeFileString(path, data, options)
      },
      link: (from, to) => {
        calls.push(`link ${nodePath.basename(from).replace(/\.[0-9a-f-]{36}\./, ".<token>.")} ${nodePath.basename(to)}`)
        return fs.link(from, to)
      }
    }))
  ).pipe(Layer.provide(NodeContext.layer))

describe("lock files (CORE-09, DUR-06)", () => {
  it.scoped("CORE-09 DUR-06 a lock's content is written with writeFileString wx to a temporary file, then linked to the lock name", () =>
    Effect.gen(function*() {
      const directory = nodeFs.mkdtempSync(nodePath.join(nodeFs.realpathSync("/tmp"), "effect-agent-lock-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => nodeFs.rmSync(directory, { recursive: true, force: true })))
      const calls: Array<string> = []
      const persistence = yield* Effect.provide(
        SessionPersistence,
        FileSessionPersistence.layer({ directory, durability: "fsync" }).pipe(
          Layer.provide(recordingFiles(calls)),
          Layer.provide(NodeContext.layer)
        )
      )
      const id = sid("linked")
      yield* Effect.scoped(Effect.flatMap(persistence.create(header(id)), () =>
        Effect.sync(() => {
          // while held: the lock is complete and names its owner
          const owner = JSON.parse(nodeFs.readFileSync(nodePath.join(directory, "linked.lock"), "utf8"))
          assert.strictEqual(owner.pid, process.pid)
        })))
      const lockWrites = calls.filter((call) => call.includes("linked.lock"))
      assert.lengthOf(lockWrites, 2, calls.join("\n"))
      assert.match(lockWrites[0]!, /^writeFileString wx linked\.lock\.[0-9a-f-]{36}\.tmp$/)
      assert.strictEqual(lockWrites[1], "link linked.lock.<token>.tmp linked.lock")
      // the temporary file is gone once the lock has its name; the lock is gone once released
      assert.deepStrictEqual(nodeFs.readdirSync(directory).filter((name) => name.includes(".lock")), [])
    }))
})
