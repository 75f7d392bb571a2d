/**
 * Tool registries (per agent and global), the tool schema the model sees, argument decoding and
 * the per-agent shadowing of global tools (TOOL-01..03).
 *
 * @internal
 */
import {
  Context,
  Effect,
  Either,
  ExecutionStrategy,
  Exit,
  JSONSchema,
  Option,
  ParseResult,
  Ref,
  Schema,
  Scope,
  Tracer
} from "effect"
import { AgentInactive, DuplicateTool } from "../../AgentError.js"
import type { ToolSchema } from "../../Model.js"
import type { JsonRecord, JsonValue } from "../../SessionEvent.js"
import type { Any, Approval, Requirements, Tool, Toolkit, ToolRegistryShape, Unknown } from "../../Tool.js"
import { deepFreeze } from "../json.js"

// A tool without parameters: `JSONSchema.make(Schema.Struct({}))` is "any object or array", which
// providers refuse as a function's parameters.
const emptyParameters: JsonRecord = deepFreeze({ type: "object", properties: {}, required: [] })

const jsonSchemas = new WeakMap<Schema.Struct<any>, JsonRecord>()

// -------------------------------------------------------------------------------------------------
// DUR-03: a `__proto__` key in a model's arguments, or a parameter named `__proto__`, stays an own
// data property. Schema builds its outputs (and `JSONSchema.make` its `properties`) by assignment,
// which sets the prototype instead: such a parameter is handled under a stand-in name, and any
// `__proto__` key the decoded output lost is put back where the arguments had it.

/** The stand-in name of a parameter named `__proto__` while Schema handles it. */
const PROTO_STAND_IN = "__effect_agent_proto_parameter__"

const hasOwn = (o: object, key: string): boolean => Object.prototype.hasOwnProperty.call(o, key)

/** Sets an own, enumerable data property (never the prototype, whatever the key). */
const defineField = (o: object, key: string, value: unknown): void => {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true })
}

const standInStructs = new WeakMap<Schema.Struct<any>, Schema.Struct<any>>()

/** `parameters` with its `__proto__` parameter renamed to the stand-in (memoized), or itself. */
const withStandIn = (parameters: Schema.Struct<any>): Schema.Struct<any> => {
  if (!hasOwn(parameters.fields, "__proto__")) return parameters
  const cached = standInStructs.get(parameters)
  if (cached !== undefined) return cached
  const fields: Record<string, Schema.Struct.Field> = {}
  for (const key of Object.keys(parameters.fields)) {
    fields[key === "__proto__" ? PROTO_STAND_IN : key] = parameters.fields[key]
  }
  const renamed = Schema.Struct(fields, ...parameters.records).annotations(parameters.ast.annotations)
  standInStructs.set(parameters, renamed)
  return renamed
}

/** Renames the stand-in back to `__proto__` in a JSON schema's `properties` and `required`. */
const restoreStandInName = (value: JsonValue): JsonValue => {
  if (Array.isArray(value)) return value.map((item) => item === PROTO_STAND_IN ? "__proto__" : restoreStandInName(item))
  if (typeof value !== "object" || value === null) return value
  const out: Record<string, JsonValue> = {}
  for (const [key, item] of Object.entries(value)) defineField(out, key === PROTO_STAND_IN ? "__proto__" : key, restoreStandInName(item))
  return out
}

/**
 * The JSON schema of a tool's parameters, as plain frozen JSON without `$schema` (so that a
 * request's JSON form is stable). Memoized per parameters schema. A schema that has no JSON
 * schema (a declaration without a `jsonSchema` annotation) is a defect of the tool's definition.
 * A parameter named `__proto__` keeps its schema (DUR-03).
 *
 * @internal
 */
