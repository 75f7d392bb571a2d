import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Either, Exit, Fiber, Ref, Schema, Scope } from "effect"
import type { Agent } from "../src/Agent.js"
import { ModelError } from "../src/AgentError.js"
import * as hooks from "../src/internal/agent/hooks.js"
import * as tools from "../src/internal/agent/tools.js"
import * as Message from "../src/Message.js"
import * as Tool from "../src/Tool.js"

// Hooks and tools only pass the agent through; nothing here reads it.
const agent = {} as Agent
const info: Tool.StepInfo = { agent, turn: 1, step: 1 }
const toolContext: Tool.ToolContext = { agent, turn: 1, step: 1, callId: "c1" }

const read = Tool.make({
  name: "read",
  description: "Reads a file",
  parameters: Schema.Struct({
    path: Schema.String.annotations({ description: "the file" }),
    limit: Schema.optional(Schema.Number)
  }),
  run: ({ path }) => Effect.succeed(Tool.text(`read ${path}`))
})

const named = (name: string, reply = name) =>
  Tool.make({
    name,
    description: `the ${name} tool`,
    parameters: Schema.Struct({}),
    run: () => Effect.succeed(Tool.text(reply))
  })

const runText = (tool: Tool.Any) =>
  Effect.map(tool.run({}, toolContext), (result) => Message.textOf(result.content))

const inactiveFlag = (active: boolean) => Ref.make(active)

describe("Tool arguments and schema", () => {
  it("TOOL-01 valid arguments decode with the tool's Schema", () => {
    const args = Tool.decodeArguments(read, "{\"path\":\"a.txt\",\"limit\":3,\"extra\":true}")
    assert.deepStrictEqual(args, Either.right({ path: "a.txt", limit: 3 }))
  })

  it("TOOL-01 empty argument text counts as {} for a tool without parameters", () => {
    assert.deepStrictEqual(Tool.decodeArguments(named("noop"), ""), Either.right({}))
    assert.isTrue(Either.isLeft(Tool.decodeArguments(read, "")), "read requires a path")
  })

  it("TOOL-01 arguments that are not JSON give an error text for the model, not a crash", () => {
    const args = Tool.decodeArguments(read, "not json")
    assert.isTrue(Either.isLeft(args))
    if (Either.isLeft(args)) {
      assert.include(args.left, "\"read\"")
      assert.include(args.left, "not valid JSON")
    }
  })

  it("TOOL-01 arguments that do not match the Schema give the formatted parse error", () => {
    const args = Tool.decodeArguments(read, "{\"path\":42,\"limit\":\"x\"}")
    assert.isTrue(Either.isLeft(args))
    if (Either.isLeft(args)) {
      assert.include(args.left, "\"read\"")
      assert.include(args.left, "[\"path\"]")
      assert.include(args.left, "[\"limit\"]", "all errors are reported")
      assert.include(args.left, "Expected string, actual 42")
    }
  })

  it("toSchema gives the JSON schema of a struct as frozen plain JSON without $schema, memoized", () => {
    const schema = Tool.toSchema(read)
    assert.strictEqual(schema.name, "read")
    assert.strictEqual(schema.description, "Reads a file")
    assert.strictEqual(schema.parameters, read.parameters)
    assert.deepStrictEqual(schema.jsonSchema, {
      type: "object",
      required: ["path"],
      properties: {
        path: { type: "string", description: "the file" },
        limit: { type: "number" }
      },
      additionalProperties: false
    })
    assert.isTrue(Object.isFrozen(schema.jsonSchema))
    assert.isTrue(Object.isFrozen(schema.jsonSchema["properties"]))
    assert.strictEqual(Tool.toSchema(read).jsonSchema, schema.jsonSchema)
    assert.strictEqual(JSON.stringify(Tool.toSchema(read)), JSON.stringify(schema))
  })

  it("toSchema of a tool without parameters is an empty object schema", () => {
    assert.deepStrictEqual(Tool.toSchema(named("noop")).jsonSchema, { type: "object", properties: {}, required: [] })
  })
})

class Greeting extends Context.Tag("test/Greeting")<Greeting, string>() {}

