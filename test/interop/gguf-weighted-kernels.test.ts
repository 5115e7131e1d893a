/**
 * The C kernel for every ggml type with an importance matrix (native/src/ggml_weighted.c, the
 * weighted paths of simd_ggml.h) through every backend and ISA: byte for byte the TypeScript
 * oracle (src/core/interop/ggml-imatrix.ts, itself byte-equal to libllama in test/gguf-mix) on
 * weight-like and adversarial rows, against column weights with zeros and outliers. Only finite
 * rows: the gguf layout refuses any other before encoding. Both also equal llama.cpp's own bytes
 * (golden/gguf-weighted.json, from libggml's ggml_quantize_chunk with an importance matrix).
 */
import { readFileSync } from 'node:fs';

import { describe, expect, it } from 'vitest';

import { ggmlEncodeWeighted } from '../../src/core/interop/ggml-imatrix.js';
import { GGML_KERNEL_TYPES, type GgmlKernelType } from '../../src/kernels/index.js';
import { floatOfBits, parityVariants, seededUniform } from '../kernels/helpers.js';

const TYPES = Object.keys(GGML_KERNEL_TYPES) as GgmlKernelType[];

interface GoldenCase {
  readonly name: string;
  readonly ne0: number;
  readonly input: number[];
  readonly weights: number[];
  /** ggml type → hex of the rows' blocks */
  readonly expected: Readonly<Record<string, string>>;
}
const GOLDEN = (
  JSON.parse(readFileSync(new URL('./golden/gguf-weighted.json', import.meta.url), 'utf8')) as {
    cases: GoldenCase[];
  }
).cases;
const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

describe('the TypeScript oracle with an importance matrix', () => {
  it.each(GOLDEN.map((c) => [c.name, c] as const))('%s: every type gives libggml’s bytes', (_name, c) => {
    const x = Float32Array.from(c.input);
    const qw = Float32Array.from(c.weights);
    for (const [type, expected] of Object.entries(c.expected))
      expect(hex(ggmlEncodeWeighted(type, x, c.ne0, qw)), type).toBe(expected);
  });
});

/** Column weights as llama-imatrix's mean squared activations look, with zeros and outliers. */
function columnWeights(ne0: number, seed: number): Float32Array {
  const next = seededUniform(seed);
  return Float32Array.from({ length: ne0 }, (_, i) =>
    i % 37 === 0 ? 0 : i % 53 === 0 ? 1e4 * next() : next() * next() + 1e-6,
  );
}

/** Weight-like values (a sum of four uniforms, a few larger). */
function weightLike(count: number, seed: number): Float32Array {
  const next = seededUniform(seed);
  return Float32Array.from({ length: count }, () => {
    const v = next() + next() + next() + next() - 2;
    return next() < 0.01 ? v * 8 : v * 0.05;
  });
}

/** Finite values that stress the searches: halves, ±0, subnormals, all-equal runs, one outlier. */
function adversarial(count: number, seed: number): Float32Array {
  const next = seededUniform(seed);
  const x = new Float32Array(count);
  let same = 0;
  for (let i = 0; i < count; i++) {
    const run = Math.floor(i / 16);
    const scale = [1, 1e-3, 1e-30, 1e6][run % 4]!;
    const r = next();
    const kind = run % 6;
    if (kind === 0) x[i] = (Math.floor(r * 16) - 8 + 0.5) * scale;
    else if (kind === 1) x[i] = r < 0.5 ? 0 : -0;
    else if (kind === 2)
      x[i] = floatOfBits(Math.floor(r * 2 ** 32) & 0x807fffff); // subnormals
    else if (kind === 3) {
      if (i % 16 === 0) same = (r - 0.5) * scale;
      x[i] = same;
    } else if (kind === 4) x[i] = i % 16 === 5 ? scale : (r - 0.5) * scale * 1e-3;
    else x[i] = (r - 0.5) * scale;
  }
  return x;
}

const outOf = (type: GgmlKernelType, x: Float32Array): Uint8Array =>
  new Uint8Array((x.length / GGML_KERNEL_TYPES[type].blockSize) * GGML_KERNEL_TYPES[type].blockBytes).fill(
    0xa5,
  );

const firstDifference = (a: Uint8Array, b: Uint8Array): number => a.findIndex((v, i) => v !== b[i]);

describe.each(parityVariants())('%s', (_name, k) => {
  it.each(TYPES)('%s: the golden rows give libggml’s bytes', (type) => {
    for (const c of GOLDEN) {
      const x = Float32Array.from(c.input);
      const out = outOf(type, x);
      const id = GGML_KERNEL_TYPES[type].id;
      expect(k.ggmlQuantizeWeighted(id, x, c.ne0, Float32Array.from(c.weights), out)).toBe(0);
      expect(hex(out), c.name).toBe(c.expected[type]);
    }
  });

  it.each(TYPES)('%s: weight-like rows equal the TypeScript oracle', (type) => {
    const ne0 = 1024;
    const x = weightLike(ne0 * 24, type.length * 13 + 1);
    const qw = columnWeights(ne0, 7);
    const out = outOf(type, x);
    expect(k.ggmlQuantizeWeighted(GGML_KERNEL_TYPES[type].id, x, ne0, qw, out)).toBe(0);
    expect(firstDifference(out, ggmlEncodeWeighted(type, x, ne0, qw))).toBe(-1);
  });

  it.each(TYPES)('%s: adversarial rows equal the TypeScript oracle', (type) => {
    const ne0 = 512;
    const x = adversarial(ne0 * 48, type.length * 101 + 3);
    const qw = columnWeights(ne0, 11);
    const out = outOf(type, x);
    expect(k.ggmlQuantizeWeighted(GGML_KERNEL_TYPES[type].id, x, ne0, qw, out)).toBe(0);
    expect(firstDifference(out, ggmlEncodeWeighted(type, x, ne0, qw))).toBe(-1);
  });

  it('rows spanning more than one wasm chunk (65536 floats) have no seams', () => {
    const ne0 = 4096;
    const x = weightLike(ne0 * 20, 5);
    const qw = columnWeights(ne0, 3);
    const out = outOf('Q4_K', x);
    expect(k.ggmlQuantizeWeighted(GGML_KERNEL_TYPES.Q4_K.id, x, ne0, qw, out)).toBe(0);
    expect(firstDifference(out, ggmlEncodeWeighted('Q4_K', x, ne0, qw))).toBe(-1);
  });

  it('refuses an unknown type and rows that are not whole blocks', () => {
    const x = new Float32Array(512);
    const qw = new Float32Array(512).fill(1);
    expect(k.ggmlQuantizeWeighted(GGML_KERNEL_TYPES.IQ4_NL.id, x, 48, qw, new Uint8Array(1024))).toBe(3);
    expect(k.ggmlQuantizeWeighted(12, x, 512, qw, new Uint8Array(1024))).toBe(3);
    expect(k.ggmlQuantizeWeighted(GGML_KERNEL_TYPES.Q4_K.id, x, 128, qw, new Uint8Array(1024))).toBe(3);
  });
});
