/**
 * Loop hook registries (per agent and global) and the runners the driver calls: global hooks run
 * first, then the agent's, each in registration order.
 *
 * @internal
 */
import { Effect, Ref } from "effect"
import type { Scope } from "effect"
import type { AgentInactive, ModelError } from "../../AgentError.js"
import type { UserMessage } from "../../Message.js"
import type {
  LoopHookLists,
  LoopHookRegistration,
  LoopHooksShape,
  PreStepDecision,
  Route,
  StepInfo
} from "../../Tool.js"
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
 * One registration (the public `LoopHookRegistration`).
 *
 * @internal
 */
export type Registration<F> = LoopHookRegistration<F>

/**
 * The hooks of one registry, each kind in registration order (the public `LoopHookLists`).
 *
 * @internal
 */
export type HookLists = LoopHookLists

/**
 * What the driver runs at each hook point.
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

const concat = (lists: ReadonlyArray<HookLists>): HookLists => {
  if (lists.length === 1 && lists[0] !== undefined) return lists[0]
  return {
    preStep: lists.flatMap((l) => l.preStep),
    request: lists.flatMap((l) => l.request),
    requestError: lists.flatMap((l) => l.requestError),
    turnStopping: lists.flatMap((l) => l.turnStopping)
  }
}

/**
 * The runners over one source of hook lists, read afresh at every run: one small object per agent,
 * its operations on the prototype.
 */
class Runners implements HookRunners {
  constructor(private readonly current: Effect.Effect<HookLists>) {}

  runPreStep(info: StepInfo, messages: ReadonlyArray<UserMessage>): Effect.Effect<PreStepDecision, unknown> {
    const current = this.current
    return Effect.gen(function*() {
      const { preStep } = yield* current
      let decision: PreStepDecision = { kind: "enter", messages }
      for (const { hook } of preStep) {
        if (decision.kind === "reject") break
        decision = yield* hook({ agent: info.agent, turn: info.turn, step: info.step, messages: decision.messages })
      }
      return decision
    })
  }

  runRequest(info: StepInfo, initial: Route): Effect.Effect<Route, unknown> {
    const current = this.current
    return Effect.gen(function*() {
      const { request } = yield* current
      let route = initial
      for (const { hook } of request) {
        route = yield* hook({ agent: info.agent, turn: info.turn, step: info.step, route })
      }
      return route
    })
  }

  runRequestError(
    info: StepInfo & { readonly error: ModelError; readonly attempt: number }
  ): Effect.Effect<"retry" | "fail", unknown> {
    const current = this.current
    return Effect.gen(function*() {
      const { requestError } = yield* current
      if (requestError.length === 0) return "fail" as const
      for (const { hook } of requestError) {
        if ((yield* hook(info)) === "fail") return "fail" as const
      }
      return "retry" as const
    })
  }

  runTurnStopping(info: { readonly agent: StepInfo["agent"]; readonly turn: number }): Effect.Effect<void, unknown> {
    const current = this.current
    return Effect.gen(function*() {
      const { turnStopping } = yield* current
      for (const { hook } of turnStopping) yield* hook(info)
    })
  }
}

/**
 * Runners over the hooks of `sources`, read afresh at every run, in source order.
 *
 * @internal
 */
export const runnersOf = (sources: ReadonlyArray<Effect.Effect<HookLists>>): HookRunners =>
  new Runners(
    sources.length === 1 && sources[0] !== undefined
      ? sources[0]
      : Effect.map(Effect.all(sources), concat)
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
  const lists = Ref.unsafeMake(emptyLists)
  const active = checkActive(options)

  const add = <K extends keyof HookLists>(kind: K, span: string) =>
  (hook: HookLists[K][number]["hook"]): Effect.Effect<void, AgentInactive, Scope.Scope> =>
    Effect.zipRight(
      active,
      Effect.acquireRelease(
        Ref.modify(lists, (current): [Registration<typeof hook>, HookLists] => {
          const registration: Registration<typeof hook> = { hook }
          return [registration, { ...current, [kind]: [...current[kind], registration] }]
        }),
        (registration) =>
          Ref.update(lists, (current) => ({
            ...current,
            [kind]: current[kind].filter((existing: Registration<unknown>) => existing !== registration)
          }))
      )
    ).pipe(Effect.asVoid, Effect.withSpan(span))

  const list = Ref.get(lists)
  const runners = new Runners(list)
  return {
    preStep: add("preStep", "LoopHooks.preStep"),
    request: add("request", "LoopHooks.request"),
    requestError: add("requestError", "LoopHooks.requestError"),
    turnStopping: add("turnStopping", "LoopHooks.turnStopping"),
    list,
    runPreStep: (info, messages) => runners.runPreStep(info, messages),
    runRequest: (info, route) => runners.runRequest(info, route),
    runRequestError: (info) => runners.runRequestError(info),
    runTurnStopping: (info) => runners.runTurnStopping(info)
  }
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
  const own = Effect.suspend(() => {
    const hooks = perAgent()
    return hooks === undefined ? Effect.succeed(emptyLists) : hooks.list
  })
  return runnersOf(global === undefined ? [own] : [global.list, own])
}
