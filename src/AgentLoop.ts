/**
 * The AgentLoop: the default agent factory. It creates and resumes agents in one atomic
 * transaction (PUB, RES) and tears each down in one ordered, memoized quiescence that every owner
 * awaits (LIFE, OWN, FAC-04). Installing its layer installs it in the AgentRegistry's factory slot.
 *
 * The implementation is in `internal/agent/loop/`: `factory.ts` (create, resume, the factory's close),
 * `transaction.ts` (PUB steps 0–6 and the rollback), `agent.ts` (building the agent), `teardown.ts`
 * and `teardownSteps.ts` (LIFE-01..06), `timeout.ts` (CORE-06), `state.ts` (the state records).
 *
 * @since 0.1.0
 */
import type { Duration, Scope } from "effect"
import { Context, Effect, Layer } from "effect"
import type * as AgentError from "./AgentError.js"
import type { AgentFactory, AgentRegistry } from "./AgentRegistry.js"
import * as factory from "./internal/agent/loop/factory.js"
import type { Model } from "./Model.js"
import type { SessionStore } from "./SessionStore.js"

/**
 * The AgentLoop service: the factory it installed, for users that want to call it directly.
 *
 * @since 0.1.0
 * @category services
 */
export class AgentLoop extends Context.Tag("effect-agent/AgentLoop")<AgentLoop, AgentFactory>() {}

/**
 * Options of the AgentLoop layer ({@link layerWith}).
 *
 * @since 0.2.0
 * @category models
 */
export interface AgentLoopOptions {
  /**
   * How long a teardown (`dispose`, an owner Scope closing, the layer's release) may take before its
   * owners are released with `AgentDisposeError{cause: TeardownTimeout}` (CORE-06): a persistence
   * whose write stalls forever cannot hang them. The agent leaves the registry then; its session
   * stays locked until the stalled write settles. Default 30 seconds.
   */
  readonly teardownTimeout?: Duration.DurationInput | undefined
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<
  AgentFactory,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model | Scope.Scope
> = Effect.suspend(() => makeWith({}))

/**
 * `make` with options.
 *
 * @since 0.2.0
 * @category constructors
 */
export const makeWith = (options: AgentLoopOptions): Effect.Effect<
  AgentFactory,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model | Scope.Scope
> => factory.make(options.teardownTimeout)

/**
 * The default factory as a layer: installs itself in the registry's factory slot; closing it
 * disposes every agent it made (FAC-04).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<
  AgentLoop,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model
> = Layer.scoped(AgentLoop, make)

/**
 * The default factory as a layer, with options (e.g. `teardownTimeout`, CORE-06).
 *
 * @example
 * ```ts
 * import { AgentLoop } from "effect-agent"
 *
 * const loop = AgentLoop.layerWith({ teardownTimeout: "10 seconds" })
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layerWith = (options: AgentLoopOptions): Layer.Layer<
  AgentLoop,
  AgentError.FactoryAlreadySet,
  AgentRegistry | SessionStore | Model
> => Layer.scoped(AgentLoop, makeWith(options))
