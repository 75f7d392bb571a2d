/**
 * Fault injection (SPEC §11): a scripted multi-turn session with a tool — create, three
 * follow-ups, dispose; then resume, one follow-up, dispose — runs over a persistence that fails the
 * N-th open (`create`/`openWrite`) or the N-th writer append, for every N. Whatever fails:
 * - the failure reaches someone as a typed error: the caller (`create`, `resume`, a send), or, for
 *   a write inside a turn, the agent (`AgentError{code: "PERSISTENCE"}`, and later sends fail
 *   `AgentBroken`);
 * - nothing is left behind: no orphan session (stored or live), no lock, no registry entry, no
 *   half-published agent;
 * - a fresh process resumes what was stored into a sound log that lost no acknowledged input, and
 *   a follow-up then completes normally.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Effect, Exit, Fiber, Layer, Option, Schema, Scope, Stream } from "effect"
import type { AgentHandle, AgentSetup } from "../src/Agent.js"
import type { AgentEvent } from "../src/AgentEvent.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import * as Model from "../src/Model.js"
import * as SessionPersistence from "../src/SessionPersistence.js"
import { SessionStore } from "../src/SessionStore.js"
import * as Tool from "../src/Tool.js"
import * as Faulty from "./fixtures/faultyPersistence.js"
import { route } from "./fixtures/runtime.js"

const ID = "faulty"
const sessionId = Schema.decodeSync(Message.SessionId)(ID)

const lookup = Tool.make({
  name: "lookup",
  description: "Looks a key up.",
  parameters: Schema.Struct({ key: Schema.String }),
  run: ({ key }) => Effect.succeed(Tool.text(`value of ${key}`))
})

/**
 * Replies by content, so that a turn lost to a fault does not shift the replies of the next ones:
 * `q1` asks for one lookup, `q3` for two in parallel, a tool result gets an answer, anything else
 * a text.
 */
const reply = (request: Model.ModelRequest, n: number): Model.Reply => {
  const last = request.messages[request.messages.length - 1]
  if (last?.role === "tool") return Model.text("that settles it")
  let text = ""
  for (const message of request.messages) {
    if (message.role === "user" && message.source.kind === "user") text = Message.textOf(message.content)
  }
  switch (text) {
    case "q1":
      return [Model.text("let me look"), Model.toolCall(`c1-${n}`, "lookup", "{\"key\":\"a\"}")]
    case "q3":
      return [
        Model.toolCall(`c3a-${n}`, "lookup", "{\"key\":\"b\"}"),
        Model.toolCall(`c3b-${n}`, "lookup", "{\"key\":\"c\"}")
      ]
    default:
      return Model.text(`answer to ${text}`)
  }
}

/** Builds a runtime in its own Scope (closed by `close`, or with the caller's Scope). */
const runtimeOf = <E>(layer: Layer.Layer<AgentRuntime.Services, E>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    const context = yield* Layer.buildWithScope(layer, scope)
    return { context, close: Scope.close(scope, Exit.void) }
  })

/** What one step of the scenario did. */
interface Step {
  readonly name: string
  readonly phase: 1 | 2
  readonly isSend: boolean
  readonly exit: Exit.Exit<unknown, unknown>
  /** The fault was injected while this step ran. */
  readonly faulted: boolean
}

/** What a run recorded. */
interface Recording {
  readonly steps: Array<Step>
  /** Ids of the sends that were acknowledged. */
  readonly acknowledged: Array<string>
  readonly violations: Array<string>
}

/** `m-<text>`: the id of the follow-up `text`. */
const idOf = (text: string) => `m-${text}`

/**
 * The scenario, in the runtime of the context: phase 1 creates the agent, sends three follow-ups
 * and disposes it; phase 2 (when something was stored) resumes it, sends one follow-up and
 * disposes it. After each phase, and after a failed creation, nothing may be live.
 */
