/**
 * The seeded randomness of the crash-consistency suite (DUR-13): a small, fast PRNG (mulberry32)
 * and a way to derive independent seeds from a run's seed and a path (cycle, session, …), so that
 * `--seed S` reproduces every cycle's plan and every worker's choice of verbs.
 */

/** A stream of pseudo-random numbers from one 32-bit seed. */
export interface Prng {
  /** Uniform in [0, 1). */
  readonly next: () => number
  /** Uniform integer in [low, high] (both included). */
  readonly int: (low: number, high: number) => number
  /** True with probability `p`. */
  readonly chance: (p: number) => boolean
  /** One of `choices`, each with its weight (weights need not sum to 1). */
  readonly weighted: <A>(choices: ReadonlyArray<readonly [A, number]>) => A
}

/** Mixes `value` into `hash` (a 32-bit avalanche step of murmur3's finalizer). */
const mix = (hash: number, value: number): number => {
  let h = (hash ^ Math.imul(value | 0, 0x9e3779b1)) >>> 0
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return (h ^ (h >>> 16)) >>> 0
}

/** A seed for the part of a run named by `path` (e.g. `derive(seed, cycle, session)`). */
export const derive = (seed: number, ...path: ReadonlyArray<number>): number =>
  path.reduce((hash, value) => mix(hash, value), mix(0x2545f491, seed))

/** The PRNG of `seed` (mulberry32). */
export const make = (seed: number): Prng => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (low: number, high: number) => low + Math.floor(next() * (high - low + 1))
  const weighted = <A>(choices: ReadonlyArray<readonly [A, number]>): A => {
    const total = choices.reduce((sum, [, weight]) => sum + weight, 0)
    let roll = next() * total
    for (const [choice, weight] of choices) {
      if (roll < weight) return choice
      roll -= weight
    }
    return choices[choices.length - 1]![0]
  }
  return { next, int, chance: (p) => next() < p, weighted }
}
