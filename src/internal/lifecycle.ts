/**
 * The one lifecycle registry behind both the SessionStore and the AgentRegistry: enter (the
 * authoritative collision check), announce with serial vetoing hooks, deferred detach while an
 * announcement runs, exact-entry detach, and paired disposal (a disposal event exactly when an
 * announcement began).
 *
 * Its state is one `Ref` of an immutable record (CORE-03): the live slots in a `HashMap`, the next
 * registration number and the hooks. Every change is one `Ref.modify`, which returns what the
 * change owes (an event to publish, the hooks to run, a failure) as the effect to run next.
 *
 * @internal
 */
import { Cause, Effect, Either, HashMap, Option, Ref, RuntimeFlags } from "effect"
import type { Scope } from "effect"

/**
 * One entry: its identity is the object itself, so a stale detach (from an earlier entry with the
 * same key) can never remove a replacement (REG-04).
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

/** The registry's state: live slots by key, the registration number of the next entry, the hooks. */
interface State<A, P> {
  readonly slots: HashMap.HashMap<string, Slot<A, P>>
  readonly nextOrder: number
  /** Replaced (never mutated) by each registration and its release. */
  readonly hooks: ReadonlyArray<Hook<A>>
}

/** @internal */
export interface Hook<A> {
  readonly run: (value: A) => Effect.Effect<void, unknown>
}

/** @internal */
export interface EnterOptions<A, P, B, E> {
  readonly key: string
  readonly value: A
  readonly parentOf: (live: (key: string) => Entry<A, P> | undefined) => P
  readonly onEntered: (entry: Entry<A, P>) => B
  readonly onTaken: (live: Entry<A, P>) => E
}

/** @internal */
export interface LifecycleRegistry<A, P> {
  /**
   * Enters a new entry and succeeds with `onEntered(entry)`, or fails with `onTaken(live)` when the
   * key is taken. Emits nothing. `parentOf` computes the entry's parent in the same step, from the
   * entries live then.
   */
  readonly enter: <B, E>(options: EnterOptions<A, P, B, E>) => Effect.Effect<B, E>
  /**
   * Marks the entry announcing, emits the creation event, runs the hooks serially. A failing hook
   * vetoes: later hooks are skipped, the entry is removed with its disposal event, and the cause is
   * returned as the failure. Succeeds with whether the entry is still live once announced (a detach
   * requested meanwhile removed it, REG-03).
   */
  readonly announce: (entry: Entry<A, P>) => Effect.Effect<boolean, Cause.Cause<unknown>>
  /** Idempotent and exact: removes only this entry; deferred while it is announcing. */
  readonly detach: (entry: Entry<A, P>) => Effect.Effect<void>
  readonly get: (key: string) => Effect.Effect<Option.Option<Entry<A, P>>>
  /** Runs `f` with a lookup of the entries live in one read of the state (one consistent snapshot). */
  readonly withLive: <B, E, R>(
    f: (live: (key: string) => Entry<A, P> | undefined) => Effect.Effect<B, E, R>
  ) => Effect.Effect<B, E, R>
  /** Live entries in registration order. */
  readonly entries: Effect.Effect<ReadonlyArray<Entry<A, P>>>
  /** Registers a hook that runs at every announcement until the Scope closes. */
  readonly addHook: (run: (value: A) => Effect.Effect<void, unknown>) => Effect.Effect<void, never, Scope.Scope>
}

const liveEntry = <A, P>(state: State<A, P>, key: string): Entry<A, P> | undefined =>
  Option.getOrUndefined(HashMap.get(state.slots, key))?.entry

const liveSlot = <A, P>(state: State<A, P>, entry: Entry<A, P>): Slot<A, P> | undefined => {
  const slot = Option.getOrUndefined(HashMap.get(state.slots, entry.key))
  return slot !== undefined && slot.entry === entry ? slot : undefined
}

const withSlots = <A, P>(state: State<A, P>, slots: HashMap.HashMap<string, Slot<A, P>>): State<A, P> => ({
  slots,
  nextOrder: state.nextOrder,
  hooks: state.hooks
})

const settled = Effect.succeed(true)
const removed = Effect.succeed(false)

