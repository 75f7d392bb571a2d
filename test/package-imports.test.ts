/**
 * PKG-01: what each entry point of the package makes a consumer install. The index reaches only
 * `effect` and `@effect/platform` (its required peers; no Node builtins, so it loads in any
 * runtime); everything else is behind a subpath whose needs the README's Installation table lists.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck } from "effect"
import { Buffer } from "node:buffer"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as recordSize from "../src/internal/log/recordSize.js"
import { disallowed, reachablePackages, specifiersOf } from "./fixtures/importGraph.js"

const src = fileURLToPath(new URL("../src", import.meta.url))
const fromSources = (entry: string) =>
  reachablePackages(path.join(src, entry), (resolved) => resolved.replace(/\.js$/, ".ts"), src)

const isCore = (pkg: string) => pkg === "effect" || pkg === "@effect/platform"
const isNodeBuiltin = (pkg: string) => pkg.startsWith("node:")

describe("package imports", () => {
  it.effect("PKG-01 the index reaches only effect and @effect/platform (no Node builtins, no optional peer)", () =>
    Effect.sync(() => {
      const reached = fromSources("index.ts")
      assert.deepStrictEqual(disallowed(reached, isCore), [])
      // The walk saw the modules behind the index, not just its own lines.
      assert.isTrue(reached.has("effect"))
    }))

  it.effect("PKG-01 each subpath reaches only what the README's Installation table says it needs", () =>
    Effect.sync(() => {
      const needs: Record<string, (pkg: string) => boolean> = {
        "FileSessionPersistence.ts": (pkg) => isCore(pkg) || isNodeBuiltin(pkg),
        "NodeFileSessionPersistence.ts": (pkg) => isCore(pkg) || isNodeBuiltin(pkg) || pkg === "@effect/platform-node",
        "SqlSessionPersistence.ts": (pkg) => isCore(pkg) || isNodeBuiltin(pkg) || pkg === "@effect/sql",
        // MOD-01: the real-models adapter needs @effect/ai (optional peer) and nothing Node-specific
        "LanguageModelAdapter.ts": (pkg) => isCore(pkg) || pkg === "@effect/ai",
        // CLU-01: the cluster module needs @effect/cluster and @effect/rpc (optional peers), nothing Node-specific
        "Cluster.ts": (pkg) => isCore(pkg) || pkg === "@effect/cluster" || pkg === "@effect/rpc",
        // HTTP-00/01: the gateway and the HTTP API run on any platform's HttpServer
        "SessionGateway.ts": isCore,
        "HttpApi.ts": isCore,
        // MCP-01: MCP servers as tools need the official SDK's client (optional peer); the SDK brings
        // what its transports need, the module itself imports no Node builtin
        "McpTools.ts": (pkg) => isCore(pkg) || pkg === "@modelcontextprotocol/sdk"
      }
      for (const [entry, allowed] of Object.entries(needs)) {
        assert.deepStrictEqual(disallowed(fromSources(entry), allowed), [], entry)
      }
    }))

  it.effect("PKG-01 MOD-01 the LanguageModelAdapter subpath reaches @effect/ai; the index never does", () =>
    Effect.sync(() => {
      assert.isTrue(fromSources("LanguageModelAdapter.ts").has("@effect/ai"))
      assert.isFalse(fromSources("index.ts").has("@effect/ai"))
      assert.isFalse(fromSources("Model.ts").has("@effect/ai"))
    }))

  it.effect("PKG-01 MCP-01 the McpTools subpath reaches @modelcontextprotocol/sdk; the index never does", () =>
    Effect.sync(() => {
      assert.isTrue(fromSources("McpTools.ts").has("@modelcontextprotocol/sdk/client/index.js"))
      assert.isFalse([...fromSources("index.ts").keys()].some((specifier) => specifier.startsWith("@modelcontextprotocol/")))
      assert.isFalse([...fromSources("Tool.ts").keys()].some((specifier) => specifier.startsWith("@modelcontextprotocol/")))
    }))

  it.effect("PKG-01 the walk sees every import form (type-only, re-exports, import types, dynamic imports)", () =>
    Effect.sync(() => {
      const text = [
        `/// <reference types="reference-types" />`,
        `import type { A } from "type-only"`,
        `export * as B from "re-export"`,
        `export { C } from "named-re-export"`,
        `import D = require("import-equals")`,
        `type E = import("import-type").E`,
        `const f = () => import("dynamic")`
      ].join("\n")
      assert.sameMembers(specifiersOf("probe.ts", text), [
        "type-only",
        "re-export",
        "named-re-export",
        "import-equals",
        "import-type",
        "dynamic",
        "reference-types"
      ])
    }))

  it.effect.prop(
    "PKG-01 DUR-05 sizes counted without node:buffer are the UTF-8 bytes the file store writes (lone surrogates too)",
    { records: FastCheck.array(FastCheck.string({ unit: "binary", maxLength: 40 }), { minLength: 1, maxLength: 8 }) },
    ({ records }) =>
      Effect.sync(() => {
        const written = Buffer.from(records.map((record) => `${record}\n`).join(""), "utf8")
        for (const record of records) assert.strictEqual(recordSize.lineBytes(record), Buffer.byteLength(record) + 1)
        const bytes = recordSize.recordsBytes(records)
        assert.strictEqual(bytes, written.length)
        assert.deepStrictEqual(Buffer.from(recordSize.linesOf(records, bytes)), written)
      }),
    { fastCheck: { numRuns: 200 } }
  )

  it.effect("PKG-01 DUR-05 a surrogate pair is 4 bytes, a lone surrogate 3 (written as U+FFFD)", () =>
    Effect.sync(() => {
      assert.strictEqual(recordSize.utf8Length("a\u00e9\u4e2d\u{1f600}"), 1 + 2 + 3 + 4)
      assert.strictEqual(recordSize.utf8Length("\ud83d"), 3)
      assert.strictEqual(recordSize.utf8Length("\ude00\ud83d"), 6)
      assert.strictEqual(recordSize.utf8Length("\ud83dx"), 4)
    }))
})
