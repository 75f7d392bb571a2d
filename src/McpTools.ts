/**
 * Tools from MCP servers (MCP-01..03): `McpTools.layer` connects to the configured servers (a
 * command run over stdio, or a Streamable HTTP URL), lists their tools and offers them to every
 * agent as global tools named `<prefix><server>__<tool>`. Built on the official
 * `@modelcontextprotocol/sdk` client (an optional peer: install it to use this module).
 *
 * @since 0.3.0
 */
import { Context, Deferred, Duration, Effect, Either, Layer, Option, Schedule, Schema, Stream, SubscriptionRef } from "effect"
import * as connection from "./internal/agent/mcpConnection.js"
import * as mcpTools from "./internal/agent/mcpTools.js"
import { DurationInput, formatParseError } from "./internal/options.js"
import * as tools from "./internal/agent/tools.js"
import * as Tool from "./Tool.js"

export {
  /**
   * A `tools/call` that ended in a JSON-RPC error instead of a result; the model sees an error
   * result `TOOL_FAILED` with its message.
   *
   * @since 0.3.0
   * @category errors
   */
  McpCallFailed
} from "./internal/agent/mcpConnection.js"

/**
 * Which of a server's tools are offered, by the names the server gives them: only those in `allow`
 * when it is given, and never those in `deny`. `timeout` bounds each call of its tools (overrides
 * the layer's).
 *
 * @since 0.3.0
 * @category models
 */
export interface ServerCommon {
  readonly allow?: ReadonlyArray<string> | undefined
  readonly deny?: ReadonlyArray<string> | undefined
  readonly timeout?: Duration.DurationInput | undefined
}

/**
 * A server started as a child process and spoken to over stdin/stdout. The child gets `env` on top
 * of a few safe variables of this process (`HOME`, `PATH`, `USER`, …), not all of them.
 *
 * @since 0.3.0
 * @category models
 */
export interface StdioServer extends ServerCommon {
  readonly command: string
  readonly args?: ReadonlyArray<string> | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly cwd?: string | undefined
}

/**
 * A server reached over Streamable HTTP at `url`, with `headers` on every request (e.g. an
 * `Authorization` header).
 *
 * @since 0.3.0
 * @category models
 */
export interface HttpServer extends ServerCommon {
  readonly url: string
  readonly headers?: Readonly<Record<string, string>> | undefined
}

/**
 * @since 0.3.0
 * @category models
 */
export type McpServerOptions = StdioServer | HttpServer

/**
 * What {@link layer} takes.
 *
 * @since 0.3.0
 * @category models
 */
export interface McpToolsOptions {
  /** The servers by name; the name is the middle of their tools' names (`<prefix><server>__<tool>`). */
  readonly servers: Readonly<Record<string, McpServerOptions>>
  /** Put before every tool name, e.g. `"mcp__"`. Default `""`. */
  readonly prefix?: string | undefined
  /** How long one call may run (the tool's `timeout`: then `TOOL_TIMEOUT`). Default 60 seconds. */
  readonly timeout?: Duration.DurationInput | undefined
  /** How long connecting (up to the `initialize` answer) may take. Default 30 seconds. */
  readonly connectTimeout?: Duration.DurationInput | undefined
  /**
   * When to try again after a server is lost or could not be reached; fresh for each outage. When it
   * ends, the server stays down. Default: exponential from 250 ms, at most 30 s apart, forever.
   */
  readonly reconnect?: Schedule.Schedule<unknown, unknown> | undefined
}

/**
 * One server as it is now: `connecting` (the first attempt), `connected`, `retrying` (down at
 * start, or lost: the reconnect schedule runs; its tools stay listed and their calls fail
 * `TOOL_UNAVAILABLE`), or `failed` (the schedule ended). `tools` are the names the model sees;
 * `error` is the last connection error.
 *
 * @since 0.3.0
 * @category models
 */
export interface ServerStatus {
  readonly name: string
  readonly transport: "stdio" | "http"
  readonly status: "connecting" | "connected" | "retrying" | "failed"
  readonly tools: ReadonlyArray<string>
  readonly error?: string | undefined
}

/**
 * The configured servers' status, from {@link layer}.
 *
 * @since 0.3.0
 * @category services
 */
export class McpServers extends Context.Tag("effect-agent/McpServers")<McpServers, {
  /** Every configured server, in configuration order. */
  readonly status: Effect.Effect<ReadonlyArray<ServerStatus>>
  /** The current status, then each change. */
  readonly changes: Stream.Stream<ReadonlyArray<ServerStatus>>
}>() {}

/**
 * Options {@link layer} cannot use; nothing was started.
 *
 * @since 0.3.0
 * @category errors
 */
export class InvalidMcpOptions extends Schema.TaggedError<InvalidMcpOptions>("effect-agent/InvalidMcpOptions")(
  "InvalidMcpOptions",
  { reason: Schema.String }
) {
  override get message(): string {
    return `invalid McpTools options: ${this.reason}`
  }
}

