/**
 * The C kernels for the ggml types (native/src/ggml_ref.c, ggml_kquants.c, ggml_iquants.c,
 * simd_ggml.h) through every backend and ISA: byte for byte the pinned golden blocks and the
 * TypeScript quantizers (src/core/interop/ggml-legacy.ts, ggml-kquants.ts, ggml-iquants.ts) on
 * random and adversarial blocks.
 */
import { readFileSync } from 'node:fs';

import { describe, expect, it } from 'vitest';

import { GGML_TYPES, QUANT_TYPES, ggmlEncode } from '../../src/core/interop/ggml.js';
import { GGML_KERNEL_TYPES } from '../../src/kernels/index.js';
import { floatOfBits, parityVariants, seededUniform } from '../kernels/helpers.js';

/** Every type quantd writes has a C kernel. */
const TYPES = QUANT_TYPES;
const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

function golden(type: string): Array<{ name: string; input: number[]; expected: string }> {
  const url = new URL(`./golden/gguf-${type.toLowerCase()}.json`, import.meta.url);
  return (
    JSON.parse(readFileSync(url, 'utf8')) as {
      cases: Array<{ name: string; input: number[]; expected: string }>;
    }
  ).cases;
}

/**
 * Deterministic values that stress the rounding: halves after scaling, ±0, subnormals, ±Inf,
 * NaN, ties of |max|, all-equal runs, one outlier. The kind (and scale) changes every `run`
 * values: 32 mixes kinds inside a K-quant super-block, 256 gives each super-block one kind.
 */
function adversarial(count: number, seed: number, run = 32): Float32Array {
  const next = seededUniform(seed);
  const x = new Float32Array(count);
  let same = 0;
  for (let i = 0; i < count; i++) {
    const b = Math.floor(i / run);
    const j = i % run;
    const kind = b % 10;
    const scale = [1, 1e-3, 1e-40, 3e38][b % 4]!;
    const r = next();
    let v: number;
    if (kind === 0)
      v = (Math.round(r * 254) - 127) * (scale / 127); // codes at exact integers
    else if (kind === 1)
      v = (Math.floor(r * 16) - 8 + 0.5) * scale; // x·id + 8.5 at integers
    else if (kind === 2)
      v = j === 0 || j === 7 ? (j === 0 ? -scale : scale) : r * scale; // |max| tie, signs differ
    else if (kind === 3) v = r < 0.5 ? 0 : -0;
    else if (kind === 4) v = r < 0.1 ? (r < 0.05 ? Infinity : -Infinity) : (r - 0.5) * scale;
    else if (kind === 5) v = r < 0.1 ? NaN : (r - 0.5) * scale;
    else if (kind === 6) {
      v = floatOfBits(Math.floor(r * 2 ** 32) & 0x807fffff); // subnormals
    } else if (kind === 7) {
      v = floatOfBits(Math.floor(r * 2 ** 32)); // any bit pattern
    } else if (kind === 8) {
      if (j === 0) same = (r - 0.5) * scale; // all equal
      v = same;
    } else v = j === 5 ? scale : (r - 0.5) * scale * 1e-3; // one outlier
    x[i] = v;
  }
  return x;
}

/** Weight-like values (a sum of four uniforms, a few larger): where the searches' later trials win. */
function weightLike(count: number, seed: number): Float32Array {
  const next = seededUniform(seed);
  const x = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const v = next() + next() + next() + next() - 2;
    x[i] = next() < 0.01 ? v * 8 : v * 0.05;
  }
  return x;
}

const blocksOf = (type: (typeof TYPES)[number], x: Float32Array): Uint8Array =>
  new Uint8Array((x.length / GGML_KERNEL_TYPES[type].blockSize) * GGML_KERNEL_TYPES[type].blockBytes);

