/**
 * The errors of the AgentHost (SPEC §17) and its defaults (HOST-00), in a module of their own so that
 * the host's internals import them without importing the `AgentHost` facade (ARCH-02). `AgentHost`
 * re-exports each under its public name.
 *
 * @internal
 */
import { Duration, Schema } from "effect"

/**
 * The host is at `maxLive` with every live agent busy, and no slot freed within
 * `activationTimeout` (HOST-02).
 *
 * @since 0.2.0
 * @category errors
 */
export class HostAtCapacity extends Schema.TaggedError<HostAtCapacity>("effect-agent/HostAtCapacity")(
  "HostAtCapacity",
  { id: Schema.String, maxLive: Schema.Number, waitedMillis: Schema.Number }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} was not activated: all ${this.maxLive} live agents of the host are busy ` +
      `and none became idle within ${this.waitedMillis} ms; retry later, or raise maxLive or activationTimeout`
  }
}

/**
 * The host's Scope is closing or closed: it activates nothing more (HOST-05).
 *
 * @since 0.2.0
 * @category errors
 */
export class HostClosed extends Schema.TaggedError<HostClosed>("effect-agent/HostClosed")(
  "HostClosed",
  { id: Schema.String }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} was not activated: the host is shutting down; ` +
      "retry against the host that replaces it"
  }
}

/**
 * The host's `setup` failed while activating an agent; the activation was rolled back (nothing is
 * live, the stored session is unchanged apart from what resume repaired).
 *
 * @since 0.2.0
 * @category errors
 */
export class HostSetupFailed extends Schema.TaggedError<HostSetupFailed>("effect-agent/HostSetupFailed")(
  "HostSetupFailed",
  { id: Schema.String, cause: Schema.Defect }
) {
  override get message(): string {
    return `agent ${JSON.stringify(this.id)} was not activated: the host's setup failed (see the cause); ` +
      "fix the setup — the session is intact and the next get retries"
  }
}

/**
 * The session was removed while a client read its events with `host.eventsFrom` (EVS-01): the log
 * it was reading no longer exists (another one may have been created under the same id since).
 *
 * @since 0.2.0
 * @category errors
 */
export class SessionRemoved extends Schema.TaggedError<SessionRemoved>("effect-agent/SessionRemoved")(
  "SessionRemoved",
  { id: Schema.String, seq: Schema.Number }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} was removed while its events were read (the reader was at seq ` +
      `${this.seq}): the events read belong to a log that no longer exists; if the session was created again, ` +
      "read it from seq 0"
  }
}

/**
 * The defaults of HOST-00.
 *
 * @since 0.2.0
 * @category options
 */
export const defaults = {
  idleTimeout: Duration.minutes(5),
  maxLive: 10_000,
  activationTimeout: Duration.seconds(30),
  drainTimeout: Duration.seconds(30),
  recover: false,
  recoverConcurrency: 16,
  wakeOnActivate: true,
  createOnDemand: false
} as const
