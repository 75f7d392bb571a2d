/**
 * B5: full turns per second on one agent with a model that answers at once: 2,000 sequential
 * turns (follow-up, then `whenIdle`), per-turn cost of the first 10% against the last 10%. The
 * raw reference is the Effect floor of a turn: forking a fiber and awaiting it, per turn.
 */
import { Effect, Fiber, Ref } from "effect"
import { AgentRegistry } from "../src/index.js"
import type { UserMessage } from "../src/Message.js"
import { memoryRuntime, route, userMessage } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { countOperations, fmt, fmtBytes, measureAllocated, now, perSecond, ratios, settle, stat } from "./harness.js"

const TURNS = 2_000

interface Timing {
  readonly all: number
  readonly first10: number
  readonly last10: number
}

const ours = (round: string, messages: ReadonlyArray<UserMessage>) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* memoryRuntime
    return yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      const { agent } = yield* registry.create({ sessionId: `b5-${round}`, options: route })
      const turns = messages.length
      const tenth = turns / 10
      const start = now()
      let afterFirst = 0
      let beforeLast = 0
      for (let i = 0; i < turns; i++) {
        if (i === turns - tenth) beforeLast = now()
        yield* agent.followup(messages[i]!)
        yield* agent.whenIdle
        if (i === tenth - 1) afterFirst = now()
      }
      const end = now()
      const events = yield* agent.session.events
      const ended = events.filter((e) => e.type === "turn/end").length
      if (ended !== turns) return yield* Effect.dieMessage(`B5: ${ended} turns ended, ${turns} expected`)
      return {
        all: ((end - start) * 1000) / turns,
        first10: ((afterFirst - start) * 1000) / tenth,
        last10: ((end - beforeLast) * 1000) / tenth
      }
    })).pipe(Effect.provide(context))
  })).pipe(Effect.orDie)

/** A turn's floor: fork a fiber that appends 8 events to a Ref'd log, and join it. */
const raw = (turns: number) =>
  Effect.gen(function*() {
    const log = yield* Ref.make<Array<number>>([])
    const start = now()
    for (let i = 0; i < turns; i++) {
      const fiber = yield* Effect.fork(Effect.gen(function*() {
        for (let j = 0; j < 8; j++) yield* Ref.update(log, (events) => (events.push(j), events))
      }))
      yield* Fiber.join(fiber)
    }
    return ((now() - start) * 1000) / turns
  })

/** Effect operations per turn (and per raw turn), less the agent's creation: exact under any load. */
const operationsPerTurn = (messages: ReadonlyArray<UserMessage>) =>
  Effect.gen(function*() {
    const [, withTurns] = yield* countOperations(ours("ops", messages))
    const [, empty] = yield* countOperations(ours("ops-empty", []))
    const [, floor] = yield* countOperations(raw(messages.length))
    return { ours: (withTurns - empty) / messages.length, raw: floor / messages.length }
  })

/**
 * Bytes allocated per turn (PERF-01), less the agent's creation: the median of three measured runs
 * (see `measureAllocated`; a run of no turns is subtracted from each).
 */
const bytesPerTurn = async (messages: ReadonlyArray<UserMessage>): Promise<number> => {
  const samples: Array<number> = []
  for (let i = 0; i < 3; i++) {
    await settle()
    const [, withTurns] = await Effect.runPromise(measureAllocated(ours(`alloc-${i}`, messages)))
    const [, empty] = await Effect.runPromise(measureAllocated(ours(`alloc-empty-${i}`, [])))
    samples.push((withTurns - empty) / messages.length)
  }
  return stat(samples).median
}

export const scenario: Scenario = {
  id: "B5",
  title: "2,000 sequential turns on one agent, model answers at once",
  run: async ({ quick, log }) => {
    const rounds = quick ? 1 : 3
    const messages = Array.from({ length: TURNS }, (_, i) => userMessage(`t${i}`, "next question, please"))
    await Effect.runPromise(ours("warm", messages.slice(0, 500)))
    const oursT: Array<Timing> = []
    const rawUs: Array<number> = []
    for (let r = 0; r < rounds; r++) {
      await settle()
      oursT.push(await Effect.runPromise(ours(`r${r}`, messages)))
      rawUs.push(await Effect.runPromise(raw(TURNS)))
      const o = oursT[r]!
      log(
        `B5 round ${r}: ${fmt(o.all)} µs/turn (first 10% ${fmt(o.first10)}, last 10% ${fmt(o.last10)}), ` +
          `raw ${fmt(rawUs[r]!)} µs`
      )
    }
    const operations = await Effect.runPromise(operationsPerTurn(messages.slice(0, 200)))
    log(`B5 Effect operations per turn: ${fmt(operations.ours)} (fork+join, 8 Ref appends: ${fmt(operations.raw)})`)
    const bytes = await bytesPerTurn(messages.slice(0, 500))
    log(`B5 bytes allocated per turn: ${fmtBytes(bytes)}`)
    const all = oursT.map((t) => t.all)
    const rate = stat(all.map(perSecond))
    const growth = stat(oursT.map((t) => t.last10 / t.first10))
    const row: Row = {
      id: "B5",
      scenario: `${fmt(TURNS)} sequential turns, one agent, memory`,
      ours: rate,
      unit: "turns/s",
      raw: { label: "fork+join, 8 Ref appends", value: stat(rawUs.map(perSecond)) },
      costRatio: ratios(all, rawUs),
      notes: `per turn first 10% ${fmt(stat(oursT.map((t) => t.first10)).median)} µs, last 10% ` +
        `${fmt(stat(oursT.map((t) => t.last10)).median)} µs (last/first ${fmt(growth.median)}×); ` +
        `${fmt(operations.ours)} Effect operations per turn (raw: ${fmt(operations.raw)}); ${fmtBytes(bytes)} allocated per turn`,
      peer: `130–170/s (last 200 ≈10× slower) → ${fmt(rate.median / 150)}× (target ≥5×)`,
      extra: {
        lastOverFirst: growth.median,
        operationsPerTurn: operations.ours,
        rawOperationsPerTurn: operations.raw,
        bytesPerTurn: bytes
      }
    }
    return [row]
  }
}
