/**
 * `effect-agent serve` (HTTP-04): the HTTP API of `effect-agent/HttpApi` over an `AgentHost` on a
 * store (`--dir`, `--sqlite` or `--postgres`), on `--host`/`--port`. Sessions that a crash left
 * with an open turn or pending input are brought back at start (HOST-04). SIGTERM or SIGINT stops
 * accepting connections, ends the event streams, lets running turns finish for `--drain` seconds
 * (HOST-05) and exits 0.
 *
 * The model: OpenAI (or a compatible endpoint: `OPENAI_BASE_URL`) when `OPENAI_API_KEY` is set,
 * Anthropic when `ANTHROPIC_API_KEY` is, else a scripted model that echoes (for trying the API; a
 * message starting with "wait" hangs until cancelled); `EFFECT_AGENT_MODEL` names the model.
 *
 * @internal
 */
import { HelpDoc, Options, ValidationError } from "@effect/cli"
import { FetchHttpClient, FileSystem, HttpServer } from "@effect/platform"
import type { Path } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Config, Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import type { Scope } from "effect"
import { createServer } from "node:http"
import type { Server } from "node:http"
import * as AgentHost from "../AgentHost.js"
import * as AgentRuntime from "../AgentRuntime.js"
import * as HttpApi from "../HttpApi.js"
import * as Message from "../Message.js"
import * as Model from "../Model.js"
import * as SessionGateway from "../SessionGateway.js"
import { SessionPersistence } from "../SessionPersistence.js"
import * as SessionError from "../SessionError.js"
import { ServerNotStarted, UsageError } from "./errors.js"
import { writeStdout } from "./output.js"
import * as store from "./store.js"

/**
 * SEC-09: a flag whose value must be a whole number from 0 to `max`; anything else is a usage error
 * (exit 2) of one line naming the flag, before anything starts.
 */
const wholeNumber = (flag: string, expected: string, max: number) => (raw: string) => {
  const value = /^\d{1,16}$/.test(raw) ? Number(raw) : Number.NaN
  return value <= max
    ? Effect.succeed(value)
    : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`${flag} ${JSON.stringify(raw)}: expected ${expected}`)))
}

/** The flags of `serve`, besides the store's. @internal */
export const serveFlags = {
  host: Options.text("host").pipe(
    Options.withDescription("the address to listen on"),
    Options.withDefault("127.0.0.1")
  ),
  port: Options.text("port").pipe(
    Options.withPseudoName("port"),
    Options.mapEffect(wholeNumber("--port", "a port from 0 to 65535 (0: one the system picks)", 65_535)),
    Options.withDescription("the port to listen on (0: one the system picks; the address is printed)"),
    Options.withDefault(8787)
  ),
  token: Options.redacted("token").pipe(
    Options.withDescription("require this bearer token (else EFFECT_AGENT_TOKEN when set; else no authentication)"),
    Options.optional
  ),
  drain: Options.text("drain").pipe(
    Options.withPseudoName("seconds"),
    Options.mapEffect(wholeNumber("--drain", "a number of seconds, 0 or more", Number.MAX_SAFE_INTEGER)),
    Options.withDescription("seconds running turns may take to finish when the server stops"),
    Options.withDefault(30)
  ),
  maxClientBuffer: Options.integer("max-client-buffer").pipe(
    Options.withDescription(
      "bytes an event-stream client may leave unread before it gets no live events (default 1 MiB; SEC-01)"
    ),
    Options.optional
  )
}

/** @internal */
export interface ServeFlags extends store.StoreFlags {
  readonly host: string
  readonly port: number
  readonly token: Option.Option<Redacted.Redacted>
  readonly drain: number
  readonly maxClientBuffer: Option.Option<number>
}

/** Whether the server stopped because it was told to (a signal): the process then exits 0. @internal */
export let stoppedBySignal = false

/**
 * The scripted stand-in: echoes the last user message; one starting with "wait" streams a little and
 * then hangs until it is cancelled (to try steering and cancelling).
 */
const echo = (request: Model.ModelRequest): Model.Reply => {
  const users = request.messages.filter((message): message is Message.UserMessage => message.role === "user")
  const last = users.length > 0 ? Message.textOf(users[users.length - 1]!.content) : ""
  return last.startsWith("wait") ? Model.hang("thinking about it") : Model.text(`echo: ${last}`)
}

/** A real provider when its key is set (its adapter loaded then: `@effect/ai` is an optional peer), else the echo. */
const chooseModel = Effect.gen(function*() {
  const model = yield* Config.option(Config.string("EFFECT_AGENT_MODEL"))
  const openAi = Option.isSome(yield* Config.option(Config.redacted("OPENAI_API_KEY")))
  const anthropic = !openAi && Option.isSome(yield* Config.option(Config.redacted("ANTHROPIC_API_KEY")))
  if (openAi || anthropic) {
    const adapter = yield* Effect.promise(() => import("../LanguageModelAdapter.js"))
    return openAi
      ? {
        route: { provider: "openai", model: Option.getOrElse(model, () => "gpt-4o-mini") },
        layer: adapter.openAi().pipe(Layer.provide(FetchHttpClient.layer))
      }
      : {
        route: { provider: "anthropic", model: Option.getOrElse(model, () => "claude-sonnet-4-5") },
        layer: adapter.anthropic().pipe(Layer.provide(FetchHttpClient.layer))
      }
  }
  return { route: { provider: "scripted", model: "echo" }, layer: Model.layerScripted(echo) }
}).pipe(Effect.orDie)

