/**
 * A turn's model settings and typed output (APP-04, OUT-01, OUT-02): the agent's own (its options,
 * else the last `request/config` of the log that is not a turn's own), a message's own over them
 * for the turn it enters (stored with the message by `send`, so they apply after a restart too),
 * and the check of the turn's final answer with its correction message.
 *
 * @internal
 */
import { Effect, Either, ParseResult, Schema } from "effect"
import type { AgentOptions, SendOptions } from "../../../Agent.js"
import { InvalidAgentOptions } from "../../../AgentError.js"
import type { MessageId, UserMessage } from "../../../Message.js"
import * as ModelSettings from "../../../ModelSettings.js"
import type { RequestSettings } from "../../../SessionEvent.js"
import type * as Tool from "../../../Tool.js"
import * as options_ from "../../options.js"
import type { DriverState } from "./state.js"

/** The route a log stores (RES-07/08) with the agent's own output format (OUT-01). @internal */
export type StoredRoute = Partial<Tool.Route> & { readonly output?: ModelSettings.OutputFormat | undefined }

/** OUT-02: the default number of correction steps. @internal */
export const defaultOutputRetries = 2

/** The settings without `maxOutputTokens` (which travels as `maxTokens`) and without undefined fields. */
const requestSettingsOf = (settings: ModelSettings.ModelSettings | undefined): RequestSettings | undefined => {
  if (settings === undefined) return undefined
  const out: Record<string, unknown> = {}
  let n = 0
  for (const name of ModelSettings.settingNames) {
    const value = settings[name]
    if (name === "maxOutputTokens" || value === undefined) continue
    out[name] = value
    n++
  }
  return n === 0 ? undefined : out as RequestSettings
}

/**
 * APP-04: the agent's own settings and token limit: the options' `settings` as a whole when set
 * (a resume may drop one), else the stored ones; `maxOutputTokens` and `maxTokens` are one value.
 *
 * @internal
 */
export const agentSettings = (
  options: AgentOptions,
  stored: StoredRoute
): { readonly settings: RequestSettings | undefined; readonly maxTokens: number | undefined } => {
  if (options.settings === undefined) {
    return { settings: stored.settings, maxTokens: options.maxTokens ?? stored.maxTokens }
  }
  return {
    settings: requestSettingsOf(options.settings),
    maxTokens: options.settings.maxOutputTokens ?? options.maxTokens ?? stored.maxTokens
  }
}

/** A message's own settings over the agent's, field by field. @internal */
export const overSettings = (
  base: RequestSettings | undefined,
  own: ModelSettings.ModelSettings | undefined
): RequestSettings | undefined => {
  const over = requestSettingsOf(own)
  if (over === undefined) return base
  return base === undefined ? over : { ...base, ...over }
}

/** The settings a provider is asked about: the request's, with the token limit as `maxOutputTokens`. */
const asModelSettings = (settings: RequestSettings | undefined, maxTokens: number | undefined): ModelSettings.ModelSettings => ({
  ...settings,
  ...(maxTokens !== undefined ? { maxOutputTokens: maxTokens } : {})
})

/**
 * APP-04: asks the model (when it judges settings) whether the provider takes every setting; a
 * refusal is `InvalidAgentOptions` with the model's reason. Nothing to ask without a route.
 *
 * @internal
 */
export const settingsAccepted = (
  model: { readonly validateSettings?: ((provider: string, model: string, settings: ModelSettings.ModelSettings) => Effect.Effect<void, { readonly message: string }>) | undefined },
  provider: string | undefined,
  modelName: string | undefined,
  settings: RequestSettings | undefined,
  maxTokens: number | undefined
): Effect.Effect<void, InvalidAgentOptions> => {
  if (model.validateSettings === undefined || provider === undefined || modelName === undefined) return Effect.void
  if (settings === undefined) return Effect.void
  return Effect.mapError(
    model.validateSettings(provider, modelName, asModelSettings(settings, maxTokens)),
    (refused) => new InvalidAgentOptions({ reason: refused.message })
  )
}

/**
 * APP-04, OUT-01: a message with the `settings` and `output` of its send stored on it (validated,
 * and asked of the model for the agent's provider), or `InvalidAgentOptions`; the Schema of its
 * output is kept in memory for its turn's check. The message itself when neither is given.
 *
 * @internal
 */
export const withTurnOptions = (
  state: DriverState,
  message: UserMessage,
  options: Pick<SendOptions, "settings" | "output"> | undefined
): Effect.Effect<UserMessage, InvalidAgentOptions> => {
  if (options === undefined || (options.settings === undefined && options.output === undefined)) {
    return Effect.succeed(message)
  }
  return Effect.gen(function*() {
    const deps = state.deps
    const settings = options.settings === undefined ? undefined : yield* options_.decodeSettings(options.settings)
    let output: ModelSettings.OutputFormat | undefined
    const ownSchema = Schema.isSchema(options.output) ? options.output : undefined
    if (ownSchema !== undefined) {
      const problem = options_.outputProblem(ownSchema, "output")
      if (problem !== undefined) return yield* new InvalidAgentOptions({ reason: problem })
      output = ModelSettings.outputFormat(ownSchema)
    } else if (options.output !== undefined) {
      // OUT-01 as data (APP-05's `output`): a JSON Schema with its name, checked here for any caller
      output = yield* outputFormatOf(options.output)
    }
    const base = agentSettings(deps.options, deps.storedRoute)
    yield* settingsAccepted(
      deps.model,
      deps.options.provider ?? deps.storedRoute.provider,
      deps.options.model ?? deps.storedRoute.model,
      overSettings(base.settings, settings),
      settings?.maxOutputTokens ?? base.maxTokens
    )
    if (ownSchema !== undefined) (state.outputSchemas ??= new Map()).set(message.id, ownSchema)
    const turnOptions: ModelSettings.TurnOptions = {
      ...(settings !== undefined ? { settings } : {}),
      ...(output !== undefined ? { output } : {})
    }
    return { ...message, turnOptions }
  })
}

