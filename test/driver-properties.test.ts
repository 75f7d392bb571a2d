/**
 * Property tests of the driver (SPEC §11): DLV-04 and random interleavings of the verbs against a
 * scripted model that mixes text and tool calls. After `whenIdle` the log is valid (balanced turns
 * and steps, no dangling tool call), every accepted MessageId has exactly one fate (INB-07), and
 * the agent is idle.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, FastCheck as fc, Ref, Schema } from "effect"
import * as internalInbox from "../src/internal/agent/inbox.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Session from "../src/Session.js"
import * as Tool from "../src/Tool.js"
import {
  idFates,
  logViolations,
  makeHarness,
  msg,
  ofType,
  recordEvents,
  statusesOf,
  turnEnds,
  userTexts,
  yieldingModel
} from "./fixtures/driverHarness.js"

const lastText = (request: Model.ModelRequest) => {
  const last = request.messages.at(-1)
  return last === undefined ? "" : Message.textOf(last.content)
}

describe("driver properties", () => {
  it.effect.prop(
    "DLV-04 one turn per follow-up, FIFO, numbered consecutively; each burst is one running, idle bracket",
    [fc.array(fc.array(fc.string({ minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 4 }), {
      minLength: 1,
      maxLength: 3
    })],
    ([bursts]) =>
      Effect.gen(function*() {
        const h = yield* makeHarness((request) => Model.text(`re: ${lastText(request)}`))
        const gate = yield* Ref.make(yield* Deferred.make<void>())
        const handle = yield* h.create("fifo", {
          // each burst's first turn waits at its first step until the whole burst was sent
          setup: (a) =>
            a.hooks.preStep((info) =>
              Effect.flatMap(Ref.get(gate), Deferred.await).pipe(
                Effect.as<Tool.PreStepDecision>({ kind: "enter", messages: info.messages })
              )
            )
        })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        const sent: Array<string> = []
        for (let b = 0; b < bursts.length; b++) {
          const release = yield* Deferred.make<void>()
          yield* Ref.set(gate, release)
          const burst = bursts[b]!
          for (let i = 0; i < burst.length; i++) {
            yield* agent.followup(msg(`b${b}-${i}`, burst[i]!))
            sent.push(burst[i]!)
          }
          yield* Deferred.succeed(release, undefined)
          yield* agent.whenIdle
        }
        const log = yield* agent.session.events
        const turns = ofType(log, "turn/start").map((e) => e.data.turn)
        assert.deepStrictEqual(turns, sent.map((_, i) => i + 1))
        assert.deepStrictEqual(userTexts(log), sent)
        // exactly its own message in each turn
        assert.deepStrictEqual(
          ofType(log, "user/message").map((e) => e.data.turn),
          sent.map((_, i) => i + 1)
        )
        assert.isTrue(turnEnds(log).every((reason) => reason.kind === "completed"))
        assert.deepStrictEqual(logViolations(log), [])
        yield* handle.dispose
        assert.deepStrictEqual(statusesOf(yield* events), bursts.flatMap(() => ["running", "idle"]))
      }).pipe(Effect.scoped),
    { fastCheck: { numRuns: 25 } }
  )

  const Op = fc.oneof(
    fc.record({
      kind: fc.constantFrom("followup" as const, "steer" as const, "inject" as const),
      yields: fc.nat({ max: 6 })
    }),
    fc.record({ kind: fc.constant("cancel" as const), keepInbox: fc.boolean(), yields: fc.nat({ max: 6 }) }),
    fc.record({ kind: fc.constant("whenIdle" as const), yields: fc.nat({ max: 2 }) })
  )

  it.effect.prop(
    "DLV-04 INB-07 CAN-05 random interleavings of followup/steer/inject/cancel/whenIdle leave a valid log, no lost or duplicated id, idle",
    [fc.array(Op, { minLength: 1, maxLength: 14 }), fc.nat({ max: 2 })],
    ([ops, shape]) =>
      Effect.gen(function*() {
        // the model alternates plain text with tool calls (parallel pairs and an exclusive one)
        const h = yield* makeHarness((request, n) => {
          const last = request.messages.at(-1)
          if (last?.role === "tool") return Model.text(`after tools ${n}`)
          switch ((n + shape) % 3) {
            case 0:
              return [
                Model.text(`calling ${n}`),
                Model.toolCall(`c${n}a`, "work", "{}"),
                Model.toolCall(`c${n}b`, "work", "{}")
              ]
            case 1:
              return [Model.toolCall(`c${n}x`, "solo", "{}"), Model.toolCall(`c${n}y`, "work", "{}")]
            default:
              return [Model.reasoning("thinking"), Model.text(`answer ${n}`)]
          }
        }, { wrapModel: yieldingModel })
        const busy = (label: string) =>
          Effect.gen(function*() {
            for (let i = 0; i < 3; i++) yield* Effect.yieldNow()
            return Tool.text(label)
          })
        const work = Tool.make({
          name: "work",
          description: "works a while",
          parameters: Schema.Struct({}),
          run: () => busy("worked")
        })
        const solo = Tool.make({
          name: "solo",
          description: "works alone",
          mode: "exclusive",
          parameters: Schema.Struct({}),
          run: () => busy("alone")
        })
        const handle = yield* h.create("random", {
          setup: (a) => Effect.all([a.tools.register(work), a.tools.register(solo)], { discard: true })
        })
        const agent = handle.agent
        const events = yield* recordEvents(agent)
        const accepted: Array<string> = []
        for (let i = 0; i < ops.length; i++) {
          const op = ops[i]!
          for (let y = 0; y < op.yields; y++) yield* Effect.yieldNow()
          const id = `m${i}`
          switch (op.kind) {
            case "followup":
            case "steer":
            case "inject": {
              yield* agent[op.kind](msg(id, `${op.kind} ${i}`))
              accepted.push(id)
              break
            }
            case "cancel":
              yield* agent.cancel({ kind: "user" }, { keepInbox: op.keepInbox })
              break
            case "whenIdle":
              yield* agent.whenIdle
              break
          }
        }
        yield* agent.whenIdle
        assert.strictEqual(yield* agent.status, "idle")
        const log = yield* agent.session.events
        assert.deepStrictEqual(logViolations(log), [])
        const pending = [...(yield* agent.inbox.nextStep), ...(yield* agent.inbox.nextTurn)]
        const fates = idFates(log, pending)
        for (const id of accepted) {
          assert.strictEqual(fates.get(id)?.length, 1, `${id}: ${JSON.stringify(fates.get(id))}`)
        }
        assert.strictEqual(fates.size, accepted.length)
        // the live projection is the replay of the log, and the history is the log's
        const replayed = yield* internalInbox.make(agent.session)
        assert.deepStrictEqual([...(yield* replayed.nextStep), ...(yield* replayed.nextTurn)], pending)
        assert.deepStrictEqual(yield* agent.session.messages, Session.deriveMessages(log))
        // every request carried the history of some prefix of the log (REQ-03): nothing lost or repeated
        const histories = new Set<string>()
        for (let k = 0; k <= log.length; k++) histories.add(JSON.stringify(Session.deriveMessages(log.slice(0, k))))
        for (const request of yield* h.model.requests) assert.isTrue(histories.has(JSON.stringify(request.messages)))
        yield* handle.dispose
        const statuses = statusesOf(yield* events)
        statuses.forEach((status, i) => assert.strictEqual(status, i % 2 === 0 ? "running" : "idle"))
        assert.strictEqual(statuses.length % 2, 0)
      }).pipe(Effect.scoped),
    { fastCheck: { numRuns: 60 } }
  )
})
