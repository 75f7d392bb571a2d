/**
 * Model settings (APP-04) and typed output (OUT-01): what a request asks of the model beyond its
 * prompt and tools, as durable data. An agent's `settings` and `output` are stored in every
 * `request/config` (REQ-03 rebuilds requests from them); a message's own, given to `send`, are
 * stored with the message and apply to its turn only.
 *
 * Providers (see `docs/guides/model-settings.md`): OpenAI Chat Completions takes every setting but
 * `topK`; Anthropic Messages every setting but `seed`. A setting the agent's provider cannot take is
 * refused with `InvalidAgentOptions` at create and at a send that carries it — never dropped.
 *
 * @since 0.3.0
 */
import { Either, JSONSchema, Option, Schema, SchemaAST } from "effect"
import { deepFreeze, snapshot } from "./internal/json.js"
import { JsonRecord } from "./internal/log/jsonValue.js"
import type { JsonValue } from "./internal/log/jsonValue.js"

/**
 * Which tools the model may or must call: `"auto"` (the model decides), `"none"` (no tool),
 * `"required"` (some tool), or `{ tool }` (that tool).
 *
 * @since 0.3.0
 * @category models
 */
export const ToolChoice = Schema.Union(
  Schema.Literal("auto", "none", "required"),
  Schema.Struct({ tool: Schema.String.pipe(Schema.minLength(1)) })
)

/**
 * @since 0.3.0
 * @category models
 */
export type ToolChoice = typeof ToolChoice.Type

const opt = <S extends Schema.Schema.Any>(schema: S) => Schema.optionalWith(schema, { exact: true })

/**
 * The model settings (APP-04), each optional:
 * - `temperature` (0 to 2; Anthropic takes at most 1), `topP` (0 to 1), `topK` (a positive integer);
 * - `maxOutputTokens` (a positive integer: the same value as `AgentOptions.maxTokens`);
 * - `stop` (up to 16 non-empty stop sequences; OpenAI takes at most 4);
 * - `seed` (an integer); `toolChoice`; `parallelToolCalls` (`false`: at most one call per step).
 *
 * @since 0.3.0
 * @category models
 */
export const ModelSettings = Schema.Struct({
  temperature: opt(Schema.Number.pipe(Schema.finite(), Schema.between(0, 2))),
  topP: opt(Schema.Number.pipe(Schema.finite(), Schema.between(0, 1))),
  topK: opt(Schema.Int.pipe(Schema.positive())),
  maxOutputTokens: opt(Schema.Int.pipe(Schema.positive())),
  stop: opt(Schema.Array(Schema.String.pipe(Schema.minLength(1))).pipe(Schema.maxItems(16))),
  seed: opt(Schema.Int),
  toolChoice: opt(ToolChoice),
  parallelToolCalls: opt(Schema.Boolean)
})

/**
 * @since 0.3.0
 * @category models
 */
export type ModelSettings = typeof ModelSettings.Type

/**
 * The names of the settings, in the order the guide's table lists them.
 *
 * @since 0.3.0
 * @category models
 */
export const settingNames: ReadonlyArray<keyof ModelSettings> = [
  "temperature",
  "topP",
  "topK",
  "maxOutputTokens",
  "stop",
  "seed",
  "toolChoice",
  "parallelToolCalls"
]

/** What an output format's name may be: what providers take as a tool or format name. */
const namePattern = /^[A-Za-z0-9_-]{1,64}$/

/**
 * Typed output as a request carries it (OUT-01): a `name` (`^[A-Za-z0-9_-]{1,64}$`), the JSON
 * Schema of the answer, and whether the provider should enforce it strictly (OpenAI's `strict`).
 *
 * @since 0.3.0
 * @category models
 */
export const OutputFormat = Schema.Struct({
  name: Schema.String.pipe(Schema.pattern(namePattern)),
  schema: JsonRecord,
  strict: Schema.Boolean
})

/**
 * @since 0.3.0
 * @category models
 */
export type OutputFormat = typeof OutputFormat.Type

/**
 * What a message stores for the turn it starts (APP-04, OUT-01): its own settings (over the
 * agent's, field by field) and output format. Written by `send` when it is given `settings` or
 * `output`; read when the message enters a step, also after a restart.
 *
 * @since 0.3.0
 * @category models
 */
export const TurnOptions = Schema.Struct({
  settings: opt(ModelSettings),
  output: opt(OutputFormat)
})

/**
 * @since 0.3.0
 * @category models
 */
export type TurnOptions = typeof TurnOptions.Type

/**
 * How {@link outputFormat} names and enforces a format.
 *
 * @since 0.3.0
 * @category models
 */