const scenario = (storage: SessionPersistence.MemoryStorage, counts: Faulty.FaultCounts, recording: Recording) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry
    const store = yield* SessionStore

    const nothingLive = (when: string) =>
      Effect.gen(function*() {
        if (Option.isSome(yield* registry.get(ID))) recording.violations.push(`${when}: the agent is still registered`)
        if ((yield* registry.list).length > 0) recording.violations.push(`${when}: the registry is not empty`)
        if (Option.isSome(yield* store.get(ID))) recording.violations.push(`${when}: the session is still live`)
        if ((yield* store.list).length > 0) recording.violations.push(`${when}: the session store is not empty`)
      })

    const step = <A, E>(phase: 1 | 2, name: string, isSend: boolean, effect: Effect.Effect<A, E>) =>
      Effect.gen(function*() {
        const before = counts.injected
        const exit = yield* Effect.exit(effect)
        recording.steps.push({ name, phase, isSend, exit, faulted: counts.injected > before })
        return exit
      })

    /** A follow-up, then waiting for the agent to settle (a fault may hit the turn it started). */
    const followup = (phase: 1 | 2, handle: AgentHandle, text: string) =>
      step(
        phase,
        `followup ${text}`,
        true,
        handle.agent.followup(Message.user(text, { id: idOf(text) })).pipe(
          Effect.tap(() => Effect.sync(() => recording.acknowledged.push(idOf(text)))),
          Effect.ensuring(handle.agent.whenIdle)
        )
      )

    const setup = (agent: AgentSetup) => agent.tools.register(lookup)

    const owner1 = yield* Scope.make()
    const created = yield* step(
      1,
      "create",
      false,
      registry.create({ sessionId: ID, options: route, setup }).pipe(Scope.extend(owner1))
    )
    if (Exit.isSuccess(created)) {
      for (const text of ["q1", "q2", "q3"]) yield* followup(1, created.value, text)
      yield* step(1, "dispose", false, created.value.dispose)
    } else {
      yield* nothingLive("right after the failed create")
      if ((yield* storage.events(sessionId)) !== undefined) {
        recording.violations.push("the failed create left a stored session behind")
      }
    }
    yield* Scope.close(owner1, Exit.void)
    yield* nothingLive("after phase 1")
    if (Exit.isFailure(created)) return

    const owner2 = yield* Scope.make()
    const resumed = yield* step(
      2,
      "resume",
      false,
      registry.resume({ sessionId: ID, options: route, setup }).pipe(Scope.extend(owner2))
    )
    if (Exit.isSuccess(resumed)) {
      yield* followup(2, resumed.value, "q4")
      yield* step(2, "dispose", false, resumed.value.dispose)
    } else {
      yield* nothingLive("right after the failed resume")
    }
    yield* Scope.close(owner2, Exit.void)
    yield* nothingLive("after phase 2")
  })

const failureTag = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "success"
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    return typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : "unknown failure"
  }
  return Cause.isDie(exit.cause) ? "defect" : "interrupted"
}

const isInjectedDefect = (exit: Exit.Exit<unknown, unknown>): boolean =>
  Exit.isFailure(exit) && Cause.isDie(exit.cause) && Cause.pretty(exit.cause).includes(Faulty.injectedDefect)

/**
 * What must hold of the steps: every step succeeds, except the faulted one, which fails with the
 * typed error (or the injected defect) — or, when the fault hit the turn a send started, the send
 * succeeded, the agent reported `AgentError{code: "PERSISTENCE"}` and every later send of that
 * phase fails `AgentBroken`.
 */
