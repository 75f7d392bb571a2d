/**
 * What the processes of the cluster example share (README "Scaling out"): the database, the
 * sharding settings (failover within about 10 seconds, for a demo; the library's defaults take
 * about 35), and the model.
 */
import type { ShardingConfig } from "@effect/cluster"
import { PgClient } from "@effect/sql-pg"
import { Config, Effect, Layer, Redacted, Stream } from "effect"
import * as Message from "../../src/Message.js"
import * as Model from "../../src/Model.js"

/** The Postgres database of the cluster: sessions, the cluster's messages, runners and shard locks. */
export const DatabaseLive = Layer.unwrapEffect(Effect.map(
  Config.string("DATABASE_URL").pipe(Config.withDefault("postgres://postgres@127.0.0.1:5432/postgres")),
  (url) => PgClient.layer({ url: Redacted.make(url), maxConnections: 10 })
))

/** Sharding settings of every process of the example. */
export const sharding: Partial<ShardingConfig.ShardingConfig["Type"]> = {
  shardsPerGroup: 60,
  shardLockRefreshInterval: "2 seconds",
  shardLockExpiration: "8 seconds",
  entityMessagePollInterval: "1 second",
  entityReplyPollInterval: "100 millis",
  entityMaxIdleTime: "2 minutes"
}

/**
 * A model that thinks for three seconds (so a turn can be caught running and its runner killed),
 * then echoes: `runner <pid> says: <the last message>`. Swap in `LanguageModelAdapter.openAi()`
 * (see examples/real-models.ts) for a real one.
 */
export const ModelLive = Layer.succeed(
  Model.Model,
  Model.Model.of({
    stream: (request) =>
      Stream.unwrap(Effect.gen(function*() {
        const last = [...request.messages].reverse().find((message) => message.role === "user")
        yield* Effect.sleep("3 seconds")
        const text = `runner ${process.pid} says: ${last === undefined ? "" : Message.textOf(last.content)}`
        return Stream.make(
          ...text.split(" ").map((word, i) => ({ _tag: "TextDelta" as const, text: i === 0 ? word : ` ${word}` })),
          { _tag: "Finish" as const, reason: "stop" as const }
        )
      }))
  })
)
