import { assert, describe, it } from "@effect/vitest"
import {
  Cause,
  Context,
  Deferred,
  Effect,
  Either,
  Exit,
  Fiber,
  Layer,
  Option,
  Ref,
  Schema,
  Scope,
  Stream
} from "effect"
import * as Agent from "../src/Agent.js"
import * as AgentError from "../src/AgentError.js"
import * as AgentLoop from "../src/AgentLoop.js"
import { AgentRegistry } from "../src/AgentRegistry.js"
import type { AgentPublisher } from "../src/AgentRegistry.js"
import * as internalAgent from "../src/internal/agent/loop/agent.js"
import * as internalRegistry from "../src/internal/agent/registry.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Message from "../src/Message.js"
import type { SessionId } from "../src/Message.js"
import * as Model from "../src/Model.js"
import { SessionPersistence } from "../src/SessionPersistence.js"
import * as SessionPersistenceModule from "../src/SessionPersistence.js"
import type { SessionEvent } from "../src/SessionEvent.js"
import * as SessionEventModule from "../src/SessionEvent.js"
import { SessionStore } from "../src/SessionStore.js"
import * as Tool from "../src/Tool.js"
import { recordingTracer } from "./fixtures/groupCommit.js"
import { createsCleanly, watch } from "./fixtures/lifecycle.js"
import { makeRuntime, makeVolatileRuntime, note, route } from "./fixtures/runtime.js"

const sid = (id: string) => id as SessionId

const noop = Tool.make({
  name: "noop",
  description: "does nothing",
  parameters: Schema.Struct({}),
  run: () => Effect.succeed(Tool.text("ok"))
})

class Boom extends Schema.TaggedError<Boom>()("Boom", { where: Schema.String }) {}

/** Whether the registry and the store find `id` (built from the services, so hooks can call it). */
const livenessProbe = Effect.gen(function*() {
  const registry = yield* AgentRegistry
  const store = yield* SessionStore
  return (id: string) =>
    Effect.gen(function*() {
      return `agent=${Option.isSome(yield* registry.get(id))} session=${Option.isSome(yield* store.get(id))}`
    })
})

/** The tag of the failure of `effect`, or "succeeded" (finalizers cannot fail). */
const outcomeTag = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.match(effect, { onFailure: (error) => error._tag, onSuccess: () => "succeeded" })

/** Nothing of a creation is left: no live agent or session, nothing stored. */
const assertNothingLeft = (id: string) =>
  Effect.gen(function*() {
    const registry = yield* AgentRegistry
    const store = yield* SessionStore
    assert.deepStrictEqual((yield* registry.list).map((a) => a.id), [])
    assert.deepStrictEqual((yield* store.list).map((s) => s.id), [])
    const persistence = yield* Effect.serviceOption(SessionPersistence)
    if (Option.isSome(persistence)) assert.isFalse(yield* persistence.value.exists(sid(id)), `${id} is not stored`)
  })

const typesOf = (events: ReadonlyArray<SessionEvent>) => events.map((e) => e.type)

/** Signals `entered`, then waits for `release`. */
const pass = <A>(entered: Deferred.Deferred<void>, release: Deferred.Deferred<A>) =>
  Effect.zipRight(Deferred.succeed(entered, undefined), Deferred.await(release))

