/**
 * B12 (SPEC §10b): messages per second through the cluster (issue 22) — 200 sessions on one
 * Postgres, 5 follow-ups each (1,000 messages; 64 sessions at a time, each session's sends in
 * order), an instant model — with 1 and with 3 runner processes (the bench process is the
 * cluster's client), against the same workload on one process without the cluster (the host
 * gateway, `SessionGateway.layerHost`, over the same Postgres). Two figures per run: acknowledged
 * sends per second (a send is acknowledged once durable in the session's inbox) and messages
 * processed per second (until every session is idle again). The overhead of the cluster path per
 * message is the difference of the per-message times. Needs `EFFECT_AGENT_PG_URL` (else skipped
 * with a note); each run gets a fresh schema.
 */
import { NodeClusterSocket, NodeContext } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import * as AgentHost from "../src/AgentHost.js"
import * as AgentRuntime from "../src/AgentRuntime.js"
import * as Cluster from "../src/Cluster.js"
import * as Message from "../src/Message.js"
import * as SessionGateway from "../src/SessionGateway.js"
import * as SqlSessionPersistence from "../src/SqlSessionPersistence.js"
import { sharding } from "../test/fixtures/clusterConfig.js"
import type { Child } from "../test/fixtures/clusterProcesses.js"
import { freePort, freshSchema, startChild } from "../test/fixtures/clusterProcesses.js"
import { immediateModel, route } from "./fixtures.js"
import type { Row, Scenario } from "./harness.js"
import { fmt, now, stat } from "./harness.js"

const SESSIONS = 200
const PER_SESSION = 5
const MESSAGES = SESSIONS * PER_SESSION
const CONCURRENCY = 64

/** What the workload needs from either path. */
interface Path {
  readonly create: (id: string) => Effect.Effect<unknown, unknown>
  readonly send: (id: string, message: Message.UserMessage) => Effect.Effect<unknown, unknown>
  readonly whenIdle: (id: string) => Effect.Effect<unknown, unknown>
}

interface Measured {
  /** Acknowledged sends per second. */
  readonly acked: number
  /** Messages processed (every session idle again) per second. */
  readonly processed: number
}

const ids = Array.from({ length: SESSIONS }, (_, i) => `b12-${String(i).padStart(3, "0")}`)

/** The workload: sessions created (not timed), then 1,000 follow-ups timed to acknowledgement and to idle. */
const workload = (path: Path) =>
  Effect.gen(function*() {
    yield* Effect.forEach(ids, path.create, { concurrency: CONCURRENCY, discard: true })
    const t0 = now()
    yield* Effect.forEach(ids, (id) =>
      Effect.forEach(
        Array.from({ length: PER_SESSION }, (_, k) => Message.user(`message ${k}`, { id: `${id}-${k}` })),
        (message) => path.send(id, message),
        { discard: true }
      ), { concurrency: CONCURRENCY, discard: true })
    const acked = now() - t0
    yield* Effect.forEach(ids, path.whenIdle, { concurrency: CONCURRENCY, discard: true })
    const processed = now() - t0
    return { acked: MESSAGES / (acked / 1000), processed: MESSAGES / (processed / 1000) } satisfies Measured
  })

const pg = (url: string) => PgClient.layer({ url: Redacted.make(url), maxConnections: 16 })

/** One process, no cluster: the host gateway over an AgentHost on Postgres. */
const withoutCluster = (base: string) =>
  Effect.scoped(Effect.gen(function*() {
    const { url } = yield* freshSchema(base)
    const runtime = AgentRuntime.layer.pipe(
      Layer.provideMerge(SqlSessionPersistence.layer()),
      Layer.provide(immediateModel),
      Layer.provide(pg(url))
    )
    const context = yield* Layer.build(
      SessionGateway.layerHost().pipe(Layer.provideMerge(AgentHost.layer().pipe(Layer.provideMerge(runtime))))
    )
    const gateway = Context.get(context, SessionGateway.SessionGateway)
    const host = Context.get(context, AgentHost.AgentHost)
    return yield* workload({
      create: (id) => gateway.create(id, { options: route }),
      send: (id, message) => host.use(id, (agent) => agent.followup(message)),
      whenIdle: (id) => host.use(id, (agent) => agent.whenIdle)
    })
  }))

