/**
 * HTTP-02: the JSON problem body of a typed error, `{type: "effect-agent/<Tag>", title: "<Tag>",
 * status, detail: <message>}` plus the error's own fields as extension members (RFC 9457 allows
 * them), so a client decodes the body back into the same `Schema.TaggedError` the server failed
 * with.
 *
 * @internal
 */
import { HttpApiSchema } from "@effect/platform"
import { ParseResult, Schema } from "effect"

/** What every problem body has. @internal */
export interface ProblemBody {
  readonly type: `effect-agent/${string}`
  readonly title: string
  readonly status: number
  readonly detail: string
}

/** A `Schema.TaggedError` class: its schema, tag and fields. @internal */
export interface ErrorClass<A extends { readonly _tag: string; readonly message: string }, I>
  extends Schema.Schema<A, I>
{
  readonly _tag: string
  readonly fields: Schema.Struct.Fields
}

/**
 * The problem schema of an error class, with the HTTP status it is sent with. Fields in `omit` are
 * not sent (a `cause` may hold what a server must not show); decoding fills them with the detail.
 *
 * @internal
 */
export const problem = <A extends { readonly _tag: string; readonly message: string }, I>(
  error: ErrorClass<A, I>,
  status: number,
  options?: { readonly omit?: ReadonlyArray<string> | undefined }
): Schema.Schema<A, ProblemBody> => {
  const tag = error._tag
  const omitted = new Set(["_tag", ...(options?.omit ?? [])])
  const extension: Record<string, Schema.Struct.Field> = {}
  for (const [name, field] of Object.entries(error.fields)) if (!omitted.has(name)) extension[name] = field
  const wire = Schema.encodedSchema(
    Schema.Struct({
      ...extension,
      type: Schema.Literal(`effect-agent/${tag}`),
      title: Schema.Literal(tag),
      status: Schema.Literal(status),
      detail: Schema.String
    })
  )
  const decodeError = ParseResult.decodeUnknown(error)
  const encodeError = ParseResult.encodeUnknown(error)
  return Schema.transformOrFail(wire, Schema.typeSchema(error), {
    strict: false,
    decode: (body) => {
      const { detail, status: _status, title: _title, type: _type, ...fields } = body as ProblemBody & Record<string, unknown>
      const filled: Record<string, unknown> = { ...fields, _tag: tag }
      for (const name of omitted) if (name !== "_tag") filled[name] = detail
      return decodeError(filled)
    },
    encode: (value) =>
      ParseResult.map(encodeError(value), (encoded) => {
        const fields: Record<string, unknown> = {}
        for (const [name, field] of Object.entries(encoded as Record<string, unknown>)) {
          if (!omitted.has(name)) fields[name] = field
        }
        return { ...fields, type: `effect-agent/${tag}`, title: tag, status, detail: value.message }
      })
  }).annotations({ ...HttpApiSchema.annotations({ status }), identifier: `${tag}Problem` })
}

// -------------------------------------------------------------------------------------------------
// SEC-03: what a problem body may say

/** A problem body with no error class behind it (a route not found, a defect). @internal */
export const plainProblem = (tag: string, status: number, detail: string): ProblemBody => ({
  type: `effect-agent/${tag}`,
  title: tag,
  status,
  detail
})

/**
 * An absolute path: POSIX (`/…`, not inside a word or a relative path), Windows (`C:\…`) or a
 * `file:` URL, up to the first character that cannot be part of it in a message.
 */
const absolutePath = /(?<![\w.~-])(?:file:\/\/\/?|[A-Za-z]:[\\/]|\/)[^\s"'`()<>[\]{},;|]*/g

/**
 * `text` with every absolute path replaced by its last segment (SEC-03): a server's install and
 * data directories are not a client's business; the process's log keeps the full text.
 *
 * @internal
 */
export const withoutPaths = (text: string): string =>
  text.replace(absolutePath, (path) => {
    const segments = path.split(/[\\/]/).filter((segment) => segment !== "" && segment !== "file:")
    return segments.length === 0 ? "<path>" : segments[segments.length - 1]!
  })

/** Every string of a problem body (the detail and the error's fields) without absolute paths. @internal */
export const scrubbed = (body: unknown): unknown => {
  if (typeof body === "string") return withoutPaths(body)
  if (Array.isArray(body)) return body.map(scrubbed)
  if (typeof body === "object" && body !== null) {
    const out: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(body)) {
      Object.defineProperty(out, key, { value: scrubbed(value), enumerable: true, writable: true, configurable: true })
    }
    return out
  }
  return body
}

