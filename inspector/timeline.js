// @ts-check
/**
 * A session's timeline (INS-01): its durable events as turns → steps → model request/response,
 * tool calls with their arguments and results, inbox splices; repairs and compactions highlighted;
 * live events (model text as it streams, tools running, retries, errors) drawn in place until the
 * durable event they precede arrives.
 */
import { emptyFacts, timeBars, usageChart } from "./charts.js"
import { clock, h, prettyJson } from "./dom.js"

/**
 * @typedef {import("./api.js").DurableEvent} DurableEvent
 * @typedef {import("./api.js").LiveEvent} LiveEvent
 * @typedef {{ type: "text", text: string } | { type: "image", mediaType?: string } | { type: string }} ContentPart
 * @typedef {{ id: string, role: "user", content: Array<ContentPart>, source: { kind: string, agent?: string, plugin?: string } }} UserMessage
 * @typedef {{ type: "text", text: string } | { type: "reasoning", text: string } | { type: "tool-call", callId: string, name: string, arguments: string }} AssistantPart
 * @typedef {{ id: string, role: "assistant", content: Array<AssistantPart>, source: { provider: string, model: string } }} AssistantMessage
 * @typedef {{ id: string, role: "tool", toolCallId: string, toolName: string, content: Array<ContentPart>, isError: boolean }} ToolResultMessage
 * @typedef {{ target: "next-turn" | "next-step", start: number, removed: Array<string>, inserted: Array<UserMessage>, outcome?: "canceled" | "rejected" | "restored", wake?: boolean }} Splice
 * @typedef {{ turn: number }} TurnStart
 * @typedef {{ turn: number, step: number }} StepMark
 * @typedef {{ turn: number, step: number, message: UserMessage }} UserEntered
 * @typedef {{ turn: number, step: number, message: AssistantMessage, usage?: import("./api.js").Usage, finish?: string, interrupted?: true }} AssistantLogged
 * @typedef {{ turn: number, step: number, callId: string, name: string, arguments: string }} ToolCall
 * @typedef {{ turn: number, step: number, message: ToolResultMessage, error?: { name: string, code: string } }} ToolResult
 * @typedef {{ kind: string, reason?: string, cause?: { kind: string, reason?: string }, error?: { message: string, code: string } }} EndReason
 * @typedef {{ turn: number, reason: EndReason }} TurnEnd
 * @typedef {{ provider: string, model: string, maxTokens?: number, system?: string, tools: Array<{ name: string, description: string }> }} RequestConfig
 * @typedef {{ upTo: number, summary: string, usage: import("./api.js").Usage }} Compacted
 * @typedef {import("./charts.js").TurnFacts} TurnFacts
 * @typedef {{ section: HTMLElement, body: HTMLElement, charts: HTMLElement, steps: Map<number, HTMLElement>, facts: TurnFacts }} TurnEntry
 */

/** The codes repair gives the results it writes for calls a crash cut off (REP-02). */
const repairCodes = new Set(["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"])

/** @param {ReadonlyArray<ContentPart>} content */
const contentText = (content) =>
  content.map((part) => ("text" in part && typeof part.text === "string" ? part.text : `[${part.type}]`)).join("\n")

/** @param {import("./api.js").Usage | undefined} usage */
export const usageText = (usage) => {
  if (usage === undefined) return ""
  const parts = []
  if (usage.inputTokens !== undefined) parts.push(`${usage.inputTokens} in`)
  if (usage.outputTokens !== undefined) parts.push(`${usage.outputTokens} out`)
  if (usage.reasoningTokens !== undefined) parts.push(`${usage.reasoningTokens} reasoning`)
  if (usage.cachedInputTokens !== undefined) parts.push(`${usage.cachedInputTokens} cached`)
  return parts.length === 0 ? "" : `${parts.join(" · ")} tokens`
}

