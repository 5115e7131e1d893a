/**
 * OCP FP8 encodings (the ones torch calls float8_e4m3fn and float8_e5m2).
 *
 *   e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN;
 *           largest finite 448 (0x7E).
 *   e5m2:   1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like with ±Infinity (0x7C) and
 *           NaN (0x7D..0x7F); largest finite 57344 (0x7B).
 *
 * Encoding rounds to nearest, ties to even, subnormals included. A value that rounds past the
 * largest finite becomes NaN (e4m3fn) or Infinity (e5m2), as c10's converters do; quantize
 * clamps to [quant_min, quant_max] first, so it never reaches that case.
 */
import { float32Bits } from './float16.js';

export type Fp8Format = 'float8_e4m3fn' | 'float8_e5m2';

interface FormatParams {
  readonly mantBits: number;
  readonly bias: number;
  /** Largest finite code without sign. */
  readonly maxFinite: number;
  /** Code (without sign) for overflow and for infinite input. */
  readonly overflow: number;
  /** Code (without sign) for NaN. */
  readonly nan: number;
  readonly hasInfinity: boolean;
}

const PARAMS: Readonly<Record<Fp8Format, FormatParams>> = {
  float8_e4m3fn: { mantBits: 3, bias: 7, maxFinite: 0x7e, overflow: 0x7f, nan: 0x7f, hasInfinity: false },
  float8_e5m2: { mantBits: 2, bias: 15, maxFinite: 0x7b, overflow: 0x7c, nan: 0x7f, hasInfinity: true },
};

function roundShiftEven(value: number, shift: number): number {
  if (shift > 31) return 0;
  const kept = value >>> shift;
  const rest = value - kept * 2 ** shift;
  const half = 2 ** (shift - 1);
  return rest > half || (rest === half && (kept & 1) === 1) ? kept + 1 : kept;
}

/** The fp8 code nearest to `x` (a float32 value). */
export function encodeFp8(x: number, format: Fp8Format): number {
  const p = PARAMS[format];
  const bits = float32Bits(x);
  const sign = (bits >>> 24) & 0x80;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | (mant !== 0 ? p.nan : p.overflow);
  if (exp === 0) return sign; // zero, or a float32 subnormal: far below half the smallest fp8 step
  const e = exp - 127 + p.bias;
  const drop = 23 - p.mantBits;
  let code: number;
  if (e <= 0) {
    // Subnormal target: the significand (with its implicit 1) is shifted right once more per
    // step below the normal range. A carry lands on the smallest normal code, as it should.
    code = roundShiftEven(mant | 0x800000, drop + 1 - e);
  } else {
    code = roundShiftEven((e << 23) | mant, drop);
    // (e << 23 | mant) >> drop == e << mantBits | top mantissa bits; carries bump the exponent.
  }
  if (code > p.maxFinite) return sign | p.overflow;
  return sign | code;
}

function decode(code: number, format: Fp8Format): number {
  const p = PARAMS[format];
  const sign = code & 0x80 ? -1 : 1;
  const magnitude = code & 0x7f;
  const expField = magnitude >>> p.mantBits;
  const mant = magnitude & ((1 << p.mantBits) - 1);
  const maxExpField = (1 << (7 - p.mantBits)) - 1;
  if (p.hasInfinity && expField === maxExpField) return mant === 0 ? sign * Infinity : NaN;
  if (!p.hasInfinity && magnitude === p.nan) return NaN;
  if (expField === 0) return sign * mant * 2 ** (1 - p.bias - p.mantBits);
  return sign * (1 + mant / (1 << p.mantBits)) * 2 ** (expField - p.bias);
}

const tables: Partial<Record<Fp8Format, Float32Array>> = {};

/** All 256 values of the format as float32 (exact). */
export function fp8DecodeTable(format: Fp8Format): Float32Array {
  let table = tables[format];
  if (!table) {
    table = new Float32Array(256);
    for (let c = 0; c < 256; c++) table[c] = decode(c, format);
    tables[format] = table;
  }
  return table;
}

export function decodeFp8(code: number, format: Fp8Format): number {
  return fp8DecodeTable(format)[code & 0xff]!;
}