describe("AgentLoop create (PUB)", () => {
  it.scoped(
    "PUB-01 PUB-02 PUB-03 setup and commit run unpublished; the first onCreated hook finds both and setup's tool; SessionCreated → AgentCreated → AgentSessionStart{startup}",
    () =>
      Effect.gen(function*() {
        const rt = yield* makeRuntime([])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const liveness = yield* livenessProbe
          const store = yield* SessionStore
          const feeds = yield* watch()
          const trace = yield* Ref.make<ReadonlyArray<string>>([])
          const toolsOf = (id: string) =>
            Effect.flatMap(registry.get(id), (agent) =>
              Option.isNone(agent)
                ? Effect.succeed("-")
                : Effect.map(agent.value.tools.list, (ts) => ts.map((t) => t.name).join(",")))
          yield* store.onCreated((session) =>
            Effect.gen(function*() {
              yield* note(trace, `session-created ${yield* liveness(session.id)} tools=${yield* toolsOf(session.id)}`)
            })
          )
          yield* registry.onCreated((agent) =>
            Effect.gen(function*() {
              yield* note(trace, `agent-created ${yield* liveness(agent.id)} tools=${yield* toolsOf(agent.id)}`)
            })
          )
          yield* registry.onSessionStart((agent, source) => note(trace, `session-start ${agent.id} ${source}`))

          const setupStarted = yield* Deferred.make<void>()
          const releaseSetup = yield* Deferred.make<void>()
          const creating = yield* registry.create({
            sessionId: "a",
            options: route,
            setup: (agent) =>
              Effect.gen(function*() {
                yield* note(trace, `setup ${yield* liveness(agent.id)}`)
                yield* agent.tools.register(noop)
                yield* Deferred.succeed(setupStarted, undefined)
                yield* Deferred.await(releaseSetup)
                return { commit: Effect.flatMap(liveness(agent.id), (live) => note(trace, `commit ${live}`)) }
              })
          }).pipe(Effect.fork)
          yield* Deferred.await(setupStarted)
          // while setup is gated, nothing is visible
          assert.deepStrictEqual(yield* registry.list, [])
          assert.deepStrictEqual(yield* store.list, [])
          assert.isTrue(Option.isNone(yield* registry.get("a")))
          yield* Deferred.succeed(releaseSetup, undefined)
          const handle = yield* Fiber.join(creating)

          assert.deepStrictEqual(yield* Ref.get(trace), [
            "setup agent=false session=false",
            "commit agent=false session=false",
            "session-created agent=true session=true tools=noop",
            "agent-created agent=true session=true tools=noop",
            "session-start a startup"
          ])
          assert.deepStrictEqual(yield* feeds.sessions.until("SessionCreated:a"), ["SessionCreated:a"])
          assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:a:startup"), [
            "AgentCreated:a",
            "AgentSessionStart:a:startup"
          ])
          assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), handle.agent)
          assert.strictEqual(Option.getOrThrow(yield* store.get("a")), handle.agent.session)
          assert.strictEqual(handle.agent.options, route)
          yield* handle.dispose
          assert.deepStrictEqual(yield* feeds.agents.until("AgentDisposed:a"), [
            "AgentCreated:a",
            "AgentSessionStart:a:startup",
            "AgentDisposed:a"
          ])
        }).pipe(Effect.provide(rt.context))
      })
  )

  for (const n of [2, 5, 12]) {
    it.scoped(`PUB-04 ${n} concurrent same-id creates with persistence: one winner, losers fail at arbitration and never run setup`, () =>
      Effect.gen(function*() {
        const rt = yield* makeRuntime([Model.text("ok")])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const store = yield* SessionStore
          const persistence = yield* SessionPersistence
          const setups = yield* Ref.make(0)
          const results = yield* Effect.all(
            Array.from({ length: n }, () =>
              registry.create({
                sessionId: "same",
                options: route,
                setup: () => Ref.update(setups, (k) => k + 1)
              }).pipe(Effect.either)),
            { concurrency: "unbounded" }
          )
          const winners = results.filter(Either.isRight)
          const losers = results.filter(Either.isLeft)
          assert.strictEqual(winners.length, 1)
          assert.strictEqual(losers.length, n - 1)
          for (const loser of losers) {
            assert.instanceOf(loser.left, AgentError.AgentAlreadyExists)
            if (loser.left instanceof AgentError.AgentAlreadyExists) assert.strictEqual(loser.left.id, "same")
          }
          assert.strictEqual(yield* Ref.get(setups), 1, "losers never ran setup")
          const winner = winners[0]!.right
          assert.deepStrictEqual((yield* registry.list), [winner.agent])
          assert.deepStrictEqual((yield* store.list), [winner.agent.session])
          // the losers did not discard the winner's stored session or take its writer
          yield* winner.agent.followup(Message.user("hi", { id: "m1" }))
          yield* winner.agent.whenIdle
          const stored = (yield* rt.storage.events(sid("same"))) ?? []
          assert.deepStrictEqual(stored, yield* winner.agent.session.events)
          assert.include(typesOf(stored), "turn/end")
          yield* winner.dispose
          assert.deepStrictEqual(yield* registry.list, [])
          assert.isTrue(yield* persistence.exists(sid("same")))
        }).pipe(Effect.provide(rt.context))
      }))
  }

  it.effect.prop(
    "PUB-04 without persistence every concurrent create may run setup; enter arbitrates exactly one winner",
    { n: Schema.Int.pipe(Schema.between(2, 8)) },
    ({ n }) =>
      Effect.gen(function*() {
        const rt = yield* makeVolatileRuntime([])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const store = yield* SessionStore
          const inSetup = yield* Ref.make(0)
          const allInSetup = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const released = yield* Ref.make(0)
          const creating = yield* Effect.all(
            Array.from({ length: n }, () =>
              registry.create({
                sessionId: "same",
                setup: () =>
                  Effect.gen(function*() {
                    yield* Effect.addFinalizer(() => Ref.update(released, (k) => k + 1))
                    if ((yield* Ref.updateAndGet(inSetup, (k) => k + 1)) === n) {
                      yield* Deferred.succeed(allInSetup, undefined)
                    }
                    yield* Deferred.await(release)
                  })
              }).pipe(Effect.either)),
            { concurrency: "unbounded" }
          ).pipe(Effect.fork)
          yield* Deferred.await(allInSetup)
          // every creation is in setup: nothing is published yet
          assert.deepStrictEqual(yield* registry.list, [])
          assert.deepStrictEqual(yield* store.list, [])
          yield* Deferred.succeed(release, undefined)
          const results = yield* Fiber.join(creating)
          const winners = results.filter(Either.isRight)
          assert.strictEqual(winners.length, 1)
          for (const loser of results.filter(Either.isLeft)) {
            assert.instanceOf(loser.left, AgentError.AgentAlreadyExists)
          }
          const winner = winners[0]!.right
          assert.deepStrictEqual(yield* registry.list, [winner.agent])
          assert.deepStrictEqual(yield* store.list, [winner.agent.session])
          assert.strictEqual(yield* Ref.get(released), n - 1, "every loser's agent Scope was closed")
          yield* winner.dispose
          assert.strictEqual(yield* Ref.get(released), n)
          yield* assertNothingLeft("same")
        }).pipe(Effect.provide(rt.context))
      }).pipe(Effect.scoped),
    { fastCheck: { numRuns: 10 } }
  )

  it.scoped("OBS-01 create runs in an effect-agent.create span: a child of the caller's, the parent of setup's", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      const recording = yield* recordingTracer
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({
          sessionId: "traced",
          setup: () => Effect.withSpan(Effect.void, "user.setup")
        }).pipe(Effect.withSpan("caller"))
        const failed = yield* Effect.flip(registry.create({ sessionId: "traced" }))
        assert.instanceOf(failed, AgentError.AgentAlreadyExists)
        // the caller's context is back after create: a span made now has no parent
        const after = yield* Effect.withSpan(Effect.currentSpan, "after")
        assert.isTrue(Option.isNone(after.parent))
        yield* handle.dispose
      }).pipe(Effect.provide(rt.context), Effect.withTracer(recording.tracer))
      const byName = (name: string) => recording.spans.filter((span) => span.name === name)
      const [caller] = byName("caller")
      // OBS-01 (v2) names the span effect-agent.create (v1: AgentRegistry.create)
      const creates = byName("effect-agent.create")
      const [setup] = byName("user.setup")
      assert.strictEqual(creates.length, 2)
      assert.deepStrictEqual(creates.map((span) => span.attributes.get("effect_agent.agent.id")), ["traced", "traced"])
      assert.isUndefined(creates[0]!.attributes.get("error.type"))
      assert.strictEqual(creates[1]!.attributes.get("error.type"), "AgentAlreadyExists")
      assert.strictEqual(Option.getOrThrow(creates[0]!.parent), caller)
      assert.strictEqual(Option.getOrThrow(setup!.parent), creates[0])
      assert.deepStrictEqual(creates.map((span) => span.status._tag), ["Ended", "Ended"])
      assert.isTrue(creates[0]!.status._tag === "Ended" && Exit.isSuccess(creates[0]!.status.exit))
      assert.isTrue(creates[1]!.status._tag === "Ended" && Exit.isFailure(creates[1]!.status.exit))
    }))

  it.scoped("PUB-05 creating a live id fails AgentAlreadyExists{live} and leaves the live agent alone", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const store = yield* SessionStore
        const handle = yield* registry.create({ sessionId: "a" })
        const setupRan = yield* Ref.make(false)
        const error = yield* Effect.flip(registry.create({ sessionId: "a", setup: () => Ref.set(setupRan, true) }))
        assert.instanceOf(error, AgentError.AgentAlreadyExists)
        if (error instanceof AgentError.AgentAlreadyExists) assert.strictEqual(error.where, "live")
        assert.isFalse(yield* Ref.get(setupRan))
        assert.deepStrictEqual(yield* store.list, [handle.agent.session])
        assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), handle.agent)
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-06 interrupting the creating fiber during setup rolls back completely (no session stored, id free, no events)", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const inSetup = yield* Deferred.make<void>()
        const finalized = yield* Ref.make(false)
        const creating = yield* registry.create({
          sessionId: "a",
          setup: (agent) =>
            Effect.gen(function*() {
              yield* agent.tools.register(noop)
              yield* Effect.addFinalizer(() => Ref.set(finalized, true))
              yield* Deferred.succeed(inSetup, undefined)
              yield* Effect.never
            })
        }).pipe(Effect.fork)
        yield* Deferred.await(inSetup)
        const exit = yield* Fiber.interrupt(creating)
        assert.isTrue(Exit.isInterrupted(exit))
        assert.isTrue(yield* Ref.get(finalized), "setup's resources were released")
        yield* assertNothingLeft("a")
        assert.deepStrictEqual(yield* rt.trace, ["writer-released a session-live=false absent"])
        // the id is free, and the rolled-back creation published nothing before this one
        yield* createsCleanly(feeds, "a", { sessions: true })
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-06 an interruption while commit runs rolls back; the commit sees the creation still unpublished", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const inCommit = yield* Deferred.make<void>()
        const released = yield* Ref.make(false)
        const creating = yield* registry.create({
          sessionId: "a",
          setup: () =>
            Effect.gen(function*() {
              yield* Effect.addFinalizer(() => Ref.set(released, true))
              return { commit: Effect.zipRight(Deferred.succeed(inCommit, undefined), Effect.never) }
            })
        }).pipe(Effect.fork)
        yield* Deferred.await(inCommit)
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(creating)))
        assert.isTrue(yield* Ref.get(released))
        yield* assertNothingLeft("a")
        yield* createsCleanly(feeds, "a")
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-04 step 4 the critical section is registry-wide: commits never overlap, and an interrupted holder passes it on", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const trace = yield* Ref.make<ReadonlyArray<string>>([])
        const inCommit = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        // the holder's commit waits inside the section until released
        const holder = (id: string) =>
          registry.create({
            sessionId: id,
            setup: () =>
              Effect.succeed({
                commit: Effect.zipRight(
                  note(trace, `${id} commit start`),
                  Effect.zipRight(pass(inCommit, release), note(trace, `${id} commit end`))
                )
              })
          })
        // the other creations have reached the section when their setup signals
        const waiter = (id: string, setupDone: Deferred.Deferred<void>) =>
          registry.create({
            sessionId: id,
            setup: () =>
              Effect.as(Deferred.succeed(setupDone, undefined), { commit: note(trace, `${id} commit`) })
          })
        const a = yield* Effect.fork(Effect.scoped(Effect.asVoid(holder("a"))))
        yield* Deferred.await(inCommit)
        const bSetup = yield* Deferred.make<void>()
        const b = yield* Effect.fork(Effect.scoped(Effect.asVoid(waiter("b", bSetup))))
        yield* Deferred.await(bSetup)
        for (let i = 0; i < 10; i++) yield* Effect.yieldNow()
        assert.isTrue(Option.isNone(yield* registry.get("b")), "b waits for the section")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(a)
        yield* Fiber.join(b)
        assert.deepStrictEqual(yield* Ref.get(trace), ["a commit start", "a commit end", "b commit"])

        // a holder interrupted inside its commit rolls back and hands the section to the next one
        const inCommit2 = yield* Deferred.make<void>()
        const c = yield* Effect.fork(registry.create({
          sessionId: "c",
          setup: () => Effect.succeed({ commit: Effect.zipRight(Deferred.succeed(inCommit2, undefined), Effect.never) })
        }))
        yield* Deferred.await(inCommit2)
        const dSetup = yield* Deferred.make<void>()
        const d = yield* Effect.fork(waiter("d", dSetup))
        yield* Deferred.await(dSetup)
        for (let i = 0; i < 10; i++) yield* Effect.yieldNow()
        assert.isTrue(Option.isNone(yield* registry.get("d")), "d waits for the section")
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(c)))
        const handle = yield* Fiber.join(d)
        assert.strictEqual(handle.agent.id, "d")
        assert.isTrue(Option.isNone(yield* registry.get("c")))
        yield* handle.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-06 a creation waiting for the critical section is interruptible: it rolls back, the holder goes on", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const inCommit = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const a = yield* Effect.fork(Effect.scoped(registry.create({
          sessionId: "a",
          setup: () => Effect.succeed({ commit: pass(inCommit, release) })
        })))
        yield* Deferred.await(inCommit)
        const bSetup = yield* Deferred.make<void>()
        const b = yield* Effect.fork(Effect.scoped(registry.create({
          sessionId: "b",
          setup: () => Effect.as(Deferred.succeed(bSetup, undefined), undefined)
        })))
        yield* Deferred.await(bSetup)
        for (let i = 0; i < 10; i++) yield* Effect.yieldNow()
        // b waits for the section that a holds; interrupting it does not wait for a's commit
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(b)))
        assert.isTrue(Option.isNone(yield* registry.get("b")))
        assert.isTrue(Option.isNone(yield* Fiber.poll(a)), "a still holds the section")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(a)
        // the id b is free again, and the section is free
        const again = yield* registry.create({ sessionId: "b" })
        yield* again.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-06 closing the owner Scope during setup stops the creation at once and rolls it back; the close awaits it", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const owner = yield* Scope.make()
        const inSetup = yield* Deferred.make<void>()
        const released = yield* Ref.make(false)
        const creating = yield* registry.create({
          sessionId: "a",
          setup: () =>
            Effect.gen(function*() {
              yield* Effect.addFinalizer(() => Ref.set(released, true))
              yield* Deferred.succeed(inSetup, undefined)
              yield* Effect.never
            })
        }).pipe(Scope.extend(owner), Effect.fork)
        yield* Deferred.await(inSetup)
        yield* Scope.close(owner, Exit.void)
        assert.isTrue(yield* Ref.get(released), "the close returned after the rollback")
        yield* assertNothingLeft("a")
        const error = yield* Effect.flip(Fiber.join(creating))
        assert.instanceOf(error, AgentError.AgentCreationVetoed)
        if (error instanceof AgentError.AgentCreationVetoed) assert.instanceOf(error.cause, AgentError.AgentInactive)
        // an owner that is already closed: the creation fails the same way and leaves nothing
        const closed = yield* Effect.flip(registry.create({ sessionId: "b" }).pipe(Scope.extend(owner)))
        assert.instanceOf(closed, AgentError.AgentCreationVetoed)
        yield* assertNothingLeft("b")
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-06 PUB-09 an owner closing while the creation publishes waits for it; the creation then rolls back in order", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const owner = yield* Scope.make()
        const inHook = yield* Deferred.make<void>()
        const releaseHook = yield* Deferred.make<void>()
        yield* registry.onCreated(() => pass(inHook, releaseHook))
        const creating = yield* registry.create({ sessionId: "a" }).pipe(Scope.extend(owner), Effect.fork)
        yield* Deferred.await(inHook)
        const closing = yield* Effect.fork(Scope.close(owner, Exit.void))
        yield* Effect.yieldNow()
        assert.isTrue(Option.isNone(yield* Fiber.poll(closing)), "the owner's close awaits the publication")
        yield* Deferred.succeed(releaseHook, undefined)
        yield* Fiber.join(closing)
        const error = yield* Effect.flip(Fiber.join(creating))
        assert.instanceOf(error, AgentError.AgentCreationVetoed)
        yield* assertNothingLeft("a")
        assert.deepStrictEqual(yield* feeds.agents.until("AgentDisposed:a"), [
          "AgentCreated:a",
          "AgentSessionStart:a:startup",
          "AgentDisposed:a"
        ])
        assert.deepStrictEqual(yield* rt.trace, [
          "session-detach a agent-live=false",
          "writer-released a session-live=false absent"
        ])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-06 an interruption after both entries entered completes the creation; the owner Scope then disposes it", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const inHook = yield* Deferred.make<void>()
        const releaseHook = yield* Deferred.make<void>()
        const returned = yield* Ref.make(false)
        yield* registry.onCreated(() =>
          pass(inHook, releaseHook)
        )
        const creating = yield* registry.create({ sessionId: "a" }).pipe(
          Effect.tap(() => Ref.set(returned, true)),
          Effect.scoped,
          Effect.fork
        )
        yield* Deferred.await(inHook)
        const interrupting = yield* Fiber.interrupt(creating).pipe(Effect.fork)
        yield* Deferred.succeed(releaseHook, undefined)
        const exit = yield* Fiber.join(interrupting)
        assert.isTrue(Exit.isInterrupted(exit))
        assert.deepStrictEqual(yield* feeds.agents.until("AgentDisposed:a"), [
          "AgentCreated:a",
          "AgentSessionStart:a:startup",
          "AgentDisposed:a"
        ])
        assert.deepStrictEqual(yield* feeds.sessions.until("SessionDisposed:a"), [
          "SessionCreated:a",
          "SessionDisposed:a"
        ])
        // it was published, so its stored session is kept; the writer was released
        assert.deepStrictEqual(yield* rt.trace, [
          "session-detach a agent-live=false",
          "writer-released a session-live=false free"
        ])
        assert.deepStrictEqual(yield* registry.list, [])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-06 interrupting the caller after create returned does not touch the agent", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.text("still here")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const owner = yield* Effect.scope
        const created = yield* Deferred.make<Agent.AgentHandle>()
        const caller = yield* registry.create({ sessionId: "a", options: route }).pipe(
          Effect.flatMap((handle) => Deferred.succeed(created, handle)),
          Effect.zipRight(Effect.never),
          Scope.extend(owner),
          Effect.fork
        )
        const handle = yield* Deferred.await(created)
        yield* Fiber.interrupt(caller)
        assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), handle.agent)
        assert.strictEqual(yield* handle.agent.status, "idle")
        yield* handle.agent.followup(Message.user("hi", { id: "m1" }))
        yield* handle.agent.whenIdle
        assert.include(typesOf(yield* handle.agent.session.events), "turn/end")
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-07 a failing setup or commit rolls back: nothing published, setup's resources released, the id free", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const released = yield* Ref.make<ReadonlyArray<string>>([])
        const failing = (where: "setup" | "commit") =>
          registry.create({
            sessionId: "a",
            setup: (agent) =>
              Effect.gen(function*() {
                yield* agent.tools.register(noop)
                yield* Effect.addFinalizer(() => note(released, where))
                if (where === "setup") return yield* new Boom({ where })
                return { commit: Effect.fail(new Boom({ where })) }
              })
          })
        for (const where of ["setup", "commit"] as const) {
          const error = yield* Effect.flip(failing(where))
          assert.instanceOf(error, Boom)
          if (error instanceof Boom) assert.strictEqual(error.where, where)
          yield* assertNothingLeft("a")
        }
        assert.deepStrictEqual(yield* Ref.get(released), ["setup", "commit"])
        assert.deepStrictEqual(yield* rt.trace, [
          "writer-released a session-live=false absent",
          "writer-released a session-live=false absent"
        ])
        yield* createsCleanly(feeds, "a")
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-08 a vetoing onCreated hook rolls back with paired events only for what was announced", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const store = yield* SessionStore
        const feeds = yield* watch()
        const vetoAgent = yield* Ref.make(true)
        const vetoSession = yield* Ref.make(false)
        const released = yield* Ref.make(0)
        yield* store.onCreated(() =>
          Effect.flatMap(Ref.get(vetoSession), (veto) => (veto ? Effect.fail("no session") : Effect.void))
        )
        yield* registry.onCreated(() =>
          Effect.flatMap(Ref.get(vetoAgent), (veto) => (veto ? Effect.fail("no agent") : Effect.void))
        )
        const create = (id: string) =>
          registry.create({
            sessionId: id,
            setup: () => Effect.addFinalizer(() => Ref.update(released, (n) => n + 1))
          })

        const vetoed = yield* Effect.flip(create("a"))
        assert.instanceOf(vetoed, AgentError.AgentCreationVetoed)
        assert.strictEqual(yield* Ref.get(released), 1)
        yield* assertNothingLeft("a")
        assert.deepStrictEqual(yield* feeds.agents.until("AgentDisposed:a"), ["AgentCreated:a", "AgentDisposed:a"])
        assert.deepStrictEqual(yield* feeds.sessions.until("SessionDisposed:a"), [
          "SessionCreated:a",
          "SessionDisposed:a"
        ])

        // a session veto: the agent was entered but never announced, so no AgentCreated/AgentDisposed
        yield* Ref.set(vetoAgent, false)
        yield* Ref.set(vetoSession, true)
        const sessionVetoed = yield* Effect.flip(create("b"))
        assert.instanceOf(sessionVetoed, AgentError.AgentCreationVetoed)
        assert.strictEqual(yield* Ref.get(released), 2)
        yield* assertNothingLeft("b")
        assert.deepStrictEqual(yield* feeds.sessions.until("SessionDisposed:b"), [
          "SessionCreated:a",
          "SessionDisposed:a",
          "SessionCreated:b",
          "SessionDisposed:b"
        ])

        yield* Ref.set(vetoSession, false)
        const a = yield* create("a")
        const b = yield* create("b")
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:b:startup"), [
          "AgentCreated:a",
          "AgentDisposed:a",
          "AgentCreated:a",
          "AgentSessionStart:a:startup",
          "AgentCreated:b",
          "AgentSessionStart:b:startup"
        ])
        yield* a.dispose
        yield* b.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-11 a send from another fiber waits for publication (then runs after AgentSessionStart) or fails AgentInactive after a veto", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.text("answer")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch({ allAgentEvents: true })
        const inHook = yield* Deferred.make<void>()
        const releaseHook = yield* Deferred.make<boolean>()
        yield* registry.onCreated(() =>
          Deferred.succeed(inHook, undefined).pipe(
            Effect.zipRight(Deferred.await(releaseHook)),
            Effect.flatMap((veto) => (veto ? Effect.fail("vetoed") : Effect.void))
          )
        )
        yield* registry.onSessionStart((agent) =>
          Effect.orDie(
            agent.inject(Message.user("preamble", { id: "pre", source: { kind: "plugin", plugin: "test" } }))
          )
        )
        const creating = yield* registry.create({ sessionId: "a", options: route }).pipe(Effect.fork)
        yield* Deferred.await(inHook)
        const found = Option.getOrThrow(yield* registry.get("a"))
        const sending = yield* Effect.fork(found.followup(Message.user("hello", { id: "m1" })))
        yield* Effect.yieldNow()
        assert.isTrue(Option.isNone(yield* Fiber.poll(sending)), "the send waits for the publication")
        yield* Deferred.succeed(releaseHook, false)
        const handle = yield* Fiber.join(creating)
        yield* Fiber.join(sending)
        yield* handle.agent.whenIdle
        const request = yield* rt.model.awaitRequest(1)
        assert.deepStrictEqual(request.messages.filter((m) => m.role === "user").map((m) => m.id), ["pre", "m1"])
        const lines = (yield* feeds.agents.until("TurnStarted:a")).filter((l) =>
          l.startsWith("Agent") && !l.startsWith("AgentStatus") || l.startsWith("TurnStarted")
        )
        assert.deepStrictEqual(lines, ["AgentCreated:a", "AgentSessionStart:a:startup", "TurnStarted:a"])
        yield* handle.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-11 after a veto, a send that was waiting for the publication fails AgentInactive", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const inHook = yield* Deferred.make<void>()
        const releaseHook = yield* Deferred.make<void>()
        yield* registry.onCreated(() =>
          pass(inHook, releaseHook).pipe(
            Effect.zipRight(Effect.fail("vetoed"))
          )
        )
        const creating = yield* registry.create({ sessionId: "v", options: route }).pipe(Effect.fork)
        yield* Deferred.await(inHook)
        const found = Option.getOrThrow(yield* registry.get("v"))
        const sending = yield* Effect.fork(Effect.flip(found.followup(Message.user("hello", { id: "m1" }))))
        yield* Deferred.succeed(releaseHook, undefined)
        assert.instanceOf(yield* Effect.flip(Fiber.join(creating)), AgentError.AgentCreationVetoed)
        const refused = yield* Fiber.join(sending)
        assert.instanceOf(refused, AgentError.AgentInactive)
        yield* assertNothingLeft("v")
        assert.deepStrictEqual(yield* rt.model.requests, [])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-10 invalid options, id, seed or meta fail before anything is published or stored", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const setups = yield* Ref.make(0)
        const setup = () => Ref.update(setups, (n) => n + 1)
        for (const maxTokens of [0, -1, 1.5, Number.NaN, 2 ** 53]) {
          const error = yield* Effect.flip(registry.create({ sessionId: "a", options: { ...route, maxTokens }, setup }))
          assert.instanceOf(error, AgentError.InvalidAgentOptions, `maxTokens ${maxTokens}`)
        }
        const badOptions = yield* Effect.flip(
          registry.create({ sessionId: "a", options: { maxStepsPerTurn: 0 }, setup })
        )
        assert.instanceOf(badOptions, AgentError.InvalidAgentOptions)
        for (const id of ["", "../etc", "a/b", "x".repeat(129), ".hidden"]) {
          const error = yield* Effect.flip(registry.create({ sessionId: id, setup }))
          assert.instanceOf(error, Message.InvalidSessionId, JSON.stringify(id))
        }
        const badMeta = yield* Effect.flip(registry.create({ sessionId: "a", meta: { n: Number.NaN }, setup }))
        assert.strictEqual(badMeta._tag, "InvalidEventData")
        const badSeed = yield* Effect.flip(registry.create({
          sessionId: "a",
          seed: [{ seq: 0, time: 0, type: "test/note", data: { n: Number.POSITIVE_INFINITY } }],
          setup
        }))
        assert.strictEqual(badSeed._tag, "InvalidEventData")
        const openSeed = yield* Effect.flip(registry.create({
          sessionId: "a",
          seed: [{ seq: 0, time: 0, type: "turn/start", data: { turn: 1 } }],
          setup
        }))
        assert.instanceOf(openSeed, AgentError.InvalidAgentOptions)
        assert.strictEqual(yield* Ref.get(setups), 0)
        yield* assertNothingLeft("a")
        // nothing was published before this creation's events
        yield* createsCleanly(feeds, "ok", { sessions: true })
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("PUB-10 a create or dispose from inside commit dies instead of deadlocking, and rolls back", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const other = yield* registry.create({ sessionId: "other" })
        const createInCommit = yield* Effect.exit(registry.create({
          sessionId: "a",
          setup: () => Effect.succeed({ commit: Effect.asVoid(Effect.scoped(registry.create({ sessionId: "b" }))) })
        }))
        assert.isTrue(Exit.isFailure(createInCommit) && Cause.isDie(createInCommit.cause), String(createInCommit))
        const disposeInCommit = yield* Effect.exit(registry.create({
          sessionId: "a",
          setup: () => Effect.succeed({ commit: Effect.orDie(other.dispose) })
        }))
        assert.isTrue(Exit.isFailure(disposeInCommit) && Cause.isDie(disposeInCommit.cause), String(disposeInCommit))
        assert.deepStrictEqual((yield* registry.list).map((a) => a.id), ["other"])
        assert.isTrue(Option.isNone(yield* registry.get("b")))
        const persistence = yield* SessionPersistence
        assert.isFalse(yield* persistence.exists(sid("a")))
        assert.isFalse(yield* persistence.exists(sid("b")))
        yield* other.dispose
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("AgentLoop fork (FORK-01)", () => {
  it.scoped("FORK-01 CreateOptions.fork and agent.fork seed a child up to the last closed turn, without the parent's pending inbox", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.text("parent answer"), Model.text("child answer")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const parent = yield* registry.create({ sessionId: "parent", options: route })
        yield* parent.agent.followup(Message.user("first", { id: "m1" }))
        yield* parent.agent.whenIdle
        yield* parent.agent.inject(Message.user("pending", { id: "m2" }))
        const parentEvents = yield* parent.agent.session.events
        assert.deepStrictEqual((yield* parent.agent.inbox.nextStep).map((m) => m.id), ["m2"])

        const child = yield* registry.create({
          sessionId: "child",
          options: route,
          fork: { from: parent.agent.session }
        })
        const childEvents = yield* child.agent.session.events
        assert.deepStrictEqual(childEvents, parentEvents, "the seed is the parent's log up to its last closed turn")
        assert.strictEqual(child.agent.session.header.parentSession, "parent")
        assert.strictEqual(child.agent.session.header.seedLength, parentEvents.length)
        assert.deepStrictEqual(yield* child.agent.inbox.nextStep, [])
        assert.deepStrictEqual(yield* child.agent.inbox.nextTurn, [])
        // persisted like any new session
        assert.deepStrictEqual(yield* rt.storage.events(sid("child")), childEvents)
        // the child continues from the seeded history
        yield* child.agent.followup(Message.user("second", { id: "m3" }))
        yield* child.agent.whenIdle
        const request = yield* rt.model.awaitRequest(2)
        assert.strictEqual(request.sessionId, "child")
        assert.deepStrictEqual(
          request.messages.map((m) => m.role === "assistant" ? `assistant:${Message.textOf(m.content)}` : m.id),
          ["m1", "assistant:parent answer", "m3"]
        )
        const turns = (yield* child.agent.session.events).filter((e) => e.type === "turn/start").map((e) => e.data)
        assert.deepStrictEqual(turns, [{ turn: 1 }, { turn: 2 }])

        // agent.fork: the sugar, owned by the caller's Scope
        const sugar = yield* parent.agent.fork({ childId: "sugar", options: route })
        assert.strictEqual(sugar.agent.session.header.parentSession, "parent")
        assert.deepStrictEqual(yield* sugar.agent.session.events, parentEvents)
        assert.deepStrictEqual(yield* sugar.agent.inbox.nextStep, [])
        assert.isFalse(yield* registry.isOwnedBy("sugar", parent.agent), "lineage is not ownership")

        // an upTo inside an open turn, or both seed and fork, create nothing
        const inside = yield* Effect.flip(parent.agent.fork({ childId: "inside", upTo: 3 }))
        assert.strictEqual(inside._tag, "ForkInsideOpenTurn")
        const both = yield* Effect.flip(registry.create({
          sessionId: "both",
          seed: [],
          fork: { from: parent.agent.session }
        }))
        assert.instanceOf(both, AgentError.InvalidAgentOptions)
        const persistence = yield* SessionPersistence
        assert.isFalse(yield* persistence.exists(sid("inside")))
        assert.isFalse(yield* persistence.exists(sid("both")))
        assert.deepStrictEqual((yield* registry.list).map((a) => a.id), ["parent", "child", "sugar"])
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("AgentLoop teardown (LIFE)", () => {
  it.scoped(
    "LIFE-01 LIFE-06 CORE-02 teardown order: stop (turn aborted {disposed}) → agent Scope closed → AgentDisposed → SessionDisposed → writer released; the inbox is kept",
    () =>
      Effect.gen(function*() {
        const storage = yield* SessionPersistenceModule.makeMemoryStorage
        const rt = yield* makeRuntime([Model.hang("partial")], { storage })
        const trace = yield* Ref.make<ReadonlyArray<string>>([])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const liveness = yield* livenessProbe
          const feeds = yield* watch({ allAgentEvents: true })
          const handle = yield* registry.create({
            sessionId: "a",
            options: route,
            setup: (agent) =>
              Effect.addFinalizer(() =>
                Effect.gen(function*() {
                  const live = yield* registry.get(agent.id)
                  const status = Option.isSome(live) ? yield* live.value.status : "gone"
                  const events = yield* agent.session.events
                  const last = events[events.length - 1]
                  const findable = yield* liveness(agent.id)
                  yield* note(trace, `agent-scope-closed ${findable} status=${status} last=${last?.type}`)
                })
              )
          })
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          yield* rt.model.awaitRequest(1)
          yield* handle.agent.followup(Message.user("queued tail", { id: "m2" }))
          yield* handle.dispose
          assert.deepStrictEqual([...(yield* Ref.get(trace)), ...(yield* rt.trace)], [
            "agent-scope-closed agent=true session=true status=idle last=turn/end",
            "session-detach a agent-live=false",
            "writer-released a session-live=false free"
          ])
          const events = yield* handle.agent.session.events
          assert.deepStrictEqual(typesOf(events).slice(-3), ["assistant/message", "step/end", "turn/end"])
          const turnEnd = events.filter((e) => e.type === "turn/end")
          assert.deepStrictEqual(turnEnd.map((e) => e.data), [
            { turn: 1, reason: { kind: "aborted", cause: { kind: "disposed" } } }
          ])
          assert.strictEqual(events.filter((e) => e.type === "turn/start").length, 1, "the queued tail never started")
          const interrupted = events.filter(SessionEventModule.is("assistant/message"))
          assert.deepStrictEqual(
            interrupted.map((e) => [e.data.interrupted, e.data.message.content]),
            [[true, [{ type: "text", text: "partial" }]]]
          )
          assert.isFalse(
            events.filter(SessionEventModule.is("agent/inbox/spliced")).some((e) => e.data.outcome === "canceled"),
            "disposal keeps the inbox: no canceled splices"
          )
          assert.deepStrictEqual(yield* storage.events(sid("a")), events)
          const lifecycle = (yield* feeds.agents.until("AgentDisposed:a")).filter((line) =>
            !line.startsWith("Inbox") && !line.startsWith("ModelDelta")
          )
          assert.deepStrictEqual(lifecycle, [
            "AgentCreated:a",
            "AgentSessionStart:a:startup",
            "AgentStatusChanged:a:running",
            "TurnStarted:a",
            // EVS-02: the partial message the closers logged (interrupted) is announced before the end
            "AssistantMessage:a",
            "TurnEnded:a:1:aborted",
            "AgentStatusChanged:a:idle",
            "AgentDisposed:a"
          ])
          assert.deepStrictEqual(yield* feeds.sessions.until("SessionDisposed:a"), [
          "SessionCreated:a",
          "SessionDisposed:a"
        ])
        }).pipe(Effect.provide(rt.context))

        // the pending follow-up is still pending after a resume
        const rt2 = yield* makeRuntime([], { storage })
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const resumed = yield* registry.resume({ sessionId: "a" })
          assert.deepStrictEqual((yield* resumed.agent.inbox.nextTurn).map((m) => m.id), ["m2"])
          yield* resumed.dispose
        }).pipe(Effect.provide(rt2.context))
      })
  )

  it.scoped(
    "CORE-02 closing the agent's lifecycle Scope is the teardown: the steps its creation added run in LIFE-01 order (stop, agent Scope, AgentDisposed, SessionDisposed, writer), and a dispose afterwards finds it done",
    () =>
      Effect.gen(function*() {
        const storage = yield* SessionPersistenceModule.makeMemoryStorage
        const rt = yield* makeRuntime([Model.hang("partial")], { storage })
        const trace = yield* Ref.make<ReadonlyArray<string>>([])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const liveness = yield* livenessProbe
          const feeds = yield* watch({ allAgentEvents: true })
          const handle = yield* registry.create({
            sessionId: "core02",
            options: route,
            setup: (agent) =>
              Effect.addFinalizer(() =>
                Effect.gen(function*() {
                  const live = yield* registry.get(agent.id)
                  const status = Option.isSome(live) ? yield* live.value.status : "gone"
                  const events = yield* agent.session.events
                  yield* note(trace, `agent-scope-closed ${yield* liveness(agent.id)} status=${status} last=${events[events.length - 1]?.type}`)
                })
              )
          })
          yield* handle.agent.followup(Message.user("go", { id: "m1" }))
          yield* rt.model.awaitRequest(1)
          const lifecycle = internalAgent.lifecycleOf(handle.agent)
          assert.isDefined(lifecycle, "an agent the loop built has a lifecycle Scope")
          // the Scope itself, closed from outside any owner: nothing else runs the steps
          yield* Scope.close(lifecycle!, Exit.void)
          assert.deepStrictEqual([...(yield* Ref.get(trace)), ...(yield* rt.trace)], [
            // 1. the driver stopped (the turn ended aborted, the agent idle), 2. then the agent Scope closed
            "agent-scope-closed agent=true session=true status=idle last=turn/end",
            // 3. the agent detached before 4. the session, 5. whose writer is released last
            "session-detach core02 agent-live=false",
            "writer-released core02 session-live=false free"
          ])
          const events = yield* handle.agent.session.events
          assert.deepStrictEqual(events.filter((e) => e.type === "turn/end").map((e) => e.data), [
            { turn: 1, reason: { kind: "aborted", cause: { kind: "disposed" } } }
          ])
          assert.deepStrictEqual(yield* storage.events(sid("core02")), events)
          const announced = (yield* feeds.agents.until("AgentDisposed:core02")).filter((line) => line.startsWith("Agent"))
          assert.strictEqual(announced[announced.length - 1], "AgentDisposed:core02")
          assert.deepStrictEqual(yield* feeds.sessions.until("SessionDisposed:core02"), [
            "SessionCreated:core02",
            "SessionDisposed:core02"
          ])
          // the owners' teardown closes the same Scope: nothing runs twice, and it succeeds
          yield* handle.dispose
          assert.strictEqual((yield* rt.trace).length, 2, "no step ran again")
          // LIFE-04: afterwards the id can be resumed
          const resumed = yield* registry.resume({ sessionId: "core02" })
          assert.strictEqual(resumed.agent.id, "core02")
          yield* resumed.dispose
        }).pipe(Effect.provide(rt.context))
      })
  )

  it.scoped(
    "LIFE-06 once teardown began, send/followup/steer/inject/runMaintenance/spawn/tool and hook registration fail AgentInactive; whenIdle and cancel succeed writing nothing",
    () =>
      Effect.gen(function*() {
        const rt = yield* makeRuntime([])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const liveness = yield* livenessProbe
          const inFinalizer = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const handle = yield* registry.create({
            sessionId: "a",
            options: route,
            setup: () =>
              Effect.addFinalizer(() => pass(inFinalizer, release))
          })
          const agent = handle.agent
          const disposing = yield* Effect.fork(handle.dispose)
          yield* Deferred.await(inFinalizer)
          const before = (yield* agent.session.events).length
          const check = Effect.gen(function*() {
            const message = Message.user("late")
            const refused = [
              yield* Effect.flip(agent.send(message, "next-turn", true)),
              yield* Effect.flip(agent.followup(message)),
              yield* Effect.flip(agent.steer(message)),
              yield* Effect.flip(agent.inject(message)),
              yield* Effect.flip(agent.runMaintenance(Effect.void)),
              yield* Effect.flip(Effect.scoped(agent.spawn({ sessionId: "child" }))),
              yield* Effect.flip(Effect.scoped(agent.tools.register(noop))),
              yield* Effect.flip(Effect.scoped(agent.hooks.turnStopping(() => Effect.void)))
            ]
            for (const error of refused) {
              assert.instanceOf(error, AgentError.AgentInactive)
              if (error instanceof AgentError.AgentInactive) assert.strictEqual(error.id, "a")
            }
            yield* agent.whenIdle
            yield* agent.cancel({ kind: "user" })
            yield* agent.cancel({ kind: "user" }, { keepInbox: true })
          })
          yield* check
          // still findable while teardown runs (LIFE-04), and nothing was written
          assert.strictEqual(yield* liveness("a"), "agent=true session=true")
          assert.strictEqual((yield* agent.session.events).length, before)
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(disposing)
          yield* check
          assert.strictEqual((yield* agent.session.events).length, before)
          assert.isTrue(Option.isNone(yield* registry.get("child")))
        }).pipe(Effect.provide(rt.context))
      })
  )

  it.scoped("LIFE-02 handle dispose, owner Scope close and factory close converge on one teardown that every owner awaits", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const liveness = yield* livenessProbe
        const owner = yield* Scope.make()
        const inFinalizer = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const runs = yield* Ref.make(0)
        const handle = yield* registry.create({
          sessionId: "a",
          setup: () =>
            Effect.addFinalizer(() =>
              Ref.update(runs, (n) => n + 1).pipe(
                Effect.zipRight(Deferred.succeed(inFinalizer, undefined)),
                Effect.zipRight(Deferred.await(release))
              )
            )
        }).pipe(Scope.extend(owner))
        const disposing = yield* Effect.fork(handle.dispose)
        yield* Deferred.await(inFinalizer)
        const closingOwner = yield* Effect.fork(Scope.close(owner, Exit.void))
        const closingLoop = yield* Effect.fork(rt.closeLoop)
        const disposingAgain = yield* Effect.fork(handle.dispose)
        yield* Effect.yieldNow()
        for (const fiber of [disposing, closingOwner, closingLoop, disposingAgain]) {
          assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)), "every owner awaits the teardown")
        }
        assert.strictEqual(yield* liveness("a"), "agent=true session=true")
        // interrupting an awaiter does not stop the teardown
        assert.isTrue(Exit.isInterrupted(yield* Fiber.interrupt(disposingAgain)))
        yield* Deferred.succeed(release, undefined)
        for (const fiber of [disposing, closingOwner, closingLoop]) {
          assert.isTrue(Exit.isSuccess(yield* Fiber.await(fiber)))
        }
        assert.strictEqual(yield* Ref.get(runs), 1)
        assert.strictEqual(yield* liveness("a"), "agent=false session=false")
        assert.deepStrictEqual(yield* rt.trace, [
          "session-detach a agent-live=false",
          "writer-released a session-live=false free"
        ])
        yield* handle.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("LIFE-02 a teardown step that dies is every owner's outcome: no owner waits forever", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const factory = yield* AgentLoop.AgentLoop
        // a factory's caller other than the registry: its publisher's detach dies (a bug of its own)
        const { publisher } = yield* internalRegistry.makeWithPublisher()
        const dying: AgentPublisher = { ...publisher, detach: () => Effect.dieMessage("detach exploded") }
        const owner = yield* Scope.make()
        const handle = yield* factory.create<never, never>({ sessionId: "a" }, owner, dying)
        const disposed = yield* Effect.exit(handle.dispose)
        assert.isTrue(Exit.isFailure(disposed) && Cause.isDie(disposed.cause))
        // a second owner gets the same outcome at once, and the owner's close returns
        assert.deepStrictEqual(yield* Effect.exit(handle.dispose), disposed)
        yield* Scope.close(owner, Exit.void)
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("LIFE-02 a dispose from the agent's own setup finalizer, tool or loop hook does not deadlock", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.toolCall("c1", "shutdown", "{}"), Model.text("for c")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const liveness = yield* livenessProbe
        // a setup finalizer that disposes its own agent
        const own = yield* Deferred.make<Agent.AgentHandle>()
        const disposedFromFinalizer = yield* Ref.make(false)
        const first = yield* registry.create({
          sessionId: "a",
          setup: () =>
            Effect.addFinalizer(() =>
              Deferred.await(own).pipe(
                Effect.flatMap((handle) => Effect.ignore(handle.dispose)),
                Effect.zipRight(Ref.set(disposedFromFinalizer, true))
              )
            )
        })
        yield* Deferred.succeed(own, first)
        yield* first.dispose
        assert.isTrue(yield* Ref.get(disposedFromFinalizer))
        assert.strictEqual(yield* liveness("a"), "agent=false session=false")

        // a tool that disposes its own agent
        const mine = yield* Deferred.make<Agent.AgentHandle>()
        const shutdown = Tool.make({
          name: "shutdown",
          description: "disposes the agent that calls it",
          parameters: Schema.Struct({}),
          run: () =>
            Deferred.await(mine).pipe(
              Effect.flatMap((handle) => Effect.orDie(handle.dispose)),
              Effect.as(Tool.text("disposed"))
            )
        })
        const second = yield* registry.create({
          sessionId: "b",
          options: route,
          setup: (agent) => agent.tools.register(shutdown)
        })
        yield* Deferred.succeed(mine, second)
        yield* second.agent.followup(Message.user("stop yourself", { id: "m1" }))
        yield* second.agent.whenIdle
        yield* second.dispose
        assert.strictEqual(yield* liveness("b"), "agent=false session=false")
        const events = yield* second.agent.session.events
        const results = events.filter(SessionEventModule.is("tool/result"))
        assert.deepStrictEqual(results.map((e) => e.data.error?.code), ["ABORTED"])
        assert.deepStrictEqual(events[events.length - 1]?.data, {
          turn: 1,
          reason: { kind: "aborted", cause: { kind: "disposed" } }
        })

        // a loop hook that disposes its own agent
        const hooked = yield* Deferred.make<Agent.AgentHandle>()
        const third = yield* registry.create({
          sessionId: "c",
          options: route,
          setup: (agent) =>
            agent.hooks.turnStopping(() =>
              Deferred.await(hooked).pipe(Effect.flatMap((handle) => Effect.orDie(handle.dispose)))
            )
        })
        yield* Deferred.succeed(hooked, third)
        yield* third.agent.followup(Message.user("finish", { id: "m1" }))
        yield* third.agent.whenIdle
        yield* third.dispose
        assert.strictEqual(yield* liveness("c"), "agent=false session=false")
        const ends = (yield* third.agent.session.events).filter(SessionEventModule.is("turn/end"))
        assert.deepStrictEqual(ends.map((e) => e.data.reason), [{ kind: "aborted", cause: { kind: "disposed" } }])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("LIFE-03 failures of scope finalizers are combined in one AgentDisposeError; unregistration completes; every caller gets it", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const liveness = yield* livenessProbe
        const release = yield* Deferred.make<void>()
        const inFinalizer = yield* Deferred.make<void>()
        const owner = yield* Scope.make()
        const handle = yield* registry.create({
          sessionId: "a",
          setup: () =>
            Effect.gen(function*() {
              yield* Effect.addFinalizer(() => Effect.dieMessage("first finalizer failed"))
              yield* Effect.addFinalizer(() => Effect.dieMessage("second finalizer failed"))
              yield* Effect.addFinalizer(() => pass(inFinalizer, release))
            })
        }).pipe(Scope.extend(owner))
        const first = yield* Effect.fork(Effect.flip(handle.dispose))
        yield* Deferred.await(inFinalizer)
        const second = yield* Effect.fork(Effect.flip(handle.dispose))
        const closing = yield* Effect.fork(Scope.close(owner, Exit.void))
        yield* Deferred.succeed(release, undefined)
        const a = yield* Fiber.join(first)
        const b = yield* Fiber.join(second)
        yield* Fiber.join(closing)
        assert.instanceOf(a, AgentError.AgentDisposeError)
        assert.strictEqual(a, b, "every dispose caller gets the same error")
        assert.isTrue(Cause.isCause(a.cause), "the cause is kept whole")
        if (Cause.isCause(a.cause)) {
          const messages = Array.from(Cause.defects(a.cause), (d) => (d instanceof Error ? d.message : String(d)))
          assert.deepStrictEqual(messages.sort(), ["first finalizer failed", "second finalizer failed"])
        }
        assert.strictEqual(yield* liveness("a"), "agent=false session=false")
        assert.deepStrictEqual(yield* rt.trace, [
          "session-detach a agent-live=false",
          "writer-released a session-live=false free"
        ])
        assert.strictEqual(yield* Effect.flip(handle.dispose), a)
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("LIFE-05 work a status listener queues on the disposal's own idle transition is refused; nothing is written after", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.hang("partial"), Model.text("never")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "a", options: route })
        const agent = handle.agent
        const statuses = yield* agent.subscribe
        const attempt = yield* Deferred.make<string>()
        yield* statuses.pipe(
          Stream.filter((event) => event._tag === "AgentStatusChanged" && event.status === "idle"),
          Stream.take(1),
          Stream.runForEach(() =>
            outcomeTag(agent.followup(Message.user("replacement", { id: "m2" }))).pipe(
              Effect.flatMap((tag) => Deferred.succeed(attempt, tag))
            )
          ),
          Effect.forkScoped
        )
        yield* agent.followup(Message.user("go", { id: "m1" }))
        yield* rt.model.awaitRequest(1)
        yield* handle.dispose
        assert.strictEqual(yield* Deferred.await(attempt), "AgentInactive")
        const events = yield* agent.session.events
        assert.strictEqual(events.filter((e) => e.type === "turn/start").length, 1)
        assert.deepStrictEqual(yield* rt.storage.events(sid("a")), events, "nothing was written after teardown")
        assert.strictEqual((yield* rt.model.requests).length, 1)
        assert.strictEqual(yield* agent.status, "idle")
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("LIFE-04 the agent and session stay findable until teardown finished; then the id can be created again", () =>
    Effect.gen(function*() {
      const rt = yield* makeVolatileRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const liveness = yield* livenessProbe
        const store = yield* SessionStore
        const inFinalizer = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const handle = yield* registry.create({
          sessionId: "a",
          setup: () =>
            Effect.addFinalizer(() => pass(inFinalizer, release))
        })
        const disposing = yield* Effect.fork(handle.dispose)
        yield* Deferred.await(inFinalizer)
        assert.strictEqual(Option.getOrThrow(yield* registry.get("a")), handle.agent)
        assert.strictEqual(Option.getOrThrow(yield* store.get("a")), handle.agent.session)
        const early = yield* Effect.flip(registry.create({ sessionId: "a" }))
        assert.instanceOf(early, AgentError.AgentAlreadyExists)
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(disposing)
        assert.strictEqual(yield* liveness("a"), "agent=false session=false")
        const again = yield* registry.create({ sessionId: "a" })
        assert.notStrictEqual(again.agent, handle.agent)
        yield* again.dispose
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("AgentLoop ownership (OWN)", () => {
  it.scoped("OWN-03 spawned children are disposed before the parent leaves the registry; a child of another Scope survives as a root", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const liveness = yield* livenessProbe
        const feeds = yield* watch()
        const spawnInTeardown = yield* Ref.make<string>("not tried")
        const parent = yield* registry.create({
          sessionId: "parent",
          setup: (agent) =>
            Effect.gen(function*() {
              yield* agent.spawn({ sessionId: "c1" })
              // added after c1 was spawned, so it runs first: the parent is tearing down, c1 still live
              yield* Effect.addFinalizer(() =>
                outcomeTag(Effect.scoped(agent.spawn({ sessionId: "late" }))).pipe(
                  Effect.flatMap((tag) => Ref.set(spawnInTeardown, tag))
                )
              )
            })
        })
        const c2 = yield* parent.agent.spawn({ sessionId: "c2" })
        const detached = yield* registry.create({ sessionId: "detached", parentAgent: parent.agent })
        assert.deepStrictEqual((yield* registry.roots).map((a) => a.id), ["parent"])
        assert.isTrue(yield* registry.isOwnedBy("c1", parent.agent))
        assert.isTrue(yield* registry.isOwnedBy("c2", parent.agent))
        assert.isTrue(yield* registry.isOwnedBy("detached", parent.agent))

        yield* parent.dispose
        assert.strictEqual(yield* Ref.get(spawnInTeardown), "AgentInactive")
        assert.deepStrictEqual(yield* feeds.agents.until("AgentDisposed:parent"), [
          "AgentCreated:c1",
          "AgentSessionStart:c1:startup",
          "AgentCreated:parent",
          "AgentSessionStart:parent:startup",
          "AgentCreated:c2",
          "AgentSessionStart:c2:startup",
          "AgentCreated:detached",
          "AgentSessionStart:detached:startup",
          "AgentDisposed:c2",
          "AgentDisposed:c1",
          "AgentDisposed:parent"
        ])
        const sessionLines = yield* feeds.sessions.until("SessionDisposed:parent")
        assert.deepStrictEqual(sessionLines.filter((l) => l.startsWith("SessionDisposed")), [
          "SessionDisposed:c2",
          "SessionDisposed:c1",
          "SessionDisposed:parent"
        ])
        assert.deepStrictEqual((yield* registry.list).map((a) => a.id), ["detached"])
        assert.deepStrictEqual((yield* registry.roots).map((a) => a.id), ["detached"])
        assert.isFalse(yield* registry.isOwnedBy("detached", parent.agent))
        assert.strictEqual(yield* liveness("late"), "agent=false session=false")
        const afterwards = yield* Effect.flip(Effect.scoped(parent.agent.spawn({ sessionId: "later" })))
        assert.instanceOf(afterwards, AgentError.AgentInactive)
        yield* c2.dispose
        yield* detached.dispose
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("OWN-05 registry.get exposes the bare agent, never dispose", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "a" })
        const found = Option.getOrThrow(yield* registry.get("a"))
        assert.strictEqual(found, handle.agent)
        assert.isFalse("dispose" in found)
        for (const agent of yield* registry.list) assert.isFalse("dispose" in agent)
        assert.isTrue("dispose" in handle)
      }).pipe(Effect.provide(rt.context))
    }))
})

