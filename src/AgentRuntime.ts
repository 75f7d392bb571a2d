/**
 * Ready-made compositions of the runtime: registry + session store + the AgentLoop factory + the
 * global tool and hook registries, over whatever `SessionPersistence` and `Model` you provide
 * (SPEC §7.4). The model is always yours to provide.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Option } from "effect"
import type { FactoryAlreadySet } from "./AgentError.js"
import * as AgentLoop from "./AgentLoop.js"
import * as AgentRegistry from "./AgentRegistry.js"
import type { Model } from "./Model.js"
import * as SessionPersistence from "./SessionPersistence.js"
import * as SessionStore from "./SessionStore.js"
import * as Tool from "./Tool.js"

/**
 * What a runtime provides.
 *
 * @since 0.1.0
 * @category models
 */
export type Services =
  | AgentRegistry.AgentRegistry
  | SessionStore.SessionStore
  | AgentLoop.AgentLoop
  | Tool.ToolRegistry
  | Tool.LoopHooks

// PKG-03: the global registries of the context when there are (a `Tool.layerGlobalWith(...)` or
// `Tool.layerGlobalHooks` provided around the runtime), else empty ones: never shadowed.
const globalToolsFromContext: Layer.Layer<Tool.ToolRegistry> = Layer.unwrapEffect(
  Effect.map(
    Effect.serviceOption(Tool.ToolRegistry),
    Option.match({ onNone: () => Tool.layerGlobal, onSome: (tools) => Layer.succeed(Tool.ToolRegistry, tools) })
  )
)
const globalHooksFromContext: Layer.Layer<Tool.LoopHooks> = Layer.unwrapEffect(
  Effect.map(
    Effect.serviceOption(Tool.LoopHooks),
    Option.match({ onNone: () => Tool.layerGlobalHooks, onSome: (hooks) => Layer.succeed(Tool.LoopHooks, hooks) })
  )
)

/**
 * The runtime over the `SessionPersistence` of the context, if any (without one, agents live in
 * memory only and `resume` fails `PersistenceNotConfigured`), and the `Model` of the context. A
 * global `Tool.ToolRegistry` or `Tool.LoopHooks` of the context (e.g. `Tool.layerGlobalWith([...])`
 * provided around the runtime) is the one its agents use and the one it provides; else it
 * provides empty ones (PKG-03).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Services, FactoryAlreadySet, Model> = AgentLoop.layer.pipe(
  Layer.provideMerge(
    Layer.mergeAll(AgentRegistry.layer, SessionStore.layer, globalToolsFromContext, globalHooksFromContext)
  )
)

/**
 * The runtime with persistence in memory (`storage` shared between runtimes stands in for a disk
 * that outlives processes; see `SessionPersistence.makeMemoryStorage`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMemory = (
  options: {
    readonly storage: SessionPersistence.MemoryStorage
    readonly instanceId?: string | undefined
  } & SessionPersistence.SizeLimits
): Layer.Layer<Services | SessionPersistence.SessionPersistence, FactoryAlreadySet, Model> =>
  layer.pipe(
    Layer.provideMerge(SessionPersistence.layerMemory(options.storage, {
      instanceId: options.instanceId,
      maxEventBytes: options.maxEventBytes,
      maxSessionBytes: options.maxSessionBytes
    }))
  )
