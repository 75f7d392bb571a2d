/**
 * The crash-consistency suite (DUR-13): real worker processes on the file store and on SQLite with
 * `fsync` durability, SIGKILLed at random moments (inside lock takeovers, DUR-06; inside repairs,
 * DUR-12; inside 1 MiB appends), each kill verified by a fresh process that resumes every session
 * without an operator (see test/chaos/). `npm run chaos -- --cycles N` runs the same for longer;
 * `EFFECT_AGENT_CHAOS_SEED` changes the seed of the runs here.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Repair from "../src/Repair.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import type { ChaosSummary } from "./chaos/driver.js"
import { formatSummary, runChaos } from "./chaos/driver.js"
import { emptyJournal, parseJournal } from "./chaos/journal.js"
import type { Backend, Target } from "./chaos/plan.js"
import { planCycle } from "./chaos/plan.js"
import { sessionViolations } from "./chaos/verify.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import { tempDirectory } from "./fixtures/backends.js"
import { memoryRuntime, route } from "./fixtures/runtime.js"

const seed = Number(process.env["EFFECT_AGENT_CHAOS_SEED"] ?? 1301)
const cycles = 60

const chaos = (backend: Backend, options?: { readonly cycles?: number; readonly phantomAck?: boolean }) =>
  Effect.gen(function*() {
    const directory = yield* tempDirectory(`effect-agent-chaos-${backend}-`)
    return yield* runChaos({ backend, seed, cycles: options?.cycles ?? cycles, directory, ...options })
  }).pipe(Effect.provide(NodeContext.layer), Effect.scoped)

/** The facts every long run must show, besides having no violation. */
const assertSound = (summary: ChaosSummary) => {
  const report = formatSummary(summary)
  // eslint-disable-next-line no-console
  console.log(report)
  assert.deepStrictEqual(summary.violations, [], report)
  // The kills were aimed where the contract says, and landed there.
  for (const target of ["takeover", "repair", "big-append", "acks"]) {
    assert.isAbove(summary.kills[target] ?? 0, 0, `no kill inside ${target}: ${report}`)
  }
  assert.isAbove(summary.acknowledged, summary.cycles, report)
  assert.isAbove(summary.repairs, 0, report)
  assert.isAbove(summary.takeovers, 0, report)
  // Every cycle's worker verified something, and the final verifier every session.
  assert.isAtLeast(summary.verifications, summary.cycles, report)
}