describe("AgentLoop factory (FAC-04)", () => {
  it.scoped(
    "FAC-04 closing the AgentLoop layer clears the slot first, disposes every agent it made, fails in-flight creations not yet entered with AgentLoopInactive",
    () =>
      Effect.gen(function*() {
        const rt = yield* makeRuntime([])
        yield* Effect.gen(function*() {
          const registry = yield* AgentRegistry
          const liveness = yield* livenessProbe
          const createInTeardown = yield* Ref.make("not tried")
          const a = yield* registry.create({
            sessionId: "a",
            setup: () =>
              Effect.addFinalizer(() =>
                outcomeTag(Effect.scoped(registry.create({ sessionId: "during" }))).pipe(
                  Effect.flatMap((tag) => Ref.set(createInTeardown, tag))
                )
              )
          })
          const otherOwner = yield* Scope.make()
          const b = yield* registry.create({ sessionId: "b" }).pipe(Scope.extend(otherOwner))

          // an in-flight creation still in setup
          const inSetup = yield* Deferred.make<void>()
          const preparing = yield* registry.create({
            sessionId: "c",
            setup: () => Effect.zipRight(Deferred.succeed(inSetup, undefined), Effect.never)
          }).pipe(Effect.scoped, Effect.fork)
          yield* Deferred.await(inSetup)
          // an in-flight creation already entered (its onCreated hook is gated)
          const inHook = yield* Deferred.make<void>()
          const releaseHook = yield* Deferred.make<void>()
          yield* registry.onCreated((agent) =>
            agent.id === "e" ? pass(inHook, releaseHook) : Effect.void
          )
          const entered = yield* registry.create({ sessionId: "e" }).pipe(Effect.fork)
          yield* Deferred.await(inHook)

          const closing = yield* Effect.fork(rt.closeLoop)
          const failed = yield* Effect.flip(Fiber.join(preparing))
          assert.instanceOf(failed, AgentError.AgentLoopInactive)
          assert.isTrue(Option.isNone(yield* Fiber.poll(closing)), "the close waits for the entered creation")
          yield* Deferred.succeed(releaseHook, undefined)
          const e = yield* Fiber.join(entered)
          yield* Fiber.join(closing)

          assert.strictEqual(yield* Ref.get(createInTeardown), "NoAgentFactory")
          assert.deepStrictEqual(yield* registry.list, [])
          assert.strictEqual(yield* liveness("e"), "agent=false session=false")
          const noFactory = yield* Effect.flip(Effect.scoped(registry.create({ sessionId: "z" })))
          assert.instanceOf(noFactory, AgentError.NoAgentFactory)
          yield* a.dispose
          yield* b.dispose
          yield* e.dispose
          yield* Scope.close(otherOwner, Exit.void)
          const persistence = yield* SessionPersistence
          assert.isFalse(yield* persistence.exists(sid("c")))
          assert.isFalse(yield* persistence.exists(sid("during")))
        }).pipe(Effect.provide(rt.context))
      })
  )
})

