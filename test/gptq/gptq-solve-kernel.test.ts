/**
 * The GPTQ solver's C kernels (native/src/gptq_solve.c) against the TypeScript solver
 * (gptq-solve.ts), the oracle: the same codes, scales, zero points and g_idx to the bit, on every
 * native ISA this CPU has (WebAssembly has no such kernel: it runs the TypeScript), over the
 * torch reference's cases and over random layers chosen to cross every edge of the C loops:
 * sizes that are not multiples of its four-way chains or its tiles, blocks narrower and wider
 * than the layer, groups across blocks, one group over all inputs, dead inputs, act-order, 2 to 8
 * bits, symmetric or not; and the refusal of a Hessian that is not positive definite, at the
 * same column. And the kernel that adds a calibration batch to a layer's Σ xᵀx and Σ |x|: the
 * TypeScript's sums to the bit, NaN and ±Infinity refused at their index with nothing changed.
 */
import { describe, expect, it } from 'vitest';

import { gptqSolve, type GptqSolveOptions } from '../../src/core/interop/gptq-solve.js';
import { accumulateLinearStats, addLinearStats, emptyLinearStats } from '../../src/core/linear-stats.js';
import { parityVariants, seededUniform } from '../kernels/helpers.js';
import { GPTQ_CASES, caseOptions, decode } from './golden.js';

const kernels = parityVariants().filter(([, m]) => m.gptqSolve !== undefined);
const statsKernels = parityVariants().filter(([, m]) => m.linearStatsAdd !== undefined);

interface Layer {
  readonly label: string;
  readonly out: number;
  readonly inF: number;
  readonly w: Float32Array;
  readonly h: Float64Array;
  readonly options: GptqSolveOptions;
}

function layer(
  label: string,
  out: number,
  inF: number,
  tokens: number,
  options: GptqSolveOptions,
  seed: number,
  dead: readonly number[] = [],
): Layer {
  const next = seededUniform(seed);
  const x = Float32Array.from({ length: tokens * inF }, (_, i) =>
    dead.includes(i % inF) ? 0 : (next() - 0.5) * (i % inF === 3 ? 30 : 1) + (i % 5 === 0 ? next() : 0),
  );
  const w = Float32Array.from({ length: out * inF }, () => (next() - 0.5) * 0.2);
  const h = accumulateLinearStats('x', emptyLinearStats(inF), x, [tokens, inF]).hessian;
  return { label, out, inF, w, h, options };
}

const base = { damp: 0.01, blockSize: 128, actOrder: false } as const;
const LAYERS: Layer[] = [
  layer(
    '37→5, 4-bit per-row sym, block 8',
    5,
    37,
    60,
    { ...base, bits: 4, groupSize: -1, sym: true, blockSize: 8 },
    1,
  ),
  layer(
    '70→33, 4-bit g16 asym, block 32 (groups across blocks)',
    33,
    70,
    90,
    { ...base, bits: 4, groupSize: 16, sym: false, blockSize: 32 },
    2,
  ),
  layer(
    '130→7, 2-bit g32 asym, act-order, dead inputs',
    7,
    130,
    200,
    { ...base, bits: 2, groupSize: 32, sym: false, actOrder: true },
    3,
    [0, 9, 77],
  ),
  layer(
    '300→40, 8-bit g64 sym, block 128 (tiles of 256 and 32 rows)',
    40,
    300,
    400,
    { ...base, bits: 8, groupSize: 64, sym: true },
    4,
  ),
  layer(
    '96→64, 4-bit g32 sym, act-order, damp 0.1',
    64,
    96,
    50,
    { ...base, bits: 4, groupSize: 32, sym: true, actOrder: true, damp: 0.1 },
    5,
  ),
  layer(
    '5→3, 3 tokens: a rank-deficient Hessian, damped',
    3,
    5,
    3,
    { ...base, bits: 4, groupSize: -1, sym: false },
    6,
  ),
];

function expectSame(a: ReturnType<typeof gptqSolve>, b: ReturnType<typeof gptqSolve>, label: string): void {
  const bytes = (v: ArrayBufferView) => Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  expect(bytes(a.codes).equals(bytes(b.codes)), `${label}: codes`).toBe(true);
  expect(bytes(a.scale).equals(bytes(b.scale)), `${label}: scales`).toBe(true);
  expect(bytes(a.zero).equals(bytes(b.zero)), `${label}: zero points`).toBe(true);
  expect(bytes(a.gIdx).equals(bytes(b.gIdx)), `${label}: g_idx`).toBe(true);
}