/** @param {EndReason} reason */
const endText = (reason) => {
  switch (reason.kind) {
    case "blocked":
      return `blocked: ${reason.reason ?? ""}`
    case "aborted":
      return `aborted (${reason.cause?.kind ?? "?"}${reason.cause?.reason === undefined ? "" : `: ${reason.cause.reason}`})`
    case "error":
      return `error ${reason.error?.code ?? ""}: ${reason.error?.message ?? ""}`
    case "interrupted":
      return "interrupted — closed by crash repair"
    default:
      return reason.kind
  }
}

/** @param {Splice} splice */
const sendMode = (splice) => {
  const wake = splice.wake ?? splice.target === "next-turn"
  return splice.target === "next-turn" ? "follow-up" : wake ? "steer" : "inject"
}

/** @param {number} count @param {string} one */
const plural = (count, one) => `${count} ${one}${count === 1 ? "" : "s"}`

/**
 * What an inbox splice did, in words: messages queued (as a follow-up, a steer or an inject), taken
 * into a turn or a step, canceled, rejected by a hook, or restored by crash repair.
 *
 * @param {Splice} splice
 */
const spliceText = (splice) => {
  const where = splice.target === "next-turn" ? "the next turn" : "the next step"
  const count = splice.removed.length + splice.inserted.length
  switch (splice.outcome) {
    case "canceled":
      return `${plural(count, "queued message")} canceled`
    case "rejected":
      return `${plural(count, "queued message")} rejected by a hook`
    case "restored":
      return `${plural(count, "message")} restored for ${where} by crash repair`
    default:
      if (splice.inserted.length > 0 && splice.removed.length === 0) {
        return `${sendMode(splice)} queued for ${where}${splice.target === "next-step" && sendMode(splice) === "inject" ? " (no wake)" : ""}`
      }
      if (splice.inserted.length === 0) {
        return `${plural(splice.removed.length, "queued message")} taken into ${splice.target === "next-turn" ? "a turn" : "the step"}`
      }
      return `inbox for ${where} changed: ${splice.inserted.length} added, ${splice.removed.length} removed`
  }
}

/** The user message sources, as the timeline names them. */
const sourceNames = /** @type {Record<string, string>} */ ({ user: "user", agent: "agent", plugin: "plugin", system: "system" })

/**
 * The heading of an entry: what it is in words (its event type as a tooltip), its seq and time.
 *
 * @param {string} label
 * @param {number} seq
 * @param {number} time
 * @param {string} [type] the durable event's type
 */
const stamp = (label, seq, time, type) =>
  h("span", { class: "stamp", title: type }, h("b", {}, label), ` #${seq} · ${clock(time)}`)

export class Timeline {
  /**
   * @param {HTMLElement} root
   * @param {() => void} [changed] called once after each burst of changes (to follow the newest entry)
   */
  constructor(root, changed = () => {}) {
    this.root = root
    this.changed = changed
    /** @type {Map<number, TurnEntry>} */
    this.turns = new Map()
    /** @type {Set<number>} turns whose charts are drawn again at the end of this burst */
    this.dirty = new Set()
    this.scheduled = false
    /** @type {ReturnType<typeof setInterval> | undefined} redraws a running turn's time bar each second */
    this.ticker = undefined
    /** @type {Map<string, HTMLElement>} the element of each tool call, by call id */
    this.calls = new Map()
    /** @type {Map<string, HTMLElement>} text streamed by the model, by `turn/step`, until its message is durable */
    this.deltas = new Map()
    /** @type {number | undefined} the turn started and not ended */
    this.openTurn = undefined
    /** @type {number | undefined} the step of the open turn started and not ended */
    this.openStep = undefined
    this.count = 0
  }

  reset() {
    this.stopTicker()
    this.root.replaceChildren()
    this.turns.clear()
    this.dirty.clear()
    this.calls.clear()
    this.deltas.clear()
    this.openTurn = undefined
    this.openStep = undefined
    this.count = 0
  }

  /**
   * The section of a turn (made when a live event comes before the turn's durable start).
   *
   * @param {number} turn
   */
  turn(turn) {
    let entry = this.turns.get(turn)
    if (entry === undefined) {
      const body = h("div", { class: "turn-body" })
      const charts = h("div", { class: "turn-charts", hidden: true })
      const section = h("section", { class: "turn", "data-turn": turn }, h("h3", {}, `Turn ${turn}`), charts, body)
      this.root.append(section)
      entry = { section, body, charts, steps: new Map(), facts: emptyFacts() }
      this.turns.set(turn, entry)
    }
    return entry
  }