const PositiveDuration = DurationInput.pipe(
  Schema.filter((d) => Duration.greaterThan(d, Duration.zero), { message: () => "must be a positive duration" })
)
const Names = Schema.Array(Schema.String)
const StringRecord = Schema.Record({ key: Schema.String, value: Schema.String })
const Common = {
  allow: Schema.optional(Names),
  deny: Schema.optional(Names),
  timeout: Schema.optional(PositiveDuration)
}
const isUrl = (value: string) => URL.canParse(value) && /^https?:$/.test(new URL(value).protocol)
const ServerSchema = Schema.Union(
  Schema.Struct({
    command: Schema.String.pipe(Schema.minLength(1)),
    args: Schema.optional(Names),
    env: Schema.optional(StringRecord),
    cwd: Schema.optional(Schema.String),
    ...Common
  }),
  Schema.Struct({
    url: Schema.String.pipe(Schema.filter(isUrl, { message: () => "must be an http(s) URL" })),
    headers: Schema.optional(StringRecord),
    ...Common
  })
)
const OptionsSchema = Schema.Struct({
  servers: Schema.Record({ key: Schema.String.pipe(Schema.minLength(1)), value: ServerSchema }),
  prefix: Schema.optional(Schema.String),
  timeout: Schema.optional(PositiveDuration),
  connectTimeout: Schema.optional(PositiveDuration)
})
const decodeOptions = Schema.decodeUnknownEither(OptionsSchema, { errors: "all" })

const defaultReconnect: Schedule.Schedule<unknown, unknown> = Schedule.exponential("250 millis").pipe(
  Schedule.union(Schedule.spaced("30 seconds"))
)

const statusOf = (state: connection.ServerState): ServerStatus => ({
  name: state.server,
  transport: state.transport,
  status: state.status,
  tools: state.tools.map((tool) => tool.name),
  ...(state.error !== undefined ? { error: state.error } : {})
})

/**
 * Connects to every configured server, in parallel, and waits for each one's first attempt (bounded
 * by `connectTimeout`): a server that is down then is a warning, retried on `reconnect`, and its
 * tools appear when it connects. Provides the global `Tool.ToolRegistry`, holding the context's
 * global tools (`Tool.layerGlobalWith`, if provided below it) and the servers' tools, and
 * `McpServers`. A native tool keeps its name when a server's tool would have it (warning).
 *
 * Each server's tools are named `<prefix><server>__<tool>`, made provider-safe
 * (`^[A-Za-z0-9_-]{1,64}$`) the same way in every run; the model gets the server's JSON Schema as is
 * and the server validates the arguments. The servers live in the layer's Scope: stdio children are
 * ended when it is released.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { AgentRuntime, Model, SessionPersistence } from "effect-agent"
 * import * as McpTools from "effect-agent/McpTools"
 *
 * const Mcp = McpTools.layer({
 *   servers: {
 *     files: { command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], deny: ["write_file"] },
 *     search: { url: "http://127.0.0.1:8931/mcp" }
 *   }
 * })
 * export const Runtime = Layer.unwrapEffect(
 *   Effect.map(SessionPersistence.makeMemoryStorage, (storage) =>
 *     AgentRuntime.layerMemory({ storage }).pipe(
 *       Layer.provide(Layer.mergeAll(Model.layerScripted([Model.text("hello")]), Mcp))
 *     ))
 * )
 * ```
 *
 * @since 0.3.0
 * @category layers
 */
export const layer = (options: McpToolsOptions): Layer.Layer<Tool.ToolRegistry | McpServers, InvalidMcpOptions> =>
  Layer.scopedContext(Effect.gen(function*() {
    const decoded = decodeOptions(options)
    if (Either.isLeft(decoded)) return yield* new InvalidMcpOptions({ reason: formatParseError(decoded.left) })
    const configs = Object.entries(options.servers)
    const native = Option.getOrElse(
      yield* Effect.serviceOption(Tool.ToolRegistry),
      () => tools.makeToolRegistry({ isActive: undefined })
    )
    const states = yield* SubscriptionRef.make<ReadonlyArray<connection.ServerState>>(configs.map(([name, server]) => connection.initialState(name, server)))
    const registry = mcpTools.makeRegistry(native, SubscriptionRef.get(states))
    const timeout = decoded.right.timeout ?? Duration.seconds(60)
    const servers: connection.Servers = {
      states,
      configs: configs.map(([name, server]) => ({
        name,
        options: server,
        timeout: decoded.right.servers[name]?.timeout ?? timeout
      })),
      prefix: decoded.right.prefix ?? "",
      connectTimeout: decoded.right.connectTimeout ?? Duration.seconds(30),
      reconnect: options.reconnect ?? defaultReconnect,
      onToolsChanged: Effect.asVoid(registry.list)
    }
    const firstAttempts = yield* Effect.forEach(configs, (_, index) =>
      Effect.gen(function*() {
        const first = yield* Deferred.make<void>()
        yield* Effect.forkScoped(connection.supervise(servers, index, first))
        return first
      }))
    yield* Effect.forEach(firstAttempts, Deferred.await, { discard: true })
    const status = Effect.map(SubscriptionRef.get(states), (all) => all.map(statusOf))
    return Context.make(Tool.ToolRegistry, registry).pipe(
      Context.add(McpServers, McpServers.of({
        status,
        changes: Stream.map(states.changes, (all) => all.map(statusOf))
      }))
    )
  }))
