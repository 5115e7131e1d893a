/**
 * The quadratic-form kernel (native/src/quadratic.c) against the TypeScript (awq-stats.ts's
 * quadraticForm), the oracle: every row's δHδᵀ to the bit on every native ISA this CPU has
 * (WebAssembly has no such kernel: it runs the TypeScript), for row counts that are not whole
 * blocks of its sixteen lanes, zeros in δ (skipped terms), and sizes from 1; and the AWQ searches
 * through it give the TypeScript's scales, bounds and weights to the bit.
 */
import { describe, expect, it } from 'vitest';

import { awqPlannedWeight, awqScalesFromStats } from '../../src/core/interop/awq-stats.js';
import { quadraticForm } from '../../src/core/stats-error.js';
import { accumulateLinearStats, emptyLinearStats } from '../../src/core/linear-stats.js';
import { parityVariants, seededUniform } from '../kernels/helpers.js';

const kernels = parityVariants().filter(([, m]) => m.quadraticForms !== undefined);

function symmetric(n: number, next: () => number): Float64Array {
  const h = new Float64Array(n * n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j <= i; j++) {
      const v = (next() - 0.5) * (i === j ? 10 : 1);
      h[i * n + j] = v;
      h[j * n + i] = v;
    }
  }
  return h;
}

describe('quadratic forms in C', () => {
  it('has a kernel on a native build', () => {
    expect(kernels.length).toBeGreaterThan(0);
  });

  for (const [isa, m] of kernels) {
    it(`${isa}: every row's δHδᵀ equals the TypeScript's to the bit`, () => {
      const next = seededUniform(7);
      for (const [rows, n] of [
        [1, 1],
        [3, 2],
        [16, 17],
        [33, 64],
        [5, 129],
      ] as const) {
        const h = symmetric(n, next);
        const d = Float64Array.from({ length: rows * n }, () => (next() < 0.2 ? 0 : next() - 0.5));
        const got = new Float64Array(rows).fill(NaN);
        m.quadraticForms!(h, d, rows, n, got);
        for (let r = 0; r < rows; r++) {
          expect(
            Object.is(got[r], quadraticForm(h, d.subarray(r * n, (r + 1) * n), n)),
            `${rows}×${n} row ${r}`,
          ).toBe(true);
        }
      }
    });

    it(`${isa}: the AWQ searches give the TypeScript's scales, bounds and weight`, () => {
      const next = seededUniform(11);
      const inF = 96;
      const x = Float32Array.from({ length: 200 * inF }, (_, k) => (next() - 0.5) * (k % inF === 5 ? 30 : 1));
      const stats = accumulateLinearStats('x', emptyLinearStats(inF), x, [200, inF]);
      const w = Float32Array.from({ length: 40 * inF }, () => (next() - 0.5) * 0.1);
      const o = { bits: 4, groupSize: 32, zeroPoint: true, nGrid: 20, maxShrink: 0.5 };
      const ts = awqScalesFromStats(stats, [w], [40], o);
      const c = awqScalesFromStats(stats, [w], [40], o, m.quadraticForms);
      expect(c.ratio).toBe(ts.ratio);
      expect(Object.is(c.loss, ts.loss)).toBe(true);
      expect(Buffer.from(c.scales.buffer).equals(Buffer.from(ts.scales.buffer))).toBe(true);
      const plan = { scales: ts.scales, rowDivide: null, clipStats: stats };
      const a = awqPlannedWeight(w, 40, inF, plan, o);
      const b = awqPlannedWeight(w, 40, inF, plan, o, m.quadraticForms);
      expect(b.clipped).toBe(a.clipped);
      expect(Buffer.from(b.weight.buffer).equals(Buffer.from(a.weight.buffer))).toBe(true);
    });
  }
});
