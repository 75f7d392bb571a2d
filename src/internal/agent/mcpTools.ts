/**
 * MCP tools as the agent sees them (MCP-01): the provider-safe names, which of a server's tools are
 * offered (`allow`/`deny`), what a `tools/call` result becomes (result parts), and the global
 * registry that offers them beside the native global tools (a native tool wins a name).
 *
 * @internal
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { Effect } from "effect"
import type { ContentPart } from "../../Message.js"
import type * as Tool from "../../Tool.js"

// -------------------------------------------------------------------------------------------------
// Names

/** What providers take as a tool name (OpenAI's rule; Anthropic's is the same). */
const SAFE_NAME = /^[A-Za-z0-9_-]{1,64}$/

/** FNV-1a over the UTF-16 code units: a short, pure hash (the same in every process and run). */
const fnv1a = (value: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < value.length; i++) {
    hash ^= value.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash >>> 0
}

/**
 * The name the model sees for `tool` of `server`: `<prefix><server>__<tool>` when that is already
 * provider-safe; otherwise every other character becomes `_`, the name is cut to fit 64 characters
 * and ends with `_` and a hash of the wanted name, so two names that clean up alike stay apart. Pure:
 * the same name in every process, so a resumed session's calls still name the tool they called.
 *
 * @internal
 */
export const modelToolName = (prefix: string, server: string, tool: string): string => {
  const wanted = `${prefix}${server}__${tool}`
  if (SAFE_NAME.test(wanted)) return wanted
  const suffix = `_${fnv1a(wanted).toString(36).padStart(7, "0")}`
  return wanted.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64 - suffix.length) + suffix
}

/**
 * Whether a server's tool is offered: named by `allow` when it is given, and not named by `deny`
 * (names as the server gives them).
 *
 * @internal
 */
export const isOffered = (
  tool: string,
  filter: { readonly allow?: ReadonlyArray<string> | undefined; readonly deny?: ReadonlyArray<string> | undefined }
): boolean => (filter.allow === undefined || filter.allow.includes(tool)) && !(filter.deny ?? []).includes(tool)

// -------------------------------------------------------------------------------------------------
// Results

const text = (value: string): ContentPart => ({ type: "text", text: value })

type ContentBlock = CallToolResult["content"][number]

/** One content block as result parts: text and images as they are, the rest described in text. */
const partOf = (block: ContentBlock): ContentPart => {
  switch (block.type) {
    case "text":
      return text(block.text)
    case "image":
      return { type: "image", mediaType: block.mimeType, data: block.data }
    case "audio":
      return text(`[audio (${block.mimeType}) left out: tool results carry text and images only]`)
    case "resource": {
      const resource = block.resource
      const mime = resource.mimeType !== undefined ? ` (${resource.mimeType})` : ""
      if ("text" in resource && typeof resource.text === "string") return text(`Resource ${resource.uri}${mime}:\n${resource.text}`)
      if ("blob" in resource && typeof resource.blob === "string" && resource.mimeType?.startsWith("image/") === true) {
        return { type: "image", mediaType: resource.mimeType, data: resource.blob }
      }
      return text(`[resource ${resource.uri}${mime} left out: its content is binary]`)
    }
    case "resource_link": {
      const about = block.description !== undefined ? `: ${block.description}` : ""
      return text(`Resource link ${block.name} <${block.uri}>${about}`)
    }
  }
}

/**
 * A `tools/call` result as a tool result (MCP-01): text, image and resource contents map to
 * result parts (an embedded text resource as text naming its URI, an image blob as an image;
 * what the log cannot carry is described in text), `isError` becomes an error result, and
 * `structuredContent` is kept as a JSON text part unless a text part already says exactly that.
 *
 * @internal
 */
export const toToolResult = (result: CallToolResult): Tool.ToolResult => {
  const content = (result.content ?? []).map(partOf)
  if (result.structuredContent !== undefined) {
    const json = JSON.stringify(result.structuredContent)
    if (!content.some((part) => part.type === "text" && part.text === json)) content.push(text(json))
  }
  return { content, isError: result.isError === true }
}

