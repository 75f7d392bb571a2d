/**
 * CORE-08: options and definitions are decoded by Schemas, and a refusal is the typed error of
 * its entry point with a message naming each bad field and its problem (never Schema's internal
 * rendering of a transformation).
 */
import { NodeContext } from "@effect/platform-node"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as AgentError from "../src/AgentError.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import type { AgentOptions } from "../src/Agent.js"
import * as FileSessionPersistence from "../src/FileSessionPersistence.js"
import { decodeAgentOptions } from "../src/internal/options.js"
import * as SessionError from "../src/SessionError.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { makeRuntime } from "./fixtures/runtime.js"

/** What no message may show: Schema's rendering of a transformation or an anonymous struct. */
const unreadable = /Encoded side|Type side|<->|\{ readonly /

const reasonOf = (options: unknown): string => {
  const decoded = decodeAgentOptions(options as AgentOptions)
  assert.strictEqual(decoded._tag, "Left", JSON.stringify(options))
  if (decoded._tag === "Right") return ""
  assert.instanceOf(decoded.left, AgentError.InvalidAgentOptions)
  assert.notMatch(decoded.left.message, unreadable)
  return decoded.left.reason
}

const tempDirectory = () => fs.mkdtempSync(nodePath.join(os.tmpdir(), "effect-agent-options-"))

describe("CORE-08 options are Schemas", () => {
  it("CORE-08 InvalidAgentOptions names the field and the problem for each bad input", () => {
    assert.strictEqual(reasonOf({ maxTokens: 0 }), "maxTokens must be a positive integer, got 0")
    assert.strictEqual(reasonOf({ maxTokens: 1.5 }), "maxTokens must be a positive integer, got 1.5")
    assert.strictEqual(reasonOf({ maxTokens: 2 ** 53 }), `maxTokens must be a positive integer, got ${2 ** 53}`)
    assert.strictEqual(reasonOf({ maxTokens: Number.NaN }), "maxTokens must be a positive integer, got NaN")
    assert.strictEqual(reasonOf({ maxStepsPerTurn: "3" }), `maxStepsPerTurn must be a positive integer, got "3"`)
    assert.strictEqual(reasonOf({ maxRequestRetries: -1 }), "maxRequestRetries must be an integer >= 0, got -1")
    // every bad field, in the order of the options' definition
    assert.strictEqual(
      reasonOf({ system: 7, provider: 3, maxParallelToolCalls: 0 }),
      "provider must be a string, got 3; system must be a string, got 7; " +
        "maxParallelToolCalls must be a positive integer, got 0"
    )
    assert.strictEqual(reasonOf("fast"), `options must be an object, got "fast"`)
    assert.strictEqual(reasonOf(null), "options must be an object, got null")
  })

  it("CORE-08 valid options are the caller's own object; undefined fields and unknown keys are accepted", () => {
    const options = { provider: "p", model: "m", maxTokens: 1, system: undefined, maxRequestRetries: 0 }
    const decoded = decodeAgentOptions(options)
    assert.strictEqual(decoded._tag, "Right")
    if (decoded._tag === "Right") assert.strictEqual(decoded.right, options)
    const none = decodeAgentOptions(undefined)
    assert.isTrue(none._tag === "Right" && Object.keys(none.right).length === 0)
    assert.strictEqual(decodeAgentOptions({ provider: "p", future: 1 } as AgentOptions)._tag, "Right")
  })

  it.scoped("CORE-08 PUB-10 create and resume fail InvalidAgentOptions with the readable reason; nothing is stored", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const created = yield* Effect.flip(
          registry.create({ sessionId: "a", options: { provider: "p", model: "m", maxStepsPerTurn: 0 } })
        )
        assert.instanceOf(created, AgentError.InvalidAgentOptions)
        assert.strictEqual(created.message, "invalid agent options: maxStepsPerTurn must be a positive integer, got 0")
        const resumed = yield* Effect.flip(registry.resume({ sessionId: "a", options: { maxTokens: -2 } }))
        assert.instanceOf(resumed, AgentError.InvalidAgentOptions)
        assert.strictEqual(resumed.reason, "maxTokens must be a positive integer, got -2")
        assert.isFalse(yield* Effect.flatMap(SessionPersistence.SessionPersistence, (p) => p.exists("a" as never)))
      }).pipe(Effect.provide(rt.context))
    }))

  it.effect("CORE-08 FileSessionPersistence refuses bad options with PersistenceError naming each field, creating nothing", () =>
    Effect.gen(function*() {
      const parent = tempDirectory()
      const directory = nodePath.join(parent, "sessions")
      const error = yield* Effect.flip(Layer.build(
        FileSessionPersistence.layer({
          directory,
          readChunkBytes: 0,
          maxEventBytes: 1.5,
          durability: "sometimes" as never
        }).pipe(Layer.provide(NodeContext.layer))
      ).pipe(Effect.scoped))
      assert.instanceOf(error, SessionError.PersistenceError)
      assert.strictEqual(
        error.reason,
        `invalid FileSessionPersistence options: durability must be "fsync" or "buffered", got "sometimes"; ` +
          "readChunkBytes must be a positive integer number of bytes, got 0; " +
          "maxEventBytes must be a positive integer number of bytes, got 1.5; fix them where the layer is built"
      )
      assert.isFalse(fs.existsSync(directory))
      const noDirectory = yield* Effect.flip(Layer.build(
        FileSessionPersistence.layer({ directory: 42 } as never).pipe(Layer.provide(NodeContext.layer))
      ).pipe(Effect.scoped))
      assert.match(noDirectory.reason, /directory must be a directory path, got 42/)
      fs.rmSync(parent, { recursive: true, force: true })
    }))

  it.effect("CORE-08 SqlSessionPersistence refuses a lease ttl under 3 ms or not a duration, and bad limits", () =>
    Effect.gen(function*() {
      const refused = (options: SqlSessionPersistence.Options) =>
        Effect.flip(Layer.build(
          SqlSessionPersistence.layer(options).pipe(Layer.provide(SqliteClient.layer({ filename: ":memory:" })))
        ).pipe(Effect.scoped)).pipe(
          Effect.flatMap((error) => error._tag === "PersistenceError" ? Effect.succeed(error) : Effect.die(error))
        )
      const ttl = yield* refused({ leaseTtl: "1 millis" })
      assert.instanceOf(ttl, SessionError.PersistenceError)
      assert.strictEqual(
        ttl.reason,
        `invalid SqlSessionPersistence options: leaseTtl must be a finite duration of at least 3 ms ` +
          `(e.g. "30 seconds"), got "1 millis"; fix them where the layer is built`
      )
      const notDuration = yield* refused({ leaseTtl: "soon" as never, maxSessionBytes: -1 })
      assert.match(notDuration.reason, /leaseTtl must be a finite duration of at least 3 ms .*got "soon"/)
      assert.match(notDuration.reason, /maxSessionBytes must be a positive integer number of bytes, got -1/)
      assert.notMatch(notDuration.reason, unreadable)
      const infinite = yield* refused({ leaseTtl: Infinity })
      assert.match(infinite.reason, /leaseTtl must be a finite duration/)
    }))

  it.effect("CORE-08 the memory layer refuses bad limits as a defect naming the field (it has no error channel)", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistence.makeMemoryStorage
      const exit = yield* Effect.exit(
        Layer.build(SessionPersistence.layerMemory(storage, { maxEventBytes: 0 })).pipe(Effect.scoped)
      )
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const defect = Cause.squash(exit.cause)
        assert.instanceOf(defect, SessionError.PersistenceError)
        assert.match(
          (defect as SessionError.PersistenceError).reason,
          /^invalid SessionPersistence.layerMemory options: maxEventBytes must be a positive integer number of bytes, got 0/
        )
      }
    }))

  it("CORE-08 Tool.make refuses a bad definition with a TypeError naming the tool and each field", () => {
    const base = { name: "t", description: "d", parameters: Schema.Struct({}), run: () => Effect.never }
    assert.throws(
      () => Tool.make({ ...base, mode: "serial" as never, timeout: 0 }),
      TypeError,
      `Tool.make: the definition of tool "t" is invalid: mode must be "parallel" or "exclusive", got "serial"; ` +
        `timeout must be a positive duration (e.g. "30 seconds" or a number of milliseconds), got 0`
    )
    assert.throws(
      () => Tool.make({ ...base, parameters: Schema.String as never }),
      TypeError,
      "parameters must be a Schema.Struct of the tool's parameters"
    )
    assert.throws(() => Tool.make({ ...base, run: "go" as never }), TypeError, `run must be a function returning an Effect, got "go"`)
    const tool = Tool.make({ ...base, mode: "exclusive", timeout: "3 seconds" })
    assert.strictEqual(tool.mode, "exclusive")
    assert.strictEqual(tool.parameters, base.parameters)
    assert.strictEqual(tool.run, base.run)
  })
})