  /**
   * Draws the charts of the changed turns and tells the page, once per burst of events (a
   * reconnection delivers a whole log in one go).
   */
  schedule() {
    if (this.scheduled) return
    this.scheduled = true
    queueMicrotask(() => {
      this.scheduled = false
      for (const turn of this.dirty) {
        const entry = this.turns.get(turn)
        if (entry === undefined) continue
        const bars = timeBars(entry.facts, Date.now())
        const usage = usageChart(entry.facts)
        entry.charts.replaceChildren(...[bars, usage].filter((chart) => chart !== null))
        entry.charts.hidden = bars === null && usage === null
      }
      this.dirty.clear()
      this.changed()
    })
  }

  /**
   * The facts of a turn, marked to be drawn again; `time` is its latest event's.
   *
   * @param {number} turn
   * @param {number} time
   */
  facts(turn, time) {
    const facts = this.turn(turn).facts
    facts.last = Math.max(facts.last, time)
    facts.seenAt = Date.now()
    this.dirty.add(turn)
    return facts
  }

  /**
   * Marks a turn as running (its live events arrive) or not; while one runs, its time bar grows
   * each second.
   *
   * @param {number} turn
   * @param {boolean} running
   */
  running(turn, running) {
    const facts = this.turn(turn).facts
    const now = running && facts.end === undefined
    if (facts.running === now) return
    facts.running = now
    this.dirty.add(turn)
    if (now && this.ticker === undefined) {
      this.ticker = setInterval(() => {
        const live = [...this.turns].filter(([, entry]) => entry.facts.running)
        if (live.length === 0) return this.stopTicker()
        for (const [number] of live) this.dirty.add(number)
        this.schedule()
      }, 1000)
    }
  }

  stopTicker() {
    if (this.ticker !== undefined) clearInterval(this.ticker)
    this.ticker = undefined
  }

  /**
   * Input entering the open step (a message, an inbox splice, the request's settings) moves the
   * start of its model request: the request is sent after it.
   *
   * @param {number} time
   */
  stepInput(time) {
    if (this.openTurn === undefined || this.openStep === undefined) return
    const facts = this.facts(this.openTurn, time)
    const request = facts.requests.get(this.openStep)
    if (request !== undefined && request.end === undefined) request.start = Math.max(request.start, time)
  }

  /**
   * @param {number} turn
   * @param {number} step
   */
  step(turn, step) {
    const entry = this.turn(turn)
    let element = entry.steps.get(step)
    if (element === undefined) {
      element = h("div", { class: "step", "data-step": step }, h("h4", {}, `Step ${step}`))
      entry.body.append(element)
      entry.steps.set(step, element)
    }
    return element
  }

  /**
   * Where an event outside a step goes: the open turn, else the top level.
   *
   * @param {HTMLElement} element
   */
  place(element) {
    if (this.openTurn === undefined) this.root.append(element)
    else if (this.openStep !== undefined) this.step(this.openTurn, this.openStep).append(element)
    else this.turn(this.openTurn).body.append(element)
  }

  /** @param {DurableEvent} event */
  durable(event) {
    this.count = Math.max(this.count, event.seq + 1)
    this.record(event)
    this.schedule()
  }

