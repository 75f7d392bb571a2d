/**
 * Tools (TOOL-01..03) and loop hooks: definitions, per-agent registries (scoped to the agent) and
 * the global registries provided by a layer.
 *
 * @since 0.1.0
 */
import type { Either, Scope } from "effect"
import { Context, Effect, Layer, Schema } from "effect"
import type { Duration } from "effect"
import type { Agent, AgentOptions, Setup } from "./Agent.js"
import type {
  AgentInactive,
  AskUnavailable,
  DuplicateTool,
  MaxAgentDepthExceeded,
  ModelError,
  QuestionDeclined,
  QuestionTimedOut,
  SubAgentFailed
} from "./AgentError.js"
import type { AgentRegistry } from "./AgentRegistry.js"
import * as askInternal from "./internal/agent/ask.js"
import * as subAgent from "./internal/agent/subAgent.js"
import * as hooks from "./internal/agent/hooks.js"
import * as options_ from "./internal/options.js"
import * as tools from "./internal/agent/tools.js"
import type { ContentPart, UserMessage } from "./Message.js"
import type { ToolSchema } from "./Model.js"
import type { JsonRecord, RequestSettings } from "./SessionEvent.js"

/**
 * What a tool returns. `concludesTurn` ends the turn after this step unless next-step input is
 * pending.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolResult {
  readonly content: ReadonlyArray<ContentPart>
  readonly isError?: boolean | undefined
  readonly concludesTurn?: boolean | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface ToolContext {
  readonly agent: Agent
  readonly turn: number
  readonly step: number
  readonly callId: string
}

/**
 * A tool: a name, a description, a Schema for its parameters, how it runs beside others
 * (`parallel` tools run concurrently; an `exclusive` one is a barrier) and its body.
 *
 * @since 0.1.0
 * @category models
 */
export interface Tool<Fields extends Schema.Struct.Fields, E = never, R = never> {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Struct<Fields>
  readonly mode: "parallel" | "exclusive"
  readonly run: (args: Schema.Struct.Type<Fields>, context: ToolContext) => Effect.Effect<ToolResult, E, R>
  /**
   * How long one call may run (PKG-03): a call still running then is interrupted and gets an error
   * result `TOOL_TIMEOUT` that the model sees. No limit when unset.
   *
   * @since 0.2.0
   */
  readonly timeout?: Duration.Duration | undefined
  /**
   * The JSON Schema the model sees for the parameters, when it is not the one derived from
   * `parameters` (MCP-01: an MCP server's own schema, given as is; the server validates the
   * arguments). Arguments are still decoded with `parameters`.
   *
   * @since 0.3.0
   */
  readonly jsonSchema?: JsonRecord | undefined
  /**
   * whether a call needs a person's approval before it runs: `"always"`, or a predicate over
   * the decoded arguments (`true`: ask). Such a call logs `tool/approval-requested` and waits for
   * `agent.approve` / `agent.reject`; its `tool/call` is logged when it is dispatched.
   *
   * @since 0.3.0
   */
  readonly approval?: Approval<Schema.Struct.Type<Fields>, R> | undefined
  /**
   * how long an approval request of this tool may wait before it is rejected automatically
   * (reason `"timeout"`); the agent's `approvalTimeout` when unset.
   *
   * @since 0.3.0
   */
  readonly approvalTimeout?: Duration.Duration | undefined
}

/**
 * when a tool's call needs approval: `"always"`, or a predicate over the call's decoded
 * arguments and context (`true`: ask a person first). A predicate that dies counts as `true`.
 *
 * @since 0.3.0
 * @category models
 */
export type Approval<Args, R = never> = "always" | ((args: Args, context: ToolContext) => Effect.Effect<boolean, never, R>)

/**
 * Any tool, with its requirements already provided.
 *
 * @since 0.1.0
 * @category models
 */
