/**
 * DOC-04: what CI runs, read from the files that make it run. `.ci/run` itself takes half an hour
 * and the registry, so this checks its steps (and its syntax with `bash -n`) rather than running it;
 * the suite's own hygiene — no test blocks its worker's event loop on a synchronous child process,
 * which on a loaded host ends a run with vitest's "Timeout calling onTaskUpdate" — is checked over
 * every file under test/.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const read = (rel: string): string => fs.readFileSync(path.join(root, rel), "utf8")

/** The script's lines that do something (comments and blank lines dropped). */
const commands = (script: string): ReadonlyArray<string> =>
  script.split("\n").map((line) => line.trim()).filter((line) => line !== "" && !line.startsWith("#"))

/** The index of the first command line matching `pattern`, failing the test when there is none. */
const lineOf = (lines: ReadonlyArray<string>, pattern: RegExp): number => {
  const index = lines.findIndex((line) => pattern.test(line))
  assert.isAtLeast(index, 0, `.ci/run has no line matching ${pattern}`)
  return index
}

/** Every .ts file under `dir`, relative to the repository. */
const sources = (dir: string): ReadonlyArray<string> =>
  fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const rel = path.join(dir, entry.name)
    return entry.isDirectory() ? sources(rel) : entry.name.endsWith(".ts") ? [rel] : []
  })

describe("CI (DOC-04)", () => {
  it.live("DOC-04 .ci/run installs node@24 from the npm registry, builds better-sqlite3 for it offline and runs the suite on both Node versions", () =>
    Effect.gen(function*() {
      const script = read(".ci/run")
      const syntax = yield* Effect.async<string>((resume) => {
        execFile("bash", ["-n", path.join(root, ".ci", "run")], (error, _stdout, stderr) =>
          resume(Effect.succeed(error === null ? "" : `${error.message}\n${stderr}`)))
      })
      assert.strictEqual(syntax, "", "bash -n .ci/run")
      const lines = commands(script)

      // Node 24: the registry's `node` package (its platform package brings the binary and the headers)
      const install = lineOf(lines, /^npm install --prefix "\$NODE24_DIR" .*"node@\$NODE24_VERSION"/)
      const pinned = /^NODE24_VERSION=(\d+)\.(\d+)\.\d+$/.exec(lines[lineOf(lines, /^NODE24_VERSION=/)]!)
      assert.strictEqual(pinned?.[1], "24", "a Node 24 release")
      lineOf(lines, /find "\$NODE24_DIR\/node_modules" -path '\*\/include\/node\/node_api\.h'/)
      // the addon, built in a copy by npm's node-gyp running on Node 24, against those headers only
      const build = lineOf(lines, /"\$NODE24" "\$NODE_GYP" rebuild --release/)
      assert.match(lines[build + 1]!, /--nodedir="\$NODE24_HOME"/)
      assert.match(lines[build]!, /cd "\$NODE24_DIR\/better-sqlite3"/, "built in a copy, not in node_modules")
      // the ruling: what cannot be built offline is skipped, and the skip is printed
      lineOf(lines, /echo "ci: better-sqlite3 could not be built for Node 24: .*SKIPPED: \$\{NODE24_SKIP\[\*\]\}"/)

      // the README's test command on the machine's Node, then the suite on Node 24 with its addon
      const npmCi = lineOf(lines, /^npm ci$/)
      const first = lineOf(lines, /^npm test$/)
      const swap = lineOf(lines, /^cp "\$ADDON24" "\$ADDON"$/)
      const second = lineOf(lines, /^PATH="\$NODE24_BIN:\$PATH" "\$NODE24" node_modules\/vitest\/vitest\.mjs run "\$\{EXCLUDES\[@\]\}"$/)
      assert.isTrue(npmCi < install && install < build && build < first && first < swap && swap < second,
        "npm ci, node@24, the addon, npm test on Node 20, the Node 24 addon in place, the suite on Node 24")
      // the machine's addon comes back on exit, whatever happened
      assert.match(script, /cleanup\(\) \{\n\s+if \[ -f "\$ADDON\.node-default" \]; then mv -f "\$ADDON\.node-default" "\$ADDON"; fi/)
      lineOf(lines, /^trap cleanup EXIT$/)
      // no download from outside the registry: nothing fetched by URL
      assert.notMatch(script, /\b(curl|wget)\b|https?:\/\//, "only the npm registry and Debian's packages")
    }))

  it("DOC-04 no test blocks its worker's event loop on a synchronous child process (execSync, execFileSync, spawnSync)", () => {
    const blocking = new RegExp(`\\b(${["execSync", "execFileSync", "spawnSync"].join("|")})\\b`)
    const files = sources("test").filter((file) => file !== path.join("test", "ci.test.ts"))
    assert.isAbove(files.length, 50)
    const offenders = files.filter((file) => blocking.test(read(file)))
    assert.deepStrictEqual(offenders, [], "run child processes with execFile/spawn and wait asynchronously")
  })

  it("DOC-04 vitest runs the files in two forked workers, the slowest files first on a clean clone", () => {
    const config = read("vitest.config.ts")
    assert.match(config, /pool: "forks"/)
    assert.match(config, /maxForks: 2\b/)
    assert.match(config, /sequence: \{ sequencer: SlowFirstSequencer \}/)
    const listed = /const slowFirst[^=]*= \[([^\]]*)\]/.exec(config)
    assert.isNotNull(listed, "vitest.config.ts lists the slow files")
    const slow = [...listed![1]!.matchAll(/"([^"]+)"/g)].map((match) => match[1]!)
    assert.isAtLeast(slow.length, 4)
    for (const file of slow) assert.isTrue(fs.existsSync(path.join(root, file)), `${file} exists`)
  })
})
