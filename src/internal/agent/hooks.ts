/**
 * Loop hook registries (per agent and global) and the runners the driver calls: global hooks run
 * first, then the agent's, each in registration order.
 *
 * @internal
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import type { AgentInactive, ModelError } from "../../AgentError.js"
import type { UserMessage } from "../../Message.js"
import type { LoopHooksShape, PreStepDecision, Route, StepInfo } from "../../Tool.js"
import { checkActive } from "./tools.js"

/** @internal */
export type PreStepHook = Parameters<LoopHooksShape["preStep"]>[0]
/** @internal */
export type RequestHook = Parameters<LoopHooksShape["request"]>[0]
/** @internal */
export type RequestErrorHook = Parameters<LoopHooksShape["requestError"]>[0]
/** @internal */
export type TurnStoppingHook = Parameters<LoopHooksShape["turnStopping"]>[0]

/**
 * One registration. The wrapper gives it an identity, so registering the same function twice
 * gives two registrations, each removed by its own Scope.
 *
 * @internal
 */
export interface Registration<F> {
  readonly hook: F
}

/**
 * The hooks of one registry, each kind in registration order.
 *
 * @internal
 */
export interface HookLists {
  readonly preStep: ReadonlyArray<Registration<PreStepHook>>
  readonly request: ReadonlyArray<Registration<RequestHook>>
  readonly requestError: ReadonlyArray<Registration<RequestErrorHook>>
  readonly turnStopping: ReadonlyArray<Registration<TurnStoppingHook>>
}

/**
 * What the driver runs at each hook point. The hooks run interruptible (a cancel lands inside a hook,
 * CAN-01); with no hook of the kind registered a runner is its answer at once, an `Exit` that costs
 * no Effect operation (B5).
 *
 * @internal
 */
export interface HookRunners {
  /**
   * Waterfall: each hook sees the messages the previous one decided to enter (the first sees
   * `messages`). A `reject` stops the chain and is the result. No hooks: enter `messages`.
   */
  readonly runPreStep: (info: StepInfo, messages: ReadonlyArray<UserMessage>) => Effect.Effect<PreStepDecision, unknown>
  /** Waterfall: each hook sees the route the previous one returned. No hooks: `route`. */
  readonly runRequest: (info: StepInfo, route: Route) => Effect.Effect<Route, unknown>
  /**
   * Retry only when at least one hook runs and every hook says `"retry"`: the first `"fail"` wins
   * and skips the later hooks. No hooks: `"fail"`. The caller caps retries (`maxRequestRetries`).
   */
  readonly runRequestError: (
    info: StepInfo & { readonly error: ModelError; readonly attempt: number }
  ) => Effect.Effect<"retry" | "fail", unknown>
  /** Serial; the first failure stops the chain and is the result. */
  readonly runTurnStopping: (
    info: { readonly agent: StepInfo["agent"]; readonly turn: number }
  ) => Effect.Effect<void, unknown>
}

/**
 * A hook registry: the public shape (its hooks read through `list`) and its runners.
 *
 * @internal
 */
export interface LoopHooksInstance extends LoopHooksShape, HookRunners {}

const emptyLists: HookLists = { preStep: [], request: [], requestError: [], turnStopping: [] }

/** Reads a registry's hooks as they are now (synchronous: the lists are replaced, never changed in place). */
type ListsReader = () => HookLists

const concat = (lists: ReadonlyArray<HookLists>): HookLists => {
  if (lists.length === 1 && lists[0] !== undefined) return lists[0]
  return {
    preStep: lists.flatMap((l) => l.preStep),
    request: lists.flatMap((l) => l.request),
    requestError: lists.flatMap((l) => l.requestError),
    turnStopping: lists.flatMap((l) => l.turnStopping)
  }
}

const noneOf = <A>(value: A): Effect.Effect<A> => Effect.succeed(value)

/**
 * The runners over one source of hook lists, read afresh at every run: one small object per agent,
 * its operations on the prototype. The lists are read when the runner is called (at the hook point);
 * a reader that throws (an instance not built here) is a defect of the run.
 */
class Runners implements HookRunners {
  constructor(private readonly read: ListsReader) {}

  private lists(): HookLists | Effect.Effect<never> {
    try {
      return this.read()
    } catch (error) {
      return Effect.die(error)
    }
  }

  runPreStep(info: StepInfo, messages: ReadonlyArray<UserMessage>): Effect.Effect<PreStepDecision, unknown> {
    const lists = this.lists()
    if (Effect.isEffect(lists)) return lists
    const { preStep } = lists
    if (preStep.length === 0) return noneOf<PreStepDecision>({ kind: "enter", messages })
    return Effect.interruptible(Effect.gen(function*() {
      let decision: PreStepDecision = { kind: "enter", messages }
      for (const { hook } of preStep) {
        if (decision.kind === "reject") break
        decision = yield* hook({ agent: info.agent, turn: info.turn, step: info.step, messages: decision.messages })
      }
      return decision
    }))
  }

