/**
 * MCP servers' connections (MCP-01/02), over the official SDK's client: one supervising fiber per
 * server connects it (stdio child process or Streamable HTTP), lists its tools, refreshes them on
 * `notifications/tools/list_changed`, and reconnects it on the layer's `Schedule` when it is lost.
 * Each connection lives in its own Scope inside the layer's, so the client is closed (a stdio child
 * ended) when the connection is lost or the layer is released. Tools stay listed while their server
 * is away; a call then fails `ToolUnavailable`. Elicitation requests are declined until the tool API
 * can ask a person (HIL-03).
 *
 * @internal
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { CallToolResult, Tool as McpTool } from "@modelcontextprotocol/sdk/types.js"
import {
  CallToolResultSchema,
  ElicitRequestSchema,
  ErrorCode,
  McpError,
  ToolListChangedNotificationSchema
} from "@modelcontextprotocol/sdk/types.js"
import type { Duration, Schedule, Scope } from "effect"
import { Cause, Data, Deferred, Effect, Exit, Queue, Schema, Stream, SubscriptionRef } from "effect"
import { ToolUnavailable } from "../../AgentError.js"
import type { McpServerOptions } from "../../McpTools.js"
import type { JsonRecord } from "../../SessionEvent.js"
import type * as Tool from "../../Tool.js"
import { deepFreeze } from "../json.js"
import type { ServerTools } from "./mcpTools.js"
import { isOffered, modelToolName, toToolResult } from "./mcpTools.js"

/**
 * A `tools/call` that ended in a JSON-RPC error rather than a result: the server's (an unknown tool,
 * arguments it refused) or the client's (a result that does not match the tool's output schema).
 * The model sees an error result `TOOL_FAILED` with this message.
 *
 * @since 0.3.0
 * @category errors
 */
export class McpCallFailed extends Schema.TaggedError<McpCallFailed>("effect-agent/McpCallFailed")(
  "McpCallFailed",
  { server: Schema.String, tool: Schema.String, code: Schema.Number, reason: Schema.String }
) {
  override get message(): string {
    return `the call of tool ${JSON.stringify(this.tool)} on MCP server ${JSON.stringify(this.server)} failed: ` +
      `${this.reason} (JSON-RPC error ${this.code}); check the arguments against the tool's schema`
  }
}

/** Why a connection attempt failed (logged, and shown in the server's status). */
class ConnectFailed extends Data.TaggedError("ConnectFailed")<{ readonly reason: string }> {}

/** A live connection: its client, and a Deferred completed once it is lost. */
interface Session {
  readonly client: Client
  readonly lost: Deferred.Deferred<void>
  readonly listChanged: Queue.Queue<void>
}

/**
 * One server as the layer sees it: its tools as last listed (kept while it is away), its status,
 * and its session while it is connected.
 *
 * @internal
 */
export interface ServerState extends ServerTools {
  readonly transport: "stdio" | "http"
  readonly status: "connecting" | "connected" | "retrying" | "failed"
  readonly error: string | undefined
  readonly session: Session | undefined
}

/**
 * What the supervisors share: the servers' states (in configuration order) and the options.
 *
 * @internal
 */
export interface Servers {
  readonly states: SubscriptionRef.SubscriptionRef<ReadonlyArray<ServerState>>
  readonly configs: ReadonlyArray<{
    readonly name: string
    readonly options: McpServerOptions
    /** Each call's timeout (the server's, else the layer's). */
    readonly timeout: Duration.Duration
  }>
  readonly prefix: string
  readonly connectTimeout: Duration.Duration
  readonly reconnect: Schedule.Schedule<unknown, unknown>
  /** Run after each change of a server's tools (surfaces name collisions as warnings). */
  readonly onToolsChanged: Effect.Effect<void>
}

const clientInfo = { name: "effect-agent", version: "0.3.0" }

/** The SDK's own request timeout is not used: the tool's `timeout` (on the Clock) bounds a call. */
const NO_SDK_TIMEOUT = 2_147_483_647

/**
 * What MCP tools take as arguments: an empty `Schema.Struct` decodes any value as it is (checked to
 * be a JSON object before the call); the server validates it against its schema.
 */
const AnyArguments = Schema.Struct({})

const isJsonObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** What the model sees when its arguments are not a JSON object (the server is not asked). */
const notAnObject = (name: string): Tool.ToolResult => ({
  content: [{
    type: "text",
    text: `Invalid arguments for tool ${JSON.stringify(name)}: they must be a JSON object. ` +
      "Call the tool again with a JSON object that matches its parameters."
  }],
  isError: true
})

/** A current `tools/call` result (not the 2024-10-07 protocol's `toolResult`). */
const hasContent = (result: { readonly [key: string]: unknown }): result is CallToolResult =>
  Array.isArray(result["content"])

const reasonOf = (error: unknown): string => error instanceof Error ? error.message : String(error)

/** The initial state of a configured server. @internal */
export const initialState = (name: string, options: McpServerOptions): ServerState => ({
  server: name,
  transport: "command" in options ? "stdio" : "http",
  status: "connecting",
  tools: [],
  error: undefined,
  session: undefined
})

const update = (servers: Servers, index: number, f: (state: ServerState) => ServerState) =>
  SubscriptionRef.update(servers.states, (states) => states.map((state, i) => i === index ? f(state) : state))

// -------------------------------------------------------------------------------------------------
// Calls

/**
 * An error that means the connection is gone (the transport failed, or the SDK closed it), not
 * that the server answered: the call is unavailable and the server is reconnected.
 */
const isConnectionLost = (error: unknown): boolean =>
  !(error instanceof McpError) || error.code === ErrorCode.ConnectionClosed

/**
 * Calls `tool` on server `index` with the connection it has now: `ToolUnavailable` while it has
 * none or when the connection is lost during the call (which then reconnects it). Interrupting the
 * call (a cancel, the tool's timeout) aborts the request, and the SDK sends
 * `notifications/cancelled` (MCP-02).
 */
const callTool = (servers: Servers, index: number, tool: string, modelName: string, args: Record<string, unknown>) =>
  Effect.flatMap(SubscriptionRef.get(servers.states), (states): Effect.Effect<Tool.ToolResult, ToolUnavailable | McpCallFailed> => {
    const state = states[index]!
    const session = state.session
    if (session === undefined) {
      const why = state.status === "failed" ? "stopped reconnecting" : "is reconnecting"
      return Effect.fail(
        new ToolUnavailable({
          tool: modelName,
          reason: `MCP server ${JSON.stringify(state.server)} is not connected (it ${why}` +
            `${state.error !== undefined ? `; last error: ${state.error}` : ""})`
        })
      )
    }
    return Effect.tryPromise({
      try: (signal) =>
        session.client.callTool({ name: tool, arguments: args }, CallToolResultSchema, { signal, timeout: NO_SDK_TIMEOUT }),
      catch: (error) => error
    }).pipe(
      // a server of the 2024-10-07 protocol answers `toolResult` instead of content
      Effect.map((result) =>
        hasContent(result)
          ? toToolResult(result)
          : { content: [{ type: "text" as const, text: JSON.stringify(result.toolResult) }], isError: false }
      ),
      Effect.catchAll((error): Effect.Effect<never, ToolUnavailable | McpCallFailed> =>
        isConnectionLost(error)
          ? Effect.zipRight(
            Deferred.succeed(session.lost, undefined),
            Effect.fail(
              new ToolUnavailable({
                tool: modelName,
                reason: `the connection to MCP server ${JSON.stringify(state.server)} was lost during the call ` +
                  `(${reasonOf(error)}); the call may have partly run`
              })
            )
          )
          : Effect.fail(
            new McpCallFailed({
              server: state.server,
              tool,
              code: error instanceof McpError ? error.code : 0,
              reason: reasonOf(error)
            })
          )
      )
    )
  })

/** A server's tool as an agent's tool: the server's schema as is, calls through {@link callTool}. */
const toolOf = (servers: Servers, index: number, tool: McpTool): Tool.Any => {
  const config = servers.configs[index]!
  const name = modelToolName(servers.prefix, config.name, tool.name)
  return Object.freeze({
    name,
    description: tool.description ?? tool.title ?? "",
    parameters: AnyArguments,
    // a JSON round trip keeps plain JSON only; frozen, so a request's JSON form is stable
    jsonSchema: deepFreeze(JSON.parse(JSON.stringify(tool.inputSchema)) as JsonRecord),
    mode: "parallel" as const,
    run: (args: unknown) =>
      isJsonObject(args) ? callTool(servers, index, tool.name, name, args) : Effect.succeed(notAnObject(name)),
    timeout: config.timeout
  })
}

