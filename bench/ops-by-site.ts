/**
 * Where a scenario's Effect operations come from (PERF-01): runs one of the counted workloads — `turn`
 * (B5's sequential turns), `create` (B1's create+dispose) or `inject` (B3) — under a supervisor
 * that attributes every operation the run loop evaluates to a source site, and prints the sites
 * with the most operations per unit. A development tool, not a benchmark:
 *
 *   EFFECT_AGENT_BENCH_CHILD=1 npx tsx bench/ops-by-site.ts turn [units=50] [top=60]
 *
 * The site of an operation is the function it runs: a `sync`'s thunk, a `flatMap`'s continuation,
 * the generator of an `Effect.gen`, or — for a value handed back (an exit) — the continuation on top
 * of the fiber's stack that receives it. Sites are resolved to `file:line` of the code as loaded
 * (tsx's output keeps the source's lines) through the inspector (`[[FunctionLocation]]`,
 * `[[GeneratorLocation]]`).
 */
import { Channel, Chunk, Effect, Either, RuntimeFlags, RuntimeFlagsPatch, Scope, Stream, Supervisor } from "effect"
import type { Fiber } from "effect"
import * as inspector from "node:inspector"
import { findSourceMap } from "node:module"
import { AgentRegistry } from "../src/index.js"
import type { UserMessage } from "../src/Message.js"
import { memoryRuntime, route, userMessage } from "./fixtures.js"

interface Primitive {
  readonly _op?: string
  readonly effect_instruction_i0?: unknown
  readonly effect_instruction_i1?: unknown
  readonly effect_instruction_i2?: unknown
  readonly constructor?: { readonly name?: string }
}

interface FiberInternals {
  readonly _stack?: ReadonlyArray<Primitive>
}

/** The object whose source location names an operation, and the kind of operation. */
const siteOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>, op: Primitive): readonly [string, unknown] => {
  switch (op._op) {
    case "Success":
    case "Failure": {
      const stack = (fiber as unknown as FiberInternals)._stack ?? []
      const top = stack[stack.length - 1]
      if (top === undefined) return [`${op._op}→(end)`, undefined]
      return [`${op._op}→${top._op}`, frameSite(top)]
    }
    case "Sync":
    case "Async":
    case "WithRuntime":
    case "Iterator":
      return [op._op, op.effect_instruction_i0]
    case "OnSuccess":
    case "OnFailure":
      return [op._op, op.effect_instruction_i1]
    case "OnSuccessAndFailure":
      return [op._op, op.effect_instruction_i2]
    case "UpdateRuntimeFlags":
      return [op._op, op.effect_instruction_i1]
    case "While":
      return [op._op, op.effect_instruction_i1]
    case "Commit":
      return ["Commit", (op as { readonly commit?: unknown }).commit]
    case "Tag":
      return [`Tag`, undefined]
    default:
      return [String(op._op), undefined]
  }
}

const frameSite = (frame: Primitive): unknown => {
  switch (frame._op) {
    case "Iterator":
      return frame.effect_instruction_i0
    case "OnSuccessAndFailure":
      return frame.effect_instruction_i2
    case "While":
      return frame.effect_instruction_i2
    default:
      return frame.effect_instruction_i1
  }
}

const stackFrames = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Array<unknown> => {
  const stack = (fiber as unknown as FiberInternals)._stack ?? []
  const frames: Array<unknown> = []
  for (let i = stack.length - 1; i >= 0 && frames.length < 400; i--) frames.push(frameSite(stack[i]!))
  return frames
}

class SiteCounter extends Supervisor.AbstractSupervisor<void> {
  /** Per operation: its kind, its own site, and the frames of the fiber's stack (top first). */
  readonly ops: Array<readonly [string, unknown, ReadonlyArray<unknown>, Fiber.RuntimeFiber<unknown, unknown>]> = []
  /** The frames of the parent's stack when a fiber was forked (an op of a fiber with no src frame is its fork's). */
  readonly forkedAt = new Map<Fiber.RuntimeFiber<unknown, unknown>, ReadonlyArray<unknown>>()
  total = 0
  override onStart<A, E, R>(
    _context: unknown,
    _effect: Effect.Effect<A, E, R>,
    parent: { readonly _tag: string; readonly value?: Fiber.RuntimeFiber<unknown, unknown> },
    fiber: Fiber.RuntimeFiber<A, E>
  ): void {
    if (parent._tag !== "Some" || parent.value === undefined) return
    this.forkedAt.set(fiber as Fiber.RuntimeFiber<unknown, unknown>, [
      ...stackFrames(parent.value),
      ...(this.forkedAt.get(parent.value) ?? [])
    ].slice(0, 800))
  }
  get value(): Effect.Effect<void> {
    return Effect.void
  }
  override onEffect(fiber: Fiber.RuntimeFiber<unknown, unknown>, effect: unknown): void {
    this.total++
    const [kind, site] = siteOf(fiber, effect as Primitive)
    this.ops.push([kind, site, stackFrames(fiber), fiber])
  }
}

