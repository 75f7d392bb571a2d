/**
 * Crash at every append boundary (SPEC §11): a scripted session (follow-ups, steers, tools, a
 * mid-stream cancel and a keep-inbox cancel) is recorded once; then every prefix of its log is
 * resumed in a fresh runtime, as a process restarted after a crash right there would. Each
 * resumed log must be the prefix plus exactly `Repair.closers(prefix)`, be sound (balanced turns
 * and steps, no dangling tool call, no lost or duplicated input) and take a follow-up normally.
 * The same over JSONL files whose last line was torn mid-write; and resuming bad files fails with
 * the typed error and leaves the file byte-identical.
 */
import { FileSystem } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { Context } from "effect"
import { Deferred, Effect, Either, Layer, Option, Stream } from "effect"
import type { AgentHandle } from "../src/Agent.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as Repair from "../src/Repair.js"
import type { SessionEvent, SessionHeader } from "../src/SessionEvent.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { endsCompleted, hasEntered, insertedIds, logViolations } from "./fixtures/faultyPersistence.js"
import { route, runtimeOf } from "./fixtures/runtime.js"
import { gate, lookup } from "./fixtures/tools.js"
import { VERSION } from "../src/SessionEvent.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

const ID = "crashing"

/**
 * The recorded session. Requests, in order: 1 `q1` → text + `lookup`; 2 → text; 3 `q2` → streams
 * "partial answer" then hangs (a steer `s1` waits, then a cancel: `s1` is canceled, the partial
 * text is logged `interrupted`); 4 `q3` → `gate` (a steer `s2` arrives while it runs); 5 → text
 * with `s2` entered; 6 `q4` → hangs (a follow-up `q5` queues, then a keep-inbox cancel); 7 `q5`
 * and 8 `q6` → text.
 */
const recordSession = Effect.gen(function*() {
  const storage = yield* SessionPersistence.makeMemoryStorage
  const entered = yield* Deferred.make<void>()
  const open = yield* Deferred.make<void>()
  const model = yield* Model.scripted([
    [Model.text("let me look"), Model.toolCall("c1", "lookup", "{\"key\":\"a\"}")],
    Model.text("a is known"),
    Model.hang("partial answer"),
    Model.toolCall("c2", "gate", "{}"),
    Model.text("steered"),
    Model.hang(""),
    Model.text("q5 answered"),
    Model.text("q6 answered")
  ])
  const runtime = yield* runtimeOf(
    AgentRuntime.layerMemory({ storage, instanceId: "original" }).pipe(Layer.provide(model.layer))
  )
  yield* Effect.gen(function*() {
    const registry = yield* AgentRegistry
    const handle = yield* registry.create({
      sessionId: ID,
      options: route,
      setup: (agent) =>
        Effect.all([agent.tools.register(lookup), agent.tools.register(gate(entered, open))], { discard: true })
    })
    const agent = handle.agent
    const events = yield* agent.subscribe
    const firstDelta = (turn: number) =>
      Stream.runHead(Stream.filter(events, (e) => e._tag === "ModelDelta" && e.turn === turn))

    yield* agent.followup(Message.user("q1", { id: "m-q1" }))
    yield* agent.whenIdle
    yield* agent.followup(Message.user("q2", { id: "m-q2" }))
    yield* firstDelta(2)
    yield* agent.steer(Message.user("s1", { id: "m-s1" }))
    yield* agent.cancel({ kind: "user" })
    yield* agent.whenIdle
    yield* agent.followup(Message.user("q3", { id: "m-q3" }))
    yield* Deferred.await(entered)
    yield* agent.steer(Message.user("s2", { id: "m-s2" }))
    yield* Deferred.succeed(open, undefined)
    yield* agent.whenIdle
    yield* agent.followup(Message.user("q4", { id: "m-q4" }))
    yield* model.awaitRequest(6)
    yield* agent.followup(Message.user("q5", { id: "m-q5" }))
    yield* agent.cancel({ kind: "user" }, { keepInbox: true })
    yield* agent.whenIdle
    yield* agent.followup(Message.user("q6", { id: "m-q6" }))
    yield* agent.whenIdle
    yield* handle.dispose
  }).pipe(Effect.provide(runtime.context), Effect.scoped)
  yield* runtime.close
  const stored = yield* Effect.provide(
    SessionPersistence.SessionPersistence,
    SessionPersistence.layerMemory(storage)
  ).pipe(Effect.flatMap((persistence) => persistence.read(Message.sessionId(ID).pipe(Either.getOrThrow))))
  return stored
})