/** @internal */
export const make = <A, P>(events: {
  readonly announced: (entry: Entry<A, P>) => Effect.Effect<void>
  readonly disposed: (entry: Entry<A, P>) => Effect.Effect<void>
}): Effect.Effect<LifecycleRegistry<A, P>> =>
  Effect.gen(function*() {
    const state = yield* Ref.make<State<A, P>>({ slots: HashMap.empty(), nextOrder: 0, hooks: [] })

    const enter = <B, E>({ key, onEntered, onTaken, parentOf, value }: EnterOptions<A, P, B, E>): Effect.Effect<B, E> =>
      Effect.flatten(Ref.modify(state, (current): [Either.Either<B, E>, State<A, P>] => {
        const lookup = (other: string) => liveEntry(current, other)
        const live = lookup(key)
        if (live !== undefined) return [Either.left(onTaken(live)), current]
        const entry: Entry<A, P> = { key, value, parent: parentOf(lookup), order: current.nextOrder }
        const slot: Slot<A, P> = { entry, phase: "entered", detachRequested: false }
        const slots = HashMap.set(current.slots, key, slot)
        return [Either.right(onEntered(entry)), { slots, nextOrder: current.nextOrder + 1, hooks: current.hooks }]
      }))

    /**
     * Removes `entry` if it is live and its disposal event is owed then (announced, REG-05);
     * deferred while it is announcing (REG-03).
     */
    const detach = (entry: Entry<A, P>): Effect.Effect<void> =>
      Effect.flatten(Ref.modify(state, (current): [Effect.Effect<void>, State<A, P>] => {
        const live = liveSlot(current, entry)
        if (live === undefined) return [Effect.void, current]
        if (live.phase === "announcing") {
          const slots = HashMap.set(current.slots, entry.key, { ...live, detachRequested: true })
          return [Effect.void, withSlots(current, slots)]
        }
        const owed = live.phase === "announced" ? events.disposed(entry) : Effect.void
        return [owed, withSlots(current, HashMap.remove(current.slots, entry.key))]
      }))

    /**
     * The end of an announcement: announced, or removed with its disposal event when a detach was
     * requested meanwhile (REG-03) or when a hook vetoed it.
     */
    const settle = (entry: Entry<A, P>, vetoed: boolean): Effect.Effect<boolean> =>
      Effect.flatten(Ref.modify(state, (current): [Effect.Effect<boolean>, State<A, P>] => {
        const live = liveSlot(current, entry)
        if (live === undefined || live.phase !== "announcing") return [removed, current]
        if (vetoed || live.detachRequested) {
          const slots = HashMap.remove(current.slots, entry.key)
          return [Effect.as(events.disposed(entry), false), withSlots(current, slots)]
        }
        return [settled, withSlots(current, HashMap.set(current.slots, entry.key, { ...live, phase: "announced" }))]
      }))

    const runHooks = (entry: Entry<A, P>, running: ReadonlyArray<Hook<A>>) =>
      Effect.gen(function*() {
        for (const hook of running) {
          const exit = yield* Effect.exit(hook.run(entry.value))
          if (exit._tag === "Failure") {
            yield* settle(entry, true)
            return yield* Effect.fail(exit.cause)
          }
        }
        return yield* settle(entry, false)
      })

    /** Marks the entry announcing (REG-02); the creation event, then the hooks registered then. */
    const startAnnouncing = (entry: Entry<A, P>) =>
      Ref.modify(state, (current): [Effect.Effect<boolean, Cause.Cause<unknown>>, State<A, P>] => {
        const live = liveSlot(current, entry)
        if (live === undefined) {
          return [Effect.dieMessage(`bug: announce of ${entry.key}, which is not live in this registry`), current]
        }
        if (live.phase !== "entered") return [Effect.dieMessage(`bug: ${entry.key} was already announced`), current]
        const running = current.hooks
        const started = Effect.flatMap(
          events.announced(entry),
          () => running.length === 0 ? settle(entry, false) : runHooks(entry, running)
        )
        return [started, withSlots(current, HashMap.set(current.slots, entry.key, { ...live, phase: "announcing" }))]
      })

    // uninterruptible: a caller that already is (the factory's publication) pays no mask (B1)
    const announce = (entry: Entry<A, P>): Effect.Effect<boolean, Cause.Cause<unknown>> =>
      Effect.withFiberRuntime((_, status) =>
        RuntimeFlags.interruption(status.runtimeFlags)
          ? Effect.uninterruptible(Effect.flatten(startAnnouncing(entry)))
          : Effect.flatten(startAnnouncing(entry))
      )

    const get = (key: string): Effect.Effect<Option.Option<Entry<A, P>>> =>
      Effect.map(Ref.get(state), (current) => Option.map(HashMap.get(current.slots, key), (slot) => slot.entry))

    const withLive = <B, E, R>(f: (live: (key: string) => Entry<A, P> | undefined) => Effect.Effect<B, E, R>) =>
      Effect.flatMap(Ref.get(state), (current) => f((key) => liveEntry(current, key)))

    const entries = Effect.map(Ref.get(state), (current) => {
      const out: Array<Entry<A, P>> = []
      for (const slot of HashMap.values(current.slots)) out.push(slot.entry)
      return out.sort((a, b) => a.order - b.order)
    })

    const addHook = (run: (value: A) => Effect.Effect<void, unknown>) =>
      Effect.acquireRelease(
        Ref.modify(state, (current): [Hook<A>, State<A, P>] => {
          const hook: Hook<A> = { run }
          return [hook, { ...current, hooks: [...current.hooks, hook] }]
        }),
        (hook) => Ref.update(state, (current) => ({ ...current, hooks: current.hooks.filter((h) => h !== hook) }))
      ).pipe(Effect.asVoid)

    return { enter, announce, detach, get, withLive, entries, addHook }
  })
