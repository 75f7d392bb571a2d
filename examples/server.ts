/**
 * Agents behind HTTP (SPEC §17, HTTP-04): the HTTP API of `effect-agent/HttpApi` over an
 * `AgentHost` on files, with Server-Sent Events, OpenAPI at `/openapi.json` and a graceful
 * shutdown: SIGTERM (or Ctrl-C) stops accepting connections, ends the event streams, lets running
 * turns finish for up to 30 seconds, and disposes the agents (their inboxes are kept). Sessions a
 * crash interrupted are brought back at start. See the README's "Serving agents over HTTP" for a
 * `curl` walkthrough.
 *
 *   npx tsx examples/server.ts [--dir ./.sessions] [--port 8787] [--host 127.0.0.1]
 *
 * It listens on 127.0.0.1 (this machine only) unless `--host` says otherwise (`--host 0.0.0.0`: every
 * interface — then set `EFFECT_AGENT_TOKEN`).
 *
 * The model: OpenAI or a compatible endpoint when `OPENAI_API_KEY` is set (`OPENAI_BASE_URL`,
 * `EFFECT_AGENT_MODEL`), Anthropic when `ANTHROPIC_API_KEY` is set, else a scripted model that
 * echoes (a message starting with "wait" makes it stream a little and then hang, to try cancel).
 * `EFFECT_AGENT_TOKEN` set: every sessions route needs `Authorization: Bearer <token>`.
 */
import { HttpServer } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Config, Effect, Layer, Option, Redacted } from "effect"
import { createServer } from "node:http"
import type { Server } from "node:http"
import { AgentHost } from "../src/index.js"
import * as HttpApi from "../src/HttpApi.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import * as SessionGateway from "../src/SessionGateway.js"
import { argument, chooseModel } from "./support/models.js"

/** Bearer authentication when `EFFECT_AGENT_TOKEN` is set (HTTP-03). */
const authentication = Effect.map(Config.option(Config.redacted("EFFECT_AGENT_TOKEN")), (token) =>
  Option.match(token, {
    onNone: () => undefined,
    onSome: (expected) => (presented: Redacted.Redacted) =>
      Effect.succeed(
        Redacted.value(presented) === Redacted.value(expected) ? Option.some({ id: "user" }) : Option.none()
      )
  }))

/**
 * Node's server, and on SIGTERM/SIGINT: stop accepting at once. (The platform's server, closing,
 * detaches its handler before it stops listening; a request in between would hang the shutdown.)
 */
let server: Server | undefined
const stopAccepting = () => {
  server?.close()
  server?.closeIdleConnections()
}
process.once("SIGTERM", stopAccepting)
process.once("SIGINT", stopAccepting)

const ServerLive = Layer.unwrapEffect(Effect.gen(function*() {
  const { layer: ModelLive, route } = yield* chooseModel
  const authenticate = yield* authentication
  const port = Number(argument("port", "8787"))
  const host = argument("host", "127.0.0.1")
  // files in --dir; every agent the host activates uses the chosen route unless created with its own
  const Runtime = NodeFileSessionPersistence.layerRuntime({ directory: argument("dir", "./.sessions") }).pipe(
    Layer.provide(ModelLive)
  )
  const Host = AgentHost.layer({ recover: true, agentOptions: route, drainTimeout: "30 seconds" }).pipe(
    Layer.provideMerge(Runtime)
  )
  const Gateway = SessionGateway.layerHost().pipe(Layer.provide(Host))
  yield* Effect.log(`model ${route.provider}/${route.model}${authenticate === undefined ? "" : ", bearer token required"}`)
  return HttpApi.layerServer({ authenticate }).pipe(
    HttpServer.withLogAddress,
    Layer.provide(Gateway),
    Layer.provide(NodeHttpServer.layer(() => (server = createServer()), { port, host }))
  )
}))

NodeRuntime.runMain(Layer.launch(ServerLive))
