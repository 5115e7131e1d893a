/**
 * The AWQ search against this repository's torch reference of the algorithm (generate.py,
 * float64): the same ratio, scales and clipping bounds, the same output error; and an output
 * error well below round-to-nearest's on correlated, outlier-heavy activations.
 */
import { describe, expect, it } from 'vitest';

import { awqPseudoQuantize, awqSearch } from '../../src/core/interop/awq-search.js';
import { AWQ_CASES, decode } from './golden.js';

describe('the AWQ search matches the torch reference of the algorithm', () => {
  for (const c of AWQ_CASES) {
    it(c.id, () => {
      const x = decode(c.x, Float32Array);
      const w = decode(c.w, Float32Array);
      const options = {
        bits: c.bits,
        groupSize: c.group_size,
        zeroPoint: c.zero_point,
        nGrid: 20,
        maxShrink: 0.5,
        sampleStride: 1,
      };
      const r = awqSearch(x, c.n, w, c.out, c.in, options);
      expect(r.ratio).toBe(c.ratio);
      const scales = decode(c.scales, Float64Array);
      r.scales.forEach((s, i) => expect(Math.abs(s - scales[i]!)).toBeLessThanOrEqual(1e-12 * scales[i]!));
      const clip = decode(c.clip, Float64Array);
      let same = 0;
      r.clip.forEach((m, i) => (same += Math.abs(m - clip[i]!) <= 1e-12 * clip[i]! ? 1 : 0));
      // a bound may differ only where two shrink steps tie to rounding
      expect(same).toBeGreaterThanOrEqual(r.clip.length - 1);

      // the layer as the checkpoint computes it: (X / s) · Q(clip(W·s))ᵀ
      const q = r.weight.slice();
      for (let o = 0; o < c.out; o++) {
        for (let g = 0; g < c.in; g += c.group_size) {
          awqPseudoQuantize(q.subarray(o * c.in + g, o * c.in + g + c.group_size), c.bits, c.zero_point);
        }
      }
      let num = 0;
      let den = 0;
      for (let s = 0; s < c.n; s++) {
        for (let o = 0; o < c.out; o++) {
          let ref = 0;
          let got = 0;
          for (let i = 0; i < c.in; i++) {
            ref += x[s * c.in + i]! * w[o * c.in + i]!;
            got += (x[s * c.in + i]! / r.scales[i]!) * q[o * c.in + i]!;
          }
          num += (ref - got) ** 2;
          den += ref ** 2;
        }
      }
      expect(num / den).toBeCloseTo(c.awq_error, 5);
      // what AWQ is for: the layer's output moves far less than with round-to-nearest
      expect(num / den).toBeLessThan(0.5 * c.rtn_error);
    });
  }
});
