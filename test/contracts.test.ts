/**
 * ARCH-05: the repository explains itself. Every contract id cited in `src/`, and every id a test
 * name carries, has a row in `docs/CONTRACTS.md` with its rule and the test that holds it; that
 * test exists (its file holds a test name with the id and the row's quoted words); and every section a
 * comment cites (`§6.3`) is a heading there. Plain text scans: fast, and no TypeScript parse needed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const contractsFile = "docs/CONTRACTS.md"

/**
 * A contract id: an area (`INB`, `PERS`, `SES`) and two digits, maybe a letter (`SES-02b`), then maybe
 * more of the same area: `EVT-01..04` (a range) or `RES-07/08` (a list).
 */
const idPattern = /\b([A-Z][A-Z0-9]{1,5})-(\d{2})([a-z]?)\b((?:(?:\.\.|\/)\d{2}[a-z]?\b)*)/g

/** Tokens of the id's shape that are not contracts. */
const notContracts: ReadonlySet<string> = new Set(["UTF-16"])

/**
 * One citation. The ids it writes out must be defined; those a range only spans need not be (the
 * numbering has gaps: `RES-01..08` cites the RES contracts from 01 to 08, and there is no RES-05).
 */
interface Citation {
  /** The ids written out: the first, each one after a `/`, a range's last. */
  readonly named: ReadonlyArray<string>
  /** `named` and what a range spans between its ends (`EVT-01..04` spans `EVT-02`, `EVT-03`). */
  readonly spanned: ReadonlyArray<string>
}

const idOf = (area: string, n: number, suffix = ""): string => `${area}-${String(n).padStart(2, "0")}${suffix}`

/** The contract ids a text cites. */
const citations = (text: string): Array<Citation> =>
  Array.from(text.matchAll(idPattern)).flatMap(([, area, digits, suffix, more]) => {
    const first = `${area}-${digits}${suffix}`
    if (notContracts.has(first)) return []
    const named = [first]
    const spanned = [first]
    let previous = Number(digits)
    for (const [, sep, next, nextSuffix] of (more ?? "").matchAll(/(\.\.|\/)(\d{2})([a-z]?)/g)) {
      const n = Number(next)
      if (sep === "..") for (let i = previous + 1; i < n; i++) spanned.push(idOf(area!, i))
      named.push(idOf(area!, n, nextSuffix))
      spanned.push(idOf(area!, n, nextSuffix))
      previous = n
    }
    return [{ named, spanned }]
  })