export interface OutputFormatOptions {
  /** Default: the schema's `identifier` or `title` annotation when it is a valid name, else `"output"`. */
  readonly name?: string | undefined
  /** Default: `true` when the JSON Schema meets OpenAI's strict rules (every property required, no extra ones). */
  readonly strict?: boolean | undefined
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** Whether every object of a JSON Schema lists all its properties as required and refuses others. */
const meetsStrictRules = (node: unknown): boolean => {
  if (Array.isArray(node)) return node.every(meetsStrictRules)
  if (!isRecord(node)) return true
  const properties = node["properties"]
  if (isRecord(properties)) {
    const required = Array.isArray(node["required"]) ? node["required"] : []
    if (node["additionalProperties"] !== false) return false
    if (!Object.keys(properties).every((key) => required.includes(key))) return false
  }
  return Object.values(node).every(meetsStrictRules)
}

/**
 * Whether a JSON Schema meets OpenAI's strict rules (`strict: true` in `response_format`): every
 * object lists all its properties as `required` and sets `additionalProperties: false`.
 *
 * @since 0.3.0
 * @category predicates
 */
export const isStrictSchema = (jsonSchema: JsonRecord): boolean => meetsStrictRules(jsonSchema)

const annotatedName = (schema: Schema.Schema.Any): string | undefined =>
  [SchemaAST.getIdentifierAnnotation(schema.ast), SchemaAST.getTitleAnnotation(schema.ast)]
    .flatMap(Option.toArray)
    .find((name) => namePattern.test(name))

/**
 * The {@link OutputFormat} of a Schema: its JSON Schema (the answer's own at the top, named
 * definitions under `$defs`, no `$schema`) as
 * plain frozen JSON, a name and `strict`. Throws a `TypeError` for a schema that has no JSON Schema
 * or a name that does not match `^[A-Za-z0-9_-]{1,64}$` (a programming error).
 *
 * @since 0.3.0
 * @category constructors
 */
export const outputFormat = (
  schema: Schema.Schema.Any,
  options?: OutputFormatOptions | undefined
): OutputFormat => {
  const name = options?.name ?? annotatedName(schema) ?? "output"
  if (!namePattern.test(name)) {
    throw new TypeError(`output name ${JSON.stringify(name)} must match ^[A-Za-z0-9_-]{1,64}$`)
  }
  let json: JsonRecord
  try {
    // the answer's own schema at the top (no top-level `$ref`: Anthropic's tool input must be an object schema)
    const definitions: Record<string, JSONSchema.JsonSchema7> = {}
    const root = JSONSchema.fromAST(schema.ast, { definitions, topLevelReferenceStrategy: "skip" })
    const withDefs = Object.keys(definitions).length > 0 ? { ...root, $defs: definitions } : root
    // plain JSON (what the log stores), without `$schema`
    const parsed = JSON.parse(JSON.stringify(withDefs)) as Record<string, JsonValue>
    delete parsed["$schema"]
    json = parsed
  } catch (error) {
    throw new TypeError(`output schema ${name} has no JSON Schema: ${error instanceof Error ? error.message : String(error)}`)
  }
  return deepFreeze({ name, schema: json, strict: options?.strict ?? meetsStrictRules(json) })
}

/**
 * The {@link OutputFormat} of a JSON Schema given as data (what `POST /sessions/:id/runs` takes as
 * `output`, the `json_schema` object of OpenAI's `response_format`): `name` defaults to `"output"`,
 * `strict` to whether the schema meets the strict rules ({@link isStrictSchema}). Fails with the
 * reason when the name is not `^[A-Za-z0-9_-]{1,64}$`, the schema is not a JSON object, or `strict`
 * is asked of a schema that does not meet the strict rules (the provider would refuse it).
 *
 * @since 0.3.0
 * @category constructors
 */
export const outputFormatFromJsonSchema = (
  jsonSchema: unknown,
  options?: OutputFormatOptions | undefined
): Either.Either<OutputFormat, string> => {
  const name = options?.name ?? "output"
  if (typeof name !== "string" || !namePattern.test(name)) {
    return Either.left(`output name ${JSON.stringify(name)} must match ^[A-Za-z0-9_-]{1,64}$`)
  }
  const copy = snapshot(jsonSchema)
  if (copy._tag === "Left" || !isRecord(copy.value)) {
    const why = copy._tag === "Left" ? `: ${copy.problem.reason} at ${copy.problem.path}` : ""
    return Either.left(`output schema must be a JSON Schema object${why}`)
  }
  const schema = copy.value as JsonRecord
  const strict = options?.strict
  if (strict !== undefined && typeof strict !== "boolean") return Either.left("output strict must be true or false")
  if (strict === true && !meetsStrictRules(schema)) {
    return Either.left(
      "output strict is true but the schema does not meet the strict rules: every object must list all its " +
        "properties as required and set additionalProperties: false (or send strict: false)"
    )
  }
  return Either.right({ name, schema, strict: strict ?? meetsStrictRules(schema) })
}

/**
 * Whether `output` is an {@link OutputFormat} (plain data) rather than a `Schema`.
 *
 * @since 0.3.0
 * @category predicates
 */
export const isOutputFormat = (output: unknown): output is OutputFormat =>
  isRecord(output) && !Schema.isSchema(output) && "schema" in output
