/**
 * IEEE binary16 and bfloat16 conversions. Decoding is exact; encoding rounds to nearest,
 * ties to even, overflows to ±Infinity and keeps NaN quiet — what torch's `.to(float16)` and
 * `.to(bfloat16)` do.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Bits of the float32 nearest `x`. */
export function float32Bits(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

export function float32FromBits(bits: number): number {
  u32[0] = bits >>> 0;
  return f32[0]!;
}

/** Round `value` right by `shift` bits, ties to even. */
function shiftRoundEven(value: number, shift: number): number {
  if (shift <= 0) return value;
  if (shift > 31) return 0;
  const kept = value >>> shift;
  const rest = value - kept * 2 ** shift;
  const half = 2 ** (shift - 1);
  return rest > half || (rest === half && (kept & 1) === 1) ? kept + 1 : kept;
}

export function float16BitsFromFloat32(x: number): number {
  const bits = float32Bits(x);
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return mant !== 0 ? sign | 0x7e00 : sign | 0x7c00;
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (exp === 0) return sign; // float32 zero or subnormal: far below half the smallest half
    // Subnormal half: units of 2^-24. The float32 significand (24 bits) is shifted right.
    return sign | shiftRoundEven(mant | 0x800000, 14 - e);
  }
  // A carry out of the mantissa correctly bumps the exponent (up to Infinity).
  return sign | shiftRoundEven((e << 23) | mant, 13);
}

let float16Table: Float32Array | undefined;

/** All 65536 half values as float32; built on first use (256 KiB). */
export function float16DecodeTable(): Float32Array {
  if (float16Table) return float16Table;
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) table[h] = decodeFloat16(h);
  float16Table = table;
  return table;
}

function decodeFloat16(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

export function float32FromFloat16Bits(h: number): number {
  return float16DecodeTable()[h & 0xffff]!;
}

export function bfloat16BitsFromFloat32(x: number): number {
  const bits = float32Bits(x);
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x7fffff) !== 0) return ((bits >>> 16) | 0x40) & 0xffff;
  return shiftRoundEven(bits >>> 0, 16) & 0xffff; // a carry into the sign bit cannot happen below Infinity
}

export function float32FromBfloat16Bits(b: number): number {
  return float32FromBits((b & 0xffff) << 16);
}

/** Rounds to the nearest float16 value, returned as a number. */
export function roundToFloat16(x: number): number {
  return float32FromFloat16Bits(float16BitsFromFloat32(x));
}
