/**
 * ARCH-02: no value cycles. The import graph of `src/` as the runtime sees it: an `import` or an
 * `export … from` is a value edge unless it is `import type`/`export type`, or every specifier of it
 * is inline `type`. A cycle of value edges means some module reads another's bindings before they
 * exist; the walker is the TypeScript compiler's parser and Tarjan's strongly connected components.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"

const root = fileURLToPath(new URL("..", import.meta.url))

/** Every `.ts` file under `dir`, sorted. */
const sourceFiles = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") ? [full] : []
  }).sort()

/** Whether an import or export statement only carries types. */
const isTypeOnly = (statement: ts.ImportDeclaration | ts.ExportDeclaration): boolean => {
  if (ts.isExportDeclaration(statement)) {
    if (statement.isTypeOnly) return true
    const clause = statement.exportClause
    return clause !== undefined && ts.isNamedExports(clause) && clause.elements.length > 0 &&
      clause.elements.every((element) => element.isTypeOnly)
  }
  const clause = statement.importClause
  if (clause === undefined) return false // `import "./x.js"` runs the module
  if (clause.isTypeOnly) return true
  const bindings = clause.namedBindings
  return clause.name === undefined && bindings !== undefined && ts.isNamedImports(bindings) &&
    bindings.elements.length > 0 && bindings.elements.every((element) => element.isTypeOnly)
}

/** The value edges of one source text: the relative specifiers it imports or re-exports values from. */
const valueSpecifiers = (file: string, text: string): Array<string> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS)
  return source.statements.flatMap((statement) => {
    if (!ts.isImportDeclaration(statement) && !ts.isExportDeclaration(statement)) return []
    const specifier = statement.moduleSpecifier
    if (specifier === undefined || !ts.isStringLiteral(specifier) || isTypeOnly(statement)) return []
    return [specifier.text]
  })
}

/** Every specifier a source text imports or re-exports from, types included. */
const allSpecifiers = (file: string, text: string): Array<string> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS)
  return source.statements.flatMap((statement) => {
    if (!ts.isImportDeclaration(statement) && !ts.isExportDeclaration(statement)) return []
    const specifier = statement.moduleSpecifier
    return specifier !== undefined && ts.isStringLiteral(specifier) ? [specifier.text] : []
  })
}

/** The name of the function declaration or `const` a node is in (its outermost named one), or `<module>`. */
const enclosingName = (node: ts.Node): string => {
  let name = "<module>"
  for (let at: ts.Node | undefined = node.parent; at !== undefined; at = at.parent) {
    if (ts.isFunctionDeclaration(at) && at.name !== undefined) name = at.name.text
    else if (ts.isVariableDeclaration(at) && ts.isIdentifier(at.name)) name = at.name.text
  }
  return name
}

/** Where a source text calls `sessionId(…)` (or `Message.sessionId(…)`): the function each call is in. */
const sessionIdDecodes = (file: string, text: string): Array<string> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS)
  const found: Array<string> = []
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node)) {
      const callee = node.expression
      const name = ts.isIdentifier(callee) ? callee.text : ts.isPropertyAccessExpression(callee) ? callee.name.text : ""
      if (name === "sessionId") found.push(enclosingName(node))
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

/** The file a relative specifier names (`./x.js` is `./x.ts`), if it is one of `files`. */
const resolve = (from: string, specifier: string, files: ReadonlySet<string>): string | undefined => {
  if (!specifier.startsWith(".")) return undefined
  const base = path.resolve(path.dirname(from), specifier).replace(/\.js$/, "")
  return [`${base}.ts`, path.join(base, "index.ts")].find((candidate) => files.has(candidate))
}

/** The strongly connected components of more than one file (Tarjan's algorithm). */
const cyclesOf = (graph: ReadonlyMap<string, ReadonlyArray<string>>): Array<Array<string>> => {
  let next = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const cycles: Array<Array<string>> = []
  const visit = (v: string): void => {
    index.set(v, next)
    low.set(v, next)
    next++
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!))
    }
    if (low.get(v) !== index.get(v)) return
    const component: Array<string> = []
    let w: string
    do {
      w = stack.pop()!
      onStack.delete(w)
      component.push(w)
    } while (w !== v)
    if (component.length > 1) cycles.push(component.sort())
  }
  for (const v of graph.keys()) if (!index.has(v)) visit(v)
  return cycles
}

