/**
 * The plan of each chaos cycle (DUR-13), a pure function of the run's seed and the cycle number,
 * so `--seed S` reproduces every cycle's plan (the exact instant a kill lands still depends on
 * timing; the plan says where the driver aims it).
 */
import * as Prng from "./prng.js"

/** The backends the suite runs on. */
export type Backend = "file" | "sqlite"

/**
 * Where a cycle's SIGKILL is aimed:
 * - `acks`: after the worker acknowledged `acks` verbs;
 * - `takeover`: right after a `phase resume` of a session whose lock or lease a dead writer left
 *   (inside the lock takeover, DUR-06);
 * - `repair`: right after a `phase resume` of a log that ends inside a turn (inside the repair,
 *   DUR-12);
 * - `big-append`: right after a `phase big-append` (inside the write of a 1 MiB follow-up);
 * - `clean`: no kill; the worker finishes its verbs and shuts down gracefully.
 */
export type Target = "acks" | "takeover" | "repair" | "big-append" | "clean"

/** One cycle's plan. */
export interface CyclePlan {
  readonly cycle: number
  readonly target: Target
  /** Matching markers to let pass before the one the kill is aimed at. */
  readonly skip: number
  /** Milliseconds between seeing the marker (or the last counted ack) and the kill. */
  readonly delayMillis: number
  /** The kill of an `acks` cycle, and the fall-back of the others: after this many acknowledged verbs. */
  readonly acks: number
  /** Verbs per session the worker performs (it exits by itself after them). */
  readonly ops: number
  /** The probability that a verb is a 1 MiB follow-up. */
  readonly big: number
}

/** The plan of cycle `cycle` of the run `seed` on `backend`. */
export const planCycle = (seed: number, cycle: number, backend: Backend): CyclePlan => {
  const rng = Prng.make(Prng.derive(seed, cycle, 0x706c616e))
  const target = rng.weighted<Target>([
    ["acks", 35],
    // SQLite has no lock files: its takeover is of an expired lease, rarer to catch, still worth aiming at.
    ["takeover", backend === "file" ? 20 : 10],
    ["repair", 20],
    ["big-append", 15],
    ["clean", 4]
  ])
  const acks = target === "acks" ? rng.int(1, 30) : rng.int(20, 50)
  return {
    cycle,
    target,
    skip: target === "takeover" || target === "repair" ? rng.int(0, 1) : 0,
    delayMillis: rng.int(0, target === "big-append" ? 12 : 6),
    acks,
    ops: target === "clean" ? rng.int(2, 5) : 30,
    big: target === "big-append" ? 0.12 : 0.01
  }
}
