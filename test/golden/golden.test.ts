/**
 * Every golden vector PyTorch produced, reproduced byte for byte by the TypeScript reference.
 * Bytes are compared as hex so a failure shows exactly which element differs.
 */
import { describe, expect, it } from 'vitest';
import {
  dequantizeTensor,
  fakeQuantizeTensor,
  greedyRangeSearch,
  parseSpec,
  planLayout,
  quantizeTensor,
  toFloat32,
  typedView,
  type FloatDType,
  type QParams,
} from '../../src/core/index.js';
import { bytes, hex, loadGolden, type GoldenCase, type GoldenTensor } from './vectors.js';

const FLOAT_OF: Record<string, FloatDType> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };

function qparamsOf(c: GoldenCase): QParams | undefined {
  if (!c.qparams) return undefined;
  const zp = c.qparams.zero_point;
  return {
    scale: typedView(Float32Array, bytes(c.qparams.scale)),
    zeroPoint: zp.dtype === 'F32' ? typedView(Float32Array, bytes(zp)) : typedView(Int32Array, bytes(zp)),
  };
}

function floatInput(c: GoldenCase, t: GoldenTensor) {
  const spec = parseSpec(c.spec!);
  const layout = planLayout('x', t.shape, spec);
  return { spec, layout, input: { name: 'x', dtype: FLOAT_OF[t.dtype]!, data: bytes(t), layout } };
}

function runCase(c: GoldenCase): void {
  switch (c.op) {
    case 'quantize': {
      const { spec, input } = floatInput(c, c.input!);
      const result = quantizeTensor(input, spec, qparamsOf(c));
      expect(hex(new Uint8Array(result.qparams.scale.buffer)), 'scale').toBe(hex(bytes(c.expect.scale!)));
      expect(hex(new Uint8Array(result.qparams.zeroPoint.buffer)), 'zero_point').toBe(
        hex(bytes(c.expect.zero_point!)),
      );
      expect(result.qparams.zeroPoint instanceof Float32Array).toBe(c.expect.zero_point!.dtype === 'F32');
      expect(hex(result.data), 'codes').toBe(hex(bytes(c.expect.q!)));
      return;
    }
    case 'dequantize': {
      const spec = parseSpec(c.spec!);
      const layout = planLayout('x', c.shape!, spec);
      const out = dequantizeTensor(
        { name: 'x', data: bytes(c.q!), spec, layout, qparams: qparamsOf(c)! },
        c.out_dtype as FloatDType,
      );
      expect(hex(out)).toBe(hex(bytes(c.expect.out!)));
      return;
    }
    case 'fake_quantize': {
      const { spec, input } = floatInput(c, c.input!);
      const result = fakeQuantizeTensor(input, spec, 'float32', qparamsOf(c));
      expect(hex(result.data), 'out').toBe(hex(bytes(c.expect.out!)));
      expect(hex(result.mask), 'mask').toBe(hex(bytes(c.expect.mask!)));
      return;
    }
    case 'range_search': {
      const x = toFloat32(bytes(c.input!), 'float32');
      const found = greedyRangeSearch('x', x, c.bits!);
      expect(Math.fround(found.min)).toBe(typedView(Float32Array, bytes(c.expect.min!))[0]);
      expect(Math.fround(found.max)).toBe(typedView(Float32Array, bytes(c.expect.max!))[0]);
      return;
    }
  }
}

const FAMILIES = [
  'per_tensor',
  'per_channel',
  'per_token',
  'per_group',
  'dequantize',
  'fake_quantize',
  'range_search',
];

describe.each(FAMILIES)('golden %s', (family) => {
  const golden = loadGolden(family);
  it('was made by PyTorch', () => {
    expect(golden.torch_version).toMatch(/^1\.13/);
    expect(golden.cases.length).toBeGreaterThan(10);
  });
  it.each(golden.cases.map((c) => [c.id, c] as const))('%s', (_id, c) => runCase(c));
});
