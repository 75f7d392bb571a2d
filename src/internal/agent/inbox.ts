/**
 * The Inbox implementation (SPEC §5): two ring-buffer deques, an index of every `MessageId` this
 * session accepted, and one lock under which each mutation computes its splice, appends it as one
 * writer batch and applies it. The live path and the replay share one validating fold
 * (`Projection.applyEvent`), so the live projection is the replay of its own log by construction;
 * the replay folds the stored events after `seedLength` as a `Stream`, in chunks (CORE-04).
 *
 * @internal
 */
import { Data, Deferred, Effect, Exit, FiberId, FiberRef, Option, Schema, Stream } from "effect"
import type { Array as Arr, Scope } from "effect"
import * as AgentError from "../../AgentError.js"
import type { Inbox, InboxChange } from "../../Inbox.js"
import type { MessageId, SessionId } from "../../Message.js"
import { UserMessage } from "../../Message.js"
import type { Session } from "../../Session.js"
import * as SessionError from "../../SessionError.js"
import type { CoreEvent, CoreEventInput, InboxTarget, SessionEvent } from "../../SessionEvent.js"
import * as codec from "../log/eventCodec.js"
import type { Lock } from "../lock.js"
import { makeLight as makeLock } from "../lock.js"
import * as Feed from "../feed.js"
import { snapshot } from "../json.js"
import * as observability from "../observability.js"
import { core } from "../log/session.js"
import { wakeByDefault } from "../log/summary.js"

// Built here rather than imported as a value from ../Inbox.js, which imports this module.
const Change = Data.taggedEnum<InboxChange>()

/**
 * Where an accepted `MessageId` stands (INB-01).
 *
 * @internal
 */
export type InboxState = "pending" | "entered" | "canceled" | "rejected"

/**
 * A settled id. `claimed` is removed by a claim splice whose `user/message` is not (yet) in the
 * log: only a log torn inside a claim batch shows it (REP-02); outside the inbox it reads `entered`.
 */
type Settled = "claimed" | "entered" | "canceled" | "rejected"

type SpliceData = Extract<CoreEvent, { readonly type: "agent/inbox/spliced" }>["data"]
type SpliceInput = Extract<CoreEventInput, { readonly type: "agent/inbox/spliced" }>

/** Both lists in the order every multi-list operation visits them (INB-03: next-step first). */
const targets: ReadonlyArray<InboxTarget> = ["next-step", "next-turn"]

/**
 * A growable ring buffer: O(1) push, unshift, removal at either end and indexed access (B8); a
 * splice in the middle rebuilds it (remove/replace by id are O(n) anyway: they search).
 *
 * @internal
 */
export class Deque<A> {
  private buffer: Array<A | undefined> = new Array(8)
  private head = 0
  length = 0
  /** Bumped on every change, so snapshots can be cached until the next one. */
  version = 0

  at(index: number): A {
    return this.buffer[(this.head + index) & (this.buffer.length - 1)] as A
  }

  toArray(): Array<A> {
    const out: Array<A> = new Array(this.length)
    for (let i = 0; i < this.length; i++) out[i] = this.at(i)
    return out
  }

  splice(start: number, deleteCount: number, inserted: ReadonlyArray<A>): void {
    this.version++
    if (deleteCount === inserted.length) {
      for (let i = 0; i < deleteCount; i++) this.set(start + i, inserted[i]!)
    } else if (start === 0) {
      for (let i = 0; i < deleteCount; i++) this.shift()
      for (let i = inserted.length - 1; i >= 0; i--) this.unshift(inserted[i]!)
    } else if (start + deleteCount === this.length) {
      for (let i = 0; i < deleteCount; i++) this.pop()
      for (const item of inserted) this.push(item)
    } else {
      const all = this.toArray()
      all.splice(start, deleteCount, ...inserted)
      this.buffer = new Array(8)
      this.head = 0
      this.length = 0
      for (const item of all) this.push(item)
    }
  }

  private set(index: number, item: A): void {
    this.buffer[(this.head + index) & (this.buffer.length - 1)] = item
  }

  private reserve(): void {
    if (this.length < this.buffer.length) return
    const next: Array<A | undefined> = new Array(this.buffer.length * 2)
    for (let i = 0; i < this.length; i++) next[i] = this.at(i)
    this.buffer = next
    this.head = 0
  }

  private push(item: A): void {
    this.reserve()
    this.set(this.length, item)
    this.length++
  }

  private unshift(item: A): void {
    this.reserve()
    this.head = (this.head - 1) & (this.buffer.length - 1)
    this.buffer[this.head] = item
    this.length++
  }

  private shift(): void {
    this.buffer[this.head] = undefined
    this.head = (this.head + 1) & (this.buffer.length - 1)
    this.length--
  }

  private pop(): void {
    this.length--
    this.set(this.length, undefined as A)
  }
}

/**
 * The inbox as a pure fold over a log: both lists and the id index. `applyEvent` validates an event
 * completely before changing anything, and is used for replay (INB-05) and for every live batch.
 *
 * @internal
 */
export class Projection {
  readonly lists: Readonly<Record<InboxTarget, Deque<UserMessage>>> = {
    "next-turn": new Deque<UserMessage>(),
    "next-step": new Deque<UserMessage>()
  }
  private readonly pendingIn = new Map<string, InboxTarget>()
  private readonly settled = new Map<string, Settled>()
  /** HOST-03: the pending ids that were sent waking; made on the first one (an idle agent holds none, B2). */
  private waking: Set<string> | undefined = undefined
  /** SEC-11: how many messages were inserted so far (replayed or live): the next one's ordinal. */
  private insertions = 0
  /** SEC-11: the insertion ordinal of each pending id; made on the first insertion (B2). Never logged. */
  private ordinals: Map<string, number> | undefined = undefined

