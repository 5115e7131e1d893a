/**
 * ONNX numerics (src/core/interop/onnx.ts): byte-exact golden vectors of MatMulNBits' 4-bit blocks
 * from an independent numpy transcription of ORT's quantizer (golden/onnx_reference.py, checked by
 * its --check against onnxruntime 1.30's quantize_matmul_4bits and onnx 1.23's reference
 * QuantizeLinear), hand-checked codes at ties, and QuantizeLinear-21 int4 against its formula.
 */
import { describe, expect, it } from 'vitest';

import {
  matMulNBitsCode,
  matMulNBitsDequantize,
  matMulNBitsQuantize,
  matMulNBitsShapes,
  packInt4,
  quantizeLinearInt4,
  unpackInt4,
} from '../../src/core/interop/onnx.js';
import { float16BitsFromFloat32, float32FromFloat16Bits } from '../../src/core/float16.js';
import { errorCode, golden, hex16, hex32, words } from './gptq-awq-bnb.helpers.js';

interface NBitsCase {
  name: string;
  N: number;
  K: number;
  block_size: number;
  sym: boolean;
  dtype: 'float32' | 'float16';
  weight: string[];
  b: string;
  scales: string[];
  zero_points: string | null;
  dequantized: string[];
}

interface QlCase {
  name: string;
  shape: number[];
  axis: number;
  block_size: number;
  signed: boolean;
  x: string[];
  scale: string[];
  scale_shape: number[];
  zero_point: number[];
  y: number[];
  packed: string;
}

const VECTORS = golden<never>('onnx_vectors.json') as unknown as {
  matmulnbits: NBitsCase[];
  quantize_linear: QlCase[];
};

const f32s = (hex: readonly string[]): Float32Array => new Float32Array(Uint32Array.from(words(hex)).buffer);
const hexBytes = (b: Uint8Array): string => Buffer.from(b).toString('hex');

function weightOf(c: NBitsCase): Float32Array {
  return c.dtype === 'float16' ? Float32Array.from(words(c.weight), float32FromFloat16Bits) : f32s(c.weight);
}

function quantize(c: NBitsCase) {
  return matMulNBitsQuantize(c.name, weightOf(c), [c.N, c.K], {
    blockSize: c.block_size,
    sym: c.sym,
    scaleType: c.dtype,
  });
}

