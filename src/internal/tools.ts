/**
 * Tool registries (per agent and global), the tool schema the model sees, argument decoding and
 * the per-agent shadowing of global tools (TOOL-01..03).
 *
 * @internal
 */
import { Effect, Either, JSONSchema, ParseResult, Ref, Schema } from "effect"
import type { Scope } from "effect"
import { AgentInactive, DuplicateTool } from "../AgentError.js"
import type { ToolSchema } from "../Model.js"
import type { JsonRecord, JsonValue } from "../SessionEvent.js"
import type { Any, Tool, ToolRegistryShape } from "../Tool.js"
import { deepFreeze } from "./json.js"

// A tool without parameters: `JSONSchema.make(Schema.Struct({}))` is "any object or array", which
// providers refuse as a function's parameters.
const emptyParameters: JsonRecord = deepFreeze({ type: "object", properties: {}, required: [] })

const jsonSchemas = new WeakMap<Schema.Struct<any>, JsonRecord>()

/**
 * The JSON schema of a tool's parameters, as plain frozen JSON without `$schema` (so that a
 * request's JSON form is stable). Memoized per parameters schema. A schema that has no JSON
 * schema (a declaration without a `jsonSchema` annotation) is a defect of the tool's definition.
 *
 * @internal
 */
export const jsonSchemaOf = (parameters: Schema.Struct<any>): JsonRecord => {
  const cached = jsonSchemas.get(parameters)
  if (cached !== undefined) return cached
  let schema = emptyParameters
  if (Object.keys(parameters.fields).length > 0 || parameters.records.length > 0) {
    // A JSON round trip drops `undefined`s and prototypes: what is left is plain JSON.
    const plain: JsonRecord = JSON.parse(JSON.stringify(JSONSchema.make(parameters)))
    const out: Record<string, JsonValue> = {}
    for (const [key, value] of Object.entries(plain)) if (key !== "$schema") out[key] = value
    schema = deepFreeze(out)
  }
  jsonSchemas.set(parameters, schema)
  return schema
}

/**
 * A tool as the model sees it.
 *
 * @internal
 */
export const toSchema = (tool: Any): ToolSchema =>
  Object.freeze({
    name: tool.name,
    description: tool.description,
    parameters: tool.parameters,
    jsonSchema: jsonSchemaOf(tool.parameters)
  })

/**
 * Decodes a tool call's raw argument text with the tool's Schema. A failure is the text the model
 * sees in the error result (TOOL-01), never a crash. Empty argument text counts as `{}`, since
 * some providers send nothing for a tool without parameters.
 *
 * @internal
 */
export const decodeArguments = <Fields extends Schema.Struct.Fields>(
  tool: { readonly name: string; readonly parameters: Schema.Struct<Fields> },
  raw: string
): Either.Either<Schema.Struct.Type<Fields>, string> => {
  let json: unknown
  try {
    json = raw.trim() === "" ? {} : JSON.parse(raw)
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error)
    return Either.left(
      `Invalid arguments for tool ${JSON.stringify(tool.name)}: the arguments are not valid JSON (${reason}). ` +
        "Call the tool again with a JSON object that matches its parameters."
    )
  }
  // Arguments are decoded synchronously, from the AST: a parameter schema that needs a service
  // fails to decode (ParseResult reports it) instead of being run without it.
  const parameters = Schema.make<Schema.Struct.Type<Fields>, Schema.Struct.Encoded<Fields>, never>(tool.parameters.ast)
  return Either.mapLeft(
    Schema.decodeUnknownEither(parameters, { errors: "all", onExcessProperty: "ignore" })(json),
    (error) =>
      `Invalid arguments for tool ${JSON.stringify(tool.name)}:\n${ParseResult.TreeFormatter.formatErrorSync(error)}\n` +
      "Call the tool again with arguments that match its parameters."
  )
}

/**
 * Fails `AgentInactive{id}` when `isActive` says the owner is gone; never fails when `isActive` is
 * undefined (the global instances).
 *
 * @internal
 */
export const checkActive = (
  options: { readonly isActive: Effect.Effect<boolean> | undefined; readonly id?: string | undefined }
): Effect.Effect<void, AgentInactive> => {
  const isActive = options.isActive
  if (isActive === undefined) return Effect.void
  return Effect.flatMap(
    isActive,
    (active) => active ? Effect.void : Effect.fail(new AgentInactive({ id: options.id ?? "" }))
  )
}

/**
 * A tool registry. `register` provides the tool's requirements from the registering fiber's
 * context, so a listed tool needs nothing; the registration lasts until the caller's Scope closes.
 * Names are unique per registry. The per-agent registry (`isActive` given) refuses registrations
 * once the agent is inactive; the global one (`isActive` undefined) never fails that way.
 * Synchronous, so an agent's registries exist before anything can register.
 *
 * @internal
 */
export const makeToolRegistry = (options: {
  readonly isActive: Effect.Effect<boolean> | undefined
  readonly id?: string | undefined
}): ToolRegistryShape => {
  const tools = Ref.unsafeMake<ReadonlyArray<Any>>([])
  const active = checkActive(options)

  const register = <F extends Schema.Struct.Fields, E, R>(
    tool: Tool<F, E, R>
  ): Effect.Effect<void, DuplicateTool | AgentInactive, Scope.Scope | R> =>
    Effect.gen(function*() {
      yield* active
      // Fail at registration, not in the middle of a turn, when the parameters have no JSON schema.
      yield* Effect.sync(() => jsonSchemaOf(tool.parameters))
      const services = yield* Effect.context<R>()
      const registered: Any = {
        name: tool.name,
        description: tool.description,
        parameters: tool.parameters,
        mode: tool.mode,
        run: (args, context) => Effect.provide(tool.run(args, context), services)
      }
      Object.freeze(registered)
      yield* Effect.acquireRelease(
        Ref.modify(tools, (list): [Effect.Effect<void, DuplicateTool>, ReadonlyArray<Any>] =>
          list.some((existing) => existing.name === tool.name)
            ? [Effect.fail(new DuplicateTool({ name: tool.name })), list]
            : [Effect.void, [...list, registered]]).pipe(Effect.flatten),
        () => Ref.update(tools, (list) => list.filter((existing) => existing !== registered))
      )
    }).pipe(Effect.withSpan("ToolRegistry.register", { attributes: { name: tool.name } }))

  return { register, list: Ref.get(tools) }
}

/**
 * The tools an agent offers: global tools first, in registration order, except those an
 * agent's own tool shadows (same name); then the agent's tools, in registration order.
 *
 * @internal
 */
export const resolveTools = (global: ReadonlyArray<Any>, perAgent: ReadonlyArray<Any>): ReadonlyArray<Any> => {
  if (perAgent.length === 0) return global
  const own = new Set(perAgent.map((tool) => tool.name))
  return [...global.filter((tool) => !own.has(tool.name)), ...perAgent]
}
