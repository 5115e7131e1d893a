/**
 * GPTQ and AWQ packed by chunks of rows from the weight's own bytes (src/kernels/packed-rows.ts):
 * byte for byte the TypeScript quantizers on the same values, for float32, float16 and bfloat16
 * weights, on every backend, with shapes whose rows cross chunks (a whole chunk of 256 rows and a
 * short last one), GPTQ at 2, 4 and 8 bits; and null (the caller's whole-tensor path then names
 * the value) for a weight with a NaN in a later chunk.
 */
import { describe, expect, it } from 'vitest';

import type { FloatDType } from '../../src/core/dtypes.js';
import { awqQuantize } from '../../src/core/interop/awq.js';
import { gptqQuantize } from '../../src/core/interop/gptq.js';
import { fromFloat32, toFloat32 } from '../../src/core/tensor.js';
import { awqPackedByRows, gptqPackedByRows } from '../../src/kernels/packed-rows.js';
import { hexBytes, parityVariants, seededUniform } from '../kernels/helpers.js';

const DTYPES: readonly FloatDType[] = ['float32', 'float16', 'bfloat16'];
// 4096 inputs: chunks of 256 rows; 288 rows: one whole chunk and one of 32
const IN = 4096;
const OUT = 288;

/** Seeded weights rounded to `dtype`: their bytes, and the same values as float32. */
function weight(dtype: FloatDType, seed: number): { bytes: Uint8Array; values: Float32Array } {
  const next = seededUniform(seed);
  const x = Float32Array.from({ length: OUT * IN }, (_, i) => (next() - 0.5) * ((i % 5) + 1) * 0.02);
  const bytes = fromFloat32(x, dtype);
  return { bytes, values: toFloat32(bytes, dtype) };
}

/** The TypeScript's result, computed once for every backend. */
const expected = new Map<string, unknown>();
function once<T>(key: string, make: () => T): T {
  if (!expected.has(key)) expected.set(key, make());
  return expected.get(key) as T;
}

describe.each(parityVariants())('%s: GPTQ and AWQ by chunks of rows', (_name, module) => {
  it.each(DTYPES)('%s weights: GPTQ 2, 4 and 8 bits equal the TypeScript', (dtype) => {
    const { bytes, values } = weight(dtype, 11);
    for (const bits of [2, 4, 8] as const) {
      const params = { bits, groupSize: 128, sym: bits === 4 };
      const got = gptqPackedByRows(module, 'w', bytes, dtype, [OUT, IN], params);
      const want = once(`gptq ${dtype} ${bits}`, () => gptqQuantize('w', values, [OUT, IN], dtype, params));
      expect(got).not.toBeNull();
      expect(hexBytes(got!.qweight)).toBe(hexBytes(want.qweight));
      expect(hexBytes(got!.qzeros)).toBe(hexBytes(want.qzeros));
      expect(hexBytes(got!.scales)).toBe(hexBytes(want.scales));
      expect(got!.gIdx).toEqual(want.gIdx);
      expect([got!.zeroPointZero, got!.clampedCodes]).toEqual([want.zeroPointZero, want.clampedCodes]);
    }
  });

  it.each(DTYPES)('%s weights: AWQ equals the TypeScript', (dtype) => {
    const { bytes, values } = weight(dtype, 12);
    for (const groupSize of [128, -1]) {
      const got = awqPackedByRows(module, 'w', bytes, dtype, [OUT, IN], { groupSize });
      const want = once(`awq ${dtype} ${groupSize}`, () =>
        awqQuantize('w', values, [OUT, IN], { groupSize }),
      );
      expect(got).not.toBeNull();
      expect(hexBytes(got!.qweight)).toBe(hexBytes(want.qweight));
      expect(hexBytes(got!.qzeros)).toBe(hexBytes(want.qzeros));
      expect(hexBytes(got!.scales)).toBe(hexBytes(want.scales));
    }
  });

  it('is null for a NaN in the second chunk', () => {
    const { values } = weight('float32', 13);
    values[(OUT - 5) * IN + 7] = NaN;
    const bytes = new Uint8Array(values.buffer);
    expect(
      gptqPackedByRows(module, 'w', bytes, 'float32', [OUT, IN], { bits: 4, groupSize: 128, sym: false }),
    ).toBe(null);
    expect(awqPackedByRows(module, 'w', bytes, 'float32', [OUT, IN], { groupSize: 128 })).toBe(null);
  });
});
