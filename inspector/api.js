// @ts-check
/**
 * The inspector's client of the HTTP API (HTTP-01): JSON requests with the bearer token the user
 * gave (kept in `sessionStorage`), and a Server-Sent Events reader over `fetch` (an `EventSource`
 * cannot send a token) that reconnects with `Last-Event-ID`, so durable events arrive once each, in
 * order.
 */

/**
 * @typedef {{ inputTokens?: number, outputTokens?: number, reasoningTokens?: number, cachedInputTokens?: number }} Usage
 * @typedef {{
 *   _tag: "SessionInfo", id: string, status: "running" | "idle" | "passive",
 *   pending: { nextTurn: number, nextStep: number }, openTurn: boolean, eventCount: number, usage: Usage,
 *   createdAt: number, parentSession?: string, meta: Record<string, unknown>
 * }} SessionInfo
 * @typedef {Omit<SessionInfo, "meta"> & { meta?: Record<string, unknown>, metaTruncated?: true }} SessionListEntry
 * @typedef {{ _tag: "UnreadableSession", id: string, problem: string }} UnreadableSession
 * @typedef {{ sessions: Array<SessionListEntry | UnreadableSession>, next?: string }} SessionPage
 * @typedef {{ id: string, status: "idle" | "running", owner: string | null, initiator: string | null }} RegistryNode
 * @typedef {{ type: string, title: string, status: number, detail: string }} Problem
 * @typedef {{ seq: number, time: number, type: string, data: unknown }} DurableEvent
 *
 * @typedef {{ agent: string, initiator?: string }} LiveBase
 * @typedef {LiveBase & { _tag: "ModelDelta", turn: number, step: number, kind: "text" | "reasoning", text: string }} ModelDelta
 * @typedef {LiveBase & { _tag: "ToolCallStarted", seq?: number, turn: number, step: number, callId: string, name: string, arguments?: string }} ToolCallStarted
 * @typedef {LiveBase & { _tag: "ToolCallFinished", seq?: number, turn: number, step: number, callId: string, isError: boolean, summary?: string }} ToolCallFinished
 * @typedef {LiveBase & { _tag: "AssistantMessage", seq?: number, turn: number, step: number, text: string }} AssistantMessageLive
 * @typedef {LiveBase & { _tag: "ModelRetry", turn: number, step: number, attempt: number, code: string, delay: number }} ModelRetry
 * @typedef {LiveBase & { _tag: "AgentStatusChanged", status: "idle" | "running" }} AgentStatusChanged
 * @typedef {LiveBase & { _tag: "AgentError", turn?: number, step?: number, error: { message: string, code: string } }} AgentErrorLive
 * @typedef {LiveBase & { _tag: "Compacted", seq?: number }} CompactedLive
 * @typedef {ModelDelta | ToolCallStarted | ToolCallFinished | AssistantMessageLive | ModelRetry | AgentStatusChanged | AgentErrorLive | CompactedLive} LiveEvent
 */

const TOKEN_KEY = "effect-agent-inspector-token"

/** The bearer token the user entered, if any. */
export const token = () => sessionStorage.getItem(TOKEN_KEY) ?? ""

/** @param {string} value */
export const setToken = (value) => {
  if (value === "") sessionStorage.removeItem(TOKEN_KEY)
  else sessionStorage.setItem(TOKEN_KEY, value)
}

/**
 * A request the server refused, with its problem body (HTTP-02).
 */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {Problem} problem
   */
  constructor(status, problem) {
    super(problem.detail)
    this.status = status
    this.problem = problem
  }
}

/** @param {Record<string, string>} headers */
const withToken = (headers) => {
  const value = token()
  return value === "" ? headers : { ...headers, authorization: `Bearer ${value}` }
}

/**
 * The API's base: the page is served at `<base>/inspector/`, so the API is two levels up from the
 * page's own folder (this keeps working behind a proxy that mounts the server under a prefix).
 */
const base = new URL("../", new URL(".", location.href))

/** @param {string} path */
const url = (path) => new URL(path, base)

/** @param {Response} response */
const failure = async (response) => {
  const text = await response.text()
  /** @type {Problem} */
  let problem = { type: "effect-agent/Unknown", title: response.statusText, status: response.status, detail: text }
  try {
    const parsed = JSON.parse(text)
    if (typeof parsed === "object" && parsed !== null && typeof parsed.detail === "string") problem = parsed
  } catch {
    // not a problem body: the text is the detail
  }
  return new ApiError(response.status, problem)
}

/**
 * One JSON request; the parsed body (undefined for 204). Fails with {@link ApiError}.
 *
 * @param {string} path
 * @param {{ method?: string, body?: unknown }} [init]
 * @returns {Promise<unknown>}
 */
export const request = async (path, init = {}) => {
  const response = await fetch(url(path), {
    method: init.method ?? "GET",
    headers: withToken(init.body === undefined ? { accept: "application/json" } : { "content-type": "application/json" }),
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) })
  })
  if (!response.ok) throw await failure(response)
  if (response.status === 204) return undefined
  const text = await response.text()
  return text === "" ? undefined : JSON.parse(text)
}

/** @param {string} id */
const sessionPath = (id) => `sessions/${encodeURIComponent(id)}`

