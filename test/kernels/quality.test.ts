/**
 * Quality statistics (RMSE, max |error|, SQNR, clipped fraction) computed by the kernels agree
 * with the reference (src/core/quality.ts): the clipped and element counts exactly; the sums of
 * squares to 1e-5 relative (SIMD kernels square and add in float32 within blocks of 64, then in
 * float64; the reference in float64 throughout); the largest error to one float32 rounding.
 * Values past 1.8e19 (float32 squares overflow) and below 1e-19 (squares underflow) included.
 * Whole tensors, tensors split into ranges, and float16 / bfloat16 tensors worked in windows
 * (KernelCompute's windowElements: the statistics of each window are merged).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  emptyQuality,
  fromFloat32,
  parseSpec,
  planLayout,
  quality,
  quantizeTensor,
  summarizeQuality,
  tensorQuality,
  type FloatInput,
  type QualityStats,
} from '../../src/core/index.js';
import { InlineExecutor, KernelCompute, type KernelModule } from '../../src/kernels/index.js';
import { referenceCompute } from '../../src/service/compute.js';
import {
  FP8_QDTYPES,
  INT_QDTYPES,
  optionsOf,
  quantCase,
  valuesOf,
  type QuantCase,
} from '../core/arbitraries.js';
import { fitFloat16, parityVariants, SplittingExecutor } from './helpers.js';

const NAME = 'model.layers.0.mlp.down_proj.weight';

function inputOf(c: QuantCase): { input: FloatInput; spec: ReturnType<typeof parseSpec> } {
  const spec = parseSpec(optionsOf(c));
  const layout = planLayout(NAME, c.shape, spec);
  const data = new Uint8Array(c.x.buffer, c.x.byteOffset, c.x.byteLength);
  return { input: { name: NAME, dtype: 'float32', data, layout }, spec };
}

type ShapePart = Pick<QuantCase, 'shape' | 'axis' | 'groupSize'>;

/** A few hundred elements: several windows of 192, and more than 64 per_token rows / groups. */
function windowedShape(c: QuantCase): fc.Arbitrary<ShapePart> {
  const plain = (shape: number[]): ShapePart => ({ shape, axis: undefined, groupSize: undefined });
  switch (c.scheme) {
    case 'per_tensor':
      return fc.integer({ min: 193, max: 800 }).map((n) => plain([n]));
    case 'per_channel':
      return fc
        .tuple(fc.integer({ min: 2, max: 40 }), fc.integer({ min: 100, max: 200 }), fc.constantFrom(0, 1))
        .map(([a, b, axis]) => ({ shape: [a, b], axis, groupSize: undefined }));
    case 'per_token':
      return fc
        .tuple(fc.integer({ min: 65, max: 200 }), fc.integer({ min: 1, max: 4 }))
        .map(([rows, k]) => plain([rows, k]));
    case 'per_group':
      return fc
        .tuple(
          fc.integer({ min: 2, max: 8 }),
          fc.integer({ min: 33, max: 80 }),
          fc.integer({ min: 2, max: 3 }),
        )
        .map(([g, rows, groups]) => ({ shape: [rows, groups * g], axis: undefined, groupSize: g }));
  }
}

function expectClose(what: string, kernels: QualityStats, reference: QualityStats): void {
  expect(kernels.count, `${what}: count`).toBe(reference.count);
  expect(kernels.clipped, `${what}: clipped`).toBe(reference.clipped);
  const tolerance = { maxAbsError: 2 ** -23, sumSqError: 1e-5, sumSqValue: 1e-5 } as const;
  for (const key of ['maxAbsError', 'sumSqError', 'sumSqValue'] as const) {
    const [k, r] = [kernels[key], reference[key]];
    if (!Number.isFinite(r)) expect(k, `${what}: ${key}`).toBe(r);
    else
      expect(Math.abs(k - r), `${what}: ${key} ${k} vs ${r}`).toBeLessThanOrEqual(
        tolerance[key] * Math.abs(r),
      );
  }
}