/** Source locations through the inspector (synchronous on the main thread). */
const makeLocator = () => {
  const session = new inspector.Session()
  session.connect()
  const scripts = new Map<string, string>()
  const sources = new Map<string, Array<string>>()
  session.on("Debugger.scriptParsed", (message) => {
    scripts.set(message.params.scriptId, message.params.url)
  })
  const post = <T>(method: string, params: object): T => {
    let result: T | undefined
    let failure: unknown
    session.post(method, params, (error, value) => {
      failure = error
      result = value as T
    })
    if (failure !== undefined && failure !== null) throw failure
    if (result === undefined) throw new Error(`inspector ${method} did not answer synchronously`)
    return result
  }
  post("Debugger.enable", {})
  const holder = globalThis as { __opsProbe?: unknown }
  return (site: unknown): string => {
    if (site === undefined || site === null || (typeof site !== "function" && typeof site !== "object")) {
      return "-"
    }
    holder.__opsProbe = site
    const evaluated = post<{ result: { objectId?: string } }>("Runtime.evaluate", { expression: "globalThis.__opsProbe" })
    const objectId = evaluated.result.objectId
    if (objectId === undefined) return "?"
    const props = post<{
      internalProperties?: ReadonlyArray<
        { name: string; value?: { value?: { scriptId: string; lineNumber: number; columnNumber: number } } }
      >
    }>("Runtime.getProperties", { objectId, ownProperties: true })
    post("Runtime.releaseObject", { objectId })
    const location = props.internalProperties?.find((p) =>
      p.name === "[[FunctionLocation]]" || p.name === "[[GeneratorLocation]]"
    )?.value?.value
    if (location === undefined) return `(${(site as { constructor?: { name?: string } }).constructor?.name ?? "?"})`
    const url = scripts.get(location.scriptId) ?? location.scriptId
    let lines = sources.get(location.scriptId)
    if (lines === undefined) {
      const source = post<{ scriptSource: string }>("Debugger.getScriptSource", { scriptId: location.scriptId })
      lines = source.scriptSource.split("\n")
      sources.set(location.scriptId, lines)
    }
    const mapped = findSourceMap(url.replace(/\?.*$/, ""))?.findEntry(location.lineNumber, location.columnNumber)
    if (mapped !== undefined && "originalSource" in mapped && mapped.originalSource !== undefined) {
      const short = mapped.originalSource.replace(/^file:\/\/.*?\/(src|bench|node_modules)\//, "$1/")
      return `${short}:${mapped.originalLine + 1}`
    }
    const short = url.replace(/^file:\/\/.*?\/(src|bench|node_modules)\//, "$1/").replace(/\?.*$/, "")
    const text = (lines[location.lineNumber] ?? "").trim().slice(0, 90)
    return `${short}:${location.lineNumber + 1}  ${text}`
  }
}

const counted = <A, E, R>(counter: SiteCounter, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.supervised(counter),
    Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision))
  )

const turns = (messages: ReadonlyArray<UserMessage>) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry.AgentRegistry
    const { agent } = yield* registry.create({ sessionId: "ops-turn", options: route })
    for (const message of messages) {
      yield* agent.followup(message)
      yield* agent.whenIdle
    }
  })

const creates = (count: number) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry.AgentRegistry
    for (let i = 0; i < count; i++) {
      const handle = yield* registry.create({ sessionId: `ops-create-${i}`, options: route })
      yield* handle.dispose
    }
  })

const injects = (messages: ReadonlyArray<UserMessage>) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry.AgentRegistry
    const { agent } = yield* registry.create({ sessionId: "ops-inject", options: route })
    for (const message of messages) yield* agent.inject(message)
  })