/** The bearer token: `--token`, else `EFFECT_AGENT_TOKEN`. */
const tokenOf = (flags: ServeFlags) =>
  Option.isSome(flags.token)
    ? Effect.succeed(flags.token)
    : Effect.orElseSucceed(Config.option(Config.redacted("EFFECT_AGENT_TOKEN")), () => Option.none())

/** Constant-time comparison of two secrets (the time does not tell how much of a guess was right). */
const sameSecret = (a: string, b: string): boolean => {
  let difference = a.length ^ b.length
  for (let i = 0; i < Math.max(a.length, b.length); i++) difference |= (a.charCodeAt(i) | 0) ^ (b.charCodeAt(i) | 0)
  return difference === 0
}

/**
 * Stops accepting connections on SIGTERM/SIGINT, before the runtime is interrupted: the platform's
 * server detaches its handler before it stops listening, so a request in between would hang the
 * close. The runtime's own signal handling then runs the finalizers (streams end, the host drains).
 */
const stopAcceptingOnSignal = (server: () => Server | undefined) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const stop = () => {
        stoppedBySignal = true
        server()?.close()
        server()?.closeIdleConnections()
      }
      process.once("SIGTERM", stop)
      process.once("SIGINT", stop)
      return stop
    }),
    (stop) =>
      Effect.sync(() => {
        process.off("SIGTERM", stop)
        process.off("SIGINT", stop)
      })
  )

/** SEC-09: why the server's layer failed, in one line; a listen error names its code (`EADDRINUSE`). */
const whyNotStarted = (error: unknown, flags: ServeFlags): string => {
  const cause = typeof error === "object" && error !== null && "cause" in error ? error.cause : undefined
  const code = typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined
  const where = `${flags.host}:${flags.port}`
  if (code === "EADDRINUSE") {
    return `cannot listen on ${where}: EADDRINUSE, the port is in use; stop what listens there or choose another ` +
      "--port (0: one the system picks)"
  }
  if (code !== undefined) return `cannot listen on ${where}: ${code} (${cause instanceof Error ? cause.message : code})`
  return error instanceof Error ? error.message : String(error)
}

/**
 * Serves until interrupted.
 *
 * @internal
 */
export const serve = (
  flags: ServeFlags
): Effect.Effect<
  never,
  UsageError | SessionError.PersistenceError | ServerNotStarted,
  Scope.Scope | FileSystem.FileSystem | Path.Path
> =>
  Effect.gen(function*() {
    if (Option.isSome(flags.maxClientBuffer) && flags.maxClientBuffer.value <= 0) {
      return yield* new UsageError({ reason: "--max-client-buffer must be a positive number of bytes" })
    }
    if (Option.isSome(flags.dir)) {
      // a server creates its directory (the read commands never do)
      const fs = yield* FileSystem.FileSystem
      const directory = flags.dir.value
      yield* fs.makeDirectory(directory, { recursive: true }).pipe(
        Effect.mapError((error) =>
          new SessionError.PersistenceError({
            reason: error._tag === "SystemError" && error.reason === "AlreadyExists"
              ? `--dir ${directory} is not a directory`
              : `cannot create the session directory ${directory} (${error.message})`,
            cause: error
          })
        )
      )
    }
    const opened = yield* store.open(flags, "write", { createSqlite: true })
    const { layer: modelLayer, route } = yield* chooseModel
    const token = yield* tokenOf(flags)
    let nodeServer: Server | undefined
    yield* stopAcceptingOnSignal(() => nodeServer)
    const runtime = AgentRuntime.layer.pipe(
      Layer.provideMerge(Layer.succeed(SessionPersistence, opened.persistence)),
      Layer.provide(modelLayer)
    )
    const host = AgentHost.layer({
      recover: true,
      agentOptions: route,
      drainTimeout: Duration.seconds(Math.max(0, flags.drain))
    }).pipe(Layer.provideMerge(runtime))
    const api = HttpApi.layerServer({
      maxClientBufferBytes: Option.getOrUndefined(flags.maxClientBuffer),
      authenticate: Option.match(token, {
        onNone: () => undefined,
        onSome: (secret) => (presented: Redacted.Redacted) =>
          Effect.succeed(
            sameSecret(Redacted.value(presented), Redacted.value(secret)) ? Option.some({ id: "operator" }) : Option.none()
          )
      })
    })
    const server = api.pipe(
      Layer.provideMerge(SessionGateway.layerHost().pipe(Layer.provideMerge(host))),
      Layer.provideMerge(
        NodeHttpServer.layer(() => (nodeServer = createServer({ keepAliveTimeout: 5_000 })), {
          port: flags.port,
          host: flags.host
        })
      )
    )
    const context = yield* Layer.build(server).pipe(
      Effect.mapError((error) => new ServerNotStarted({ reason: whyNotStarted(error, flags) }))
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    const where = address._tag === "TcpAddress" ? `http://${address.hostname}:${address.port}` : address.path
    yield* writeStdout(
      `effect-agent: serving ${opened.description} at ${where} (model ${route.provider}/${route.model}` +
        `${Option.isSome(token) ? ", bearer token required" : ""}); OpenAPI at ${where}/openapi.json\n` +
        // DOC-02: where to look first
        `effect-agent: inspector at ${where}/inspector/`
    )
    return yield* Effect.never
  })
