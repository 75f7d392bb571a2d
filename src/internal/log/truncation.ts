/**
 * DOC-05: what the backends share when they drop a corrupt tail — the check that none of the
 * records to drop was written on purpose by a newer version ("newer, not corrupt": such a record
 * is refused as `SessionFormatUnsupported`, never dropped).
 *
 * @internal
 */
import { Either } from "effect"
import type { SessionId } from "../../Message.js"
import * as SessionError from "../../SessionError.js"
import { parseJson, storedEvent } from "./eventCodec.js"

/** One stored record to drop: its line (1 is the header) and its text. @internal */
export interface DroppedRecord {
  readonly line: number
  readonly text: string
}

/**
 * The refusal of a cut that would drop a record of a newer format, if one of `records` is: each is
 * checked against its own seq, so only what a newer version could have written counts (an unknown
 * event type, an unknown field on a known type), not the damage that made the cut.
 *
 * @internal
 */
export const newerFormatAmong = (
  id: SessionId,
  records: Iterable<DroppedRecord>
): SessionError.SessionFormatUnsupported | undefined => {
  for (const record of records) {
    const json = parseJson(record.text)
    if (Either.isLeft(json) || typeof json.right !== "object" || json.right === null) continue
    const seq = (json.right as { readonly seq?: unknown }).seq
    if (typeof seq !== "number") continue
    const event = storedEvent(json.right, seq)
    if (Either.isLeft(event) && event.left._tag === "Unsupported") {
      return new SessionError.SessionFormatUnsupported({
        id,
        reason: `line ${record.line}: ${event.left.reason} — it is of a newer format, not corrupt, and ` +
          "--truncate-at-corruption never drops such a record"
      })
    }
  }
  return undefined
}

/** The lines of `data` (split at newlines; a last line without one is a torn tail, still a record). @internal */
export const recordsOf = (data: Uint8Array, firstLine: number): Array<DroppedRecord & { readonly bytes: number }> => {
  const decoder = new TextDecoder("utf-8")
  const out: Array<DroppedRecord & { readonly bytes: number }> = []
  let start = 0
  for (let i = 0; i <= data.length; i++) {
    if (i < data.length && data[i] !== 0x0a) continue
    if (i === data.length && start === data.length) break
    const end = i < data.length ? i + 1 : i
    out.push({ line: firstLine + out.length, text: decoder.decode(data.subarray(start, i)), bytes: end - start })
    start = end
  }
  return out
}