  runRequest(info: StepInfo, initial: Route): Effect.Effect<Route, unknown> {
    const lists = this.lists()
    if (Effect.isEffect(lists)) return lists
    const { request } = lists
    if (request.length === 0) return noneOf(initial)
    return Effect.interruptible(Effect.gen(function*() {
      let route = initial
      for (const { hook } of request) {
        route = yield* hook({ agent: info.agent, turn: info.turn, step: info.step, route })
      }
      return route
    }))
  }

  runRequestError(
    info: StepInfo & { readonly error: ModelError; readonly attempt: number }
  ): Effect.Effect<"retry" | "fail", unknown> {
    const lists = this.lists()
    if (Effect.isEffect(lists)) return lists
    const { requestError } = lists
    if (requestError.length === 0) return noneOf<"retry" | "fail">("fail")
    return Effect.interruptible(Effect.gen(function*() {
      for (const { hook } of requestError) {
        if ((yield* hook(info)) === "fail") return "fail" as const
      }
      return "retry" as const
    }))
  }

  runTurnStopping(info: { readonly agent: StepInfo["agent"]; readonly turn: number }): Effect.Effect<void, unknown> {
    const lists = this.lists()
    if (Effect.isEffect(lists)) return lists
    const { turnStopping } = lists
    if (turnStopping.length === 0) return Effect.void
    return Effect.interruptible(Effect.gen(function*() {
      for (const { hook } of turnStopping) yield* hook(info)
    }))
  }
}

/**
 * Runners over the hooks of `sources`, read afresh at every run, in source order.
 *
 * @internal
 */
export const runnersOf = (sources: ReadonlyArray<ListsReader>): HookRunners =>
  new Runners(
    sources.length === 1 && sources[0] !== undefined
      ? sources[0]
      : () => concat(sources.map((read) => read()))
  )

/**
 * A hook registry. Registrations last until the caller's Scope closes. The per-agent registry
 * (`isActive` given) refuses registrations with `AgentInactive{id}` once the agent is inactive; the
 * global one (`isActive` undefined) never fails. Synchronous, so an agent's registries exist
 * before anything can register.
 *
 * @internal
 */
export const makeLoopHooks = (options: {
  readonly isActive: Effect.Effect<boolean> | undefined
  readonly id?: string | undefined
}): LoopHooksInstance => {
  // a plain cell: every change replaces the lists in one synchronous step, so a reader sees a whole
  // state (what a `Ref` gives, without an Effect to read it at every hook point, B5)
  let lists = emptyLists
  const active = checkActive(options)

  const add = <K extends keyof HookLists>(kind: K, span: string) =>
  (hook: HookLists[K][number]["hook"]): Effect.Effect<void, AgentInactive, Scope.Scope> =>
    Effect.zipRight(
      active,
      Effect.acquireRelease(
        Effect.sync(() => {
          const registration: Registration<typeof hook> = { hook }
          lists = { ...lists, [kind]: [...lists[kind], registration] }
          return registration
        }),
        (registration) =>
          Effect.sync(() => {
            lists = {
              ...lists,
              [kind]: lists[kind].filter((existing: Registration<unknown>) => existing !== registration)
            }
          })
      )
    ).pipe(Effect.asVoid, Effect.withSpan(span))

  const read: ListsReader = () => lists
  const runners = new Runners(read)
  const instance: LoopHooksInstance = {
    preStep: add("preStep", "LoopHooks.preStep"),
    request: add("request", "LoopHooks.request"),
    requestError: add("requestError", "LoopHooks.requestError"),
    turnStopping: add("turnStopping", "LoopHooks.turnStopping"),
    list: read,
    runPreStep: (info, messages) => runners.runPreStep(info, messages),
    runRequest: (info, route) => runners.runRequest(info, route),
    runRequestError: (info) => runners.runRequestError(info),
    runTurnStopping: (info) => runners.runTurnStopping(info)
  }
  return instance
}

/**
 * Runners over the global hooks (when there are any), then the agent's, each in registration
 * order. Both registries are read at every run, so a registration counts from the next hook point.
 *
 * @internal
 */
export const combineHooks = (global: LoopHooksShape | undefined, perAgent: LoopHooksShape): HookRunners =>
  runnersOf(global === undefined ? [perAgent.list] : [global.list, perAgent.list])

/**
 * Runners over the global hooks (when there are any), then the hooks of the agent's registry once
 * it exists: an agent whose hooks are never touched never builds its registry (B1, B2).
 *
 * @internal
 */
export const lazyRunners = (
  global: LoopHooksShape | undefined,
  perAgent: () => LoopHooksShape | undefined
): HookRunners => {
  const own: ListsReader = () => {
    const hooks = perAgent()
    return hooks === undefined ? emptyLists : hooks.list()
  }
  return runnersOf(global === undefined ? [own] : [global.list, own])
}
