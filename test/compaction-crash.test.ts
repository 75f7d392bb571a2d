/**
 * CMP-01 with crashes: a session whose fourth turn compacts (then calls a tool) is recorded on real
 * files; then every prefix of that turn's log — cut cleanly at an append boundary, or with the next
 * record torn mid-line as a crash mid-write leaves it — is resumed from a JSONL file in a fresh
 * runtime. The resumed log must be the intact prefix plus `Repair.closers` (REP-02, RES-03), hold no
 * partial compaction (a compaction is one record: present whole, or absent), derive its history
 * from the summary when the compaction survived, and take a follow-up normally.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { Context } from "effect"
import { Effect, Either, Layer, Schema } from "effect"
import { AgentRegistry } from "../src/AgentRegistry.js"
import type * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as Repair from "../src/Repair.js"
import * as Session from "../src/Session.js"
import type { SessionHeader } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import * as Tool from "../src/Tool.js"
import {
  compactions,
  isSummarizerRequest,
  lastUserText,
  long,
  summarizingScript,
  withoutUsage
} from "./fixtures/compaction.js"
import { endsCompleted, hasEntered, insertedIds, logViolations } from "./fixtures/faultyPersistence.js"
import { route, runtimeOf } from "./fixtures/runtime.js"

const ID = "compacting"

/** 200 tokens, compacting above half, keeping the last closed turn (the byte estimate decides). */
const options = { ...route, contextWindow: 200, compaction: { threshold: 0.5, keepLastTurns: 1 } } as const

const lookup = Tool.make({
  name: "lookup",
  description: "looks a key up",
  parameters: Schema.Struct({ key: Schema.String }),
  run: ({ key }) => Effect.succeed(Tool.text(`${key} is known`))
})

/** Follow-ups starting with "t" get a tool call first. */
const script = () => {
  const summaries = summarizingScript()
  return (request: Model.ModelRequest, n: number): Model.Reply =>
    !isSummarizerRequest(request) && request.messages.at(-1)?.role === "user" && lastUserText(request).startsWith("t")
      ? Model.toolCall(`c${n}`, "lookup", "{\"key\":\"k\"}")
      : summaries(request)
}

/** A runtime over JSONL files in `directory` and a fresh scripted model that reports no usage. */
const fileRuntime = (directory: string, instanceId: string) =>
  Effect.gen(function*() {
    const model = yield* Model.scripted(script())
    const layer = NodeFileSessionPersistence.layerRuntime({ directory, durability: "buffered", instanceId }).pipe(
      Layer.provide(Layer.effect(Model.Model, Effect.map(Model.Model, withoutUsage)).pipe(Layer.provide(model.layer)))
    )
    return { runtime: yield* runtimeOf(layer), model }
  })

/** Records the session: turns q1..q3, then t4, which compacts at its first step and calls a tool. */
const record = (directory: string) =>
  Effect.gen(function*() {
    const { runtime } = yield* fileRuntime(directory, "recording")
    yield* Effect.gen(function*() {
      const registry = yield* AgentRegistry
      const { agent, dispose } = yield* registry.create({
        sessionId: ID,
        options,
        setup: (a) => a.tools.register(lookup)
      })
      for (const id of ["q1", "q2", "q3", "t4"]) {
        yield* agent.followup(long(id, 80))
        yield* agent.whenIdle
      }
      yield* dispose
    }).pipe(Effect.provide(runtime.context), Effect.scoped)
    yield* runtime.close
    const persistence = yield* Effect.provide(
      SessionPersistence.SessionPersistence,
      NodeFileSessionPersistence.layer({ directory, durability: "buffered", readOnly: true })
    )
    return yield* persistence.read(Either.getOrThrow(Message.sessionId(ID)))
  })

/** Resumes `id` from `directory` in a fresh runtime, then sends one follow-up. */
const resumeAndContinue = (context: Context.Context<AgentRuntime.Services>, id: string) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry
    const { agent, dispose } = yield* registry.resume({
      sessionId: id,
      options,
      setup: (a) => a.tools.register(lookup)
    })
    const events = yield* agent.session.events
    const messages = yield* agent.session.messages
    const pending = [...(yield* agent.inbox.nextStep), ...(yield* agent.inbox.nextTurn)].map((m): string => m.id)
    yield* agent.followup(Message.user("after the restart", { id: "after" }))
    yield* agent.whenIdle
    const afterFollowup = yield* agent.session.events
    yield* dispose
    return { events, messages, pending, afterFollowup }
  }).pipe(Effect.provide(context), Effect.scoped)

