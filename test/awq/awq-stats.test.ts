/**
 * The AWQ search from a layer's statistics (Σ xᵀx, Σ|x|, tokens) against the torch reference of
 * the search from the tokens themselves (generate.py): the same grid step, the same scales and
 * clipping bounds. The statistics are gathered from the golden cases' tokens by quantd's own
 * accumulator, as a calibration session gathers them.
 */
import { describe, expect, it } from 'vitest';

import { awqSearch } from '../../src/core/interop/awq-search.js';
import { awqClipFromStats, awqScalesFromStats } from '../../src/core/interop/awq-stats.js';
import { quadraticForm } from '../../src/core/stats-error.js';
import { accumulateLinearStats, emptyLinearStats } from '../../src/core/linear-stats.js';
import { AWQ_CASES, decode } from './golden.js';

const close = (a: number, b: number, rel: number): boolean => Math.abs(a - b) <= rel * Math.abs(b);

describe('the AWQ search from layer statistics', () => {
  it('δHδᵀ is the squared output change summed over the tokens', () => {
    const c = AWQ_CASES[0]!;
    const x = decode(c.x, Float32Array);
    const stats = accumulateLinearStats('x', emptyLinearStats(c.in), x, [c.n, c.in]);
    const d = Float64Array.from({ length: c.in }, (_, i) => Math.sin(i) * 0.01);
    let direct = 0;
    for (let t = 0; t < c.n; t++) {
      let y = 0;
      for (let i = 0; i < c.in; i++) y += x[t * c.in + i]! * d[i]!;
      direct += y * y;
    }
    expect(close(quadraticForm(stats.hessian, d, c.in), direct, 1e-12)).toBe(true);
  });

  for (const c of AWQ_CASES) {
    it(`${c.id}: the torch reference's step, scales and clipping bounds`, () => {
      const x = decode(c.x, Float32Array);
      const w = decode(c.w, Float32Array);
      const stats = accumulateLinearStats('x', emptyLinearStats(c.in), x, [c.n, c.in]);
      const o = { bits: c.bits, groupSize: c.group_size, zeroPoint: c.zero_point, nGrid: 20, maxShrink: 0.5 };
      // AutoAWQ's grid alone, as the reference searches it
      const found = awqScalesFromStats(stats, [w], [c.out], { ...o, keepRoundToNearest: false });
      expect(found.ratio).toBe(c.ratio);
      // with round-to-nearest tried first: kept only when no grid step beats it
      const kept = awqScalesFromStats(stats, [w], [c.out], o);
      if (kept.ratio === -1) expect(kept.loss).toBeLessThanOrEqual(found.loss);
      else expect(kept.ratio).toBe(c.ratio);
      const scales = decode(c.scales, Float64Array);
      found.scales.forEach((s, i) => expect(close(s, scales[i]!, 1e-12)).toBe(true));

      const weight = Float64Array.from({ length: c.out * c.in }, (_, k) => w[k]! * found.scales[k % c.in]!);
      const clip = awqClipFromStats(stats, weight, c.out, found.scales, o).bounds;
      const expected = decode(c.clip, Float64Array);
      let same = 0;
      clip.forEach((m, i) => (same += close(m, expected[i]!, 1e-12) ? 1 : 0));
      // a bound may differ only where two shrink steps tie to rounding
      expect(same).toBeGreaterThanOrEqual(clip.length - 1);
      // and the clipped weight is the sample search's, bound for bound
      const samples = awqSearch(x, c.n, w, c.out, c.in, { ...o, sampleStride: 1 });
      let equalRows = 0;
      for (let r = 0; r < c.out; r++) {
        let same = true;
        for (let i = 0; i < c.in; i++)
          same &&= close(weight[r * c.in + i]!, samples.weight[r * c.in + i]!, 1e-12);
        equalRows += same ? 1 : 0;
      }
      expect(equalRows).toBeGreaterThanOrEqual(c.out - 1);
    });
  }

  it('layers sharing an input share one search: stacked weights, one loss', () => {
    const c = AWQ_CASES[0]!;
    const x = decode(c.x, Float32Array);
    const w = decode(c.w, Float32Array);
    const stats = accumulateLinearStats('x', emptyLinearStats(c.in), x, [c.n, c.in]);
    const o = { bits: c.bits, groupSize: c.group_size, zeroPoint: c.zero_point, nGrid: 20 };
    const half = (c.out / 2) * c.in;
    const split = awqScalesFromStats(
      stats,
      [w.subarray(0, half), w.subarray(half)],
      [c.out / 2, c.out / 2],
      o,
    );
    const whole = awqScalesFromStats(stats, [w], [c.out], o);
    expect(split.ratio).toBe(whole.ratio);
    expect(close(split.loss, whole.loss, 1e-12)).toBe(true);
  });
});

describe('round-to-nearest in the AWQ scale search (issue 41)', () => {
  it('is kept when every grid step makes the output error worse, and left when one is better', () => {
    // inputs of equal size on every channel, weights whose groups quantize exactly: s = 1 is exact,
    // any other scale moves the weights off their grid
    const inF = 32;
    const out = 8;
    const n = 64;
    const x = Float32Array.from({ length: n * inF }, (_, k) => ((k * 7) % 11) - 5);
    const w = Float32Array.from({ length: out * inF }, (_, k) => ((k * 5) % 16) - 8);
    const stats = accumulateLinearStats('x', emptyLinearStats(inF), x, [n, inF]);
    const o = { bits: 4, groupSize: 32, zeroPoint: true, nGrid: 20 };
    const kept = awqScalesFromStats(stats, [w], [out], o);
    expect(kept.ratio).toBe(-1);
    expect(kept.loss).toBe(0);
    expect([...kept.scales].every((s) => s === 1)).toBe(true);
    const grid = awqScalesFromStats(stats, [w], [out], { ...o, keepRoundToNearest: false });
    expect(grid.loss).toBeGreaterThan(0);
  });
});
