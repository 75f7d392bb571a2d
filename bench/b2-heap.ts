/**
 * B2's retainers: what each live idle agent holds, by V8 heap snapshot diff. Creates one warm-up agent,
 * snapshots the heap after a full GC, creates `count` idle agents (default 1,000), snapshots again, and
 * prints the objects present only in the second snapshot grouped by kind and constructor or function
 * name, as bytes and instances per agent. Not a scenario of the runner (it takes a minute and writes two
 * snapshots to a temp directory, removed at the end unless `B2_HEAP_KEEP` is set).
 *
 *   node --expose-gc --import tsx bench/b2-heap.ts [count]
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as v8 from "node:v8"
import { AgentRegistry } from "../src/index.js"
import { memoryRuntime, route } from "./fixtures.js"
import { collect } from "./harness.js"

interface Snapshot {
  readonly snapshot: {
    readonly meta: {
      readonly node_fields: Array<string>
      readonly node_types: Array<unknown>
      readonly edge_fields: Array<string>
      readonly edge_types: Array<unknown>
    }
  }
  readonly nodes: Array<number>
  readonly edges: Array<number>
  readonly strings: Array<string>
}

/** A snapshot's node: its kind and name, self size, and its first retainer's kind and name. */
interface Node {
  readonly key: string
  readonly size: number
  owner: string
}

interface Group {
  bytes: number
  count: number
}

/** Every node of a snapshot by id: what it is and the first node that points at it (by a non-weak edge). */
const nodesOf = (file: string): Map<number, Node> => {
  const parsed = JSON.parse(fs.readFileSync(file, "utf8")) as Snapshot
  const meta = parsed.snapshot.meta
  const kinds = meta.node_types[0] as Array<string>
  const edgeKinds = meta.edge_types[0] as Array<string>
  const width = meta.node_fields.length
  const edgeWidth = meta.edge_fields.length
  const field = (name: string) => meta.node_fields.indexOf(name)
  const [type, name, id, size, edgeCount] = ["type", "name", "id", "self_size", "edge_count"].map(field) as [
    number,
    number,
    number,
    number,
    number
  ]
  const [edgeType, edgeTo] = ["type", "to_node"].map((f) => meta.edge_fields.indexOf(f)) as [number, number]
  const keys: Array<string> = []
  const byIndex: Array<Node> = []
  const out = new Map<number, Node>()
  for (let i = 0; i < parsed.nodes.length; i += width) {
    const kind = kinds[parsed.nodes[i + type]!]!
    const label = parsed.strings[parsed.nodes[i + name]!]!
    // strings and code are named by their content: group them by kind only
    const key = kind === "string" || kind === "concatenated string" || kind === "sliced string" || kind === "code"
      ? kind
      : `${kind} ${label.slice(0, 60)}`
    const node: Node = { key, size: parsed.nodes[i + size]!, owner: "" }
    keys.push(key)
    byIndex.push(node)
    out.set(parsed.nodes[i + id]!, node)
  }
  let edge = 0
  for (let n = 0; n < byIndex.length; n++) {
    const edges = parsed.nodes[n * width + edgeCount]!
    for (let e = 0; e < edges; e++, edge += edgeWidth) {
      if (edgeKinds[parsed.edges[edge + edgeType]!] === "weak") continue
      const target = byIndex[parsed.edges[edge + edgeTo]! / width]!
      if (target.owner === "") target.owner = keys[n]!
    }
  }
  return out
}

const snapshotNow = (dir: string, label: string): string => {
  collect()
  return v8.writeHeapSnapshot(path.join(dir, `${label}.heapsnapshot`))
}

const main = (count: number) =>
  Effect.scoped(Effect.gen(function*() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-b2-heap-"))
    if (process.env.B2_HEAP_KEEP === undefined) {
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
    } else {
      process.stdout.write(`snapshots kept in ${dir}\n`)
    }
    const context = yield* memoryRuntime
    const [before, after] = yield* Effect.scoped(Effect.gen(function*() {
      const registry = yield* AgentRegistry.AgentRegistry
      // one agent first, so lazily built module state is not charged to the measured ones
      yield* registry.create({ sessionId: "warm", options: route })
      const before = snapshotNow(dir, "before")
      for (let i = 0; i < count; i++) yield* registry.create({ sessionId: `agent-${i}`, options: route })
      const after = snapshotNow(dir, "after")
      return [before, after] as const
    })).pipe(Effect.provide(context))
    const old = nodesOf(before)
    const groups = new Map<string, Group & { readonly owners: Map<string, number> }>()
    let total = 0
    for (const [id, node] of nodesOf(after)) {
      if (old.has(id)) continue
      const group = groups.get(node.key) ?? { bytes: 0, count: 0, owners: new Map<string, number>() }
      group.bytes += node.size
      group.count++
      group.owners.set(node.owner, (group.owners.get(node.owner) ?? 0) + node.size)
      groups.set(node.key, group)
      total += node.size
    }
    const rows = [...groups].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, 30)
    const perAgent = (bytes: number) => (bytes / count).toFixed(0)
    process.stdout.write(`new objects per idle agent (${count} agents): ${(total / count / 1024).toFixed(2)} KB\n`)
    process.stdout.write("| bytes/agent | objects/agent | kind and name | held by (bytes/agent) |\n|---:|---:|---|---|\n")
    for (const [key, group] of rows) {
      const owners = [...group.owners].sort((a, b) => b[1] - a[1]).slice(0, 3)
        .map(([owner, bytes]) => `${owner || "?"} ${perAgent(bytes)}`).join("; ")
      process.stdout.write(`| ${perAgent(group.bytes)} | ${(group.count / count).toFixed(2)} | ${key} | ${owners} |\n`)
    }
  }))

Effect.runPromise(main(Number(process.argv[2] ?? 1_000))).catch((error) => {
  process.stderr.write(`${String(error)}\n`)
  process.exitCode = 1
})
