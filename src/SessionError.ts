/**
 * The typed errors of sessions, the session store and persistence (SPEC §9). Each message says
 * what happened and what to do about it.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * Data given to an append (or a seed) was not lossless JSON, or an event did not match its schema.
 * Nothing was appended.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidEventData extends Schema.TaggedError<InvalidEventData>("effect-agent/InvalidEventData")(
  "InvalidEventData",
  { type: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `event ${JSON.stringify(this.type)} was refused: ${this.reason}. Nothing was appended; ` +
      "pass plain JSON data (no BigInt, NaN, -0, undefined, class instances, sparse arrays or cycles)."
  }
}

/**
 * `create` found a stored session with this id.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionAlreadyExists extends Schema.TaggedError<SessionAlreadyExists>(
  "effect-agent/SessionAlreadyExists"
)("SessionAlreadyExists", { id: Schema.String }) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} is already stored; resume it or choose another id`
  }
}

/**
 * No stored session has this id.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionNotFound extends Schema.TaggedError<SessionNotFound>("effect-agent/SessionNotFound")(
  "SessionNotFound",
  {
    id: Schema.String,
    /**
     * How to create it where it was looked up (APP-06: the host names its create argument and its
     * `createOnDemand` option).
     *
     * @since 0.3.0
     */
    hint: Schema.optional(Schema.String)
  }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} not found: no session is stored under this id; ` +
      (this.hint ?? "check the id and the store")
  }
}

/**
 * The session is live in this process already.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionAlreadyLive extends Schema.TaggedError<SessionAlreadyLive>("effect-agent/SessionAlreadyLive")(
  "SessionAlreadyLive",
  { id: Schema.String }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} is live in this process; use the live agent or dispose it first`
  }
}

/**
 * Another writer (in this or another process) holds the session.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionLocked extends Schema.TaggedError<SessionLocked>("effect-agent/SessionLocked")(
  "SessionLocked",
  {
    id: Schema.String,
    holder: Schema.String,
    /**
     * What to do, when the backend knows better than the general advice (since 0.2.0; PKG-04: a
     * SQL lease names its expiry and `SqlSessionPersistence.breakLock`).
     */
    remedy: Schema.optional(Schema.String)
  }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} is held by another writer (${this.holder}); ` +
      (this.remedy ??
        "wait for it to be released, or, if that holder is gone for good, break the lock as an operator")
  }
}

/**
 * A batch did not start at the stored length (PERS-02), or the writer lost its lease: nothing was
 * written.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionConflict extends Schema.TaggedError<SessionConflict>("effect-agent/SessionConflict")(
  "SessionConflict",
  { id: Schema.String, expectedSeq: Schema.Number, actualSeq: Schema.Number }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)}: a write expected to start at seq ${this.expectedSeq} ` +
      `but the stored log is at ${this.actualSeq}; nothing was written. Another writer changed it: dispose and resume.`
  }
}

/**
 * A stored record other than the last is unparsable or invalid (PERS-03). Nothing was changed.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionCorrupt extends Schema.TaggedError<SessionCorrupt>("effect-agent/SessionCorrupt")(
  "SessionCorrupt",
  { id: Schema.String, line: Schema.Number, reason: Schema.String }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} is corrupt at line ${this.line}: ${this.reason}. ` +
      "Committed data is never discarded automatically; restore the record from a backup or inspect it by hand."
  }
}

/**
 * The stored session was written by a newer format, or uses a reserved event type this version
 * does not know (EVT-04).
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionFormatUnsupported extends Schema.TaggedError<SessionFormatUnsupported>(
  "effect-agent/SessionFormatUnsupported"
)("SessionFormatUnsupported", { id: Schema.String, reason: Schema.String }) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} cannot be read by this version: ${this.reason}. ` +
      "Upgrade effect-agent to read it."
  }
}

/**
 * The session's writer was released (its agent was disposed): it takes no more appends (SES-04).
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionClosed extends Schema.TaggedError<SessionClosed>("effect-agent/SessionClosed")(
  "SessionClosed",
  { id: Schema.String }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} is closed; resume it to append again`
  }
}

/**
 * An `onCreated` hook of the session store failed; the session was rolled back.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionCreationVetoed extends Schema.TaggedError<SessionCreationVetoed>(
  "effect-agent/SessionCreationVetoed"
)("SessionCreationVetoed", { id: Schema.String, cause: Schema.Defect }) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} was vetoed by an onCreated hook and rolled back; see the cause`
  }
}

/**
 * The storage failed (I/O error, SQL error, …). Nothing the failing call tried was committed.
 *
 * @since 0.1.0
 * @category errors
 */
