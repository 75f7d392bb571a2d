// @ts-check
/**
 * The inspector page (INS-01): the sessions of the server (live and stored, with status, pending
 * input and usage), the live registry tree (owners, lineage, initiators), the timeline of the
 * selected session followed live over its event stream, and send/steer/cancel controls — all
 * through the HTTP API's own routes, plus the local `GET /inspector/api/registry`.
 */
import { api, ApiError, follow, setToken } from "./api.js"
import { byId, clock, Follower, h, replace } from "./dom.js"
import { Timeline, usageText } from "./timeline.js"

/**
 * @typedef {import("./api.js").SessionInfo} SessionInfo
 * @typedef {import("./api.js").SessionListEntry} SessionListEntry
 * @typedef {import("./api.js").UnreadableSession} UnreadableSession
 * @typedef {import("./api.js").RegistryNode} RegistryNode
 */

/** How often the lists are read again (the timeline itself is pushed over SSE). */
const REFRESH_MILLIS = 2000

const elements = {
  sessions: byId("sessions", HTMLTableSectionElement),
  sessionsNote: byId("sessions-note", HTMLElement),
  registry: byId("registry", HTMLElement),
  detail: byId("detail", HTMLElement),
  title: byId("session-title", HTMLElement),
  summary: byId("session-summary", HTMLElement),
  meta: byId("session-meta", HTMLElement),
  stream: byId("stream-state", HTMLElement),
  timeline: byId("timeline", HTMLElement),
  message: byId("message", HTMLTextAreaElement),
  mode: byId("mode", HTMLSelectElement),
  send: byId("send", HTMLButtonElement),
  cancel: byId("cancel", HTMLButtonElement),
  keepInbox: byId("keep-inbox", HTMLInputElement),
  notice: byId("notice", HTMLElement),
  tokenForm: byId("token-form", HTMLFormElement),
  token: byId("token", HTMLInputElement),
  createForm: byId("create-form", HTMLFormElement),
  createId: byId("create-id", HTMLInputElement),
  create: byId("create", HTMLButtonElement),
  followNewest: byId("follow-newest", HTMLButtonElement)
}

const state = {
  /** @type {string | undefined} */
  selected: undefined,
  /** @type {(() => void) | undefined} */
  stop: undefined,
  /** @type {Map<string, SessionListEntry>} the list's entries (no meta), or a summary read since */
  sessions: new Map(),
  /** @type {"idle" | "running" | undefined} the status the live stream last reported */
  liveStatus: undefined,
  /** whether an action of the controls is under way */
  busy: false
}

/** Follows the newest entry of the timeline unless the reader scrolled away (DOC-03). */
const follower = new Follower(elements.timeline, (following) => {
  elements.followNewest.hidden = following || state.selected === undefined
})
const timeline = new Timeline(elements.timeline, () => follower.reveal())
elements.followNewest.addEventListener("click", () => follower.resume())

// -------------------------------------------------------------------------------------------------
// notices

/**
 * Shows what went wrong (a problem body's detail) or what was done.
 *
 * @param {unknown} what
 * @param {"error" | "info"} [kind]
 */
const notify = (what, kind = "error") => {
  const text = what instanceof ApiError
    ? `${what.status} ${what.problem.title}: ${what.problem.detail}`
    : what instanceof Error
    ? what.message
    : String(what)
  replace(elements.notice, [h("span", { class: kind }, text)])
  if (what instanceof ApiError && what.status === 401) elements.tokenForm.hidden = false
}

// -------------------------------------------------------------------------------------------------
// the sessions

/** @param {SessionListEntry} info */
const pendingText = (info) => {
  const { nextTurn, nextStep } = info.pending
  return nextTurn + nextStep === 0 ? "—" : `${nextTurn} turn · ${nextStep} step`
}

/** @param {SessionListEntry | UnreadableSession} entry */
const sessionRow = (entry) => {
  if (entry._tag === "UnreadableSession") {
    return h("tr", { class: "unreadable", "data-session-id": entry.id }, h("td", {}, entry.id), h("td", { colspan: 4 }, entry.problem))
  }
  return h(
    "tr",
    {
      class: entry.id === state.selected ? "selected" : undefined,
      "data-session-id": entry.id,
      onclick: () => select(entry.id)
    },
    h("td", { class: "id" }, entry.id, entry.parentSession === undefined ? null : h("span", { class: "meta" }, ` ⤷ ${entry.parentSession}`)),
    h("td", {}, h("span", { class: `status ${entry.status}` }, entry.status), entry.openTurn ? h("span", { class: "badge" }, "open turn") : null),
    h("td", {}, pendingText(entry)),
    h("td", {}, String(entry.eventCount)),
    h("td", {}, usageText(entry.usage) || "—")
  )
}