/**
 * The first block whose bytes differ, -1 if none. K-quant and IQ4 blocks holding a NaN are not
 * compared: their searches pass NaNs through sums of two NaN operands, and which payload comes
 * out (it reaches nearest_int's mantissa bits, or the sign of IQ4_NL's fp16 scale) is neither
 * IEEE's, C's nor JavaScript's to fix — the TypeScript oracle's own bytes depend on the engine's
 * register choices. No such block is ever written: the gguf layout refuses non-finite input
 * (checkGgmlFinite). The other 32-value types never combine two NaNs, so they are compared on
 * every block.
 */
function firstDifferingBlock(
  type: (typeof TYPES)[number],
  x: Float32Array,
  out: Uint8Array,
  expected: Uint8Array,
): number {
  const { blockSize, blockBytes } = GGML_KERNEL_TYPES[type];
  for (let b = 0; b < x.length / blockSize; b++) {
    if (
      (blockSize === 256 || type === 'IQ4_NL') &&
      x.subarray(b * blockSize, (b + 1) * blockSize).some(Number.isNaN)
    )
      continue;
    for (let i = b * blockBytes; i < (b + 1) * blockBytes; i++) if (out[i] !== expected[i]) return b;
  }
  return -1;
}

describe.each(parityVariants())('%s', (_name, k) => {
  it.each(TYPES)('%s: every golden block', (type) => {
    for (const c of golden(type)) {
      const x = Float32Array.from(c.input);
      const out = blocksOf(type, x);
      expect(k.ggmlQuantize(GGML_KERNEL_TYPES[type].id, x, out)).toBe(0);
      expect(hex(out), c.name).toBe(c.expected);
    }
  });

  it.each(TYPES)('%s: adversarial blocks equal the TypeScript quantizer', (type) => {
    for (const [run, nan] of [
      [32, true],
      [256, true],
      [32, false], // every K-quant and IQ4 block compared: NaN → +Inf
    ] as const) {
      const x = adversarial(256 * (512 + 3), type.length * 7919 + run, run);
      if (!nan) x.forEach((v, i) => Number.isNaN(v) && (x[i] = Infinity));
      const out = blocksOf(type, x).fill(0xa5);
      expect(k.ggmlQuantize(GGML_KERNEL_TYPES[type].id, x, out)).toBe(0);
      const expected = ggmlEncode(type, x, 256);
      const bad = firstDifferingBlock(type, x, out, expected);
      expect(bad, `kinds every ${run} values (NaN: ${nan}): first differing block ${bad}`).toBe(-1);
    }
  });

  it.each(TYPES)('%s: weight-like blocks equal the TypeScript quantizer', (type) => {
    const x = weightLike(256 * 4096, type.length * 31 + 5);
    const out = blocksOf(type, x);
    expect(k.ggmlQuantize(GGML_KERNEL_TYPES[type].id, x, out)).toBe(0);
    expect(firstDifferingBlock(type, x, out, ggmlEncode(type, x, 256))).toBe(-1);
  });

  it.each(['Q8_0', 'Q5_1', 'Q6_K', 'IQ4_XS'] as const)(
    '%s spans more than one wasm chunk (65536 floats) without seams',
    (type) => {
      const x = adversarial(65536 + 256 * 5, 42);
      const out = blocksOf(type, x);
      expect(k.ggmlQuantize(GGML_KERNEL_TYPES[type].id, x, out)).toBe(0);
      expect(firstDifferingBlock(type, x, out, ggmlEncode(type, x, 256))).toBe(-1);
    },
  );

  it('rejects an unknown type', () => {
    expect(k.ggmlQuantize(12, new Float32Array(32), new Uint8Array(64))).toBe(3);
  });
});

it('each ggml.ts row with a kernel names the C kernel of its type', () => {
  for (const t of GGML_TYPES) {
    if (t.kernel === undefined) continue;
    const row = GGML_KERNEL_TYPES[t.name as keyof typeof GGML_KERNEL_TYPES];
    expect(row, t.name).toBeDefined();
    expect(t.kernel, t.name).toBe(row.id);
  }
});
