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

const copy = (value: unknown, path: Array<string | number>, ancestors: Set<object>): JsonValue => {
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
      if (ancestors.has(value)) throw new Invalid(path, "cycle")
      ancestors.add(value)
      try {
        if (Array.isArray(value)) {
          const keys = Object.keys(value)
          if (keys.length !== value.length) {
            throw new Invalid(path, "sparse array or array with extra properties")
          }
          const out: Array<JsonValue> = new Array(value.length)
          for (let i = 0; i < value.length; i++) {
            if (!(i in value)) throw new Invalid(path, "sparse array")
            path.push(i)
            out[i] = copy(value[i], path, ancestors)
            path.pop()
          }
          return Object.freeze(out)
        }
        if (!isPlainObject(value)) {
          const name = (value as { constructor?: { name?: string } }).constructor?.name ?? "unknown"
          throw new Invalid(path, `instance of ${name} is not plain JSON`)
        }
        if (Object.getOwnPropertySymbols(value).length > 0) throw new Invalid(path, "symbol keys")
        const out: Record<string, JsonValue> = {}
        for (const key of Object.keys(value)) {
          path.push(key)
          const v = copy((value as Record<string, unknown>)[key], path, ancestors)
          path.pop()
          Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true })
        }
        return Object.freeze(out)
      } finally {
        ancestors.delete(value)
      }
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
 * first problem found.
 *
 * @internal
 */
export const snapshot = (value: unknown): { readonly _tag: "Right"; readonly value: JsonValue } | {
  readonly _tag: "Left"
  readonly problem: JsonProblem
} => {
  try {
    return { _tag: "Right", value: copy(value, [], new Set()) }
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
