import { relative } from "node:path"
import { defineConfig } from "vitest/config"
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The files that take longest, longest first (DOC-04: two suites in 30 minutes on 2 cores). Vitest
 * orders by the durations of the last run when it has them (the Node 24 run of `.ci/run` has the
 * Node 20 run's); a clean clone has none, and would start these late and end on them alone.
 */
const slowFirst: ReadonlyArray<string> = [
  "test/chaos.test.ts",
  "test/packaging.test.ts",
  "test/McpTools.test.ts",
  "test/cli.test.ts",
  "test/Cluster-processes.test.ts",
  "test/inspector.test.ts"
]

class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const sorted = await super.sort(files)
    const rank = (file: TestSpecification) => {
      const index = slowFirst.findIndex((name) => file.moduleId.endsWith(name))
      return index === -1 ? slowFirst.length : index
    }
    const hasHistory = sorted.every((file) =>
      this.ctx.cache.getFileTestResults(`${file.project.name}:${relative(this.ctx.config.root, file.moduleId)}`)
    )
    return hasHistory ? sorted : sorted.map((file, order) => ({ file, order }))
      .sort((a, b) => rank(a.file) - rank(b.file) || a.order - b.order)
      .map(({ file }) => file)
  }
}

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    pool: "forks",
    poolOptions: {
      forks: { minForks: 1, maxForks: 2 }
    },
    sequence: { sequencer: SlowFirstSequencer },
    testTimeout: 60_000,
    hookTimeout: 60_000
  }
})
