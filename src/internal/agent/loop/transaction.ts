/**
 * The creation transaction (PUB-01..11, RES): step 0 (the agent's Scopes and its owner's link),
 * the user's setup made abortable, the critical section that enters the session and the agent
 * (step 4) and the uninterruptible publication (step 5); any failure or interruption before
 * publication completed rolls back through the teardown (LIFE-01 order), and nothing is published.
 *
 * @internal
 */
import { Cause, Effect, ExecutionStrategy, Exit, Fiber, Option, Scope } from "effect"
import type { Agent, AgentHandle, AgentSetup, Setup } from "../../../Agent.js"
import * as AgentError from "../../../AgentError.js"
import type { AgentEntry, AgentPublisher } from "../../../AgentRegistry.js"
import type { SessionId } from "../../../Message.js"
import type * as Session from "../../../Session.js"
import type { SessionEntry } from "../../../SessionStore.js"
import * as finalizer from "../../finalizer.js"
import * as observability from "../../observability.js"
import type { Abort, Build, Loop, Restore } from "./state.js"
import {
  agentScopeOf,
  inactive,
  inCommitRef,
  leaveInFlight,
  makeBuildRecord,
  publishingRef,
  settleCreation,
  stillWanted,
  unwanted,
  withOwn
} from "./state.js"
import { ownerFinalizer, startTeardown, teardown } from "./teardown.js"
import { addSessionSteps } from "./teardownSteps.js"

/**
 * PUB step 4, the critical section: the abort checks, the user's commit (under `restore`, with
 * `inCommitRef` set), then the session and the agent entered (a collision fails with `collision()`).
 */
const criticalSection = <E, C>(
  loop: Loop,
  build: Build,
  session: Session.Session,
  commit: Effect.Effect<void, E> | undefined,
  parentAgent: Agent | undefined,
  collision: () => C,
  publisher: AgentPublisher,
  restore: Restore
): Effect.Effect<void, E | C | Abort> => {
  const agent = build.agent!
  const enterBoth = Effect.matchEffect(loop.store.enter(session), {
    onFailure: () => Effect.fail(collision()),
    onSuccess: (sessionEntry) => {
      build.sessionEntry = sessionEntry
      return Effect.matchEffect(publisher.enter(agent, Option.fromNullable(parentAgent)), {
        onFailure: () => Effect.fail(collision()),
        onSuccess: (agentEntry) => {
          build.agentEntry = agentEntry
          build.entered = true
          return Effect.void
        }
      })
    }
  })
  // the abort checks are plain reads; without a commit nothing runs between them, so one is enough
  return Effect.suspend((): Effect.Effect<void, E | C | Abort> => {
    const before = unwanted(loop, build)
    if (before !== undefined) return Effect.fail(before)
    if (commit === undefined) return enterBoth
    return Effect.zipRight(
      restore(Effect.locally(commit, inCommitRef, true)),
      Effect.suspend((): Effect.Effect<void, C | Abort> => {
        const after = unwanted(loop, build)
        return after === undefined ? enterBoth : Effect.fail(after)
      })
    )
  })
}

/**
 * Steps 4–6 of the transaction (PUB): critical section, then uninterruptible publication. Runs
 * inside `uninterruptibleMask`; `restore` is used only around `commit`.
 *
 * @internal
 */
export const publish = <E, C>(
  loop: Loop,
  build: Build,
  session: Session.Session,
  commit: Effect.Effect<void, E> | undefined,
  parentAgent: Agent | undefined,
  source: "startup" | "resume",
  collision: () => C,
  publisher: AgentPublisher,
  restore: Restore
): Effect.Effect<void, E | C | Abort | AgentError.AgentCreationVetoed> => {
  const section = criticalSection(loop, build, session, commit, parentAgent, collision, publisher, restore)
  // publication: uninterruptible from here on (PUB-06); a teardown requested meanwhile waits for it
  const announce = (sessionEntry: SessionEntry, agentEntry: AgentEntry) =>
    Effect.zipRight(
      loop.store.announce(sessionEntry).pipe(
        Effect.mapError((error) => new AgentError.AgentCreationVetoed({ id: build.id, cause: error.cause }))
      ),
      publisher.announce(agentEntry, source)
    ).pipe(finalizer.locallyWith(publishingRef, () => Option.some(build.id)))
  return Effect.flatMap(loop.critical.withLockFromMask(section, restore), () =>
    Effect.matchCauseEffect(announce(build.sessionEntry!, build.agentEntry!), {
      onFailure: (cause) => Effect.zipRight(build.driver!.open(false), Effect.failCause(cause)),
      onSuccess: () => {
        if (build.started) {
          // an owner closed while the hooks ran: the creation rolls back instead of returning a dead agent
          return Effect.zipRight(build.driver!.open(false), Effect.fail(inactive(build)))
        }
        build.published = true
        // OBS-02: live from publication to the end of its teardown
        observability.countLive(1)
        return build.driver!.open(true)
      }
    }))
}

/** Runs `effect` in one child fiber that an abort interrupts, and fails with the abort's reason (PUB-06). */
const abortable = <A, E, R>(loop: Loop, build: Build, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | Abort, R> =>
  Effect.zipRight(
    stillWanted(loop, build),
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(Effect.fork(restore(effect)), (child) => {
        build.creating = child
        // an abort that came between the fork and here found no fiber to interrupt
        const awaited = build.aborted === undefined
          ? Fiber.await(child)
          : Effect.zipRight(Fiber.interruptFork(child), Fiber.await(child))
        return restore(awaited).pipe(
          Effect.onInterrupt(() => Fiber.interrupt(child)),
          Effect.flatMap((exit): Effect.Effect<A, E | Abort> => {
            build.creating = undefined
            if (Exit.isSuccess(exit)) return Effect.succeed(exit.value)
            return build.aborted !== undefined && Cause.isInterruptedOnly(exit.cause)
              ? Effect.fail(build.aborted)
              : Effect.failCause(exit.cause)
          })
        )
      })
    )
  )

