/**
 * The C kernel of AutoAWQ's GEMM packing (native/src/awq_ref.c) through every backend: byte for
 * byte the TypeScript quantizer (src/core/interop/awq.ts) — qweight, qzeros, float16 scales — for
 * several group sizes (and one group over all inputs) on random and adversarial rows: values near
 * float16's largest, tiny ranges (the range floor), ties after scaling, constant groups, ±0; and
 * the refusals: NaN / ±Infinity at their index, a group whose float16 scale is not finite.
 */
import { describe, expect, it } from 'vitest';

import { awqQuantize, awqShapes, type AwqParams } from '../../src/core/interop/awq.js';
import { QuantdError } from '../../src/errors/index.js';
import type { KernelModule } from '../../src/kernels/index.js';
import { hexBytes, parityVariants, seededUniform } from '../kernels/helpers.js';

const hex = hexBytes;

/** Seeded rows whose kind changes every `run` values. */
function adversarial(count: number, seed: number, run: number): Float32Array {
  const next = seededUniform(seed);
  const x = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const b = Math.floor(i / run);
    const scale = [1, 1e-3, 2e4, 0.05, 1e-6][b % 5]!;
    const r = next();
    const kind = b % 6;
    let v: number;
    if (kind === 0) v = (r - 0.5) * scale;
    else if (kind === 1) v = r < 0.5 ? 0 : -0;
    else if (kind === 2)
      v = (Math.floor(r * 31) - 15) / 2; // halves
    else if (kind === 3)
      v = i % run === 1 ? scale : (r - 0.5) * scale * 1e-2; // one outlier
    else if (kind === 4)
      v = 0.25 * scale; // constant group: the range floor
    else v = (r - 0.5) * 6e4; // near float16's largest (its range still finite)
    x[i] = v;
  }
  return x;
}

function kernelResult(k: KernelModule, w: Float32Array, shape: [number, number], p: AwqParams) {
  const s = awqShapes('w', shape, p);
  const qweight = new Int32Array(s.qweight[0] * s.qweight[1]).fill(-1); // stale words must not show
  const qzeros = new Int32Array(s.qzeros[0] * s.qzeros[1]).fill(-1);
  const scales = new Uint16Array(s.scales[0] * s.scales[1]);
  const status = k.awqQuantize(w, shape[0], shape[1], s.groupSize, qweight, qzeros, scales);
  return { status, bad: status === 0 ? -1 : k.lastBad(), qweight, qzeros, scales };
}

function referenceResult(w: Float32Array, shape: [number, number], p: AwqParams) {
  try {
    const r = awqQuantize('w', w, shape, p);
    return { status: 0, qweight: hex(r.qweight), qzeros: hex(r.qzeros), scales: hex(r.scales) };
  } catch (err) {
    if (!(err instanceof QuantdError)) throw err;
    if (err.code === 'INPUT_NOT_FINITE') return { status: 1, bad: err.params['index'] };
    if (err.code === 'FEATURE_UNSUPPORTED') return { status: 2 };
    throw err;
  }
}

describe.each(parityVariants())('%s', (_, k) => {
  it('the TypeScript bytes for several group sizes on adversarial rows', () => {
    const outcomes = new Set<number>();
    for (const [groupSize, inF] of [
      [32, 128],
      [128, 256],
      [-1, 96],
      [64, 64],
    ] as const) {
      for (const run of [groupSize === -1 ? inF : groupSize, 5]) {
        const shape: [number, number] = [16, inF];
        const w = adversarial(16 * inF, inF + run, run);
        const want = referenceResult(w, shape, { groupSize });
        const got = kernelResult(k, w, shape, { groupSize });
        outcomes.add(want.status);
        const label = `g${groupSize} in=${inF} run=${run}`;
        if (want.status === 0) {
          expect([label, got.status, hex(got.qweight), hex(got.qzeros), hex(got.scales)]).toEqual([
            label,
            0,
            want.qweight,
            want.qzeros,
            want.scales,
          ]);
        } else expect([label, got.status]).toEqual([label, want.status]);
      }
    }
    expect([...outcomes]).toEqual([0]); // every weight compared byte for byte
  });

  it('NaN and ±Infinity are refused at the first such index; an unrepresentable group as the reference refuses it', () => {
    const shape: [number, number] = [8, 64];
    for (const at of [0, 31, 64, 300, 511]) {
      for (const bad of [NaN, Infinity, -Infinity]) {
        const w = adversarial(512, at, 512).map((v) => v * 1e-3);
        w[at] = bad;
        if (at + 20 < w.length) w[at + 20] = NaN;
        const got = kernelResult(k, w, shape, { groupSize: 32 });
        expect([at, bad, got.status, got.bad]).toEqual([at, bad, 1, at]);
        expect(referenceResult(w, shape, { groupSize: 32 })).toEqual({ status: 1, bad: at });
      }
    }
    // a group spanning [-1e5, 1e5]: float16 overflows, the scale is not finite
    const w = adversarial(512, 3, 512).map((v) => v * 1e-3);
    w[3 * 64 + 40] = 1e5;
    w[3 * 64 + 41] = -1e5;
    const got = kernelResult(k, w, shape, { groupSize: 32 });
    expect([got.status, got.bad]).toEqual([2, 3 * 2 + 1]);
    expect(referenceResult(w, shape, { groupSize: 32 }).status).toBe(2);
  });
});
