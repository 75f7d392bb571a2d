/**
 * CORE-08: the options a caller hands the library — `AgentOptions`, size limits, the file and SQL
 * persistence options, tool definitions — are Schemas, decoded once where they enter, and a refusal
 * is the typed error of that entry with a message that names each field and its problem
 * (`maxTokens must be a positive integer, got 0`), built from `ParseResult.ArrayFormatter`'s paths.
 *
 * Not here: the lossless-JSON guard of stored and model-produced values (`json.ts`, DUR-03/DUR-10),
 * which stays hand-written because Schema's record decoding assigns `__proto__` and runs getters.
 *
 * @internal
 */
import { Duration, Either, ParseResult, Schema } from "effect"
import type { AgentOptions } from "../Agent.js"
import { InvalidAgentOptions } from "../AgentError.js"
import type { ModelSettings } from "../ModelSettings.js"
import { outputFormat } from "../ModelSettings.js"
import { PersistenceError } from "../SessionError.js"

// -------------------------------------------------------------------------------------------------
// Messages

/** A value as a message shows it: strings quoted, the rest as `String` would (never throws). */
const show = (u: unknown): string => {
  try {
    if (typeof u === "string") return JSON.stringify(u)
    if (typeof u === "function") return "a function"
    if (Array.isArray(u)) return "an array"
    if (typeof u === "object" && u !== null) return "an object"
    return String(u)
  } catch {
    return "a value that cannot be shown"
  }
}

const actualOf = (issue: ParseResult.ParseIssue): unknown => ("actual" in issue ? issue.actual : undefined)

/**
 * The issues without the "Expected undefined" of an optional field's `undefined` member when the
 * field's own schema said what is wrong (a nested options object, e.g. `compaction`).
 */
const withoutUndefinedMember = (
  issues: ReadonlyArray<ParseResult.ArrayFormatterIssue>
): ReadonlyArray<ParseResult.ArrayFormatterIssue> => {
  const isUndefinedMember = (issue: ParseResult.ArrayFormatterIssue) => issue.message.startsWith("Expected undefined, actual")
  const kept = issues.filter((issue) => !isUndefinedMember(issue))
  return kept.length > 0 ? kept : issues
}

/**
 * One line per problem, `<path> <problem>`, joined by `; ` (the path is dotted, array indexes in
 * brackets; a problem of the whole value is the message alone).
 *
 * @internal
 */
export const formatParseError = (error: ParseResult.ParseError): string =>
  withoutUndefinedMember(ParseResult.ArrayFormatter.formatErrorSync(error)).map((issue) => {
    const path = issue.path.reduce<string>(
      (out, key) => typeof key === "number" ? `${out}[${key}]` : out === "" ? String(key) : `${out}.${String(key)}`,
      ""
    )
    return path === "" ? issue.message : `${path} ${issue.message}`
  }).join("; ")

/**
 * An optional field that may also be `undefined` (the library's options are typed `X | undefined`),
 * whose every failure reads `must be <expected>, got <actual>`.
 *
 * @internal
 */
export const optionalField = <A, I>(schema: Schema.Schema<A, I>, expected: string) =>
  Schema.optionalWith(
    Schema.UndefinedOr(schema).annotations({
      message: (issue) => ({ message: `must be ${expected}, got ${show(actualOf(issue))}`, override: true })
    }),
    { exact: true }
  )

/** A required field whose every failure reads `must be <expected>, got <actual>`. */
const requiredField = <A, I>(schema: Schema.Schema<A, I>, expected: string) =>
  schema.annotations({
    message: (issue) => ({ message: `must be ${expected}, got ${show(actualOf(issue))}`, override: true })
  })

/** The message of a value that is not an options object at all. */
const anObject = (what: string) => ({
  message: (issue: ParseResult.ParseIssue) => `${what} must be an object, got ${show(actualOf(issue))}`
})

const decodeOptions = { errors: "all", onExcessProperty: "ignore" } as const

// -------------------------------------------------------------------------------------------------
// Shared field schemas

/** A safe integer ≥ 1. @internal */
export const PositiveInt = Schema.Int.pipe(Schema.positive())

