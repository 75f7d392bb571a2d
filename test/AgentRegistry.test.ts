import { assert, describe, it } from "@effect/vitest"
import {
  Cause,
  Chunk,
  Deferred,
  Effect,
  Either,
  Exit,
  Fiber,
  FiberRef,
  Logger,
  Option,
  Ref,
  Scope,
  Stream
} from "effect"
import type { Agent } from "../src/Agent.js"
import * as AgentError from "../src/AgentError.js"
import { AgentEvent } from "../src/AgentEvent.js"
import * as AgentRegistry from "../src/AgentRegistry.js"
import * as internal from "../src/internal/agent/registry.js"
import * as Session from "../src/Session.js"
import { makeStubAgent, makeTestFactory } from "./fixtures/stubAgent.js"

type Registry = AgentRegistry.AgentRegistry["Type"]

/** A registry in the test's Scope with an eager subscription to its events. */
const makeRegistry = (options?: AgentRegistry.RegistryOptions) =>
  Effect.gen(function*() {
    const { publisher, registry } = yield* internal.makeWithPublisher(options)
    const events = yield* registry.subscribe
    return { registry, publisher, events }
  })

/** A registry in its own Scope, so a test can close it. */
const makeClosableRegistry = Effect.gen(function*() {
  const scope = yield* Scope.make()
  const { publisher, registry } = yield* internal.makeWithPublisher().pipe(Scope.extend(scope))
  return { registry, publisher, scope }
})

const MARK = "mark"

const describeEvent = (event: AgentEvent): string =>
  event._tag === "AgentSessionStart"
    ? `${event._tag}:${event.agent}:${event.source}`
    : `${event._tag}:${event.agent}`

/**
 * Everything published on the subscription since the last call: publishes a mark and reads up to
 * it, so "nothing else was published" is observable without waiting.
 */
const drain = (publisher: AgentRegistry.AgentPublisher, events: Stream.Stream<AgentEvent>) =>
  Effect.gen(function*() {
    yield* publisher.publish(AgentEvent.AgentError({ agent: MARK as Agent["id"], error: { message: "", code: MARK } }))
    const chunk = yield* events.pipe(
      Stream.takeWhile((event) => !(event._tag === "AgentError" && event.error.code === MARK)),
      Stream.runCollect
    )
    return Chunk.toReadonlyArray(chunk).map(describeEvent)
  })

const enterAndAnnounce = (
  publisher: AgentRegistry.AgentPublisher,
  agent: Agent,
  parent: Option.Option<Agent> = Option.none()
) =>
  Effect.gen(function*() {
    const entry = yield* publisher.enter(agent, parent)
    yield* publisher.announce(entry, "startup")
    return entry
  })

const stub = (id: string) => makeStubAgent(id).pipe(Effect.orDie)

