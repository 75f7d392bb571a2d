/**
 * What B9 and B10 share: the HTTP API served on loopback over an `AgentHost` on memory persistence
 * with a bench model, and raw `node:http` SSE clients that count the frames they receive (the same
 * client code reads our server and the raw references, so its cost is on both sides).
 */
import { HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Context, Effect, Exit, Layer, RuntimeFlags, RuntimeFlagsPatch, Scope, Stream, Supervisor } from "effect"
import * as http from "node:http"
import { AgentHost, AgentRuntime, SessionPersistence } from "../src/index.js"
import * as HttpApi from "../src/HttpApi.js"
import { Model } from "../src/Model.js"
import type { ModelChunk } from "../src/Model.js"
import * as SessionGateway from "../src/SessionGateway.js"

/** A model that streams `deltas` text deltas at once, then finishes. */
export const deltaModel = (deltas: number): Layer.Layer<Model> => {
  const chunks: Array<ModelChunk> = []
  for (let i = 0; i < deltas; i++) chunks.push({ _tag: "TextDelta", text: `t${i % 10} ` })
  chunks.push({ _tag: "Finish", reason: "stop", usage: { inputTokens: 1, outputTokens: deltas } })
  return Layer.succeed(Model, Model.of({ stream: () => Stream.fromIterable(chunks) }))
}

/**
 * Counts the Effect operations of every fiber of the effects it supervises, forked ones and those
 * of runtimes captured inside them (a server built under it: every request's fiber). Unlike time,
 * the count does not move with the machine's load.
 */
export class OperationCounter extends Supervisor.AbstractSupervisor<number> {
  count = 0
  get value(): Effect.Effect<number> {
    return Effect.sync(() => this.count)
  }
  override onEffect(): void {
    this.count++
  }
  supervise<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> {
    return effect.pipe(
      Effect.supervised(this),
      Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision))
    )
  }
}

/** A served API and what the bench drives in process. */
export interface Served {
  readonly port: number
  readonly gateway: SessionGateway.SessionGateway["Type"]
  readonly host: AgentHost.AgentHost["Type"]
  readonly close: () => Promise<void>
}

/**
 * Serves the HTTP API on 127.0.0.1 (a port the system picks) over a memory runtime with `model`;
 * under `counter`, every fiber of the server counts its operations there.
 */
export const serve = async (
  model: Layer.Layer<Model>,
  maxLive: number,
  counter?: OperationCounter | undefined
): Promise<Served> => {
  const scope = Effect.runSync(Scope.make())
  let nodeServer: http.Server | undefined
  const runtime = AgentRuntime.layer.pipe(
    Layer.provideMerge(SessionPersistence.layerMemory(Effect.runSync(SessionPersistence.makeMemoryStorage))),
    Layer.provide(model)
  )
  const layer = HttpApi.layerServer({ heartbeat: "1 hour" }).pipe(
    Layer.provideMerge(
      SessionGateway.layerHost().pipe(
        Layer.provideMerge(AgentHost.layer({ maxLive, idleTimeout: "1 hour", drainTimeout: 0 }).pipe(Layer.provideMerge(runtime)))
      )
    ),
    Layer.provideMerge(
      NodeHttpServer.layer(() => (nodeServer = http.createServer()), {
        port: 0,
        host: "127.0.0.1"
      })
    )
  )
  const build = Layer.buildWithScope(layer, scope).pipe(Effect.orDie)
  const context = await Effect.runPromise(counter === undefined ? build : counter.supervise(build))
  const address = Context.get(context, HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") throw new Error("no TCP address")
  return {
    port: address.port,
    gateway: Context.get(context, SessionGateway.SessionGateway),
    host: Context.get(context, AgentHost.AgentHost),
    close: async () => {
      nodeServer?.close()
      nodeServer?.closeAllConnections()
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  }
}

/** A raw SSE connection: counts the frames containing each marker, and resolves waiters on counts. */
export interface Counter {
  readonly counts: Map<string, number>
  /** Resolves when the count of `marker` reaches `n`. */
  readonly until: (marker: string, n: number) => Promise<void>
  readonly close: () => void
}

/** Opens `GET path` on the port as an event stream (the agent is `agent`: one socket per connection). */
export const connect = (
  port: number,
  path: string,
  markers: ReadonlyArray<string>,
  agent: http.Agent,
  headers?: Record<string, string>
): Promise<Counter> =>
  new Promise((resolve, reject) => {
    const counts = new Map<string, number>(markers.map((marker) => [marker, 0]))
    const waiters: Array<{ readonly marker: string; readonly n: number; readonly done: () => void }> = []
    let buffer = ""
    const request = http.get({ host: "127.0.0.1", port, path, agent, headers: { accept: "text/event-stream", ...headers } }, (response) => {
      if (response.statusCode !== 200) return reject(new Error(`GET ${path}: ${response.statusCode}`))
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => {
        buffer += chunk
        let cut = buffer.indexOf("\n\n")
        while (cut >= 0) {
          const frame = buffer.slice(0, cut)
          buffer = buffer.slice(cut + 2)
          for (const marker of markers) if (frame.includes(marker)) counts.set(marker, counts.get(marker)! + 1)
          cut = buffer.indexOf("\n\n")
        }
        for (let i = waiters.length - 1; i >= 0; i--) {
          const waiter = waiters[i]!
          if (counts.get(waiter.marker)! >= waiter.n) {
            waiters.splice(i, 1)
            waiter.done()
          }
        }
      })
      resolve({
        counts,
        until: (marker, n) =>
          counts.get(marker)! >= n ? Promise.resolve() : new Promise((done) => waiters.push({ marker, n, done })),
        close: () => request.destroy()
      })
    })
    request.on("error", (error) => reject(error))
  })