/** A safe integer ≥ 0. @internal */
export const NonNegativeInt = Schema.Int.pipe(Schema.nonNegative())

const isFunction = (u: unknown): u is (...args: ReadonlyArray<never>) => unknown => typeof u === "function"

/** A function (its signature is the type's to check). @internal */
export const AnyFunction = Schema.declare(isFunction, { identifier: "function" })

/**
 * What `Duration.decode` takes (a `Duration`, a number of milliseconds, a bigint of nanoseconds,
 * `"30 seconds"`, a `[seconds, nanos]` pair), as the `Duration` it means.
 *
 * @internal
 */
export const DurationInput = Schema.transformOrFail(Schema.Unknown, Schema.DurationFromSelf, {
  strict: true,
  decode: (input, _, ast) => {
    const decoded = Duration.decodeUnknown(input)
    return decoded._tag === "Some"
      ? ParseResult.succeed(decoded.value)
      : ParseResult.fail(new ParseResult.Type(ast, input, "not a duration"))
  },
  encode: (duration) => ParseResult.succeed(duration)
})

// -------------------------------------------------------------------------------------------------
// AgentOptions (PUB-10: refused before anything is stored or published)

/** A number in (0, 1]. */
const Fraction = Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(1))

const NonEmptyString = Schema.String.pipe(Schema.minLength(1))

/** The fields `agent.compact` may override (CMP-01). @internal */
export const CompactOptionsFields = {
  keepLastTurns: optionalField(NonNegativeInt, "an integer >= 0"),
  prompt: optionalField(NonEmptyString, "a non-empty string")
}

/** `Compaction.Policy` (CMP-01). @internal */
export const CompactionPolicySchema = Schema.Struct({
  threshold: optionalField(Fraction, "a number above 0 and at most 1 (a fraction of contextWindow)"),
  ...CompactOptionsFields,
  onFailure: optionalField(Schema.Literal("continue", "fail"), `"continue" or "fail"`)
}).annotations({
  message: (issue: ParseResult.ParseIssue) => `must be an object (a compaction policy), got ${show(actualOf(issue))}`
})

const between = (min: number, max: number) => Schema.Number.pipe(Schema.finite(), Schema.between(min, max))

/** APP-04: `ModelSettings`, each field's failure worded for a person. @internal */
export const ModelSettingsSchema = Schema.Struct({
  temperature: optionalField(between(0, 2), "a number from 0 to 2"),
  topP: optionalField(between(0, 1), "a number from 0 to 1"),
  topK: optionalField(PositiveInt, "a positive integer"),
  maxOutputTokens: optionalField(PositiveInt, "a positive integer"),
  stop: optionalField(
    Schema.Array(NonEmptyString).pipe(Schema.maxItems(16)),
    "an array of at most 16 non-empty strings"
  ),
  seed: optionalField(Schema.Int, "an integer"),
  toolChoice: optionalField(
    Schema.Union(Schema.Literal("auto", "none", "required"), Schema.Struct({ tool: NonEmptyString })),
    `"auto", "none", "required" or { tool: <a tool name> }`
  ),
  parallelToolCalls: optionalField(Schema.Boolean, "a boolean")
}).annotations({
  message: (issue: ParseResult.ParseIssue) => `must be an object (model settings), got ${show(actualOf(issue))}`
})

const isSchema = (u: unknown): u is Schema.Schema<any, any, never> => Schema.isSchema(u)

/** A Schema (OUT-01's output). @internal */
export const AnySchema = Schema.declare(isSchema, { identifier: "Schema" })

/** A positive duration input, checked but kept as given (the options' Schema transforms nothing). */
const PositiveDurationInput = Schema.Unknown.pipe(Schema.filter((u) => {
  const decoded = Duration.decodeUnknown(u)
  return decoded._tag === "Some" && Duration.greaterThan(decoded.value, Duration.zero)
}))