export interface Any {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Struct<any>
  readonly mode: "parallel" | "exclusive"
  readonly run: (args: any, context: ToolContext) => Effect.Effect<ToolResult, unknown>
  /** @since 0.2.0 */
  readonly timeout?: Duration.Duration | undefined
  /** @since 0.3.0 */
  readonly jsonSchema?: JsonRecord | undefined
  /** @since 0.3.0 */
  readonly approval?: Approval<any> | undefined
  /** @since 0.3.0 */
  readonly approvalTimeout?: Duration.Duration | undefined
}

/**
 * A tool with any parameters, failures and requirements: what {@link ToolRegistryShape.registerAll}
 * takes, so tools with different parameter schemas can be registered together.
 *
 * @since 0.2.0
 * @category models
 */
export type Unknown = Tool<any, any, any>

/**
 * The requirements of a list of tools.
 *
 * @since 0.2.0
 * @category models
 */
export type Requirements<Tools extends ReadonlyArray<Unknown>> = RequirementsOf<Tools[number]>

type RequirementsOf<T> = T extends Tool<any, any, infer R> ? R : never

/**
 * Several tools, registered together with `registerAll` (PKG-03).
 *
 * @since 0.2.0
 * @category models
 */
export interface Toolkit<Tools extends ReadonlyArray<Unknown> = ReadonlyArray<Unknown>> {
  readonly _tag: "Toolkit"
  readonly tools: Tools
}

/**
 * Groups tools (of any parameter schemas) into a value that `registerAll` and
 * {@link layerGlobalWith} take.
 *
 * @example
 * ```ts
 * import { Effect, Schema } from "effect"
 * import * as Tool from "effect-agent/Tool"
 *
 * const files = Tool.toolkit(
 *   Tool.make({
 *     name: "read",
 *     description: "Reads a file",
 *     parameters: Schema.Struct({ path: Schema.String }),
 *     run: ({ path }) => Effect.succeed(Tool.text(path))
 *   }),
 *   Tool.make({
 *     name: "count",
 *     description: "Counts to n",
 *     parameters: Schema.Struct({ n: Schema.Number }),
 *     run: ({ n }) => Effect.succeed(Tool.text(String(n)))
 *   })
 * )
 * ```
 *
 * @since 0.2.0
 * @category constructors
 */
export const toolkit = <const Tools extends ReadonlyArray<Unknown>>(...tools: Tools): Toolkit<Tools> =>
  Object.freeze({ _tag: "Toolkit", tools })

/**
 * Defines a tool. A definition that does not match its Schema (a `timeout` that is not a positive
 * duration, a `mode` other than `"parallel"`/`"exclusive"`, parameters that are not a `Schema.Struct`)
 * throws a `TypeError` here, where the tool is defined, naming each bad field (CORE-08).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <Fields extends Schema.Struct.Fields, E = never, R = never>(options: {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Struct<Fields>
  readonly mode?: "parallel" | "exclusive" | undefined
  readonly run: (args: Schema.Struct.Type<Fields>, context: ToolContext) => Effect.Effect<ToolResult, E, R>
  /**
   * How long one call may run (PKG-03); must be positive. A call still running then is interrupted
   * and gets an error result `TOOL_TIMEOUT` (it may have partly run). Time is the `Clock`'s, so
   * `TestClock` drives it in tests.
   *
   * @since 0.2.0
   */
  readonly timeout?: Duration.DurationInput | undefined
  /**
   * `"always"`, or a predicate over the decoded arguments: a call it says `true` for waits
   * for `agent.approve` / `agent.reject` before it runs.
   *
   * @since 0.3.0
   */
  readonly approval?: Approval<Schema.Struct.Type<Fields>, R> | undefined
  /**
   * how long an approval request waits before it is rejected automatically (reason
   * `"timeout"`); must be positive. The agent's `approvalTimeout` when unset.
   *
   * @since 0.3.0
   */
  readonly approvalTimeout?: Duration.DurationInput | undefined
}): Tool<Fields, E, R> => {
  // CORE-08: the definition is decoded by its Schema once, here; a bad field throws naming it
  const checked = options_.decodeToolDefinition(options)
  return {
    name: checked.name,
    description: checked.description,
    parameters: options.parameters,
    mode: checked.mode ?? "parallel",
    run: options.run,
    ...(checked.timeout !== undefined ? { timeout: checked.timeout } : {}),
    ...(options.approval !== undefined ? { approval: options.approval } : {}),
    ...(checked.approvalTimeout !== undefined ? { approvalTimeout: checked.approvalTimeout } : {})
  }
}

