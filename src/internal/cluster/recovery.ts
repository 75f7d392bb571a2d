/**
 * CLU-04: the cluster's recovery, HOST-04 as a `Singleton` (one runner runs it at a time; it moves
 * with its shard when that runner dies). At start and then every `recoveryInterval` it lists the
 * stored sessions with an open turn or pending waking input (the store's cheap summaries) and
 * wakes their entities: each one is activated on the runner that owns its shard, resumed
 * (repairing the open turn) and woken (HOST-03), so what a dead runner left runs on without a new
 * message. Waking a session that runs already is a no-op.
 *
 * @internal
 */
import { Singleton } from "@effect/cluster"
import { Duration, Effect } from "effect"
import { SessionPersistence } from "../../SessionPersistence.js"
import type { Settings } from "./entity.js"
import { AgentEntity } from "./protocol.js"
import { recover } from "../host/recovery.js"

/** The singleton's name in the cluster. @internal */
export const singletonName = "effect-agent/Cluster/recovery"

/** A wake that does not come back in this time is reported as failed (the next round retries it). */
const wakeTimeout = Duration.seconds(30)

/** One round: every session that needs it woken on its owner. @internal */
export const round = (settings: Settings) =>
  Effect.gen(function*() {
    const persistence = yield* SessionPersistence
    const clientFor = yield* AgentEntity.client
    const report = yield* recover(persistence, settings.recoverConcurrency, (id) =>
      clientFor(id).Wake().pipe(
        Effect.timeoutFail({ duration: wakeTimeout, onTimeout: () => `no answer within ${Duration.format(wakeTimeout)}` })
      ))
    if (report.candidates.length > 0) {
      yield* Effect.logInfo(
        `Cluster recovery: woke ${report.activated.length} of ${report.candidates.length} sessions ` +
          `with pending work (${report.failed.length} failed, retried next round)`
      )
    }
    return report
  })

/** @internal */
export const layer = (settings: Settings) =>
  Singleton.make(
    singletonName,
    Effect.forever(Effect.zipRight(round(settings), Effect.sleep(settings.recoveryInterval)))
  )