/** A model's reply of two chunks (one text delta and a finish), pulled the way the driver pulls it. */
const streams = (count: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < count; i++) {
      yield* Effect.flatMap(Scope.make(), (scope) =>
        Effect.onExit(
          Effect.flatMap(Channel.toPullIn(Stream.toChannel(Stream.fromChunk(Chunk.unsafeFromArray(reply))), scope), (pull) => {
            const loop: Effect.Effect<void> = Effect.flatMap(pull, (e) => Either.isLeft(e) ? loop : Effect.void)
            return loop
          }),
          (exit) => Scope.close(scope, exit)
        ))
    }
  })
const reply = [{ _tag: "TextDelta", text: "done" }, { _tag: "Finish", reason: "stop" }] as const

const main = async () => {
  const [workload = "turn", unitsText = "50", topText = "60"] = process.argv.slice(2)
  const units = Number(unitsText)
  const top = Number(topText)
  const messages = Array.from({ length: units }, (_, i) => userMessage(`m${i}`, "next question, please"))
  const body = (
    n: number,
    msgs: ReadonlyArray<UserMessage>
  ): Effect.Effect<void, unknown, AgentRegistry.AgentRegistry | Scope.Scope> =>
    workload === "create"
      ? creates(n)
      : workload === "stream"
      ? streams(n)
      : workload === "inject"
      ? injects(msgs)
      : turns(msgs)
  // warm once, then count the workload and the same with zero units (the fixed part), and subtract
  const run = (counter: SiteCounter, n: number, msgs: ReadonlyArray<UserMessage>) =>
    Effect.runPromise(counted(
      counter,
      Effect.scoped(Effect.gen(function*() {
        const context = yield* memoryRuntime
        yield* Effect.scoped(body(n, msgs)).pipe(Effect.provide(context))
      }))
    ))
  await run(new SiteCounter(), units, messages)
  const full = new SiteCounter()
  await run(full, units, messages)
  const empty = new SiteCounter()
  await run(empty, 0, [])
  const locate = makeLocator()
  const cache = new Map<unknown, string>()
  const where = (site: unknown) => {
    let found = cache.get(site)
    if (found === undefined) cache.set(site, found = locate(site))
    return found
  }
  const isOurs = (location: string) => location.startsWith("src/")
  const bySite = new Map<string, number>()
  const byOwner = new Map<string, number>()
  const add = (counter: SiteCounter, sign: number) => {
    for (const [kind, site, frames, fiber] of counter.ops) {
      const own = where(site)
      let owner = isOurs(own) ? own : undefined
      for (let i = 0; owner === undefined && i < frames.length; i++) {
        const frame = where(frames[i])
        if (isOurs(frame)) owner = frame
      }
      const forked = counter.forkedAt.get(fiber) ?? []
      for (let i = 0; owner === undefined && i < forked.length; i++) {
        const frame = where(forked[i])
        if (isOurs(frame)) owner = "fork@" + frame
      }
      owner ??= "(no src frame)"
      const key = `${owner.padEnd(44)} ${kind.padEnd(28)} ${own}`
      bySite.set(key, (bySite.get(key) ?? 0) + sign)
      byOwner.set(owner, (byOwner.get(owner) ?? 0) + sign)
    }
  }
  add(full, 1)
  add(empty, -1)
  const rows = [...bySite].filter(([, n]) => n !== 0).sort((a, b) => b[1] - a[1])
  const perUnit = (full.total - empty.total) / units
  process.stdout.write(`${workload}: ${perUnit.toFixed(1)} operations per unit (${units} units)\n`)
  process.stdout.write("\nby the nearest src frame:\n")
  for (const [owner, n] of [...byOwner].filter(([, n]) => n !== 0).sort((a, b) => b[1] - a[1])) {
    process.stdout.write(`${(n / units).toFixed(2).padStart(8)}  ${owner}\n`)
  }
  process.stdout.write("\nby site:\n")
  for (const [key, n] of rows.slice(0, top)) process.stdout.write(`${(n / units).toFixed(2).padStart(8)}  ${key}\n`)
}

main().catch((error: unknown) => {
  process.stderr.write(String(error) + "\n")
  process.exit(1)
})