  /** @param {DurableEvent} event */
  record(event) {
    switch (event.type) {
      case "agent/inbox/spliced":
        return this.splice(event, /** @type {Splice} */ (event.data))
      case "turn/start": {
        const data = /** @type {TurnStart} */ (event.data)
        this.openTurn = data.turn
        const { section } = this.turn(data.turn)
        this.facts(data.turn, event.time).start = event.time
        section.querySelector("h3")?.append(h("span", { class: "meta" }, ` started ${clock(event.time)} · #${event.seq}`))
        return
      }
      case "step/start": {
        const data = /** @type {StepMark} */ (event.data)
        this.openStep = data.step
        const facts = this.facts(data.turn, event.time)
        facts.steps.set(data.step, { step: data.step, start: event.time, end: undefined })
        facts.requests.set(data.step, { step: data.step, start: event.time, end: undefined, usage: undefined })
        this.step(data.turn, data.step).append(
          h("div", { class: "item step-start", "data-type": event.type }, stamp(`step ${data.step} started`, event.seq, event.time, event.type))
        )
        return
      }
      case "step/end": {
        const data = /** @type {StepMark} */ (event.data)
        this.openStep = undefined
        const facts = this.facts(data.turn, event.time)
        const step = facts.steps.get(data.step)
        if (step !== undefined) step.end = event.time
        const request = facts.requests.get(data.step)
        // a step that ends without a reply (its request failed) ends its request too
        if (request !== undefined && request.end === undefined) request.end = event.time
        this.step(data.turn, data.step).classList.add("ended")
        return
      }
      case "user/message": {
        const data = /** @type {UserEntered} */ (event.data)
        this.stepInput(event.time)
        const source = data.message.source
        const from = source.kind === "agent" && source.agent !== undefined
          ? `agent ${source.agent}`
          : source.kind === "plugin" && source.plugin !== undefined
          ? `plugin ${source.plugin}`
          : sourceNames[source.kind] ?? source.kind
        this.step(data.turn, data.step).append(
          h(
            "div",
            { class: "item user", "data-type": event.type },
            stamp(`message from ${from}`, event.seq, event.time, event.type),
            h("div", { class: "text" }, contentText(data.message.content))
          )
        )
        return
      }
      case "assistant/message":
        return this.assistant(event, /** @type {AssistantLogged} */ (event.data))
      case "tool/call":
        return this.toolCall(event, /** @type {ToolCall} */ (event.data))
      case "tool/result":
        return this.toolResult(event, /** @type {ToolResult} */ (event.data))
      case "turn/end":
        return this.turnEnd(event, /** @type {TurnEnd} */ (event.data))
      case "request/config":
        return this.config(event, /** @type {RequestConfig} */ (event.data))
      case "session/compacted":
        return this.compacted(event, /** @type {Compacted} */ (event.data))
      default:
        this.place(
          h(
            "div",
            { class: "item custom", "data-type": event.type },
            stamp(`custom event ${event.type}`, event.seq, event.time, event.type),
            h("pre", {}, JSON.stringify(event.data, null, 2))
          )
        )
    }
  }

  /**
   * @param {DurableEvent} event
   * @param {Splice} data
   */
  splice(event, data) {
    const restored = data.outcome === "restored"
    if (data.outcome === "canceled" || data.outcome === "rejected") {
      // the messages it discards were drawn when they were inserted
      for (const id of data.removed) {
        for (const element of this.root.querySelectorAll(`[data-message-id="${CSS.escape(id)}"]`)) {
          element.classList.add("discarded")
          element.setAttribute("title", data.outcome)
        }
      }
    }
    this.stepInput(event.time)
    this.place(
      h(
        "div",
        {
          class: `item splice${restored ? " repair" : ""}${data.outcome === "canceled" || data.outcome === "rejected" ? " discarded" : ""}`,
          "data-type": event.type
        },
        stamp(spliceText(data), event.seq, event.time, event.type),
        restored ? h("span", { class: "badge repair" }, "repair") : null,
        ...data.inserted.map((message) =>
          h("div", { class: "text", "data-message-id": message.id }, contentText(message.content))
        )
      )
    )
  }