// -------------------------------------------------------------------------------------------------
// SEC-03: a decode failure in plain words

/** One issue of a decode failure, as the platform reports it (`ParseResult.ArrayFormatter`). @internal */
export interface DecodeIssue {
  readonly _tag: string
  readonly path: ReadonlyArray<PropertyKey>
  readonly message: string
}

/** `options.maxTokens`, `content[0].text`; the whole body when the path is empty. */
const fieldName = (path: ReadonlyArray<PropertyKey>): string =>
  path.length === 0
    ? "the request body"
    : path.map((key, i) => (typeof key === "number" ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`)).join("")

/** What a schema expected, in words (the schema's own rendering of a type is not for clients). */
const plainExpected = (expected: string): string => {
  const text = expected.trim()
  const words: Record<string, string> = {
    string: "a string",
    number: "a number",
    boolean: "true or false",
    null: "null",
    JsonValue: "a JSON value",
    JsonRecord: "a JSON object"
  }
  if (words[text] !== undefined) return words[text]
  if (/^"[^"]*"$/.test(text) || /^-?\d/.test(text) || text === "true" || text === "false") return text
  if (/^"[^"]*"( \| "[^"]*")+$/.test(text)) return `one of ${text.split(" | ").join(", ")}`
  if (text.startsWith("ReadonlyArray<") || text.startsWith("readonly [") || text.startsWith("[")) return "an array"
  if (text.startsWith("{")) return "an object"
  if (/^an? [a-z]/.test(text)) return text
  // a named schema of the API (`SendRequest`, `AgentOptions`): each is a JSON object
  if (/^[A-Z][A-Za-z]*$/.test(text)) return "a JSON object"
  return "a value of another kind"
}

/** A value as the message showed it, cut short. */
const plainActual = (actual: string): string => (actual.length > 40 ? `${actual.slice(0, 37)}...` : actual)

/** The issues at one path, as one sentence (a union's alternatives become "one of …"). */
const describeAt = (issues: ReadonlyArray<DecodeIssue>): string => {
  const missing = issues.find((issue) => issue._tag === "Missing")
  if (missing !== undefined) return "is required"
  if (issues.some((issue) => issue._tag === "Unexpected")) return "is not allowed"
  // a refinement failed: the value had the right type, so that alternative is the one meant
  const refined = issues.filter((issue) => issue._tag === "Refinement" || issue._tag === "Transformation")
  const chosen = refined.length > 0 ? refined : issues
  const expected: Array<string> = []
  let actual: string | undefined
  for (const issue of chosen) {
    const cut = issue.message.lastIndexOf(", actual ")
    if (!issue.message.startsWith("Expected ") || cut === -1) return issue.message
    const word = plainExpected(issue.message.slice("Expected ".length, cut))
    if (!expected.includes(word)) expected.push(word)
    actual ??= plainActual(issue.message.slice(cut + ", actual ".length))
  }
  const wanted = expected.length === 1
    ? expected[0]!
    : `${expected.slice(0, -1).join(", ")} or ${expected[expected.length - 1]!}`
  return `expected ${wanted}, got ${actual ?? "something else"}`
}

const isPrefix = (prefix: ReadonlyArray<PropertyKey>, path: ReadonlyArray<PropertyKey>): boolean =>
  prefix.length < path.length && prefix.every((key, i) => path[i] === key)

/**
 * A decode failure as a client reads it (SEC-03): each field that is wrong, by its path, with
 * what was expected and what came, in plain words — the most specific issues only (a union's
 * alternatives that failed higher up are not listed), at most three.
 *
 * @internal
 */
export const readableIssues = (issues: ReadonlyArray<DecodeIssue>): string => {
  const leaves = issues.filter((issue) => !issues.some((other) => isPrefix(issue.path, other.path)))
  const byPath = new Map<string, Array<DecodeIssue>>()
  for (const issue of leaves) {
    const key = fieldName(issue.path)
    const group = byPath.get(key) ?? []
    group.push(issue)
    byPath.set(key, group)
  }
  const sentences = Array.from(byPath, ([field, group]) =>
    field === "the request body" && group.every((issue) => !issue.message.startsWith("Expected "))
      ? describeAt(group)
      : `${field === "the request body" ? field : `field ${field}`}: ${describeAt(group)}`)
  if (sentences.length === 0) return "the request does not have the expected shape"
  return sentences.slice(0, 3).join("; ") + (sentences.length > 3 ? ` (and ${sentences.length - 3} more)` : "")
}
