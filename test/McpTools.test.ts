/**
 * MCP servers as tools (MCP-01..03), against real servers started as child processes: one built on
 * `@effect/ai`'s `McpServer` (stdio and Streamable HTTP), one on the official SDK (stdio). The
 * servers report what they see to a probe (fixtures/mcpProbe.ts), so the tests wait on facts, never
 * on time.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Either, FastCheck, Layer, Option, Schedule, Schema, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as mcpTools from "../src/internal/agent/mcpTools.js"
import * as McpTools from "../src/McpTools.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as SessionEvent from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { withLogs } from "./fixtures/logs.js"
import type { Probe } from "./fixtures/mcpProbe.js"
import { effectHttp, effectStdio, makeProbe, sdkHttp, sdkStdio } from "./fixtures/mcpProbe.js"

const route = { provider: "scripted", model: "mcp" } as const
const sid = (id: string) => id as SessionId
/** Generous: each server is a Node child process that loads its packages first. */
const SLOW = { timeout: 120_000 }
/** What every layer here shares: quick reconnects, and room for a slow start on a busy machine. */
const common = { reconnect: Schedule.spaced("200 millis"), connectTimeout: "2 minutes" } as const

/** A runtime over `storage` with the scripted model and the MCP tools of `mcp`. */
const runtime = (
  storage: SessionPersistence.MemoryStorage,
  script: Parameters<typeof Model.layerScripted>[0],
  mcp: Layer.Layer<Tool.ToolRegistry | McpTools.McpServers, McpTools.InvalidMcpOptions>
) =>
  Layer.build(
    AgentRuntime.layerMemory({ storage }).pipe(
      Layer.provideMerge(Model.layerScripted(script)),
      Layer.provideMerge(mcp)
    )
  )

/** Runs one turn on a new session `id`: sends `text`, waits until idle; the session's stored events. */
const runTurn = (id: string, text: string, messageId: string) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry
    const agent = Option.getOrUndefined(yield* registry.get(id)) ??
      (yield* registry.create({ sessionId: id, options: route })).agent
    yield* agent.followup(Message.user(text, { id: messageId }))
    yield* agent.whenIdle
  })

const eventsOf = (storage: SessionPersistence.MemoryStorage, id: string) =>
  Effect.map(storage.events(sid(id)), (events) => events ?? [])

type Result = Extract<SessionEvent.CoreEvent, { readonly type: "tool/result" }>
const results = (events: ReadonlyArray<SessionEvent.SessionEvent>): ReadonlyArray<Result["data"]> =>
  events.filter(SessionEvent.is("tool/result")).map((event) => event.data)
const callNames = (events: ReadonlyArray<SessionEvent.SessionEvent>): ReadonlyArray<string> =>
  events.filter(SessionEvent.is("tool/call")).map((event) => event.data.name)
/** How the session's last turn ended. */
const endReason = (events: ReadonlyArray<SessionEvent.SessionEvent>) => events.filter(SessionEvent.is("turn/end")).at(-1)?.data.reason
const resultOf = (events: ReadonlyArray<SessionEvent.SessionEvent>, callId: string) => {
  const found = results(events).find((data) => data.message.toolCallId === callId)
  assert.isDefined(found, `a result for ${callId}`)
  return found!
}
const textOf = (data: Result["data"]) => Message.textOf(data.message.content)

/** Waits (bounded) until server `name` has status `status` and, if given, offers `tool`. */
const serverIs = (name: string, status: McpTools.ServerStatus["status"], tool?: string) =>
  Effect.flatMap(McpTools.McpServers, (servers) =>
    servers.changes.pipe(
      Stream.filter((all) =>
        all.some((s) => s.name === name && s.status === status && (tool === undefined || s.tools.includes(tool)))
      ),
      Stream.runHead,
      Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error(`server ${name} never became ${status}`) })
    ))

const calls = (probe: Probe) => Effect.map(probe.lines, (lines) => lines.filter((line) => line.startsWith("call ")))

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-mcp-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