  /** HOST-03: some pending message (either list) was sent waking. */
  hasPendingWaking(): boolean {
    return this.waking !== undefined && this.waking.size > 0
  }

  /**
   * SEC-11: a mark of this moment: every message pending now has an ordinal below it, every message
   * inserted from now on one at or above it.
   */
  mark(): number {
    return this.insertions
  }

  /** SEC-11: the insertion ordinal of a pending id. */
  ordinalOf(id: string): number | undefined {
    return this.ordinals?.get(id)
  }

  /** SEC-11: gives an inserted id the next ordinal. */
  private number(id: string): void {
    const ordinals = this.ordinals ??= new Map()
    ordinals.set(id, this.insertions++)
  }

  /** DLV-06, SEC-11: some pending message sent waking was inserted at or after `mark`. */
  hasPendingWakingFrom(mark: number): boolean {
    if (this.waking === undefined || this.ordinals === undefined) return false
    for (const id of this.waking) if (this.ordinals.get(id)! >= mark) return true
    return false
  }

  /** HOST-03: whether a pending id was sent waking. */
  isWaking(id: string): boolean {
    return this.waking !== undefined && this.waking.has(id)
  }

  /** Where an id stands; a claimed id whose `user/message` is missing reads `entered`. */
  stateOf(id: string): InboxState | undefined {
    if (this.pendingIn.has(id)) return "pending"
    const settled = this.settled.get(id)
    return settled === "claimed" ? "entered" : settled
  }

  targetOf(id: string): InboxTarget | undefined {
    return this.pendingIn.get(id)
  }

  /** The position of a pending id in its list (searched from the front: claims take the front). */
  indexOf(target: InboxTarget, id: string): number {
    const list = this.lists[target]
    for (let i = 0; i < list.length; i++) if (list.at(i).id === id) return i
    return -1
  }

  /** Validates and applies one event; returns why it does not apply (then nothing changed). */
  applyEvent(event: SessionEvent): string | undefined {
    if (event.type === "agent/inbox/spliced") return this.applySplice(event.data as SpliceData)
    if (event.type === "user/message") {
      return this.applyEntered((event.data as { readonly message: UserMessage }).message.id)
    }
    return undefined
  }

  private applyEntered(id: MessageId): string | undefined {
    if (this.pendingIn.has(id)) return `message ${JSON.stringify(id)} entered a step while still pending`
    const settled = this.settled.get(id)
    if (settled !== undefined && settled !== "claimed") {
      return `message ${JSON.stringify(id)} entered a step after it was ${settled}`
    }
    this.settled.set(id, "entered")
    return undefined
  }

  private applySplice(data: SpliceData): string | undefined {
    const list = this.lists[data.target]
    const { inserted, outcome, removed, start } = data
    if (start > list.length) return `start ${start} is beyond the end of ${data.target} (length ${list.length})`
    if (start + removed.length > list.length) {
      return `removing ${removed.length} from ${start} runs past the end of ${data.target} (length ${list.length})`
    }
    for (let i = 0; i < removed.length; i++) {
      const found = list.at(start + i).id
      if (found !== removed[i]) {
        return `removed[${i}] is ${JSON.stringify(removed[i])} but ${data.target}[${start + i}] is ${
          JSON.stringify(found)
        }`
      }
    }
    if (outcome === "restored" && removed.length > 0) return "a restored splice removes nothing"
    const removedIds = new Set<string>(removed)
    const insertedIds = new Set<string>()
    for (const message of inserted) {
      const id = message.id
      if (insertedIds.has(id)) return `message ${JSON.stringify(id)} is inserted twice`
      insertedIds.add(id)
      if (removedIds.has(id)) return `message ${JSON.stringify(id)} is removed and re-inserted by one splice`
      if (this.pendingIn.has(id)) return `message ${JSON.stringify(id)} is already pending`
      const settled = this.settled.get(id)
      // A crash restore puts back what a torn claim batch removed before it entered (REP-02).
      if (settled !== undefined && !(outcome === "restored" && settled === "claimed")) {
        return `message ${JSON.stringify(id)} was already accepted (${settled === "claimed" ? "entered" : settled})`
      }
    }
    list.splice(start, removed.length, inserted)
    const removedAs: Settled = outcome === "canceled" || outcome === "rejected" ? outcome : "claimed"
    for (const id of removed) {
      this.pendingIn.delete(id)
      this.settled.set(id, removedAs)
      this.waking?.delete(id)
      this.ordinals?.delete(id)
    }
    const wake = data.wake ?? wakeByDefault(data)
    for (const message of inserted) {
      this.settled.delete(message.id)
      this.pendingIn.set(message.id, data.target)
      this.number(message.id)
      if (wake) (this.waking ??= new Set()).add(message.id)
    }
    return undefined
  }
}

/** HOST-03: what a splice without a `wake` flag means (its home is the summary fold, `log/summary.ts`). @internal */
export { wakeByDefault }

/** The `wake` field of an inserting splice: present only when it differs from the default (HOST-03). */
const wakeField = (target: InboxTarget, wake: boolean, outcome?: "canceled") =>
  wake === wakeByDefault({ target, outcome }) ? {} : { wake }

const strict = { onExcessProperty: "error", errors: "first" } as const
const decodeUserMessage = Schema.decodeUnknownEither(UserMessage, strict)

/**
 * Validates a message given to the inbox (schema, strictly, and lossless JSON: EVT-03) and returns
 * its deep-frozen copy, so later changes to the caller's object never reach the inbox or the log.
 *
 * @internal
 */
