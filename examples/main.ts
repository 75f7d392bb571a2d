/**
 * The main demo (`npm start`): one agent on the embedded default — JSONL files in `./.sessions`
 * and a scripted model, no network — through
 *
 *   1. create (with tools) and two follow-ups
 *   2. a steer that lands while a tool is running
 *   3. cancel (the pending inbox is canceled)
 *   4. cancel with `keepInbox` (the pending inbox stays, parked until a wake)
 *   5. runMaintenance and dispose
 *   6. a real crash (a child process killed with SIGKILL mid-turn), then resume: the lock of the
 *      dead process is taken over, the open turn is closed durably, and the model is told.
 *
 * Every run uses fresh session ids, so it can be run again and again; the files stay in
 * `./.sessions` for you to read.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Clock, Console, Data, Deferred, Effect, Layer, Option, Schema } from "effect"
import { fork } from "node:child_process"
import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { AgentRegistry, Message, Model, SessionPersistence, Tool } from "../src/index.js"
import { describeMessage, describeSessionEvent, logLength, printLog, watch } from "./support/print.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"

const directory = "./.sessions"
const route = { provider: "scripted", model: "demo" } as const

const section = (title: string) => Console.log(`\n── ${title} ${"─".repeat(Math.max(0, 92 - title.length))}`)
const say = (text: string) => Console.log(`  ${text}`)

class CrashChildFailed extends Data.TaggedError("CrashChildFailed")<{ readonly reason: string }> {}

/**
 * Forks `support/crashChild.ts` (through the same tsx loader) and kills it with SIGKILL when it
 * reports the crash point. Succeeds once the child is dead.
 */