describe("AgentRegistry entries", () => {
  it.scoped("REG-01 enter requires agent.id === session.id, inserts without announcing, rejects a live id", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const other = yield* Session.make({ id: "b" })
      const mismatched = yield* makeStubAgent("a", { session: other })
      const exit = yield* Effect.exit(publisher.enter(mismatched, Option.none()))
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      assert.deepStrictEqual(yield* registry.list, [])

      const a = yield* stub("a")
      const entry = yield* publisher.enter(a, Option.none())
      assert.strictEqual(entry.agent, a)
      assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), a)
      assert.deepStrictEqual(yield* drain(publisher, events), [])

      const again = yield* stub("a")
      const collision = yield* Effect.flip(publisher.enter(again, Option.none()))
      assert.instanceOf(collision, AgentError.AgentAlreadyExists)
      assert.strictEqual(collision.id, "a")
      assert.strictEqual(collision.where, "live")
      assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), a)

      const child = yield* stub("child")
      yield* publisher.enter(child, Option.some(a))
      assert.isTrue(yield* registry.isOwnedBy("child", a))
      assert.deepStrictEqual(yield* drain(publisher, events), [])
    }))

  it.scoped("REG-02 announce publishes AgentCreated, runs onCreated hooks serially (already live), then AgentSessionStart", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      yield* registry.onCreated((agent) =>
        Effect.flatMap(registry.get(agent.id), (live) =>
          Ref.update(seen, (all) => [...all, `created-1:${agent.id}:${Option.isSome(live)}`]))
      )
      yield* registry.onCreated((agent) => Ref.update(seen, (all) => [...all, `created-2:${agent.id}`]))
      yield* registry.onSessionStart((agent, source) =>
        Ref.update(seen, (all) => [...all, `start:${agent.id}:${source}`])
      )
      const a = yield* stub("a")
      const entry = yield* publisher.enter(a, Option.none())
      yield* publisher.announce(entry, "resume")
      // the onSessionStart hooks were awaited: they ran before announce returned
      assert.deepStrictEqual(yield* Ref.get(seen), ["created-1:a:true", "created-2:a", "start:a:resume"])
      assert.deepStrictEqual(yield* drain(publisher, events), ["AgentCreated:a", "AgentSessionStart:a:resume"])

      const twice = yield* Effect.exit(publisher.announce(entry, "startup"))
      assert.isTrue(Exit.isFailure(twice) && Cause.isDie(twice.cause))
    }))

  it.scoped("REG-02 a failing onCreated hook vetoes: AgentCreationVetoed, later hooks skipped, paired AgentDisposed, id reusable", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      const boom = new Error("creation veto")
      yield* registry.onCreated((agent) => Ref.update(seen, (all) => [...all, `first:${agent.id}`]))
      const vetoScope = yield* Scope.make()
      yield* registry.onCreated(() => Effect.fail(boom)).pipe(Scope.extend(vetoScope))
      yield* registry.onCreated((agent) => Ref.update(seen, (all) => [...all, `third:${agent.id}`]))
      yield* registry.onSessionStart((agent) => Ref.update(seen, (all) => [...all, `start:${agent.id}`]))

      const vetoed = yield* stub("v")
      const entry = yield* publisher.enter(vetoed, Option.none())
      const failure = yield* Effect.flip(publisher.announce(entry, "startup"))
      assert.instanceOf(failure, AgentError.AgentCreationVetoed)
      assert.strictEqual(failure.id, "v")
      assert.isTrue(Cause.isCause(failure.cause))
      if (Cause.isCause(failure.cause)) {
        assert.deepStrictEqual(Cause.failureOption(failure.cause), Option.some(boom))
      }
      assert.deepStrictEqual(yield* Ref.get(seen), ["first:v"])
      assert.isTrue(Option.isNone(yield* registry.get("v")))
      assert.deepStrictEqual(yield* drain(publisher, events), ["AgentCreated:v", "AgentDisposed:v"])

      // the id is free again; without the vetoing hook the same id is published normally
      yield* Scope.close(vetoScope, Exit.void)
      const replacement = yield* stub("v")
      yield* enterAndAnnounce(publisher, replacement)
      assert.strictEqual(Option.getOrThrow(yield* registry.get("v")), replacement)
      assert.deepStrictEqual(yield* Ref.get(seen), ["first:v", "first:v", "third:v", "start:v"])
      assert.deepStrictEqual(yield* drain(publisher, events), ["AgentCreated:v", "AgentSessionStart:v:startup"])
    }))

  it.scoped("REG-02 a failing onSessionStart hook is contained: logged, later hooks run, the agent stays published", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      const logs: Array<string> = []
      const logger = Logger.make(({ logLevel, message }) => {
        const parts = Array.isArray(message) ? message : [message]
        logs.push(`${logLevel.label}:${String(parts[0])}`)
      })
      yield* registry.onSessionStart(() => Effect.fail("no"))
      yield* registry.onSessionStart(() => Effect.die("worse"))
      yield* registry.onSessionStart((agent, source) => Ref.update(seen, (all) => [...all, `${agent.id}:${source}`]))
      const a = yield* stub("a")
      yield* enterAndAnnounce(publisher, a).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
      assert.deepStrictEqual(yield* Ref.get(seen), ["a:startup"])
      assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), a)
      assert.deepStrictEqual(yield* drain(publisher, events), ["AgentCreated:a", "AgentSessionStart:a:startup"])
      assert.strictEqual(logs.length, 2)
      for (const line of logs) assert.match(line, /^WARN:agent "a": an onSessionStart hook failed/)
    }))

  it.scoped("REG-03 a detach requested during the onCreated hooks is deferred until they all ran", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      const entryRef = yield* Ref.make(Option.none<AgentRegistry.AgentEntry>())
      const live = (label: string, agent: Agent) =>
        Effect.flatMap(registry.get(agent.id), (found) =>
          Ref.update(seen, (all) => [...all, `${label}:${Option.getOrUndefined(found) === agent}`]))
      yield* registry.onCreated((agent) =>
        Effect.gen(function*() {
          yield* live("first", agent)
          yield* publisher.detach(Option.getOrThrow(yield* Ref.get(entryRef)))
          yield* live("after-detach", agent)
        })
      )
      yield* registry.onCreated((agent) => live("second", agent))
      yield* registry.onSessionStart(() => Ref.update(seen, (all) => [...all, "session-start"]))
      const a = yield* stub("split")
      const entry = yield* publisher.enter(a, Option.none())
      yield* Ref.set(entryRef, Option.some(entry))
      yield* publisher.announce(entry, "startup")
      assert.deepStrictEqual(yield* Ref.get(seen), ["first:true", "after-detach:true", "second:true"])
      assert.isTrue(Option.isNone(yield* registry.get("split")))
      assert.deepStrictEqual(yield* drain(publisher, events), ["AgentCreated:split", "AgentDisposed:split"])
    }))

  it.scoped("REG-04 a stale detach never removes a replacement; a repeated detach is a no-op", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const first = yield* stub("split")
      const firstEntry = yield* enterAndAnnounce(publisher, first)
      yield* publisher.detach(firstEntry)
      yield* publisher.detach(firstEntry)
      const replacement = yield* stub("split")
      const replacementEntry = yield* publisher.enter(replacement, Option.none())
      yield* publisher.detach(firstEntry)
      assert.strictEqual(Option.getOrThrow(yield* registry.get("split")), replacement)
      const stale = yield* Effect.exit(publisher.announce(firstEntry, "startup"))
      assert.isTrue(Exit.isFailure(stale) && Cause.isDie(stale.cause))
      assert.strictEqual(Option.getOrThrow(yield* registry.get("split")), replacement)
      assert.deepStrictEqual(yield* drain(publisher, events), [
        "AgentCreated:split",
        "AgentSessionStart:split:startup",
        "AgentDisposed:split"
      ])
      yield* publisher.detach(replacementEntry)
      assert.isTrue(Option.isNone(yield* registry.get("split")))
      // the replacement was never announced: no AgentDisposed for it
      assert.deepStrictEqual(yield* drain(publisher, events), [])
    }))

  it.scoped("REG-05 no AgentDisposed for an entry that was never announced; always for one whose announcement began", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const quiet = yield* stub("quiet")
      const entry = yield* publisher.enter(quiet, Option.none())
      yield* publisher.detach(entry)
      assert.isTrue(Option.isNone(yield* registry.get("quiet")))
      assert.deepStrictEqual(yield* drain(publisher, events), [])

      const hookScope = yield* Scope.make()
      yield* registry.onCreated(() => Effect.die("veto by defect")).pipe(Scope.extend(hookScope))
      const vetoed = yield* stub("vetoed")
      const vetoedEntry = yield* publisher.enter(vetoed, Option.none())
      const failure = yield* Effect.flip(publisher.announce(vetoedEntry, "startup"))
      assert.strictEqual(failure._tag, "AgentCreationVetoed")
      yield* publisher.detach(vetoedEntry)
      assert.deepStrictEqual(yield* drain(publisher, events), ["AgentCreated:vetoed", "AgentDisposed:vetoed"])
      yield* Scope.close(hookScope, Exit.void)
    }))

  it.scoped("REG-07 list, roots and isOwnedBy follow the exact live entries; lineage never makes ownership", () =>
    Effect.gen(function*() {
      const { publisher, registry } = yield* makeRegistry()
      const root = yield* stub("root")
      const rootEntry = yield* enterAndAnnounce(publisher, root)
      const child = yield* stub("child")
      const childEntry = yield* enterAndAnnounce(publisher, child, Option.some(root))
      // a session forked from the root's: lineage (parentSession), not ownership
      const forkPlan = Session.plan({ id: "forked", parentSession: root.id, createdAt: 0 })
      assert.isTrue(Either.isRight(forkPlan))
      const forkedSession = yield* Session.fromPlan(Either.getOrThrow(forkPlan))
      assert.strictEqual(forkedSession.header.parentSession, "root")
      const forked = yield* makeStubAgent("forked", { session: forkedSession })
      yield* enterAndAnnounce(publisher, forked)

      assert.deepStrictEqual(yield* registry.list, [root, child, forked])
      assert.deepStrictEqual(yield* registry.roots, [root, forked])
      assert.isTrue(yield* registry.isOwnedBy("child", root))
      assert.isFalse(yield* registry.isOwnedBy("root", root))
      assert.isFalse(yield* registry.isOwnedBy("forked", root))
      assert.isFalse(yield* registry.isOwnedBy("nobody", root))
      const impostor = yield* stub("root")
      assert.isFalse(yield* registry.isOwnedBy("child", impostor))

      // the parent leaves: the child becomes a root and is owned by nobody
      yield* publisher.detach(rootEntry)
      assert.deepStrictEqual(yield* registry.roots, [child, forked])
      assert.isFalse(yield* registry.isOwnedBy("child", root))
      // a new agent with the parent's id is not the recorded parent
      const newRoot = yield* stub("root")
      const newRootEntry = yield* enterAndAnnounce(publisher, newRoot)
      assert.deepStrictEqual(yield* registry.roots, [child, forked, newRoot])
      assert.isFalse(yield* registry.isOwnedBy("child", newRoot))
      assert.isFalse(yield* registry.isOwnedBy("child", root))
      // nor is the same parent object entered again: ownership is bound to the exact entry
      yield* publisher.detach(newRootEntry)
      yield* enterAndAnnounce(publisher, root)
      assert.isFalse(yield* registry.isOwnedBy("child", root))
      assert.deepStrictEqual(yield* registry.roots, [child, forked, root])
      yield* publisher.detach(childEntry)
      assert.deepStrictEqual(yield* registry.list, [forked, root])
    }))

  it.scoped("REG-07 a child entered before its parent (spawned during the parent's setup) is owned once the parent is live", () =>
    Effect.gen(function*() {
      const { publisher, registry } = yield* makeRegistry()
      const parent = yield* stub("parent")
      const child = yield* stub("child")
      yield* enterAndAnnounce(publisher, child, Option.some(parent))
      assert.isFalse(yield* registry.isOwnedBy("child", parent))
      assert.deepStrictEqual(yield* registry.roots, [child])
      const parentEntry = yield* enterAndAnnounce(publisher, parent)
      assert.isTrue(yield* registry.isOwnedBy("child", parent))
      assert.deepStrictEqual(yield* registry.roots, [parent])
      yield* publisher.detach(parentEntry)
      assert.isFalse(yield* registry.isOwnedBy("child", parent))
      assert.deepStrictEqual(yield* registry.roots, [child])
    }))

  it.scoped("REG-08 register publishes a prebuilt agent (no factory needed) until the caller's Scope closes", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const parent = yield* stub("parent")
      yield* registry.register(parent)
      const child = yield* stub("child")
      const scope = yield* Scope.make()
      yield* registry.register(child, { parentAgent: parent }).pipe(Scope.extend(scope))
      assert.strictEqual(Option.getOrThrow(yield* registry.get("child")), child)
      assert.isTrue(yield* registry.isOwnedBy("child", parent))
      const duplicate = yield* Effect.flip(registry.register(yield* stub("child")))
      assert.strictEqual(duplicate._tag, "AgentAlreadyExists")
      yield* Scope.close(scope, Exit.void)
      assert.isTrue(Option.isNone(yield* registry.get("child")))
      assert.deepStrictEqual(yield* drain(publisher, events), [
        "AgentCreated:parent",
        "AgentSessionStart:parent:startup",
        "AgentCreated:child",
        "AgentSessionStart:child:startup",
        "AgentDisposed:child"
      ])
    }))

  it.scoped("OWN-05 get returns the bare Agent, never a handle with dispose", () =>
    Effect.gen(function*() {
      const { registry } = yield* makeRegistry()
      const { factory } = yield* makeTestFactory()
      yield* registry.setFactory(factory)
      const handle = yield* registry.create({ sessionId: "made" })
      const found = Option.getOrThrow(yield* registry.get("made"))
      assert.strictEqual(found, handle.agent)
      assert.isFalse("dispose" in found)
      const prebuilt = yield* stub("prebuilt")
      yield* registry.register(prebuilt)
      const listed = yield* registry.list
      assert.deepStrictEqual(listed, [handle.agent, prebuilt])
      for (const agent of listed) assert.isFalse("dispose" in agent)
    }))
})

