// @ts-check
/**
 * The per-turn charts of the inspector (DOC-03), drawn as plain SVG: a time bar of the turn's steps,
 * model requests and tool calls, and a chart of the tokens each model reply used. Geometry is in
 * percentages of the chart's width, so a chart fits any column (down to a 420 px screen) while its
 * text keeps its size. Colours come from the stylesheet (classes only: the page's CSP allows no
 * inline style).
 */

/**
 * @typedef {import("./api.js").Usage} Usage
 * @typedef {{ step: number, start: number, end: number | undefined }} StepSpan
 * @typedef {{ step: number, start: number, end: number | undefined, usage: Usage | undefined }} RequestSpan
 * @typedef {{ callId: string, name: string, step: number, start: number, end: number | undefined, isError: boolean }} ToolSpan
 * @typedef {{
 *   start: number | undefined, end: number | undefined, last: number,
 *   seenAt: number, running: boolean,
 *   steps: Map<number, StepSpan>, requests: Map<number, RequestSpan>, tools: Map<string, ToolSpan>
 * }} TurnFacts
 *   `last` is the time of the turn's latest durable event (the server's clock) and `seenAt` when the
 *   page received it (the page's clock); while `running` (the agent is live and sends the turn's
 *   live events) the turn's axis extends past `last` by the time the page has waited since.
 * @typedef {{ kind: "step" | "model" | "tool", label: string, title: string, start: number, end: number | undefined, isError: boolean }} Bar
 */

const SVG = "http://www.w3.org/2000/svg"

/**
 * An SVG element with attributes and children (text children become text nodes).
 *
 * @template {keyof SVGElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, string | number>} attributes
 * @param {ReadonlyArray<SVGElement | string>} children
 * @returns {SVGElementTagNameMap[K]}
 */
const s = (tag, attributes, ...children) => {
  const element = document.createElementNS(SVG, tag)
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value))
  element.append(...children)
  return element
}

/**
 * The facts of a turn before any of its events (a turn drawn by a live event first has no start yet).
 *
 * @returns {TurnFacts}
 */
export const emptyFacts = () => ({
  start: undefined,
  end: undefined,
  last: 0,
  seenAt: 0,
  running: false,
  steps: new Map(),
  requests: new Map(),
  tools: new Map()
})

/**
 * A duration as people read it: `850 ms`, `12.4 s`, `3 min 5 s`.
 *
 * @param {number} millis
 */
export const duration = (millis) => {
  if (millis < 1000) return `${Math.round(millis)} ms`
  if (millis < 60_000) return `${(millis / 1000).toFixed(millis < 10_000 ? 2 : 1)} s`
  const minutes = Math.floor(millis / 60_000)
  return `${minutes} min ${Math.round((millis - minutes * 60_000) / 1000)} s`
}

/** @param {string} text @param {number} width */
const clip = (text, width) => (text.length <= width ? text : `${text.slice(0, width - 1)}…`)

/** Where the bars start and end, in percent of the chart's width (the labels are to their left). */
const BARS_FROM = 34
const BARS_TO = 98
const ROW = 18
const AXIS = 16

/**
 * The bars of a turn, in the order they happened: each step, then its model request and its tool
 * calls.
 *
 * @param {TurnFacts} facts
 * @returns {Array<Bar>}
 */
const barsOf = (facts) => {
  /** @type {Array<Bar>} */
  const bars = []
  const steps = [...facts.steps.values()].sort((a, b) => a.step - b.step)
  for (const step of steps) {
    bars.push({ kind: "step", label: `step ${step.step}`, title: `step ${step.step}`, start: step.start, end: step.end, isError: false })
    const request = facts.requests.get(step.step)
    if (request !== undefined) {
      bars.push({ kind: "model", label: "model request", title: `step ${step.step}: model request`, start: request.start, end: request.end, isError: false })
    }
    for (const tool of facts.tools.values()) {
      if (tool.step !== step.step) continue
      bars.push({
        kind: "tool",
        label: `tool ${clip(tool.name, 14)}`,
        title: `step ${step.step}: tool call ${tool.name} (${tool.callId})${tool.isError ? ", failed" : ""}`,
        start: tool.start,
        end: tool.end,
        isError: tool.isError
      })
    }
  }
  return bars
}

/**
 * The time bar of a turn: one row per step, model request and tool call, placed on the turn's own
 * time axis (from its start to its end, or to its latest event while it runs). A span still open
 * is drawn to the latest event, hatched.
 *
 * @param {TurnFacts} facts
 * @param {number} now the page's clock
 * @returns {SVGSVGElement | null} nothing while the turn has no step
 */