describe("Tool registry", () => {
  it.scoped("lists tools in registration order; a duplicate name fails DuplicateTool", () =>
    Effect.gen(function*() {
      const registry = tools.makeToolRegistry({ isActive: undefined })
      yield* registry.register(named("b"))
      yield* registry.register(named("a"))
      const duplicate = yield* Effect.flip(registry.register(named("a", "other")))
      assert.strictEqual(duplicate._tag, "DuplicateTool")
      assert.strictEqual(duplicate.name, "a")
      const listed = yield* registry.list
      assert.deepStrictEqual(listed.map((t) => t.name), ["b", "a"])
      assert.strictEqual(yield* runText(listed[1]!), "a", "the first registration stays")
    }))

  it.scoped("a registration is removed when its Scope closes, and the name is free again", () =>
    Effect.gen(function*() {
      const registry = tools.makeToolRegistry({ isActive: undefined })
      yield* registry.register(named("kept"))
      const scope = yield* Scope.make()
      yield* registry.register(named("temp")).pipe(Scope.extend(scope))
      assert.deepStrictEqual((yield* registry.list).map((t) => t.name), ["kept", "temp"])
      yield* Scope.close(scope, Exit.void)
      assert.deepStrictEqual((yield* registry.list).map((t) => t.name), ["kept"])
      yield* registry.register(named("temp"))
      assert.deepStrictEqual((yield* registry.list).map((t) => t.name), ["kept", "temp"])
    }))

  it.scoped("a failed duplicate registration removes nothing when its Scope closes", () =>
    Effect.gen(function*() {
      const registry = tools.makeToolRegistry({ isActive: undefined })
      yield* registry.register(named("a"))
      const scope = yield* Scope.make()
      yield* Effect.flip(registry.register(named("a")).pipe(Scope.extend(scope)))
      yield* Scope.close(scope, Exit.void)
      assert.deepStrictEqual((yield* registry.list).map((t) => t.name), ["a"])
    }))

  it.scoped("a per-agent registry fails AgentInactive{id} once the agent is inactive", () =>
    Effect.gen(function*() {
      const active = yield* inactiveFlag(true)
      const registry = tools.makeToolRegistry({ isActive: Ref.get(active), id: "agent-1" })
      yield* registry.register(named("a"))
      yield* Ref.set(active, false)
      const error = yield* Effect.flip(registry.register(named("b")))
      assert.strictEqual(error._tag, "AgentInactive")
      if (error._tag === "AgentInactive") assert.strictEqual(error.id, "agent-1")
      assert.deepStrictEqual((yield* registry.list).map((t) => t.name), ["a"])
    }))

  it.scoped("a tool's requirements are provided at registration, so a listed tool needs nothing", () =>
    Effect.gen(function*() {
      const registry = tools.makeToolRegistry({ isActive: undefined })
      const greet = Tool.make({
        name: "greet",
        description: "Greets",
        parameters: Schema.Struct({ who: Schema.String }),
        run: ({ who }) => Effect.map(Greeting, (greeting) => Tool.text(`${greeting}, ${who}`))
      })
      yield* registry.register(greet).pipe(Effect.provideService(Greeting, "hello"))
      const [listed] = yield* registry.list
      const result = yield* listed!.run({ who: "ada" }, toolContext)
      assert.strictEqual(Message.textOf(result.content), "hello, ada")
    }))

  it.scoped("registering a tool whose parameters have no JSON schema is a defect at registration", () =>
    Effect.gen(function*() {
      class Opaque {}
      const registry = tools.makeToolRegistry({ isActive: undefined })
      const opaque = Tool.make({
        name: "opaque",
        description: "",
        parameters: Schema.Struct({ value: Schema.instanceOf(Opaque) }),
        run: () => Effect.succeed(Tool.text(""))
      })
      const exit = yield* Effect.exit(registry.register(opaque))
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      assert.deepStrictEqual(yield* registry.list, [])
    }))

  it.scoped("per-agent tools shadow global ones of the same name (global first, then the agent's)", () =>
    Effect.gen(function*() {
      const global = yield* Tool.ToolRegistry
      yield* global.register(named("a"))
      yield* global.register(named("b", "global b"))
      yield* global.register(named("c"))
      const own = tools.makeToolRegistry({ isActive: Effect.succeed(true), id: "x" })
      yield* own.register(named("d"))
      yield* own.register(named("b", "agent b"))
      const resolved = tools.resolveTools(yield* global.list, yield* own.list)
      assert.deepStrictEqual(resolved.map((t) => t.name), ["a", "c", "d", "b"])
      assert.strictEqual(yield* runText(resolved[3]!), "agent b")
      assert.strictEqual(tools.resolveTools(yield* global.list, []).length, 3)
    }).pipe(Effect.provide(Tool.layerGlobal)))

  it.effect("layerGlobalWith registers the given tools in order and refuses duplicates", () =>
    Effect.gen(function*() {
      const names = yield* Effect.flatMap(Tool.ToolRegistry, (r) => r.list).pipe(
        Effect.map((list) => list.map((t) => t.name)),
        Effect.provide(Tool.layerGlobalWith([named("x"), named("y")]))
      )
      assert.deepStrictEqual(names, ["x", "y"])
      const error = yield* Effect.flip(
        Effect.flatMap(Tool.ToolRegistry, (r) => r.list).pipe(
          Effect.provide(Tool.layerGlobalWith([named("x"), named("x")]))
        )
      )
      assert.strictEqual(error._tag, "DuplicateTool")
    }))
})