describe("AgentRegistry events", () => {
  it.scoped("events: every agent's events on one feed; a failing observer affects neither another observer nor the operation", () =>
    Effect.gen(function*() {
      const { publisher, registry } = yield* makeRegistry()
      const failing = yield* registry.subscribe
      const dying = yield* registry.subscribe
      const healthy = yield* registry.subscribe
      const failingFiber = yield* Effect.fork(Stream.runForEach(failing, () => Effect.fail("observer failed")))
      const dyingFiber = yield* Effect.fork(Stream.runForEach(dying, () => Effect.die("observer died")))
      const healthyFiber = yield* Effect.fork(Stream.runCollect(Stream.take(healthy, 5)))

      yield* registry.register(yield* stub("a"))
      yield* publisher.publish(AgentEvent.TurnStarted({ agent: (yield* stub("b")).id, turn: 1 }))
      yield* registry.register(yield* stub("c"))

      const failed = yield* Fiber.await(failingFiber)
      assert.isTrue(Exit.isFailure(failed))
      const died = yield* Fiber.await(dyingFiber)
      assert.isTrue(Exit.isFailure(died) && Cause.isDie(died.cause))
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(healthyFiber)).map(describeEvent)
      assert.deepStrictEqual(seen, [
        "AgentCreated:a",
        "AgentSessionStart:a:startup",
        "TurnStarted:b",
        "AgentCreated:c",
        "AgentSessionStart:c:startup"
      ])
      assert.strictEqual((yield* registry.list).length, 2)
    }))

  it.scoped("events: ModelDelta is mirrored only with includeModelDeltas", () =>
    Effect.gen(function*() {
      const delta = AgentEvent.ModelDelta({
        agent: (yield* stub("a")).id,
        turn: 1,
        step: 1,
        kind: "text",
        text: "hi"
      })
      const plain = yield* makeRegistry()
      yield* plain.publisher.publish(delta)
      assert.deepStrictEqual(yield* drain(plain.publisher, plain.events), [])
      const verbose = yield* makeRegistry({ includeModelDeltas: true })
      yield* verbose.publisher.publish(delta)
      assert.deepStrictEqual(yield* drain(verbose.publisher, verbose.events), ["ModelDelta:a"])
    }))

  it.scoped("events: lifecycle events name the initiator; the feed ends when the registry's Scope closes", () =>
    Effect.gen(function*() {
      const { registry, scope } = yield* makeClosableRegistry
      const events = yield* registry.subscribe
      const parent = yield* stub("parent")
      yield* registry.register(yield* stub("child")).pipe(registry.withInitiator(parent))
      yield* Scope.close(scope, Exit.void)
      const all = Chunk.toReadonlyArray(yield* Stream.runCollect(events))
      assert.deepStrictEqual(all.map((event) => `${event._tag}:${event.agent}:${event.initiator}`), [
        "AgentCreated:child:parent",
        "AgentSessionStart:child:parent"
      ])
      // a lazy subscription after the end is empty
      assert.strictEqual(Chunk.size(yield* Stream.runCollect(registry.events)), 0)
    }))
})

