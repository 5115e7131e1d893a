/**
 * The GPTQ solver against this repository's torch reference of the algorithm (generate.py,
 * float64): the same codes (all but a handful that sit on a rounding boundary), the same
 * scales, zero points and g_idx, and the same output error; and the point of it all, a layer
 * output error well below round-to-nearest's on correlated, outlier-heavy activations.
 */
import { describe, expect, it } from 'vitest';

import { gptqSolve } from '../../src/core/interop/gptq-solve.js';
import { GPTQ_CASES, caseOptions, decode } from './golden.js';

/** H = XᵀX / n in float64. */
function hessian(x: Float32Array, n: number, k: number): Float64Array {
  const h = new Float64Array(k * k);
  for (let s = 0; s < n; s++) {
    const row = s * k;
    for (let i = 0; i < k; i++) {
      const xi = x[row + i]!;
      if (xi === 0) continue;
      for (let j = 0; j < k; j++) h[i * k + j]! += xi * x[row + j]!;
    }
  }
  for (let i = 0; i < h.length; i++) h[i]! /= n;
  return h;
}

/** ‖X·Wᵀ − X·Ŵᵀ‖² / ‖X·Wᵀ‖². */
function outputError(
  x: Float32Array,
  n: number,
  k: number,
  w: ArrayLike<number>,
  wq: ArrayLike<number>,
  out: number,
) {
  let num = 0;
  let den = 0;
  for (let s = 0; s < n; s++) {
    for (let o = 0; o < out; o++) {
      let a = 0;
      let b = 0;
      for (let i = 0; i < k; i++) {
        a += x[s * k + i]! * w[o * k + i]!;
        b += x[s * k + i]! * wq[o * k + i]!;
      }
      num += (a - b) ** 2;
      den += a ** 2;
    }
  }
  return num / den;
}

describe('the GPTQ solver matches the torch reference of the algorithm', () => {
  for (const c of GPTQ_CASES) {
    it(c.id, () => {
      const x = decode(c.x, Float32Array);
      const w = decode(c.w, Float32Array);
      const solution = gptqSolve(c.id, w, c.out, c.in, hessian(x, c.n, c.in), caseOptions(c));
      const codes = decode(c.codes, Uint8Array);
      let differ = 0;
      for (let i = 0; i < codes.length; i++) if (codes[i] !== solution.codes[i]) differ++;
      // float64 sums in another order: a code may flip where a value sits on a rounding boundary
      expect(differ, `${differ} of ${codes.length} codes differ`).toBeLessThanOrEqual(codes.length / 1000);
      expect(Array.from(solution.gIdx)).toEqual(c.g_idx);
      const scales = decode(c.scales, Float64Array);
      const zeros = decode(c.zeros, Float64Array);
      for (let i = 0; i < scales.length; i++) {
        expect(Math.abs(solution.scale[i]! - scales[i]!)).toBeLessThanOrEqual(1e-9 * Math.abs(scales[i]!));
      }
      expect(Array.from(solution.zero)).toEqual(Array.from(zeros));

      const deq = new Float64Array(c.out * c.in);
      for (let o = 0; o < c.out; o++) {
        for (let i = 0; i < c.in; i++) {
          const g = solution.gIdx[i]! * c.out + o;
          deq[o * c.in + i] = solution.scale[g]! * (solution.codes[o * c.in + i]! - solution.zero[g]!);
        }
      }
      const error = outputError(x, c.n, c.in, w, deq, c.out);
      expect(error).toBeCloseTo(c.gptq_error, 4);
      // what GPTQ is for: the layer's output moves far less than with round-to-nearest
      expect(error).toBeLessThan(0.6 * c.rtn_error);
    });
  }
});