describe("crash consistency (DUR-13)", () => {
  it.live(
    "DUR-13 DUR-06 DUR-12 SEC-11 files: 60 SIGKILL cycles (inside lock takeovers, repairs and 1 MiB appends; " +
      "sends racing cancels) lose no acknowledged input, enter none twice, leave balanced turns and every session " +
      "resumable",
    () => Effect.map(chaos("file"), assertSound),
    600_000
  )

  it.live(
    "DUR-13 DUR-12 SEC-11 SQLite: 60 SIGKILL cycles (inside lease takeovers, repairs and 1 MiB appends; " +
      "sends racing cancels) lose no acknowledged input, enter none twice, leave balanced turns and every session " +
      "resumable",
    () => Effect.map(chaos("sqlite"), assertSound),
    600_000
  )

  it.live("DUR-13 the verifier reports an acknowledged input that is not in the log, with its seed and cycle", () =>
    Effect.gen(function*() {
      const summary = yield* chaos("file", { cycles: 1, phantomAck: true })
      const lost = summary.violations.filter((v) => v.includes(`acknowledged input phantom-${seed} was lost`))
      assert.isAbove(lost.length, 0, formatSummary(summary))
      assert.include(lost[0], `seed ${seed} cycle `)
      assert.include(summary.violations[summary.violations.length - 1], `--seed ${seed} --cycles 1`)
    }), 300_000)

  it("DUR-13 a cycle's plan is a function of the seed: the same seed, the same plans; every target is aimed at", () => {
    for (const backend of ["file", "sqlite"] as const) {
      const plans = Array.from({ length: cycles }, (_, c) => planCycle(seed, c, backend))
      assert.deepStrictEqual(plans, Array.from({ length: cycles }, (_, c) => planCycle(seed, c, backend)))
      const targets = new Set<Target>(plans.map((p) => p.target))
      for (const target of ["acks", "takeover", "repair", "big-append"] as const) assert.isTrue(targets.has(target))
      const other = Array.from({ length: cycles }, (_, c) => planCycle(seed + 1, c, backend))
      assert.notDeepEqual(plans, other)
    }
  })

  it.scoped("DUR-13 the verifier: a canceled input needs a later dropping cancel; custom events once each; " +
    "a resume appends exactly the closers", () =>
    Effect.gen(function*() {
      // A real log: m1 answered; m2's turn hangs, m3 queues behind it, a cancel drops m3.
      const { context } = yield* memoryRuntime([Model.text("one"), Model.hang("")])
      const log: ReadonlyArray<SessionEvent> = yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const { agent } = yield* registry.create({ sessionId: "verified", options: route })
        yield* agent.followup(Message.user("m1", { id: "m1" }))
        yield* agent.whenIdle
        yield* agent.followup(Message.user("m2", { id: "m2" }))
        yield* agent.followup(Message.user("m3", { id: "m3" }))
        yield* agent.session.append({ type: "chaos/note", data: { key: "k1" } })
        yield* agent.cancel({ kind: "user" })
        yield* agent.whenIdle
        return yield* agent.session.events
      }).pipe(Effect.provide(context))
      const closed = { stored: log, resumed: log, pending: [] }
      const journal = (lines: ReadonlyArray<string>) =>
        parseJournal(lines.join("\n")).get("verified") ?? emptyJournal("verified")

      const sound = journal(["open verified", "ack verified m1 followup", "ack verified m2 followup",
        "ack verified m3 followup", "event verified k1", "cancel-start verified drop", "cancel verified drop"])
      assert.deepStrictEqual(sessionViolations(sound, closed), [])

      const keptInbox = journal(["ack verified m3 followup", "cancel-start verified keep"])
      assert.deepStrictEqual(sessionViolations(keptInbox, closed), [
        "input m3 was canceled, but no cancel that drops the inbox was requested after it"
      ])
      const cancelBefore = journal(["cancel-start verified drop", "ack verified m3 followup"])
      assert.strictEqual(sessionViolations(cancelBefore, closed).length, 1)

      assert.deepStrictEqual(sessionViolations(journal(["event verified k2"]), closed), [
        "acknowledged custom event k2 was lost"
      ])
      const twice = [...log, { ...log[log.length - 1]!, seq: log.length, type: "chaos/note", data: { key: "k1" } }]
      assert.include(sessionViolations(journal([]), { ...closed, resumed: twice }), "custom event k1 is stored 2 times")

      // A durable insertion counts as acknowledged even when the kill beat its `ack` line.
      const splice = log.find((e) => e.type === "agent/inbox/spliced")!
      const inserted = [Message.user("g", { id: "ghost" })]
      const ghost = { ...splice, seq: log.length, data: { ...(splice.data as object), inserted } } as SessionEvent
      assert.include(sessionViolations(journal([]), { ...closed, resumed: [...log, ghost] }),
        "acknowledged input ghost was lost (neither entered, discarded by a splice, nor pending)")

      // Cut inside m2's turn: the resume must append exactly Repair.closers of what was stored.
      const open = log.slice(0, log.findIndex((e) => e.type === "turn/end" && (e.data as { turn: number }).turn === 2))
      const unrepaired = sessionViolations(journal([]), { stored: open, resumed: open, pending: [] })
      const closers = Repair.closers(open)
      assert.isTrue(unrepaired.some((v) => v.includes(`not the ${closers.length} closers`)), unrepaired.join("\n"))
      const repaired = [...open, ...closers]
      assert.deepStrictEqual(sessionViolations(journal([]), { stored: open, resumed: repaired, pending: [] }), [])
      assert.isTrue(unrepaired.some((v) => v.includes("ends inside turn 2")), unrepaired.join("\n"))
      assert.include(sessionViolations(journal(["open verified"]), { stored: undefined, resumed: [], pending: [] }),
        "the session was acknowledged open, but nothing is stored")
    }))
})
