/**
 * effect-agent: a durable, observable agent runtime core for Effect applications.
 *
 * The index imports only `effect` and `@effect/platform` (PKG-01). Backends with more needs are
 * subpaths: `effect-agent/FileSessionPersistence` (Node builtins, a `FileSystem` from the context),
 * `effect-agent/NodeFileSessionPersistence` (`@effect/platform-node`) and
 * `effect-agent/SqlSessionPersistence` (`@effect/sql` and a driver).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 */
export * as Agent from "./Agent.js"

/**
 * @since 0.1.0
 */
export * as AgentError from "./AgentError.js"

/**
 * @since 0.1.0
 */
export * as AgentEvent from "./AgentEvent.js"

/**
 * @since 0.1.0
 */
export * as AgentLoop from "./AgentLoop.js"

/**
 * @since 0.1.0
 */
export * as AgentRegistry from "./AgentRegistry.js"

/**
 * @since 0.1.0
 */
export * as AgentRuntime from "./AgentRuntime.js"


/**
 * @since 0.1.0
 */
export * as Inbox from "./Inbox.js"

/**
 * @since 0.1.0
 */
export * as Message from "./Message.js"

/**
 * @since 0.1.0
 */
export * as Model from "./Model.js"

/**
 * @since 0.1.0
 */
export * as Repair from "./Repair.js"

/**
 * @since 0.1.0
 */
export * as Session from "./Session.js"

/**
 * @since 0.1.0
 */
export * as SessionError from "./SessionError.js"

/**
 * @since 0.1.0
 */
export * as SessionEvent from "./SessionEvent.js"

/**
 * @since 0.1.0
 */
export * as SessionPersistence from "./SessionPersistence.js"

/**
 * @since 0.1.0
 */
export * as SessionStore from "./SessionStore.js"

/**
 * @since 0.1.0
 */
export * as Tool from "./Tool.js"

/**
 * @since 0.2.0
 */
export * as AgentHost from "./AgentHost.js"

/**
 * @since 0.2.0
 */
export * as Compaction from "./Compaction.js"
export * as Metrics from "./Metrics.js"

/**
 * @since 0.3.0
 */
export * as ModelSettings from "./ModelSettings.js"
export * as SessionGateway from "./SessionGateway.js"

/**
 * @since 0.3.0
 */
export * as TurnResult from "./TurnResult.js"

/**
 * @since 0.3.0
 */
export * as TurnPart from "./TurnPart.js"

/**
 * @since 0.3.0
 */
export * as Pending from "./Pending.js"
