/**
 * The one lifecycle registry behind the SessionStore and the AgentRegistry, its state one `Ref`
 * (CORE-03): random scripts of enters, announcements (accepted, vetoed, detached while announcing)
 * and detaches (exact, stale, repeated) against a reference model of REG-01..05 / STORE-02..05.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, FastCheck, Option } from "effect"
import * as lifecycle from "../src/internal/lifecycle.js"

type Plan = "accept" | "veto" | "detachWhileAnnouncing"

interface Value {
  readonly key: string
  readonly plan: Plan
}

type Step =
  | { readonly op: "enter"; readonly key: string; readonly plan: Plan }
  | { readonly op: "announce"; readonly handle: number }
  | { readonly op: "detach"; readonly handle: number }

const keys = ["a", "b", "c"] as const
const Steps: FastCheck.Arbitrary<Array<Step>> = FastCheck.array(
  FastCheck.oneof(
    FastCheck.record({
      op: FastCheck.constant("enter" as const),
      key: FastCheck.constantFrom(...keys),
      plan: FastCheck.constantFrom<Plan>("accept", "veto", "detachWhileAnnouncing")
    }),
    FastCheck.record({ op: FastCheck.constant("announce" as const), handle: FastCheck.nat(12) }),
    FastCheck.record({ op: FastCheck.constant("detach" as const), handle: FastCheck.nat(12) })
  ),
  { maxLength: 40 }
)

/** The reference model: what is live, in which phase, and the events owed. */
interface ModelEntry {
  readonly handle: number
  readonly key: string
  phase: "entered" | "announced"
}

describe("internal lifecycle registry", () => {
  it.effect.prop(
    "CORE-03 REG-02..05 STORE-05 any script of enters, announcements and detaches keeps entries and events exact",
    [Steps],
    ([steps]) =>
      Effect.scoped(Effect.gen(function*() {
        const events: Array<string> = []
        const registry = yield* lifecycle.make<Value, void>({
          announced: (entry) => Effect.sync(() => void events.push(`created:${entry.key}:${entry.order}`)),
          disposed: (entry) => Effect.sync(() => void events.push(`disposed:${entry.key}:${entry.order}`))
        })
        const handles: Array<lifecycle.Entry<Value, void>> = []
        yield* registry.addHook((value) => {
          if (value.plan === "veto") return Effect.fail("vetoed")
          if (value.plan !== "detachWhileAnnouncing") return Effect.void
          const own = handles.find((entry) => entry.value === value)!
          return registry.detach(own)
        })

        const live = new Map<string, ModelEntry>()
        const expected: Array<string> = []
        const removeFromModel = (entry: ModelEntry, announced: boolean) => {
          live.delete(entry.key)
          if (announced) expected.push(`disposed:${entry.key}:${entry.handle}`)
        }

        for (const step of steps) {
          if (step.op === "enter") {
            const value: Value = { key: step.key, plan: step.plan }
            const entered = yield* Effect.either(registry.enter({
              key: step.key,
              value,
              parentOf: () => undefined,
              onEntered: (entry) => entry,
              onTaken: (taken) => taken
            }))
            const existing = live.get(step.key)
            if (existing !== undefined) {
              // REG-01/STORE-02: a live key is refused with the live entry, nothing changes
              assert.isTrue(entered._tag === "Left" && entered.left === handles[existing.handle])
              continue
            }
            assert.strictEqual(entered._tag, "Right")
            if (entered._tag === "Right") {
              assert.strictEqual(entered.right.order, handles.length)
              live.set(step.key, { handle: handles.length, key: step.key, phase: "entered" })
              handles.push(entered.right)
            }
          } else if (step.op === "announce") {
            const entry = handles[step.handle]
            const modelled = entry === undefined ? undefined : live.get(entry.key)
            // announcing what is not live, or twice, is a bug of the caller (a defect): not scripted
            if (entry === undefined || modelled?.handle !== step.handle || modelled.phase !== "entered") continue
            const exit = yield* Effect.exit(registry.announce(entry))
            expected.push(`created:${entry.key}:${step.handle}`)
            if (entry.value.plan === "accept") {
              assert.deepStrictEqual(exit, Exit.succeed(true))
              modelled.phase = "announced"
            } else {
              // REG-02 a veto fails after its rollback; REG-03 a detach while announcing is deferred
              assert.deepStrictEqual(
                Exit.isSuccess(exit) ? exit.value : "failed",
                entry.value.plan === "veto" ? "failed" : false
              )
              removeFromModel(modelled, true)
            }
          } else {
            const entry = handles[step.handle]
            if (entry === undefined) continue
            yield* registry.detach(entry)
            const modelled = live.get(entry.key)
            // REG-04: a stale detach never removes a replacement; REG-05: no disposal for an unannounced entry
            if (modelled?.handle === step.handle) removeFromModel(modelled, modelled.phase === "announced")
          }
        }

        assert.deepStrictEqual(events, expected)
        const entries = yield* registry.entries
        assert.deepStrictEqual(
          entries.map((entry) => entry.order),
          [...live.values()].map((entry) => entry.handle).sort((a, b) => a - b)
        )
        for (const key of keys) {
          const found = yield* registry.get(key)
          const modelled = live.get(key)
          const want = modelled === undefined ? undefined : handles[modelled.handle]
          assert.strictEqual(Option.getOrUndefined(found), want)
        }
      })),
    { fastCheck: { numRuns: 100 } }
  )
})