export const validateMessage = (message: unknown): Effect.Effect<UserMessage, SessionError.InvalidEventData> => {
  const copy = snapshot(message)
  if (copy._tag === "Left") {
    return Effect.fail(
      new SessionError.InvalidEventData({
        type: "agent/inbox/spliced",
        reason: `message at ${copy.problem.path}: ${copy.problem.reason}`
      })
    )
  }
  // the hand-written check accepts exactly what the strict decoder accepts; the decoder words errors
  if (codec.isUserMessage(copy.value)) return Effect.succeed(copy.value as unknown as UserMessage)
  const decoded = decodeUserMessage(copy.value)
  if (decoded._tag === "Left") {
    return Effect.fail(
      new SessionError.InvalidEventData({
        type: "agent/inbox/spliced",
        reason: "not a user message: " + String(decoded.left.message)
      })
    )
  }
  return Effect.succeed(copy.value as unknown as UserMessage)
}

/** The notifications of one committed splice: `Discarded` before `Inserted` (INB-02). */
const changesOf = (data: SpliceData, seq: number, out: Array<InboxChange>): void => {
  if (data.removed.length > 0 && (data.outcome === "canceled" || data.outcome === "rejected")) {
    out.push(Change.Discarded({ target: data.target, ids: data.removed, outcome: data.outcome, seq }))
  }
  if (data.inserted.length > 0) {
    out.push(Change.Inserted({ target: data.target, start: data.start, messages: data.inserted, seq }))
  }
}

/**
 * What the driver passes to `claim` (INB-06, INB-07).
 *
 * @internal
 */
export interface ClaimOptions {
  /** The turn the batch enters (its `step/start` and `user/message`s carry it). */
  readonly turn: number
  readonly step: number
  /** The ids `peek` proposed; re-resolved under the lock. */
  readonly peeked: ReadonlyArray<MessageId>
  /** What enters the step: the peeked batch, or what a `preStep` hook replaced it with. */
  readonly entering: ReadonlyArray<UserMessage>
  /** Read under the lock; `false` (e.g. the activity's cancel cause is set) writes nothing. */
  readonly guard: () => boolean
  /** Core events written in the same batch, before the splices (e.g. `turn/start`). */
  readonly extraBefore?: ReadonlyArray<CoreEventInput> | undefined
}

/**
 * What a claim wrote: the messages that entered and every event of its batch.
 *
 * @internal
 */
export interface ClaimResult {
  readonly entered: ReadonlyArray<UserMessage>
  readonly events: ReadonlyArray<SessionEvent>
}

/**
 * The inbox with the capabilities only the driver uses.
 *
 * @internal
 */
export interface InboxInternal extends Inbox {
  /**
   * Inserts like `append`/`prepend`; `extra()` is evaluated under the lock after validation and its
   * events go in the same writer batch, right after the splice (DLV-03: splice + `turn/start`).
   */
  readonly insert: (
    target: InboxTarget,
    message: UserMessage,
    position: "end" | "front",
    extra?: (() => ReadonlyArray<CoreEventInput>) | undefined,
    /** Sent waking (HOST-03): recorded on the splice. Default false (`append`/`prepend` never wake). */
    wake?: boolean | undefined
  ) => Effect.Effect<void, InsertError>
  /** HOST-03: some pending message was sent waking (plain read). */
  readonly hasPendingWaking: () => boolean
  /** The batch a claim would take now (INB-06): at a turn boundary all next-step then at most one next-turn. */
  readonly peek: (boundary: "turn" | "step") => Effect.Effect<ReadonlyArray<UserMessage>>
  /** Claims a peeked batch at step entry (INB-06, INB-07); `None` when `guard()` was false. */
  readonly claim: (options: ClaimOptions) => Effect.Effect<Option.Option<ClaimResult>, SessionError.SessionAppendError>
  /**
   * Removes the still-pending ids with `outcome:"rejected"` in one batch (a `preStep` reject) and
   * returns them; nothing is written when none is pending or `guard()` is false.
   */
  readonly reject: (
    ids: ReadonlyArray<MessageId>,
    options?: { readonly guard?: (() => boolean) | undefined } | undefined
  ) => Effect.Effect<ReadonlyArray<MessageId>, SessionError.SessionAppendError>
  /** Where an id stands (plain read, safe under any lock). */
  readonly stateOf: (id: string) => InboxState | undefined
  /** Pending counts (plain read). */
  readonly sizes: () => { readonly nextTurn: number; readonly nextStep: number }
  /** `clear` without the observer guard: cancels everything pending. */
  readonly clearCanceled: Effect.Effect<void, SessionError.SessionAppendError>
  /** SEC-11: a mark of this moment: what is pending now was inserted before it (plain read). */
  readonly mark: () => number
  /**
   * SEC-11, a cancel's call: from this synchronous call on, the messages inserted before `mark` that
   * are still pending are gone for every reader and every operation of the inbox (lists, peek,
   * claim, replace, remove, wakes); the returned Effect writes their `canceled` splices (next-step
   * first) and must be run — uninterruptibly — right away. `undefined` when none is pending: then
   * nothing is written (CAN-01). Messages inserted from `mark` on are never touched.
   */
  readonly discardBefore: (mark: number) => Effect.Effect<void, SessionError.SessionAppendError> | undefined
  /** DLV-06: some pending message sent waking was inserted at or after `mark` (plain read). */
  readonly hasPendingWakingFrom: (mark: number) => boolean
  /** SEC-11: resolves once the `canceled` splices of every cancel called so far were written (or failed). */
  readonly awaitDiscards: Effect.Effect<void>
  /** Runs `effect` holding the inbox lock; it must not call inbox operations (the lock is not re-entrant). */
  readonly withLock: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** The eager form of `changes`: subscribed before it returns. */
  readonly subscribe: Effect.Effect<Stream.Stream<InboxChange>, never, Scope.Scope>
  /** Ends `changes` streams (after what was published). */
  readonly end: Effect.Effect<void>
  /**
   * OBS-02: stops counting this inbox in `Metrics.inboxDepth` (its agent was torn down): what is
   * pending leaves the gauge. Idempotent; a no-op for an inbox that was not metered.
   */
  readonly unmeter: () => void
}

