/**
 * One runner of the cluster example (README "Scaling out"): serves the agent entity on
 * 127.0.0.1:<port> — its share of the sessions, by shard — over Postgres.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/cluster/runner.ts 34431
 *
 * SIGTERM (Ctrl-C) stops it gracefully: its agents finish their turns (HOST-05) and its shards move
 * to the other runners. SIGKILL is a crash: the others take its shards over within seconds, and
 * what it was running resumes there (CLU-04).
 */
import { RunnerAddress } from "@effect/cluster"
import { NodeClusterSocket, NodeRuntime } from "@effect/platform-node"
import { Console, Layer, Option } from "effect"
import { AgentRuntime } from "../../src/index.js"
import * as Cluster from "../../src/Cluster.js"
import * as SqlSessionPersistence from "../../src/SqlSessionPersistence.js"
import { DatabaseLive, ModelLive, sharding } from "./config.js"

const port = Number(process.argv[2] ?? "34431")

const RunnerLive = Cluster.layer({
  host: { agentOptions: { provider: "echo", model: "echo" }, drainTimeout: "10 seconds" },
  recoveryInterval: "10 seconds"
}).pipe(
  Layer.provide(NodeClusterSocket.layer({
    storage: "sql",
    shardingConfig: { ...sharding, runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", port)) }
  })),
  Layer.provide(AgentRuntime.layer.pipe(Layer.provideMerge(SqlSessionPersistence.layer()))),
  Layer.provide(ModelLive),
  Layer.provide(DatabaseLive)
)

Layer.launch(Layer.tap(RunnerLive, () => Console.log(`runner ${process.pid} serving on 127.0.0.1:${port}`))).pipe(
  NodeRuntime.runMain
)