export const timeBars = (facts, now) => {
  const bars = barsOf(facts)
  if (bars.length === 0) return null
  const origin = facts.start ?? Math.min(...bars.map((bar) => bar.start))
  const until = facts.end ?? (facts.running ? facts.last + Math.max(now - facts.seenAt, 0) : facts.last)
  const span = Math.max(until - origin, 1)
  /** @param {number} time */
  const at = (time) => BARS_FROM + ((Math.min(Math.max(time, origin), until) - origin) / span) * (BARS_TO - BARS_FROM)
  const height = AXIS + bars.length * ROW + 2
  const svg = s(
    "svg",
    { class: "time-bars", width: "100%", height, role: "img", "aria-label": `time bar: ${bars.length} spans over ${duration(until - origin)}` },
    s("text", { class: "axis", x: `${BARS_FROM}%`, y: 11 }, "0"),
    s("text", { class: "axis", x: `${BARS_TO}%`, y: 11, "text-anchor": "end" }, `${facts.end === undefined ? "so far " : ""}${duration(until - origin)}`),
    s("line", { class: "axis", x1: `${BARS_FROM}%`, x2: `${BARS_TO}%`, y1: AXIS - 2, y2: AXIS - 2 })
  )
  bars.forEach((bar, index) => {
    const y = AXIS + index * ROW
    const left = at(bar.start)
    const right = at(bar.end ?? until)
    const took = (bar.end ?? until) - bar.start
    const kind = `bar bar-${bar.kind}${bar.end === undefined ? " open" : ""}${bar.isError ? " error" : ""}`
    svg.append(
      s(
        "g",
        { class: `row row-${bar.kind}` },
        s("text", { class: `label label-${bar.kind}`, x: bar.kind === "step" ? 2 : 12, y: y + 12 }, bar.label),
        s(
          "rect",
          { class: kind, "data-kind": bar.kind, x: `${left}%`, y: y + 3, width: `${Math.max(right - left, 0.6)}%`, height: 11, rx: 2 },
          s("title", {}, `${bar.title}: ${bar.end === undefined ? "running, " : ""}${duration(took)}`)
        )
      )
    )
  })
  return svg
}

/** @param {Usage | undefined} usage */
const tokens = (usage) => ({ input: usage?.inputTokens ?? 0, output: usage?.outputTokens ?? 0 })

/**
 * The tokens of a turn: one row per model reply that reported usage, input and output stacked, on
 * one scale for the turn.
 *
 * @param {TurnFacts} facts
 * @returns {SVGSVGElement | null} nothing while no reply of the turn reported usage
 */
export const usageChart = (facts) => {
  const rows = [...facts.requests.values()]
    .filter((request) => request.usage !== undefined)
    .sort((a, b) => a.step - b.step)
    .map((request) => ({ step: request.step, ...tokens(request.usage) }))
  if (rows.length === 0) return null
  const most = Math.max(1, ...rows.map((row) => row.input + row.output))
  const total = rows.reduce((sum, row) => ({ input: sum.input + row.input, output: sum.output + row.output }), { input: 0, output: 0 })
  /** @param {number} count */
  const width = (count) => (count / most) * (BARS_TO - BARS_FROM)
  const svg = s(
    "svg",
    {
      class: "usage-chart",
      width: "100%",
      height: AXIS + rows.length * ROW + 2,
      role: "img",
      "aria-label": `token usage: ${total.input} in, ${total.output} out over ${rows.length} model replies`
    },
    // the heading is the legend: each total in its bars' colour
    s(
      "text",
      { class: "axis", x: 2, y: 11 },
      "tokens: ",
      s("tspan", { class: "usage-input" }, `${total.input} in`),
      " · ",
      s("tspan", { class: "usage-output" }, `${total.output} out`)
    )
  )
  rows.forEach((row, index) => {
    const y = AXIS + index * ROW
    const input = width(row.input)
    svg.append(
      s(
        "g",
        { class: "usage-row", "data-step": row.step },
        s("text", { class: "label", x: 2, y: y + 12 }, `step ${row.step}: ${row.input + row.output}`),
        s(
          "rect",
          { class: "usage usage-input", x: `${BARS_FROM}%`, y: y + 3, width: `${input}%`, height: 11 },
          s("title", {}, `step ${row.step}: ${row.input} input tokens`)
        ),
        s(
          "rect",
          { class: "usage usage-output", x: `${BARS_FROM + input}%`, y: y + 3, width: `${width(row.output)}%`, height: 11 },
          s("title", {}, `step ${row.step}: ${row.output} output tokens`)
        )
      )
    )
  })
  return svg
}
