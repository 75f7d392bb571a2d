/**
 * Ready-made compositions of the runtime: registry + session store + the AgentLoop factory + the
 * global tool and hook registries, over whatever `SessionPersistence` and `Model` you provide
 * (SPEC §7.4). The model is always yours to provide.
 *
 * @since 0.1.0
 */
import { Layer } from "effect"
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

/**
 * The runtime over the `SessionPersistence` of the context, if any (without one, agents live in
 * memory only and `resume` fails `PersistenceNotConfigured`), and the `Model` of the context.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Services, FactoryAlreadySet, Model> = AgentLoop.layer.pipe(
  Layer.provideMerge(
    Layer.mergeAll(AgentRegistry.layer, SessionStore.layer, Tool.layerGlobal, Tool.layerGlobalHooks)
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