/**
 * The inbox options.
 *
 * @internal
 */
export interface InboxOptions {
  /** Called with every change, in order, while the inbox lock is held (for causal publication). */
  readonly onChange?: ((change: InboxChange) => Effect.Effect<void>) | undefined
  /** The library's own observer, which never writes to the inbox: no CORE-07 guard (B3). */
  readonly trustedObserver?: boolean | undefined
  /** OBS-02: an agent's inbox, counted in `Metrics.inboxDepth` until `unmeter`. */
  readonly metered?: boolean | undefined
}

/**
 * CORE-07: a user's `onChange` runs while the inbox lock is held, so a write to the same inbox from
 * it (or from a fiber it awaits) would wait for itself. While it runs, its fibers carry the guard
 * of the inbox in this FiberRef, and the inbox refuses their writes with `AgentBusy`.
 */
const notifyingRef = FiberRef.unsafeMake<ObserverGuard | undefined>(undefined)

/** How many `onChange` calls of one inbox are running (a forked fiber that outlives one writes freely). */
interface ObserverGuard {
  notifying: number
}

const guardObserver = (cell: InboxCell, options: InboxOptions | undefined): InboxCell => {
  if (options?.onChange !== undefined && options.trustedObserver !== true) cell.guard = { notifying: 0 }
  if (options?.metered === true) {
    // OBS-02: what a replay found pending counts from now on
    cell.metered = true
    observability.addInboxDepth(pendingOf(cell.projection))
  }
  return cell
}

const pendingOf = (projection: Projection): number =>
  projection.lists["next-turn"].length + projection.lists["next-step"].length

const notifyGuarded = (
  guard: ObserverGuard,
  onChange: (change: InboxChange) => Effect.Effect<void>,
  change: InboxChange
): Effect.Effect<void> =>
  Effect.suspend(() => {
    guard.notifying++
    return Effect.ensuring(
      Effect.locally(onChange(change), notifyingRef, guard),
      Effect.sync(() => {
        guard.notifying--
      })
    )
  })

/** `self`, unless the current fiber runs this inbox's `onChange`: then `AgentBusy` (CORE-07). */
const refusingObserverWrites = <A, E>(
  cell: InboxCell,
  self: Effect.Effect<A, E>
): Effect.Effect<A, E | AgentError.AgentBusy> => {
  const guard = cell.guard
  if (guard === undefined) return self
  return Effect.withFiberRuntime((fiber) =>
    guard.notifying > 0 && fiber.getFiberRef(notifyingRef) === guard
      ? Effect.fail(
        new AgentError.AgentBusy({
          id: cell.session.id,
          reason: "the inbox's onChange observer wrote to the same inbox while it was being notified, under the " +
            "inbox lock; write from a fiber that does not wait for the observer, or after it returned"
        })
      )
      : self
  )
}

type Removal = "claim" | "canceled" | "rejected"

type InsertError = AgentError.DuplicateMessage | SessionError.SessionAppendError

/**
 * The state of one inbox. Its operations are module functions over it, so an inbox costs a few
 * objects, not a closure per operation (B2); the lock is made on first use.
 */
class InboxCell {
  readonly feed = Feed.makeUnsafe<InboxChange>()
  lock: Lock | undefined = undefined
  /** The frozen snapshot of each list, valid while its version is unchanged. */
  turnSnapshot: ReadonlyArray<UserMessage> = []
  turnVersion = -1
  stepSnapshot: ReadonlyArray<UserMessage> = []
  stepVersion = -1
  /** Set when a user's observer runs under the lock (CORE-07). */
  guard: ObserverGuard | undefined = undefined
  /** OBS-02: its splices move `Metrics.inboxDepth` (an agent's inbox, until its teardown). */
  metered = false
  /**
   * SEC-11: the marks of the cancels called whose `canceled` splices are not written yet: pending
   * messages inserted before the highest are already gone for every reader (`isLive`).
   */
  discarding: Array<number> | undefined = undefined
  /** Completed when `discarding` empties: what a teardown waits on (`awaitDiscards`). */
  discarded: Deferred.Deferred<void> | undefined = undefined
  constructor(
    readonly session: Session,
    readonly sessionCore: ReturnType<typeof core>,
    readonly onChange: ((change: InboxChange) => Effect.Effect<void>) | undefined,
    readonly projection: Projection = new Projection()
  ) {}
}

const lockOf = (state: InboxCell): Lock => state.lock ??= makeLock()

/** SEC-11: pending messages inserted before this are discarded by a cancel already called (0: none). */
const floorOf = (state: InboxCell): number => {
  const marks = state.discarding
  if (marks === undefined) return 0
  let floor = 0
  for (const mark of marks) if (mark > floor) floor = mark
  return floor
}

/** SEC-11: a pending message no cancel called so far discards (`floor` from `floorOf`). */
const isLive = (projection: Projection, floor: number, id: string): boolean =>
  floor === 0 || projection.ordinalOf(id)! >= floor