/** @internal */
export const AgentOptionsSchema = Schema.Struct({
  provider: optionalField(Schema.String, "a string"),
  model: optionalField(Schema.String, "a string"),
  maxTokens: optionalField(PositiveInt, "a positive integer"),
  system: optionalField(Schema.String, "a string"),
  maxParallelToolCalls: optionalField(PositiveInt, "a positive integer"),
  maxStepsPerTurn: optionalField(PositiveInt, "a positive integer"),
  maxRequestRetries: optionalField(NonNegativeInt, "an integer >= 0"),
  maxAgentDepth: optionalField(NonNegativeInt, "an integer >= 0"),
  logTurnErrors: optionalField(Schema.Boolean, "a boolean"),
  contextWindow: optionalField(PositiveInt, "a positive integer number of tokens"),
  // no message override: the policy's own fields name their problems
  compaction: Schema.optionalWith(Schema.UndefinedOr(CompactionPolicySchema), { exact: true }),
  settings: Schema.optionalWith(Schema.UndefinedOr(ModelSettingsSchema), { exact: true }),
  output: optionalField(AnySchema, "a Schema"),
  outputRetries: optionalField(NonNegativeInt, "an integer >= 0"),
  approvalTimeout: optionalField(
    PositiveDurationInput,
    "a positive duration (e.g. \"10 minutes\" or a number of milliseconds)"
  )
}).annotations(anObject("options"))

const decodeAgentOptionsSchema = Schema.decodeUnknownEither(AgentOptionsSchema, decodeOptions)


/**
 * The options of a `create`/`resume` — the caller's own object, which `agent.options` returns (the
 * Schema has no transformations, so what it accepts is what was given) — or `InvalidAgentOptions`
 * naming every bad field.
 *
 * @internal
 */
export const decodeAgentOptions = (
  options: AgentOptions | undefined
): Either.Either<AgentOptions, InvalidAgentOptions> => {
  if (options === undefined) return Either.right({})
  const decoded = decodeAgentOptionsSchema(options)
  if (Either.isLeft(decoded)) return Either.left(new InvalidAgentOptions({ reason: formatParseError(decoded.left) }))
  const problem = crossFieldProblem(options)
  return problem === undefined ? Either.right(options) : Either.left(new InvalidAgentOptions({ reason: problem }))
}

/** What the fields' schemas cannot see: two fields that are one value, an output without a JSON Schema. */
const crossFieldProblem = (options: AgentOptions): string | undefined => {
  const maxOutputTokens = options.settings?.maxOutputTokens
  if (maxOutputTokens !== undefined && options.maxTokens !== undefined && maxOutputTokens !== options.maxTokens) {
    return `settings.maxOutputTokens (${maxOutputTokens}) and maxTokens (${options.maxTokens}) are one value: set one of them`
  }
  if (options.settings !== undefined) {
    const settings = decodeSettings(options.settings)
    if (Either.isLeft(settings)) return settings.left.reason
  }
  return options.output === undefined ? undefined : outputProblem(options.output, "output")
}

/**
 * Why a Schema cannot be a typed output (it has no JSON Schema, or its name is not a valid
 * provider name), or undefined. @internal
 */
export const outputProblem = (schema: Schema.Schema<any, any, never>, field: string): string | undefined => {
  try {
    outputFormat(schema)
    return undefined
  } catch (error) {
    return `${field} ${error instanceof Error ? error.message : String(error)}`
  }
}

// a misspelt setting is refused, never ignored (APP-04: no setting is silently dropped)
const decodeSettingsSchema = Schema.decodeUnknownEither(
  Schema.Struct({ settings: ModelSettingsSchema }),
  { errors: "all", onExcessProperty: "error" }
)

/**
 * A message's own settings (APP-04), or `InvalidAgentOptions` naming every bad field
 * (`settings.temperature must be ...`).
 *
 * @internal
 */
export const decodeSettings = (settings: unknown): Either.Either<ModelSettings, InvalidAgentOptions> => {
  const decoded = decodeSettingsSchema({ settings })
  if (Either.isLeft(decoded)) return Either.left(new InvalidAgentOptions({ reason: formatParseError(decoded.left) }))
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(decoded.right.settings)) if (value !== undefined) out[key] = value
  return Either.right(out as ModelSettings)
}