// -------------------------------------------------------------------------------------------------
// Connections

/** A readable stream, as much of one as is read here (a stdio child's stderr). */
interface Readable {
  on(event: "data", listener: (chunk: unknown) => void): unknown
  on(event: "end" | "close", listener: () => void): unknown
  removeAllListeners(): unknown
}

/** A stdio server's stderr, one debug log line per line, annotated with the server's name. */
const logStderr = (server: string, stream: Readable) =>
  Stream.async<string>((emit) => {
    stream.on("data", (chunk) => void emit.single(String(chunk)))
    stream.on("end", () => void emit.end())
    stream.on("close", () => void emit.end())
    return Effect.sync(() => void stream.removeAllListeners())
  }).pipe(
    Stream.splitLines,
    Stream.runForEach((line) => Effect.logDebug(`MCP server ${JSON.stringify(server)} stderr: ${line}`)),
    Effect.forkScoped
  )

const transportOf = (options: McpServerOptions) =>
  "command" in options
    ? new StdioClientTransport({
      command: options.command,
      ...(options.args !== undefined ? { args: [...options.args] } : {}),
      ...(options.env !== undefined ? { env: { ...options.env } } : {}),
      ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
      stderr: "pipe"
    })
    : new StreamableHTTPClientTransport(
      new URL(options.url),
      options.headers !== undefined ? { requestInit: { headers: { ...options.headers } } } : undefined
    )

/** Ends the server's session of a Streamable HTTP transport, if it opened one; never rejects. */
const endHttpSession = async (transport: StdioClientTransport | StreamableHTTPClientTransport): Promise<void> => {
  if (!(transport instanceof StreamableHTTPClientTransport) || transport.sessionId === undefined) return
  await transport.terminateSession().catch(() => undefined)
}

/** Every page of `tools/list`, filtered by the server's `allow`/`deny`, as agent tools. */
const listTools = (servers: Servers, index: number, client: Client) => {
  const { options } = servers.configs[index]!
  return Effect.tryPromise({
    try: async (signal) => {
      const all: Array<McpTool> = []
      let cursor: string | undefined
      // a bounded number of pages: a server that keeps returning a cursor cannot hold the layer
      for (let page = 0; page < 100; page++) {
        const listed = await client.listTools(cursor !== undefined ? { cursor } : undefined, { signal })
        all.push(...listed.tools)
        cursor = listed.nextCursor
        if (cursor === undefined) break
      }
      return all
    },
    catch: (error) => new ConnectFailed({ reason: `listing its tools failed: ${reasonOf(error)}` })
  }).pipe(
    Effect.map((tools) => tools.filter((tool) => isOffered(tool.name, options)).map((tool) => toolOf(servers, index, tool)))
  )
}

/**
 * Opens a connection in the Scope (closing the Scope closes the client and ends a stdio child),
 * within `connectTimeout`. The SDK's callbacks reach the fibers through the session's Deferred and
 * Queue, without a runtime.
 */
const open = (servers: Servers, index: number): Effect.Effect<Session, ConnectFailed, Scope.Scope> =>
  Effect.gen(function*() {
    const { name, options } = servers.configs[index]!
    const lost = yield* Deferred.make<void>()
    const listChanged = yield* Queue.sliding<void>(1)
    const client = new Client(clientInfo, { capabilities: { elicitation: {} } })
    // MCP elicitation maps to Tool.ask, which does not exist yet: every request is declined politely
    client.setRequestHandler(ElicitRequestSchema, () => ({ action: "decline" as const }))
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => void Queue.unsafeOffer(listChanged, undefined))
    client.onclose = () => Deferred.unsafeDone(lost, Exit.void)
    const transport = transportOf(options)
    // registered before connecting, so a failed attempt ends its child process too; an HTTP session
    // the server opened is ended first (a DELETE, given a moment: the server may be gone)
    yield* Effect.addFinalizer(() =>
      Effect.promise(() => endHttpSession(transport)).pipe(
        Effect.timeout("2 seconds"),
        Effect.ignore,
        Effect.zipRight(Effect.promise(() => client.close().catch(() => undefined)))
      )
    )
    if (transport instanceof StdioClientTransport && transport.stderr !== null) {
      yield* logStderr(name, transport.stderr as unknown as Readable)
    }
    yield* Effect.tryPromise({
      try: (signal) => client.connect(transport, { signal, timeout: NO_SDK_TIMEOUT }),
      catch: (error) => new ConnectFailed({ reason: reasonOf(error) })
    }).pipe(
      Effect.timeoutFail({
        duration: servers.connectTimeout,
        onTimeout: () => new ConnectFailed({ reason: "it did not answer initialize within connectTimeout" })
      })
    )
    return { client, lost, listChanged }
  })