/** A test name: the first argument of `it…(`, `describe…(` or `test(` (after `.skipIf(…)` and the like). */
const testNamePattern = /(?<![.\w])(?:it|test|describe)(?:\.\w+)*(?:\([^()]*\))?\(\s*(["'`])((?:\\.|(?!\1)[^\\])*)\1/g

const testNames = (text: string): Array<string> => Array.from(text.matchAll(testNamePattern), (m) => m[2]!)

interface TestRef {
  readonly file: string
  readonly words: string
}

interface Definition {
  readonly id: string
  readonly line: number
  readonly rule: string
  readonly tests: ReadonlyArray<TestRef>
}

/** A table row whose first cell is one id: `| INB-01 | the rule | \`test/Inbox.test.ts\` "some words" |`. */
const rowPattern = /^\|\s*([A-Z][A-Z0-9]{1,5}-\d{2}[a-z]?)\s*\|/
const testRefPattern = /`(test\/[^`]+)`\s*"([^"]+)"/g

/** The rows of CONTRACTS.md that define an id, and the lines that look like one but are malformed. */
const definitions = (text: string): { readonly rows: Array<Definition>; readonly malformed: Array<string> } => {
  const rows: Array<Definition> = []
  const malformed: Array<string> = []
  text.split("\n").forEach((line, index) => {
    const id = rowPattern.exec(line)?.[1]
    if (id === undefined) {
      // a row whose first cell starts like an id but is not exactly one (`RES-07/08`, `**INB-01**`)
      const cell = line.split("|")[1]?.trim() ?? ""
      const looksLikeAnId = line.startsWith("|") && /^\W*[A-Z][A-Z0-9]{1,5}-\d{2}/.test(cell)
      if (looksLikeAnId) malformed.push(`line ${index + 1}: ${cell}`)
      return
    }
    const cells = line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|")
    const rule = cells.length >= 3 ? cells.slice(1, -1).join("|").trim() : ""
    const tests = Array.from((cells.length >= 3 ? cells[cells.length - 1]! : "").matchAll(testRefPattern), (m) => ({
      file: m[1]!,
      words: m[2]!
    }))
    rows.push({ id, line: index + 1, rule, tests })
  })
  return { rows, malformed }
}

/** Why a definition's tests do not hold it, if they do not; `names` reads a test file's names. */
const testProblems = (def: Definition, names: (file: string) => Array<string> | undefined): Array<string> => {
  if (def.rule.length === 0) return [`${def.id} (line ${def.line}) has no rule`]
  if (def.tests.length === 0) return [`${def.id} (line ${def.line}) names no test`]
  return def.tests.flatMap(({ file, words }) => {
    const inFile = names(file)
    if (inFile === undefined) return [`${def.id}: ${file} does not exist`]
    const holds = inFile.some((name) =>
      name.includes(words) && citations(name).some((c) => c.spanned.includes(def.id))
    )
    return holds ? [] : [`${def.id}: no test name in ${file} carries ${def.id} and "${words}"`]
  })
}

/** Every `.ts` file under `dir`, sorted, relative to the root. */
const sourceFiles = (dir: string): Array<string> =>
  fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const rel = path.posix.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(rel)
    return entry.name.endsWith(".ts") ? [rel] : []
  }).sort()

const read = (rel: string): string => fs.readFileSync(path.join(root, rel), "utf8")

/** Each id `named` by citations in `texts`, with the first file that names it. */
const namedIds = (texts: ReadonlyArray<readonly [file: string, text: string]>): Map<string, string> => {
  const ids = new Map<string, string>()
  for (const [file, text] of texts) {
    for (const citation of citations(text)) for (const id of citation.named) if (!ids.has(id)) ids.set(id, file)
  }
  return ids
}

/** Fails listing every problem in full (an array's diff would elide most of them). */
const assertNone = (problems: ReadonlyArray<string>, what: string): void =>
  assert.strictEqual(problems.join("\n"), "", `${what}:\n${problems.join("\n")}`)

const undefinedIn = (ids: Map<string, string>, defined: ReadonlySet<string>): Array<string> =>
  [...ids].filter(([id]) => !defined.has(id)).map(([id, file]) => `${id} (${file})`).sort()

describe("contracts (ARCH-05)", () => {
  it.effect("ARCH-05 the id reader: single ids, letter suffixes, ranges and lists; UTF-16 is no contract", () =>
    Effect.sync(() => {
      const found = citations("SES-02b, EVT-01..04 and RES-07/08 (INB-01) but not UTF-16, B9, FNV-1a or ES-2022")
      assert.deepStrictEqual(found.map((c) => c.named), [
        ["SES-02b"],
        ["EVT-01", "EVT-04"],
        ["RES-07", "RES-08"],
        ["INB-01"]
      ])
      assert.deepStrictEqual(found[1]!.spanned, ["EVT-01", "EVT-02", "EVT-03", "EVT-04"])
      assert.deepStrictEqual(
        testNames([
          `it.effect("INB-01 a", () => x)`,
          `it.scoped(\n  'PERS-01 b',`,
          "describe(`DUR-01 on ${name}`, () => {",
          `it.effect.skipIf(!pg)("HOST-04 c", f)`,
          `/x/.test("not a test")`
        ].join("\n")),
        ["INB-01 a", "PERS-01 b", "DUR-01 on ${name}", "HOST-04 c"]
      )
    }))

  it.effect("ARCH-05 the CONTRACTS.md reader: a row per id with its rule and tests; bad rows are reported", () =>
    Effect.sync(() => {
      const { malformed, rows } = definitions([
        "| id | rule | test |",
        "|---|---|---|",
        "| INB-01 | An id is accepted once. | `test/Inbox.test.ts` \"fails DuplicateMessage\" |",
        "| INB-02 | | `test/Inbox.test.ts` \"a failed append\" |",
        "| INB-03 | Each operation writes its splice. | — |",
        "| RES-07/08 | History comes back. | `test/resume.test.ts` \"comes back\" |"
      ].join("\n"))
      assert.deepStrictEqual(rows.map((r) => [r.id, r.rule, r.tests.length]), [
        ["INB-01", "An id is accepted once.", 1],
        ["INB-02", "", 1],
        ["INB-03", "Each operation writes its splice.", 0]
      ])
      assert.deepStrictEqual(malformed, ["line 6: RES-07/08"])
      const names = (file: string) =>
        file === "test/Inbox.test.ts" ? ["INB-01 a duplicate fails DuplicateMessage", "INB-01b other"] : undefined
      assert.deepStrictEqual(rows.flatMap((row) => testProblems(row, names)), [
        "INB-02 (line 4) has no rule",
        "INB-03 (line 5) names no test"
      ])
      const elsewhere = { id: "INB-06", line: 1, rule: "r", tests: [{ file: "test/Inbox.test.ts", words: "other" }] }
      assert.deepStrictEqual(testProblems(elsewhere, names), [
        "INB-06: no test name in test/Inbox.test.ts carries INB-06 and \"other\""
      ])
      const missing = { id: "INB-01", line: 1, rule: "r", tests: [{ file: "test/Gone.test.ts", words: "x" }] }
      assert.deepStrictEqual(testProblems(missing, names), ["INB-01: test/Gone.test.ts does not exist"])
    }))

  describe("the repository", () => {
    const text = read(contractsFile)
    const { malformed, rows } = definitions(text)
    const defined = new Set(rows.map((row) => row.id))
    const src = sourceFiles("src").map((file) => [file, read(file)] as const)
    const tests = sourceFiles("test").map((file) => [file, read(file)] as const)

    it.effect("ARCH-05 every contract id cited in src is defined in docs/CONTRACTS.md", () =>
      Effect.sync(() => {
        const cited = namedIds(src)
        assert.isAbove(cited.size, 100)
        assertNone(undefinedIn(cited, defined), `cited in src/ but not defined in ${contractsFile}`)
      }))

    it.effect("ARCH-05 every id a test name carries is defined in docs/CONTRACTS.md", () =>
      Effect.sync(() => {
        const carried = namedIds(tests.flatMap(([file, t]) => testNames(t).map((name) => [file, name] as const)))
        assert.isAbove(carried.size, 100)
        assertNone(undefinedIn(carried, defined), `carried by test names but not defined in ${contractsFile}`)
      }))

    it.effect("ARCH-05 each definition is one row with a rule and a test that exists and carries its id", () =>
      Effect.sync(() => {
        assertNone(malformed, "rows whose first cell is not exactly one id")
        const seen = new Set<string>()
        const twice = rows.filter((row) => seen.has(row.id) || !seen.add(row.id)).map((row) => row.id)
        assertNone(twice, "ids defined twice")
        const byFile = new Map(tests.map(([file, t]) => [file, testNames(t)]))
        const problems = rows.flatMap((row) => testProblems(row, (file) => byFile.get(file)))
        assertNone(problems, "definitions not held by their test")
      }))

    it.effect("ARCH-05 every section (§) a comment in src cites is a heading of docs/CONTRACTS.md", () =>
      Effect.sync(() => {
        const headings = new Set(Array.from(text.matchAll(/^#{2,3} §(\d+(?:\.\d+)?) /gm), (m) => m[1]!))
        const missing = new Set<string>()
        for (const [file, t] of src) {
          for (const [, section] of t.matchAll(/§(\d+(?:\.\d+)?)/g)) {
            if (!headings.has(section!)) missing.add(`§${section} (${file})`)
          }
        }
        assertNone([...missing], `sections cited in src/ with no heading in ${contractsFile}`)
      }))
  })
})