describe.each(kernels)('GPTQ solver kernel, %s', (_, module) => {
  const kernel = module.gptqSolve!;

  it.each(LAYERS)('$label: the TypeScript’s solution to the bit', (l) => {
    expectSame(
      gptqSolve(l.label, l.w, l.out, l.inF, l.h, l.options, kernel),
      gptqSolve(l.label, l.w, l.out, l.inF, l.h, l.options),
      l.label,
    );
  });

  it.each(GPTQ_CASES.map((c) => [c.id, c] as const))('torch case %s: the TypeScript’s solution', (_, c) => {
    const x = decode(c.x, Float32Array);
    const h = accumulateLinearStats('x', emptyLinearStats(c.in), x, [c.n, c.in]).hessian;
    const options = caseOptions(c);
    const w = decode(c.w, Float32Array);
    expectSame(
      gptqSolve(c.id, w, c.out, c.in, h, options, kernel),
      gptqSolve(c.id, w, c.out, c.in, h, options),
      c.id,
    );
  });

  it('refuses a Hessian that is not positive definite at the TypeScript’s column', () => {
    // negative curvature at input 2 that the damping cannot lift
    const n = 4;
    const h = Float64Array.from([4, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 3, 0, 0, 3, 1]);
    const w = new Float32Array(32 * n).fill(0.1);
    const options = {
      bits: 4 as const,
      groupSize: -1,
      sym: true,
      damp: 0.01,
      blockSize: 128,
      actOrder: false,
    };
    const message = (f: () => unknown): string => {
      try {
        f();
      } catch (err) {
        return (err as Error).message;
      }
      return 'no error';
    };
    const ts = message(() => gptqSolve('w', w, 32, n, h, options));
    expect(ts).toMatch(/not positive definite after damping \(column 3\)/);
    expect(message(() => gptqSolve('w', w, 32, n, h, options, kernel))).toBe(ts);
  });
});

describe.each(statsKernels)('linear statistics kernel, %s', (_, module) => {
  it.each([
    [1, 1],
    [7, 3],
    [37, 33],
    [130, 17],
    // past the kernel's blocks: 128-token blocks, 256-column blocks, tiles of 6 and 8 rows, 8 and
    // 16 columns (native/src/linear_stats.c); past the scratch a thread keeps (native.ts)
    [13, 129],
    [300, 260],
    [517, 131],
    [1030, 3],
  ])('in_features %i, %i tokens, zeros among them: the TypeScript’s sums to the bit', (k, tokens) => {
    const next = seededUniform(k * 100 + tokens);
    const x = Float32Array.from({ length: tokens * k }, (_, i) =>
      i % 7 === 2 ? 0 : (next() - 0.5) * 10 ** (i % 4),
    );
    const start = accumulateLinearStats('x', emptyLinearStats(k), x.subarray(0, k), [1, k]);
    const want = { hessian: start.hessian.slice(), absSum: start.absSum.slice() };
    addLinearStats(want.hessian, want.absSum, k, x);
    const got = { hessian: start.hessian.slice(), absSum: start.absSum.slice() };
    expect(module.linearStatsAdd!(got.hessian, got.absSum, k, x)).toBe(0);
    expect(Buffer.from(got.hessian.buffer).equals(Buffer.from(want.hessian.buffer))).toBe(true);
    expect(Buffer.from(got.absSum.buffer).equals(Buffer.from(want.absSum.buffer))).toBe(true);
  });

  it('refuses NaN and ±Infinity at their index, changing nothing', () => {
    for (const v of [NaN, Infinity, -Infinity]) {
      const x = new Float32Array(12).fill(1);
      x[9] = v;
      const h = new Float64Array(9).fill(2);
      const a = new Float64Array(3).fill(3);
      expect(module.linearStatsAdd!(h, a, 3, x)).toBe(1);
      expect(module.lastBad()).toBe(9);
      expect([...h, ...a]).toEqual([...new Array(9).fill(2), 3, 3, 3]);
    }
  });
});

it('native has the kernels on this machine (the parity above ran)', () => {
  expect(kernels.map(([name]) => name).some((n) => n.startsWith('native'))).toBe(true);
  expect(statsKernels.map(([name]) => name).some((n) => n.startsWith('native'))).toBe(true);
});