const stepViolations = (plan: Faulty.FaultPlan, recording: Recording, events: ReadonlyArray<AgentEvent>) => {
  const violations: Array<string> = []
  const expected = plan.kind === "defect" ? "the injected defect" : "PersistenceError"
  const typed = (exit: Exit.Exit<unknown, unknown>) =>
    plan.kind === "defect" ? isInjectedDefect(exit) : failureTag(exit) === "PersistenceError"
  let brokenPhase: 1 | 2 | undefined
  for (const s of recording.steps) {
    const outcome = failureTag(s.exit)
    if (s.faulted) {
      if (s.isSend && Exit.isSuccess(s.exit)) {
        // the fault hit the turn this send started
        const reported = events.some((e) => e._tag === "AgentError" && e.error.code === "PERSISTENCE")
        if (!reported) {
          violations.push(`${s.name}: a write of its turn failed but no AgentError{PERSISTENCE} was emitted`)
        }
        brokenPhase = s.phase
      } else if (!typed(s.exit)) {
        violations.push(`${s.name}: the fault surfaced as ${outcome}, expected ${expected}`)
      }
      continue
    }
    if (s.isSend && brokenPhase === s.phase) {
      if (outcome !== "AgentBroken") violations.push(`${s.name} on a broken agent: ${outcome}, expected AgentBroken`)
      continue
    }
    if (Exit.isFailure(s.exit)) violations.push(`${s.name} failed (${outcome}) though no fault hit it`)
  }
  return violations
}

/**
 * A fresh, fault-free process over the same storage: what was stored resumes into a sound log
 * holding every acknowledged input, and takes a follow-up that completes normally; a session that
 * was never stored can be created.
 */
const verify = (storage: SessionPersistence.MemoryStorage, created: boolean, recording: Recording) =>
  Effect.gen(function*() {
    const model = yield* Model.scripted(() => Model.text("verified"))
    const runtime = yield* runtimeOf(
      AgentRuntime.layerMemory({ storage, instanceId: "verifier" }).pipe(Layer.provide(model.layer))
    )
    const checked = yield* Effect.gen(function*() {
      const registry = yield* AgentRegistry
      if (!created) {
        const handle = yield* registry.create({ sessionId: ID, options: route })
        yield* handle.dispose
        return
      }
      const handle = yield* registry.resume({ sessionId: ID, options: route })
      const agent = handle.agent
      const pending = [...(yield* agent.inbox.nextStep), ...(yield* agent.inbox.nextTurn)].map((m) => m.id as string)
      const events = yield* agent.session.events
      recording.violations.push(
        ...Faulty.logViolations(events, { acknowledged: recording.acknowledged, pending }).map((v) =>
          `stored log: ${v}`
        )
      )
      yield* agent.followup(Message.user("final", { id: "m-final" }))
      yield* agent.whenIdle
      const after = yield* agent.session.events
      recording.violations.push(
        ...Faulty.logViolations(after, { acknowledged: [...recording.acknowledged, "m-final"] }).map((v) =>
          `after the final follow-up: ${v}`
        )
      )
      if (!Faulty.endsCompleted(after)) recording.violations.push("the final follow-up did not complete normally")
      yield* handle.dispose
    }).pipe(Effect.provide(runtime.context), Effect.scoped, Effect.exit)
    if (Exit.isFailure(checked)) {
      recording.violations.push(`a fresh process could not take over the session: ${Cause.pretty(checked.cause)}`)
    }
    yield* runtime.close
  })

