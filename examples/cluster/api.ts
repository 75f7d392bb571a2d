/**
 * The HTTP API in front of the cluster example (CLU-06): the same `effect-agent/HttpApi` as
 * `effect-agent serve`, over the cluster client's `SessionGateway` instead of a local host. It is a
 * client-only member of the cluster: it owns no shard, and each request goes to the runner that
 * owns the session.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/cluster/api.ts 8080
 */
import { NodeClusterSocket, NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Console, Layer, Option } from "effect"
import { createServer } from "node:http"
import * as Cluster from "../../src/Cluster.js"
import * as HttpApi from "../../src/HttpApi.js"
import * as SqlSessionPersistence from "../../src/SqlSessionPersistence.js"
import { DatabaseLive, sharding } from "./config.js"

const port = Number(process.argv[2] ?? "8080")

const GatewayLive = Cluster.layerClient.pipe(
  Layer.provide(NodeClusterSocket.layer({
    clientOnly: true,
    storage: "sql",
    shardingConfig: { ...sharding, runnerAddress: Option.none() }
  })),
  Layer.provide(SqlSessionPersistence.layer()),
  Layer.provide(DatabaseLive)
)

const ApiLive = HttpApi.layerServer().pipe(
  Layer.provide(GatewayLive),
  Layer.provide(NodeHttpServer.layer(createServer, { port, host: "127.0.0.1" }))
)

Layer.launch(Layer.tap(ApiLive, () => Console.log(`api ${process.pid} on http://127.0.0.1:${port}`))).pipe(
  NodeRuntime.runMain
)
