/**
 * The initiator (SPEC §6.3) as a FiberRef of its own: the log stamps it on what it publishes and the
 * loop reads it, without importing the registry (ARCH-02). `AgentRegistry.currentInitiatorRef` is
 * this one.
 *
 * @internal
 */
import { FiberRef, Option } from "effect"
import { globalValue } from "effect/GlobalValue"
import type { Agent } from "../../Agent.js"

/**
 * The agent that initiated the current work. Only ever set with `Effect.locally` (never
 * `FiberRef.set`), so it is restored when a region ends and inherited by fibers forked inside.
 *
 * @internal
 */
export const currentInitiatorRef: FiberRef.FiberRef<Option.Option<Agent>> = globalValue(
  Symbol.for("effect-agent/AgentRegistry/currentInitiator"),
  () => FiberRef.unsafeMake<Option.Option<Agent>>(Option.none())
)
