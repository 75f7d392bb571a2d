/**
 * CORE-10: the source is made of small named functions. Every function in `src/**\/*.ts` (declarations,
 * arrows, function expressions, generator bodies, methods and accessors) spans at most 120 lines,
 * nested functions included in their parent's span; the walker is the TypeScript compiler's parser.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"

const root = fileURLToPath(new URL("..", import.meta.url))
const maxLines = 120

interface LongFunction {
  readonly file: string
  readonly line: number
  readonly name: string
  readonly lines: number
}

/** Every `.ts` file under `dir`, sorted. */
const sourceFiles = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith(".ts") ? [full] : []
  }).sort()

/** What a reader would call the function: its own name, or the name of what it is assigned to. */
const nameOf = (node: ts.Node, source: ts.SourceFile): string => {
  const named = node as ts.Node & { readonly name?: ts.Node }
  if (named.name !== undefined) return named.name.getText(source)
  const parent = node.parent
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) {
    return parent.name.getText(source)
  }
  if (ts.isCallExpression(parent)) return `(argument of ${parent.expression.getText(source).slice(0, 40)})`
  return "(anonymous)"
}

/** The functions of one source text longer than `limit` lines. */
const longFunctions = (file: string, text: string, limit: number): Array<LongFunction> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS)
  const found: Array<LongFunction> = []
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body !== undefined) {
      const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line
      const end = source.getLineAndCharacterOfPosition(node.getEnd()).line
      const lines = end - start + 1
      if (lines > limit) found.push({ file, line: start + 1, name: nameOf(node, source), lines })
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

describe("module shape", () => {
  it.effect("CORE-10 the walker reports a function over the limit, nested or not, and passes a short one", () =>
    Effect.sync(() => {
      const body = Array.from({ length: 6 }, (_, i) => `  const x${i} = ${i}`).join("\n")
      const text = [
        "export const short = () => 1",
        "export function outer() {",
        "  const inner = function*() {",
        body,
        "  }",
        "  return inner",
        "}"
      ].join("\n")
      const found = longFunctions("sample.ts", text, 5)
      assert.deepStrictEqual(found.map((f) => [f.name, f.line, f.lines]), [["outer", 2, 11], ["inner", 3, 8]])
    }))

  it.effect("CORE-10 no function in src is over 120 lines", () =>
    Effect.sync(() => {
      const files = sourceFiles(path.join(root, "src"))
      assert.isAbove(files.length, 20)
      const offenders = files.flatMap((file) =>
        longFunctions(path.relative(root, file), fs.readFileSync(file, "utf8"), maxLines)
      )
      assert.deepStrictEqual(offenders.map((f) => `${f.file}:${f.line} ${f.name} (${f.lines} lines)`), [])
    }))

  it.effect("CORE-09 no Mailbox in src: its reader can miss a wake-up (a Queue's take registers, then looks again)", () =>
    Effect.sync(() => {
      const users = sourceFiles(path.join(root, "src"))
        .filter((file) => /import\s+(?:type\s+)?\{[^}]*\bMailbox\b[^}]*\}\s*from "effect"/.test(fs.readFileSync(file, "utf8")))
        .map((file) => path.relative(root, file))
      assert.deepStrictEqual(users, [])
    }))
})