/** The value-import graph of the named files (paths relative to `base`) and their texts. */
const graphOf = (base: string, texts: ReadonlyMap<string, string>): Map<string, Array<string>> => {
  const files = new Set(Array.from(texts.keys(), (file) => path.join(base, file)))
  const graph = new Map<string, Array<string>>()
  for (const [file, text] of texts) {
    const full = path.join(base, file)
    const edges = valueSpecifiers(full, text).flatMap((specifier) => {
      const target = resolve(full, specifier, files)
      return target === undefined ? [] : [path.relative(base, target)]
    })
    graph.set(file, edges)
  }
  return graph
}

describe("architecture", () => {
  it.effect("ARCH-02 the walker finds a value cycle and ignores type-only edges", () =>
    Effect.sync(() => {
      const texts = new Map([
        ["A.ts", "import * as b from \"./internal/b.js\"\nexport const a = b.b"],
        ["internal/b.ts", "import { c } from \"./c.js\"\nexport const b = c"],
        ["internal/c.ts", "import { type A } from \"../A.js\"\nimport type * as Facade from \"../A.js\"\nexport const c = 1"],
        ["D.ts", "export { e } from \"./internal/e.js\"\nexport const d = 1"],
        ["internal/e.ts", "import { d } from \"../D.js\"\nexport const e = d"],
        ["F.ts", "export type { G } from \"./internal/g.js\""],
        ["internal/g.ts", "import \"../F.js\"\nexport type G = number"]
      ])
      const cycles = cyclesOf(graphOf("/virtual", texts))
      // A -> b -> c -> A only through types, F <-> g only through a type re-export: D <-> e is the one
      assert.deepStrictEqual(cycles, [["D.ts", "internal/e.ts"]])
    }))

  it.effect("ARCH-02 no value-import cycle in src: internals import their facades for types only", () =>
    Effect.sync(() => {
      const files = sourceFiles(path.join(root, "src"))
      assert.isAbove(files.length, 50)
      const texts = new Map(files.map((file) => [path.relative(root, file), fs.readFileSync(file, "utf8")]))
      const cycles = cyclesOf(graphOf(root, texts))
      assert.deepStrictEqual(cycles.map((cycle) => cycle.join(" -> ")), [])
    }))

  it.effect("ARCH-02 storage does not build the runtime: no module under src/internal/storage imports AgentRuntime", () =>
    Effect.sync(() => {
      const files = sourceFiles(path.join(root, "src", "internal", "storage"))
      // the file and SQL stores themselves live here (their facades assemble the runtime)
      assert.includeMembers(files.map((file) => path.relative(root, file)), [
        path.join("src", "internal", "storage", "file", "persistence.ts"),
        path.join("src", "internal", "storage", "sql", "persistence.ts")
      ])
      const offenders = files.flatMap((file) =>
        allSpecifiers(file, fs.readFileSync(file, "utf8"))
          .filter((specifier) => /(^|\/)AgentRuntime\.js$/.test(specifier))
          .map((specifier) => `${path.relative(root, file)} imports ${specifier}`)
      )
      assert.deepStrictEqual(offenders, [])
    }))

  it.effect("ARCH-04 the stores decode only the names they read, never a SessionId they are given", () =>
    Effect.sync(() => {
      // the walker finds a decode and names the function it is in
      assert.deepStrictEqual(
        sessionIdDecodes("x.ts", "const a = (id: string) => Message.sessionId(id)\nfunction b(s: string) { return sessionId(s) }"),
        ["a", "b"]
      )
      const stores = [
        ...sourceFiles(path.join(root, "src", "internal", "storage")),
        ...["SessionPersistence.ts", "FileSessionPersistence.ts", "SqlSessionPersistence.ts", "NodeFileSessionPersistence.ts"]
          .map((file) => path.join(root, "src", file))
      ]
      const decodes = stores.flatMap((file) =>
        sessionIdDecodes(file, fs.readFileSync(file, "utf8")).map((where) => `${path.relative(root, file)} ${where}`)
      )
      // `list` decodes a file's name and a row's id (DUR-08: an invalid one is listed as unreadable);
      // every method that takes a SessionId uses it as given (it was decoded where it entered)
      assert.deepStrictEqual(decodes, [
        `${path.join("src", "internal", "storage", "file", "persistence.ts")} entryOf`,
        `${path.join("src", "internal", "storage", "sql", "persistence.ts")} entryOf`
      ])
    }))
})
