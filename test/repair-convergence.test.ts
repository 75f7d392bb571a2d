/**
 * Crash repair converges (DUR-12): a crash inside the repair's own write leaves a log the next
 * resume repairs to the same result, and a repaired log is never written again.
 *
 * A session is recorded once with the real driver (follow-ups, a large message, a tool, a steer
 * while a tool runs). For every prefix of its log that ends inside a turn, the repair batch
 * `Repair.closers(prefix)` is cut after each of its records, with and without a torn half of the
 * next record behind the cut — every byte prefix of the batch is one of these, since an unterminated
 * last record is dropped as a torn tail (PERS-03, DUR-11). Each cut file is resumed in a fresh
 * runtime: the result must be the prefix plus the whole batch, sound, and a second resume must not
 * change a byte.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Either, Layer, Schema } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Repair from "../src/Repair.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { insertedIds, logViolations } from "./fixtures/faultyPersistence.js"
import { route, runtimeOf } from "./fixtures/runtime.js"
import { gate, lookup } from "./fixtures/tools.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

const ID = "converging"

/** Runs `body` with a runtime built in a Scope of its own, closed afterwards. */
const withRuntime = <A, E>(
  layer: Layer.Layer<AgentRuntime.Services, unknown>,
  body: Effect.Effect<A, E, AgentRuntime.Services>
) =>
  Effect.flatMap(runtimeOf(layer), (runtime) => Effect.provide(body, runtime.context).pipe(Effect.ensuring(runtime.close)))

/** The recorded session: q1 → lookup → text; q2 (a large message) → text; q3 → gate, steered by s1 → text. */
const recordSession = Effect.gen(function*() {
  const storage = yield* SessionPersistence.makeMemoryStorage
  const entered = yield* Deferred.make<void>()
  const open = yield* Deferred.make<void>()
  const model = yield* Model.scripted([
    Model.toolCall("c1", "lookup", "{\"key\":\"a\"}"),
    Model.text("a is known"),
    Model.text("that was long"),
    Model.toolCall("c2", "gate", "{}"),
    Model.text("steered")
  ])
  yield* withRuntime(
    AgentRuntime.layerMemory({ storage, instanceId: "original" }).pipe(Layer.provide(model.layer)),
    Effect.gen(function*() {
      const registry = yield* AgentRegistry
      const handle = yield* registry.create({
        sessionId: ID,
        options: route,
        setup: (agent) =>
          Effect.all([agent.tools.register(lookup), agent.tools.register(gate(entered, open))], { discard: true })
      })
      const agent = handle.agent
      yield* agent.followup(Message.user("q1", { id: "m-q1" }))
      yield* agent.whenIdle
      yield* agent.followup(Message.user("x".repeat(4_000), { id: "m-q2" }))
      yield* agent.whenIdle
      yield* agent.followup(Message.user("q3", { id: "m-q3" }))
      yield* Deferred.await(entered)
      yield* agent.steer(Message.user("s1", { id: "m-s1" }))
      yield* Deferred.succeed(open, undefined)
      yield* agent.whenIdle
      yield* handle.dispose
    }).pipe(Effect.scoped)
  )
  const persistence = yield* Effect.provide(
    SessionPersistence.SessionPersistence,
    SessionPersistence.layerMemory(storage)
  )
  return yield* persistence.read(Schema.decodeSync(Message.SessionId)(ID))
})

/** Resumes `id` from the files of `directory` in a fresh runtime; returns the log and the pending ids. */
const resumeOnce = (directory: string, id: string, instanceId: string) =>
  withRuntime(
    NodeFileSessionPersistence.layerRuntime({ directory, durability: "buffered", instanceId }).pipe(
      Layer.provide(Layer.unwrapScoped(Effect.map(Model.scripted([]), (model) => model.layer)))
    ),
    Effect.gen(function*() {
      const registry = yield* AgentRegistry
      const handle = yield* registry.resume({ sessionId: id, options: route })
      const events = yield* handle.agent.session.events
      const pending = [...(yield* handle.agent.inbox.nextStep), ...(yield* handle.agent.inbox.nextTurn)]
      yield* handle.dispose
      return { events, pending: pending.map((message) => message.id as string) }
    }).pipe(Effect.scoped)
  )

const line = (record: unknown) => JSON.stringify(record) + "\n"

describe("repair convergence (DUR-12)", () => {
  it.scoped("DUR-12 a crash at any byte of the repair's own write resumes to the same repaired log; a repaired log is not written again", () =>
    Effect.gen(function*() {
      const { events: full, header } = yield* recordSession
      assert.deepStrictEqual(logViolations(full, { acknowledged: insertedIds(full) }), [])
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-converge-" })
      const violations: Array<string> = []
      let cases = 0
      let restoring = 0
      for (let k = 1; k <= full.length; k++) {
        const prefix = full.slice(0, k)
        const batch = Repair.closers(prefix)
        if (batch.length === 0) continue
        if (batch.some((event) => event.type === "agent/inbox/spliced")) restoring++
        const expected = [...prefix, ...batch]
        // j records of the batch survived; `torn` leaves half of the next one behind them
        for (let j = 1; j <= batch.length; j++) {
          for (const torn of j < batch.length ? [false, true] : [false]) {
            const id = `c-${k}-${j}${torn ? "-torn" : ""}`
            const file = `${directory}/${id}.jsonl`
            const survived = batch.slice(0, j).map(line).join("")
            const tail = torn ? line(batch[j]).slice(0, Math.ceil(line(batch[j]).length / 2)) : ""
            yield* fs.writeFileString(file, [{ ...header, id }, ...prefix].map(line).join("") + survived + tail)
            cases++
            const label = `prefix ${k}, ${j}/${batch.length} closers${torn ? " + torn half" : ""}`
            const first = yield* Effect.either(resumeOnce(directory, id, `first-${id}`))
            if (Either.isLeft(first)) {
              violations.push(`${label}: resume failed: ${String(first.left)}`)
              continue
            }
            if (JSON.stringify(first.right.events) !== JSON.stringify(expected)) {
              violations.push(`${label}: the resumed log is not the prefix plus the whole repair batch`)
            }
            violations.push(
              ...logViolations(first.right.events, { acknowledged: insertedIds(prefix), pending: first.right.pending })
                .map((v) => `${label}: ${v}`)
            )
            const repaired = yield* fs.readFileString(file)
            const second = yield* Effect.either(resumeOnce(directory, id, `second-${id}`))
            if (Either.isLeft(second)) violations.push(`${label}: the second resume failed: ${String(second.left)}`)
            if ((yield* fs.readFileString(file)) !== repaired) violations.push(`${label}: the second resume wrote`)
          }
        }
      }
      // eslint-disable-next-line no-console
      console.log(
        `repair convergence: ${full.length} prefixes, ${cases} cut repair batches (${restoring} prefixes put input back), ` +
          `${violations.length} violations`
      )
      assert.isAbove(restoring, 0, "some prefixes must put claimed input back")
      assert.deepStrictEqual(violations, [])
    }).pipe(Effect.provide(NodeContext.layer)), 180_000)
})
