/**
 * B8: resume a session holding 10,000 pending inbox items, against B4 at the same size (10,000
 * events) and against `JSON.parse` of its own file.
 */
import type { Row, Scenario } from "./harness.js"
import { fmt, stat } from "./harness.js"
import { measured, measureResume } from "./b4.js"
import { pendingLog, turnLog } from "./fixtures.js"

const SIZE = 10_000

export const scenario: Scenario = {
  id: "B8",
  title: "resume a session holding 10,000 pending inbox items",
  run: async ({ quick, log }) => {
    const rounds = quick ? 2 : 5
    const b4 = measured.get(SIZE) ?? (await measureResume(`b4-${SIZE}`, turnLog(SIZE), rounds, log))
    const result = await measureResume(`b8-${SIZE}`, pendingLog(SIZE), rounds, log)
    const vsB4 = stat(result.ours.samples.map((ms) => ms / b4.ours.median))
    const row: Row = {
      id: "B8",
      scenario: `resume with ${fmt(SIZE)} pending inbox items (${fmt(result.bytes / 1024 / 1024)} MB), file`,
      ours: result.ours,
      unit: "ms",
      raw: { label: "readFile+JSON.parse", value: result.raw },
      costRatio: result.ratio,
      notes: `vs B4 at ${fmt(SIZE)} events: ${fmt(vsB4.median)}×`,
      peer: `≈10 s → ${fmt(10_000 / result.ours.median)}× faster`,
      extra: { vsB4: vsB4.median }
    }
    return [row]
  }
}
