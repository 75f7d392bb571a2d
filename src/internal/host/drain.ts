/**
 * The AgentHost's drain (HOST-05), the finalizer of the host's Scope: no new activation, those in
 * flight interrupted, running turns given `drainTimeout` to finish, then every live agent disposed
 * (inbox kept, LIFE-06) before the agents' Scope closes.
 *
 * @internal
 */
import { Deferred, Effect, FiberMap, FiberSet } from "effect"
import * as HostError from "./errors.js"
import { release } from "./passivation.js"
import type { HostState } from "./state.js"
import { notifyAll, signalFreed } from "./state.js"

/** HOST-05: closes the host; `eventsFrom` readers end once they caught up (EVS-01). @internal */
export const drain = (s: HostState): Effect.Effect<void> =>
  Effect.gen(function*() {
    s.closed = true
    signalFreed(s)
    notifyAll(s)
    yield* FiberSet.clear(s.activations)
    for (const [id, slot] of s.slots) {
      if (slot._tag === "Activating") yield* Deferred.fail(slot.done, new HostError.HostClosed({ id }))
    }
    yield* FiberMap.clear(s.timers)
    // passivations in flight finish (they are uninterruptible); the watcher and recovery stop
    yield* FiberSet.clear(s.background)
    const live = Array.from(s.lru.values())
    // finalizers run uninterruptibly: the wait is made interruptible so its timeout can end it
    yield* Effect.forEach(live, (hosted) => hosted.agent.whenIdle, { concurrency: "unbounded", discard: true }).pipe(
      Effect.interruptible,
      Effect.timeoutOption(s.settings.drainTimeout)
    )
    yield* Effect.forEach(live, (hosted) => release(s, hosted), { concurrency: "unbounded", discard: true })
    s.lru.clear()
    s.slots.clear()
    s.occupied = 0
    notifyAll(s)
  })