/**
 * The default parameters of a sub-agent tool ({@link agent}): one `prompt` string.
 *
 * @since 0.3.0
 * @category schema
 */
export const AgentPrompt: Schema.Struct<{ prompt: typeof Schema.String }> = Schema.Struct({ prompt: Schema.String })

/**
 * What {@link agent} takes besides its parameters.
 *
 * @since 0.3.0
 * @category models
 */
export interface AgentToolOptions<E, R> {
  readonly name: string
  readonly description: string
  /** The child's options (its model route, system prompt, limits). */
  readonly options?: AgentOptions | undefined
  /** Runs when each child is built (its tools, hooks), as a create's `setup`. */
  readonly setup?: Setup<E, R> | undefined
  /** How long one call (the child's whole turn) may run; see {@link make}. */
  readonly timeout?: Duration.DurationInput | undefined
  /** whether a call needs approval before the child is spawned; see {@link make}. (@since 0.3.0) */
  readonly approval?: Approval<any, R> | undefined
  /** see {@link make}. (@since 0.3.0) */
  readonly approvalTimeout?: Duration.DurationInput | undefined
}

/**
 * A tool that delegates to a sub-agent (SUB-01). Each call spawns a child agent owned by the calling
 * agent, in a session whose id is derived from the caller's id and the call id
 * (`<caller id prefix>.sub-<hash>`, within ID-01's limits); logs `tool/child` before the child exists;
 * sends it the prompt (the `prompt` argument, or `prompt(args)` with other `parameters`) and returns
 * its final text as the result, after a first line `[sub-agent <child id>]`. The child is disposed
 * when the call ends; its session stays stored.
 *
 * A child turn that does not complete gives an error result `SUBAGENT_FAILED` with its reason;
 * interrupting the call (the caller's turn is canceled or the caller disposed) cancels the child's
 * turn with cause `parent`; a call that would go deeper than the caller's `maxAgentDepth` (default
 * 4) is an error result `MAX_AGENT_DEPTH` and makes no child. After a crash, the caller's resume takes
 * the result of a child whose turn had ended from the child's log, without running it again
 * (SUB-02). The tool needs the `AgentRegistry` (to find the caller's ancestors).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { AgentRegistry, Tool } from "effect-agent"
 *
 * const researcher = Tool.agent({
 *   name: "research",
 *   description: "Delegates a research question to a sub-agent and returns its answer",
 *   options: { provider: "openai", model: "gpt-4o-mini", system: "Answer briefly." }
 * })
 *
 * const program = Effect.gen(function*() {
 *   const registry = yield* AgentRegistry.AgentRegistry
 *   return yield* registry.create({
 *     sessionId: "lead",
 *     options: { provider: "openai", model: "gpt-4o" },
 *     setup: (agent) => agent.tools.register(researcher)
 *   })
 * })
 * ```
 *
 * @since 0.3.0
 * @category constructors
 */
export const agent: {
  <E = never, R = never>(
    options: AgentToolOptions<E, R> & { readonly parameters?: undefined; readonly prompt?: undefined }
  ): Tool<{ prompt: typeof Schema.String }, SubAgentFailed | MaxAgentDepthExceeded, AgentRegistry | Exclude<R, Scope.Scope>>
  <Fields extends Schema.Struct.Fields, E = never, R = never>(
    options: AgentToolOptions<E, R> & {
      readonly parameters: Schema.Struct<Fields>
      /** The message the child gets for the call's arguments. */
      readonly prompt: (args: Schema.Struct.Type<Fields>) => string
    }
  ): Tool<Fields, SubAgentFailed | MaxAgentDepthExceeded, AgentRegistry | Exclude<R, Scope.Scope>>
} = <E, R>(
  options: AgentToolOptions<E, R> & {
    readonly parameters?: Schema.Struct<any> | undefined
    readonly prompt?: ((args: any) => string) | undefined
  }
): Tool<any, SubAgentFailed | MaxAgentDepthExceeded, AgentRegistry | Exclude<R, Scope.Scope>> => {
  const config: subAgent.SubAgentConfig<any, E, R> = {
    name: options.name,
    options: options.options,
    setup: options.setup,
    prompt: options.prompt ?? ((args: { readonly prompt: string }) => args.prompt)
  }
  return make({
    name: options.name,
    description: options.description,
    parameters: options.parameters ?? AgentPrompt,
    timeout: options.timeout,
    approval: options.approval as Approval<any, AgentRegistry | Exclude<R, Scope.Scope>> | undefined,
    approvalTimeout: options.approvalTimeout,
    run: (args, context) => subAgent.runCall(config, args, context)
  })
}

