/**
 * PKG-02: the package as a user gets it. `npm pack` (whose `prepack` builds `dist`), then a scratch
 * consumer app with its own package.json installs the tarball offline from the npm cache,
 * type-checks the README's scripted quick start ("Trying it without a model") with `skipLibCheck: false` and runs it, and `npm ls`
 * shows one copy of `effect` (PKG-01: `effect` is a peer, never a second copy).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { VERSION } from "../src/internal/version.js"
import { codeBlockAfter, consumerLock, run } from "./fixtures/consumer.js"
import { disallowed, reachablePackages } from "./fixtures/importGraph.js"

const root = fileURLToPath(new URL("..", import.meta.url))
interface Manifest {
  readonly peerDependencies: Record<string, string>
  readonly devDependencies: Record<string, string>
  readonly [key: string]: unknown
}
const readJson = <A>(file: string): A => JSON.parse(fs.readFileSync(file, "utf8")) as A
const npm = process.platform === "win32" ? "npm.cmd" : "npm"

/** A temp directory removed with the test's Scope. */
const tempDirectory = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-pkg-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/**
 * A clean checkout in `dir`: what `git clone` gives (sources, manifests, README; no `dist`), with
 * this repository's node_modules linked in. Packing a copy leaves this repository's `dist` alone
 * (other tests run the built files).
 */
const cleanCheckout = (dir: string): string => {
  const checkout = path.join(dir, "checkout")
  fs.mkdirSync(checkout)
  for (const file of ["package.json", "package-lock.json", "README.md", "tsconfig.json", "tsconfig.build.json"]) {
    fs.copyFileSync(path.join(root, file), path.join(checkout, file))
  }
  fs.cpSync(path.join(root, "src"), path.join(checkout, "src"), { recursive: true })
  fs.cpSync(path.join(root, "inspector"), path.join(checkout, "inspector"), { recursive: true })
  fs.symlinkSync(fs.realpathSync(path.join(root, "node_modules")), path.join(checkout, "node_modules"), "dir")
  return checkout
}

/** `npm pack` of `checkout` into `dir`: the tarball's path and the files it holds. */
const pack = (checkout: string, dir: string) =>
  Effect.gen(function*() {
    const { stdout } = yield* run(npm, ["pack", "--json", "--pack-destination", dir], checkout)
    const [result] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>
    assert.isDefined(result)
    return { file: path.join(dir, result!.filename), files: result!.files.map((f) => f.path) }
  })

/** Every installed copy of `name` under `dir` (nested `node_modules` included). */
const copiesOf = (dir: string, name: string): Array<string> => {
  const found: Array<string> = []
  const walk = (modules: string) => {
    if (!fs.existsSync(modules)) return
    for (const entry of fs.readdirSync(modules)) {
      if (entry.startsWith(".")) continue
      const scoped = entry.startsWith("@")
        ? fs.readdirSync(path.join(modules, entry)).map((sub) => `${entry}/${sub}`)
        : [entry]
      for (const pkg of scoped) {
        const at = path.join(modules, pkg)
        if (pkg === name) found.push(at)
        walk(path.join(at, "node_modules"))
      }
    }
  }
  walk(path.join(dir, "node_modules"))
  return found
}

type Tarball = Effect.Effect.Success<ReturnType<typeof pack>>

/**
 * A scratch app in `dir` (its own package.json: `effect` from our peer range, the tarball, and the
 * Node packages the quick start uses), installed with `npm ci --offline` from the npm cache.
 */
const installConsumer = (dir: string, tarball: Tarball) =>
  Effect.gen(function*() {
    const manifest = readJson<Manifest>(path.join(root, "package.json"))
    const repoLock = readJson<Parameters<typeof consumerLock>[0]["repoLock"]>(path.join(root, "package-lock.json"))
    const app = path.join(dir, "app")
    fs.mkdirSync(app)
    const dependencies = {
      "@effect/platform-node": manifest.peerDependencies["@effect/platform-node"]!,
      effect: manifest.peerDependencies["effect"]!,
      "effect-agent": `file:${tarball.file}`
    }
    // @effect/platform-node's declarations import "ws": with skipLibCheck false a Node app needs @types/ws.
    const devDependencies = {
      "@types/node": manifest.devDependencies["@types/node"]!,
      "@types/ws": manifest.devDependencies["@types/ws"]!
    }
    fs.writeFileSync(
      path.join(app, "package.json"),
      JSON.stringify({ name: "consumer", private: true, type: "module", dependencies, devDependencies }, null, 2)
    )
    const lock = consumerLock({
      repoLock,
      name: "consumer",
      dependencies,
      devDependencies,
      tarball: { name: "effect-agent", file: tarball.file, manifest }
    })
    fs.writeFileSync(path.join(app, "package-lock.json"), JSON.stringify(lock, null, 2))
    yield* run(npm, ["ci", "--offline", "--no-audit", "--no-fund", "--ignore-scripts"], app)
    return app
  })

