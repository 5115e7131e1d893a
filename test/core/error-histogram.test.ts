/**
 * The quality report's error histogram: the sample's indices, the binning, and the sampled errors
 * against dequantize(quantize(x)) − x computed in full by the reference ops, for whole-byte and
 * packed codes, float32 and bfloat16 inputs, every scheme.
 */
import { describe, expect, it } from 'vitest';
import {
  HISTOGRAM_SAMPLES,
  histogramOf,
  sampleIndices,
  sampledDecodedErrors,
  sampledQuantizeErrors,
} from '../../src/core/error-histogram.js';
import { planLayout } from '../../src/core/layout.js';
import { dequantizeTensor, quantizeTensor } from '../../src/core/ops.js';
import { parseSpec, type SpecOptions } from '../../src/core/spec.js';
import { fromFloat32, toFloat32 } from '../../src/core/tensor.js';
import type { FloatDType } from '../../src/core/dtypes.js';
import { float32sOf, quantizedInput } from './fixtures.js';

describe('sampleIndices', () => {
  it('spreads up to `count` distinct indices evenly over the tensor', () => {
    const indices = sampleIndices(100_000, 4096);
    expect(indices).toHaveLength(4096);
    expect(indices[0]).toBe(0);
    expect(indices.every((i, k) => i < 100_000 && (k === 0 || i > indices[k - 1]!))).toBe(true);
    expect(indices.at(-1)!).toBeGreaterThan(100_000 - 2 * (100_000 / 4096));
    expect(sampleIndices(10, 4096)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(sampleIndices(10, 4)).toEqual([0, 2, 5, 7]);
    expect(sampleIndices(0)).toEqual([]);
  });
});

describe('histogramOf', () => {
  it('bins errors over [−limit, +limit] with a bin centred on zero', () => {
    const h = histogramOf([-1, -0.5, 0, 0, 0.25, 1], 5);
    expect(h).toEqual({ samples: 6, limit: 1, counts: [1, 1, 2, 1, 1] });
  });
  it('puts an exact tensor (every error 0) in the middle bin', () => {
    expect(histogramOf([0, 0, 0], 5)).toEqual({ samples: 3, limit: 0, counts: [0, 0, 3, 0, 0] });
    expect(histogramOf([], 3)).toEqual({ samples: 0, limit: 0, counts: [0, 0, 0] });
  });
});

function values(n: number, seed: number): Float32Array {
  let s = seed;
  return Float32Array.from({ length: n }, () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return (s / 2147483648 - 0.5) * 4;
  });
}

describe('sampledQuantizeErrors', () => {
  const cases: Array<[string, SpecOptions, number[], FloatDType]> = [
    ['int8 per_tensor', { qdtype: 'int8', scheme: 'per_tensor' }, [64, 96], 'float32'],
    ['int8 per_channel axis 1', { qdtype: 'int8', scheme: 'per_channel', axis: 1 }, [48, 40], 'bfloat16'],
    ['int4 per_group g32', { qdtype: 'int4', scheme: 'per_group', group_size: 32 }, [40, 128], 'float32'],
    ['uint2 per_group g16', { qdtype: 'uint2', scheme: 'per_group', group_size: 16 }, [24, 64], 'bfloat16'],
    ['int16 per_tensor', { qdtype: 'int16', scheme: 'per_tensor' }, [50, 30], 'float16'],
    ['int32 per_channel', { qdtype: 'int32', scheme: 'per_channel' }, [20, 30], 'float32'],
    ['uint4 per_group g8', { qdtype: 'uint4', scheme: 'per_group', group_size: 8 }, [10, 24], 'float16'],
    ['int2 per_tensor, an odd count', { qdtype: 'int2', scheme: 'per_tensor' }, [7, 9], 'float32'],
    ['float8_e4m3fn per_channel', { qdtype: 'float8_e4m3fn', scheme: 'per_channel' }, [300, 50], 'float32'],
  ];
  it.each(cases)('%s: each sampled error is dequantize(quantize(x)) − x', (_name, options, shape, dtype) => {
    const spec = parseSpec(options);
    const layout = planLayout('t', shape, spec);
    const data = fromFloat32(values(layout.numel, shape[0]!), dtype);
    const x = toFloat32(data, dtype);
    const out = quantizeTensor({ name: 't', dtype, data, layout }, spec);
    const back = float32sOf(
      dequantizeTensor(quantizedInput('t', out.data, spec, layout, out.qparams), 'float32'),
    );
    const errors = sampledQuantizeErrors(data, dtype, out.data, spec, layout, out.qparams);
    const indices = sampleIndices(layout.numel);
    expect(errors).toHaveLength(Math.min(HISTOGRAM_SAMPLES, layout.numel));
    indices.forEach((i, k) => expect(errors[k], `element ${i}`).toBe(back[i]! - x[i]!));
    expect(errors.some((e) => e !== 0)).toBe(true);
  });
});

describe('sampledDecodedErrors', () => {
  it('takes decoded − x at the sampled elements', () => {
    const x = values(10_000, 3);
    const decoded = x.map((v) => Math.round(v * 8) / 8);
    const errors = sampledDecodedErrors(x, decoded);
    const indices = sampleIndices(x.length);
    expect(errors).toHaveLength(HISTOGRAM_SAMPLES);
    indices.forEach((i, k) => expect(errors[k]).toBe(decoded[i]! - x[i]!));
  });
});
