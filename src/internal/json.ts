/**
 * Lossless JSON boundary (EVT-03): validates a value and returns a deep-frozen plain copy.
 *
 * @internal
 */

/** @internal */
export type JsonValue = null | boolean | number | string | ReadonlyArray<JsonValue> | { readonly [key: string]: JsonValue }

/** @internal */
export interface JsonProblem {
  readonly path: string
  readonly reason: string
}

const describePath = (path: ReadonlyArray<string | number>): string =>
  path.length === 0 ? "$" : "$" + path.map((p) => (typeof p === "number" ? `[${p}]` : `.${p}`)).join("")

class Invalid {
  constructor(readonly path: ReadonlyArray<string | number>, readonly reason: string) {}
}

/**
 * The deepest nesting the codec accepts (DUR-10): deeper values are refused at append and, since the
 * reader applies the same rule, never stored.
 *
 * @internal
 */
export const MAX_DEPTH = 1_000

/**
 * Whether an object's fields are all its own: its prototype is `Object.prototype` or `null`, or the
 * `Object.prototype` of another realm (a prototype whose own prototype is `null` and whose
 * `constructor` is a function named `Object`). Anything else would lose the fields it inherits when
 * copied (DUR-10).
 */
const isPlainObject = (value: object): boolean => {
  const proto = Object.getPrototypeOf(value)
  if (proto === null || proto === Object.prototype) return true
  if (Object.getPrototypeOf(proto) !== null) return false
  const constructor = Object.getOwnPropertyDescriptor(proto, "constructor")?.value
  return typeof constructor === "function" && constructor.name === "Object"
}

const describeInstance = (value: object): string => {
  const proto = Object.getPrototypeOf(value)
  const constructor = proto === null ? undefined : Object.getOwnPropertyDescriptor(proto, "constructor")?.value
  return typeof constructor === "function" && constructor.name !== ""
    ? `an instance of ${constructor.name} is not plain JSON`
    : "an object that inherits fields from its prototype is not plain JSON (its inherited fields would be lost)"
}

/**
 * The roots of the copies `snapshot` returned. A copy is plain lossless JSON and deep-frozen, so it
 * stays valid forever: a later snapshot of it (or of a value that embeds it, such as an event that
 * carries an already validated message) returns it as it is instead of copying it again.
 */
const validated = new WeakSet<object>()

/** Where a copy is: the path for errors, the containers above it (cycles, depth) and the depth limit. */
interface Walk {
  readonly path: Array<string | number>
  readonly ancestors: Array<object>
  readonly maxDepth: number
}

const copy = (value: unknown, walk: Walk): JsonValue => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return value
    case "number": {
      if (!Number.isFinite(value)) throw new Invalid(walk.path, `${value} is not a finite number`)
      if (Object.is(value, -0)) throw new Invalid(walk.path, "-0 does not survive JSON")
      return value
    }
    case "object": {
      if (value === null) return null
      if (validated.has(value)) return value as JsonValue
      // The ancestors are as many as the depth: a short array beats a Set here.
      const { ancestors, path } = walk
      if (ancestors.includes(value)) throw new Invalid(path, "cycle")
      if (ancestors.length >= walk.maxDepth) throw new Invalid(path, `nested deeper than ${MAX_DEPTH} levels`)
      ancestors.push(value)
      const out = Array.isArray(value) ? copyArray(value, walk) : copyObject(value, walk)
      // Only on success: a failed copy is abandoned whole, ancestors included.
      ancestors.pop()
      return out
    }
    case "undefined":
      throw new Invalid(walk.path, "undefined is not JSON")
    case "bigint":
      throw new Invalid(walk.path, "BigInt is not JSON")
    case "function":
      throw new Invalid(walk.path, "functions are not JSON")
    case "symbol":
      throw new Invalid(walk.path, "symbols are not JSON")
  }
  throw new Invalid(walk.path, `unsupported value of type ${typeof value}`)
}

const copyArray = (value: ReadonlyArray<unknown>, walk: Walk): JsonValue => {
  const path = walk.path
  const keys = Object.keys(value)
  if (keys.length !== value.length) throw new Invalid(path, "sparse array or array with extra properties")
  const items: Array<JsonValue> = new Array(value.length)
  for (let i = 0; i < value.length; i++) {
    if (!(i in value)) throw new Invalid(path, "sparse array")
    path.push(i)
    items[i] = copy(value[i], walk)
    path.pop()
  }
  return Object.freeze(items)
}

