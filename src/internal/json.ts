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

const isPlainObject = (value: object): boolean => {
  const proto = Object.getPrototypeOf(value)
  return proto === null || proto === Object.prototype || Object.getPrototypeOf(proto) === null
}

/**
 * The roots of the copies `snapshot` returned. A copy is plain lossless JSON and deep-frozen, so it
 * stays valid forever: a later snapshot of it (or of a value that embeds it, such as an event that
 * carries an already validated message) returns it as it is instead of copying it again.
 */
const validated = new WeakSet<object>()

const copy = (value: unknown, path: Array<string | number>, ancestors: Array<object>): JsonValue => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return value
    case "number": {
      if (!Number.isFinite(value)) throw new Invalid(path, `${value} is not a finite number`)
      if (Object.is(value, -0)) throw new Invalid(path, "-0 does not survive JSON")
      return value
    }
    case "object": {
      if (value === null) return null
      if (validated.has(value)) return value as JsonValue
      // The ancestors are as many as the depth: a short array beats a Set here.
      if (ancestors.includes(value)) throw new Invalid(path, "cycle")
      ancestors.push(value)
      let out: JsonValue
      if (Array.isArray(value)) {
        const keys = Object.keys(value)
        if (keys.length !== value.length) {
          throw new Invalid(path, "sparse array or array with extra properties")
        }
        const items: Array<JsonValue> = new Array(value.length)
        for (let i = 0; i < value.length; i++) {
          if (!(i in value)) throw new Invalid(path, "sparse array")
          path.push(i)
          items[i] = copy(value[i], path, ancestors)
          path.pop()
        }
        out = Object.freeze(items)
      } else {
        if (!isPlainObject(value)) {
          const name = (value as { constructor?: { name?: string } }).constructor?.name ?? "unknown"
          throw new Invalid(path, `instance of ${name} is not plain JSON`)
        }
        if (Object.getOwnPropertySymbols(value).length > 0) throw new Invalid(path, "symbol keys")
        const fields: Record<string, JsonValue> = {}
        for (const key of Object.keys(value)) {
          path.push(key)
          const v = copy((value as Record<string, unknown>)[key], path, ancestors)
          path.pop()
          // Assigning "__proto__" would set the prototype instead of adding the key.
          if (key === "__proto__") {
            Object.defineProperty(fields, key, { value: v, enumerable: true, writable: true, configurable: true })
          } else {
            fields[key] = v
          }
        }
        out = Object.freeze(fields)
      }
      // Only on success: a failed copy is abandoned whole, ancestors included.
      ancestors.pop()
      return out
    }
    case "undefined":
      throw new Invalid(path, "undefined is not JSON")
    case "bigint":
      throw new Invalid(path, "BigInt is not JSON")
    case "function":
      throw new Invalid(path, "functions are not JSON")
    case "symbol":
      throw new Invalid(path, "symbols are not JSON")
  }
  throw new Invalid(path, `unsupported value of type ${typeof value}`)
}

/**
 * Validates `value` against the lossless JSON domain and returns a deep-frozen copy, or the
 * first problem found. A value that is itself the result of an earlier snapshot is returned as it
 * is (it is frozen, so nobody can have changed it since).
 *
 * @internal
 */
export const snapshot = (value: unknown): { readonly _tag: "Right"; readonly value: JsonValue } | {
  readonly _tag: "Left"
  readonly problem: JsonProblem
} => {
  try {
    const out = copy(value, [], [])
    if (typeof out === "object" && out !== null) validated.add(out)
    return { _tag: "Right", value: out }
  } catch (e) {
    if (e instanceof Invalid) return { _tag: "Left", problem: { path: describePath(e.path), reason: e.reason } }
    throw e
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
export const isLosslessParsedJson = (value: unknown): boolean => {
  switch (typeof value) {
    case "number":
      return Number.isFinite(value) && !Object.is(value, -0)
    case "object": {
      if (value === null) return true
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) if (!isLosslessParsedJson(value[i])) return false
        return true
      }
      for (const key in value) if (!isLosslessParsedJson((value as Record<string, unknown>)[key])) return false
      return true
    }
    case "string":
    case "boolean":
      return true
    default:
      return false
  }
}
