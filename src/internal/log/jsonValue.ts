/**
 * The JSON a log stores (EVT-03), as types and Schemas: in a module of its own so that the modules
 * `SessionEvent` imports (messages, model settings) can use it too. `SessionEvent` re-exports both.
 *
 * @internal
 */
import { Schema } from "effect"

/**
 * A JSON value as stored in a log (EVT-03).
 *
 * @internal
 */
export type JsonValue = null | boolean | number | string | ReadonlyArray<JsonValue> | JsonRecord

/**
 * @internal
 */
export interface JsonRecord {
  readonly [key: string]: JsonValue
}

const JsonNumber = Schema.Number.pipe(
  Schema.finite(),
  Schema.filter((n) => !Object.is(n, -0) || "-0 does not survive JSON")
)

/**
 * Any lossless JSON value (EVT-03). Decoding checks the structure; the append path and stored-record
 * decoding also refuse sparse arrays and class instances.
 *
 * @internal
 */
export const JsonValue: Schema.Schema<JsonValue> = Schema.suspend(() =>
  Schema.Union(
    Schema.Null,
    Schema.Boolean,
    JsonNumber,
    Schema.String,
    Schema.Array(JsonValue),
    Schema.Record({ key: Schema.String, value: JsonValue })
  )
)

/**
 * @internal
 */
export const JsonRecord: Schema.Schema<JsonRecord> = Schema.Record({ key: Schema.String, value: JsonValue })