/**
 * Step 0 of the transaction: the session Scope, the agent's lifecycle Scope (CORE-02) with the
 * session's teardown steps as its first finalizer, and the `link` forked from the owner, whose only
 * finalizer starts or awaits the teardown; the factory keeps the agent in `live` for its own close.
 * The session's steps are added before the link's finalizer: an owner closed already starts the
 * teardown at once, and the rollback that follows must find them.
 * The session, lifecycle and agent Scopes are not forked from the owner: only the teardown closes them, in
 * LIFE-01 order, whatever the owner's finalization strategy (an owner closing forks in parallel would
 * otherwise close them beside the teardown), and a closed fork of the owner costs its removal from
 * the owner (B1). The owner's close reaches them through the link, first. Runs in the creation's
 * `ownRef` region: if the owner is already closed, the link's finalizer runs at once (the creation is
 * aborted before it acquires anything) and must not await the teardown. No generator (B1).
 */
const makeBuild = (loop: Loop, id: SessionId, owner: Scope.Scope, publisher: AgentPublisher, own: object) =>
  Effect.flatMap(Scope.make(ExecutionStrategy.sequential), (sessionScope) =>
    Effect.flatMap(Scope.make(ExecutionStrategy.sequential), (lifecycle) =>
      Effect.flatMap(Scope.fork(owner, ExecutionStrategy.sequential), (link) => {
        const build = makeBuildRecord(id, sessionScope, lifecycle, link, own)
        loop.live.add(build)
        // one finalizer value serves the owner's link and the factory's close (an Effect is a
        // description: it runs once per owner, and the teardown it starts is memoized)
        build.release = ownerFinalizer(loop, build, publisher)
        // `addFinalizerExit`: the release is `Effect<void>` already (`addFinalizer` adds an `asVoid`, B1)
        const release = build.release
        // CORE-02: the session Scope is taken: its LIFE-01 steps join the lifecycle
        return Effect.as(Effect.zipRight(addSessionSteps(build), Scope.addFinalizerExit(link, () => release)), build)
      })))

/**
 * PUB step 3: runs the user's setup so that an abort stops it at once (it may wait on anything). The
 * steps before it are the library's own and finite: an abort during them is seen right after them
 * (B1: no fiber is forked for a creation without setup, whose next check is the critical section's).
 *
 * @internal
 */
export const runSetup = <E, R>(loop: Loop, build: Build, setup: Setup<E, R> | undefined, view: AgentSetup) =>
  setup === undefined ? Effect.succeed(undefined) : Effect.zipRight(
    stillWanted(loop, build),
    abortable(
      loop,
      build,
      Effect.flatMap(agentScopeOf(build), (agentScope) =>
        Effect.map(
          finalizer.extendScope(setup(view), agentScope),
          (result) => (result === undefined ? undefined : result.commit)
        ))
    )
  )

/** PUB step 6: the owner's handle (`dispose` is the teardown, LIFE-02). @internal */
export const handleOf = (loop: Loop, build: Build, publisher: AgentPublisher): AgentHandle => ({
  agent: build.agent!,
  // HOST-02: whoever hosts the agent reads how many watch it, however they got it
  watchers: build.feed!,
  dispose: Effect.withFiberRuntime((fiber) =>
    fiber.getFiberRef(inCommitRef)
      ? Effect.dieMessage("an agent was disposed from inside a commit, which would deadlock the registry")
      : startTeardown(loop, fiber, build, publisher)
  )
})

/**
 * Runs a creation; rolls back on failure or interruption before publication completed (PUB-06). The
 * whole attempt runs in the creation's `ownRef` region; it is settled before the rollback awaits the
 * teardown (which waits for the attempt to settle).
 *
 * @internal
 */
export const transaction = <A, E, R>(
  loop: Loop,
  id: SessionId,
  owner: Scope.Scope,
  publisher: AgentPublisher,
  body: (build: Build, restore: Restore) => Effect.Effect<A, E, R>
) =>
  // the mask's body runs when the effect runs, already uninterruptible: no suspend needed (B1)
  Effect.uninterruptibleMask((restore): Effect.Effect<A, E | AgentError.AgentLoopInactive, R> => {
    if (!loop.active) return Effect.fail(new AgentError.AgentLoopInactive())
    loop.inFlight++
    const own = {}
    let build: Build | undefined
    // uninterruptible throughout, so leaving the count needs no acquire/release (B1)
    return Effect.matchCauseEffect(
      withOwn(own)(Effect.flatMap(makeBuild(loop, id, owner, publisher, own), (made) => {
        build = made
        return body(made, restore)
      })),
      {
        onFailure: (cause) => {
          if (build === undefined) {
            leaveInFlight(loop)
            return Effect.failCause(cause)
          }
          settleCreation(build)
          return Effect.zipRight(
            Effect.ignore(teardown(loop, build, publisher)),
            Effect.suspend(() => {
              leaveInFlight(loop)
              return Effect.failCause(cause)
            })
          )
        },
        onSuccess: (value) => {
          settleCreation(build!)
          leaveInFlight(loop)
          return Effect.succeed(value)
        }
      }
    )
  })
