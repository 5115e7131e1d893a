/**
 * A norm weight or bias that takes AWQ's 1/s (awq-calibrated.ts's awq-fold): divided in float64
 * and rounded once to its own dtype (float16: directly; bfloat16: through float32, which can only
 * differ within 2^-24 of a tie), and refused by name when the result leaves float16's range.
 */
import { describe, expect, it } from 'vitest';

import { awqFoldResult } from '../../src/kernels/awq-calibrated.js';
import { float32FromBfloat16Bits, float32FromFloat16Bits } from '../../src/core/float16.js';

const values = Float32Array.of(1, -0.5, 3, 0.1);
const divide = Float64Array.of(3, 0.7, 1e-3, 1);
const call = (to: 'float32' | 'float16' | 'bfloat16') =>
  ({
    kind: 'awq-fold',
    tensor: 'model.layers.0.input_layernorm.weight',
    from: 'float32',
    to,
    divide,
  }) as const;

describe('awq-fold', () => {
  it('float32: each value divided, rounded once', () => {
    const out = new Float32Array(awqFoldResult(call('float32'), values).slice().buffer);
    expect([...out]).toEqual([...values].map((v, i) => Math.fround(v / divide[i]!)));
  });

  it('float16: the nearest half of the float64 quotient', () => {
    const out = new Uint16Array(awqFoldResult(call('float16'), values).slice().buffer);
    const got = [...out].map(float32FromFloat16Bits);
    // 1/3 → 0.33325195 (0x3555), −0.5/0.7 → −0.71435547, 3/1e-3 = 3000 → 3000, 0.1f → 0.099975586
    expect(got).toEqual([0.333251953125, -0.71435546875, 3000, 0.0999755859375]);
  });

  it('bfloat16: the nearest bfloat16', () => {
    const out = new Uint16Array(awqFoldResult(call('bfloat16'), values).slice().buffer);
    expect([...out].map(float32FromBfloat16Bits)).toEqual([0.333984375, -0.71484375, 3008, 0.10009765625]);
  });

  it('refuses a quotient beyond float16, naming the tensor and the index', () => {
    expect(() => awqFoldResult(call('float16'), Float32Array.of(1, 1, 100, 1))).toThrow(
      /input_layernorm\.weight\[2\] divided by its AWQ scale is 100000.*beyond float16/,
    );
    // bfloat16 holds it
    expect(() => awqFoldResult(call('bfloat16'), Float32Array.of(1, 1, 100, 1))).not.toThrow();
  });
});
