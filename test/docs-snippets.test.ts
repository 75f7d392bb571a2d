/**
 * DOC-01: the README is a guide a user can copy from. Every TypeScript block of the README and of the
 * guides in `docs/guides/` type-checks as written (each block is its own module, importing the package by
 * its published names), and the README stays short and free of contract ids (they live in
 * `docs/CONTRACTS.md`).
 *
 * The blocks are written to `.tmp/snippets/` with a tsconfig that maps `effect-agent` and its subpaths
 * to `src/`, and `tsc` checks them in a child process, so the worker's event loop stays free.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const snippetsDir = path.join(root, ".tmp", "snippets")

/** A fenced TypeScript block: where it is and what it says. */
interface Block {
  readonly file: string
  readonly line: number
  readonly code: string
}

/** The documents a user reads: the README and every guide. */
const documents = (): Array<string> => {
  const guides = path.join(root, "docs", "guides")
  const inGuides = fs.existsSync(guides) ?
    fs.readdirSync(guides).filter((name) => name.endsWith(".md")).sort().map((name) => path.join("docs", "guides", name)) :
    []
  return ["README.md", ...inGuides]
}

/** The ```ts and ```typescript blocks of a Markdown text, with the line each starts on. */
const blocksOf = (file: string, text: string): Array<Block> => {
  const blocks: Array<Block> = []
  const lines = text.split("\n")
  let open: { line: number; body: Array<string> } | undefined
  lines.forEach((line, index) => {
    if (open === undefined) {
      if (/^```(ts|typescript)\s*$/.test(line)) open = { line: index + 1, body: [] }
    } else if (/^```\s*$/.test(line)) {
      blocks.push({ file, line: open.line, code: open.body.join("\n") })
      open = undefined
    } else {
      open.body.push(line)
    }
  })
  return blocks
}

const snippetName = (block: Block): string =>
  `${block.file.replace(/[/.]/g, "_")}_L${block.line}.ts`

/** The checking project: strict as the library's own, `effect-agent` mapped to the sources. */
const tsconfig = {
  compilerOptions: {
    target: "ES2022",
    module: "NodeNext",
    moduleResolution: "NodeNext",
    lib: ["ES2022", "DOM"],
    types: ["node"],
    strict: true,
    exactOptionalPropertyTypes: true,
    noUncheckedIndexedAccess: true,
    skipLibCheck: true,
    noEmit: true,
    moduleDetection: "force",
    baseUrl: "../..",
    paths: {
      "effect-agent": ["src/index.ts"],
      "effect-agent/*": ["src/*.ts"]
    }
  },
  include: ["*.ts"]
}

const writeSnippets = (blocks: ReadonlyArray<Block>): void => {
  fs.rmSync(snippetsDir, { recursive: true, force: true })
  fs.mkdirSync(snippetsDir, { recursive: true })
  fs.writeFileSync(path.join(snippetsDir, "tsconfig.json"), JSON.stringify(tsconfig, null, 2))
  for (const block of blocks) fs.writeFileSync(path.join(snippetsDir, snippetName(block)), block.code + "\n")
}

/** Runs `tsc` over the snippets; resolves with its output (empty when every block checks). */
const typeCheck = Effect.async<string>((resume) => {
  const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc")
  const child = execFile(
    process.execPath,
    [tsc, "-p", path.join(snippetsDir, "tsconfig.json"), "--pretty", "false"],
    { cwd: root, maxBuffer: 16 * 1024 * 1024 },
    (_error, stdout, stderr) => resume(Effect.succeed(`${stdout}${stderr}`.trim()))
  )
  return Effect.sync(() => child.kill())
})

/** Rewrites `tsc`'s snippet paths into `README.md:123`-style places a reader can find. */
const explain = (output: string, blocks: ReadonlyArray<Block>): string => {
  const byName = new Map(blocks.map((block) => [snippetName(block), block]))
  return output.split("\n").map((line) => {
    const match = /([\w.-]+_L\d+\.ts)\((\d+),(\d+)\)/.exec(line)
    const block = match ? byName.get(path.basename(match[1]!)) : undefined
    return block && match ?
      `${block.file}:${block.line + Number(match[2])} ${line.slice(match.index + match[0].length)}` :
      line
  }).join("\n")
}

const idPattern = /\b[A-Z][A-Z0-9]{1,5}-\d{2}[a-z]?\b/g

describe("docs", () => {
  it.effect("DOC-01 every TypeScript block of the README and the guides type-checks as written", () =>
    Effect.gen(function*() {
      const blocks = documents().flatMap((file) => blocksOf(file, fs.readFileSync(path.join(root, file), "utf8")))
      assert.isAbove(blocks.length, 5)
      writeSnippets(blocks)
      const output = yield* typeCheck
      assert.strictEqual(explain(output, blocks), "")
    }), 180_000)

  it("DOC-01 the README is a guide: at most 1,000 lines and at most 20 contract ids", () => {
    const text = fs.readFileSync(path.join(root, "README.md"), "utf8")
    const lines = text.split("\n").length
    const ids = Array.from(text.matchAll(idPattern), (m) => m[0]).filter((id) => id !== "UTF-16")
    assert.isAtMost(lines, 1000, `README.md has ${lines} lines`)
    assert.isAtMost(ids.length, 20, `README.md cites ${ids.length} contract ids: ${[...new Set(ids)].join(", ")}`)
  })
})
