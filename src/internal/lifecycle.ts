/**
 * The one lifecycle registry behind both the SessionStore and the AgentRegistry: enter (the
 * authoritative collision check), announce with serial vetoing hooks, deferred detach while an
 * announcement runs, exact-entry detach, and paired disposal (a disposal event exactly when an
 * announcement began).
 *
 * @internal
 */
import { Cause, Effect, HashMap, Option, Ref } from "effect"
import type { Scope } from "effect"

/**
 * One entry: its identity is the object itself, so a stale detach (from an earlier entry with the
 * same key) can never remove a replacement.
 *
 * @internal
 */
export interface Entry<A, P> {
  readonly key: string
  readonly value: A
  readonly parent: P
  readonly order: number
}

type Phase = "entered" | "announcing" | "announced"

interface Slot<A, P> {
  readonly entry: Entry<A, P>
  readonly phase: Phase
  readonly detachRequested: boolean
}

/** @internal */
export interface Hook<A> {
  readonly run: (value: A) => Effect.Effect<void, unknown>
}

/** @internal */
export interface LifecycleRegistry<A, P> {
  /** Fails with the live entry when the key is taken. Emits nothing. */
  readonly enter: (key: string, value: A, parent: P) => Effect.Effect<Entry<A, P>, Entry<A, P>>
  /**
   * Marks the entry announcing, emits the creation event, runs the hooks serially. A failing hook
   * vetoes: later hooks are skipped, the entry is removed with its disposal event, and the cause is
   * returned as the failure.
   */
  readonly announce: (entry: Entry<A, P>) => Effect.Effect<void, Cause.Cause<unknown>>
  /** Idempotent and exact: removes only this entry; deferred while it is announcing. */
  readonly detach: (entry: Entry<A, P>) => Effect.Effect<void>
  readonly get: (key: string) => Effect.Effect<Option.Option<Entry<A, P>>>
  readonly isLive: (entry: Entry<A, P>) => Effect.Effect<boolean>
  /** Live entries in registration order. */
  readonly entries: Effect.Effect<ReadonlyArray<Entry<A, P>>>
  /** Registers a hook that runs at every announcement until the Scope closes. */
  readonly addHook: (run: (value: A) => Effect.Effect<void, unknown>) => Effect.Effect<void, never, Scope.Scope>
}

/** @internal */
export const make = <A, P>(events: {
  readonly announced: (entry: Entry<A, P>) => Effect.Effect<void>
  readonly disposed: (entry: Entry<A, P>) => Effect.Effect<void>
}): Effect.Effect<LifecycleRegistry<A, P>> =>
  Effect.gen(function*() {
    const slots = yield* Ref.make(HashMap.empty<string, Slot<A, P>>())
    const hooks = yield* Ref.make<ReadonlyArray<Hook<A>>>([])
    let order = 0

    const enter = (key: string, value: A, parent: P) =>
      Ref.modify(slots, (map): [Effect.Effect<Entry<A, P>, Entry<A, P>>, HashMap.HashMap<string, Slot<A, P>>] => {
        const live = HashMap.get(map, key)
        if (Option.isSome(live)) return [Effect.fail(live.value.entry), map]
        const entry: Entry<A, P> = { key, value, parent, order: order++ }
        return [Effect.succeed(entry), HashMap.set(map, key, { entry, phase: "entered", detachRequested: false })]
      }).pipe(Effect.flatten)

    /** Removes the slot of `entry` if it is live; tells whether the disposal event is owed. */
    const remove = (entry: Entry<A, P>) =>
      Ref.modify(slots, (map): [boolean, HashMap.HashMap<string, Slot<A, P>>] => {
        const live = HashMap.get(map, entry.key)
        if (Option.isNone(live) || live.value.entry !== entry) return [false, map]
        return [live.value.phase !== "entered", HashMap.remove(map, entry.key)]
      })

    const removeAndEmit = (entry: Entry<A, P>) =>
      Effect.flatMap(remove(entry), (announced) => (announced ? events.disposed(entry) : Effect.void))

    const setPhase = (entry: Entry<A, P>, from: Phase, to: Phase) =>
      Ref.modify(slots, (map): [Option.Option<Slot<A, P>>, HashMap.HashMap<string, Slot<A, P>>] => {
        const live = HashMap.get(map, entry.key)
        if (Option.isNone(live) || live.value.entry !== entry || live.value.phase !== from) return [live, map]
        const next = { ...live.value, phase: to }
        return [Option.some(live.value), HashMap.set(map, entry.key, next)]
      })

    const announce = (entry: Entry<A, P>) =>
      Effect.gen(function*() {
        const before = yield* setPhase(entry, "entered", "announcing")
        if (Option.isNone(before) || before.value.entry !== entry) {
          return yield* Effect.dieMessage(`bug: announce of ${entry.key}, which is not live in this registry`)
        }
        if (before.value.phase !== "entered") {
          return yield* Effect.dieMessage(`bug: ${entry.key} was already announced`)
        }
        yield* events.announced(entry)
        const running = yield* Ref.get(hooks)
        let veto: Cause.Cause<unknown> | undefined
        for (const hook of running) {
          const exit = yield* Effect.exit(hook.run(entry.value))
          if (exit._tag === "Failure") {
            veto = exit.cause
            break
          }
        }
        const after = yield* setPhase(entry, "announcing", "announced")
        if (veto !== undefined) {
          yield* removeAndEmit(entry)
          return yield* Effect.fail(veto)
        }
        if (Option.isSome(after) && after.value.detachRequested) yield* removeAndEmit(entry)
      }).pipe(Effect.uninterruptible)

    const detach = (entry: Entry<A, P>) =>
      Ref.modify(slots, (map): [boolean, HashMap.HashMap<string, Slot<A, P>>] => {
        const live = HashMap.get(map, entry.key)
        if (Option.isNone(live) || live.value.entry !== entry) return [false, map]
        if (live.value.phase === "announcing") {
          return [false, HashMap.set(map, entry.key, { ...live.value, detachRequested: true })]
        }
        return [live.value.phase === "announced", HashMap.remove(map, entry.key)]
      }).pipe(Effect.flatMap((announced) => (announced ? events.disposed(entry) : Effect.void)))

    const get = (key: string) => Effect.map(Ref.get(slots), (map) => Option.map(HashMap.get(map, key), (s) => s.entry))

    const isLive = (entry: Entry<A, P>) =>
      Effect.map(Ref.get(slots), (map) => {
        const live = HashMap.get(map, entry.key)
        return Option.isSome(live) && live.value.entry === entry
      })

    const entries = Effect.map(Ref.get(slots), (map) => {
      const out: Array<Entry<A, P>> = []
      for (const slot of HashMap.values(map)) out.push(slot.entry)
      return out.sort((a, b) => a.order - b.order)
    })

    const addHook = (run: (value: A) => Effect.Effect<void, unknown>) =>
      Effect.acquireRelease(
        Effect.sync((): Hook<A> => ({ run })).pipe(Effect.tap((hook) => Ref.update(hooks, (list) => [...list, hook]))),
        (hook) => Ref.update(hooks, (list) => list.filter((h) => h !== hook))
      ).pipe(Effect.asVoid)

    return { enter, announce, detach, get, isLive, entries, addHook }
  })
