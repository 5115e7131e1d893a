/**
 * The linear-output kernel (native/src/linear_out.c) against the TypeScript (linear-eval.ts's
 * linearOutput), the oracle: every output to the bit on every native ISA this CPU has, with and
 * without a bias, for output counts that are not whole blocks of its lanes; and /v1/linear-error's
 * whole report through it equals the TypeScript's (WebAssembly has no such kernel: it runs the
 * TypeScript).
 */
import { describe, expect, it } from 'vitest';

import { linearErrorReport, linearOutput } from '../../src/core/linear-eval.js';
import { parseSpec } from '../../src/core/spec.js';
import { parityVariants, seededUniform } from '../kernels/helpers.js';

const kernels = parityVariants().filter(([, m]) => m.linearOutputs !== undefined);

function layer(n: number, k: number, out: number, bias: boolean, seed: number) {
  const next = seededUniform(seed);
  return {
    x: Float32Array.from({ length: n * k }, (_, j) => (next() - 0.5) * (j % k === 3 ? 40 : 1)),
    n,
    inFeatures: k,
    w: Float32Array.from({ length: out * k }, () => (next() - 0.5) * 0.1),
    outFeatures: out,
    ...(bias && { bias: Float32Array.from({ length: out }, () => next() - 0.5) }),
  };
}

describe('linear outputs in C', () => {
  it('has a kernel on a native build', () => {
    expect(kernels.length).toBeGreaterThan(0);
  });

  for (const [isa, m] of kernels) {
    it(`${isa}: X·Wᵀ + b equals the TypeScript's to the bit`, () => {
      for (const [n, k, out, bias] of [
        [1, 1, 1, false],
        [3, 7, 5, true],
        [17, 64, 33, true],
        [8, 129, 64, false],
      ] as const) {
        const l = layer(n, k, out, bias, n + k + out);
        const ts = linearOutput(l);
        const c = linearOutput(l, l.w, m.linearOutputs);
        expect(Buffer.from(c.buffer).equals(Buffer.from(ts.buffer)), `${n}×${k}→${out}`).toBe(true);
      }
    });

    it(`${isa}: the linear-error report equals the TypeScript's`, () => {
      const l = layer(40, 96, 48, true, 5);
      const spec = parseSpec({ qdtype: 'int4', scheme: 'per_group', group_size: 32 });
      expect(linearErrorReport(l, spec, m.linearOutputs)).toEqual(linearErrorReport(l, spec));
    });
  }
});
