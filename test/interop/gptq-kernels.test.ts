/**
 * The C kernel of AutoGPTQ's v1 packing (native/src/gptq_ref.c) through every backend: byte for
 * byte the TypeScript quantizer (src/core/interop/gptq.ts) — qweight, qzeros (with the v2 → v1
 * borrow), float16 scales, and the counts of zero-point-0 groups and clamped codes — for 2, 4 and
 * 8 bits, symmetric or not, every layer dtype, several group sizes (one group over all inputs, a
 * last group shorter than the rest), on random and adversarial rows: ±0, constant groups, groups
 * all ≥ 0 (zero point 0), halves after scaling, outliers, bfloat16 layers at 8 bits (clamped
 * codes); and the refusals: NaN / ±Infinity at their index, a group whose float16 scale is 0.
 */
import { describe, expect, it } from 'vitest';

import type { FloatDType } from '../../src/core/dtypes.js';
import { GPTQ_BITS, gptqQuantize, gptqShapes, type GptqParams } from '../../src/core/interop/gptq.js';
import { QuantdError } from '../../src/errors/index.js';
import { GPTQ_STORE, type KernelModule } from '../../src/kernels/module.js';
import { hexBytes, parityVariants, seededUniform } from '../kernels/helpers.js';

const hex = hexBytes;
const DTYPES: readonly FloatDType[] = ['float32', 'float16', 'bfloat16'];

/** Seeded rows whose kind changes every `run` values. */
function adversarial(count: number, seed: number, run: number): Float32Array {
  const next = seededUniform(seed);
  const x = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const b = Math.floor(i / run);
    const scale = [1, 1e-3, 2e3, 0.05][b % 4]!;
    const r = next();
    const kind = b % 7;
    let v: number;
    if (kind === 0) v = (r - 0.5) * scale;
    else if (kind === 1) v = r < 0.5 ? 0 : -0;
    else if (kind === 2)
      v = (Math.floor(r * 31) - 15) / 2; // halves
    else if (kind === 3)
      v = i % run === 1 ? scale : (r - 0.5) * scale * 1e-2; // one outlier
    else if (kind === 4)
      v = 0.25 * scale; // constant group
    else if (kind === 5)
      v = r * scale; // all ≥ 0: an asymmetric zero point of 0
    else v = -r * scale; // all ≤ 0
    x[i] = v;
  }
  return x;
}

function kernelResult(
  k: KernelModule,
  w: Float32Array,
  shape: [number, number],
  dtype: FloatDType,
  p: GptqParams,
) {
  const s = gptqShapes('w', shape, p);
  const qweight = new Int32Array(s.qweight[0] * s.qweight[1]).fill(-1); // stale words must not show
  const qzeros = new Int32Array(s.qzeros[0] * s.qzeros[1]).fill(-1);
  const scales = new Uint16Array(s.scales[0] * s.scales[1]);
  const counts = new Float64Array(2);
  const store = GPTQ_STORE[dtype];
  const status = k.gptqQuantize(
    w,
    shape[0],
    shape[1],
    p.bits,
    s.groupSize,
    p.sym,
    store,
    qweight,
    qzeros,
    scales,
    counts,
  );
  if (status !== 0) return { status, bad: k.lastBad() };
  return { status, qweight: hex(qweight), qzeros: hex(qzeros), scales: hex(scales), counts: [...counts] };
}

function referenceResult(w: Float32Array, shape: [number, number], dtype: FloatDType, p: GptqParams) {
  try {
    const r = gptqQuantize('w', w, shape, dtype, p);
    return {
      status: 0,
      qweight: hex(r.qweight),
      qzeros: hex(r.qzeros),
      scales: hex(r.scales),
      counts: [r.zeroPointZero, r.clampedCodes],
    };
  } catch (err) {
    if (!(err instanceof QuantdError)) throw err;
    if (err.code === 'INPUT_NOT_FINITE') return { status: 1, bad: err.params['index'] };
    if (err.code === 'FEATURE_UNSUPPORTED') return { status: 2 };
    throw err;
  }
}

describe.each(parityVariants())('%s', (_, k) => {
  it('the TypeScript bytes and counts for every bits, scheme, dtype and group size on adversarial rows', () => {
    const counted: [number, number] = [0, 0];
    for (const bits of GPTQ_BITS) {
      for (const sym of [true, false]) {
        for (const dtype of DTYPES) {
          for (const [groupSize, inF] of [
            [32, 128],
            [128, 256],
            [-1, 96],
            [48, 160], // a last group of 16
          ] as const) {
            const shape: [number, number] = [32, inF];
            const run = groupSize === -1 ? inF : groupSize;
            const w = adversarial(32 * inF, bits * 7 + inF + +sym, run);
            const p = { bits, groupSize, sym };
            const want = referenceResult(w, shape, dtype, p);
            const label = `${bits}-bit ${sym ? 'sym' : 'asym'} ${dtype} g${groupSize} in=${inF}`;
            expect([label, kernelResult(k, w, shape, dtype, p)]).toEqual([label, want]);
            expect(want.status, label).toBe(0);
            const [zeroPointZero = 0, clampedCodes = 0] = want.counts ?? [];
            counted[0] += zeroPointZero;
            counted[1] += clampedCodes;
          }
        }
      }
    }
    // the rows reach both rare paths: zero points of 0 and clamped codes
    expect(counted[0]).toBeGreaterThan(0);
    expect(counted[1]).toBeGreaterThan(0);
  });

  it('NaN and ±Infinity are refused at the first such index; a scale of 0 in float16 as the reference refuses it', () => {
    const shape: [number, number] = [32, 64];
    const p = { bits: 4 as const, groupSize: 32, sym: false };
    for (const at of [0, 31, 64, 300, 2047]) {
      for (const bad of [NaN, Infinity, -Infinity]) {
        const w = adversarial(2048, at, 2048).map((v) => v * 1e-3);
        w[at] = bad;
        if (at + 20 < w.length) w[at + 20] = NaN;
        expect([at, bad, kernelResult(k, w, shape, 'float32', p)]).toEqual([at, bad, { status: 1, bad: at }]);
        expect(referenceResult(w, shape, 'float32', p)).toEqual({ status: 1, bad: at });
      }
    }
    // row 3, group 1 spans 1e-9: its scale is 0 in float16
    const w = adversarial(2048, 3, 2048).map((v) => v * 1e-3);
    w.fill(1e-9, 3 * 64 + 32, 3 * 64 + 64);
    expect(kernelResult(k, w, shape, 'float32', p)).toEqual({ status: 2, bad: 3 * 2 + 1 });
    expect(referenceResult(w, shape, 'float32', p).status).toBe(2);
  });
});
