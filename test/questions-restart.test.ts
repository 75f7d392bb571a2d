/**
 * HIL-03 / HIL-04 across a restart, on real files: a question round (ask → answer → result) is
 * recorded, then each prefix of it — cut at an append boundary, as a crash leaves it — is resumed in
 * a fresh runtime. A prefix that ends while the tool waits in `Tool.ask` resumes with its call left
 * open: the tool runs again from its start, the logged question is not asked again, and an answer
 * given after the restart reaches it. A prefix past the answer is repaired by the v1 rules (the call's
 * outcome is unknown) and asks nothing again.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber, Layer, Option, Schema, Stream } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as Repair from "../src/Repair.js"
import type { SessionEvent, SessionHeader } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import { route, runtimeOf } from "./fixtures/runtime.js"

const ID = "asking"

/** How often the tool's body started: what runs before an `ask` runs again after a restart. */
let started = 0

const sizeTool = Tool.make({
  name: "size",
  description: "Asks a person for a size",
  parameters: Schema.Struct({}),
  run: () =>
    Effect.gen(function*() {
      started++
      const answer = yield* Tool.ask({ question: "How big?", schema: Schema.Struct({ size: Schema.Int }) })
      return Tool.text(`size ${answer.size}`)
    })
})

const script = [Model.toolCall("c1", "size", "{}"), Model.text("done")]

const fileRuntime = (directory: string, instanceId: string, replies: Parameters<typeof Model.scripted>[0] = script) =>
  Effect.gen(function*() {
    const model = yield* Model.scripted(replies)
    return yield* runtimeOf(
      NodeFileSessionPersistence.layerRuntime({ directory, durability: "buffered", instanceId }).pipe(
        Layer.provide(model.layer)
      )
    )
  })

const countOf = (events: ReadonlyArray<SessionEvent>, type: string) => events.filter((e) => e.type === type).length

/** Records one whole question round in `directory`: the tool asks, the answer 3 comes, the turn completes. */
const record = (directory: string) =>
  Effect.gen(function*() {
    const runtime = yield* fileRuntime(directory, "recording")
    yield* Effect.gen(function*() {
      const registry = yield* AgentRegistry
      const { agent, dispose } = yield* registry.create({
        sessionId: ID,
        options: route,
        setup: (a) => a.tools.register(sizeTool)
      })
      const events = yield* agent.subscribe
      const asked = yield* Effect.fork(Stream.runHead(Stream.filter(events, (e) => e._tag === "InputRequested")))
      const run = yield* Effect.fork(agent.run("go"))
      const requested = Option.getOrThrow(yield* Fiber.join(asked))
      if (requested._tag !== "InputRequested") throw new Error("expected InputRequested")
      yield* agent.respond(requested.requestId, { size: 3 })
      yield* Fiber.join(run)
      yield* dispose
    }).pipe(Effect.provide(runtime.context), Effect.scoped)
    yield* runtime.close
    const persistence = yield* Effect.provide(
      SessionPersistence.SessionPersistence,
      NodeFileSessionPersistence.layer({ directory, durability: "buffered", readOnly: true })
    )
    return yield* persistence.read(Either.getOrThrow(Message.sessionId(ID)))
  })

const line = (record: unknown) => JSON.stringify(record) + "\n"

describe("HIL-03 HIL-04 questions across a restart (real files)", () => {
  it.scoped("HIL-07 HIL-03 a crash at every append boundary of a question round: a pending question is answered after the restart, nothing is asked twice", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const recording = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-ask-record-" })
      const { events: full, header } = yield* record(recording)
      assert.strictEqual(started, 1)
      const requestedAt = full.findIndex((e) => e.type === "tool/input-requested")
      const providedAt = full.findIndex((e) => e.type === "tool/input-provided")
      const resultAt = full.findIndex((e) => e.type === "tool/result")
      assert.isTrue(0 < requestedAt && requestedAt < providedAt && providedAt < resultAt)
      const requestId = (full[requestedAt]!.data as { readonly requestId: string }).requestId

      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-ask-crash-" })
      // prefixes that hold the question and not the tool's result
      for (let k = requestedAt + 1; k <= resultAt; k++) {
        const id = `cut-${k}`
        const prefix = full.slice(0, k)
        yield* fs.writeFileString(`${directory}/${id}.jsonl`, [{ ...header, id } as SessionHeader, ...prefix].map(line).join(""))
        // the model was asked once before the crash: after it, it only answers the step after the tool
        const runtime = yield* fileRuntime(directory, `restart-${id}`, [Model.text("done")])
        started = 0
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const { agent, dispose } = yield* registry.resume({
            sessionId: id,
            options: route,
            setup: (a) => a.tools.register(sizeTool)
          })
          const resumed = yield* agent.session.events
          if (k <= providedAt) {
            // the question is still pending: nothing repaired, the call is run again and waits in ask
            assert.deepStrictEqual(Repair.closers(prefix), [], `${id}: closers`)
            assert.deepStrictEqual(resumed, prefix, `${id}: the resumed log is the prefix`)
            const pending = yield* agent.pending
            assert.deepStrictEqual(pending.map((item) => item._tag === "Question" ? item.requestId : item.callId), [requestId])
            const decision = yield* agent.respond(requestId, { size: 4 })
            assert.isFalse(decision.duplicate)
            const result = yield* agent.awaitTurn(1)
            assert.strictEqual(result.text, "done", id)
            const after = yield* agent.session.events
            assert.strictEqual(countOf(after, "tool/input-requested"), 1, `${id}: asked once`)
            assert.strictEqual(countOf(after, "tool/call"), 1, `${id}: dispatched once`)
            assert.strictEqual(started, 1, `${id}: the tool ran again from its start, once`)
            const toolResult = after.find((e) => e.type === "tool/result")!.data as {
              readonly message: { readonly content: ReadonlyArray<{ readonly text: string }> }
            }
            assert.strictEqual(toolResult.message.content[0]!.text, "size 4")
          } else {
            // answered before the crash, no result: the v1 rule for a call interrupted mid-run
            assert.deepStrictEqual(resumed, [...prefix, ...Repair.closers(prefix)], `${id}: prefix plus closers`)
            const toolResult = resumed.find((e) => e.type === "tool/result")!.data as {
              readonly error?: { readonly code: string }
            }
            assert.strictEqual(toolResult.error?.code, "TOOL_OUTCOME_UNKNOWN")
            assert.strictEqual(countOf(resumed, "tool/input-requested"), 1, `${id}: asked once`)
            assert.strictEqual(started, 0, `${id}: the tool did not run again`)
            assert.deepStrictEqual(yield* agent.pending, [])
          }
          yield* dispose
        }).pipe(Effect.provide(runtime.context), Effect.scoped)
        yield* runtime.close
      }
    }).pipe(Effect.provide(NodeContext.layer)), 120_000)
})
