/**
 * The AgentHost implementation (SPEC §17), over the state record of `host/state.ts`:
 * - `host/activation.ts`: `get` and `use`, the single-flight activation and its wake (HOST-01..03);
 * - `host/passivation.ts`: idle timers, passivation and `maxLive` capacity (HOST-02);
 * - `host/drain.ts`: the host Scope's finalizer (HOST-05);
 * - `host/recovery.ts`: the start-up recovery (HOST-04);
 * - `host/events.ts`: `eventsFrom` readers, which follow an id across passivations (EVS-01);
 * and here, `remove`, `passivate` by id and the service itself.
 *
 * @internal
 */
import type { Scope as ScopeNs } from "effect"
import { Deferred, Effect, Either, Exit, FiberId, FiberSet, Option, Stream } from "effect"
import type * as AgentHost from "../../AgentHost.js"
import * as HostError from "./errors.js"
import { AgentRegistry } from "../../AgentRegistry.js"
import type { SessionId } from "../../Message.js"
import { sessionId as parseSessionId } from "../../Message.js"
import type { SessionEvent } from "../../SessionEvent.js"
import { SessionPersistence } from "../../SessionPersistence.js"
import { get, setupForOf, use } from "./activation.js"
import * as decisions from "./decisions.js"
import { drain } from "./drain.js"
import * as hostEvents from "./events.js"
import { passivate, watchActivity } from "./passivation.js"
import * as recovery from "./recovery.js"
import type { HostState } from "./state.js"
import { deleteSlot, makeState, setSlot, settingsOf, watch } from "./state.js"

/** `AgentHost.passivate`: the live agent of `id` passivated now, busy or not (HOST-02). */
const passivateById = (s: HostState, id: SessionId | string) =>
  Effect.suspend(() => {
    const slot = s.slots.get(id as SessionId)
    return slot?._tag === "Live" ? passivate(s, slot.hosted, true) : Effect.succeed(false)
  }).pipe(Effect.withSpan("AgentHost.passivate"))

/** Waits until nothing is live or moving for `key`, passivating a live agent. */
const settleToAbsent = (s: HostState, key: SessionId) =>
  Effect.gen(function*() {
    while (true) {
      if (s.closed) return yield* new HostError.HostClosed({ id: key })
      const slot = s.slots.get(key)
      if (slot === undefined) return
      if (slot._tag === "Live") yield* passivate(s, slot.hosted, true)
      else if (slot._tag === "Activating") yield* Effect.exit(Deferred.await(slot.done))
      else yield* Deferred.await(slot.done)
    }
  })

/** `AgentHost.remove`: the session passivated, then deleted from the store (EVS-01 readers end). */
const remove = (s: HostState, id: SessionId | string): Effect.Effect<void, AgentHost.RemoveError> =>
  Effect.gen(function*() {
    const key = yield* parseSessionId(id)
    yield* Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        yield* restore(settleToAbsent(s, key))
        // nothing live, and the slot taken in this same step: no activation starts until the
        // removal settled; readers of the id look again at each change
        const done = Deferred.unsafeMake<void>(FiberId.none)
        setSlot(s, key, { _tag: "Removing", done })
        const removed = yield* Effect.exit(
          Option.isSome(s.persistence) ? s.persistence.value.remove(key) : Effect.void
        )
        deleteSlot(s, key)
        Deferred.unsafeDone(done, Exit.void)
        return yield* removed
      })
    )
  }).pipe(Effect.withSpan("AgentHost.remove"))

const absent: hostEvents.Look = { _tag: "Absent" }
const moving: hostEvents.Look = { _tag: "Moving" }

/** The host as `eventsFrom` readers see it (EVS-01). */
const readerHostOf = (s: HostState): hostEvents.ReaderHost => ({
  isClosed: () => s.closed,
  look(id) {
    const slot = s.slots.get(id)
    if (slot === undefined) return absent
    return slot._tag === "Live" ? { _tag: "Live", session: slot.hosted.agent.session } : moving
  },
  watch: (id) => watch(s, id),
  persistence: s.persistence
})

