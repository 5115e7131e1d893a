/**
 * Arithmetic in a tensor's own float dtype, as torch does it on float16 / bfloat16 tensors: each
 * operation is computed in float32 (torch's "opmath" type, on CPU and CUDA alike) and its result
 * rounded to the dtype, ties to even. A reference that computes `x / scale` on a bfloat16 weight
 * (compressed-tensors' quantize) therefore rounds the quotient twice — to float32, then to
 * bfloat16 — and so must quantd: `roundIn(dtype)(a / b)` does exactly that for float32 operands
 * (the float64 quotient rounded to float32 first is the float32 quotient; see rounding.ts).
 */
import type { FloatDType } from './dtypes.js';
import { float16BitsFromFloat32, float32FromFloat16Bits } from './float16.js';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** `x` rounded to float32, then to bfloat16 (nearest, ties to even; ±Infinity and NaN kept). */
export function roundBfloat16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7f800000) === 0x7f800000) return f32[0]!;
  // adding 0x7fff plus the kept part's lowest bit, then truncating, rounds half to even; a
  // carry into the exponent is the correct result (up to Infinity)
  u32[0] = (bits + 0x7fff + ((bits >>> 16) & 1)) & 0xffff0000;
  return f32[0]!;
}

/** `x` rounded to float32, then to float16 (nearest, ties to even, overflowing to ±Infinity). */
export function roundFloat16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  const magnitude = bits & 0x7fffffff;
  // results in float16's normal range, [2^-14, 65504]: round the float32 mantissa to 10 bits in
  // place (as for bfloat16); [65504, 65520) rounds down to 65504, 65520 up to Infinity
  if (magnitude >= 0x38800000 && magnitude < 0x477ff000) {
    u32[0] = (bits + 0xfff + ((bits >>> 13) & 1)) & 0xffffe000;
    return f32[0]!;
  }
  return float32FromFloat16Bits(float16BitsFromFloat32(x)); // subnormal, overflow, NaN
}

/** The rounding of a result to `dtype`. */
export function roundIn(dtype: FloatDType): (x: number) => number {
  if (dtype === 'bfloat16') return roundBfloat16;
  if (dtype === 'float16') return roundFloat16;
  return Math.fround;
}

/** torch.finfo(dtype).eps. */
export const DTYPE_EPS: Readonly<Record<FloatDType, number>> = {
  float32: 2 ** -23,
  float16: 2 ** -10,
  bfloat16: 2 ** -7,
};