/** One case: the scenario under `plan`, then the checks. */
const runCase = (plan: Faulty.FaultPlan) =>
  Effect.gen(function*() {
    const storage = yield* SessionPersistence.makeMemoryStorage
    const faulty = Faulty.make(plan)
    const model = yield* Model.scripted(reply)
    const runtime = yield* runtimeOf(
      AgentRuntime.layer.pipe(
        Layer.provideMerge(
          faulty.layer.pipe(Layer.provide(SessionPersistence.layerMemory(storage, { instanceId: "faulty" })))
        ),
        Layer.provide(model.layer)
      )
    )
    const recording: Recording = { steps: [], acknowledged: [], violations: [] }
    // the registry's feed ends when the runtime closes
    const feed = yield* Effect.provide(Effect.flatMap(AgentRegistry, (registry) => registry.subscribe), runtime.context)
    const collector = yield* Effect.fork(Stream.runCollect(feed))
    yield* scenario(storage, faulty.counts, recording).pipe(Effect.provide(runtime.context))
    yield* runtime.close
    const events = Chunk.toArray(yield* Fiber.join(collector))

    const created = recording.steps.some((s) => s.name === "create" && Exit.isSuccess(s.exit))
    if (plan.failAppend !== undefined || plan.failOpen !== undefined) {
      if (faulty.counts.injected !== 1) recording.violations.push(`${faulty.counts.injected} faults were injected`)
    }
    recording.violations.push(...stepViolations(plan, recording, events))
    yield* verify(storage, created, recording)
    const label = `${plan.kind ?? "error"} at ${
      plan.failOpen !== undefined ? `open #${plan.failOpen}` : `append #${plan.failAppend ?? "none"}`
    } [${faulty.counts.log.join("; ")}]`
    return {
      counts: faulty.counts,
      violations: recording.violations.map((v) => `${label}: ${v}`),
      steps: recording.steps
    }
  }).pipe(Effect.scoped)

describe("fault injection", () => {
  it.effect("SPEC §11 SES-02b PUB-07 RES-11 a typed failure of every open and every append is contained", () =>
    Effect.gen(function*() {
      const baseline = yield* runCase({})
      assert.deepStrictEqual(baseline.violations, [])
      assert.deepStrictEqual(baseline.steps.map((s) => [s.name, Exit.isSuccess(s.exit)]), [
        ["create", true],
        ["followup q1", true],
        ["followup q2", true],
        ["followup q3", true],
        ["dispose", true],
        ["resume", true],
        ["followup q4", true],
        ["dispose", true]
      ])
      const { appends, opens } = baseline.counts
      assert.strictEqual(opens, 2)

      const violations: Array<string> = []
      let cases = 0
      const outcomes = new Map<string, number>()
      for (let n = 1; n <= opens; n++) {
        const result = yield* runCase({ failOpen: n })
        cases++
        violations.push(...result.violations)
      }
      for (let n = 1; n <= appends; n++) {
        const result = yield* runCase({ failAppend: n })
        cases++
        violations.push(...result.violations)
        for (const s of result.steps) {
          if (!s.faulted) continue
          const how = s.isSend && Exit.isSuccess(s.exit) ? "agent broken" : `caller got ${failureTag(s.exit)}`
          outcomes.set(how, (outcomes.get(how) ?? 0) + 1)
        }
      }
      // eslint-disable-next-line no-console
      console.log(
        `fault-injection (typed errors): ${opens} opens + ${appends} appends tried, ${cases} cases, ` +
          `${violations.length} violations; outcomes ${JSON.stringify(Object.fromEntries(outcomes))}`
      )
      assert.deepStrictEqual(violations, [])
      // Both ways a failure surfaces were exercised.
      assert.isAbove(outcomes.get("agent broken") ?? 0, 0)
      assert.isAbove(outcomes.get("caller got PersistenceError") ?? 0, 0)
    }))

  it.effect("SPEC §11 §9 a defect in an open is a defect for the caller, and nothing is left behind", () =>
    Effect.gen(function*() {
      const violations: Array<string> = []
      for (let n = 1; n <= 2; n++) {
        const result = yield* runCase({ failOpen: n, kind: "defect" })
        violations.push(...result.violations)
      }
      // eslint-disable-next-line no-console
      console.log(`fault-injection (defects in opens): 2 cases, ${violations.length} violations`)
      assert.deepStrictEqual(violations, [])
    }))

  it.effect("SPEC §11 §9 a defect in any append surfaces and never hangs the agent", () =>
    Effect.gen(function*() {
      const baseline = yield* runCase({})
      const violations: Array<string> = []
      for (let n = 1; n <= baseline.counts.appends; n++) {
        violations.push(...(yield* runCase({ failAppend: n, kind: "defect" })).violations)
      }
      // eslint-disable-next-line no-console
      console.log(
        `fault-injection (defects in appends): ${baseline.counts.appends} cases, ${violations.length} violations`
      )
      assert.deepStrictEqual(violations, [])
    }))
})