/** An output format given as data, checked as `ModelSettings.outputFormatFromJsonSchema` checks it. */
const outputFormatOf = (output: unknown): Effect.Effect<ModelSettings.OutputFormat, InvalidAgentOptions> => {
  if (!ModelSettings.isOutputFormat(output)) {
    return Effect.fail(new InvalidAgentOptions({ reason: "output must be a Schema or an OutputFormat {name, schema, strict}" }))
  }
  const format = ModelSettings.outputFormatFromJsonSchema(output.schema, { name: output.name, strict: output.strict })
  return Either.isRight(format)
    ? Effect.succeed(format.right)
    : Effect.fail(new InvalidAgentOptions({ reason: format.left }))
}

/** What a turn asks of the model beyond its route: its own settings and output, and how its answer is checked. @internal */
export interface TurnAsk {
  /** Some message that entered the turn carried its own settings or output. */
  turnOnly: boolean
  settings: ModelSettings.ModelSettings | undefined
  output: ModelSettings.OutputFormat | undefined
  /** The Schema that decodes the answer, while this process holds it. */
  schema: Schema.Schema<any, any, never> | undefined
  /** OUT-02: correction steps taken so far. */
  corrections: number
}

/** @internal */
export const emptyAsk = (): TurnAsk => ({
  turnOnly: false,
  settings: undefined,
  output: undefined,
  schema: undefined,
  corrections: 0
})

/**
 * APP-04, OUT-01: what the messages that entered a step bring to the turn (the later over the
 * earlier); their in-memory Schemas are taken (each is used by one turn).
 *
 * @internal
 */
export const enterMessages = (state: DriverState, ask: TurnAsk, messages: ReadonlyArray<UserMessage>): void => {
  for (const message of messages) {
    const own = message.turnOptions
    if (own === undefined) continue
    ask.turnOnly = true
    if (own.settings !== undefined) ask.settings = { ...ask.settings, ...own.settings }
    if (own.output !== undefined) {
      ask.output = own.output
      ask.schema = state.outputSchemas?.get(message.id)
    }
    state.outputSchemas?.delete(message.id)
  }
}

/**
 * OUT-01: the agent's own output format (its options' Schema, else the one the log stores) and the
 * Schema that decodes it.
 *
 * @internal
 */
export const agentOutput = (
  state: DriverState
): { readonly output: ModelSettings.OutputFormat | undefined; readonly schema: Schema.Schema<any, any, never> | undefined } => {
  const options = state.deps.options
  if (options.output === undefined) return { output: state.deps.storedRoute.output, schema: undefined }
  state.agentOutputFormat ??= ModelSettings.outputFormat(options.output)
  return { output: state.agentOutputFormat, schema: options.output }
}

/** A reply's JSON without the Markdown code fence a model may wrap it in. */
const unfenced = (text: string): string => {
  const match = /^\s*```[A-Za-z0-9_-]*\s*\n([\s\S]*?)\n?```\s*$/.exec(text)
  return match === null ? text : match[1]!
}

/**
 * OUT-01: the answer's JSON, decoded with `schema` when there is one (else only parsed: after a
 * restart the Schema is gone), or the reason it is not valid output.
 *
 * @internal
 */
export const decodeOutput = (
  text: string,
  schema: Schema.Schema<any, any, never> | undefined
): Either.Either<unknown, string> => {
  let json: unknown
  try {
    json = JSON.parse(unfenced(text))
  } catch (error) {
    return Either.left(`the answer is not JSON (${error instanceof Error ? error.message : String(error)})`)
  }
  if (schema === undefined) return Either.right(json)
  const decoded = Schema.decodeUnknownEither(schema, { errors: "all" })(json)
  return Either.isRight(decoded)
    ? Either.right(decoded.right)
    : Either.left(`the answer does not match the schema: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`)
}

/**
 * OUT-02: the correction message of a step whose answer was not valid output: durable, from the
 * system, naming the problem.
 *
 * @internal
 */
export const correctionMessage = (
  turn: number,
  step: number,
  output: ModelSettings.OutputFormat,
  problem: string
): UserMessage => ({
  id: `output-invalid:${turn}:${step}` as MessageId,
  role: "user",
  content: [{
    type: "text",
    text: `Your answer is not valid ${output.name} output: ${problem}. ` +
      "Answer again with only the JSON value, matching the requested schema."
  }],
  source: { kind: "system", reason: "output-invalid" }
})
