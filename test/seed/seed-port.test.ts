/**
 * The assertions of the seed test suite (../shared/seeds/001, torch's test_quantized_tensor.py)
 * that apply to quantd, ported. Where an assertion compares against torch itself, the torch
 * side comes from the committed golden vectors (test/golden), which generate.py made with torch.
 */
import { describe, expect, it } from 'vitest';
import {
  bfloat16BitsFromFloat32,
  chooseQParams,
  dequantize,
  fakeQuantize,
  float32FromBfloat16Bits,
  parseSpec,
  planLayout,
  quantize,
  quantizeTensor,
  type QParams,
} from '../../src/core/index.js';
import { loadGolden } from '../golden/vectors.js';

/** Deterministic standard-normal float32 values (Box–Muller over a xorshift generator). */
function randn(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  const uniform = (): number => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return ((s >>> 0) + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++)
    out[i] = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
  return out;
}

const bytesOf = (x: Float32Array): Uint8Array => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);

describe('test_qtensor_sub_byte_aligned_cols / not_aligned_cols / int_repr', () => {
  // torch.quantize_per_tensor(ones, scale 1.0, zero_point 2, quint4x2 / quint2x4).int_repr()
  const cases: [string, number, number[]][] = [
    ['uint4', 4, [51, 51]],
    ['uint4', 5, [51, 51, 3]],
    ['uint2', 4, [255]],
    ['uint2', 5, [255, 3]],
    ['uint2', 1, [3]],
  ];
  it.each(cases)('%s × %i ones → %j', (qdtype, cols, packed) => {
    const spec = parseSpec({ qdtype });
    const layout = planLayout('r', [1, cols], spec);
    const given: QParams = { scale: Float32Array.of(1), zeroPoint: Int32Array.of(2) };
    const x = new Float32Array(cols).fill(1);
    const out = quantizeTensor({ name: 'r', dtype: 'float32', data: bytesOf(x), layout }, spec, given);
    expect(Array.from(out.data)).toEqual(packed);
  });
});

/** The seed's numpy `_calculate_dynamic_qparams` (float64 arithmetic, nudged zero point). */
function calculateDynamicQParams(x: Float32Array, signed: boolean): [number, number] {
  const [qmin, qmax] = signed ? [-128, 127] : [0, 255];
  let minVal = Infinity;
  let maxVal = -Infinity;
  for (const v of x) {
    minVal = Math.min(minVal, v);
    maxVal = Math.max(maxVal, v);
  }
  minVal = Math.min(0, minVal);
  maxVal = Math.max(0, maxVal);
  let scale = (maxVal - minVal) / (qmax - qmin);
  if (scale === 0 || !Number.isFinite(1 / scale)) scale = 0.1;
  const fromMin = qmin - minVal / scale;
  const fromMax = qmax - maxVal / scale;
  const fromMinError = Math.abs(qmin) - Math.abs(minVal / scale);
  const fromMaxError = Math.abs(qmax) - Math.abs(maxVal / scale);
  const initial = fromMinError < fromMaxError ? fromMin : fromMax;
  const pyRound = (v: number): number => {
    const r = Math.round(v);
    return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r; // Python's round: ties to even
  };
  const zp = initial < qmin ? qmin : initial > qmax ? qmax : pyRound(initial);
  return [Math.fround(scale), zp + 0]; // + 0: Python ints have no negative zero
}

describe('test_choose_qparams: choose_qparams vs _calculate_dynamic_qparams', () => {
  it.each([
    ['uint8', false],
    ['int8', true],
  ] as const)('%s: scale to 3 decimals, zero point equal, over 200 random tensors', (qdtype, signed) => {
    const spec = parseSpec({ qdtype });
    for (let seed = 1; seed <= 200; seed++) {
      const x = randn(5 * 10, seed).map((v, i) => v * ((seed % 7) + 0.5) + (i % 3 === 0 ? seed % 5 : 0));
      const qp = chooseQParams('X', x, planLayout('X', [5, 10], spec), spec);
      const [scale, zp] = calculateDynamicQParams(x, signed);
      expect(Math.abs(qp.scale[0]! - scale)).toBeLessThan(1.5e-3);
      expect(qp.zeroPoint[0]).toBe(zp);
    }
  });
});