  /**
   * @param {DurableEvent} event
   * @param {AssistantLogged} data
   */
  assistant(event, data) {
    const key = `${data.turn}/${data.step}`
    this.deltas.get(key)?.remove()
    this.deltas.delete(key)
    const text = data.message.content.filter((part) => part.type === "text").map((part) => ("text" in part ? part.text : "")).join("")
    const reasoning = data.message.content.filter((part) => part.type === "reasoning").map((part) => ("text" in part ? part.text : "")).join("")
    const calls = data.message.content.filter((part) => part.type === "tool-call").length
    const facts = this.facts(data.turn, event.time)
    const request = facts.requests.get(data.step)
    if (request === undefined) facts.requests.set(data.step, { step: data.step, start: event.time, end: event.time, usage: data.usage })
    else Object.assign(request, { end: event.time, usage: data.usage })
    if (!facts.steps.has(data.step)) facts.steps.set(data.step, { step: data.step, start: event.time, end: undefined })
    const details = [data.finish, calls > 0 ? `${calls} tool call${calls === 1 ? "" : "s"}` : "", usageText(data.usage)]
      .filter((part) => part !== undefined && part !== "")
      .join(" · ")
    this.step(data.turn, data.step).append(
      h(
        "div",
        { class: `item assistant${data.interrupted === true ? " interrupted" : ""}`, "data-type": event.type },
        stamp(`model reply (${data.message.source.provider}/${data.message.source.model})`, event.seq, event.time, event.type),
        details === "" ? null : h("span", { class: "meta" }, ` ${details}`),
        data.interrupted === true ? h("span", { class: "badge" }, "interrupted") : null,
        reasoning === "" ? null : h("details", { class: "reasoning" }, h("summary", {}, "reasoning"), h("pre", {}, reasoning)),
        text === "" ? null : h("div", { class: "text" }, text)
      )
    )
  }

  /**
   * @param {DurableEvent} event
   * @param {ToolCall} data
   */
  toolCall(event, data) {
    this.facts(data.turn, event.time).tools.set(data.callId, {
      callId: data.callId,
      name: data.name,
      step: data.step,
      start: event.time,
      end: undefined,
      isError: false
    })
    const element = h(
      "div",
      { class: "item tool-call", "data-call-id": data.callId, "data-type": event.type },
      stamp(`tool call ${data.name}`, event.seq, event.time, event.type),
      h("span", { class: "meta" }, ` ${data.callId}`),
      h("pre", { class: "arguments" }, prettyJson(data.arguments)),
      h("div", { class: "result pending" }, "waiting for the result…")
    )
    this.calls.set(data.callId, element)
    this.step(data.turn, data.step).append(element)
  }

  /**
   * @param {DurableEvent} event
   * @param {ToolResult} data
   */
  toolResult(event, data) {
    const isRepair = data.message.id.startsWith("repair:") || repairCodes.has(data.error?.code ?? "")
    const tool = this.facts(data.turn, event.time).tools.get(data.message.toolCallId)
    if (tool !== undefined) Object.assign(tool, { end: event.time, isError: data.message.isError })
    const result = h(
      "div",
      { class: `result${data.message.isError ? " error" : ""}${isRepair ? " repair" : ""}`, "data-type": event.type },
      stamp(`tool result${data.message.isError ? " (error)" : ""}`, event.seq, event.time, event.type),
      isRepair ? h("span", { class: "badge repair" }, `repair ${data.error?.code ?? ""}`) : null,
      data.error !== undefined && !isRepair ? h("span", { class: "meta" }, ` ${data.error.name} ${data.error.code}`) : null,
      h("pre", {}, contentText(data.message.content))
    )
    const call = this.calls.get(data.message.toolCallId)
    if (call !== undefined) {
      call.classList.remove("running")
      call.querySelector(".result")?.replaceWith(result)
    } else {
      this.step(data.turn, data.step).append(
        h("div", { class: "item tool-call orphan", "data-call-id": data.message.toolCallId }, `tool call ${data.message.toolName} (not in the log)`, result)
      )
    }
  }