describe('quality statistics, worked by hand', () => {
  it('int8 per_tensor, scale 0.5, zero point 0, range [-4, 4]: errors, clipping and SQNR', () => {
    // codes: 1.0 → 2, 0.3 → 1 (0.6 rounds to 1, back 0.5), 3.0 → clamp(6) = 4 (back 2), -0.2 → 0
    const x = Float32Array.from([1, 0.3, 3, -0.2]);
    const spec = parseSpec({ qdtype: 'int8', quant_min: -4, quant_max: 4 });
    const layout = planLayout('t', [4], spec);
    const qp = { scale: Float32Array.from([0.5]), zeroPoint: Int32Array.from([0]) };
    const codes = Int8Array.from([2, 1, 4, 0]);
    const stats = quality(x, new Uint8Array(codes.buffer), layout, spec, qp);
    const errors = [0, Math.fround(0.3) - 0.5, 1, Math.fround(-0.2)];
    expect(stats.count).toBe(4);
    expect(stats.clipped).toBe(1);
    expect(stats.maxAbsError).toBe(1);
    expect(stats.sumSqError).toBeCloseTo(
      errors.reduce((a, e) => a + e * e, 0),
      12,
    );
    const summary = summarizeQuality(stats);
    expect(summary.clipped_fraction).toBe(0.25);
    expect(summary.rmse).toBeCloseTo(Math.sqrt(stats.sumSqError / 4), 15);
    expect(summary.sqnr_db).toBeCloseTo(10 * Math.log10(stats.sumSqValue / stats.sumSqError), 12);
  });

  it('a lossless tensor has zero error and no SQNR (infinite)', () => {
    const spec = parseSpec({ qdtype: 'int8' });
    const x = Float32Array.from([0, 1, 2, -3]);
    const data = new Uint8Array(x.buffer);
    const input: FloatInput = { name: 't', dtype: 'float32', data, layout: planLayout('t', [4], spec) };
    const given = { scale: Float32Array.from([1]), zeroPoint: Int32Array.from([0]) };
    const out = quantizeTensor(input, spec, given);
    const summary = summarizeQuality(quality(x, out.data, input.layout, spec, out.qparams));
    expect(summary).toEqual({ rmse: 0, max_abs_error: 0, sqnr_db: null, clipped_fraction: 0, elements: 4 });
    expect(summarizeQuality(emptyQuality())).toEqual({
      rmse: 0,
      max_abs_error: 0,
      sqnr_db: null,
      clipped_fraction: 0,
      elements: 0,
    });
  });

  it('the reference Compute measures only when asked', async () => {
    const spec = parseSpec({ qdtype: 'int4', scheme: 'per_group', group_size: 2 });
    const x = Float32Array.from([0.1, -0.7, 2.5, 9]);
    const input: FloatInput = {
      name: 't',
      dtype: 'float32',
      data: new Uint8Array(x.buffer),
      layout: planLayout('t', [1, 4], spec),
    };
    expect((await referenceCompute.quantize(input, spec)).quality).toBeUndefined();
    const measured = await referenceCompute.quantize(input, spec, undefined, undefined, { quality: true });
    expect(measured.quality!.count).toBe(4);
    expect(measured.quality!.sumSqError).toBeGreaterThan(0);
  });
});