/** What one resumed prefix looked like. */
interface Resumed {
  readonly events: ReadonlyArray<SessionEvent>
  readonly pending: ReadonlyArray<string>
  readonly afterFollowup: ReadonlyArray<SessionEvent>
}

/**
 * Resumes `id` in the runtime `context` (a fresh process), checks what it found, sends one more
 * follow-up and returns the logs before and after it.
 */
const resumeAndContinue = (context: Context.Context<AgentRuntime.Services>, id: string, label: string) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry
    // A prefix cut before the first request/config stores no route (RES-07/08): give it.
    const handle: AgentHandle = yield* registry.resume({ sessionId: id, options: route })
    const agent = handle.agent
    const events = yield* agent.session.events
    const pending = [...(yield* agent.inbox.nextStep), ...(yield* agent.inbox.nextTurn)].map((m) => m.id as string)
    yield* agent.followup(Message.user("after the restart", { id: `after-${label}` }))
    yield* agent.whenIdle
    const afterFollowup = yield* agent.session.events
    yield* handle.dispose
    return { events, pending, afterFollowup } satisfies Resumed
  }).pipe(Effect.provide(context), Effect.scoped)

/** The violations of one resumed prefix of `full`. */
const checkResumed = (full: ReadonlyArray<SessionEvent>, k: number, resumed: Resumed, label: string) => {
  const prefix = full.slice(0, k)
  const violations: Array<string> = []
  const expected = [...prefix, ...Repair.closers(prefix)]
  try {
    assert.deepStrictEqual(resumed.events, expected)
  } catch {
    violations.push(`the resumed log is not the prefix plus Repair.closers(prefix)`)
  }
  violations.push(...logViolations(resumed.events, { acknowledged: insertedIds(prefix), pending: resumed.pending }))
  violations.push(...logViolations(resumed.afterFollowup, { acknowledged: [...insertedIds(prefix), `after-${label}`] }))
  if (!endsCompleted(resumed.afterFollowup)) violations.push("the follow-up after the restart did not complete")
  if (!hasEntered(resumed.afterFollowup, `after-${label}`)) {
    violations.push("the follow-up after the restart never entered")
  }
  return violations.map((v) => `${label} (prefix ${k}): ${v}`)
}

/** A fresh memory storage holding `header` and `events`. */
const storageWith = (header: SessionHeader, events: ReadonlyArray<SessionEvent>) =>
  Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const persistence = yield* Effect.provide(
      SessionPersistence.SessionPersistence,
      SessionPersistence.layerMemory(storage, { instanceId: "seeding" })
    )
    yield* Effect.scoped(Effect.gen(function*() {
      const writer = yield* persistence.create(header)
      if (events.length > 0) yield* writer.append(events as [SessionEvent, ...Array<SessionEvent>])
    }))
    return storage
  })

const replyAfterRestart = Model.text("resumed fine")