export class PersistenceError extends Schema.TaggedError<PersistenceError>("effect-agent/PersistenceError")(
  "PersistenceError",
  { reason: Schema.String, cause: Schema.optional(Schema.Defect) }
) {
  override get message(): string {
    return `persistence failed: ${this.reason}`
  }
}

/**
 * An append would take the session past its size limit (`maxSessionBytes` of the persistence layer,
 * DUR-05). Nothing was appended; the session stays readable. Fork it (from a closed-turn boundary)
 * or start a new session, or raise the limit.
 *
 * @since 0.2.0
 * @category errors
 */
export class SessionFull extends Schema.TaggedError<SessionFull>("effect-agent/SessionFull")(
  "SessionFull",
  { id: Schema.String, size: Schema.Number, limit: Schema.Number }
) {
  override get message(): string {
    return `session ${JSON.stringify(this.id)} is full: the append would take it to ${this.size} bytes, ` +
      `over its limit of ${this.limit}. Nothing was appended; continue in a fork or a new session, ` +
      "or raise maxSessionBytes"
  }
}

/**
 * A fork boundary falls inside an open turn.
 *
 * @since 0.1.0
 * @category errors
 */
export class ForkInsideOpenTurn extends Schema.TaggedError<ForkInsideOpenTurn>("effect-agent/ForkInsideOpenTurn")(
  "ForkInsideOpenTurn",
  { id: Schema.String, upTo: Schema.Number, turn: Schema.Number }
) {
  override get message(): string {
    return `cannot fork session ${JSON.stringify(this.id)} at ${this.upTo}: turn ${this.turn} is open there; ` +
      "fork at a closed-turn boundary (or omit upTo)"
  }
}

/**
 * A fork boundary is not an event count of the source.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidForkBoundary extends Schema.TaggedError<InvalidForkBoundary>("effect-agent/InvalidForkBoundary")(
  "InvalidForkBoundary",
  { id: Schema.String, upTo: Schema.Number, length: Schema.Number }
) {
  override get message(): string {
    return `cannot fork session ${JSON.stringify(this.id)} at ${this.upTo}: ` +
      `upTo must be an integer between 0 and ${this.length}`
  }
}

/**
 * What `Session.append` can fail with.
 *
 * @since 0.1.0
 * @category errors
 */
export type SessionAppendError =
  | InvalidEventData
  | SessionFull
  | SessionClosed
  | SessionConflict
  | PersistenceError

/**
 * An event cursor outside the log (EVS-01): a `seq` that is negative, not an integer, or past the
 * next event to be appended.
 *
 * @since 0.2.0
 * @category errors
 */
export class InvalidEventCursor extends Schema.TaggedError<InvalidEventCursor>("effect-agent/InvalidEventCursor")(
  "InvalidEventCursor",
  { id: Schema.String, seq: Schema.Number, length: Schema.Number }
) {
  override get message(): string {
    return `cannot read session ${JSON.stringify(this.id)} from seq ${this.seq}: its log has ${this.length} events, ` +
      `so a cursor is an integer from 0 to ${this.length} (the seq after the last event a client saw)`
  }
}