export const jsonSchemaOf = (parameters: Schema.Struct<any>): JsonRecord => {
  const cached = jsonSchemas.get(parameters)
  if (cached !== undefined) return cached
  let schema = emptyParameters
  if (Object.keys(parameters.fields).length > 0 || parameters.records.length > 0) {
    // A JSON round trip drops `undefined`s and prototypes: what is left is plain JSON.
    const plain = JSON.parse(JSON.stringify(JSONSchema.make(withStandIn(parameters))))
    const out: Record<string, JsonValue> = {}
    for (const [key, value] of Object.entries(plain as JsonRecord)) {
      if (key !== "$schema") defineField(out, key, restoreStandInName(value))
    }
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
    jsonSchema: tool.jsonSchema ?? jsonSchemaOf(tool.parameters)
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
  const struct = withStandIn(tool.parameters)
  const parameters = Schema.make<Schema.Struct.Type<Fields>, Schema.Struct.Encoded<Fields>, never>(struct.ast)
  const input = struct === tool.parameters ? json : renameTopLevel(json, "__proto__", PROTO_STAND_IN)
  return Either.map(
    Either.mapLeft(
      Schema.decodeUnknownEither(parameters, { errors: "all", onExcessProperty: "ignore" })(input),
      (error) =>
        `Invalid arguments for tool ${JSON.stringify(tool.name)}:\n${
          ParseResult.TreeFormatter.formatErrorSync(error).replaceAll(PROTO_STAND_IN, "__proto__")
        }\n` +
        "Call the tool again with arguments that match its parameters."
    ),
    (decoded) => {
      const output = struct === tool.parameters ? decoded : renameTopLevel(decoded, PROTO_STAND_IN, "__proto__")
      restoreProtoKeys(json, output)
      return output as Schema.Struct.Type<Fields>
    }
  )
}

/** A copy of a plain object with its own key `from` renamed `to` (other values untouched). */
const renameTopLevel = <A>(value: A, from: string, to: string): A => {
  if (typeof value !== "object" || value === null || Array.isArray(value) || !hasOwn(value, from)) return value
  const out = {}
  for (const key of Object.keys(value)) defineField(out, key === from ? to : key, (value as Record<string, unknown>)[key])
  return out as A
}

/**
 * Walks the parsed arguments and the decoded output side by side: wherever the arguments have an
 * own `__proto__` key and the output object lost it to an assignment, the output gets its prototype
 * back and the key as an own data property (with the decoded value when Schema assigned an object,
 * else the argument's). Objects are matched by key, arrays by index (DUR-03).
 */
const restoreProtoKeys = (input: unknown, output: unknown): void => {
  if (typeof input !== "object" || input === null || typeof output !== "object" || output === null) return
  if (Array.isArray(input)) {
    if (!Array.isArray(output)) return
    for (let i = 0; i < input.length && i < output.length; i++) restoreProtoKeys(input[i], output[i])
    return
  }
  if (Array.isArray(output) || Object.isFrozen(output)) return
  const fields = input as Record<string, unknown>
  if (hasOwn(fields, "__proto__") && !hasOwn(output, "__proto__")) {
    const proto: unknown = Object.getPrototypeOf(output)
    // only an object the assignment made: a class instance keeps its prototype
    if (proto === null || proto === Object.prototype || isAssignedPrototype(proto)) {
      const value = proto !== Object.prototype ? proto : fields["__proto__"]
      Object.setPrototypeOf(output, Object.prototype)
      defineField(output, "__proto__", value)
      keepKeyOrder(output as Record<string, unknown>, Object.keys(fields))
    }
  }
  for (const key of Object.keys(fields)) {
    if (hasOwn(output, key)) restoreProtoKeys(fields[key], (output as Record<string, unknown>)[key])
  }
}

/** Re-adds `output`'s own fields so the keys `order` names come first, in that order. */
const keepKeyOrder = (output: Record<string, unknown>, order: ReadonlyArray<string>): void => {
  const keys = Object.keys(output)
  const ordered = [...order.filter((key) => hasOwn(output, key)), ...keys.filter((key) => !order.includes(key))]
  if (ordered.every((key, i) => key === keys[i])) return
  const values = ordered.map((key) => output[key])
  for (const key of keys) delete output[key]
  ordered.forEach((key, i) => defineField(output, key, values[i]))
}

/** A prototype that a `__proto__` assignment of decoded JSON made: plain data, not a class's. */
const isAssignedPrototype = (proto: unknown): boolean => {
  if (typeof proto !== "object" || proto === null) return false
  const above = Object.getPrototypeOf(proto)
  if (above !== Object.prototype && above !== null && !Array.isArray(proto)) return false
  const constructor = Object.getOwnPropertyDescriptor(proto, "constructor")?.value
  return typeof constructor !== "function"
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

/** a tool's approval predicate with the services of its registration provided. */
const approvalWith = <R>(approval: Approval<any, R>, services: Context.Context<R>): Approval<any> =>
  approval === "always" ? approval : (args, context) => Effect.provide(approval(args, context), services)

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
      if (tool.jsonSchema === undefined) yield* Effect.sync(() => jsonSchemaOf(tool.parameters))
      const services = yield* Effect.context<R>()
      const registered: Any = {
        name: tool.name,
        description: tool.description,
        parameters: tool.parameters,
        mode: tool.mode,
        // OBS-01: under the span of the call (its effect-agent.tool.call span), not the registration's
        run: (args, context) =>
          Effect.withFiberRuntime((fiber) => {
            const current = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
            const run = tool.run(args, context)
            return Effect.provide(Option.isSome(current) ? Effect.withParentSpan(run, current.value) : run, services)
          }),
        ...(tool.timeout !== undefined ? { timeout: tool.timeout } : {}),
        ...(tool.jsonSchema !== undefined ? { jsonSchema: tool.jsonSchema } : {}),
        ...(tool.approval !== undefined ? { approval: approvalWith(tool.approval, services) } : {}),
        ...(tool.approvalTimeout !== undefined ? { approvalTimeout: tool.approvalTimeout } : {})
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

  /**
   * PKG-03: all of `input` or none. The registrations go into one Scope forked from the caller's,
   * closed at once when one of them fails, so a failure leaves the registry as it was.
   */
  const registerAll = <const Tools extends ReadonlyArray<Unknown>>(
    input: Tools | Toolkit<Tools>
  ): Effect.Effect<void, DuplicateTool | AgentInactive, Scope.Scope | Requirements<Tools>> =>
    Effect.gen(function*() {
      const list: ReadonlyArray<Unknown> = isToolkit(input) ? input.tools : input
      const group = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
      yield* Effect.forEach(list, (tool) => register(tool), { discard: true }).pipe(
        Scope.extend(group),
        Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Scope.close(group, exit))
      )
    })

  return { register, registerAll, list: Ref.get(tools) }
}

const isToolkit = <Tools extends ReadonlyArray<Unknown>>(input: Tools | Toolkit<Tools>): input is Toolkit<Tools> =>
  !Array.isArray(input)

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