describe('MatMulNBits 4-bit blocks: golden vectors (ORT matmul_4bits_quantizer)', () => {
  it('has the cases the generator documents', () => {
    expect(VECTORS.matmulnbits.map((c) => c.name)).toEqual([
      'f32_b16_asym_ties',
      'f32_b16_sym_ties',
      'f32_b16_asym_k37',
      'f32_b16_sym_k37',
      'f32_b16_asym_k33',
      'f32_b32_asym',
      'f32_b32_sym',
      'f16_b16_asym',
      'f16_b32_sym',
      'f32_b64_asym_k100',
    ]);
  });

  it.each(VECTORS.matmulnbits.map((c) => [c.name, c] as const))(
    '%s: B, scales, zero points byte-exact',
    (_, c) => {
      const p = quantize(c);
      const s = matMulNBitsShapes(c.name, [c.N, c.K], c.block_size);
      expect(p.b.length).toBe(s.b[0] * s.b[1] * s.b[2]);
      expect(hexBytes(p.b)).toBe(c.b);
      const scales =
        c.dtype === 'float16'
          ? hex16(Array.from(p.scales, float16BitsFromFloat32))
          : hex32(new Uint32Array(p.scales.buffer));
      expect(scales).toEqual(c.scales);
      expect(p.zeroPoints === null ? null : hexBytes(p.zeroPoints)).toBe(c.zero_points);
    },
  );

  it.each(VECTORS.matmulnbits.map((c) => [c.name, c] as const))(
    '%s: dequantized (code - zp) * scale',
    (_, c) => {
      const p = quantize(c);
      const w = matMulNBitsDequantize(
        p.b,
        p.scales,
        p.zeroPoints,
        matMulNBitsShapes(c.name, [c.N, c.K], c.block_size),
      );
      expect(hex32(new Uint32Array(w.buffer))).toEqual(c.dequantized);
    },
  );

  const ties = VECTORS.matmulnbits.find((c) => c.name === 'f32_b16_asym_ties')!;
  const symTies = VECTORS.matmulnbits.find((c) => c.name === 'f32_b16_sym_ties')!;

  it('rounds v / scale + zp half AWAY from zero (C roundf), not half to even', () => {
    // row 0, block 0: min -1.5, max 6 -> scale 0.5, zp 3; 0.75 -> 4.5 -> 5, -0.25 -> 2.5 -> 3
    const p = quantize(ties);
    const s = matMulNBitsShapes('t', [ties.N, ties.K], 16);
    expect(p.scales[0]).toBe(0.5);
    expect(p.zeroPoints![0]! & 0xf).toBe(3);
    const codes = Array.from({ length: 8 }, (_, k) => matMulNBitsCode(p.b, s, 0, k));
    // -1.5, 6.0, 0.25, 0.75, -0.25, -0.75, 1.25, 2.75
    expect(codes).toEqual([0, 15, 4, 5, 3, 2, 6, 9]);
  });

  it('rounds a zero point of 2.5 to 3 (roundf), and clamps it', () => {
    // row 0, block 1: min -1.25, max 6.25 -> scale 0.5, zp_f 2.5 -> 3
    const p = quantize(ties);
    expect(p.scales[1]).toBe(0.5);
    expect(p.zeroPoints![0]! >> 4).toBe(3);
  });

  it('symmetric: negative scale for a positive maximum, -0.0 and codes 8 for an all-zero block', () => {
    const p = quantize(symTies);
    const s = matMulNBitsShapes('t', [symTies.N, symTies.K], 16);
    expect(p.zeroPoints).toBeNull();
    expect(p.scales[2]).toBe(-1); // row 1 block 0: max 8 -> scale -8 / 8
    // 8, 0.5, 1.5, 2.5 -> -v + 8 = 0, 7.5 -> 8, 6.5 -> 7, 5.5 -> 6
    expect([0, 1, 2, 3].map((k) => matMulNBitsCode(p.b, s, 1, k))).toEqual([0, 8, 7, 6]);
    expect(Object.is(p.scales[3], -0)).toBe(true); // row 1 block 1: all zero
    expect(Array.from({ length: 16 }, (_, k) => matMulNBitsCode(p.b, s, 1, 16 + k))).toEqual(
      Array(16).fill(8),
    );
    expect(p.scales[4]! > 0).toBe(true); // row 2 block 0: negative only -> positive scale
    expect(p.scales[5]! < 0).toBe(true); // row 2 block 1: positive only -> negative scale
  });

  it('asymmetric all-zero block: scale 0, zero point 0, codes 0; negative-only block: zero point 15', () => {
    const p = quantize(ties);
    const s = matMulNBitsShapes('t', [ties.N, ties.K], 16);
    expect(p.scales[3]).toBe(0); // row 1, block 1
    expect(p.zeroPoints![1]! >> 4).toBe(0);
    expect(Array.from({ length: 16 }, (_, k) => matMulNBitsCode(p.b, s, 1, 16 + k))).toEqual(
      Array(16).fill(0),
    );
    expect(p.zeroPoints![2]! & 0xf).toBe(15); // row 2, block 0: all negative
  });

  it('odd K: the last byte repeats code K-2 in its high nibble (ORT), odd k_blocks pad zero points with 8', () => {
    const c = VECTORS.matmulnbits.find((x) => x.name === 'f32_b16_asym_k37')!;
    const p = quantize(c);
    const s = matMulNBitsShapes(c.name, [c.N, c.K], 16); // 3 blocks, blob 8
    for (let n = 0; n < c.N; n++) {
      expect(matMulNBitsCode(p.b, s, n, 37), `row ${n}`).toBe(matMulNBitsCode(p.b, s, n, 35));
      for (let k = 38; k < 48; k++) expect(matMulNBitsCode(p.b, s, n, k)).toBe(0);
      expect(p.zeroPoints![n * 2 + 1]! >> 4).toBe(8);
    }
    // K = 33: the last row starts its own thread block (rows 32..63): nothing to repeat
    const c33 = VECTORS.matmulnbits.find((x) => x.name === 'f32_b16_asym_k33')!;
    const p33 = quantize(c33);
    const s33 = matMulNBitsShapes(c33.name, [c33.N, c33.K], 16);
    for (let n = 0; n < c33.N; n++) expect(matMulNBitsCode(p33.b, s33, n, 33)).toBe(0);
  });

  it('refuses non-finite weights and bad shapes or block sizes', async () => {
    const w = new Float32Array(32).fill(0.5);
    w[7] = NaN;
    const params = { blockSize: 16, sym: false, scaleType: 'float32' as const };
    expect(await errorCode(() => matMulNBitsQuantize('w', w, [1, 32], params))).toBe('INPUT_NOT_FINITE');
    expect(await errorCode(() => matMulNBitsShapes('w', [32], 16))).toBe('SHAPE_UNSUPPORTED');
    expect(await errorCode(() => matMulNBitsShapes('w', [0, 32], 16))).toBe('SHAPE_UNSUPPORTED');
    expect(await errorCode(() => matMulNBitsShapes('w', [1, 32], 24))).toBe('GROUP_SIZE_INVALID');
    const tiny = new Float32Array(16);
    tiny[0] = 1e-39; // a block whose scale's reciprocal overflows float32
    expect(await errorCode(() => matMulNBitsQuantize('w', tiny, [1, 16], params))).toBe(
      'FEATURE_UNSUPPORTED',
    );
  });
});