describe("AgentRegistry factory slot", () => {
  it.scoped("FAC-01 one factory at a time; create delegates with the caller's Scope as owner; the slot clears with the installer's Scope", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const first = yield* makeTestFactory()
      const second = yield* makeTestFactory()
      const installer = yield* Scope.make()
      yield* registry.setFactory(first.factory).pipe(Scope.extend(installer))
      const refused = yield* Effect.flip(registry.setFactory(second.factory))
      assert.instanceOf(refused, AgentError.FactoryAlreadySet)

      // the refused installation did not clear the slot
      const owner = yield* Scope.make()
      const handle = yield* registry.create({ sessionId: "a" }).pipe(Scope.extend(owner))
      assert.deepStrictEqual(yield* Ref.get(first.calls), ["create:a"])
      assert.deepStrictEqual(yield* Ref.get(first.owners), [owner])
      assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), handle.agent)
      // the owner Scope closing disposes what the factory made for it
      yield* Scope.close(owner, Exit.void)
      assert.isTrue(Option.isNone(yield* registry.get("a")))

      yield* Scope.close(installer, Exit.void)
      const none = yield* Effect.flip(registry.create({ sessionId: "b" }))
      assert.instanceOf(none, AgentError.NoAgentFactory)
      // the slot is free again
      yield* registry.setFactory(second.factory)
      yield* registry.create({ sessionId: "b" })
      assert.deepStrictEqual(yield* Ref.get(second.calls), ["create:b"])
      assert.deepStrictEqual(yield* drain(publisher, events), [
        "AgentCreated:a",
        "AgentSessionStart:a:startup",
        "AgentDisposed:a",
        "AgentCreated:b",
        "AgentSessionStart:b:startup"
      ])
    }))

  it.scoped("FAC-02 without a factory create, resume and resumeOrCreate fail NoAgentFactory; register works", () =>
    Effect.gen(function*() {
      const { registry } = yield* makeRegistry()
      assert.instanceOf(yield* Effect.flip(registry.create({ sessionId: "a" })), AgentError.NoAgentFactory)
      assert.instanceOf(yield* Effect.flip(registry.resume({ sessionId: "a" })), AgentError.NoAgentFactory)
      assert.instanceOf(yield* Effect.flip(registry.resumeOrCreate({ sessionId: "a" })), AgentError.NoAgentFactory)
      const prebuilt = yield* stub("a")
      yield* registry.register(prebuilt)
      assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), prebuilt)
    }))

  it.scoped("resumeOrCreate: without persistence it creates; with it, it resumes when stored, else creates", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const memory = yield* makeTestFactory()
      const memoryScope = yield* Scope.make()
      yield* registry.setFactory(memory.factory).pipe(Scope.extend(memoryScope))
      yield* registry.resumeOrCreate({ sessionId: "m" })
      assert.deepStrictEqual(yield* Ref.get(memory.calls), ["resume:m", "create:m"])
      yield* Scope.close(memoryScope, Exit.void)

      const stored = yield* makeTestFactory({ persistence: true })
      yield* registry.setFactory(stored.factory)
      const owner = yield* Scope.make()
      yield* registry.resumeOrCreate({ sessionId: "s" }).pipe(Scope.extend(owner))
      yield* Scope.close(owner, Exit.void)
      yield* registry.resumeOrCreate({ sessionId: "s" })
      assert.deepStrictEqual(yield* Ref.get(stored.calls), ["resume:s", "create:s", "resume:s"])
      // a live id: the resume error is surfaced, no create is attempted
      const live = yield* Effect.flip(registry.resumeOrCreate({ sessionId: "s" }))
      assert.strictEqual(live._tag, "SessionAlreadyLive")
      assert.deepStrictEqual(yield* Ref.get(stored.calls), ["resume:s", "create:s", "resume:s", "resume:s"])
      assert.deepStrictEqual(yield* drain(publisher, events), [
        "AgentCreated:m",
        "AgentSessionStart:m:startup",
        "AgentCreated:s",
        "AgentSessionStart:s:startup",
        "AgentDisposed:s",
        "AgentCreated:s",
        "AgentSessionStart:s:resume"
      ])
    }))

  it.scoped("resumeOrCreate: a create that loses to a concurrent one (AgentAlreadyExists stored) resumes once", () =>
    Effect.gen(function*() {
      const { events, publisher, registry } = yield* makeRegistry()
      const base = yield* makeTestFactory({ persistence: true })
      // another process stores the session between our resume and our create
      yield* registry.setFactory({
        resume: base.factory.resume,
        create: (options, owner, p) =>
          Effect.zipRight(
            Ref.update(base.stored, (ids) => new Set([...ids, String(options.sessionId)])),
            base.factory.create(options, owner, p)
          )
      })
      yield* registry.resumeOrCreate({ sessionId: "r" })
      assert.deepStrictEqual(yield* Ref.get(base.calls), ["resume:r", "create:r", "resume:r"])
      assert.deepStrictEqual(yield* drain(publisher, events), ["AgentCreated:r", "AgentSessionStart:r:resume"])
    }))
})