const line = (record: unknown) => JSON.stringify(record) + "\n"

describe("compaction and crashes (CMP-01)", () => {
  it.scoped("CMP-01 REP-02 RES-03 PERS-03 a crash at every append boundary of a compacting turn, on files, leaves no partial compaction", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const recording = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-cmp-record-" })
      const { events: full, header } = yield* record(recording)
      assert.deepStrictEqual(logViolations(full, { acknowledged: insertedIds(full) }), [])
      // turn 3 compacts (the tool definitions count too), and turn 4, the one crashed at every boundary
      const earlier = compactions(full).slice(0, -1)
      const recorded = compactions(full).at(-1)
      assert.isDefined(recorded)
      assert.strictEqual(earlier.length, 1)
      const turnStart = full.findIndex((e) =>
        e.type === "turn/start" && (e.data as { readonly turn: number }).turn === 4
      )
      const turnEnd = full.length - 1
      // the compacting turn: compaction, then a tool call and a second step
      assert.isTrue(turnStart < recorded!.seq && recorded!.seq < turnEnd)
      assert.isTrue(full.slice(recorded!.seq).some((e) => e.type === "tool/result"))

      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-cmp-crash-" })
      const violations: Array<string> = []
      let cases = 0
      for (let k = turnStart; k <= full.length; k++) {
        for (const torn of k < full.length ? [false, true] : [false]) {
          const id = `${torn ? "torn" : "cut"}-${k}`
          const label = `${id} (prefix ${k}${torn ? `, ${full[k]!.type} torn` : ""})`
          const prefix = full.slice(0, k)
          const intact = [{ ...header, id } as SessionHeader, ...prefix].map(line).join("")
          const next = torn ? JSON.stringify(full[k]) : ""
          const file = `${directory}/${id}.jsonl`
          yield* fs.writeFileString(file, intact + next.slice(0, Math.ceil(next.length / 2)))
          const { runtime } = yield* fileRuntime(directory, `restart-${id}`)
          const resumed = yield* Effect.either(resumeAndContinue(runtime.context, id))
          yield* runtime.close
          cases++
          if (Either.isLeft(resumed)) {
            violations.push(`${label}: resume or follow-up failed: ${String(resumed.left)}`)
            continue
          }
          const { afterFollowup, events, messages, pending } = resumed.right
          try {
            assert.deepStrictEqual(events, [...prefix, ...Repair.closers(prefix)])
          } catch {
            violations.push(`${label}: the resumed log is not the intact prefix plus its closers`)
          }
          // a compaction is whole or absent: the one recorded, exactly, if its record was complete
          const survived = compactions(events)
          const expected = recorded!.seq < k ? [...earlier, recorded!] : earlier
          try {
            assert.deepStrictEqual(survived, expected)
          } catch {
            violations.push(`${label}: compactions ${JSON.stringify(survived)}, not ${JSON.stringify(expected)}`)
          }
          try {
            assert.deepStrictEqual(messages, Session.deriveMessages(events))
          } catch {
            violations.push(`${label}: the resumed history is not the log's`)
          }
          const startsWithSummary = messages[0]?.id === `compacted:${recorded!.seq}`
          if (startsWithSummary !== recorded!.seq < k) {
            violations.push(`${label}: the history ${startsWithSummary ? "starts" : "does not start"} with the summary`)
          }
          violations.push(
            ...logViolations(events, { acknowledged: insertedIds(prefix), pending }).map((v) => `${label}: ${v}`),
            ...logViolations(afterFollowup, { acknowledged: [...insertedIds(prefix), "after"] }).map((v) =>
              `${label} after the follow-up: ${v}`
            )
          )
          if (!endsCompleted(afterFollowup) || !hasEntered(afterFollowup, "after")) {
            violations.push(`${label}: the follow-up after the restart did not complete`)
          }
          // still over the threshold: the follow-up's turn compacts again if the crash lost the compaction
          const latest = compactions(afterFollowup).at(-1)
          if (latest === undefined || latest.data.upTo < recorded!.data.upTo) {
            violations.push(`${label}: the follow-up did not compact as far as the lost compaction`)
          }
          // the torn bytes were cut off on disk; what was intact is still there, byte for byte
          const text = yield* fs.readFileString(file)
          if (!text.startsWith(intact) || !text.endsWith("\n")) {
            violations.push(`${label}: the file was not repaired in place`)
          }
        }
      }
      assert.strictEqual(cases, 2 * (full.length - turnStart) + 1)
      assert.deepStrictEqual(violations, [])
    }).pipe(Effect.provide(NodeContext.layer)))
})