const CompactOptionsSchema = Schema.Struct(CompactOptionsFields).annotations(anObject("compact options"))
const decodeCompactOptionsSchema = Schema.decodeUnknownEither(CompactOptionsSchema, decodeOptions)

/**
 * The options of an `agent.compact` call, or `InvalidAgentOptions` naming every bad field.
 *
 * @internal
 */
export const decodeCompactOptions = (
  options: unknown
): Either.Either<typeof CompactOptionsSchema.Type, InvalidAgentOptions> => {
  if (options === undefined) return Either.right({})
  const decoded = decodeCompactOptionsSchema(options)
  return Either.isRight(decoded)
    ? Either.right(decoded.right)
    : Either.left(new InvalidAgentOptions({ reason: formatParseError(decoded.left) }))
}

// -------------------------------------------------------------------------------------------------
// Persistence options (DUR-05 limits, the file and SQL layers)

/** 16 MiB. @internal */
export const defaultMaxEventBytes: number = 16 * 1024 * 1024

/** 512 MiB. @internal */
export const defaultMaxSessionBytes: number = 512 * 1024 * 1024

const byteCount = "a positive integer number of bytes"

/** The size limits of every persistence layer (DUR-05), defaults filled in. @internal */
export const SizeLimitsSchema = Schema.Struct({
  maxEventBytes: optionalField(PositiveInt, byteCount),
  maxSessionBytes: optionalField(PositiveInt, byteCount)
})

/** @internal */
export interface Limits {
  readonly maxEventBytes: number
  readonly maxSessionBytes: number
}

const limitsFrom = (options: typeof SizeLimitsSchema.Type): Limits => ({
  maxEventBytes: options.maxEventBytes ?? defaultMaxEventBytes,
  maxSessionBytes: options.maxSessionBytes ?? defaultMaxSessionBytes
})

const Durability = Schema.Literal("fsync", "buffered")

/** A function of a pid (its result type is the caller's to keep: only "is a function" is checkable). */
const pidFunction = <A>() =>
  Schema.declare((u: unknown): u is (pid: number) => A => typeof u === "function", { identifier: "function" })

const ProcessProbeFields = {
  instanceId: optionalField(Schema.String, "a string"),
  isProcessAlive: optionalField(pidFunction<boolean>(), "a function of a pid"),
  processStartTime: optionalField(pidFunction<string | undefined>(), "a function of a pid"),
  readOnly: optionalField(Schema.Boolean, "a boolean")
}

/** `FileSessionPersistence.Options`. @internal */
export const FileOptionsSchema = Schema.Struct({
  directory: requiredField(Schema.String, "a directory path"),
  durability: optionalField(Durability, `"fsync" or "buffered"`),
  readChunkBytes: optionalField(PositiveInt, byteCount),
  clearStaleLocks: optionalField(Schema.Boolean, "a boolean"),
  ...ProcessProbeFields,
  ...SizeLimitsSchema.fields
}).annotations(anObject("options"))

/** The lease ttl: renewed every ttl/3, so a ttl under 3 ms would renew every 0 ms. */
const LeaseTtl = DurationInput.pipe(
  Schema.filter((ttl) => Duration.isFinite(ttl) && Duration.toMillis(ttl) >= 3)
)

/** `SqlSessionPersistence.Options`. @internal */
export const SqlOptionsSchema = Schema.Struct({
  durability: optionalField(Durability, `"fsync" or "buffered"`),
  leaseTtl: optionalField(LeaseTtl, "a finite duration of at least 3 ms (e.g. \"30 seconds\")"),
  ...ProcessProbeFields,
  ...SizeLimitsSchema.fields
}).annotations(anObject("options"))

/** The memory layer's options. @internal */
export const MemoryOptionsSchema = Schema.Struct({
  instanceId: optionalField(Schema.String, "a string"),
  ...SizeLimitsSchema.fields
}).annotations(anObject("options"))

const refusal = (layer: string) => (error: ParseResult.ParseError) =>
  new PersistenceError({ reason: `invalid ${layer} options: ${formatParseError(error)}; fix them where the layer is built` })