/** rint (half to even) written out here, independent of src/core/rounding.ts. */
function halfEven(x: number): number {
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

describe('QuantizeLinear (opset 21) to int4 / uint4', () => {
  it.each(VECTORS.quantize_linear.map((c) => [c.name, c] as const))(
    '%s: golden (onnx reference op)',
    (_, c) => {
      const y = quantizeLinearInt4(c.name, f32s(c.x), c.shape, f32s(c.scale), c.zero_point, {
        axis: c.axis,
        blockSize: c.block_size,
        signed: c.signed,
      });
      expect(Array.from(y)).toEqual(c.y);
      expect(hexBytes(packInt4(y))).toBe(c.packed);
      expect(Array.from(unpackInt4(packInt4(y), y.length, c.signed))).toEqual(c.y);
    },
  );

  it('equals saturate(rint(f32(x / scale)) + zero_point) element by element (per axis and blocked)', () => {
    let seed = 7;
    const rand = (): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed / 2 ** 32;
    };
    const shape = [5, 12];
    const x = Float32Array.from({ length: 60 }, () => (rand() - 0.5) * 20);
    x[3] = 2.5; // ties: with scale 1 / 0.5 below they stay ties
    x[4] = -3.5;
    for (const [axis, blockSize, signed] of [
      [1, 0, true],
      [0, 0, false],
      [1, 4, true],
      [1, 5, false],
      [0, 2, true],
    ] as const) {
      const dim = shape[axis]!;
      const blocks = blockSize > 0 ? Math.ceil(dim / blockSize) : dim;
      const count = blockSize > 0 ? (60 / dim) * blocks : dim;
      const scale = Float32Array.from({ length: count }, (_, i) =>
        i % 3 === 0 ? 1 : i % 3 === 1 ? 0.5 : 0.37,
      );
      const [lo, hi] = signed ? [-8, 7] : [0, 15];
      const zp = Array.from({ length: count }, (_, i) => (signed ? (i % 5) - 2 : (i % 5) + 6));
      const y = quantizeLinearInt4('x', x, shape, scale, zp, { axis, blockSize, signed });
      for (let r = 0; r < 5; r++) {
        for (let c = 0; c < 12; c++) {
          const a = axis === 0 ? r : c;
          let q: number;
          if (blockSize === 0) q = a;
          else if (axis === 1) q = r * blocks + Math.floor(c / blockSize);
          else q = Math.floor(r / blockSize) * 12 + c;
          const expected = Math.min(
            hi,
            Math.max(lo, halfEven(Math.fround(x[r * 12 + c]! / scale[q]!)) + zp[q]!),
          );
          expect(y[r * 12 + c], `axis ${axis} block ${blockSize} [${r}, ${c}]`).toBe(expected);
        }
      }
    }
  });

  it('packs element 2i in the low nibble, two’s complement for int4', () => {
    expect(Array.from(packInt4([1, -1, -8, 7, 3]))).toEqual([0xf1, 0x78, 0x03]);
    expect(Array.from(unpackInt4(Uint8Array.from([0xf1, 0x78, 0x03]), 5, true))).toEqual([1, -1, -8, 7, 3]);
  });

  it('refuses bad scales, zero points, shapes and input', async () => {
    const x = new Float32Array(8).fill(1);
    const p = { axis: 1, blockSize: 0, signed: true };
    expect(
      await errorCode(() => quantizeLinearInt4('x', x, [2, 4], new Float32Array([1, 0, 1, 1]), null, p)),
    ).toBe('SCALE_INVALID');
    expect(
      await errorCode(() => quantizeLinearInt4('x', x, [2, 4], new Float32Array(4).fill(1), [0, 0, 9, 0], p)),
    ).toBe('ZERO_POINT_OUT_OF_RANGE');
    expect(
      await errorCode(() => quantizeLinearInt4('x', x, [2, 4], new Float32Array(3).fill(1), null, p)),
    ).toBe('QPARAMS_SHAPE_MISMATCH');
    expect(
      await errorCode(() =>
        quantizeLinearInt4('x', x, [2, 4], new Float32Array(2).fill(1), null, { ...p, axis: 2 }),
      ),
    ).toBe('AXIS_OUT_OF_RANGE');
    x[1] = Infinity;
    expect(await errorCode(() => quantizeLinearInt4('x', x, [2, 4], new Float32Array([1]), null, p))).toBe(
      'INPUT_NOT_FINITE',
    );
  });
});