describe("crash recovery", () => {
  it.scoped("SPEC §11 REP-02 RES-03 a crash at every append boundary resumes sound, loses no acknowledged input", () =>
    Effect.gen(function*() {
      const { events: full, header } = yield* recordSession
      // The recorded session itself is sound and covers what it should.
      assert.deepStrictEqual(logViolations(full, { acknowledged: insertedIds(full) }), [])
      const types = new Set(full.map((e) => e.type))
      for (const type of ["tool/call", "tool/result", "assistant/message", "request/config"]) {
        assert.isTrue(types.has(type), type)
      }
      const outcomes = full.flatMap((e) =>
        e.type === "agent/inbox/spliced" ? [(e.data as { readonly outcome?: string }).outcome ?? "inserted"] : []
      )
      assert.include(outcomes, "canceled")
      assert.isTrue(
        full.some((e) => e.type === "assistant/message" && (e.data as { readonly interrupted?: true }).interrupted)
      )

      const violations: Array<string> = []
      let cases = 0
      for (let k = 0; k <= full.length; k++) {
        const storage = yield* storageWith(header, full)
        yield* storage.truncate(header.id, k)
        const model = yield* Model.scripted(() => replyAfterRestart)
        const runtime = yield* runtimeOf(
          AgentRuntime.layerMemory({ storage, instanceId: `restart-${k}` }).pipe(Layer.provide(model.layer))
        )
        const resumed = yield* Effect.either(resumeAndContinue(runtime.context, ID, `memory-${k}`))
        yield* runtime.close
        cases++
        if (Either.isLeft(resumed)) {
          violations.push(`memory (prefix ${k}): resume or follow-up failed: ${String(resumed.left)}`)
          continue
        }
        violations.push(...checkResumed(full, k, resumed.right, `memory-${k}`))

      }
      // eslint-disable-next-line no-console
      console.log(
        `crash-recovery (memory): ${full.length} events, ${full.length + 1} append boundaries tried, ` +
          `${cases} cases, ${violations.length} violations`
      )
      assert.deepStrictEqual(violations, [])
    }))

  it.scoped("SPEC §11 the oracle flags an open turn, a dangling call, a duplicate and a lost input", () =>
    Effect.gen(function*() {
      const { events: full } = yield* recordSession
      const resequenced = (events: ReadonlyArray<SessionEvent>) =>
        events.map((e, seq) => ({ ...e, seq }) as SessionEvent)
      const without = (type: string) => {
        const index = full.findIndex((e) => e.type === type)
        return resequenced([...full.slice(0, index), ...full.slice(index + 1)])
      }
      const userMessage = full.find((e) => e.type === "user/message")!
      const flagged = (events: ReadonlyArray<SessionEvent>, acknowledged: ReadonlyArray<string>, text: string) =>
        assert.isTrue(logViolations(events, { acknowledged }).some((v) => v.includes(text)), text)

      assert.deepStrictEqual(logViolations(full, { acknowledged: insertedIds(full) }), [])
      flagged(full.slice(0, -1), [], "ends inside turn")
      flagged(without("tool/result"), [], "has 0 results")
      flagged(without("step/end"), [], "inside step")
      flagged(resequenced([...full, { ...userMessage }]), [], "entered twice")
      flagged(full, ["never-sent"], "acknowledged input never-sent was lost")
    }))

  it.scoped("SPEC §11 PERS-03 a JSONL log torn mid-line at every event resumes as its intact prefix", () =>
    Effect.gen(function*() {
      const { events: full, header } = yield* recordSession
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-crash-" })
      const violations: Array<string> = []
      let cases = 0
      for (let k = 0; k < full.length; k++) {
        const id = `torn-${k}`
        const intact = [{ ...header, id }, ...full.slice(0, k)].map((r) => JSON.stringify(r) + "\n").join("")
        const next = JSON.stringify(full[k])
        const file = `${directory}/${id}.jsonl`
        yield* fs.writeFileString(file, intact + next.slice(0, Math.ceil(next.length / 2)))
        const model = yield* Model.scripted(() => replyAfterRestart)
        const runtime = yield* runtimeOf(
          NodeFileSessionPersistence.layerRuntime({
            directory,
            durability: "buffered",
            instanceId: `restart-${k}`
          }).pipe(Layer.provide(model.layer))
        )
        const resumed = yield* Effect.either(resumeAndContinue(runtime.context, id, `file-${k}`))
        yield* runtime.close
        cases++
        if (Either.isLeft(resumed)) {
          violations.push(`file (prefix ${k}): resume or follow-up failed: ${String(resumed.left)}`)
          continue
        }
        violations.push(...checkResumed(full, k, resumed.right, `file-${k}`))
        // The torn bytes were cut off on disk; what was intact is still there, byte for byte.
        const text = yield* fs.readFileString(file)
        if (!text.startsWith(intact) || !text.endsWith("\n")) {
          violations.push(`file (prefix ${k}): the file was not repaired in place`)
        }
      }
      // eslint-disable-next-line no-console
      console.log(
        `crash-recovery (file, torn last line): ${full.length} boundaries tried, ${cases} cases, ` +
          `${violations.length} violations`
      )
      assert.deepStrictEqual(violations, [])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("SPEC §11 RES-11 resuming a bad file fails with its typed error and changes nothing", () =>
    Effect.gen(function*() {
      const { events: full, header } = yield* recordSession
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-bad-" })
      const line = (value: unknown) => JSON.stringify(value) + "\n"
      const body = (id: string) => [{ ...header, id }, ...full].map(line)
      const cases: ReadonlyArray<readonly [string, (id: string) => string, string]> = [
        // Cut inside a middle record: the rest of the file follows a broken line.
        ["truncated-middle", (id) => {
          const lines = body(id)
          return lines.slice(0, 5).join("") + lines[5]!.slice(0, 20) + "\n" + lines.slice(6).join("")
        }, "SessionCorrupt"],
        ["corrupted-middle", (id) => {
          const lines = body(id)
          return lines.slice(0, 8).join("") + line({ seq: 7, time: 0, type: "turn/start", data: { turn: "x" } }) +
            lines.slice(9).join("")
        }, "SessionCorrupt"],
        [
          "newer-version",
          (id) => [line({ ...header, id, version: VERSION + 1 }), ...body(id).slice(1)].join(""),
          "SessionFormatUnsupported"
        ],
        ["newer-event-type", (id) => {
          const lines = body(id)
          return lines.slice(0, 4).join("") + line({ seq: 3, time: 0, type: "turn/paused", data: {} }) +
            lines.slice(5).join("")
        }, "SessionFormatUnsupported"],
        [
          "foreign-json",
          () => line({ name: "some-package", version: "1.0.0" }) + line({ dependencies: {} }),
          "SessionCorrupt"
        ]
      ]
      let checked = 0
      for (const [name, content, expected] of cases) {
        const id = `bad-${name}`
        const file = `${directory}/${id}.jsonl`
        yield* fs.writeFileString(file, content(id))
        const before = yield* fs.readFile(file)
        const model = yield* Model.scripted(() => replyAfterRestart)
        const runtime = yield* runtimeOf(
          NodeFileSessionPersistence.layerRuntime({ directory, durability: "buffered" }).pipe(
            Layer.provide(model.layer)
          )
        )
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const failed = yield* Effect.flip(Effect.scoped(registry.resume({ sessionId: id })))
          assert.strictEqual(failed._tag, expected, name)
          assert.isTrue(Option.isNone(yield* registry.get(id)), name)
          // Neither the failed resume nor resumeOrCreate replaces what is stored (RES-11).
          const again = yield* Effect.flip(Effect.scoped(registry.resumeOrCreate({ sessionId: id, options: route })))
          assert.strictEqual(again._tag, expected, name)
        }).pipe(Effect.provide(runtime.context))
        yield* runtime.close
        assert.deepStrictEqual(yield* fs.readFile(file), before, name)
        const files = (yield* fs.readDirectory(directory)).filter((f) => f.startsWith(id))
        assert.deepStrictEqual(files, [`${id}.jsonl`], name)
        checked++
      }
      assert.strictEqual(checked, cases.length)
    }).pipe(Effect.provide(NodeContext.layer)))
})