describe("McpTools against real servers", () => {
  it.live(
    "MCP-01 MCP-03 one turn calls tools of an @effect/ai server (stdio and HTTP) and an official SDK server (stdio and HTTP), logged like native tools",
    () =>
      Effect.gen(function*() {
        const probe = yield* makeProbe
        const [http, sdkWeb] = yield* Effect.all([effectHttp(probe), sdkHttp(probe)], { concurrency: 2 })
        const storage = yield* SessionPersistence.makeMemoryStorage
        const script = [
          [
            Model.toolCall("c1", "effect__echo", "{\"text\":\"hi\"}"),
            Model.toolCall("c2", "web__echo", "{\"text\":\"over http\"}"),
            Model.toolCall("c3", "sdk__add", "{\"a\":2,\"b\":3}"),
            Model.toolCall("c4", "effect__picture", "{}"),
            Model.toolCall("c5", "effect__fail", "{}"),
            Model.toolCall("c6", "effect__weather", "{\"city\":\"Oslo\"}"),
            Model.toolCall("c7", "sdk__confirm", "{}"),
            Model.toolCall("c8", "sdk__add", "{\"a\":\"x\"}"),
            Model.toolCall("c9", "sdk__add", "[1, 2]"),
            Model.toolCall("c10", "sdkweb__add", "{\"a\":20,\"b\":22}")
          ],
          Model.text("done")
        ]
        const mcp = McpTools.layer({
          servers: {
            effect: effectStdio(probe),
            web: { url: http.url },
            sdk: sdkStdio(probe),
            sdkweb: { url: sdkWeb.url, headers: { "X-Test": "interop" } }
          },
          ...common
        })
        const first = yield* Effect.scoped(Effect.gen(function*() {
          const context = yield* runtime(storage, script, mcp)
          yield* runTurn("interop", "use the tools", "m1").pipe(Effect.provide(context))
          return yield* Context.get(context, Model.ScriptedModel).awaitRequest(1)
        }))
        // the layer's release ended the HTTP session the SDK server opened
        yield* probe.waitFor((line) => line === "session ended")
        const events = yield* eventsOf(storage, "interop")

        // logged like native tools: each call's tool/call, then its result, the turn completed
        assert.deepStrictEqual(callNames(events), [
          "effect__echo",
          "web__echo",
          "sdk__add",
          "effect__picture",
          "effect__fail",
          "effect__weather",
          "sdk__confirm",
          "sdk__add",
          "sdk__add",
          "sdkweb__add"
        ])
        assert.deepStrictEqual(endReason(events), { kind: "completed" })
        assert.strictEqual(textOf(resultOf(events, "c1")), "echo: hi")
        assert.strictEqual(textOf(resultOf(events, "c2")), "echo: over http")
        assert.strictEqual(textOf(resultOf(events, "c3")), "5")
        assert.strictEqual(textOf(resultOf(events, "c10")), "42")
        assert.include(yield* probe.lines, "header interop")
        // text, image and resource contents map to result parts
        const picture = resultOf(events, "c4").message.content
        assert.deepStrictEqual(picture.map((part) => part.type), ["text", "image", "text", "image"])
        assert.deepInclude(picture[1], { type: "image", mediaType: "image/png" })
        assert.strictEqual(picture[2]?.type === "text" ? picture[2].text : "", "Resource file:///notes.txt (text/plain):\nthe notes")
        // isError becomes an error result
        assert.isTrue(resultOf(events, "c5").message.isError)
        assert.strictEqual(textOf(resultOf(events, "c5")), "it broke")
        // structuredContent is kept
        assert.include(textOf(resultOf(events, "c6")), "{\"city\":\"Oslo\",\"celsius\":21}")
        // elicitation is declined (Tool.ask does not exist yet)
        assert.strictEqual(textOf(resultOf(events, "c7")), "elicitation: decline")
        // arguments are validated by the server: its error result reaches the model
        assert.isTrue(resultOf(events, "c8").message.isError)
        // arguments that are not a JSON object never reach a server
        assert.isTrue(resultOf(events, "c9").message.isError)
        assert.include(textOf(resultOf(events, "c9")), "must be a JSON object")
        assert.strictEqual((yield* calls(probe)).filter((line) => line === "call add").length, 3)
        // the servers saw the calls
        assert.includeMembers(yield* calls(probe), ["call echo", "call add", "call picture", "call confirm"])

        // the model got each server's JSON Schema as is
        const add = first.tools.find((tool) => tool.name === "sdk__add")
        assert.deepStrictEqual(add?.jsonSchema, {
          type: "object",
          properties: { a: { type: "number" }, b: { type: "number" } },
          required: ["a", "b"],
          additionalProperties: false
        })
      }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)),
    SLOW
  )

  it.live("MCP-03 resume calls no MCP server: a resumed session's history replays, an interrupted call is repaired", () =>
    Effect.gen(function*() {
      const probe = yield* makeProbe
      const storage = yield* SessionPersistence.makeMemoryStorage
      const mcp = () => McpTools.layer({ servers: { sdk: sdkStdio(probe) }, ...common })
      const script = {
        done: [[Model.toolCall("c1", "sdk__add", "{\"a\":1,\"b\":1}")], Model.text("two")],
        crashed: [[Model.toolCall("c2", "sdk__add", "{\"a\":2,\"b\":2}")], Model.text("four")]
      }
      yield* Effect.scoped(Effect.flatMap(runtime(storage, script, mcp()), (context) =>
        Effect.zipRight(runTurn("done", "add", "m1"), runTurn("crashed", "add", "m1")).pipe(Effect.provide(context))))
      assert.deepStrictEqual(yield* calls(probe), ["call add", "call add"])
      const done = yield* eventsOf(storage, "done")
      // "crashed" lost everything after its call's tool/call: dispatched, no result (a crash mid-call)
      const crashed = yield* eventsOf(storage, "crashed")
      yield* storage.truncate(sid("crashed"), crashed.findIndex((event) => event.type === "tool/call") + 1)

      // both resumed beside the same server, connected: nothing reaches it
      yield* Effect.scoped(Effect.gen(function*() {
        const context = yield* runtime(storage, [], mcp())
        yield* Effect.gen(function*() {
          yield* serverIs("sdk", "connected")
          const registry = yield* AgentRegistry
          for (const id of ["done", "crashed"]) {
            const handle = yield* registry.resume({ sessionId: id })
            yield* handle.agent.wake
            yield* handle.agent.whenIdle
          }
          const replayed = yield* Effect.flatMap(registry.get("done"), (agent) => Option.getOrThrow(agent).session.messages)
          assert.deepStrictEqual(replayed.map((m) => m.role), ["user", "assistant", "tool", "assistant"])
        }).pipe(Effect.provide(context))
      }))
      assert.deepStrictEqual(yield* eventsOf(storage, "done"), done, "the finished session's resume wrote nothing")
      assert.strictEqual(resultOf(yield* eventsOf(storage, "crashed"), "c2").error?.code, "TOOL_OUTCOME_UNKNOWN")
      assert.deepStrictEqual(yield* calls(probe), ["call add", "call add"], "no server was called again")
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)), SLOW)

  it.live(
    "MCP-02 a server killed mid-call: TOOL_UNAVAILABLE and the turn goes on; a call during the outage too; after the reconnect the next call works",
    () =>
      Effect.gen(function*() {
        const probe = yield* makeProbe
        const ready = path.join(yield* tempDir, "ready")
        fs.writeFileSync(ready, "")
        const storage = yield* SessionPersistence.makeMemoryStorage
        const script = [
          [Model.toolCall("c1", "sdk__slow", "{\"id\":\"k\"}")],
          [Model.toolCall("c2", "sdk__add", "{\"a\":1,\"b\":2}")],
          Model.text("carried on"),
          [Model.toolCall("c3", "sdk__add", "{\"a\":2,\"b\":2}")],
          Model.text("four")
        ]
        const mcp = McpTools.layer({
          servers: { sdk: sdkStdio(probe, { MCP_REQUIRE_FILE: ready }) },
          ...common
        })
        const context = yield* runtime(storage, script, mcp)
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const { agent } = yield* registry.create({ sessionId: "killed", options: route })
          yield* agent.followup(Message.user("go", { id: "m1" }))
          const started = yield* probe.waitFor((line) => line.startsWith("started slow k "))
          // the server cannot come back until the file is back: the next call falls in the outage
          fs.rmSync(ready)
          process.kill(Number(started.split(" ")[3]), "SIGKILL")
          yield* agent.whenIdle
          const events = yield* eventsOf(storage, "killed")
          assert.strictEqual(resultOf(events, "c1").error?.code, "TOOL_UNAVAILABLE")
          assert.strictEqual(resultOf(events, "c2").error?.code, "TOOL_UNAVAILABLE")
          assert.include(textOf(resultOf(events, "c2")), "MCP server \"sdk\"")
          assert.deepStrictEqual(endReason(events), { kind: "completed" })

          yield* serverIs("sdk", "retrying")
          fs.writeFileSync(ready, "")
          yield* serverIs("sdk", "connected")
          yield* agent.followup(Message.user("again", { id: "m2" }))
          yield* agent.whenIdle
          assert.strictEqual(textOf(resultOf(yield* eventsOf(storage, "killed"), "c3")), "4")
        }).pipe(Effect.provide(context))
      }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)),
    SLOW
  )

  it.live("MCP-02 notifications/tools/list_changed refreshes the tools for the next step (both servers)", () =>
    Effect.gen(function*() {
      const probe = yield* makeProbe
      const storage = yield* SessionPersistence.makeMemoryStorage
      const script = [
        [Model.toolCall("c1", "effect__grow", "{}"), Model.toolCall("c2", "sdk__grow", "{}")],
        Model.text("grown"),
        [Model.toolCall("c3", "effect__extra", "{}"), Model.toolCall("c4", "sdk__extra", "{}")],
        Model.text("done")
      ]
      const mcp = McpTools.layer({
        servers: { effect: effectStdio(probe), sdk: sdkStdio(probe) },
        ...common
      })
      const context = yield* runtime(storage, script, mcp)
      yield* Effect.gen(function*() {
        yield* runTurn("grow", "grow", "m1")
        const grown = yield* eventsOf(storage, "grow")
        assert.deepStrictEqual([textOf(resultOf(grown, "c1")), textOf(resultOf(grown, "c2"))], ["grown", "grown"])
        yield* serverIs("effect", "connected", "effect__extra")
        yield* serverIs("sdk", "connected", "sdk__extra")
        yield* runTurn("grow", "use them", "m2")
        const events = yield* eventsOf(storage, "grow")
        assert.strictEqual(textOf(resultOf(events, "c3")), "extra ran")
        assert.strictEqual(textOf(resultOf(events, "c4")), "extra ran")
        const scripted = yield* Model.ScriptedModel
        const [before, after] = [yield* scripted.awaitRequest(1), yield* scripted.awaitRequest(3)]
        assert.notInclude(before.tools.map((tool) => tool.name), "effect__extra")
        assert.includeMembers(after.tools.map((tool) => tool.name), ["effect__extra", "sdk__extra"])
      }).pipe(Effect.provide(context))
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)), SLOW)

  it.live(
    "MCP-02 a cancelled call sends notifications/cancelled to the server, and so does a call past its timeout (TOOL_TIMEOUT)",
    () =>
      Effect.gen(function*() {
        const probe = yield* makeProbe
        const storage = yield* SessionPersistence.makeMemoryStorage
        const script = [
          [Model.toolCall("c1", "effect__slow", "{\"id\":\"e\"}")],
          [Model.toolCall("c2", "sdk__slow", "{\"id\":\"s\"}")],
          Model.text("timed out")
        ]
        const mcp = McpTools.layer({
          servers: { effect: effectStdio(probe), sdk: { ...sdkStdio(probe), timeout: "500 millis" } },
          ...common
        })
        const context = yield* runtime(storage, script, mcp)
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const { agent } = yield* registry.create({ sessionId: "cancel", options: route })
          yield* agent.followup(Message.user("slow", { id: "m1" }))
          yield* probe.waitFor((line) => line.startsWith("started slow e "))
          yield* agent.cancel({ kind: "user" })
          yield* agent.whenIdle
          yield* probe.waitFor((line) => line === "cancelled slow e")
          assert.strictEqual(endReason(yield* eventsOf(storage, "cancel"))?.kind, "aborted")

          yield* agent.followup(Message.user("slow again", { id: "m2" }))
          yield* agent.whenIdle
          assert.strictEqual(resultOf(yield* eventsOf(storage, "cancel"), "c2").error?.code, "TOOL_TIMEOUT")
          yield* probe.waitFor((line) => line === "cancelled slow s")
        }).pipe(Effect.provide(context))
      }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)),
    SLOW
  )

  it.live(
    "MCP-01 MCP-02 names are provider-safe and the same in every run; a native tool wins a collision (warning); deny; release ends the child",
    () =>
      Effect.gen(function*() {
        const probe = yield* makeProbe
        const native = Tool.make({
          name: "sdk__add",
          description: "the native add",
          parameters: Schema.Struct({}),
          run: () => Effect.succeed(Tool.text("native"))
        })
        const mcp = McpTools.layer({
          servers: { sdk: { ...sdkStdio(probe), deny: ["confirm", "slow"] } },
          ...common
        }).pipe(Layer.provide(Tool.layerGlobalWith([native])))
        const [names, logs] = yield* withLogs(Effect.scoped(Effect.gen(function*() {
          const context = yield* Layer.build(mcp)
          const listed = yield* Context.get(context, Tool.ToolRegistry).list
          assert.strictEqual(listed[0]?.description, "the native add", "the native tool keeps its name")
          const status = yield* Context.get(context, McpTools.McpServers).status
          assert.deepStrictEqual(status.map((s) => [s.name, s.status]), [["sdk", "connected"]])
          return listed.map((tool) => tool.name)
        })))
        assert.deepStrictEqual(names, [
          "sdk__add",
          "sdk__grow",
          "sdk__get_weather_0uxizll",
          "sdk__na_ve_tool_0t044g2",
          `sdk__${"t".repeat(51)}_05q1689`
        ])
        for (const name of names) assert.match(name, /^[A-Za-z0-9_-]{1,64}$/)
        assert.isTrue(
          logs.some((line) => line.startsWith("WARN") && line.includes("\"sdk__add\"") && line.includes("native tool")),
          logs.join("\n")
        )
        // the layer's release ended the stdio child
        const pids = (yield* probe.lines).filter((line) => line.startsWith("up ")).map((line) => Number(line.slice(3)))
        assert.strictEqual(pids.length, 1)
        for (const pid of pids) assert.throws(() => process.kill(pid, 0))
      }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)),
    SLOW
  )

  it.live("MCP-01 MCP-02 a server down at start is a warning, and its tools (those allowed) appear when it connects", () =>
    Effect.gen(function*() {
      const probe = yield* makeProbe
      const ready = path.join(yield* tempDir, "ready")
      const mcp = McpTools.layer({
        servers: { late: { ...sdkStdio(probe, { MCP_REQUIRE_FILE: ready }), allow: ["add", "grow"] } },
        ...common
      })
      const [, logs] = yield* withLogs(Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(mcp)
        const registry = Context.get(context, Tool.ToolRegistry)
        const [late] = yield* Context.get(context, McpTools.McpServers).status
        assert.strictEqual(late?.status, "retrying")
        assert.deepStrictEqual(yield* registry.list, [])
        fs.writeFileSync(ready, "")
        yield* serverIs("late", "connected").pipe(Effect.provide(context))
        assert.deepStrictEqual((yield* registry.list).map((tool) => tool.name), ["late__add", "late__grow"])
      })))
      assert.isTrue(logs.some((line) => line.startsWith("WARN") && line.includes("down at start")), logs.join("\n"))
    }).pipe(Effect.scoped, Effect.provide(NodeContext.layer)), SLOW)
})

