/**
 * An interactive terminal chat on a session that lives on disk: type a line and the answer streams
 * back (`agent.stream`); the model may use a calculator. Start it again and the conversation goes on.
 *
 *   npx tsx examples/chat.ts [--dir ./.chat] [--session chat]
 *
 * Ctrl-C while an answer streams cancels that turn — the log keeps what was said so far and the
 * turn's end — and the prompt comes back. Ctrl-C at the prompt, a second Ctrl-C while a turn is
 * being canceled, `/quit` or the end of input leave: the agent is disposed and its session's lock
 * released, so the next start resumes at once. Lines typed while an answer streams run after it.
 *
 * The model: OpenAI or a compatible endpoint when `OPENAI_API_KEY` is set (`OPENAI_BASE_URL`,
 * `EFFECT_AGENT_MODEL`), Anthropic when `ANTHROPIC_API_KEY` is set, else a scripted model that
 * echoes (a line starting with "wait" makes it stream a little and then hang, to try Ctrl-C).
 */
import { Effect, Layer, Queue, Schema, Stream } from "effect"
import * as readline from "node:readline"
import { AgentRegistry, Tool } from "../src/index.js"
import type { Agent, TurnPart } from "../src/index.js"
import * as NodeFileSessionPersistence from "../src/NodeFileSessionPersistence.js"
import { argument, chooseModel } from "./support/models.js"
import { reasonText } from "./support/print.js"

// ---- the tool: arithmetic on numbers, + - * / ^ and parentheses (no eval) ----

/** The value of an arithmetic expression, or a thrown Error saying where it went wrong. */
const calculate = (expression: string): number => {
  const tokens = expression.match(/\d+(?:\.\d+)?|[-+*/^()]|\S/g) ?? []
  let at = 0
  const peek = () => tokens[at]
  const fail = (what: string): never => {
    throw new Error(`${what} at token ${at + 1} of ${JSON.stringify(expression)}`)
  }
  const atom = (): number => {
    const token = tokens[at++]
    if (token === "-") return -atom()
    if (token === "(") {
      const value = sum()
      if (tokens[at++] !== ")") fail("a missing \")\"")
      return value
    }
    return token !== undefined && /^\d/.test(token) ? Number(token) : fail(`an unexpected ${JSON.stringify(token ?? "end")}`)
  }
  const power = (): number => {
    const base = atom()
    return peek() === "^" ? (at++, base ** power()) : base
  }
  const product = (): number => {
    let value = power()
    while (peek() === "*" || peek() === "/") value = tokens[at++] === "*" ? value * power() : value / power()
    return value
  }
  const sum = (): number => {
    let value = product()
    while (peek() === "+" || peek() === "-") value = tokens[at++] === "+" ? value + product() : value - product()
    return value
  }
  const value = sum()
  return at === tokens.length ? value : fail(`an unexpected ${JSON.stringify(peek())}`)
}

const calculator = Tool.make({
  name: "calculator",
  description: "Evaluates an arithmetic expression: numbers, + - * / ^ and parentheses, e.g. \"(2 + 3) * 7\"",
  parameters: Schema.Struct({ expression: Schema.String }),
  run: ({ expression }) =>
    Effect.sync(() => {
      try {
        return Tool.text(String(calculate(expression)))
      } catch (error) {
        return Tool.text(`cannot calculate: ${(error as Error).message}`, { isError: true })
      }
    })
})

// ---- the terminal: one queue of everything that happens, read by one loop ----

type Input =
  | { readonly _tag: "Line"; readonly text: string }
  | { readonly _tag: "Interrupt" }
  | { readonly _tag: "End" }
  | { readonly _tag: "TurnDone"; readonly ended: string }

/**
 * Lines, the end of input and Ctrl-C as `Input`s until the Scope closes. Ctrl-C is a keypress that
 * readline reports on a terminal, and a SIGINT when the input is a pipe: both are handled here, so
 * the process is never killed by it.
 */
const terminal = (inputs: Queue.Queue<Input>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const reader = readline.createInterface({
        input: process.stdin,
        output: process.stdout,
        terminal: process.stdin.isTTY === true
      })
      const interrupt = () => Queue.unsafeOffer(inputs, { _tag: "Interrupt" })
      reader.on("line", (text) => Queue.unsafeOffer(inputs, { _tag: "Line", text }))
      reader.on("close", () => Queue.unsafeOffer(inputs, { _tag: "End" }))
      reader.on("SIGINT", interrupt)
      process.on("SIGINT", interrupt)
      reader.setPrompt("you> ")
      return { reader, interrupt }
    }),
    ({ interrupt, reader }) =>
      Effect.sync(() => {
        process.off("SIGINT", interrupt)
        reader.close()
      })
  )