/** The id of a new reader: `InvalidSessionId`, or `HostClosed` once the host is closing. */
const readerId = (s: HostState, id: SessionId | string): Either.Either<SessionId, AgentHost.EventsFromError> => {
  const parsed = parseSessionId(id)
  if (Either.isLeft(parsed)) return parsed
  return s.closed ? Either.left(new HostError.HostClosed({ id: parsed.right })) : parsed
}

/** `AgentHost.eventsFrom` (EVS-01): the session's events from `seq`, without activating it. */
const eventsFromOf = (s: HostState, readerHost: hostEvents.ReaderHost) =>
(id: SessionId | string, seq: number): Stream.Stream<SessionEvent, AgentHost.EventsFromError> =>
  Stream.unwrap(Effect.suspend(() =>
    Either.match(readerId(s, id), {
      onLeft: (error) => Effect.fail(error),
      onRight: (key) => Effect.succeed(hostEvents.eventsFrom(readerHost, key, seq))
    })
  ))

/** `AgentHost.eventsInto`: the same reader run into a sink (the gateway's, B9). */
const eventsIntoOf = (s: HostState, readerHost: hostEvents.ReaderHost) =>
(
  id: SessionId | string,
  seq: number,
  sink: hostEvents.DurableSink,
  onLive: Effect.Effect<void>
): Effect.Effect<void, AgentHost.EventsFromError, ScopeNs.Scope> =>
  Effect.suspend(() =>
    Either.match(readerId(s, id), {
      onLeft: (error) => Effect.fail(error),
      onRight: (key) => hostEvents.runInto(readerHost, key, seq, sink, onLive)
    })
  )

/** HOST-04: recovery at start, in the background (the layer is ready at once). */
const startRecovery = (s: HostState): Effect.Effect<unknown> => {
  if (!s.settings.recover || Option.isNone(s.persistence)) {
    return Deferred.succeed(s.recovered, { candidates: [], activated: [], failed: [] })
  }
  return FiberSet.run(
    s.background,
    recovery.recover(s.persistence.value, s.settings.recoverConcurrency, (id) =>
      Effect.flatMap(get(s, id), (agent) => agent.wake)).pipe(
        Effect.flatMap((report) => Deferred.succeed(s.recovered, report)),
        Effect.interruptible
      )
  )
}

const serviceOf = (s: HostState, readerHost = readerHostOf(s)): AgentHost.AgentHost["Type"] => ({
  get: (id, create) => get(s, id, create),
  use: (id, f, create) => use(s, id, f, create),
  // APP-05: the hold of `use` keeps the agent live while its turn runs
  run: (id, message, runOptions, create) => use(s, id, (agent) => agent.run(message, runOptions), create),
  eventsFrom: eventsFromOf(s, readerHost),
  eventsInto: eventsIntoOf(s, readerHost),
  remove: (id) => remove(s, id),
  pending: (id) => decisions.pending(s, id),
  passivate: (id) => passivateById(s, id),
  live: Effect.sync(() => Array.from(s.lru.keys())),
  recovery: Deferred.await(s.recovered)
})

/** @internal */
export const make = <R>(
  options: AgentHost.HostOptions<R>
): Effect.Effect<AgentHost.AgentHost["Type"], never, AgentRegistry | ScopeNs.Scope | Exclude<R, ScopeNs.Scope>> =>
  Effect.gen(function*() {
    const s = yield* makeState({
      settings: settingsOf(options),
      registry: yield* AgentRegistry,
      persistence: yield* Effect.serviceOption(SessionPersistence),
      agentOptions: options.agentOptions,
      setupFor: setupForOf(options.setup, yield* Effect.context<Exclude<R, ScopeNs.Scope>>())
    })
    // added after the agents' Scope was forked (in `makeState`): the drain runs first (HOST-05)
    yield* Effect.addFinalizer(() => drain(s))
    yield* watchActivity(s)
    yield* startRecovery(s)
    return serviceOf(s)
  })