describe('test_choose_qparams_optimized: choose_qparams_optimized vs param_search_greedy', () => {
  it('the golden vectors hold torch and the numpy reference agreeing for randn(64), bit widths 4 and 2', () => {
    const golden = loadGolden('range_search');
    for (const bits of [4, 2]) {
      const cases = golden.cases.filter((c) => c.bits === bits && c.id.includes('randn_64'));
      expect(cases.length).toBeGreaterThan(0);
      for (const c of cases) expect(c.source).toContain('torch.choose_qparams_optimized agrees');
    }
    // golden.test.ts then checks greedyRangeSearch against every one of these vectors.
  });
});

describe('test_decomposed_quantize_per_channel_group: per-group dequant(quant) equals fake_quantize_per_channel over groups', () => {
  it('x [100, 256], group 128, qmin -8, qmax 7, random scales and zero points', () => {
    const x = randn(100 * 256, 11);
    const s = randn(200, 12).map((v) => Math.abs(v) + 0.05); // torch.randn; quantd rejects scales <= 0
    const zp = Int32Array.from(randn(200, 13), (v) => Math.floor(Math.abs(v) * 3) % 7);
    const spec = parseSpec({
      qdtype: 'int4',
      scheme: 'per_group',
      group_size: 128,
      quant_min: -8,
      quant_max: 7,
    });
    const layout = planLayout('x', [100, 256], spec);
    const qp: QParams = { scale: s, zeroPoint: zp };
    const dq = dequantize(quantize('x', x, layout, spec, qp), 'int4', layout, qp);
    const perChannel = parseSpec({
      qdtype: 'int8',
      scheme: 'per_channel',
      axis: 0,
      quant_min: -8,
      quant_max: 7,
    });
    const fq = fakeQuantize('x', x, planLayout('x', [200, 128], perChannel), perChannel, qp).out;
    expect(Buffer.from(bytesOf(dq)).equals(Buffer.from(bytesOf(fq)))).toBe(true);
  });
});

describe('test_decomposed_quantize_per_token: per-token dequant(quant) equals fake_quantize_per_channel over rows', () => {
  it('x [100, 256], qmin -8, qmax 7, random scales and zero points', () => {
    const x = randn(100 * 256, 21);
    const s = randn(100, 22).map((v) => Math.abs(v) + 0.05);
    const zp = Int32Array.from(randn(100, 23), (v) => Math.floor(Math.abs(v) * 3) % 7);
    const spec = parseSpec({
      qdtype: 'int8',
      scheme: 'per_token',
      mode: 'affine',
      quant_min: -8,
      quant_max: 7,
    });
    const layout = planLayout('x', [100, 256], spec);
    // per_token affine takes float zero points; torch's test passes int32 ones, equal in value
    const qp: QParams = { scale: s, zeroPoint: Float32Array.from(zp) };
    const dq = dequantize(quantize('x', x, layout, spec, qp), 'int8', layout, qp);
    const perChannel = parseSpec({
      qdtype: 'int8',
      scheme: 'per_channel',
      axis: 0,
      quant_min: -8,
      quant_max: 7,
    });
    const fq = fakeQuantize('x', x, planLayout('x', [100, 256], perChannel), perChannel, {
      scale: s,
      zeroPoint: zp,
    }).out;
    expect(Buffer.from(bytesOf(dq)).equals(Buffer.from(bytesOf(fq)))).toBe(true);
  });
});

describe('test_bfp16_quantize: float32 → bfloat16 → float32 stays close', () => {
  it('rtol 1e-4, atol 5e-3 as torch asserts', () => {
    const x = randn(5 * 10, 31);
    for (const v of x) {
      const back = float32FromBfloat16Bits(bfloat16BitsFromFloat32(v));
      expect(Math.abs(back - v)).toBeLessThanOrEqual(5e-3 + 1e-4 * Math.abs(v));
    }
  });
});

describe('test_decomposed_* vs native: torch native and the decomposed formula agree on every golden vector', () => {
  it('each native torch op is represented in the golden vectors', () => {
    const sources = ['per_tensor', 'per_channel', 'dequantize', 'fake_quantize'].flatMap((f) =>
      loadGolden(f).cases.map((c) => c.source),
    );
    for (const op of [
      'torch.quantize_per_tensor',
      'torch.quantize_per_channel',
      'torch MinMaxObserver',
      'torch PerChannelMinMaxObserver',
      'torch.dequantize',
      'fake_quantize_per_tensor_affine_cachemask',
      'fake_quantize_per_channel_affine_cachemask',
    ]) {
      expect(
        sources.some((s) => s.includes(op)),
        op,
      ).toBe(true);
    }
    // generate.py asserts, case by case, that the native result equals the seed formula.
  });
});