/** A pending id that no cancel called so far discards: what claim, reject, replace and remove act on. */
const isPending = (state: InboxCell, id: string): boolean =>
  state.projection.targetOf(id) !== undefined && isLive(state.projection, floorOf(state), id)

/** The live messages of a list (SEC-11: those of a cancel in progress left out). */
const liveOf = (state: InboxCell, target: InboxTarget, floor: number): Array<UserMessage> =>
  state.projection.lists[target].toArray().filter((message) => isLive(state.projection, floor, message.id))

/**
 * SEC-11: a cancel's call. Registers `mark` synchronously (what it discards is gone for every reader
 * from now on) and returns the Effect that writes the `canceled` splices of the messages inserted
 * before `mark` that are still pending then, and unregisters it (written or not).
 */
const discardBefore = (
  state: InboxCell,
  mark: number
): Effect.Effect<void, SessionError.SessionAppendError> | undefined => {
  const { projection } = state
  const discarded = (): Map<string, Removal> => {
    const kinds = new Map<string, Removal>()
    for (const target of targets) {
      const list = projection.lists[target]
      for (let i = 0; i < list.length; i++) {
        const id = list.at(i).id
        if (projection.ordinalOf(id)! < mark) kinds.set(id, "canceled")
      }
    }
    return kinds
  }
  if (discarded().size === 0) return undefined
  const marks = state.discarding ??= []
  marks.push(mark)
  const unregister = Effect.sync(() => {
    marks.splice(marks.indexOf(mark), 1)
    if (marks.length > 0) return
    state.discarding = undefined
    if (state.discarded !== undefined) Deferred.unsafeDone(state.discarded, Exit.void)
    state.discarded = undefined
  })
  return locked(
    state,
    Effect.ensuring(
      Effect.suspend(() => {
        const splices = removalSplices(projection, discarded())
        return isNonEmpty(splices) ? Effect.asVoid(commitEvents(state, splices)) : Effect.void
      }),
      unregister
    )
  ).pipe(Effect.withSpan("Inbox.cancel"))
}

