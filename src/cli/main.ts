#!/usr/bin/env node
/**
 * The `effect-agent` executable (CLI-01; the package's `bin`). The command is built on packages that
 * are optional peers of the library (PKG-01: an app that only embeds agents does not install them),
 * so this launcher first checks that they can be found, and says what to install when they cannot,
 * instead of failing with a module resolution error.
 *
 * @internal
 */

import { readFileSync } from "node:fs"

/** The packages `run.ts` imports besides `effect` and `@effect/platform` (the SQL drivers load on demand). */
const required = ["@effect/cli", "@effect/platform-node", "@effect/sql"] as const

/** The peer ranges of this version of the library (from its package.json), for the installation hint. */
const peerRanges = (): Record<string, string> => {
  try {
    const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))
    return manifest.peerDependencies ?? {}
  } catch {
    return {}
  }
}

const isResolvable = (name: string): boolean => {
  try {
    import.meta.resolve(name)
    return true
  } catch {
    return false
  }
}

const missing = required.filter((name) => !isResolvable(name))
if (missing.length > 0) {
  const ranges = peerRanges()
  process.stderr.write(
    `effect-agent: the command line needs ${missing.join(", ")}, optional peer dependencies of effect-agent ` +
      "that this installation lacks. Install them next to effect-agent, for example:\n" +
      `  npm install --save-dev ${missing.map((name) => ranges[name] ? `${name}@${ranges[name]}` : name).join(" ")}\n`
  )
  process.exitCode = 1
} else {
  void import("./run.js")
}