const decodeFile = Schema.decodeUnknownEither(FileOptionsSchema, decodeOptions)
const decodeSql = Schema.decodeUnknownEither(SqlOptionsSchema, decodeOptions)
const decodeMemory = Schema.decodeUnknownEither(MemoryOptionsSchema, decodeOptions)

/** The file layer's validated options and limits, or `PersistenceError` naming each bad field. @internal */
export const decodeFileOptions = (
  options: unknown
): Either.Either<typeof FileOptionsSchema.Type & { readonly limits: Limits }, PersistenceError> =>
  Either.match(decodeFile(options), {
    onLeft: (error) => Either.left(refusal("FileSessionPersistence")(error)),
    onRight: (decoded) => Either.right({ ...decoded, limits: limitsFrom(decoded) })
  })

/** The SQL layer's validated options (`leaseTtl` as a `Duration`) and limits. @internal */
export const decodeSqlOptions = (
  options: unknown
): Either.Either<typeof SqlOptionsSchema.Type & { readonly limits: Limits }, PersistenceError> =>
  Either.match(decodeSql(options ?? {}), {
    onLeft: (error) => Either.left(refusal("SqlSessionPersistence")(error)),
    onRight: (decoded) => Either.right({ ...decoded, limits: limitsFrom(decoded) })
  })

/** The memory layer's validated options and limits. @internal */
export const decodeMemoryOptions = (
  options: unknown
): Either.Either<typeof MemoryOptionsSchema.Type & { readonly limits: Limits }, PersistenceError> =>
  Either.match(decodeMemory(options ?? {}), {
    onLeft: (error) => Either.left(refusal("SessionPersistence.layerMemory")(error)),
    onRight: (decoded) => Either.right({ ...decoded, limits: limitsFrom(decoded) })
  })

// -------------------------------------------------------------------------------------------------
// Tool definitions (TOOL-01, PKG-03)

const isStructSchema = (u: unknown): u is Schema.Struct<Schema.Struct.Fields> =>
  Schema.isSchema(u) && "fields" in u && u.ast._tag === "TypeLiteral"

const StructSchema = Schema.declare(isStructSchema, { identifier: "Schema.Struct" })

const PositiveDuration = DurationInput.pipe(Schema.filter((d) => Duration.greaterThan(d, Duration.zero)))

/** What `Tool.make` takes. @internal */
export const ToolDefinitionSchema = Schema.Struct({
  name: requiredField(Schema.String, "a string"),
  description: requiredField(Schema.String, "a string"),
  parameters: requiredField(StructSchema, "a Schema.Struct of the tool's parameters"),
  mode: optionalField(Schema.Literal("parallel", "exclusive"), `"parallel" or "exclusive"`),
  run: requiredField(AnyFunction, "a function returning an Effect"),
  timeout: optionalField(
    PositiveDuration,
    "a positive duration (e.g. \"30 seconds\" or a number of milliseconds)"
  ),
  approval: optionalField(
    Schema.Union(Schema.Literal("always"), AnyFunction),
    `"always" or a function (args, context) => Effect<boolean>`
  ),
  approvalTimeout: optionalField(
    PositiveDuration,
    "a positive duration (e.g. \"10 minutes\" or a number of milliseconds)"
  )
}).annotations(anObject("a tool definition"))

const decodeToolSchema = Schema.decodeUnknownEither(ToolDefinitionSchema, decodeOptions)

/**
 * A tool definition, checked; a bad one is a `TypeError` naming the tool and each bad field, thrown
 * where the tool is defined (a programming error, found when the module loads).
 *
 * @internal
 */
export const decodeToolDefinition = (definition: unknown): typeof ToolDefinitionSchema.Type => {
  const decoded = decodeToolSchema(definition)
  if (Either.isRight(decoded)) return decoded.right
  const name = typeof definition === "object" && definition !== null ? (definition as { name?: unknown }).name : undefined
  throw new TypeError(
    `Tool.make: the definition of tool ${show(name)} is invalid: ${formatParseError(decoded.left)}`
  )
}
