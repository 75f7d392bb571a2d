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
