/**
 * "Newer, not corrupt" (DUR-00, DOC-05, Rulings for v3): a stored record this version does not know
 * — an unknown field on a known event type whose record is otherwise valid, beside an unknown core
 * type (EVT-01) — is refused as `SessionFormatUnsupported`, naming its seq and the field, never as
 * `SessionCorrupt`; and `truncateAtCorruption` never drops it. A record whose known fields are
 * invalid stays corrupt, whatever else it holds. On a real file, a real SQLite database and, when
 * `EFFECT_AGENT_PG_URL` is set, Postgres; and a resume through the registry on files.
 */
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Either, Layer, Option } from "effect"
import type { Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { AgentRegistry, Model } from "../src/index.js"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import type { SessionId } from "../src/Message.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { tempDirectory } from "./fixtures/backends.js"
import { closedTurn } from "./fixtures/cliSessions.js"
import { header, sid } from "./fixtures/persistenceConformance.js"
import { sqlStores } from "./fixtures/sqlStores.js"

type Persistence = SessionPersistence.SessionPersistence["Type"]
type Json = Record<string, unknown>
/** A change of a stored record: a new record, or text stored as it is. */
type Change = (record: Json) => Json | string

const changed = (text: string, change: Change): string => {
  const next = change(JSON.parse(text) as Json)
  return typeof next === "string" ? next : JSON.stringify(next)
}

/** A store under test, with raw access to its stored records. */
interface RawStore {
  readonly persistence: Persistence
  /** Rewrites the stored record of `seq` (its JSON text as stored). */
  readonly rewrite: (id: SessionId, seq: number, change: Change) => Effect.Effect<void, unknown>
  /** Everything stored, as text: equal before and after means nothing changed. */
  readonly snapshot: Effect.Effect<string, unknown>
}

const fileStore: Effect.Effect<RawStore & { readonly directory: string }, unknown, Scope.Scope> = Effect.gen(function*() {
  const directory = yield* tempDirectory("effect-agent-newer-")
  const context = yield* Layer.build(
    FileSessionPersistence.layer({ directory, durability: "buffered" }).pipe(Layer.provide(NodeContext.layer))
  )
  const file = (id: SessionId) => path.join(directory, `${id}.jsonl`)
  return {
    directory,
    persistence: Context.get(context, SessionPersistence.SessionPersistence),
    rewrite: (id, seq, change) =>
      Effect.sync(() => {
        const lines = fs.readFileSync(file(id), "utf8").split("\n")
        lines[seq + 1] = changed(lines[seq + 1]!, change)
        fs.writeFileSync(file(id), lines.join("\n"))
      }),
    snapshot: Effect.sync(() =>
      fs.readdirSync(directory).filter((name) => name.endsWith(".jsonl")).sort()
        .map((name) => `${name}\n${fs.readFileSync(path.join(directory, name), "utf8")}`).join("\n")
    )
  }
})

const sqlStore = (make: (typeof sqlStores)[number]["make"]): Effect.Effect<RawStore, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* make
    const context = yield* Layer.build(SqlSessionPersistence.layer().pipe(Layer.provideMerge(store.client)))
    const sql = Context.get(context, SqlClient)
    return {
      persistence: Context.get(context, SessionPersistence.SessionPersistence),
      rewrite: (id, seq, change) =>
        Effect.flatMap(
          sql<{ readonly record: string }>`SELECT record FROM effect_agent_events WHERE session_id = ${id} AND seq = ${seq}`,
          (rows) => {
            const record = changed(rows[0]!.record, change)
            return sql`UPDATE effect_agent_events SET record = ${record} WHERE session_id = ${id} AND seq = ${seq}`
          }
        ),
      snapshot: Effect.map(
        sql`SELECT session_id, seq, record FROM effect_agent_events ORDER BY session_id, seq`,
        (rows) => JSON.stringify(rows)
      )
    }
  })

const stores: ReadonlyArray<readonly [string, Effect.Effect<RawStore, unknown, Scope.Scope>]> = [
  ["files", fileStore],
  ...sqlStores.map((kind) => [kind.name, sqlStore(kind.make)] as const)
]

const store = (persistence: Persistence, id: SessionId, events: readonly [SessionEvent, ...Array<SessionEvent>]) =>
  Effect.scoped(Effect.flatMap(persistence.create(header(id)), (writer) => writer.append(events)))

const dataOf = (record: Json) => record["data"] as Json

/** What a newer version might write: a field the assistant message of seq 3 does not have here. */
const moodOnMessage = (record: Json): Json => ({
  ...record,
  data: { ...dataOf(record), message: { ...(dataOf(record)["message"] as Json), mood: "cheerful" } }
})
/** A field beside seq, time, type and data. */
const topLevelField = (record: Json): Json => ({ ...record, trace: "abc" })
/** A newer field on a record whose known field `step` is invalid: damage, whatever else it holds. */
const moodAndBadStep = (record: Json): Json => ({ ...moodOnMessage(record), data: { ...dataOf(moodOnMessage(record)), step: -1 } })
const notJson = (): string => "this is not JSON"

const readError = (persistence: Persistence, id: SessionId) =>
  Effect.flip(persistence.read(id)).pipe(
    Effect.filterOrDieMessage(
      (error): error is Extract<typeof error, { readonly _tag: "SessionFormatUnsupported" | "SessionCorrupt" }> =>
        error._tag === "SessionFormatUnsupported" || error._tag === "SessionCorrupt",
      "expected the read to fail SessionFormatUnsupported or SessionCorrupt"
    )
  )

