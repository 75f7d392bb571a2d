/**
 * Recovery at start (HOST-04): the stored sessions with an open turn or pending waking input,
 * found from the persistence's cheap `summaries` (or, for a backend without it, by reading each
 * log), activated with bounded concurrency. Activation resumes (repairing an open turn) and wakes
 * (HOST-03); one session that cannot be activated is reported and logged, the others go on.
 *
 * @internal
 */
import { Clock, Effect, Option, Stream } from "effect"
import type { RecoveryReport } from "../../AgentHost.js"
import type { SessionId } from "../../Message.js"
import type { RecoverySummary, SessionPersistence, UnreadableSession } from "../../SessionPersistence.js"
import type * as SessionError from "../../SessionError.js"
import { emptyState, foldEvent, needsRecovery, summaryOf } from "../log/summary.js"

type Entry = RecoverySummary | UnreadableSession

/** A backend without `summaries`: each listed session read in full and folded. @internal */
export const summariesByReading = (
  persistence: SessionPersistence["Type"]
): Stream.Stream<Entry, SessionError.PersistenceError> =>
  persistence.list.pipe(
    Stream.mapEffect((entry): Effect.Effect<Entry> => {
      if (entry._tag === "UnreadableSession") return Effect.succeed(entry)
      return persistence.read(entry.id).pipe(
        Effect.map((stored) => {
          const state = emptyState(stored.header.child?.parent)
          for (const event of stored.events) foldEvent(state, event.seq, event.type, event.data, stored.header.seedLength)
          return summaryOf(entry.id, state)
        }),
        Effect.catchAll((error) =>
          Effect.succeed<Entry>({ _tag: "UnreadableSession", id: entry.id, problem: error.message })
        )
      )
    })
  )

/** The summaries of every stored session: the backend's cheap ones when it has them. @internal */
export const summaries = (
  persistence: SessionPersistence["Type"]
): Stream.Stream<Entry, SessionError.PersistenceError> => persistence.summaries ?? summariesByReading(persistence)

/** @internal */
export const recover = (
  persistence: SessionPersistence["Type"],
  concurrency: number,
  activate: (id: SessionId) => Effect.Effect<void, unknown>
): Effect.Effect<RecoveryReport> =>
  Effect.gen(function*() {
    const listed = yield* Stream.runCollect(summaries(persistence)).pipe(
      Effect.tapError((error) => Effect.logError("AgentHost: recovery could not list the stored sessions", error)),
      Effect.option
    )
    const now = yield* Clock.currentTimeMillis
    const candidates: Array<SessionId> = []
    for (const entry of Option.getOrElse(listed, () => [])) {
      if (entry._tag === "RecoverySummary" && needsRecovery(entry, now)) candidates.push(entry.id)
    }
    const activated: Array<SessionId> = []
    const failed: Array<{ readonly id: string; readonly error: unknown }> = []
    yield* Effect.forEach(candidates, (id) =>
      activate(id).pipe(
        Effect.matchEffect({
          onSuccess: () => Effect.sync(() => activated.push(id)),
          onFailure: (error) =>
            Effect.zipRight(
              Effect.logWarning(`AgentHost: recovery could not activate ${id}`, error),
              Effect.sync(() => failed.push({ id, error }))
            )
        })
      ), { concurrency, discard: true })
    return { candidates, activated, failed }
  }).pipe(Effect.withSpan("AgentHost.recover"))
