/**
 * The fuzzer's one source of randomness: a seeded PRNG (mulberry32), so that a failing run is
 * replayed exactly by setting QUANTD_FUZZ_SEED to the seed it printed.
 */
export class Prng {
  private state: number;

  constructor(readonly seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  bytes(n: number): Buffer {
    const out = Buffer.alloc(n);
    for (let i = 0; i < n; i++) out[i] = this.int(256);
    return out;
  }
}

/** QUANTD_FUZZ_SEED when set (a replay), otherwise a fresh seed. */
export function fuzzSeed(): number {
  const given = process.env['QUANTD_FUZZ_SEED'];
  if (given !== undefined && given !== '') {
    const seed = Number(given);
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
      throw new Error(`QUANTD_FUZZ_SEED must be an integer in [0, 2^32), got ${given}`);
    }
    return seed;
  }
  return Math.floor(Math.random() * 0x100000000);
}