/** `runners` runner processes and this process as the cluster's client. */
const withCluster = (base: string, runners: number, log: (line: string) => void) =>
  Effect.scoped(Effect.gen(function*() {
    const { url } = yield* freshSchema(base)
    const children: Array<Child> = []
    for (let i = 0; i < runners; i++) {
      const port = yield* freePort
      children.push(yield* startChild(`runner-${i}`, "test/fixtures/clusterRunner.ts", [String(port)], {
        CLUSTER_PG_URL: url,
        CLUSTER_RUNNER: JSON.stringify({ modelMillis: 0 })
      }))
    }
    yield* Effect.forEach(children, (child) => child.waitFor((line) => line.startsWith("ready"), "120 seconds"), {
      discard: true
    })
    const context = yield* Layer.build(Cluster.layerClient.pipe(
      Layer.provide(NodeClusterSocket.layer({
        clientOnly: true,
        storage: "sql",
        shardingConfig: { ...sharding, runnerAddress: Option.none() }
      })),
      Layer.provide(SqlSessionPersistence.layer()),
      Layer.provide(pg(url))
    ))
    const client = Context.get(context, Cluster.ClusterClient)
    // the first requests wait for the shards to be assigned: warm up on one session
    yield* client.create("b12-warm-up", { options: route }).pipe(Effect.timeout(Duration.minutes(1)))
    log(`B12 ${runners} runner(s) ready`)
    return yield* workload({
      create: (id) => client.create(id, { options: route }),
      send: (id, message) => client.sendMessage(id, message, "followup"),
      whenIdle: client.whenIdle
    })
  }).pipe(Effect.provide(NodeContext.layer)))

const skipped = (why: string): Row => ({
  id: "B12",
  scenario: "cluster messages/s (skipped)",
  ours: stat([NaN]),
  unit: "msg/s",
  notes: why
})

export const scenario: Scenario = {
  id: "B12",
  title: "cluster: messages/s with 1 and 3 runners on one Postgres (200 sessions) vs one process without the cluster",
  run: async ({ log }) => {
    const base = process.env["EFFECT_AGENT_PG_URL"]
    if (base === undefined) {
      log("B12 skipped: set EFFECT_AGENT_PG_URL (a Postgres server; .ci/run starts one)")
      return [skipped("skipped: EFFECT_AGENT_PG_URL is not set")]
    }
    const baseline = await Effect.runPromise(withoutCluster(base).pipe(Effect.orDie))
    log(`B12 without the cluster: ${fmt(baseline.acked)} acked/s, ${fmt(baseline.processed)} processed/s`)
    const rows: Array<Row> = []
    for (const runners of [1, 3]) {
      const ours = await Effect.runPromise(withCluster(base, runners, log).pipe(Effect.orDie))
      log(`B12 ${runners} runner(s): ${fmt(ours.acked)} acked/s, ${fmt(ours.processed)} processed/s`)
      const overhead = 1000 / ours.acked - 1000 / baseline.acked
      rows.push({
        id: "B12",
        scenario: `${runners} runner${runners > 1 ? "s" : ""}: ${fmt(MESSAGES)} follow-ups to ${SESSIONS} sessions, acknowledged`,
        ours: stat([ours.acked]),
        unit: "msg/s",
        raw: { label: "one process, no cluster", value: stat([baseline.acked]) },
        notes: `processed (all idle) ${fmt(ours.processed)} msg/s vs ${fmt(baseline.processed)}; cluster path ` +
          `+${fmt(overhead)} ms per acknowledged message (at ${CONCURRENCY} in flight)`,
        extra: {
          runners,
          acked: ours.acked,
          processed: ours.processed,
          baselineAcked: baseline.acked,
          baselineProcessed: baseline.processed,
          overheadMillis: overhead
        }
      })
    }
    return rows
  }
}
