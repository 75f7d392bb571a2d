// @ts-check
/**
 * DOM helpers of the inspector (INS-01). Text is only ever set as text: nothing a session holds is
 * parsed as HTML.
 */

/**
 * @typedef {string | number | Node | null | undefined | false} Child
 * @typedef {Record<string, string | number | boolean | undefined | ((event: Event) => void)>} Attributes
 */

/**
 * An element with attributes (`class`, `data-*`, `title`, …; a function is an event listener named
 * `on<event>`) and children (strings become text nodes; `null`, `undefined` and `false` are skipped).
 *
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Attributes} [attributes]
 * @param {ReadonlyArray<Child>} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export const h = (tag, attributes = {}, ...children) => {
  const element = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === false) continue
    if (typeof value === "function") element.addEventListener(name.slice(2), value)
    else if (value === true) element.setAttribute(name, "")
    else element.setAttribute(name, String(value))
  }
  append(element, children)
  return element
}

/**
 * @param {Element} parent
 * @param {ReadonlyArray<Child>} children
 */
export const append = (parent, children) => {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue
    parent.append(typeof child === "number" ? String(child) : child)
  }
}

/**
 * Replaces an element's children.
 *
 * @param {Element} parent
 * @param {ReadonlyArray<Child>} children
 */
export const replace = (parent, children) => {
  parent.replaceChildren()
  append(parent, children)
}

/**
 * The element with this id, which the page's HTML must have.
 *
 * @template {HTMLElement} T
 * @param {string} id
 * @param {{ new (): T }} type
 * @returns {T}
 */
export const byId = (id, type) => {
  const element = document.getElementById(id)
  if (!(element instanceof type)) throw new Error(`the inspector page has no ${type.name} #${id}`)
  return element
}

/**
 * A time as `HH:MM:SS.mmm` (local).
 *
 * @param {number} millis
 */
export const clock = (millis) => {
  const date = new Date(millis)
  const pad = (/** @type {number} */ n, /** @type {number} */ width = 2) => String(n).padStart(width, "0")
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`
}

/**
 * JSON text pretty-printed when it parses, else as it is (a model may send arguments that do not).
 *
 * @param {string} text
 */
export const prettyJson = (text) => {
  try {
    return JSON.stringify(JSON.parse(text), null, 2)
  } catch {
    return text
  }
}

/**
 * Keeps the end of an element in view while it grows (DOC-03: the timeline follows a streaming
 * reply), unless the reader scrolled away from it; scrolling back to the end, or `resume`, follows
 * again. The page's own scrolls never count as the reader's: only a scroll above the last position
 * the follower set turns following off.
 */
export class Follower {
  /** How close to the end (px) a reader counts as being at the end. */
  static SLACK = 48
  /** The room (px) left below the end when the follower scrolls to it. */
  static MARGIN = 12

  /**
   * @param {HTMLElement} target the element whose end is followed
   * @param {(following: boolean) => void} [shown] told when following turns on or off
   */
  constructor(target, shown = () => {}) {
    this.target = target
    this.shown = shown
    this.following = true
    /** @type {number} the window's scroll position after the follower's own last scroll */
    this.placed = 0
    window.addEventListener("scroll", () => this.scrolled(), { passive: true })
  }

  /** How far the end of the target is below the bottom of the window (negative when above it). */
  below() {
    return this.target.getBoundingClientRect().bottom - window.innerHeight
  }

  /** @param {boolean} following */
  set(following) {
    if (this.following === following) return
    this.following = following
    this.shown(following)
  }

  scrolled() {
    if (this.below() <= Follower.SLACK) this.set(true)
    else if (window.scrollY < this.placed - 2) this.set(false)
  }

  /** After the target changed: its end is scrolled into view if the reader follows it. */
  reveal() {
    if (!this.following) return
    const below = this.below()
    if (below > 0) window.scrollBy(0, below + Follower.MARGIN)
    this.placed = window.scrollY
  }

  /** Follows again (a new session, or the reader asked to) and scrolls to the end. */
  resume() {
    this.set(true)
    this.reveal()
  }
}