export const api = {
  /**
   * The sessions, without their `meta` (SEC-06: the list is polled; a session's meta is read with
   * its summary when the page shows it).
   *
   * @returns {Promise<SessionPage>}
   */
  list: async () => /** @type {SessionPage} */ (await request("sessions?limit=1000")),
  /** @param {string} id @returns {Promise<SessionInfo>} */
  summary: async (id) => /** @type {SessionInfo} */ (await request(sessionPath(id))),
  /** @param {string} id @param {Record<string, unknown>} body */
  create: (id, body) => request(sessionPath(id), { method: "PUT", body }),
  /**
   * @param {string} id
   * @param {string} text
   * @param {"followup" | "steer" | "inject"} mode
   * @returns {Promise<{ messageId: string, duplicate: boolean }>}
   */
  send: async (id, text, mode) =>
    /** @type {{ messageId: string, duplicate: boolean }} */ (
      await request(`${sessionPath(id)}/messages`, { method: "POST", body: { text, mode } })
    ),
  /** @param {string} id @param {boolean} keepInbox */
  cancel: (id, keepInbox) => request(`${sessionPath(id)}/cancel`, { method: "POST", body: { keepInbox } }),
  /** @returns {Promise<{ agents: Array<RegistryNode> }>} */
  registry: async () => /** @type {{ agents: Array<RegistryNode> }} */ (await request("inspector/api/registry"))
}

// -------------------------------------------------------------------------------------------------
// Server-Sent Events

/**
 * @typedef {{
 *   durable: (event: DurableEvent) => void,
 *   live: (event: LiveEvent) => void,
 *   state: (state: "connecting" | "open" | "reconnecting" | "closed", detail?: string) => void
 * }} StreamHandlers
 */

/**
 * Reads frames from a response body and dispatches them (WHATWG event-stream format: lines end
 * with LF, CRLF or CR, a blank line dispatches, comment lines are skipped).
 *
 * @param {ReadableStream<Uint8Array>} body
 * @param {(frame: { id: string | undefined, event: string, data: string }) => void} dispatch
 */
const readFrames = async (body, dispatch) => {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  /** @type {string | undefined} */
  let id
  let event = ""
  /** @type {Array<string> | undefined} */
  let data
  for (;;) {
    const read = await reader.read()
    if (read.done) return
    buffer += decoder.decode(read.value, { stream: true })
    // a CR at the end of a chunk may be half of a CRLF: it waits for the next chunk
    const lines = buffer.split(/\r\n|\n|\r(?!$)/)
    buffer = lines.pop() ?? ""
    for (const line of lines) {
      if (line === "") {
        if (data !== undefined) dispatch({ id, event: event === "" ? "message" : event, data: data.join("\n") })
        id = undefined
        event = ""
        data = undefined
        continue
      }
      if (line.startsWith(":")) continue
      const colon = line.indexOf(":")
      const name = colon === -1 ? line : line.slice(0, colon)
      const value = colon === -1 ? "" : line.slice(line[colon + 1] === " " ? colon + 2 : colon + 1)
      if (name === "data") (data ??= []).push(value)
      else if (name === "event") event = value
      else if (name === "id") id = value
    }
  }
}

/**
 * Follows `GET /sessions/:id/events` from seq 0: durable events (each once, in order), live events
 * while connected. Reconnects after a dropped connection with `Last-Event-ID` (1 s, doubling up to
 * 10 s); a problem the server answers with (4xx) ends it. Returns the function that stops it.
 *
 * @param {string} id
 * @param {StreamHandlers} handlers
 * @returns {() => void}
 */
export const follow = (id, handlers) => {
  const abort = new AbortController()
  let next = 0
  let delay = 1000
  const connect = async () => {
    handlers.state(next === 0 ? "connecting" : "reconnecting")
    const response = await fetch(url(`${sessionPath(id)}/events`), {
      headers: withToken(next === 0 ? { accept: "text/event-stream" } : { accept: "text/event-stream", "last-event-id": String(next - 1) }),
      signal: abort.signal
    })
    if (!response.ok || response.body === null) throw await failure(response)
    handlers.state("open")
    delay = 1000
    await readFrames(response.body, (frame) => {
      if (frame.event === "durable") {
        const event = /** @type {DurableEvent} */ (JSON.parse(frame.data))
        // a reconnection resumes after the last seq seen: anything older is not dispatched twice
        if (event.seq < next) return
        next = event.seq + 1
        handlers.durable(event)
      } else if (frame.event === "live") {
        handlers.live(/** @type {LiveEvent} */ (JSON.parse(frame.data)))
      } else if (frame.event === "error") {
        const problem = /** @type {Problem} */ (JSON.parse(frame.data))
        throw new ApiError(problem.status ?? 500, problem)
      }
    })
  }
  const loop = async () => {
    while (!abort.signal.aborted) {
      try {
        await connect()
      } catch (error) {
        if (abort.signal.aborted) break
        if (error instanceof ApiError && error.status < 500) {
          handlers.state("closed", error.message)
          return
        }
      }
      if (abort.signal.aborted) break
      handlers.state("reconnecting")
      await new Promise((resolve) => setTimeout(resolve, delay))
      delay = Math.min(delay * 2, 10_000)
    }
    handlers.state("closed")
  }
  void loop()
  return () => abort.abort()
}