// -------------------------------------------------------------------------------------------------
// The registry

/**
 * The tools of one server as last listed, named for the model, in the server's order.
 *
 * @internal
 */
export interface ServerTools {
  readonly server: string
  readonly tools: ReadonlyArray<Tool.Any>
}

/**
 * A name the model could not be given twice: `tool` of `server` is left out because a native global
 * tool (`winner: undefined`) or an earlier server's tool already has it.
 *
 * @internal
 */
export interface Collision {
  readonly name: string
  readonly server: string
  readonly winner: string | undefined
}

/**
 * The tools the agents see: the native global tools, then each server's (in the order the servers
 * are configured) whose name is not taken yet. Deterministic, so the same configuration offers the
 * same tools after a restart.
 *
 * @internal
 */
export const mergeTools = (
  native: ReadonlyArray<Tool.Any>,
  servers: ReadonlyArray<ServerTools>
): { readonly tools: ReadonlyArray<Tool.Any>; readonly collisions: ReadonlyArray<Collision> } => {
  if (servers.every((server) => server.tools.length === 0)) return { tools: native, collisions: [] }
  const owner = new Map<string, string | undefined>(native.map((tool) => [tool.name, undefined]))
  const tools = [...native]
  const collisions: Array<Collision> = []
  for (const { server, tools: offered } of servers) {
    for (const tool of offered) {
      if (owner.has(tool.name)) {
        collisions.push({ name: tool.name, server, winner: owner.get(tool.name) })
      } else {
        owner.set(tool.name, server)
        tools.push(tool)
      }
    }
  }
  return { tools, collisions }
}

const collisionText = (collision: Collision): string =>
  collision.winner === undefined
    ? `MCP server ${JSON.stringify(collision.server)}: its tool ${JSON.stringify(collision.name)} is not offered, ` +
      "a native tool has that name (rename one, or leave the MCP tool out with the server's deny list)"
    : `MCP server ${JSON.stringify(collision.server)}: its tool ${JSON.stringify(collision.name)} is not offered, ` +
      `server ${JSON.stringify(collision.winner)} already offers a tool of that name (use prefix, or a deny list)`

/**
 * The global tool registry of `McpTools.layer`: registrations go to `native` (the context's global
 * registry, or an empty one), and `list` is {@link mergeTools} over the native tools and the
 * servers' current tools. A collision is logged once, as a warning, when it is first seen. `list`
 * runs at every step: its result is kept until either input changes.
 *
 * @internal
 */
export const makeRegistry = (
  native: Tool.ToolRegistryShape,
  servers: Effect.Effect<ReadonlyArray<ServerTools>>
): Tool.ToolRegistryShape => {
  let last:
    | {
      readonly native: ReadonlyArray<Tool.Any>
      readonly servers: ReadonlyArray<ServerTools>
      readonly tools: ReadonlyArray<Tool.Any>
    }
    | undefined
  const warned = new Set<string>()
  const list = Effect.flatMap(native.list, (nativeTools) =>
    Effect.flatMap(servers, (serverTools) => {
      if (last !== undefined && last.native === nativeTools && last.servers === serverTools) {
        return Effect.succeed(last.tools)
      }
      const merged = mergeTools(nativeTools, serverTools)
      last = { native: nativeTools, servers: serverTools, tools: merged.tools }
      const fresh = merged.collisions.filter((collision) => {
        const key = `${collision.server}\u0000${collision.name}\u0000${collision.winner ?? ""}`
        if (warned.has(key)) return false
        warned.add(key)
        return true
      })
      return Effect.as(Effect.forEach(fresh, (c) => Effect.logWarning(collisionText(c)), { discard: true }), merged.tools)
    }))
  return { register: native.register, registerAll: native.registerAll, list }
}