for (const [name, open] of stores) {
  describe(`newer, not corrupt on ${name} (DUR-00, DOC-05)`, () => {
    it.scoped(`DUR-00 ${name}: an unknown field on a known event type reads as SessionFormatUnsupported naming the seq and the field; invalid known fields stay SessionCorrupt`, () =>
      Effect.gen(function*() {
        const { persistence, rewrite } = yield* open
        const [mood, top, damaged] = [sid("mood"), sid("top"), sid("damaged")]
        for (const id of [mood, top, damaged]) yield* store(persistence, id, closedTurn())
        yield* rewrite(mood, 3, moodOnMessage)
        yield* rewrite(top, 4, topLevelField)
        yield* rewrite(damaged, 3, moodAndBadStep)

        const newer = yield* readError(persistence, mood)
        assert.strictEqual(newer._tag, "SessionFormatUnsupported", newer.message)
        assert.include(newer.message, "line 5")
        assert.include(newer.message, "seq 3")
        assert.include(newer.message, "$.data.message.mood")
        assert.include(newer.message, "newer")

        const beside = yield* readError(persistence, top)
        assert.strictEqual(beside._tag, "SessionFormatUnsupported", beside.message)
        assert.include(beside.message, "seq 4")
        assert.include(beside.message, "$.trace")

        const corrupt = yield* readError(persistence, damaged)
        assert.strictEqual(corrupt._tag, "SessionCorrupt", corrupt.message)
        assert.strictEqual(corrupt._tag === "SessionCorrupt" ? corrupt.line : 0, 5)
      }))

    it.scoped(`DOC-05 ${name}: truncation at corruption never drops a record with an unknown field, alone or after the corrupt one`, () =>
      Effect.gen(function*() {
        const { persistence, rewrite, snapshot } = yield* open
        const truncate = persistence.truncateAtCorruption
        assert.isDefined(truncate)
        const [alone, after, plain] = [sid("alone"), sid("after"), sid("plain")]
        for (const id of [alone, after, plain]) yield* store(persistence, id, closedTurn())
        yield* rewrite(alone, 3, moodOnMessage)
        yield* rewrite(after, 2, notJson)
        yield* rewrite(after, 4, topLevelField)
        yield* rewrite(plain, 2, notJson)
        const before = yield* snapshot

        let kept = 0
        const keep = () => Effect.sync(() => void kept++)
        for (const [id, seq, field] of [[alone, 3, "$.data.message.mood"], [after, 4, "$.trace"]] as const) {
          const refused = yield* Effect.either(truncate!(id, keep))
          assert.isTrue(Either.isLeft(refused), `${id}: the truncation was refused`)
          const error = Either.isLeft(refused) ? refused.left : undefined
          assert.strictEqual(error?._tag, "SessionFormatUnsupported", String(error))
          assert.include(error?.message, `seq ${seq}`)
          assert.include(error?.message, field)
        }
        assert.strictEqual(kept, 0, "nothing was handed over to drop")
        assert.strictEqual(yield* snapshot, before, "nothing stored changed")

        // the same cut without a newer record drops what is corrupt (the control)
        const cut = yield* truncate!(plain, keep)
        assert.strictEqual(Option.getOrThrow(cut).seq, 2)
        assert.strictEqual((yield* persistence.read(plain)).events.length, 2)
      }))
  })
}

describe("newer, not corrupt through a resume (DUR-00)", () => {
  it.scoped("DUR-00 resuming a file session whose log holds an unknown field fails SessionFormatUnsupported and leaves the file as it was", () =>
    Effect.gen(function*() {
      const { directory, persistence, rewrite, snapshot } = yield* fileStore
      const id = sid("resumed")
      yield* store(persistence, id, closedTurn())
      yield* rewrite(id, 3, moodOnMessage)
      const before = yield* snapshot
      const runtime = NodeFileSessionPersistence.layerRuntime({ directory }).pipe(
        Layer.provide(Model.layerScripted(() => Model.text("never asked")))
      )
      const error = yield* Effect.flip(
        Effect.flatMap(AgentRegistry.AgentRegistry, (registry) => registry.resume({ sessionId: id })).pipe(
          Effect.provide(runtime)
        )
      )
      assert.strictEqual(error._tag, "SessionFormatUnsupported", String(error))
      assert.include(error.message, "seq 3")
      assert.include(error.message, "$.data.message.mood")
      assert.strictEqual(yield* snapshot, before)
      assert.isFalse(fs.existsSync(path.join(directory, `${id}.lock`)), "the session's lock was released")
    }))

  it.scoped("DUR-00 a file whose header holds an unknown field is SessionFormatUnsupported, a header with an invalid known field SessionCorrupt", () =>
    Effect.gen(function*() {
      const { directory, persistence } = yield* fileStore
      const [newer, damaged] = [sid("newer-header"), sid("damaged-header")]
      for (const id of [newer, damaged]) yield* store(persistence, id, closedTurn())
      const rewriteHeader = (id: SessionId, change: (header: Json) => Json) =>
        Effect.sync(() => {
          const file = path.join(directory, `${id}.jsonl`)
          const lines = fs.readFileSync(file, "utf8").split("\n")
          lines[0] = JSON.stringify(change(JSON.parse(lines[0]!) as Json))
          fs.writeFileSync(file, lines.join("\n"))
        })
      yield* rewriteHeader(newer, (h) => ({ ...h, region: "eu" }))
      yield* rewriteHeader(damaged, (h) => ({ ...h, region: "eu", createdAt: -1 }))
      const unsupported = yield* readError(persistence, newer)
      assert.strictEqual(unsupported._tag, "SessionFormatUnsupported", unsupported.message)
      assert.include(unsupported.message, "$.region")
      const corrupt = yield* readError(persistence, damaged)
      assert.strictEqual(corrupt._tag, "SessionCorrupt", corrupt.message)
    }))
})
