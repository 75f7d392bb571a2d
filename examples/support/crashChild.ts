/**
 * The process that crashes, for section 6 of `examples/main.ts` (not meant to be run on its own).
 *
 * It is forked by main.ts with `<directory> <sessionId>`, creates a file-persisted agent and sends
 * a follow-up whose first step asks for two tools: `deploy` (exclusive, never finishes here) and
 * `notify`. While `deploy` runs it sends a second follow-up (pending, next-turn) and then tells the
 * parent over IPC that it reached the crash point. The parent kills it with SIGKILL: nothing gets
 * to run a finalizer, the lock file stays behind, and the log ends inside an open turn.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Deferred, Effect, Layer, Schema } from "effect"
import { AgentRegistry, Message, Model, Tool } from "../../src/index.js"
import { watch } from "./print.js"
import * as NodeFileSessionPersistence from "../../src/NodeFileSessionPersistence.js"

const [directory, sessionId] = process.argv.slice(2)

// If the parent goes away without killing us, do not linger.
process.on("disconnect", () => process.exit(1))

const program = Effect.gen(function*() {
  if (directory === undefined || sessionId === undefined || process.send === undefined) {
    return yield* Effect.dieMessage("crashChild.ts is forked by examples/main.ts; run `npm start` instead")
  }
  const model = yield* Model.scripted([
    [
      Model.text("Deploying v3, then I will tell #ops."),
      Model.toolCall("c1", "deploy", JSON.stringify({ version: "v3" })),
      Model.toolCall("c2", "notify", JSON.stringify({ channel: "#ops" }))
    ]
  ])
  const deployStarted = yield* Deferred.make<void>()
  const deploy = Tool.make({
    name: "deploy",
    description: "Deploys a version (takes a while)",
    parameters: Schema.Struct({ version: Schema.String }),
    mode: "exclusive",
    // Stands for a long side effect: it starts, and the process dies before it reports back.
    run: () => Deferred.succeed(deployStarted, undefined).pipe(Effect.zipRight(Effect.never))
  })
  const notify = Tool.make({
    name: "notify",
    description: "Posts a message to a channel",
    parameters: Schema.Struct({ channel: Schema.String }),
    run: ({ channel }) => Effect.succeed(Tool.text(`posted to ${channel}`))
  })
  const runtime = NodeFileSessionPersistence.layerRuntime({ directory }).pipe(Layer.provide(model.layer))

  yield* Effect.gen(function*() {
    const registry = yield* AgentRegistry.AgentRegistry
    const { agent } = yield* registry.create({
      sessionId,
      options: { provider: "scripted", model: "demo" },
      setup: (setup) => Effect.all([setup.tools.register(deploy), setup.tools.register(notify)], { discard: true })
    })
    const watcher = yield* watch(agent, "child")
    yield* agent.followup(Message.user("Deploy v3 and tell #ops.", { id: "d1" }))
    yield* Deferred.await(deployStarted)
    const mark = yield* watcher.mark
    yield* agent.followup(Message.user("Then post the changelog.", { id: "d2" }))
    yield* watcher.printed(mark, (event) => event._tag === "InboxInserted")
    yield* Console.log(`  [child] pid ${process.pid}: deploy is running and d2 is pending; asking to be killed`)
    process.send?.("crash-point")
    return yield* Effect.never
  }).pipe(Effect.scoped, Effect.provide(runtime))
})

NodeRuntime.runMain(Effect.scoped(program))