/**
 * What {@link ask} takes: the question for a person, the Schema its answer is decoded with (its JSON
 * Schema is logged with the question, so a UI can build a form), and how long to wait.
 *
 * @since 0.3.0
 * @category people in the loop
 */
export interface AskOptions<A, I> {
  readonly question: string
  readonly schema: Schema.Schema<A, I, never>
  /**
   * How long to wait for an answer (the `Clock`'s time): then the question is settled `timeout` and
   * `ask` fails `QuestionTimedOut`. The deadline is logged, so it also holds after a restart.
   */
  readonly timeout?: Duration.DurationInput | undefined
}

/**
 * Asks a person a question from inside a tool's `run` and waits for the answer (HIL-03). The
 * question is logged durably (`tool/input-requested`, announced as `InputRequested`) and shows in
 * `agent.pending`; `agent.respond(requestId, value)` answers it (the value is decoded with `schema`
 * here, in the running tool) and `ask` returns the decoded value; `agent.decline` makes it fail
 * `QuestionDeclined`. A cancel of the turn settles the question `canceled` and interrupts the tool.
 * Time spent waiting does not count against the tool's `timeout`. Outside a tool call an agent runs,
 * it fails `AskUnavailable`.
 *
 * After a restart the tool runs again from its start, and each `ask` that has a logged answer
 * returns it at once, in order (replay): so what a tool does before an `ask` must be safe to do
 * again (idempotent). A tool that asks a different question at the same position than it did
 * before (another text or schema) ends with the error result `ASK_REPLAY_MISMATCH`; nobody is asked
 * again.
 *
 * @example
 * ```ts
 * import { Effect, Schema } from "effect"
 * import * as Tool from "effect-agent/Tool"
 *
 * const deploy = Tool.make({
 *   name: "deploy",
 *   description: "Deploys the current build to an environment",
 *   parameters: Schema.Struct({ service: Schema.String }),
 *   run: ({ service }) =>
 *     Effect.gen(function*() {
 *       const target = yield* Tool.ask({
 *         question: `Where should ${service} go?`,
 *         schema: Schema.Literal("staging", "production")
 *       })
 *       return Tool.text(`deployed ${service} to ${target}`)
 *     }).pipe(Effect.catchTag("QuestionDeclined", () => Effect.succeed(Tool.text("not deployed"))))
 * })
 * ```
 *
 * @since 0.3.0
 * @category people in the loop
 */
export const ask = <A, I>(
  options: AskOptions<A, I>
): Effect.Effect<A, QuestionDeclined | QuestionTimedOut | AskUnavailable> => askInternal.ask(options)

/**
 * A text result.
 *
 * @since 0.1.0
 * @category constructors
 */
export const text = (
  value: string,
  options?: { readonly isError?: boolean | undefined; readonly concludesTurn?: boolean | undefined }
): ToolResult => ({
  content: [{ type: "text", text: value }],
  ...(options?.isError !== undefined ? { isError: options.isError } : {}),
  ...(options?.concludesTurn !== undefined ? { concludesTurn: options.concludesTurn } : {})
})

