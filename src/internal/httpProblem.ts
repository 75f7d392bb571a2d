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
