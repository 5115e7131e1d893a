/**
 * The C kernel of ONNX Runtime's MatMulNBits quantizer (native/src/nbits_ref.c, simd_nbits.h)
 * through every backend and ISA: byte for byte the TypeScript quantizer (src/core/interop/onnx.ts)
 * — B, the scales as stored, the zero points — symmetric and not, float32 and float16 scales,
 * every block size, K odd, shorter than a block or with a partial last block (ORT's padding
 * quirks), on random and adversarial rows: ±0 extremes in either order, all-zero blocks, ties
 * after scaling, float32's extremes, subnormal ranges whose reciprocal overflows; and NaN /
 * ±Infinity at their index.
 */
import { describe, expect, it } from 'vitest';

import {
  MATMULNBITS_BLOCK_SIZES,
  matMulNBitsQuantize,
  matMulNBitsShapes,
  type MatMulNBitsParams,
} from '../../src/core/interop/onnx.js';
import { QuantdError } from '../../src/errors/index.js';
import type { KernelModule } from '../../src/kernels/index.js';
import { floatOfBits, hexBytes, parityVariants, seededUniform } from '../kernels/helpers.js';

const hex = hexBytes;

/** Seeded rows whose kind changes every `run` values. */
function adversarial(count: number, seed: number, run: number): Float32Array {
  const next = seededUniform(seed);
  const x = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const b = Math.floor(i / run);
    const scale = [1, 1e-3, 3e38, 7, 1e-30][b % 5]!;
    const r = next();
    const kind = b % 8;
    let v: number;
    if (kind === 0) v = (r - 0.5) * scale;
    else if (kind === 1)
      v = r < 0.5 ? 0 : -0; // zero blocks, the signs in any order
    else if (kind === 2)
      v = r < 0.3 ? (r < 0.15 ? 0 : -0) : r * scale; // a zero minimum
    else if (kind === 3)
      v = r < 0.3 ? (r < 0.15 ? 0 : -0) : -r * scale; // a zero maximum
    else if (kind === 4)
      v = (Math.floor(r * 31) - 15) / 2; // halves: ties after scaling
    else if (kind === 5) {
      v = floatOfBits(Math.floor(r * 2 ** 32) & 0xbfffffff); // any finite bit pattern below 2
    } else if (kind === 6)
      v = i % run === 2 ? scale : (r - 0.5) * scale * 1e-3; // one outlier
    else v = (Math.floor(r * 16) - 8) * Math.min(scale, 1e37); // integers of the scale, finite
    x[i] = v;
  }
  return x;
}

function kernelResult(k: KernelModule, w: Float32Array, shape: [number, number], p: MatMulNBitsParams) {
  const s = matMulNBitsShapes('w', shape, p.blockSize);
  const b = new Uint8Array(s.b[0] * s.b[1] * s.b[2]).fill(0xa5); // stale bytes must not show
  const scales = new Float32Array(s.scales);
  const zeroPoints = new Uint8Array(p.sym ? 0 : s.zeroPoints).fill(0x5a);
  const status = k.nbitsQuantize(
    w,
    shape[0],
    shape[1],
    p.blockSize,
    p.sym,
    p.scaleType === 'float16',
    b,
    scales,
    zeroPoints,
  );
  return { status, bad: status === 0 ? -1 : k.lastBad(), b, scales, zeroPoints };
}

/** What the TypeScript reference gives: the bytes, or the status and index the kernel must give. */
function referenceResult(w: Float32Array, shape: [number, number], p: MatMulNBitsParams) {
  try {
    const r = matMulNBitsQuantize('w', w, shape, p);
    return {
      status: 0,
      b: hex(r.b),
      scales: hex(r.scales),
      zeroPoints: r.zeroPoints ? hex(r.zeroPoints) : '',
    };
  } catch (err) {
    if (!(err instanceof QuantdError)) throw err;
    if (err.code === 'INPUT_NOT_FINITE') return { status: 1, bad: err.params['index'] };
    if (err.code === 'FEATURE_UNSUPPORTED') return { status: 2 };
    throw err;
  }
}

const PARAMS: MatMulNBitsParams[] = [];
for (const blockSize of MATMULNBITS_BLOCK_SIZES)
  for (const sym of [false, true])
    for (const scaleType of ['float32', 'float16'] as const) PARAMS.push({ blockSize, sym, scaleType });

describe.each(parityVariants())('%s', (_, k) => {
  it('the TypeScript bytes for every block size, both schemes and scale types, odd and partial K', () => {
    for (const p of PARAMS) {
      const b = p.blockSize;
      for (const K of [b * 3, b * 2 + 1, b * 2 + 6, b - 1, 1, 4 * b + 3]) {
        for (const run of [b, 7]) {
          const shape: [number, number] = [5, K];
          const w = adversarial(5 * K, K * 31 + run + b, run);
          const want = referenceResult(w, shape, p);
          const got = kernelResult(k, w, shape, p);
          const label = `${JSON.stringify(p)} K=${K} run=${run}`;
          expect([label, got.status, hex(got.b), hex(got.scales), hex(got.zeroPoints)]).toEqual([
            label,
            want.status,
            want.b,
            want.scales,
            want.zeroPoints,
          ]);
        }
      }
    }
  });

  it('a scale whose reciprocal overflows is refused at its block, as the reference refuses it', () => {
    for (const sym of [false, true]) {
      const p: MatMulNBitsParams = { blockSize: 16, sym, scaleType: 'float32' };
      const w = adversarial(3 * 48, 5, 48);
      for (let i = 0; i < 16; i++) w[2 * 48 + 16 + i] = (i - 7) * 1e-44; // row 2, block 1: subnormal range
      const got = kernelResult(k, w, [3, 48], p);
      expect([sym, got.status, got.bad]).toEqual([sym, 2, 2 * 3 + 1]);
      expect(referenceResult(w, [3, 48], p).status).toBe(2);
    }
  });

  it('NaN and ±Infinity are refused at the first such index', () => {
    const p: MatMulNBitsParams = { blockSize: 32, sym: false, scaleType: 'float32' };
    const shape: [number, number] = [4, 101];
    for (const at of [0, 5, 33, 100, 101, 250, 403]) {
      for (const bad of [NaN, Infinity, -Infinity]) {
        const w = adversarial(404, at, 404).map((v) => v * 1e-3 + 1);
        w[at] = bad;
        if (at + 40 < w.length) w[at + 40] = NaN; // a later one is not the one reported
        const got = kernelResult(k, w, shape, p);
        expect([at, bad, got.status, got.bad]).toEqual([at, bad, 1, at]);
        expect(referenceResult(w, shape, p)).toEqual({ status: 1, bad: at });
      }
    }
  });

  it('a block size that is not a power of two ≥ 16 is a bad argument', () => {
    const w = new Float32Array(64);
    for (const blockSize of [8, 48, 0])
      expect(
        k.nbitsQuantize(
          w,
          2,
          32,
          blockSize,
          false,
          false,
          new Uint8Array(64),
          new Float32Array(8),
          new Uint8Array(8),
        ),
      ).toBe(3);
  });
});
