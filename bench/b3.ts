/**
 * B3: 100,000 inbox operations (`inject`) on one idle agent, against `Ref.update` + one
 * `Queue.offer` per operation; per-op cost of the first 10% against the last 10%.
 */
import { Effect, Queue, Ref } from "effect"
import { AgentRegistry } from "../src/index.js"
import type { UserMessage } from "../src/Message.js"
import { memoryRuntime, route, userMessage } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { countOperations, fmt, now, perSecond, ratios, settle, stat } from "./harness.js"

const OPS = 100_000

interface Timing {
  /** µs per op over all ops */
  readonly all: number
  readonly first10: number
  readonly last10: number
  readonly first1k: number
  readonly first10k: number
}

const timing = (marks: ReadonlyArray<number>, count: number): Timing => {
  // marks[i] = time after i ops
  const per = (from: number, to: number) => ((marks[to]! - marks[from]!) * 1000) / (to - from)
  return {
    all: per(0, count),
    first10: per(0, count / 10),
    last10: per(count - count / 10, count),
    first1k: per(0, Math.min(1000, count)),
    first10k: per(0, Math.min(10_000, count))
  }
}

const ours = (round: string, messages: ReadonlyArray<UserMessage>) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* memoryRuntime
    return yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      const { agent } = yield* registry.create({ sessionId: `b3-${round}`, options: route })
      const marks: Array<number> = new Array(messages.length + 1)
      marks[0] = now()
      for (let i = 0; i < messages.length; i++) {
        yield* agent.inject(messages[i]!)
        if ((i + 1) % 1000 === 0 || i + 1 === messages.length) marks[i + 1] = now()
      }
      if ((yield* agent.inbox.nextStep).length !== messages.length) {
        return yield* Effect.dieMessage("B3: lost an inject")
      }
      return timing(marks, messages.length)
    })).pipe(Effect.provide(context))
  })).pipe(Effect.orDie)

const raw = (messages: ReadonlyArray<UserMessage>) =>
  Effect.gen(function*() {
    const ref = yield* Ref.make(0)
    const queue = yield* Queue.unbounded<UserMessage>()
    const marks: Array<number> = new Array(messages.length + 1)
    marks[0] = now()
    for (let i = 0; i < messages.length; i++) {
      yield* Ref.update(ref, (n) => n + 1)
      yield* Queue.offer(queue, messages[i]!)
      if ((i + 1) % 1000 === 0 || i + 1 === messages.length) marks[i + 1] = now()
    }
    return timing(marks, messages.length)
  })

/** Effect operations per inject (and per raw op), less the agent's creation: exact under any load. */
const operationsPerInject = (messages: ReadonlyArray<UserMessage>) =>
  Effect.gen(function*() {
    const [, withInjects] = yield* countOperations(ours("ops", messages))
    const [, empty] = yield* countOperations(ours("ops-empty", []))
    const [, floor] = yield* countOperations(raw(messages))
    return { ours: (withInjects - empty) / messages.length, raw: floor / messages.length }
  })

export const scenario: Scenario = {
  id: "B3",
  title: "100,000 injects on one idle agent",
  run: async ({ quick, log }) => {
    const rounds = quick ? 1 : 3
    const messages = Array.from({ length: OPS }, (_, i) => userMessage(`i${i}`, "a short note for the next step"))
    await Effect.runPromise(ours("warm", messages.slice(0, 20_000)))
    await Effect.runPromise(raw(messages))
    const oursT: Array<Timing> = []
    const rawT: Array<Timing> = []
    for (let r = 0; r < rounds; r++) {
      await settle()
      oursT.push(await Effect.runPromise(ours(`r${r}`, messages)))
      rawT.push(await Effect.runPromise(raw(messages)))
      const o = oursT[r]!
      log(
        `B3 round ${r}: ${fmt(o.all)} µs/op (first 10% ${fmt(o.first10)}, last 10% ${fmt(o.last10)}), ` +
          `raw ${fmt(rawT[r]!.all)} µs/op`
      )
    }
    const operations = await Effect.runPromise(operationsPerInject(messages.slice(0, 1000)))
    log(`B3 Effect operations per inject: ${fmt(operations.ours)} (Ref.update+Queue.offer: ${fmt(operations.raw)})`)
    const all = oursT.map((t) => t.all)
    const growth = stat(oursT.map((t) => t.last10 / t.first10))
    const rate10k = stat(oursT.map((t) => perSecond(t.first10k)))
    const row: Row = {
      id: "B3",
      scenario: `${fmt(OPS)} injects, one idle agent, memory`,
      ours: stat(all.map(perSecond)),
      unit: "ops/s",
      raw: { label: "Ref.update+Queue.offer", value: stat(rawT.map((t) => perSecond(t.all))) },
      costRatio: ratios(all, rawT.map((t) => t.all)),
      notes: `per op first 10% ${fmt(stat(oursT.map((t) => t.first10)).median)} µs, last 10% ` +
        `${fmt(stat(oursT.map((t) => t.last10)).median)} µs (last/first ${fmt(growth.median)}×); ` +
        `first 1,000 ${fmt(stat(oursT.map((t) => perSecond(t.first1k))).median)}/s, ` +
        `first 10,000 ${fmt(rate10k.median)}/s; ${fmt(operations.ours)} Effect operations per inject ` +
        `(raw: ${fmt(operations.raw)})`,
      peer: `≈900/s over 10,000 → ${fmt(rate10k.median / 900)}× (target ≥10×)`,
      extra: { lastOverFirst: growth.median, operationsPerInject: operations.ours, rawOperationsPerInject: operations.raw }
    }
    return [row]
  }
}