const enter = (decision: Tool.PreStepDecision): ReadonlyArray<string> =>
  decision.kind === "enter" ? decision.messages.map((m) => Message.textOf(m.content)) : []

describe("Loop hooks", () => {
  it.scoped("preStep is a waterfall, global hooks first, each in registration order", () =>
    Effect.gen(function*() {
      const global = yield* Tool.LoopHooks
      const own = hooks.makeLoopHooks({ isActive: Effect.succeed(true), id: "x" })
      const seen: Array<string> = []
      const appending = (label: string) => (i: Tool.StepInfo & { readonly messages: ReadonlyArray<Message.UserMessage> }) =>
        Effect.sync(() => {
          seen.push(`${label}:${i.messages.length}`)
          return { kind: "enter" as const, messages: [...i.messages, Message.user(label)] }
        })
      // The agent's hooks are registered first: global ones still run first.
      yield* own.preStep(appending("agent-1"))
      yield* own.preStep(appending("agent-2"))
      yield* global.preStep(appending("global-1"))
      yield* global.preStep(appending("global-2"))
      const runners = hooks.combineHooks(global, own)
      const decision = yield* runners.runPreStep(info, [Message.user("input")])
      assert.deepStrictEqual(seen, ["global-1:1", "global-2:2", "agent-1:3", "agent-2:4"])
      assert.deepStrictEqual(enter(decision), ["input", "global-1", "global-2", "agent-1", "agent-2"])
    }).pipe(Effect.provide(Tool.layerGlobalHooks)))

  it.scoped("a preStep reject stops the chain and is the decision; no hooks enters the batch as is", () =>
    Effect.gen(function*() {
      const own = hooks.makeLoopHooks({ isActive: undefined })
      const batch = [Message.user("input")]
      const untouched = yield* own.runPreStep(info, batch)
      assert.deepStrictEqual(untouched, { kind: "enter", messages: batch })
      const later = yield* Ref.make(0)
      yield* own.preStep(() => Effect.succeed({ kind: "reject", reason: "quota" }))
      yield* own.preStep((i) => Effect.as(Ref.update(later, (n) => n + 1), { kind: "enter", messages: i.messages }))
      const decision = yield* own.runPreStep(info, batch)
      assert.deepStrictEqual(decision, { kind: "reject", reason: "quota" })
      assert.strictEqual(yield* Ref.get(later), 0)
    }))

  it.scoped("request is a waterfall over the route, global first", () =>
    Effect.gen(function*() {
      const global = hooks.makeLoopHooks({ isActive: undefined })
      const own = hooks.makeLoopHooks({ isActive: undefined })
      yield* own.request((i) => Effect.succeed({ ...i.route, model: `${i.route.model}+agent` }))
      yield* global.request((i) => Effect.succeed({ ...i.route, model: `${i.route.model}+global`, maxTokens: 9 }))
      const route = yield* hooks.combineHooks(global, own).runRequest(info, { provider: "p", model: "m" })
      assert.deepStrictEqual(route, { provider: "p", model: "m+global+agent", maxTokens: 9 })
      const unchanged = yield* hooks.combineHooks(undefined, hooks.makeLoopHooks({ isActive: undefined }))
        .runRequest(info, { provider: "p", model: "m" })
      assert.deepStrictEqual(unchanged, { provider: "p", model: "m" })
    }))

  it.scoped("requestError retries only when every hook says retry; the first fail wins", () =>
    Effect.gen(function*() {
      const error = new ModelError({ code: "OVERLOADED" })
      const request = { ...info, error, attempt: 1 }
      const own = hooks.makeLoopHooks({ isActive: undefined })
      assert.strictEqual(yield* own.runRequestError(request), "fail", "no hooks: fail")
      const asked: Array<string> = []
      const answer = (label: string, decision: "retry" | "fail") => Effect.sync(() => {
        asked.push(label)
        return decision
      })
      yield* own.requestError((i) => answer(`retry:${i.error.code}:${i.attempt}`, "retry"))
      assert.strictEqual(yield* own.runRequestError(request), "retry")
      const scope = yield* Scope.make()
      yield* own.requestError(() => answer("fail", "fail")).pipe(Scope.extend(scope))
      yield* own.requestError(() => answer("after", "retry")).pipe(Scope.extend(scope))
      asked.length = 0
      assert.strictEqual(yield* own.runRequestError(request), "fail")
      assert.deepStrictEqual(asked, ["retry:OVERLOADED:1", "fail"], "hooks after a fail do not run")
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(yield* own.runRequestError(request), "retry")
    }))

  it.scoped("turnStopping hooks run serially, global first; a failure stops the chain and surfaces", () =>
    Effect.gen(function*() {
      const global = hooks.makeLoopHooks({ isActive: undefined })
      const own = hooks.makeLoopHooks({ isActive: undefined })
      const log: Array<string> = []
      const gate = yield* Deferred.make<void>()
      yield* global.turnStopping(() =>
        Effect.sync(() => log.push("global:start")).pipe(
          Effect.zipRight(Deferred.await(gate)),
          Effect.zipRight(Effect.sync(() => log.push("global:end")))
        )
      )
      yield* own.turnStopping((i) => Effect.sync(() => log.push(`agent:${i.turn}`)))
      const runners = hooks.combineHooks(global, own)
      const fiber = yield* Effect.fork(runners.runTurnStopping({ agent, turn: 3 }))
      yield* Effect.yieldNow()
      assert.deepStrictEqual(log, ["global:start"], "the next hook waits for the running one")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(fiber)
      assert.deepStrictEqual(log, ["global:start", "global:end", "agent:3"])

      const failing = hooks.makeLoopHooks({ isActive: undefined })
      yield* failing.turnStopping(() => Effect.fail("boom"))
      yield* failing.turnStopping(() => Effect.sync(() => log.push("never")))
      assert.strictEqual(yield* Effect.flip(failing.runTurnStopping({ agent, turn: 1 })), "boom")
      assert.notInclude(log, "never")
    }))

  it.scoped("a failing hook's error is the runner's failure", () =>
    Effect.gen(function*() {
      const own = hooks.makeLoopHooks({ isActive: undefined })
      yield* own.preStep(() => Effect.fail("preStep broke"))
      yield* own.request(() => Effect.fail("request broke"))
      assert.strictEqual(yield* Effect.flip(own.runPreStep(info, [])), "preStep broke")
      assert.strictEqual(yield* Effect.flip(own.runRequest(info, { provider: "p", model: "m" })), "request broke")
    }))

  it.scoped("hook registrations are removed when their Scope closes", () =>
    Effect.gen(function*() {
      const own = hooks.makeLoopHooks({ isActive: undefined })
      const scope = yield* Scope.make()
      const rename = (i: Tool.StepInfo & { readonly route: Tool.Route }) => Effect.succeed({ ...i.route, model: "x" })
      // The same function registered twice is two registrations.
      yield* own.request(rename).pipe(Scope.extend(scope))
      yield* own.request(rename)
      yield* own.preStep(() => Effect.succeed({ kind: "reject", reason: "no" })).pipe(Scope.extend(scope))
      assert.strictEqual(own.list().request.length, 2)
      yield* Scope.close(scope, Exit.void)
      const lists = own.list()
      assert.strictEqual(lists.request.length, 1)
      assert.strictEqual(lists.preStep.length, 0)
      assert.strictEqual((yield* own.runPreStep(info, [])).kind, "enter")
    }))

  it.scoped("per-agent hook registrations fail AgentInactive{id} once the agent is inactive", () =>
    Effect.gen(function*() {
      const active = yield* inactiveFlag(false)
      const own = hooks.makeLoopHooks({ isActive: Ref.get(active), id: "agent-2" })
      const error = yield* Effect.flip(own.turnStopping(() => Effect.void))
      assert.strictEqual(error._tag, "AgentInactive")
      assert.strictEqual(error.id, "agent-2")
      assert.strictEqual(own.list().turnStopping.length, 0)
    }))

  it.scoped("hooks registered after the runners were combined apply from the next hook point", () =>
    Effect.gen(function*() {
      const global = yield* Tool.LoopHooks
      const own = hooks.makeLoopHooks({ isActive: undefined })
      const runners = hooks.combineHooks(global, own)
      assert.strictEqual(yield* runners.runRequestError({ ...info, error: new ModelError({ code: "X" }), attempt: 1 }), "fail")
      yield* global.requestError(() => Effect.succeed("retry"))
      assert.strictEqual(yield* runners.runRequestError({ ...info, error: new ModelError({ code: "X" }), attempt: 1 }), "retry")
    }).pipe(Effect.provide(Tool.layerGlobalHooks)))
})