/**
 * A tool as the model sees it: `jsonSchema` is the tool's own `jsonSchema` when it has one (MCP
 * tools), else `JSONSchema.make(tool.parameters)` as plain frozen JSON without `$schema` (a tool
 * without parameters gets `{type: "object", properties: {}, required: []}`). Memoized per
 * parameters schema, so a request's JSON form is stable.
 *
 * @since 0.1.0
 * @category schema
 */
export const toSchema: (tool: Any) => ToolSchema = tools.toSchema

/**
 * Decodes a tool call's raw argument text with the tool's Schema (TOOL-01). On failure (not JSON,
 * or not matching the parameters) the left is the error text the model sees in the tool's error
 * result. Empty argument text counts as `{}`; excess properties are ignored.
 *
 * @example
 * ```ts
 * import { Effect, Either, Schema } from "effect"
 * import * as Tool from "effect-agent/Tool"
 *
 * const read = Tool.make({
 *   name: "read",
 *   description: "Reads a file",
 *   parameters: Schema.Struct({ path: Schema.String }),
 *   run: ({ path }) => Effect.succeed(Tool.text(path))
 * })
 * const args = Tool.decodeArguments(read, "{\"path\":\"a.txt\"}")
 * if (Either.isRight(args)) args.right.path
 * ```
 *
 * @since 0.1.0
 * @category schema
 */
export const decodeArguments: <Fields extends Schema.Struct.Fields>(
  tool: { readonly name: string; readonly parameters: Schema.Struct<Fields> },
  raw: string
) => Either.Either<Schema.Struct.Type<Fields>, string> = tools.decodeArguments

/**
 * Registered tools. The per-agent registry (`agent.tools`) fails `AgentInactive` once the agent's
 * teardown began; the global one (the `ToolRegistry` tag) never does.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolRegistryShape {
  /** Registers a tool until the Scope closes. Names are unique per registry. */
  readonly register: <F extends Schema.Struct.Fields, E, R>(
    tool: Tool<F, E, R>
  ) => Effect.Effect<void, DuplicateTool | AgentInactive, Scope.Scope | R>
  /**
   * Registers several tools (of any parameter schemas), in order, until the Scope closes (PKG-03):
   * all of them or, when one fails (`DuplicateTool`, also between two of `tools`), none.
   *
   * @since 0.2.0
   */
  readonly registerAll: <const Tools extends ReadonlyArray<Unknown>>(
    tools: Tools | Toolkit<Tools>
  ) => Effect.Effect<void, DuplicateTool | AgentInactive, Scope.Scope | Requirements<Tools>>
  /** Tools in registration order. */
  readonly list: Effect.Effect<ReadonlyArray<Any>>
}

/**
 * The global tool registry: tools every agent has (an agent's own tools shadow global ones of the
 * same name).
 *
 * @since 0.1.0
 * @category services
 */
export class ToolRegistry extends Context.Tag("effect-agent/ToolRegistry")<ToolRegistry, ToolRegistryShape>() {}

/**
 * An empty global tool registry.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerGlobal: Layer.Layer<ToolRegistry> = Layer.sync(
  ToolRegistry,
  () => tools.makeToolRegistry({ isActive: undefined })
)

/**
 * A global tool registry holding `tools` (an array or a {@link toolkit}, in this order) for the
 * layer's lifetime. Two tools with the same name fail the layer with `DuplicateTool`. Provided
 * around an `AgentRuntime.layer*`, it is the registry the runtime's agents use (PKG-03).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerGlobalWith = (initial: ReadonlyArray<Any> | Toolkit<ReadonlyArray<Any>>): Layer.Layer<
  ToolRegistry,
  DuplicateTool
> =>
  Layer.scoped(
    ToolRegistry,
    Effect.gen(function*() {
      const registry = tools.makeToolRegistry({ isActive: undefined })
      // The global registry has no owner to become inactive.
      yield* registry.registerAll(initial).pipe(Effect.catchTag("AgentInactive", Effect.die))
      return registry
    })
  )

/**
 * What a step looks like to a hook.
 *
 * @since 0.1.0
 * @category hooks
 */
export interface StepInfo {
  readonly agent: Agent
  readonly turn: number
  readonly step: number
}