class Assistant extends Context.Tag("test/Assistant")<Assistant, Agent.Agent>() {}

describe("Agents as Layers (§7.4)", () => {
  it.scoped("Agent.layer provides an agent to a service; releasing the layer disposes it; { resume: true } resumes it", () =>
    Effect.gen(function*() {
      const rt = yield* makeRuntime([Model.text("first answer"), Model.text("second answer")])
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const feeds = yield* watch()
        const useAssistant = (text: string) =>
          Effect.gen(function*() {
            const assistant = yield* Assistant
            yield* assistant.followup(Message.user(text))
            yield* assistant.whenIdle
            assert.strictEqual(Option.getOrThrow(yield* registry.get("assistant")), assistant)
            return yield* assistant.session.messages
          })
        yield* useAssistant("hello").pipe(
          Effect.provide(Agent.layer(Assistant, { sessionId: "assistant", options: route }))
        )
        assert.isTrue(Option.isNone(yield* registry.get("assistant")), "releasing the layer disposed it")
        const messages = yield* useAssistant("again").pipe(
          Effect.provide(Agent.layer(Assistant, { sessionId: "assistant", options: route, resume: true }))
        )
        assert.deepStrictEqual(messages.map((m) => m.role), ["user", "assistant", "user", "assistant"])
        assert.isTrue(Option.isNone(yield* registry.get("assistant")))
        assert.deepStrictEqual(yield* feeds.agents.until("AgentSessionStart:assistant:resume"), [
          "AgentCreated:assistant",
          "AgentSessionStart:assistant:startup",
          "AgentDisposed:assistant",
          "AgentCreated:assistant",
          "AgentSessionStart:assistant:resume"
        ])
      }).pipe(Effect.provide(rt.context))
    }))

  it.scoped("AgentRuntime.layerMemory runs agents over shared storage that a second runtime resumes", () =>
    Effect.gen(function*() {
      const storage = yield* SessionPersistenceModule.makeMemoryStorage
      const model = yield* Model.scripted([Model.text("one"), Model.text("two")])
      const runtime = (instanceId: string) =>
        AgentRuntime.layerMemory({ storage, instanceId }).pipe(Layer.provide(model.layer))
      yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.create({ sessionId: "mem", options: route })
        yield* handle.agent.followup(Message.user("hi"))
        yield* handle.agent.whenIdle
      }).pipe(Effect.scoped, Effect.provide(runtime("first")))
      const resumed = yield* Effect.gen(function*() {
        const registry = yield* AgentRegistry
        const handle = yield* registry.resume({ sessionId: "mem" })
        yield* handle.agent.followup(Message.user("again"))
        yield* handle.agent.whenIdle
        return yield* handle.agent.session.messages
      }).pipe(Effect.scoped, Effect.provide(runtime("second")))
      assert.deepStrictEqual(resumed.map((m) => m.role), ["user", "assistant", "user", "assistant"])
    }))
})