const refreshSessions = async () => {
  const page = await api.list()
  state.sessions = new Map()
  for (const entry of page.sessions) if (entry._tag === "SessionInfo") state.sessions.set(entry.id, entry)
  replace(elements.sessions, page.sessions.map(sessionRow))
  elements.sessionsNote.textContent = page.next === undefined
    ? `${page.sessions.length} session${page.sessions.length === 1 ? "" : "s"}`
    : `the first ${page.sessions.length} sessions`
  if (state.selected !== undefined) showSummary(state.sessions.get(state.selected))
}

// -------------------------------------------------------------------------------------------------
// the registry tree

/**
 * @param {RegistryNode} node
 * @param {Map<string, Array<RegistryNode>>} children
 * @returns {HTMLLIElement}
 */
const registryItem = (node, children) => {
  const forked = state.sessions.get(node.id)?.parentSession
  const below = children.get(node.id) ?? []
  return h(
    "li",
    { "data-agent-id": node.id },
    h("a", { href: `#${encodeURIComponent(node.id)}`, class: "id" }, node.id),
    " ",
    h("span", { class: `status ${node.status}` }, node.status),
    node.initiator === null ? null : h("span", { class: "meta" }, ` started by ${node.initiator}`),
    forked === undefined ? null : h("span", { class: "meta" }, ` forked from ${forked}`),
    below.length === 0 ? null : h("ul", {}, ...below.map((child) => registryItem(child, children)))
  )
}

const refreshRegistry = async () => {
  try {
    const { agents } = await api.registry()
    /** @type {Map<string, Array<RegistryNode>>} */
    const children = new Map()
    for (const agent of agents) {
      if (agent.owner === null) continue
      const list = children.get(agent.owner) ?? []
      list.push(agent)
      children.set(agent.owner, list)
    }
    const roots = agents.filter((agent) => agent.owner === null)
    replace(elements.registry, [
      roots.length === 0
        ? h("p", { class: "meta" }, "no agent is live")
        : h("ul", { class: "tree" }, ...roots.map((root) => registryItem(root, children)))
    ])
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      replace(elements.registry, [h("p", { class: "meta" }, error.message)])
      return
    }
    throw error
  }
}

// -------------------------------------------------------------------------------------------------
// the selected session

/**
 * Turns the controls on only when they can act (DOC-03), saying why they are off: Send needs a
 * message, Cancel a running turn or pending input, Create a session id; none while an action runs.
 */
const updateControls = () => {
  const info = state.selected === undefined ? undefined : state.sessions.get(state.selected)
  const status = state.liveStatus ?? info?.status
  const pending = info === undefined ? 0 : info.pending.nextTurn + info.pending.nextStep
  const canCancel = status === "running" || pending > 0
  const hasMessage = elements.message.value.trim() !== ""
  elements.send.disabled = state.busy || state.selected === undefined || !hasMessage
  elements.send.title = hasMessage ? "" : "type a message first"
  elements.cancel.disabled = state.busy || !canCancel
  elements.cancel.title = canCancel ? "" : "nothing to cancel: no turn is running and no input is pending"
  elements.keepInbox.disabled = elements.cancel.disabled
  elements.create.disabled = state.busy || elements.createId.value.trim() === ""
}

/** @param {SessionListEntry | undefined} info */
const showSummary = (info) => {
  updateControls()
  if (info === undefined) return
  const status = state.liveStatus ?? info.status
  replace(elements.summary, [
    h("span", { class: `status ${status}` }, status),
    ` · pending ${pendingText(info)} · ${info.eventCount} events`,
    usageText(info.usage) === "" ? null : ` · ${usageText(info.usage)}`,
    ` · created ${clock(info.createdAt)}`,
    info.parentSession === undefined ? null : ` · forked from ${info.parentSession}`
  ])
}

/** The most of a session's meta the page shows (the summary carries all of it). */
const META_CHARACTERS = 4000

/**
 * The selected session's `meta`, from its summary (SEC-06: the polled list carries none).
 *
 * @param {SessionInfo} info
 */
const showMeta = (info) => {
  const text = JSON.stringify(info.meta, null, 2)
  elements.meta.hidden = text === "{}"
  replace(elements.meta, [
    h("span", { class: "meta" }, "meta"),
    h("pre", {}, text.length > META_CHARACTERS ? `${text.slice(0, META_CHARACTERS)}…` : text)
  ])
}