/** What the terminal shows of a streamed turn's part. */
const show = (part: TurnPart.TurnPart): string => {
  switch (part._tag) {
    case "TextDelta":
      return part.text
    case "ToolCallStarted":
      return `[${part.name} ${part.arguments}]`
    case "ToolCallFinished":
      return ` → ${part.summary}\n`
    case "Retry":
      return `\n[retry ${part.attempt} after ${part.code}]\n`
    default:
      return ""
  }
}

/** Streams one turn's answer to stdout; when it has ended, however, says so on `inputs`. */
const answer = (agent: Agent.Agent, text: string, inputs: Queue.Queue<Input>) =>
  agent.stream(text).pipe(
    Stream.runForEach((part) => Effect.sync(() => process.stdout.write(show(part)))),
    Effect.as("completed"),
    Effect.catchAll((error) =>
      Effect.succeed(error._tag === "TurnFailed" ? `${reasonText(error.reason)}` : `failed: ${error.message}`)
    ),
    Effect.flatMap((ended) => Queue.offer(inputs, { _tag: "TurnDone", ended }))
  )

/**
 * The chat's loop: at the prompt a line starts a turn, Ctrl-C or the end of input leaves; during a
 * turn Ctrl-C cancels it and waits for it to end, and a second one leaves at once.
 */
const converse = (agent: Agent.Agent, inputs: Queue.Queue<Input>, prompt: Effect.Effect<void>) =>
  Effect.gen(function*() {
    const typedAhead: Array<string> = []
    let state: "prompt" | "turn" | "canceling" = "prompt"
    let inputEnded = false
    yield* prompt
    while (true) {
      const input: Input = state === "prompt" && typedAhead.length > 0
        ? { _tag: "Line", text: typedAhead.shift()! }
        : state === "prompt" && inputEnded
        ? { _tag: "End" }
        : yield* Queue.take(inputs)
      if (input._tag === "Line" && state !== "prompt") typedAhead.push(input.text)
      else if (input._tag === "Line" && input.text.trim() === "/quit") return
      else if (input._tag === "Line" && input.text.trim() === "") yield* prompt
      else if (input._tag === "Line") {
        yield* Effect.forkScoped(answer(agent, input.text, inputs))
        state = "turn"
      } else if (input._tag === "TurnDone") {
        yield* Effect.sync(() => process.stdout.write(`\n[${input.ended}]\n`))
        state = "prompt"
        if (typedAhead.length === 0 && !inputEnded) yield* prompt
      } else if (input._tag === "End" && state !== "prompt") inputEnded = true
      else if (input._tag === "Interrupt" && state === "turn") {
        yield* Effect.sync(() => process.stdout.write("\n[canceling the turn: Ctrl-C again to leave now]\n"))
        yield* agent.cancel({ kind: "user" })
        state = "canceling"
      } else return
    }
  })

const program = Effect.gen(function*() {
  const directory = argument("dir", "./.chat")
  const sessionId = argument("session", "chat")
  const { layer, route } = yield* chooseModel
  const runtime = NodeFileSessionPersistence.layerRuntime({ directory }).pipe(Layer.provideMerge(layer))
  yield* Effect.gen(function*() {
    const inputs = yield* Queue.unbounded<Input>()
    // first acquired, last released: Ctrl-C stays handled until the agent is disposed
    const { reader } = yield* terminal(inputs)
    const registry = yield* AgentRegistry.AgentRegistry
    const { agent } = yield* registry.resumeOrCreate({
      sessionId,
      options: { ...route, system: "You are a brief assistant. Use the calculator for arithmetic." },
      setup: (setup) => setup.tools.register(calculator)
    })
    const stored = (yield* agent.session.messages).length
    yield* Effect.sync(() =>
      process.stdout.write(
        `[${route.provider}/${route.model} · session ${sessionId} · ${stored} messages · ` +
          "Ctrl-C cancels an answer, at the prompt it leaves]\n"
      )
    )
    yield* converse(agent, inputs, Effect.sync(() => reader.prompt()))
  }).pipe(Effect.scoped, Effect.provide(runtime))
  yield* Effect.sync(() => process.stdout.write("\n[bye]\n"))
})

Effect.runPromise(program).catch((error: unknown) => {
  process.exitCode = 1
  console.error(String(error))
})
