/**
 * What the interactive examples share (`examples/chat.ts`, `examples/server.ts`): a `--name value`
 * argument, and the model to run — a real provider when its key is set (OpenAI-compatible with
 * `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `EFFECT_AGENT_MODEL`; Anthropic with `ANTHROPIC_API_KEY`), else a
 * scripted echo.
 */
import { FetchHttpClient } from "@effect/platform"
import { Config, Effect, Layer, Option } from "effect"
import { Message, Model } from "../../src/index.js"
import * as LanguageModelAdapter from "../../src/LanguageModelAdapter.js"

/** The value after `--name` on the command line, else `fallback`. */
export const argument = (name: string, fallback: string): string => {
  const at = process.argv.indexOf(`--${name}`)
  return at !== -1 && process.argv[at + 1] !== undefined ? process.argv[at + 1]! : fallback
}

/** The scripted stand-in: echoes the last user message; "wait…" streams a prefix and hangs. */
export const echo = (request: Model.ModelRequest): Model.Reply => {
  const users = request.messages.filter((m): m is Message.UserMessage => m.role === "user")
  const last = users.length > 0 ? Message.textOf(users[users.length - 1]!.content) : ""
  return last.startsWith("wait") ? Model.hang("thinking about it") : Model.text(`echo: ${last}`)
}

/** A real provider when its key is set, else the scripted echo: the route to use and the model's layer. */
export const chooseModel = Effect.gen(function*() {
  const model = yield* Config.option(Config.string("EFFECT_AGENT_MODEL"))
  if (Option.isSome(yield* Config.option(Config.redacted("OPENAI_API_KEY")))) {
    return {
      route: { provider: "openai", model: Option.getOrElse(model, () => "gpt-4o-mini") },
      layer: LanguageModelAdapter.openAi().pipe(Layer.provide(FetchHttpClient.layer))
    }
  }
  if (Option.isSome(yield* Config.option(Config.redacted("ANTHROPIC_API_KEY")))) {
    return {
      route: { provider: "anthropic", model: Option.getOrElse(model, () => "claude-sonnet-4-5") },
      layer: LanguageModelAdapter.anthropic().pipe(Layer.provide(FetchHttpClient.layer))
    }
  }
  return { route: { provider: "scripted", model: "echo" }, layer: Model.layerScripted(echo) }
})