/**
 * Reads the selected session's summary (with its meta) and shows it.
 *
 * @param {string} id
 */
const loadSummary = (id) =>
  api.summary(id).then(
    (info) => {
      state.sessions.set(id, info)
      if (state.selected !== id) return
      // newer than the last status the stream reported
      state.liveStatus = undefined
      showSummary(info)
      showMeta(info)
    },
    (error) => notify(error)
  )

/** @type {ReturnType<typeof setTimeout> | undefined} */
let summaryTimer

/**
 * Reads the selected session's summary again shortly after its log grew (one read per burst of
 * events), so status, pending input and usage follow the timeline.
 *
 * @param {string} id
 */
const refreshSummarySoon = (id) => {
  if (summaryTimer !== undefined) return
  summaryTimer = setTimeout(() => {
    summaryTimer = undefined
    if (state.selected !== id) return
    void loadSummary(id)
  }, 250)
}

/** @param {string} id */
const select = (id) => {
  if (state.selected === id) return
  state.stop?.()
  state.selected = id
  state.liveStatus = undefined
  follower.resume()
  if (decodeURIComponent(location.hash.slice(1)) !== id) location.hash = encodeURIComponent(id)
  elements.detail.hidden = false
  elements.title.textContent = id
  timeline.reset()
  for (const row of elements.sessions.querySelectorAll("tr")) {
    row.classList.toggle("selected", row.getAttribute("data-session-id") === id)
  }
  showSummary(state.sessions.get(id))
  elements.meta.hidden = true
  void loadSummary(id)
  state.stop = follow(id, {
    durable: (event) => {
      timeline.durable(event)
      refreshSummarySoon(id)
    },
    live: (event) => {
      if (event._tag === "AgentStatusChanged") {
        state.liveStatus = event.status
        showSummary(state.sessions.get(id))
      }
      timeline.live(event)
    },
    state: (value, detail) => {
      elements.stream.textContent = detail === undefined ? value : `${value}: ${detail}`
      elements.stream.className = `stream ${value}`
    }
  })
}

// -------------------------------------------------------------------------------------------------
// controls

/**
 * Runs an action of the controls, showing its failure; the buttons are off while it runs.
 *
 * @param {() => Promise<string>} action
 */
const act = async (action) => {
  state.busy = true
  updateControls()
  try {
    notify(await action(), "info")
  } catch (error) {
    notify(error)
  } finally {
    state.busy = false
    updateControls()
  }
}

elements.send.addEventListener("click", () => {
  const id = state.selected
  const text = elements.message.value
  if (id === undefined || text.trim() === "") return
  const mode = /** @type {"followup" | "steer" | "inject"} */ (elements.mode.value)
  void act(async () => {
    const receipt = await api.send(id, text, mode)
    elements.message.value = ""
    // who sends wants to see what comes of it
    follower.resume()
    return `sent ${mode} ${receipt.messageId}${receipt.duplicate ? " (already accepted)" : ""}`
  })
})

elements.message.addEventListener("input", updateControls)
elements.createId.addEventListener("input", updateControls)

elements.message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) elements.send.click()
})

elements.cancel.addEventListener("click", () => {
  const id = state.selected
  if (id === undefined) return
  void act(async () => {
    await api.cancel(id, elements.keepInbox.checked)
    return elements.keepInbox.checked ? "cancelled the turn (inbox kept)" : "cancelled the turn and the pending input"
  })
})

elements.createForm.addEventListener("submit", (event) => {
  event.preventDefault()
  const id = elements.createId.value.trim()
  if (id === "") return
  void act(async () => {
    await api.create(id, {})
    elements.createId.value = ""
    await refreshSessions()
    select(id)
    return `session ${id} is ready`
  })
})

elements.tokenForm.addEventListener("submit", (event) => {
  event.preventDefault()
  setToken(elements.token.value.trim())
  elements.token.value = ""
  elements.tokenForm.hidden = true
  const selected = state.selected
  state.selected = undefined
  if (selected !== undefined) select(selected)
  void refresh()
})

// -------------------------------------------------------------------------------------------------
// start

const refresh = async () => {
  try {
    await refreshSessions()
    await refreshRegistry()
  } catch (error) {
    notify(error)
  }
}

const fromHash = () => {
  const id = decodeURIComponent(location.hash.slice(1))
  if (id !== "") select(id)
}

window.addEventListener("hashchange", fromHash)
elements.tokenForm.hidden = true
updateControls()
const loop = async () => {
  await refresh()
  setTimeout(loop, REFRESH_MILLIS)
}
void loop()
fromHash()