describe.each(parityVariants())('quality on %s', (_name, module) => {
  const cases = quantCase([...INT_QDTYPES, ...FP8_QDTYPES]);

  it('agrees with the reference, inline and split into ranges', async () => {
    const inline = new KernelCompute(new InlineExecutor(module), module.backend);
    const splitter = new SplittingExecutor(module);
    const split = new KernelCompute(splitter, module.backend, { minPart: 64 });
    await fc.assert(
      fc.asyncProperty(cases, async (c) => {
        const { input, spec } = inputOf(c);
        let reference;
        try {
          reference = quantizeTensor(input, spec);
        } catch {
          return; // inputs the op rejects have no quality (parity.test.ts checks the errors)
        }
        const expected = quality(c.x, reference.data, input.layout, spec, reference.qparams);
        for (const [what, compute] of [
          ['inline', inline],
          ['split', split],
        ] as const) {
          const out = await compute.quantize(input, spec, undefined, undefined, { quality: true });
          expect(out.data).toEqual(reference.data);
          expectClose(what, out.quality!, expected);
        }
      }),
      { numRuns: 150 },
    );
    // two tensors large enough to be split into ranges for sure, one per measured kernel
    for (const [options, shape] of [
      [{ qdtype: 'int8' }, [1000]],
      [{ qdtype: 'int4', scheme: 'per_group', group_size: 4 }, [200, 8]],
    ] as const) {
      const spec = parseSpec(options);
      const n = shape.reduce((a: number, b: number) => a * b, 1);
      const x = Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 3);
      const input: FloatInput = {
        name: NAME,
        dtype: 'float32',
        data: new Uint8Array(x.buffer),
        layout: planLayout(NAME, shape, spec),
      };
      const reference = quantizeTensor(input, spec);
      const out = await split.quantize(input, spec, undefined, undefined, { quality: true });
      expect(out.data).toEqual(reference.data);
      expectClose(
        'split, fixed',
        out.quality!,
        quality(x, reference.data, input.layout, spec, reference.qparams),
      );
    }
    // measured in the quantize tasks themselves (native/src/measured.c), range by range
    expect(splitter.split.has('quantize') && splitter.split.has('chooseQuantize')).toBe(true);
  });

  it('greedy range search (quantized by the reference) is measured by quality tasks', async () => {
    let qualityCalls = 0;
    const counting: KernelModule = Object.assign(Object.create(module) as KernelModule, {
      quality: (...args: Parameters<KernelModule['quality']>) => {
        qualityCalls++;
        return module.quality(...args);
      },
    });
    const split = new KernelCompute(new SplittingExecutor(counting), module.backend, { minPart: 64 });
    const greedy = cases.filter(
      (c) => ['int4', 'uint4', 'int2', 'uint2'].includes(c.qdtype) && c.scheme !== 'per_token',
    );
    await fc.assert(
      fc.asyncProperty(greedy, async (c) => {
        const { input } = inputOf(c);
        let spec;
        let reference;
        try {
          spec = parseSpec({ ...optionsOf(c), range_search: 'greedy' });
        } catch {
          return; // combinations greedy does not take
        }
        try {
          reference = quantizeTensor(input, spec);
        } catch {
          return;
        }
        const out = await split.quantize(input, spec, undefined, undefined, { quality: true });
        expect(out.data).toEqual(reference.data);
        expectClose(
          'greedy',
          out.quality!,
          quality(c.x, reference.data, input.layout, spec, reference.qparams),
        );
      }),
      { numRuns: 40 },
    );
    expect(qualityCalls).toBeGreaterThan(0);
  });

  it('agrees with the reference on float16 / bfloat16 input worked in windows', async () => {
    const splitter = new SplittingExecutor(module);
    const windowed = new KernelCompute(splitter, module.backend, { minPart: 64, windowElements: 192 });
    const big = cases.chain((c) =>
      windowedShape(c).chain((part) =>
        valuesOf(part.shape.reduce((p, d) => p * d, 1)).map((x): QuantCase => ({ ...c, ...part, x })),
      ),
    );
    await fc.assert(
      fc.asyncProperty(big, fc.constantFrom('float16', 'bfloat16'), async (c, dtype) => {
        const spec = parseSpec(optionsOf(c));
        const layout = planLayout(NAME, c.shape, spec);
        const x = dtype === 'float16' ? fitFloat16(c.x) : c.x;
        const input: FloatInput = { name: NAME, dtype, data: fromFloat32(x, dtype), layout };
        let reference;
        try {
          reference = quantizeTensor(input, spec);
        } catch {
          return;
        }
        const expected = tensorQuality(input, spec, reference);
        // chosen qparams (two passes, or per_group / per_token in one), and given (one pass)
        for (const [what, given] of [
          ['chosen', undefined],
          ['given', reference.qparams],
        ] as const) {
          const out = await windowed.quantize(input, spec, given, undefined, { quality: true });
          expect(out.data).toEqual(reference.data);
          expectClose(`windowed, ${what} qparams`, out.quality!, expected);
        }
      }),
      { numRuns: 100 },
    );
    expect([...splitter.windowed].sort()).toEqual(['chooseQuantize', 'minmax', 'quantize']);
  });
});