// Validate → durable splice → lists changed → notifications, all under the lock; uninterruptible
// once the lock is held so a write can never be durable without its in-memory change (INB-01b, INB-02).
const locked = <A, E>(state: InboxCell, body: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  lockOf(state).withLockUninterruptibly(body)

const publishChanges = (state: InboxCell, changes: ReadonlyArray<InboxChange>): Effect.Effect<void> => {
  const { feed, guard } = state
  const onChange = guard === undefined || state.onChange === undefined
    ? state.onChange
    : (change: InboxChange) => notifyGuarded(guard, state.onChange!, change)
  if (changes.length === 1) {
    const change = changes[0]!
    return onChange === undefined ? feed.publish(change) : Effect.zipRight(feed.publish(change), onChange(change))
  }
  return Effect.forEach(changes, (change) =>
    onChange === undefined
      ? feed.publish(change)
      : Effect.zipRight(feed.publish(change), onChange(change)), { discard: true })
}

// the written events go through the replay's own step (`Projection.applyEvent`, CORE-04): the live
// projection is the fold of its log by construction
const commitEvents = (
  state: InboxCell,
  events: Arr.NonEmptyReadonlyArray<CoreEventInput>,
  claimed?: { readonly turn: number; readonly messages: ReadonlyArray<UserMessage> } | undefined
): Effect.Effect<Arr.NonEmptyReadonlyArray<SessionEvent>, SessionError.SessionAppendError> =>
  Effect.flatMap(state.sessionCore.appendCore(events), (written) => {
    const changes: Array<InboxChange> = []
    // EVS-02: a claim mirrors the `step/start` of the step its messages entered
    let stepStart: number | undefined
    let depth = 0
    for (const event of written) {
      const reason = state.projection.applyEvent(event)
      if (reason !== undefined) return Effect.dieMessage(`bug: the inbox wrote an invalid event: ${reason}`)
      if (event.type === "agent/inbox/spliced") {
        const data = event.data as SpliceData
        changesOf(data, event.seq, changes)
        depth += data.inserted.length - data.removed.length
      } else if (event.type === "step/start") stepStart = event.seq
    }
    if (state.metered) observability.addInboxDepth(depth)
    if (claimed !== undefined) changes.push(Change.Claimed({ ...claimed, seq: stepStart }))
    return Effect.as(publishChanges(state, changes), written)
  })

// Removal splices for a set of pending ids: next-step first, each one contiguous run of one kind,
// ascending, `start` relative to the list after the previous splices of the batch.
const removalSplices = (projection: Projection, kinds: ReadonlyMap<string, Removal>): Array<SpliceInput> => {
  const out: Array<SpliceInput> = []
  for (const target of targets) {
    let wanted = 0
    for (const id of kinds.keys()) if (projection.targetOf(id) === target) wanted++
    const list = projection.lists[target]
    let removedSoFar = 0
    let run: { start: number; kind: Removal; ids: Array<MessageId> } | undefined
    const flush = () => {
      if (run === undefined) return
      out.push({
        type: "agent/inbox/spliced",
        data: {
          target,
          start: run.start - removedSoFar,
          removed: run.ids,
          inserted: [],
          ...(run.kind === "claim" ? {} : { outcome: run.kind })
        }
      })
      removedSoFar += run.ids.length
      run = undefined
    }
    for (let i = 0; i < list.length && wanted > 0; i++) {
      const id = list.at(i).id
      const kind = kinds.get(id)
      if (kind === undefined) {
        flush()
        continue
      }
      wanted--
      if (run !== undefined && run.kind === kind) run.ids.push(id)
      else {
        flush()
        run = { start: i, kind, ids: [id] }
      }
    }
    flush()
  }
  return out
}

const duplicate = (projection: Projection, id: MessageId): AgentError.DuplicateMessage | undefined => {
  const state = projection.stateOf(id)
  return state === undefined ? undefined : new AgentError.DuplicateMessage({ id, state })
}

const insertInto = (
  state: InboxCell,
  target: InboxTarget,
  message: UserMessage,
  position: "end" | "front",
  extra?: (() => ReadonlyArray<CoreEventInput>) | undefined,
  wake = false
): Effect.Effect<void, InsertError> =>
  Effect.flatMap(validateMessage(message), (checked) =>
    locked(
      state,
      Effect.suspend((): Effect.Effect<void, InsertError> => {
        const existing = duplicate(state.projection, checked.id)
        if (existing !== undefined) return Effect.fail(existing)
        const splice: SpliceInput = {
          type: "agent/inbox/spliced",
          data: {
            target,
            start: position === "end" ? state.projection.lists[target].length : 0,
            removed: [],
            inserted: [checked],
            ...wakeField(target, wake)
          }
        }
        return Effect.asVoid(commitEvents(state, extra === undefined ? [splice] : [splice, ...extra()]))
      })
    ))

const replaceIn = Effect.fn("Inbox.replace")(function*(state: InboxCell, id: MessageId, message: UserMessage) {
  const checked = yield* validateMessage(message)
  return yield* locked(
    state,
    Effect.suspend((): Effect.Effect<boolean, InsertError> => {
      const { projection } = state
      const target = projection.targetOf(id)
      if (target === undefined || !isPending(state, id)) return Effect.succeed(false)
      const existing = duplicate(projection, checked.id)
      if (existing !== undefined) return Effect.fail(existing)
      return Effect.as(
        commitEvents(state, [{
          type: "agent/inbox/spliced",
          data: {
            target,
            start: projection.indexOf(target, id),
            removed: [id],
            inserted: [checked],
            outcome: "canceled",
            // the replacement keeps the wake of what it replaces (HOST-03)
            ...wakeField(target, projection.isWaking(id), "canceled")
          }
        }]),
        true
      )
    })
  )
})

const removeFrom = Effect.fn("Inbox.remove")(function*(state: InboxCell, id: MessageId) {
  return yield* locked(
    state,
    Effect.suspend(() => {
      const { projection } = state
      const target = projection.targetOf(id)
      if (target === undefined || !isPending(state, id)) return Effect.succeed(false)
      return Effect.as(
        commitEvents(state, [{
          type: "agent/inbox/spliced",
          data: { target, start: projection.indexOf(target, id), removed: [id], inserted: [], outcome: "canceled" }
        }]),
        true
      )
    })
  )
})

const clearAll = (state: InboxCell): Effect.Effect<void, SessionError.SessionAppendError> =>
  locked(
    state,
    Effect.suspend(() => {
      const splices: Array<SpliceInput> = []
      for (const target of targets) {
        const list = state.projection.lists[target]
        if (list.length === 0) continue
        splices.push({
          type: "agent/inbox/spliced",
          data: { target, start: 0, removed: list.toArray().map((m) => m.id), inserted: [], outcome: "canceled" }
        })
      }
      return isNonEmpty(splices) ? Effect.asVoid(commitEvents(state, splices)) : Effect.void
    })
  ).pipe(Effect.withSpan("Inbox.clear"))

const snapshotOf = (state: InboxCell, target: InboxTarget): ReadonlyArray<UserMessage> => {
  const list = state.projection.lists[target]
  // SEC-11: while a cancel's splices are being written, what it discards is already gone
  const floor = floorOf(state)
  if (floor > 0) return Object.freeze(liveOf(state, target, floor))
  if (target === "next-turn") {
    if (state.turnVersion !== list.version) {
      state.turnSnapshot = Object.freeze(list.toArray())
      state.turnVersion = list.version
    }
    return state.turnSnapshot
  }
  if (state.stepVersion !== list.version) {
    state.stepSnapshot = Object.freeze(list.toArray())
    state.stepVersion = list.version
  }
  return state.stepSnapshot
}

const peekAt = (state: InboxCell, boundary: "turn" | "step"): Effect.Effect<ReadonlyArray<UserMessage>> =>
  Effect.sync(() => {
    const steps = snapshotOf(state, "next-step")
    if (boundary === "step") return steps
    const floor = floorOf(state)
    const turns = state.projection.lists["next-turn"]
    const first = floor === 0 ? (turns.length === 0 ? undefined : turns.at(0)) : liveOf(state, "next-turn", floor)[0]
    return first === undefined ? steps : [...steps, first]
  })

const claimIn = Effect.fnUntraced(function*(state: InboxCell, claimOptions: ClaimOptions) {
  const entering: Array<UserMessage> = []
  for (const message of claimOptions.entering) entering.push(yield* validateMessage(message))
  return yield* locked(
    state,
    Effect.suspend(() => {
      const { projection } = state
      if (!claimOptions.guard()) return Effect.succeed(Option.none<ClaimResult>())
      const peeked = new Set<string>(claimOptions.peeked)
      const kinds = new Map<string, Removal>()
      const entered: Array<UserMessage> = []
      const seen = new Set<string>()
      for (const message of entering) {
        if (seen.has(message.id)) continue
        seen.add(message.id)
        if (peeked.has(message.id)) {
          // Peeked and canceled (or replaced) meanwhile, or discarded by a cancel in progress: it does not enter.
          if (!isPending(state, message.id)) continue
          kinds.set(message.id, "claim")
          entered.push(message)
        } else if (projection.stateOf(message.id) === undefined) {
          entered.push(message)
        }
      }
      for (const id of peeked) {
        if (!kinds.has(id) && isPending(state, id)) kinds.set(id, "rejected")
      }
      const splices = removalSplices(projection, kinds)
      if (entered.length === 0) {
        if (!isNonEmpty(splices)) return Effect.succeed(Option.some<ClaimResult>({ entered: [], events: [] }))
        return Effect.map(commitEvents(state, splices), (events) => Option.some<ClaimResult>({ entered: [], events }))
      }
      const { step, turn } = claimOptions
      const batch: Array<CoreEventInput> = [
        ...(claimOptions.extraBefore ?? []),
        ...splices,
        { type: "step/start", data: { turn, step } },
        ...entered.map((message): CoreEventInput => ({ type: "user/message", data: { turn, step, message } }))
      ]
      return Effect.map(
        commitEvents(state, batch as unknown as Arr.NonEmptyReadonlyArray<CoreEventInput>, {
          turn,
          messages: entered
        }),
        (events) => Option.some<ClaimResult>({ entered, events })
      )
    })
  )
})

const rejectIn = (
  state: InboxCell,
  ids: ReadonlyArray<MessageId>,
  rejectOptions?: { readonly guard?: (() => boolean) | undefined } | undefined
): Effect.Effect<ReadonlyArray<MessageId>, SessionError.SessionAppendError> =>
  locked(
    state,
    Effect.suspend(() => {
      if (rejectOptions?.guard !== undefined && !rejectOptions.guard()) return Effect.succeed([])
      const kinds = new Map<string, Removal>()
      for (const id of ids) if (isPending(state, id)) kinds.set(id, "rejected")
      const splices = removalSplices(state.projection, kinds)
      if (!isNonEmpty(splices)) return Effect.succeed([])
      return Effect.as(commitEvents(state, splices), splices.flatMap((splice) => splice.data.removed))
    })
  )

/**
 * `make` as a synchronous step for a session with nothing to replay (a new session, B1): the
 * inbox, or `undefined` when there are events to replay (then `make` builds it).
 *
 * @internal
 */
export const unsafeMakeFresh = (session: Session, options?: InboxOptions | undefined): InboxInternal | undefined => {
  const sessionCore = core(session)
  const end = sessionCore.log().length
  return Math.min(session.header.seedLength, end) < end
    ? undefined
    : inboxOf(guardObserver(new InboxCell(session, sessionCore, options?.onChange), options))
}

/**
 * The inbox of a session whose events after `header.seedLength` were already replayed into
 * `projection` (resume validates the repaired log before anything is written, RES-03; its replay is
 * the inbox's, so the log is folded once). The session's log must be the one replayed.
 *
 * @internal
 */
export const unsafeMakeReplayed = (
  session: Session,
  projection: Projection,
  options?: InboxOptions | undefined
): InboxInternal =>
  inboxOf(guardObserver(new InboxCell(session, core(session), options?.onChange, projection), options))

/**
 * Builds the inbox of a session by replaying its events after `header.seedLength` (INB-05).
 *
 * @internal
 */
export const make = (
  session: Session,
  options?: InboxOptions | undefined
): Effect.Effect<InboxInternal, AgentError.InvalidInboxLog> =>
  Effect.suspend(() => {
    // a new session has nothing to replay: its inbox in one operation (B1)
    const fresh = unsafeMakeFresh(session, options)
    if (fresh !== undefined) return Effect.succeed(fresh)
    return Effect.map(
      replay(session.id, core(session).log(), session.header.seedLength),
      (projection) => unsafeMakeReplayed(session, projection, options)
    )
  })

/**
 * The state of a replay: the projection so far, and the first event that did not apply (the fold
 * stops there).
 *
 * @internal
 */
export interface Replay {
  readonly projection: Projection
  readonly invalid: { readonly seq: number; readonly reason: string } | undefined
}

/**
 * The inbox's fold (CORE-04, INB-05): one event into the projection with `Projection.applyEvent`,
 * the validating step every live operation applies to the events it wrote. Effect-free; an event
 * that does not apply changes nothing and is recorded as the replay's failure.
 *
 * @internal
 */
export const foldEvent = (replay: Replay, event: SessionEvent): Replay => {
  const reason = replay.projection.applyEvent(event)
  return reason === undefined ? replay : { projection: replay.projection, invalid: { seq: event.seq, reason } }
}

/**
 * Elements per chunk of a replayed stream: `Stream.runFold*` folds a chunk with one stack frame per
 * element, so one chunk of the whole log overflows the stack from ≈10,000 events (CORE-04).
 */
const replayChunkSize = 1024

/**
 * The stored events of a log after `seedLength`, as a stream in chunks of `replayChunkSize`.
 *
 * @internal
 */
export const eventsAfter = (events: ReadonlyArray<SessionEvent>, seedLength: number): Stream.Stream<SessionEvent> =>
  Stream.suspend(() => Stream.fromIteratorSucceed(events.slice(seedLength).values(), replayChunkSize))

const stillValid = (replay: Replay): boolean => replay.invalid === undefined

/**
 * Replays the inbox events of a log after `seedLength` into a new projection by folding them as a
 * stream (CORE-04), validating every splice like a live one (INB-05): the first that does not apply
 * ends the fold and fails `InvalidInboxLog` with its seq. Resume replays the repaired log with it
 * before anything is written (RES-03).
 *
 * @internal
 */
export const replay = (
  id: SessionId,
  events: ReadonlyArray<SessionEvent>,
  seedLength: number
): Effect.Effect<Projection, AgentError.InvalidInboxLog> =>
  Effect.suspend(() =>
    Effect.flatMap(
      Stream.runFoldWhile(
        eventsAfter(events, seedLength),
        { projection: new Projection(), invalid: undefined } as Replay,
        stillValid,
        foldEvent
      ),
      ({ invalid, projection }) =>
        invalid === undefined
          ? Effect.succeed(projection)
          : Effect.fail(new AgentError.InvalidInboxLog({ id, seq: invalid.seq, reason: invalid.reason }))
    )
  )

/**
 * The inbox object: its operations on the prototype, over the module functions. The public
 * operations are own properties too, so they can be passed around detached from the inbox.
 */
class InboxImpl implements InboxInternal {
  readonly append: InboxInternal["append"]
  readonly prepend: InboxInternal["prepend"]
  readonly replace: InboxInternal["replace"]
  readonly remove: InboxInternal["remove"]
  constructor(private readonly cell: InboxCell) {
    this.append = (target, message) =>
      Effect.withSpan(refusingObserverWrites(cell, insertInto(cell, target, message, "end")), "Inbox.append")
    this.prepend = (target, message) =>
      Effect.withSpan(refusingObserverWrites(cell, insertInto(cell, target, message, "front")), "Inbox.prepend")
    this.replace = (id, message) => refusingObserverWrites(cell, replaceIn(cell, id, message))
    this.remove = (id) => refusingObserverWrites(cell, removeFrom(cell, id))
  }
  get nextTurn(): Effect.Effect<ReadonlyArray<UserMessage>> {
    return Effect.sync(() => snapshotOf(this.cell, "next-turn"))
  }
  get nextStep(): Effect.Effect<ReadonlyArray<UserMessage>> {
    return Effect.sync(() => snapshotOf(this.cell, "next-step"))
  }
  get hasPending(): Effect.Effect<boolean> {
    return Effect.sync(() => this.pending())
  }
  get clear(): Effect.Effect<void, SessionError.SessionAppendError | AgentError.AgentBusy> {
    return refusingObserverWrites(this.cell, clearAll(this.cell))
  }
  get clearCanceled(): Effect.Effect<void, SessionError.SessionAppendError> {
    return clearAll(this.cell)
  }
  get changes(): Stream.Stream<InboxChange> {
    return this.cell.feed.stream
  }
  get subscribe(): Effect.Effect<Stream.Stream<InboxChange>, never, Scope.Scope> {
    return this.cell.feed.subscribe
  }
  get end(): Effect.Effect<void> {
    return this.cell.feed.end
  }
  insert(
    target: InboxTarget,
    message: UserMessage,
    position: "end" | "front",
    extra?: (() => ReadonlyArray<CoreEventInput>) | undefined,
    wake?: boolean | undefined
  ): Effect.Effect<void, InsertError> {
    return insertInto(this.cell, target, message, position, extra, wake === true)
  }
  hasPendingWaking(): boolean {
    const floor = floorOf(this.cell)
    return floor === 0 ? this.cell.projection.hasPendingWaking() : this.cell.projection.hasPendingWakingFrom(floor)
  }
  hasPendingWakingFrom(mark: number): boolean {
    return this.cell.projection.hasPendingWakingFrom(Math.max(mark, floorOf(this.cell)))
  }
  mark(): number {
    return this.cell.projection.mark()
  }
  discardBefore(mark: number): Effect.Effect<void, SessionError.SessionAppendError> | undefined {
    return discardBefore(this.cell, mark)
  }
  get awaitDiscards(): Effect.Effect<void> {
    const cell = this.cell
    return Effect.suspend(() =>
      cell.discarding === undefined
        ? Effect.void
        : Deferred.await(cell.discarded ??= Deferred.unsafeMake<void>(FiberId.none))
    )
  }
  peek(boundary: "turn" | "step"): Effect.Effect<ReadonlyArray<UserMessage>> {
    return peekAt(this.cell, boundary)
  }
  claim(claimOptions: ClaimOptions): Effect.Effect<Option.Option<ClaimResult>, SessionError.SessionAppendError> {
    return claimIn(this.cell, claimOptions)
  }
  reject(
    ids: ReadonlyArray<MessageId>,
    rejectOptions?: { readonly guard?: (() => boolean) | undefined } | undefined
  ): Effect.Effect<ReadonlyArray<MessageId>, SessionError.SessionAppendError> {
    return rejectIn(this.cell, ids, rejectOptions)
  }
  stateOf(id: string): InboxState | undefined {
    return this.cell.projection.stateOf(id)
  }
  sizes(): { readonly nextTurn: number; readonly nextStep: number } {
    const cell = this.cell
    const floor = floorOf(cell)
    if (floor > 0) {
      return { nextTurn: liveOf(cell, "next-turn", floor).length, nextStep: liveOf(cell, "next-step", floor).length }
    }
    const { lists } = cell.projection
    return { nextTurn: lists["next-turn"].length, nextStep: lists["next-step"].length }
  }
  withLock<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> {
    return lockOf(this.cell).withLock(effect)
  }
  unmeter(): void {
    const cell = this.cell
    if (!cell.metered) return
    cell.metered = false
    observability.addInboxDepth(-pendingOf(cell.projection))
  }
  private pending(): boolean {
    const { lists } = this.cell.projection
    if (floorOf(this.cell) === 0) return lists["next-turn"].length + lists["next-step"].length > 0
    const { nextStep, nextTurn } = this.sizes()
    return nextTurn + nextStep > 0
  }
}

const inboxOf = (cell: InboxCell): InboxInternal => new InboxImpl(cell)

const isNonEmpty = <A>(as: ReadonlyArray<A>): as is Arr.NonEmptyReadonlyArray<A> => as.length > 0