/**
 * Where a request goes.
 *
 * @since 0.1.0
 * @category hooks
 */
export interface Route {
  readonly provider: string
  readonly model: string
  readonly maxTokens?: number | undefined
  readonly system?: string | undefined
  /**
   * APP-04: the model settings (but `maxOutputTokens`, which is `maxTokens`): the agent's, with the
   * settings of the message that started the turn over them.
   *
   * @since 0.3.0
   */
  readonly settings?: RequestSettings | undefined
}

/**
 * What a `preStep` hook decides about the batch about to enter a step.
 *
 * @since 0.1.0
 * @category hooks
 */
export type PreStepDecision =
  | { readonly kind: "enter"; readonly messages: ReadonlyArray<UserMessage> }
  | { readonly kind: "reject"; readonly reason: string }

/**
 * The loop's hooks. Global hooks run first, then the agent's, each in registration order. A
 * failing hook ends the turn `error`.
 *
 * @since 0.1.0
 * @category hooks
 */
export interface LoopHooksShape {
  /** Waterfall over the batch about to enter a step. */
  readonly preStep: (
    f: (info: StepInfo & { readonly messages: ReadonlyArray<UserMessage> }) => Effect.Effect<PreStepDecision, unknown>
  ) => Effect.Effect<void, AgentInactive, Scope.Scope>
  /** Waterfall over the route of a request; a change is persisted as `request/config`. */
  readonly request: (
    f: (info: StepInfo & { readonly route: Route }) => Effect.Effect<Route, unknown>
  ) => Effect.Effect<void, AgentInactive, Scope.Scope>
  /** Decides whether a failed request is retried within the step (capped by `maxRequestRetries`). */
  readonly requestError: (
    f: (info: StepInfo & { readonly error: ModelError; readonly attempt: number }) => Effect.Effect<"retry" | "fail", unknown>
  ) => Effect.Effect<void, AgentInactive, Scope.Scope>
  /** Runs serially when a turn is about to stop; may steer to continue it. */
  readonly turnStopping: (
    f: (info: { readonly agent: Agent; readonly turn: number }) => Effect.Effect<void, unknown>
  ) => Effect.Effect<void, AgentInactive, Scope.Scope>
  /**
   * The hooks registered now, each kind in registration order: what the runtime runs at each hook
   * point (read afresh at every point). An object that spreads a registry and replaces a method
   * keeps the registry's `list`, so its hooks run as the registry's own do (ARCH-01). Synchronous:
   * the lists are replaced on each change, never changed in place, so a hook point with nothing
   * registered costs no Effect operation.
   *
   * @since 0.3.0
   */
  readonly list: () => LoopHookLists
}

/**
 * One registered hook. Registering the same function twice gives two registrations, each removed
 * by its own Scope.
 *
 * @since 0.3.0
 * @category hooks
 */
export interface LoopHookRegistration<F> {
  readonly hook: F
}

/**
 * The hooks of one registry, each kind in registration order ({@link LoopHooksShape.list}).
 *
 * @since 0.3.0
 * @category hooks
 */
export interface LoopHookLists {
  readonly preStep: ReadonlyArray<LoopHookRegistration<Parameters<LoopHooksShape["preStep"]>[0]>>
  readonly request: ReadonlyArray<LoopHookRegistration<Parameters<LoopHooksShape["request"]>[0]>>
  readonly requestError: ReadonlyArray<LoopHookRegistration<Parameters<LoopHooksShape["requestError"]>[0]>>
  readonly turnStopping: ReadonlyArray<LoopHookRegistration<Parameters<LoopHooksShape["turnStopping"]>[0]>>
}

/**
 * The global loop hooks.
 *
 * @since 0.1.0
 * @category services
 */
export class LoopHooks extends Context.Tag("effect-agent/LoopHooks")<LoopHooks, LoopHooksShape>() {}


/**
 * The global loop hooks, initially none. Registrations last until the registering Scope closes
 * and never fail.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerGlobalHooks: Layer.Layer<LoopHooks> = Layer.sync(
  LoopHooks,
  () => hooks.makeLoopHooks({ isActive: undefined })
)