/** Lists the tools again on each `notifications/tools/list_changed` (bursts coalesce). */
const refreshOnListChanged = (servers: Servers, index: number, session: Session) =>
  Queue.take(session.listChanged).pipe(
    Effect.zipRight(listTools(servers, index, session.client)),
    Effect.flatMap((tools) => Effect.zipRight(update(servers, index, (state) => ({ ...state, tools })), servers.onToolsChanged)),
    Effect.catchAll((error) =>
      Effect.logWarning(
        `MCP server ${JSON.stringify(servers.configs[index]!.name)}: refreshing its tools failed (${error.reason}); ` +
          "the last list stays"
      )
    ),
    Effect.forever
  )

/**
 * One connection from open to lost: connects, lists, publishes the server as connected (`onConnected`
 * runs then), follows list changes, and returns when the connection is lost. Fails when connecting
 * or listing fails.
 */
const connection = (servers: Servers, index: number, onConnected: Effect.Effect<void>) =>
  Effect.scoped(Effect.gen(function*() {
    const session = yield* open(servers, index)
    const tools = yield* listTools(servers, index, session.client)
    yield* update(servers, index, (state) => ({ ...state, status: "connected", tools, error: undefined, session }))
    yield* servers.onToolsChanged
    yield* onConnected
    yield* Effect.raceFirst(Deferred.await(session.lost), refreshOnListChanged(servers, index, session))
    yield* update(servers, index, (state) => ({ ...state, status: "retrying", session: undefined }))
  }))

/**
 * Keeps server `index` connected for as long as the Scope lives: each outage (also being down at
 * start) is retried on `reconnect`, fresh for every outage; when the schedule ends the server stays
 * `failed`. `firstAttempt` completes when the first attempt has connected or failed, so the layer can
 * wait for it.
 *
 * @internal
 */
export const supervise = (servers: Servers, index: number, firstAttempt: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const { name } = servers.configs[index]!
    const label = `MCP server ${JSON.stringify(name)}`
    let connectedOnce = false
    let failuresInRow = 0
    const onConnected = Effect.suspend(() => {
      connectedOnce = true
      failuresInRow = 0
      return Effect.zipRight(Deferred.succeed(firstAttempt, undefined), Effect.logInfo(`${label} connected`))
    })
    const onFailure = (error: ConnectFailed) =>
      Effect.suspend(() => {
        failuresInRow++
        const first = failuresInRow === 1
        const message = connectedOnce
          ? `${label} could not be reconnected (${error.reason}); retrying`
          : `${label} is down at start (${error.reason}); its tools appear when it connects`
        return update(servers, index, (state) => ({ ...state, status: "retrying", error: error.reason })).pipe(
          Effect.zipRight(first ? Effect.logWarning(message) : Effect.logDebug(message)),
          Effect.zipRight(Deferred.succeed(firstAttempt, undefined))
        )
      })
    while (true) {
      const exit = yield* Effect.exit(
        Effect.retry(Effect.tapError(connection(servers, index, onConnected), onFailure), servers.reconnect)
      )
      if (Exit.isFailure(exit)) {
        yield* update(servers, index, (state) => ({ ...state, status: "failed", session: undefined }))
        return yield* Effect.logError(`${label}: its reconnect schedule ended; its tools stay unavailable`)
      }
      yield* Effect.logWarning(`${label}: the connection was lost; reconnecting`)
    }
  }).pipe(
    // a defect stops this server only, said once; the layer never waits for a supervisor that died
    Effect.catchAllCause((cause) =>
      Cause.isInterruptedOnly(cause)
        ? Effect.failCause(cause)
        : Effect.zipRight(
          update(servers, index, (state) => ({ ...state, status: "failed", session: undefined })),
          Effect.logError(`MCP server ${JSON.stringify(servers.configs[index]!.name)} stopped on a defect`, cause)
        )
    ),
    Effect.ensuring(Deferred.succeed(firstAttempt, undefined))
  )