const copyObject = (value: object, walk: Walk): JsonValue => {
  const path = walk.path
  if (!isPlainObject(value)) throw new Invalid(path, describeInstance(value))
  if (Object.getOwnPropertySymbols(value).length > 0) throw new Invalid(path, "symbol keys")
  const fields: Record<string, JsonValue> = {}
  for (const key of Object.keys(value)) {
    path.push(key)
    const v = copy((value as Record<string, unknown>)[key], walk)
    path.pop()
    // DUR-03: assigning "__proto__" would set the prototype instead of adding the key.
    if (key === "__proto__") {
      Object.defineProperty(fields, key, { value: v, enumerable: true, writable: true, configurable: true })
    } else {
      fields[key] = v
    }
  }
  return Object.freeze(fields)
}

/**
 * Validates `value` against the lossless JSON domain (at most `maxDepth` containers deep, DUR-10)
 * and returns a deep-frozen copy, or the first problem found; it never throws, whatever getters or
 * proxies the value holds. A value that is itself the result of an earlier snapshot is returned as it
 * is (it is frozen, so nobody can have changed it since).
 *
 * @internal
 */
export const snapshot = (value: unknown, maxDepth: number = MAX_DEPTH): { readonly _tag: "Right"; readonly value: JsonValue } | {
  readonly _tag: "Left"
  readonly problem: JsonProblem
} => {
  const path: Array<string | number> = []
  try {
    const out = copy(value, { path, ancestors: [], maxDepth })
    if (typeof out === "object" && out !== null) validated.add(out)
    return { _tag: "Right", value: out }
  } catch (e) {
    if (e instanceof Invalid) return { _tag: "Left", problem: { path: describePath(e.path), reason: e.reason } }
    // DUR-10: a throwing getter or a proxy trap refuses the value; it never crashes the caller
    return { _tag: "Left", problem: { path: describePath(path), reason: `reading the value threw (${describeThrown(e)})` } }
  }
}

const describeThrown = (e: unknown): string => {
  try {
    return e instanceof Error ? `${e.name}: ${e.message}` : String(e)
  } catch {
    return "an unprintable value"
  }
}

/**
 * Deep-freezes a value that is already known to be plain JSON (for example one produced by
 * `JSON.parse`), without copying.
 *
 * @internal
 */
export const deepFreeze = <A>(value: A): A => {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    if (Array.isArray(value)) {
      for (const item of value) deepFreeze(item)
    } else {
      for (const key in value) deepFreeze((value as Record<string, unknown>)[key])
    }
  }
  return value
}

/**
 * Whether a value that `JSON.parse` produced is lossless JSON, i.e. whether `snapshot` would accept
 * it. Such a value is already plain, dense and acyclic, so only its numbers can fail: `-0`, and
 * literals too large for a double, which parse to ±Infinity.
 *
 * @internal
 */
export const isLosslessParsedJson = (value: unknown, maxDepth: number = MAX_DEPTH): boolean => {
  switch (typeof value) {
    case "number":
      return Number.isFinite(value) && !Object.is(value, -0)
    case "object": {
      if (value === null) return true
      // DUR-10: as deep as `snapshot` accepts, no deeper
      if (maxDepth <= 0) return false
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) if (!isLosslessParsedJson(value[i], maxDepth - 1)) return false
        return true
      }
      for (const key in value) {
        if (!isLosslessParsedJson((value as Record<string, unknown>)[key], maxDepth - 1)) return false
      }
      return true
    }
    case "string":
    case "boolean":
      return true
    default:
      return false
  }
}

/**
 * Whether a value that `JSON.parse` produced nests containers deeper than `maxDepth` (DUR-10,
 * SEC-05): checked before anything walks the value recursively, so a deep body is refused instead
 * of overflowing the stack. Never recurses deeper than `maxDepth + 1`.
 *
 * @internal
 */
export const nestsDeeperThan = (value: unknown, maxDepth: number = MAX_DEPTH): boolean => {
  if (typeof value !== "object" || value === null) return false
  if (maxDepth <= 0) return true
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (nestsDeeperThan(value[i], maxDepth - 1)) return true
    return false
  }
  for (const key in value) if (nestsDeeperThan((value as Record<string, unknown>)[key], maxDepth - 1)) return true
  return false
}
