/**
 * The one lifecycle registry behind both the SessionStore and the AgentRegistry: enter (the
 * authoritative collision check), announce with serial vetoing hooks, deferred detach while an
 * announcement runs, exact-entry detach, and paired disposal (a disposal event exactly when an
 * announcement began).
 *
 * @internal
 */
import { Cause, Effect, Either, Option, RuntimeFlags } from "effect"
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
  /** `get` as a synchronous read, for callers that already run in an operation of their own. */
  readonly unsafeGet: (key: string) => Entry<A, P> | undefined
  /** `enter` as a synchronous step: the new entry, or the live one (`Left`) when the key is taken. */
  readonly unsafeEnter: (key: string, value: A, parent: P) => Either.Either<Entry<A, P>, Entry<A, P>>
  readonly isLive: (entry: Entry<A, P>) => Effect.Effect<boolean>
  /** `isLive` as a synchronous read. */
  readonly unsafeIsLive: (entry: Entry<A, P>) => boolean
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
    // A plain Map read and changed in synchronous steps: each step is atomic (one JS turn), as a
    // Ref.modify over a HashMap would be, without a persistent map per change (B1).
    const slots = new Map<string, Slot<A, P>>()
    // the hooks, replaced (never mutated) by each registration and its release: one JS step each
    let hooks: ReadonlyArray<Hook<A>> = []
    let order = 0

    const unsafeEnter = (key: string, value: A, parent: P): Either.Either<Entry<A, P>, Entry<A, P>> => {
      const live = slots.get(key)
      if (live !== undefined) return Either.left(live.entry)
      const entry: Entry<A, P> = { key, value, parent, order: order++ }
      slots.set(key, { entry, phase: "entered", detachRequested: false })
      return Either.right(entry)
    }

    const enter = (key: string, value: A, parent: P): Effect.Effect<Entry<A, P>, Entry<A, P>> =>
      Effect.suspend(() => unsafeEnter(key, value, parent))

    /** Removes the slot of `entry` if it is live; tells whether the disposal event is owed. */
    const remove = (entry: Entry<A, P>): boolean => {
      const live = slots.get(entry.key)
      if (live === undefined || live.entry !== entry) return false
      slots.delete(entry.key)
      return live.phase !== "entered"
    }

    const removeAndEmit = (entry: Entry<A, P>) =>
      Effect.suspend(() => (remove(entry) ? events.disposed(entry) : Effect.void))

    const setPhase = (entry: Entry<A, P>, from: Phase, to: Phase): Option.Option<Slot<A, P>> => {
      const live = slots.get(entry.key)
      if (live === undefined) return Option.none()
      if (live.entry !== entry || live.phase !== from) return Option.some(live)
      slots.set(entry.key, { ...live, phase: to })
      return Option.some(live)
    }

    /** The end of an announcement: announced, or removed when a detach was requested meanwhile. */
    const settleNow = (entry: Entry<A, P>): Effect.Effect<void> => {
      const after = setPhase(entry, "announcing", "announced")
      return Option.isSome(after) && after.value.detachRequested ? removeAndEmit(entry) : Effect.void
    }

    const settleAnnounced = (entry: Entry<A, P>) => Effect.suspend(() => settleNow(entry))

    const runHooks = (entry: Entry<A, P>, running: ReadonlyArray<Hook<A>>) =>
      Effect.gen(function*() {
        let veto: Cause.Cause<unknown> | undefined
        for (const hook of running) {
          const exit = yield* Effect.exit(hook.run(entry.value))
          if (exit._tag === "Failure") {
            veto = exit.cause
            break
          }
        }
        if (veto === undefined) return yield* settleAnnounced(entry)
        setPhase(entry, "announcing", "announced")
        yield* removeAndEmit(entry)
        return yield* Effect.fail(veto)
      })

    const announceNow = (entry: Entry<A, P>): Effect.Effect<void, Cause.Cause<unknown>> => {
      const before = setPhase(entry, "entered", "announcing")
      if (Option.isNone(before) || before.value.entry !== entry) {
        return Effect.dieMessage(`bug: announce of ${entry.key}, which is not live in this registry`)
      }
      if (before.value.phase !== "entered") {
        return Effect.dieMessage(`bug: ${entry.key} was already announced`)
      }
      // without hooks (the usual case) no generator runs (B1); the hooks are read once the
      // creation event is out, as each hook sees the entry announced
      return Effect.flatMap(
        events.announced(entry),
        () => (hooks.length === 0 ? settleNow(entry) : runHooks(entry, hooks))
      )
    }

    // uninterruptible: a caller that already is (the factory's publication) pays no mask (B1)
    const announce = (entry: Entry<A, P>): Effect.Effect<void, Cause.Cause<unknown>> =>
      Effect.withFiberRuntime((_, status) =>
        RuntimeFlags.interruption(status.runtimeFlags)
          ? Effect.uninterruptible(Effect.suspend(() => announceNow(entry)))
          : announceNow(entry)
      )

    const detach = (entry: Entry<A, P>): Effect.Effect<void> =>
      Effect.suspend(() => {
        const live = slots.get(entry.key)
        if (live === undefined || live.entry !== entry) return Effect.void
        if (live.phase === "announcing") {
          slots.set(entry.key, { ...live, detachRequested: true })
          return Effect.void
        }
        slots.delete(entry.key)
        return live.phase === "announced" ? events.disposed(entry) : Effect.void
      })

    const unsafeGet = (key: string): Entry<A, P> | undefined => slots.get(key)?.entry

    const get = (key: string): Effect.Effect<Option.Option<Entry<A, P>>> =>
      Effect.sync(() => Option.fromNullable(unsafeGet(key)))

    const unsafeIsLive = (entry: Entry<A, P>): boolean => slots.get(entry.key)?.entry === entry

    const isLive = (entry: Entry<A, P>): Effect.Effect<boolean> => Effect.sync(() => unsafeIsLive(entry))

    const entries = Effect.sync(() => {
      const out: Array<Entry<A, P>> = []
      for (const slot of slots.values()) out.push(slot.entry)
      return out.sort((a, b) => a.order - b.order)
    })

    const addHook = (run: (value: A) => Effect.Effect<void, unknown>) =>
      Effect.acquireRelease(
        Effect.sync((): Hook<A> => {
          const hook: Hook<A> = { run }
          hooks = [...hooks, hook]
          return hook
        }),
        (hook) =>
          Effect.sync(() => {
            hooks = hooks.filter((h) => h !== hook)
          })
      ).pipe(Effect.asVoid)

    return { enter, announce, detach, get, unsafeGet, unsafeEnter, isLive, unsafeIsLive, entries, addHook }
  })
