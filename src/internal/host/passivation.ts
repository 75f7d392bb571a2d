/**
 * The AgentHost's passivation and capacity (HOST-02): an idle agent is disposed after `idleTimeout`
 * (its inbox kept, LIFE-06) and comes back on the next `get`; at `maxLive` a new activation
 * passivates the least recently used idle agent, or waits for a slot until `activationTimeout`.
 *
 * @internal
 */
import type { Scope as ScopeNs } from "effect"
import { Clock, Deferred, Duration, Effect, Exit, FiberId, FiberMap, FiberSet, Option, Scope, Stream } from "effect"
import type { AgentEvent } from "../../AgentEvent.js"
import * as HostError from "./errors.js"
import type { SessionId } from "../../Message.js"
import type { Hosted, HostState } from "./state.js"
import { deleteSlot, isIdle, setSlot, signalFreed, watchers } from "./state.js"
import * as observability from "../observability.js"

/** Disposes a hosted agent (inbox kept, LIFE-06) and frees its Scope; failures are logged. @internal */
export const release = (s: HostState, hosted: Hosted): Effect.Effect<void> =>
  Effect.gen(function*() {
    const disposed = yield* Effect.exit(hosted.handle.dispose)
    if (Exit.isFailure(disposed)) {
      yield* Effect.logWarning(`AgentHost: disposing ${hosted.id} failed`, disposed.cause)
    }
    hosted.watched?.onQuiet(undefined)
    yield* Scope.close(hosted.scope, Exit.void)
    const entry = s.watches.get(hosted.id)
    // EVS-01: a reader still reading an earlier incarnation when the host closes catches up to this
    if (entry !== undefined) entry.releasedLength = (yield* hosted.agent.session.events).length
  })

/**
 * Passivates `hosted` if it is still the live agent of its id and, unless `force`, still idle:
 * the slot reads Passivating (a `get` meanwhile waits for it, then resumes) until disposed (HOST-02).
 *
 * @internal
 */
export const passivate = (s: HostState, hosted: Hosted, force: boolean): Effect.Effect<boolean> =>
  Effect.uninterruptible(Effect.gen(function*() {
    const slot = s.slots.get(hosted.id)
    if (slot?._tag !== "Live" || slot.hosted !== hosted) return false
    if (!force && !(yield* isIdle(hosted))) return false
    // the idle check yields: look again before taking the slot, in the same step that takes it
    // (a `use` or a subscriber that came meanwhile keeps the agent, HOST-02)
    const again = s.slots.get(hosted.id)
    if (again?._tag !== "Live" || again.hosted !== hosted) return false
    if (!force && watchers(hosted) > 0) return false
    const done = Deferred.unsafeMake<void>(FiberId.none)
    setSlot(s, hosted.id, { _tag: "Passivating", hosted, done })
    s.lru.delete(hosted.id)
    yield* FiberMap.remove(s.timers, hosted.id)
    yield* release(s, hosted)
    deleteSlot(s, hosted.id)
    s.occupied--
    signalFreed(s)
    yield* Deferred.succeed(done, undefined)
    return true
  })).pipe(observability.hostPassivation(hosted.id, force))

/**
 * The idle timer of a live agent (HOST-02): once it is idle and `idleTimeout` passed since its last
 * activity, it is passivated (in the background set: the timer is removed by the passivation).
 *
 * @internal
 */
export const idleTimer = (s: HostState, hosted: Hosted): Effect.Effect<void> =>
  Effect.gen(function*() {
    const timeout = Duration.toMillis(s.settings.idleTimeout)
    while (true) {
      yield* hosted.agent.whenIdle
      const now = yield* Clock.currentTimeMillis
      const due = hosted.lastActive + timeout
      if (now < due) {
        yield* Effect.sleep(Duration.millis(due - now))
        continue
      }
      if (yield* isIdle(hosted)) {
        yield* FiberSet.run(s.background, passivate(s, hosted, false))
        return
      }
      // pending input or a subscriber keeps it: look again a timeout later
      hosted.lastActive = now
    }
  })

/** Every event of a live agent counts as activity (HOST-02; one watcher for the whole host). @internal */
export const watchActivity = (s: HostState): Effect.Effect<void, never, ScopeNs.Scope> =>
  Effect.gen(function*() {
    const events = yield* s.registry.subscribe
    // layers are built uninterruptibly: the fibers they fork must be made interruptible
    yield* FiberSet.run(
      s.background,
      Effect.interruptible(Stream.runForEach(events, (event: AgentEvent) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.sync(() => {
            const hosted = s.lru.get(event.agent)
            if (hosted === undefined) return
            hosted.lastActive = now
            // an agent that went idle may be passivated for a capacity waiter (HOST-02)
            if (event._tag === "AgentStatusChanged" && event.status === "idle") signalFreed(s)
          }))))
    )
  })

/** The least recently used idle live agent, if any (HOST-02). */
const idleCandidate = (s: HostState): Effect.Effect<Option.Option<Hosted>> =>
  Effect.suspend(() => {
    const live = Array.from(s.lru.values())
    return Effect.findFirst(live, isIdle)
  })

/**
 * Takes a slot (HOST-02 `maxLive`): at once when one is free, else by passivating the LRU idle agent,
 * else it waits until `deadline` (fixed when the caller asked, so the wait is `activationTimeout`
 * from then).
 *
 * @internal
 */
export const reserve = (
  s: HostState,
  id: SessionId,
  deadline: number
): Effect.Effect<void, HostError.HostAtCapacity | HostError.HostClosed> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.gen(function*() {
      while (true) {
        if (s.closed) return yield* new HostError.HostClosed({ id })
        if (s.occupied < s.settings.maxLive) {
          s.occupied++
          return
        }
        const waitFor = s.freed
        if (s.canPassivate) {
          const candidate = yield* idleCandidate(s)
          if (Option.isSome(candidate) && (yield* passivate(s, candidate.value, false))) continue
        }
        yield* Deferred.await(waitFor)
      }
    }).pipe(
      Effect.timeoutFail({
        duration: Duration.millis(Math.max(0, deadline - now)),
        onTimeout: () =>
          new HostError.HostAtCapacity({
            id,
            maxLive: s.settings.maxLive,
            waitedMillis: Duration.toMillis(s.settings.activationTimeout)
          })
      })
    ))