const crashChild = (sessionId: string) =>
  Effect.async<void, CrashChildFailed>((resume) => {
    const child = fork(fileURLToPath(new URL("./support/crashChild.ts", import.meta.url)), [directory, sessionId])
    child.on("message", (message) => {
      if (message === "crash-point") child.kill("SIGKILL")
    })
    child.once("error", (error) => resume(Effect.fail(new CrashChildFailed({ reason: error.message }))))
    child.once("exit", (code, signal) =>
      resume(
        signal === "SIGKILL"
          ? Effect.void
          : Effect.fail(new CrashChildFailed({ reason: `it exited with code ${code} before the crash point` }))
      ))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const program = Effect.gen(function*() {
  const run = (yield* Clock.currentTimeMillis).toString(36)
  const demoId = `demo-${run}`
  const crashId = `crash-${run}`

  // One scripted model for this process, a script per session (consumed in request order).
  const model = yield* Model.scripted({
    [demoId]: [
      // 1. two follow-ups: turn 1 uses a tool, turn 2 answers at once
      [Model.text("Let me look that up."), Model.toolCall("c1", "lookup", JSON.stringify({ topic: "Effect" }))],
      Model.text("Effect is a TypeScript library for typed, composable, resource-safe programs."),
      Model.text("A Scope owns resources; closing it runs their finalizers."),
      // 2. steer: the approve tool waits, the steer enters step 2
      [
        Model.text("I need an approval first."),
        Model.toolCall("c2", "approve", JSON.stringify({ action: "deploy v2" }))
      ],
      Model.text("Approved. Deploying v2 to the canary first, as you asked."),
      // 3. and 4. the model streams a little, then hangs until the cancel
      Model.hang("Logs are the durable truth of"),
      Model.hang("Once more: logs"),
      // 4. after the wake: the parked haiku, then the thanks
      Model.text("Append-only lines / replayed after every crash / nothing goes missing."),
      Model.text("You're welcome.")
    ],
    [crashId]: [
      // 6. after the resume: the pending follow-up of the dead process, then a new one
      Model.text("The v3 deploy was interrupted and may have partly run; I will verify it first. Changelog posted."),
      Model.text("v3: unverified (interrupted by a crash). Changelog: posted.")
    ]
  })
  const runtime = NodeFileSessionPersistence.layerRuntime({ directory }).pipe(Layer.provide(model.layer))

  yield* Effect.gen(function*() {
    const registry = yield* AgentRegistry.AgentRegistry
    const persistence = yield* SessionPersistence.SessionPersistence

    // ---------------------------------------------------------------------------------------------
    yield* section(`1. Create agent ${demoId} with tools; two follow-ups`)

    const lookup = Tool.make({
      name: "lookup",
      description: "Looks a topic up in the team notes",
      parameters: Schema.Struct({ topic: Schema.String }),
      run: ({ topic }) => Effect.succeed(Tool.text(`notes on ${topic}: typed effects, scopes, layers`))
    })
    // A tool that waits for a human: it signals that it runs, then waits for the answer. The demo
    // uses the two Deferreds to steer while the turn is provably in the middle of a step.
    const approvalRequested = yield* Deferred.make<void>()
    const approvalGranted = yield* Deferred.make<void>()
    const approve = Tool.make({
      name: "approve",
      description: "Asks a human to approve an action and waits for the answer",
      parameters: Schema.Struct({ action: Schema.String }),
      mode: "exclusive",
      run: ({ action }) =>
        Deferred.succeed(approvalRequested, undefined).pipe(
          Effect.zipRight(Deferred.await(approvalGranted)),
          Effect.as(Tool.text(`approved: ${action}`))
        )
    })

    const handle = yield* registry.create({
      sessionId: demoId,
      options: route,
      // setup runs before the agent is published; what it registers lives as long as the agent
      setup: (agent) => Effect.all([agent.tools.register(lookup), agent.tools.register(approve)], { discard: true })
    })
    const agent = handle.agent
    const watcher = yield* watch(agent, "demo")
    yield* say(`created; ${directory}/${demoId}.jsonl is the log, ${directory}/${demoId}.lock the writer's lock`)

    let mark = yield* logLength(agent)
    // two follow-ups back to back: one turn each, FIFO, in one drain (running → idle once)
    yield* watcher.settle(
      Effect.zipRight(
        agent.followup(Message.user("What is Effect?", { id: "q1" })),
        agent.followup(Message.user("And what is a Scope?", { id: "q2" }))
      )
    )
    yield* say("the durable log of this section:")
    yield* printLog(agent, mark)

    // ---------------------------------------------------------------------------------------------
    yield* section("2. Steer while running")

    mark = yield* logLength(agent)
    yield* watcher.settle(
      Effect.gen(function*() {
        const printed = yield* watcher.mark
        yield* agent.followup(Message.user("Deploy v2 to production.", { id: "q3" }))
        yield* Deferred.await(approvalRequested) // the approve tool is running: we are mid-step
        yield* watcher.printed(printed, (event) => event._tag === "ToolCallStarted")
        yield* say("→ steer while the approve tool waits: \"Use the canary first.\"")
        yield* agent.steer(Message.user("Use the canary first.", { id: "s1" }))
        yield* Deferred.succeed(approvalGranted, undefined)
      })
    )
    const lastRequest = (yield* model.requests).filter((request) => request.sessionId === agent.id).at(-1)
    const lastMessage = lastRequest?.messages.at(-1)
    if (lastMessage !== undefined) yield* say(`the step-2 request ends with the steer: ${describeMessage(lastMessage)}`)
    yield* say("the durable log of this section (s1 entered step 2 of the same turn):")
    yield* printLog(agent, mark)

    // ---------------------------------------------------------------------------------------------
    yield* section("3. Cancel: the running turn is aborted and pending input is canceled")

    mark = yield* logLength(agent)
    let printed = yield* watcher.mark
    yield* agent.followup(Message.user("Write a long essay about logs.", { id: "q4" }))
    yield* watcher.printed(printed, (event) => event._tag === "ModelDelta") // the model is streaming (and hangs)
    printed = yield* watcher.mark
    yield* agent.followup(Message.user("Then a poem about them.", { id: "q5" })) // queued for the next turn
    yield* watcher.printed(printed, (event) => event._tag === "InboxInserted")
    yield* say("→ cancel({ kind: \"user\" })")
    yield* watcher.settle(agent.cancel({ kind: "user" }))
    yield* say(`pending next-turn after the cancel: ${(yield* agent.inbox.nextTurn).length} message(s)`)
    yield* say("the durable log (the streamed text is kept as an interrupted assistant message; q5 is canceled):")
    yield* printLog(agent, mark)

    // ---------------------------------------------------------------------------------------------
    yield* section("4. Cancel with keepInbox: pending input stays, parked until a wake")

    mark = yield* logLength(agent)
    printed = yield* watcher.mark
    yield* agent.followup(Message.user("Write the essay again.", { id: "q6" }))
    yield* watcher.printed(printed, (event) => event._tag === "ModelDelta")
    printed = yield* watcher.mark
    yield* agent.followup(Message.user("Then a haiku.", { id: "q7" }))
    yield* watcher.printed(printed, (event) => event._tag === "InboxInserted")
    yield* say("→ cancel({ kind: \"user\" }, { keepInbox: true })")
    yield* watcher.settle(agent.cancel({ kind: "user" }, { keepInbox: true }))
    const parked = yield* agent.inbox.nextTurn
    const ids = parked.map((m) => `[${m.id}]`).join(", ")
    yield* say(`pending next-turn after the cancel: ${ids} (status ${yield* agent.status})`)
    yield* say("→ followup(\"Thanks!\") wakes the agent: the parked q7 runs first (FIFO), then q8")
    yield* watcher.settle(agent.followup(Message.user("Thanks!", { id: "q8" })))
    yield* say("the durable log of this section:")
    yield* printLog(agent, mark)

    // ---------------------------------------------------------------------------------------------
    yield* section("5. runMaintenance, then dispose")

    // Exclusive work while idle: no turn starts and the status stays idle. Input sent meanwhile is
    // written at once and runs when the task has settled.
    const length = yield* agent.runMaintenance(logLength(agent))
    yield* say(`runMaintenance ran exclusively while idle (no turn): the log has ${length} events`)
    yield* say("→ handle.dispose (only the owner holds the handle; registry.get never returns it)")
    yield* handle.dispose
    yield* watcher.ended // the agent's feed ends with its teardown
    const late = yield* Effect.either(agent.followup(Message.user("Are you there?")))
    if (late._tag === "Left") yield* say(`followup after dispose fails ${late.left._tag}: ${late.left.message}`)
    const found = yield* registry.get(demoId)
    yield* say(`registry.get(${JSON.stringify(demoId)}) is ${Option.isNone(found) ? "None" : "Some"}`)
    const stored = yield* persistence.read(agent.id)
    const isLocked = yield* Effect.sync(() => existsSync(`${directory}/${demoId}.lock`))
    yield* say(
      `on disk: ${stored.events.length} events; lock file ${isLocked ? "still present (unexpected)" : "removed"}; ` +
        `resume(${JSON.stringify(demoId)}) would bring it back`
    )

    // ---------------------------------------------------------------------------------------------
    yield* section("6. Crash + resume with repair")

    yield* say(`forking a child process that creates ${crashId}, runs a turn and is killed mid-tool (SIGKILL)`)
    yield* crashChild(crashId)
    const onDisk = yield* persistence.read(yield* Message.sessionId(crashId))
    yield* say("what the killed process left on disk (turn 1 is open: a tool call has no result):")
    for (const event of onDisk.events) yield* say(`  ${describeSessionEvent(event)}`)

    yield* say("→ registry.resume: take the writer (the dead process's lock is taken over), repair, publish")
    // The restarted program registers its tools again; the route comes from the log's last request/config.
    const deploy = Tool.make({
      name: "deploy",
      description: "Deploys a version (takes a while)",
      parameters: Schema.Struct({ version: Schema.String }),
      mode: "exclusive",
      run: ({ version }) => Effect.succeed(Tool.text(`deployed ${version}`))
    })
    const notify = Tool.make({
      name: "notify",
      description: "Posts a message to a channel",
      parameters: Schema.Struct({ channel: Schema.String }),
      run: ({ channel }) => Effect.succeed(Tool.text(`posted to ${channel}`))
    })
    const resumed = yield* registry.resume({
      sessionId: crashId,
      setup: (agent) => Effect.all([agent.tools.register(deploy), agent.tools.register(notify)], { discard: true })
    })
    const crashWatcher = yield* watch(resumed.agent, "crash")
    const repaired = yield* resumed.agent.session.events
    yield* say("closers resume wrote durably before publishing the agent:")
    for (const event of repaired.slice(onDisk.events.length)) yield* say(`  ${describeSessionEvent(event)}`)
    yield* say("the history the model sees now (session.messages, what the next request carries):")
    for (const message of yield* resumed.agent.session.messages) {
      yield* say(`  ${describeMessage(message, Number.POSITIVE_INFINITY)}`)
    }
    const pending = yield* resumed.agent.inbox.nextTurn
    const survived = pending.map((m) => `[${m.id}] ${JSON.stringify(Message.textOf(m.content))}`).join(", ")
    yield* say(`pending input survived the crash: ${survived}`)

    yield* say("→ followup(\"Status?\") wakes it: d2 runs first, as turn 2 (numbering continues), then d3")
    mark = yield* logLength(resumed.agent)
    yield* crashWatcher.settle(resumed.agent.followup(Message.user("Status?", { id: "d3" })))
    yield* say("the durable log after the repair:")
    yield* printLog(resumed.agent, mark)
    yield* resumed.dispose
    yield* crashWatcher.ended
    yield* section("done")
    yield* say(`the logs are in ${directory}/ (one JSONL file per session; run again for fresh sessions)`)
  }).pipe(Effect.scoped, Effect.provide(runtime))
})

NodeRuntime.runMain(Effect.scoped(program))