describe("McpTools without servers", () => {
  it("MCP-01 a provider-safe name is kept; any other is cleaned, cut to 64 characters and hashed", () => {
    assert.strictEqual(mcpTools.modelToolName("", "files", "read_file"), "files__read_file")
    assert.strictEqual(mcpTools.modelToolName("mcp__", "files", "read"), "mcp__files__read")
    const dotted = mcpTools.modelToolName("", "sdk", "get.weather")
    assert.match(dotted, /^sdk__get_weather_[0-9a-z]{7}$/)
    // two names that clean up alike stay apart
    assert.notStrictEqual(dotted, mcpTools.modelToolName("", "sdk", "get weather"))
    assert.lengthOf(mcpTools.modelToolName("", "s", "x".repeat(100)), 64)
  })

  it.prop(
    "MCP-01 every name is provider-safe and a pure function of prefix, server and tool",
    { prefix: FastCheck.string({ maxLength: 8 }), server: FastCheck.string({ minLength: 1, maxLength: 40 }), tool: FastCheck.string({ maxLength: 90 }) },
    ({ prefix, server, tool }) => {
      const name = mcpTools.modelToolName(prefix, server, tool)
      assert.match(name, /^[A-Za-z0-9_-]{1,64}$/)
      assert.strictEqual(mcpTools.modelToolName(prefix, server, tool), name)
    }
  )

  it("MCP-01 text, image and resource contents map to result parts; isError; structuredContent is kept once", () => {
    const result = mcpTools.toToolResult({
      content: [
        { type: "text", text: "hello" },
        { type: "image", data: "AAAA", mimeType: "image/png" },
        { type: "audio", data: "AAAA", mimeType: "audio/wav" },
        { type: "resource", resource: { uri: "file:///a.txt", text: "A" } },
        { type: "resource", resource: { uri: "file:///b.png", mimeType: "image/png", blob: "BBBB" } },
        { type: "resource", resource: { uri: "file:///c.bin", mimeType: "application/zip", blob: "CCCC" } },
        { type: "resource_link", name: "docs", uri: "https://example.test/docs", description: "the docs" }
      ],
      structuredContent: { n: 1 },
      isError: true
    })
    assert.isTrue(result.isError)
    assert.deepStrictEqual(result.content, [
      { type: "text", text: "hello" },
      { type: "image", mediaType: "image/png", data: "AAAA" },
      { type: "text", text: "[audio (audio/wav) left out: tool results carry text and images only]" },
      { type: "text", text: "Resource file:///a.txt:\nA" },
      { type: "image", mediaType: "image/png", data: "BBBB" },
      { type: "text", text: "[resource file:///c.bin (application/zip) left out: its content is binary]" },
      { type: "text", text: "Resource link docs <https://example.test/docs>: the docs" },
      { type: "text", text: "{\"n\":1}" }
    ])
    const once = mcpTools.toToolResult({ content: [{ type: "text", text: "{\"n\":1}" }], structuredContent: { n: 1 } })
    assert.deepStrictEqual(once, { content: [{ type: "text", text: "{\"n\":1}" }], isError: false })
  })

  it("MCP-01 a native tool wins a name; between servers the first configured does", () => {
    const tool = (name: string, description = name): Tool.Any => ({
      name,
      description,
      parameters: Schema.Struct({}),
      mode: "parallel",
      run: () => Effect.succeed(Tool.text(name))
    })
    const merged = mcpTools.mergeTools([tool("a__x", "native")], [
      { server: "a", tools: [tool("a__x"), tool("a__y")] },
      { server: "b", tools: [tool("a__y", "from b"), tool("b__z")] }
    ])
    assert.deepStrictEqual(merged.tools.map((t) => [t.name, t.description]), [
      ["a__x", "native"],
      ["a__y", "a__y"],
      ["b__z", "b__z"]
    ])
    assert.deepStrictEqual(merged.collisions, [
      { name: "a__x", server: "a", winner: undefined },
      { name: "a__y", server: "b", winner: "a" }
    ])
  })

  it("MCP-01 a tool with its own JSON Schema: the model sees it as is, and an empty Struct passes every argument on", () => {
    const jsonSchema = { type: "object", properties: { q: { type: "string" } }, required: ["q"] }
    const tool: Tool.Any = {
      name: "s__search",
      description: "search",
      parameters: Schema.Struct({}),
      jsonSchema,
      mode: "parallel",
      run: () => Effect.succeed(Tool.text(""))
    }
    assert.strictEqual(Tool.toSchema(tool).jsonSchema, jsonSchema)
    assert.deepStrictEqual(Tool.decodeArguments(tool, "{\"q\":\"x\",\"n\":2}"), Either.right({ q: "x", n: 2 }))
  })

  it.scoped("MCP-01 a registry keeps a tool's own JSON Schema", () =>
    Effect.gen(function*() {
      const jsonSchema = { type: "object", properties: { q: { type: "string" } } }
      const tool = { ...Tool.make({ name: "own", description: "", parameters: Schema.Struct({}), run: () => Effect.succeed(Tool.text("")) }), jsonSchema }
      const context = yield* Layer.build(Tool.layerGlobalWith([tool]))
      const [listed] = yield* Context.get(context, Tool.ToolRegistry).list
      assert.strictEqual(listed === undefined ? undefined : Tool.toSchema(listed).jsonSchema, jsonSchema)
    }))

  it.scoped("MCP-01 options it cannot use fail InvalidMcpOptions, and nothing starts", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Layer.build(McpTools.layer({
        servers: { bad: { command: "" }, web: { url: "ftp://example.test" } },
        timeout: -1
      })))
      assert.strictEqual(error._tag, "InvalidMcpOptions")
      assert.include(error.message, "servers.bad")
      assert.include(error.message, "timeout")
    }))
})
