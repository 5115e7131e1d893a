/**
 * The C kernels for ggml Q8_0 / Q4_0 (native/src/ggml_ref.c, simd_ggml.h) through every backend
 * and ISA: byte for byte the pinned golden blocks and the TypeScript quantizers
 * (src/core/interop/ggml-legacy.ts) on random and adversarial blocks; and the gguf layout that
 * uses them writes the same file as with QUANTD_BACKEND=js.
 */
import { readFileSync } from 'node:fs';

import { describe, expect, it } from 'vitest';

import { ggmlEncode } from '../../src/core/interop/ggml.js';
import { GGML_KERNEL_TYPES } from '../../src/kernels/index.js';
import { parityVariants } from '../kernels/helpers.js';

const TYPES = ['Q8_0', 'Q4_0'] as const;
const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

function golden(type: string): Array<{ name: string; input: number[]; expected: string }> {
  const url = new URL(`./golden/gguf-${type.toLowerCase()}.json`, import.meta.url);
  return (
    JSON.parse(readFileSync(url, 'utf8')) as {
      cases: Array<{ name: string; input: number[]; expected: string }>;
    }
  ).cases;
}

/** Deterministic blocks that stress the rounding: halves after scaling, ±0, subnormals, ±Inf, NaN, ties of |max|. */
function adversarial(blocks: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const next = (): number => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s / 2 ** 32);
  const bits = new Uint32Array(1);
  const asFloat = new Float32Array(bits.buffer);
  const x = new Float32Array(32 * blocks);
  for (let b = 0; b < blocks; b++) {
    const kind = b % 8;
    const scale = [1, 1e-3, 1e-40, 3e38][b % 4]!;
    for (let j = 0; j < 32; j++) {
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
        bits[0] = Math.floor(r * 2 ** 32) & 0x807fffff; // subnormals
        v = asFloat[0]!;
      } else {
        bits[0] = Math.floor(r * 2 ** 32); // any bit pattern
        v = asFloat[0]!;
      }
      x[32 * b + j] = v;
    }
  }
  return x;
}

describe.each(parityVariants())('%s', (_name, k) => {
  it.each(TYPES)('%s: every golden block', (type) => {
    for (const c of golden(type)) {
      const x = Float32Array.from(c.input);
      const out = new Uint8Array((x.length / 32) * GGML_KERNEL_TYPES[type].blockBytes);
      expect(k.ggmlQuantize(GGML_KERNEL_TYPES[type].id, x, out)).toBe(0);
      expect(hex(out), c.name).toBe(c.expected);
    }
  });

  it.each(TYPES)('%s: adversarial blocks equal the TypeScript quantizer', (type) => {
    const x = adversarial(4096 + 3, type.length * 7919);
    const out = new Uint8Array((x.length / 32) * GGML_KERNEL_TYPES[type].blockBytes).fill(0xa5);
    expect(k.ggmlQuantize(GGML_KERNEL_TYPES[type].id, x, out)).toBe(0);
    const expected = ggmlEncode(type, x, 32);
    const firstDiff = out.findIndex((b, i) => b !== expected[i]);
    expect(firstDiff, `first differing byte at ${firstDiff}`).toBe(-1);
  });

  it('spans more than one wasm chunk (65536 floats) without seams', () => {
    const x = adversarial(65536 / 32 + 5, 42);
    const out = new Uint8Array((x.length / 32) * 34);
    expect(k.ggmlQuantize(GGML_KERNEL_TYPES.Q8_0.id, x, out)).toBe(0);
    expect(hex(out)).toBe(hex(ggmlEncode('Q8_0', x, 32)));
  });
});