describe("AgentRegistry initiator", () => {
  it.scoped("INIT-01 no initiator by default: currentInitiator is None, requireInitiator fails NoInitiator", () =>
    Effect.gen(function*() {
      const { registry } = yield* makeRegistry()
      assert.isTrue(Option.isNone(yield* registry.currentInitiator))
      assert.isTrue(Option.isNone(yield* FiberRef.get(AgentRegistry.currentInitiatorRef)))
      assert.instanceOf(yield* Effect.flip(registry.requireInitiator), AgentError.NoInitiator)
      const inside = yield* registry.withoutInitiator(Effect.flip(registry.requireInitiator))
      assert.instanceOf(inside, AgentError.NoInitiator)
    }))

  it.scoped("INIT-02 withInitiator returns exactly the result; visible across yields and in forked fibers; restored after", () =>
    Effect.gen(function*() {
      const { registry } = yield* makeRegistry()
      const a = yield* stub("a")
      const value = { exact: true }
      assert.strictEqual(yield* registry.withInitiator(a)(Effect.succeed(value)), value)
      const gate = yield* Deferred.make<void>()
      const observed = yield* registry.withInitiator(a)(
        Effect.gen(function*() {
          const before = yield* registry.requireInitiator
          yield* Effect.yieldNow()
          const opened = yield* Effect.fork(Deferred.await(gate))
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(opened)
          const after = yield* registry.requireInitiator
          const forked = yield* Effect.fork(registry.requireInitiator).pipe(Effect.flatMap(Fiber.join))
          const daemon = yield* Effect.forkDaemon(FiberRef.get(AgentRegistry.currentInitiatorRef)).pipe(
            Effect.flatMap(Fiber.join)
          )
          return [before, after, forked, Option.getOrThrow(daemon)]
        })
      )
      for (const seen of observed) assert.strictEqual(seen, a)
      assert.isTrue(Option.isNone(yield* registry.currentInitiator))
    }))

  it.scoped("INIT-03 concurrent chains are isolated", () =>
    Effect.gen(function*() {
      const { registry } = yield* makeRegistry()
      const a = yield* stub("a")
      const b = yield* stub("b")
      const release = yield* Deferred.make<void>()
      const chain = (agent: Agent) =>
        Effect.gen(function*() {
          const started = yield* Deferred.make<void>()
          const fiber = yield* Effect.fork(
            registry.withInitiator(agent)(
              Effect.gen(function*() {
                const before = yield* registry.requireInitiator
                yield* Deferred.succeed(started, undefined)
                yield* Deferred.await(release)
                return [before, yield* registry.requireInitiator]
              })
            )
          )
          return { started, fiber }
        })
      const chainA = yield* chain(a)
      const chainB = yield* chain(b)
      yield* Deferred.await(chainA.started)
      yield* Deferred.await(chainB.started)
      assert.isTrue(Option.isNone(yield* registry.currentInitiator))
      yield* Deferred.succeed(release, undefined)
      const seenA = yield* Fiber.join(chainA.fiber)
      const seenB = yield* Fiber.join(chainB.fiber)
      for (const seen of seenA) assert.strictEqual(seen, a)
      for (const seen of seenB) assert.strictEqual(seen, b)
      assert.isTrue(Option.isNone(yield* registry.currentInitiator))
    }))

  it.scoped("INIT-04 nesting overrides and restores, withoutInitiator hides, failures propagate unchanged", () =>
    Effect.gen(function*() {
      const { registry } = yield* makeRegistry()
      const parent = yield* stub("parent")
      const child = yield* stub("child")
      const boom = new Error("boom")
      const id = Effect.map(registry.currentInitiator, Option.match({ onNone: () => "none", onSome: (a) => a.id }))
      const trail = yield* registry.withInitiator(parent)(
        Effect.gen(function*() {
          const seen: Array<string> = [yield* id]
          seen.push(yield* registry.withInitiator(child)(id))
          seen.push(yield* id)
          seen.push(yield* registry.withoutInitiator(id))
          const hidden = yield* registry.withoutInitiator(Effect.flip(registry.requireInitiator))
          seen.push(hidden._tag)
          seen.push(yield* id)
          const failure = yield* Effect.flip(registry.withInitiator(child)(Effect.fail(boom)))
          assert.strictEqual(failure, boom)
          seen.push(yield* id)
          const defect = yield* Effect.exit(registry.withInitiator(child)(Effect.die(boom)))
          assert.isTrue(Exit.isFailure(defect))
          if (Exit.isFailure(defect)) assert.deepStrictEqual(Cause.dieOption(defect.cause), Option.some(boom))
          seen.push(yield* id)
          return seen
        })
      )
      assert.deepStrictEqual(trail, ["parent", "child", "parent", "none", "NoInitiator", "parent", "parent", "parent"])
      assert.strictEqual(yield* id, "none")
    }))

  it.scoped("INIT-05 closing the registry's Scope refuses new regions and waits for those in flight, then ends events", () =>
    Effect.gen(function*() {
      const { registry, scope } = yield* makeClosableRegistry
      const events = yield* registry.subscribe
      const a = yield* stub("a")
      const log = yield* Ref.make<ReadonlyArray<string>>([])
      const append = (line: string) => Ref.update(log, (all) => [...all, line])
      const started = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const closing = yield* Deferred.make<void>()
      // added after the registry's own finalizer, so it runs just before it
      yield* Scope.addFinalizer(scope, Deferred.succeed(closing, undefined))

      const inFlight = yield* Effect.fork(
        registry.withInitiator(a)(
          Effect.gen(function*() {
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(release)
            // reads still work while the registry drains
            const initiator = yield* registry.requireInitiator
            yield* append(`region-end:${initiator.id}`)
          })
        )
      )
      yield* Deferred.await(started)
      const feedEnd = yield* Effect.fork(Stream.runDrain(events).pipe(Effect.zipRight(append("events-ended"))))
      const closer = yield* Effect.fork(Scope.close(scope, Exit.void).pipe(Effect.zipRight(append("closed"))))
      yield* Deferred.await(closing)

      const refused = yield* Effect.flip(registry.withInitiator(a)(append("must-not-run")))
      assert.instanceOf(refused, AgentError.InitiatorScopeClosed)
      assert.instanceOf(yield* Effect.flip(registry.withoutInitiator(Effect.void)), AgentError.InitiatorScopeClosed)
      assert.isTrue(Option.isNone(yield* registry.currentInitiator))
      assert.deepStrictEqual(yield* Ref.get(log), [])

      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(inFlight)
      yield* Fiber.join(closer)
      yield* Fiber.join(feedEnd)
      const lines = yield* Ref.get(log)
      assert.strictEqual(lines[0], "region-end:a")
      assert.deepStrictEqual([...lines].sort(), ["closed", "events-ended", "region-end:a"])
    }))

  it.effect("INIT-06 a region that closes the registry's Scope does not wait for itself (nested or from a forked child)", () =>
    Effect.gen(function*() {
      const a = yield* Effect.scoped(stub("a"))
      const direct = yield* makeClosableRegistry
      yield* direct.registry.withInitiator(a)(Scope.close(direct.scope, Exit.void))
      assert.instanceOf(yield* Effect.flip(direct.registry.withoutInitiator(Effect.void)), AgentError.InitiatorScopeClosed)

      const nested = yield* makeClosableRegistry
      yield* nested.registry.withInitiator(a)(
        nested.registry.withoutInitiator(nested.registry.withInitiator(a)(Scope.close(nested.scope, Exit.void)))
      )

      const forked = yield* makeClosableRegistry
      yield* forked.registry.withInitiator(a)(
        Effect.fork(Scope.close(forked.scope, Exit.void)).pipe(Effect.flatMap(Fiber.join))
      )
    }))

  it.effect("INIT-06 a region closing the registry still waits for an unrelated region in flight", () =>
    Effect.gen(function*() {
      const { registry, scope } = yield* makeClosableRegistry
      const a = yield* Effect.scoped(stub("a"))
      const b = yield* Effect.scoped(stub("b"))
      const log = yield* Ref.make<ReadonlyArray<string>>([])
      const append = (line: string) => Ref.update(log, (all) => [...all, line])
      const otherStarted = yield* Deferred.make<void>()
      const releaseOther = yield* Deferred.make<void>()
      const closing = yield* Deferred.make<void>()
      yield* Scope.addFinalizer(scope, Deferred.succeed(closing, undefined))

      const other = yield* Effect.fork(
        registry.withInitiator(b)(
          Effect.gen(function*() {
            yield* Deferred.succeed(otherStarted, undefined)
            yield* Deferred.await(releaseOther)
            yield* append("other-region-end")
          })
        )
      )
      yield* Deferred.await(otherStarted)
      const selfClosing = yield* Effect.fork(
        registry.withInitiator(a)(Scope.close(scope, Exit.void).pipe(Effect.zipRight(append("close-returned"))))
      )
      yield* Deferred.await(closing)
      // the close began and is held by the unrelated region only
      assert.deepStrictEqual(yield* Ref.get(log), [])
      yield* Deferred.succeed(releaseOther, undefined)
      yield* Fiber.join(selfClosing)
      yield* Fiber.join(other)
      assert.deepStrictEqual(yield* Ref.get(log), ["other-region-end", "close-returned"])
    }))
})

describe("AgentRegistry layers", () => {
  it.effect("layer builds a registry; the service is the tag", () =>
    Effect.gen(function*() {
      const registry: Registry = yield* AgentRegistry.AgentRegistry
      assert.deepStrictEqual(yield* registry.list, [])
      assert.isTrue(Option.isNone(yield* registry.currentInitiator))
    }).pipe(Effect.provide(AgentRegistry.layer)))
})