/** The README's scripted quick start as a user pastes it: type-checked with `skipLibCheck: false`, built, run. */
const runQuickStart = (app: string) =>
  Effect.gen(function*() {
    const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
    fs.writeFileSync(path.join(app, "quickstart.ts"), codeBlockAfter(readme, "### Trying it without a model"))
    const compilerOptions = {
      target: "ES2022",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      strict: true,
      skipLibCheck: false,
      types: ["node"],
      outDir: "out"
    }
    fs.writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["quickstart.ts"] }))
    yield* run(process.execPath, [path.join(root, "node_modules", "typescript", "bin", "tsc"), "-p", app], app)
    return yield* run(process.execPath, [path.join(app, "out", "quickstart.js")], app)
  })

const isCore = (pkg: string) => pkg === "effect" || pkg === "@effect/platform"

describe("packaging", () => {
  it.scoped(
    "PKG-02 PKG-01 a packed clean checkout installs offline in a fresh app, one effect; quick start checks and runs",
    () =>
      Effect.gen(function*() {
        const tmp = yield* tempDirectory
        const packDir = path.join(tmp, "pack")
        fs.mkdirSync(packDir)
        // An unbuilt checkout: prepack builds dist.
        const checkout = cleanCheckout(tmp)
        assert.isFalse(fs.existsSync(path.join(checkout, "dist")))
        const tarball = yield* pack(checkout, packDir)

        // The published files: the built modules with declarations and source maps, nothing of tests.
        const published = ["index.js", "index.js.map", "index.d.ts", "index.d.ts.map", "NodeFileSessionPersistence.js"]
        for (const file of published) assert.include(tarball.files, `dist/${file}`)
        assert.include(tarball.files, "package.json")
        // INS-01: the inspector's page ships as it is in the repository (no build), next to dist/ and src/,
        // where dist/internal/http/inspector.js looks for it
        for (const file of fs.readdirSync(path.join(root, "inspector"))) assert.include(tarball.files, `inspector/${file}`)
        assert.isFalse(tarball.files.some((file) => file.startsWith("test/") || file.startsWith("bench/")))

        const app = yield* installConsumer(tmp, tarball)

        // One copy of effect: the library's peer is the app's own (PKG-01).
        const effectDir = path.join(app, "node_modules", "effect")
        assert.deepStrictEqual(copiesOf(app, "effect"), [effectDir])
        const ls = yield* run(npm, ["ls", "effect", "--all", "--offline"], app)
        // the packed version is the library's one version (DOC-02)
        assert.include(ls.stdout, `effect-agent@${VERSION}`)
        assert.match(ls.stdout, /effect@3\.\d+\.\d+ deduped/)
        const parseable = yield* run(npm, ["ls", "effect", "--all", "--parseable", "--offline"], app)
        assert.deepStrictEqual(parseable.stdout.trim().split("\n"), [effectDir])

        // The installed index, built code and declarations alike, reaches only the required peers.
        const dist = path.join(app, "node_modules", "effect-agent", "dist")
        const built = reachablePackages(path.join(dist, "index.js"), (file) => file, dist)
        const toDeclaration = (file: string) => file.replace(/\.js$/, ".d.ts")
        const declared = reachablePackages(path.join(dist, "index.d.ts"), toDeclaration, dist)
        assert.deepStrictEqual(disallowed(built, isCore), [])
        assert.deepStrictEqual(disallowed(declared, isCore), [])
        assert.isTrue(built.has("effect") && declared.has("effect"))

        const installed = path.join(app, "node_modules", "effect-agent")
        assert.isTrue(fs.existsSync(path.join(installed, "dist", "internal", "http", "inspector.js")))
        assert.isTrue(
          fs.existsSync(
            new URL("../../../inspector/index.html", `file://${path.join(installed, "dist", "internal", "http", "inspector.js")}`)
          )
        )

        const ran = yield* runQuickStart(app)
        assert.include(ran.stdout, "user: What time is it?")
        assert.include(ran.stdout, "assistant: It is time to ship.")

        // CLI-01: the bin of an app without the CLI's optional peers says what to install (exit 1).
        const bin = path.join(app, "node_modules", ".bin", "effect-agent")
        const refused = yield* Effect.flip(run(bin, ["sessions", "list", "--dir", tmp], app))
        assert.include(refused.message, "the command line needs @effect/cli", refused.message)
        assert.include(refused.message, "npm install --save-dev @effect/cli@^0.77")
        assert.notInclude(refused.message, "ERR_MODULE_NOT_FOUND")
      }),
    // Pack (a build), an install, a full type-check of effect's declarations: about 45 s of CPU,
    // minutes of wall time on a loaded machine.
    600_000
  )
})