  /**
   * @param {DurableEvent} event
   * @param {TurnEnd} data
   */
  turnEnd(event, data) {
    if (this.openTurn === data.turn) {
      this.openTurn = undefined
      this.openStep = undefined
    }
    const { section } = this.turn(data.turn)
    const facts = this.facts(data.turn, event.time)
    facts.end = event.time
    facts.running = false
    for (const step of facts.steps.values()) step.end ??= event.time
    for (const request of facts.requests.values()) request.end ??= event.time
    section.classList.add("ended", `end-${data.reason.kind}`)
    section.append(
      h(
        "div",
        { class: `item turn-end${data.reason.kind === "interrupted" ? " repair" : ""}`, "data-type": event.type },
        stamp(`turn end: ${endText(data.reason)}`, event.seq, event.time, event.type),
        data.reason.kind === "interrupted" ? h("span", { class: "badge repair" }, "repair") : null
      )
    )
    for (const [key, element] of this.deltas) {
      if (key.startsWith(`${data.turn}/`)) {
        element.classList.add("abandoned")
        this.deltas.delete(key)
      }
    }
  }

  /**
   * @param {DurableEvent} event
   * @param {RequestConfig} data
   */
  config(event, data) {
    this.stepInput(event.time)
    this.place(
      h(
        "div",
        { class: "item config", "data-type": event.type },
        stamp(`model settings ${data.provider}/${data.model}`, event.seq, event.time, event.type),
        h("span", { class: "meta" }, ` ${data.tools.length} tool${data.tools.length === 1 ? "" : "s"}${data.maxTokens === undefined ? "" : ` · max ${data.maxTokens} tokens`}`),
        h(
          "details",
          {},
          h("summary", {}, "system prompt and tools"),
          h("pre", {}, data.system ?? "(no system prompt)"),
          h("ul", {}, ...data.tools.map((tool) => h("li", {}, h("b", {}, tool.name), ` — ${tool.description}`)))
        )
      )
    )
  }

  /**
   * @param {DurableEvent} event
   * @param {Compacted} data
   */
  compacted(event, data) {
    this.place(
      h(
        "div",
        { class: "item compaction", "data-type": event.type },
        stamp("history compacted", event.seq, event.time, event.type),
        h("span", { class: "badge compaction" }, `events before #${data.upTo} folded into a summary`),
        h("span", { class: "meta" }, ` ${usageText(data.usage)}`),
        h("details", {}, h("summary", {}, "summary"), h("pre", {}, data.summary))
      )
    )
  }

  // -----------------------------------------------------------------------------------------------
  // live events (EVS-02)

  /** @param {LiveEvent} event */
  live(event) {
    if (event._tag === "AgentStatusChanged" && event.status === "idle") {
      for (const turn of this.turns.keys()) this.running(turn, false)
    } else if ("turn" in event && typeof event.turn === "number") {
      this.running(event.turn, true)
    }
    this.liveEvent(event)
    this.schedule()
  }

  /** @param {LiveEvent} event */
  liveEvent(event) {
    switch (event._tag) {
      case "ModelDelta": {
        const key = `${event.turn}/${event.step}`
        let element = this.deltas.get(key)
        if (element === undefined) {
          element = h("div", { class: "item live-delta", "data-turn": event.turn, "data-step": event.step },
            h("span", { class: "stamp" }, h("b", {}, "model reply streaming"), " (live, not in the log yet)"),
            h("pre", { class: "reasoning-live" }),
            h("div", { class: "text" }))
          this.deltas.set(key, element)
          this.step(event.turn, event.step).append(element)
        }
        element.querySelector(event.kind === "text" ? ".text" : ".reasoning-live")?.append(event.text)
        return
      }
      case "ModelRetry": {
        const element = this.deltas.get(`${event.turn}/${event.step}`)
        element?.querySelector(".text")?.replaceChildren()
        element?.querySelector(".reasoning-live")?.replaceChildren()
        this.step(event.turn, event.step).append(
          h("div", { class: "item retry" }, `model request failed (${event.code}); retry ${event.attempt} in ${event.delay} ms (live)`)
        )
        return
      }
      case "ToolCallStarted":
        this.calls.get(event.callId)?.classList.add("running")
        return
      case "ToolCallFinished":
        this.calls.get(event.callId)?.classList.remove("running")
        return
      case "AgentError":
        this.place(h("div", { class: "item agent-error" }, `agent error ${event.error.code}: ${event.error.message} (live)`))
        return
      default:
        return
    }
  }
}
