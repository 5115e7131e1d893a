/**
 * The C kernel of bitsandbytes' NF4 / FP4 (native/src/bnb_ref.c, simd_bnb.h) through every
 * backend and ISA: byte for byte the golden vectors and the TypeScript quantizer
 * (src/core/interop/bnb.ts) on random and adversarial blocks — values on every threshold and one
 * ulp either side, ±0, all-zero blocks, subnormals, float32's extremes, partial last blocks, odd
 * counts, block sizes the vector path does not take — and NaN / ±Infinity refused at their index.
 */
import { describe, expect, it } from 'vitest';

import { bnbQuantize, BNB_BLOCKSIZES, type BnbQuantType } from '../../src/core/interop/bnb.js';
import { BNB_KERNEL_TYPES } from '../../src/kernels/index.js';
import { floatOfBits, hexBytes, parityVariants, seededUniform } from '../kernels/helpers.js';
import { golden, goldenWeight } from './gptq-awq-bnb.helpers.js';

const TYPES: readonly BnbQuantType[] = ['nf4', 'fp4'];
const f = Math.fround;
const hex = hexBytes;

/** One float32 ulp away from x, up or down. */
function ulp(x: number, dir: 1 | -1): number {
  const a = new Float32Array([x]);
  const u = new Uint32Array(a.buffer);
  if (x === 0) return dir * 1.4e-45;
  u[0] = x > 0 === dir > 0 ? u[0]! + 1 : u[0]! - 1;
  return a[0]!;
}

/** The thresholds of both decision trees (bnb.ts), as values of a block whose absmax is 1. */
const THRESHOLDS = [
  0.03979014977812767, 0.3893125355243683, 0.6427869200706482, 0.8614784181118011, 0.5016634166240692,
  0.2035212516784668, 0.2920137718319893, 0.1202552504837513, -0.33967943489551544, -0.13791173323988914,
  -0.045525018125772476, -0.23460740596055984, -0.6106329262256622, -0.4599952697753906, -0.8480964004993439,
  0.29166667, 0.583333, 0.8333333, 0.4166667, 0.0859375, 0.20833333, 0.00260417,
].map(f);

/** Every threshold, ±, and one ulp either side, behind a 1 that makes absmax 1 and inv exactly 1. */
function onThresholds(): Float32Array {
  const values = [1];
  for (const t of THRESHOLDS) for (const v of [t, -t]) values.push(v, ulp(v, 1), ulp(v, -1));
  return Float32Array.from(values);
}

/** Seeded values whose kind changes every `run`: scales from subnormal to float32's largest. */
function adversarial(count: number, seed: number, run: number): Float32Array {
  const next = seededUniform(seed);
  const x = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const b = Math.floor(i / run);
    const scale = [1, 1e-3, 1e-40, 3.4e38, 7][b % 5]!;
    const r = next();
    const kind = b % 7;
    let v: number;
    if (kind === 0) v = (r - 0.5) * scale;
    else if (kind === 1)
      v = r < 0.5 ? 0 : -0; // an all-zero block: inv = ∞, codes of NaN
    else if (kind === 2) {
      v = floatOfBits(Math.floor(r * 2 ** 32) & 0x807fffff); // subnormals
    } else if (kind === 3) {
      v = floatOfBits(Math.floor(r * 2 ** 32) & 0xbfffffff); // any finite bit pattern
    } else if (kind === 4) v = THRESHOLDS[Math.floor(r * THRESHOLDS.length)]! * scale * (r < 0.5 ? 1 : -1);
    else if (kind === 5)
      v = i % run === 3 ? scale : (r - 0.5) * scale * 1e-3; // one outlier
    else v = (Math.floor(r * 16) - 8) / 8; // exact multiples of the absmax
    x[i] = v;
  }
  return x;
}

interface BnbCase {
  name: string;
  dtype: string;
  quant_type: BnbQuantType;
  blocksize: number;
  weight: string[];
  packed: string;
}

describe.each(parityVariants())('%s', (_, k) => {
  function quantize(type: BnbQuantType, x: Float32Array, blocksize: number) {
    const packed = new Uint8Array(Math.ceil(x.length / 2)).fill(0xa5); // stale bytes must not show
    const absmax = new Float32Array(Math.ceil(x.length / blocksize));
    const status = k.bnbQuantize(BNB_KERNEL_TYPES[type], x, blocksize, packed, absmax);
    return { status, packed, absmax };
  }

  it('the golden vectors', () => {
    for (const c of golden<BnbCase>('bnb_vectors.json').cases) {
      const { status, packed } = quantize(c.quant_type, goldenWeight(c.weight, c.dtype), c.blocksize);
      expect([c.name, status, hex(packed)]).toEqual([c.name, 0, c.packed]);
    }
  });

  it.each(TYPES)('%s: the TypeScript bytes on thresholds, adversarial and random blocks', (type) => {
    const inputs: Array<[string, Float32Array, number]> = [['thresholds', onThresholds(), 64]];
    for (const blocksize of [...BNB_BLOCKSIZES, 96, 100, 33]) {
      for (const n of [blocksize * 5, blocksize * 3 + 17, blocksize * 2 + 1, 1, 0]) {
        inputs.push([`${blocksize}/${n}/adversarial`, adversarial(n, blocksize + n, 64), blocksize]);
        inputs.push([`${blocksize}/${n}/per-block`, adversarial(n, n, blocksize), blocksize]);
      }
    }
    for (const [name, x, blocksize] of inputs) {
      const got = quantize(type, x, blocksize);
      const want = bnbQuantize(name, x, type, blocksize);
      expect([name, got.status, hex(got.packed), hex(got.absmax)]).toEqual([
        name,
        0,
        hex(want.packed),
        hex(want.absmax),
      ]);
    }
  });

  it.each(TYPES)('%s: NaN and ±Infinity are refused at the first such index, in any block', (type) => {
    for (const blocksize of [64, 4096, 100]) {
      const n = blocksize * 3 + 5;
      for (const at of [0, 7, blocksize + 1, 2 * blocksize + 63, n - 1]) {
        for (const bad of [NaN, Infinity, -Infinity]) {
          const x = adversarial(n, at, 64).map((v) => (Number.isFinite(v) ? v : 0));
          x[at] = bad;
          if (at + 9 < n) x[at + 9] = NaN; // a later one is not the one reported
          expect([blocksize, at, bad, quantize(type, x, blocksize).status, k.lastBad()]).toEqual([
            blocksize,
            at,
            bad,
            1,
            at,
          ]);
        }
      }
    }
  });

  it('an unknown type or a block size of 0 is a bad argument', () => {
    const x = new Float32Array(64);
    expect(k.bnbQuantize(2, x, 64, new Uint8Array(32), new Float32Array(1))).toBe(3);
    expect(k.bnbQuantize(0, x, 0, new Uint8Array(32), new Float32Array(1))).toBe(3);
  });
});
