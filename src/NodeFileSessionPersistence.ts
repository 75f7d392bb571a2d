/**
 * File persistence on Node's file system (`@effect/platform-node`, an optional peer dependency):
 * `FileSessionPersistence` with `NodeContext.layer` provided. The package index imports only
 * `effect` and `@effect/platform` (PKG-01), so what needs Node lives here.
 *
 * @since 0.2.0
 */
import { NodeContext } from "@effect/platform-node"
import { Layer } from "effect"
import type { FactoryAlreadySet } from "./AgentError.js"
import type * as AgentRuntime from "./AgentRuntime.js"
import * as FileSessionPersistence from "./FileSessionPersistence.js"
import type { Model } from "./Model.js"
import type { PersistenceError } from "./SessionError.js"
import type { SessionPersistence } from "./SessionPersistence.js"

/**
 * `FileSessionPersistence.layer` on Node's file system (v1: `FileSessionPersistence.layerNode`).
 *
 * @example
 * ```ts
 * import * as NodeFileSessionPersistence from "effect-agent/NodeFileSessionPersistence"
 *
 * const PersistenceLive = NodeFileSessionPersistence.layer({ directory: "./sessions" })
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = (
  options: FileSessionPersistence.Options
): Layer.Layer<SessionPersistence, PersistenceError> =>
  FileSessionPersistence.layer(options).pipe(Layer.provide(NodeContext.layer))

/**
 * The agent runtime with JSONL files in `options.directory` on Node's file system (v1:
 * `AgentRuntime.layerFileSystem`). The model is yours to provide.
 *
 * @example
 * ```ts
 * import * as NodeFileSessionPersistence from "effect-agent/NodeFileSessionPersistence"
 *
 * // Needs a `Model` (provide yours, e.g. `Layer.provide(MyModelLive)`).
 * const RuntimeLive = NodeFileSessionPersistence.layerRuntime({ directory: "./sessions" })
 * ```
 *
 * @since 0.2.0
 * @category layers
 */
export const layerRuntime = (
  options: FileSessionPersistence.Options
): Layer.Layer<
  AgentRuntime.Services | SessionPersistence,
  FactoryAlreadySet | PersistenceError,
  Model
> => FileSessionPersistence.layerRuntime(options).pipe(Layer.provide(NodeContext.layer))
