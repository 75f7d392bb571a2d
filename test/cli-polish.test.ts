/**
 * The first-time user's polish of the operator CLI (DOC-02): the built binary run as a child
 * process against real stores — `serve` on a SQLite file that does not exist yet, `sessions rm`
 * of a session with a summary and of an unknown id, one version everywhere, `--help` into a pipe.
 *
 * `it.live`: the CLI is another process on the real clock.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Context, Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { beforeAll } from "vitest"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import { VERSION } from "../src/internal/version.js"
import type { SessionId } from "../src/Message.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { tempDirectory } from "./fixtures/backends.js"
import { closedTurn } from "./fixtures/cliSessions.js"
import { cli, ensureBuilt, repository, type Run, serveProcess } from "./fixtures/cliProcess.js"
import { header, sid } from "./fixtures/persistenceConformance.js"

beforeAll(ensureBuilt, 240_000)

/** Each test starts Node processes; a loaded 2-core machine needs the margin. */
const TIMEOUT = 180_000

const expectCode = (run: Run, code: number, what: string) =>
  assert.strictEqual(run.code, code, `${what}: exit ${run.code}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`)

// eslint-disable-next-line no-control-regex
const ansi = /\x1b\[/

const fileStoreIn = (directory: string) =>
  Layer.build(FileSessionPersistence.layer({ directory, durability: "buffered" }).pipe(Layer.provide(NodeContext.layer)))
    .pipe(Effect.map(Context.get(SessionPersistence.SessionPersistence)))

const store = (
  persistence: SessionPersistence.SessionPersistence["Type"],
  id: SessionId,
  events: readonly [SessionEvent, ...Array<SessionEvent>]
) => Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(events)))

const fetchJson = (url: string, init?: RequestInit) =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    return { status: response.status, body: (await response.json()) as Record<string, unknown> }
  })

describe("the operator CLI's polish (DOC-02)", () => {
  it.live("DOC-02 one version: package.json, its lock file, --version, the README and the OpenAPI document (titled effect-agent)", () =>
    Effect.gen(function*() {
      const manifest = JSON.parse(fs.readFileSync(path.join(repository, "package.json"), "utf8"))
      const lock = JSON.parse(fs.readFileSync(path.join(repository, "package-lock.json"), "utf8"))
      assert.strictEqual(VERSION, "0.3.0")
      assert.strictEqual(manifest.version, VERSION)
      assert.strictEqual(lock.version, VERSION)
      assert.strictEqual(lock.packages[""].version, VERSION)
      const readme = fs.readFileSync(path.join(repository, "README.md"), "utf8")
      assert.include(readme, VERSION)
      for (const [, named] of readme.matchAll(/effect-agent@(\d+\.\d+\.\d+)/g)) assert.strictEqual(named, VERSION)

      const version = yield* cli(["--version"])
      expectCode(version, 0, "--version")
      assert.strictEqual(version.stdout.trim(), VERSION)
    }).pipe(Effect.scoped), TIMEOUT)

  it.live("DOC-02 --help prints no colour codes when stdout is not a terminal", () =>
    Effect.gen(function*() {
      const runs = yield* Effect.all([
        cli(["--help"]),
        cli(["sessions", "repair", "--help"]),
        cli(["serve", "--help"])
      ], { concurrency: "unbounded" })
      for (const run of runs) {
        expectCode(run, 0, "--help")
        assert.include(run.stdout, "USAGE")
        assert.notMatch(run.stdout, ansi, run.stdout)
        assert.notMatch(run.stderr, ansi, run.stderr)
      }
      assert.include(runs[2]!.stdout, "--host")
    }), TIMEOUT)

  it.live("DOC-02 serve --sqlite creates a missing database, listens on 127.0.0.1, prints the inspector's URL and refuses a bad request with a path message", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-polish-")
      const database = path.join(directory, "new.db")
      const { serving } = yield* serveProcess(["--sqlite", "./new.db", "--port", "0"], { cwd: directory })
      assert.isTrue(fs.statSync(database).isFile(), "the database file was created")
      assert.match(serving.url, /^http:\/\/127\.0\.0\.1:\d+$/, serving.banner)
      assert.strictEqual(serving.inspector, `${serving.url}/inspector/`)

      const page = yield* Effect.promise(() => fetch(serving.inspector).then((response) => response.status))
      assert.strictEqual(page, 200, "the printed inspector URL answers")
      const openApi = yield* fetchJson(`${serving.url}/openapi.json`)
      assert.deepStrictEqual(openApi.body["info"], { title: "effect-agent", version: VERSION })

      const created = yield* fetchJson(`${serving.url}/sessions/s1`, {
        method: "PUT",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ meta: { x: "y" } })
      })
      assert.strictEqual(created.status, 201)
      for (const [url, body, says] of [
        [`${serving.url}/sessions/s2`, { options: { provider: 5 } }, "field options.provider: expected a string, got 5"],
        [`${serving.url}/sessions/s1/fork`, { childId: "c", upTo: "x" }, "field upTo: expected a number, got \"x\""]
      ] as const) {
        const refused = yield* fetchJson(url, {
          method: url.endsWith("fork") ? "POST" : "PUT",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body)
        })
        assert.strictEqual(refused.status, 400)
        const detail = String(refused.body["detail"])
        assert.include(detail, says)
        for (const internal of ["└", "├", "readonly", "Expected", "{ "]) assert.notInclude(detail, internal, detail)
      }

      // the session commands still never create a store
      const missing = yield* cli(["sessions", "list", "--sqlite", path.join(directory, "other.db")])
      expectCode(missing, 1, "list of a missing database")
      assert.isFalse(fs.existsSync(path.join(directory, "other.db")))
    }).pipe(Effect.scoped), TIMEOUT)

  it.live("DOC-02 sessions rm removes the summary with the log; an unknown id exits 3 saying not found", () =>
    Effect.gen(function*() {
      const directory = yield* tempDirectory("effect-agent-polish-rm-")
      const persistence = yield* fileStoreIn(directory)
      yield* store(persistence, sid("done"), closedTurn())
      // the host's recovery summaries write the sidecar index
      const summaries = yield* Stream.runCollect(persistence.summaries!)
      assert.strictEqual(Chunk.size(summaries), 1)
      const sidecar = path.join(directory, ".summaries", "done.json")
      assert.isTrue(fs.existsSync(sidecar), "the summary exists before rm")

      const removed = yield* cli(["sessions", "rm", "done", "--dir", directory])
      expectCode(removed, 0, "rm")
      assert.isFalse(fs.existsSync(path.join(directory, "done.jsonl")))
      assert.isFalse(fs.existsSync(sidecar), "the summary went with the log")

      const [again, unknown] = yield* Effect.all([
        cli(["sessions", "rm", "done", "--dir", directory]),
        cli(["sessions", "rm", "nobody", "--dir", directory, "--json"])
      ], { concurrency: "unbounded" })
      for (const run of [again, unknown]) {
        expectCode(run, 3, "rm of an unknown id")
        assert.include(run.stderr, "not found")
        assert.notInclude(run.stderr, "create it first")
      }
      assert.strictEqual(JSON.parse(unknown.stdout).error._tag, "SessionNotFound")
    }).pipe(Effect.scoped), TIMEOUT)
})
