/**
 * Independent oracles for the core numerics tests. Nothing here imports src/: every helper is
 * written from the IEEE / OCP bit layouts or from docs/numerics.md directly, so a test comparing
 * src/core against these can fail.
 */
import { expect } from 'vitest';

// --- float32 bits (DataView, not the typed-array aliasing src/core uses) ----------------------

const view = new DataView(new ArrayBuffer(4));

export function f32Bits(x: number): number {
  view.setFloat32(0, x);
  return view.getUint32(0);
}

export function f32FromBits(bits: number): number {
  view.setUint32(0, bits >>> 0);
  return view.getFloat32(0);
}

/** The next float32 above `x` (x a finite float32). */
export function nextUp32(x: number): number {
  if (x === 0) return 2 ** -149;
  const b = f32Bits(x);
  return x > 0 ? f32FromBits(b + 1) : f32FromBits(b - 1);
}

/** The next float32 below `x` (x a finite float32). */
export function nextDown32(x: number): number {
  return -nextUp32(-x);
}

/** Distance from |x| (a float32) to the next float32 above it; 2^-149 for zero. */
export function ulp32(x: number): number {
  const a = Math.abs(Math.fround(x));
  if (!Number.isFinite(a)) return Infinity;
  if (a === 3.4028234663852886e38) return a - nextDown32(a);
  return nextUp32(a) - a;
}

// --- rounding ----------------------------------------------------------------------------------

/**
 * Round half to even from floor/ceil alone: pick the nearer of floor(x) and ceil(x), and on a tie
 * the even one. Exact for every double (x - floor(x) is exact below 2^52, and above that every
 * double is an integer).
 */
export function rintRef(x: number): number {
  if (!Number.isFinite(x)) return x;
  const lo = Math.floor(x);
  const hi = Math.ceil(x);
  if (lo === hi) return lo;
  const dLo = x - lo;
  const dHi = hi - x;
  if (dLo < dHi) return lo;
  if (dHi < dLo) return hi;
  return lo % 2 === 0 ? lo : hi;
}

// --- fp8 -----------------------------------------------------------------------------------------

export type Fp8Name = 'float8_e4m3fn' | 'float8_e5m2';

export interface Fp8Layout {
  readonly expBits: number;
  readonly mantBits: number;
  readonly bias: number;
  /** Largest finite value and its code. */
  readonly max: number;
  readonly maxCode: number;
  /** What lies one step above max in the bit pattern (value it would have, code it is). */
  readonly beyond: number;
  readonly beyondCode: number;
}

export const FP8: Readonly<Record<Fp8Name, Fp8Layout>> = {
  // 0x7E = 0.1111.110 = 1.75 · 2^(15-7) = 448; 0x7F would be 1.875 · 2^8 = 480 but is NaN.
  float8_e4m3fn: { expBits: 4, mantBits: 3, bias: 7, max: 448, maxCode: 0x7e, beyond: 480, beyondCode: 0x7f },
  // 0x7B = 0.11110.11 = 1.75 · 2^(30-15) = 57344; 0x7C is +Infinity (would be 2^16 = 65536).
  float8_e5m2: {
    expBits: 5,
    mantBits: 2,
    bias: 15,
    max: 57344,
    maxCode: 0x7b,
    beyond: 65536,
    beyondCode: 0x7c,
  },
};

/** Decodes an fp8 code from its bit layout: integer significand times a power of two. */
export function fp8RefDecode(code: number, format: Fp8Name): number {
  const { expBits, mantBits, bias } = FP8[format];
  const negative = (code & 0x80) !== 0;
  const e = (code >> mantBits) & ((1 << expBits) - 1);
  const m = code & ((1 << mantBits) - 1);
  let v: number;
  if (format === 'float8_e4m3fn') {
    if (e === 15 && m === 7) return NaN; // S.1111.111; no infinities in e4m3fn
  } else if (e === 31) {
    if (m !== 0) return NaN;
    return negative ? -Infinity : Infinity;
  }
  if (e === 0) v = m * 2 ** (1 - bias - mantBits);
  else v = ((1 << mantBits) + m) * 2 ** (e - bias - mantBits);
  return negative ? -v : v;
}

/**
 * The fp8 code nearest to the float32 value `x`, ties to the code whose mantissa LSB is 0, found by
 * a linear scan over every finite magnitude. One virtual candidate sits beyond the largest finite
 * value (480 for e4m3fn, 65536 for e5m2): rounding onto it, or any value at or past it, gives the
 * format's overflow code (NaN 0x7F for e4m3fn, Infinity 0x7C for e5m2).
 */
export function fp8RefEncode(x: number, format: Fp8Name): number {
  const f = FP8[format];
  const nanCode = 0x7f;
  if (Number.isNaN(x)) return nanCode;
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.abs(x);
  if (a >= f.beyond) return sign | f.beyondCode;
  let best = 0;
  let bestDist = Infinity;
  for (let code = 0; code <= f.beyondCode; code++) {
    const v = code === f.beyondCode ? f.beyond : fp8RefDecode(code, format);
    const d = Math.abs(v - a);
    if (d < bestDist || (d === bestDist && (code & 1) === 0)) {
      best = code;
      bestDist = d;
    }
  }
  return sign | best;
}

/** All codes whose decoded value is NaN, from the spec text (not by decoding). */
export function fp8NanCodes(format: Fp8Name): number[] {
  return format === 'float8_e4m3fn' ? [0x7f, 0xff] : [0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff];
}

// --- float16 / bfloat16 ------------------------------------------------------------------------

/** binary16 → value, built as float32 bits for normal numbers and by arithmetic for subnormals. */
export function halfRefDecode(h: number): number {
  const negative = (h & 0x8000) !== 0;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0x1f) return m !== 0 ? NaN : negative ? -Infinity : Infinity;
  if (e === 0) {
    const v = m / 16777216; // m · 2^-24, exact
    return negative ? -v : v;
  }
  return f32FromBits(((negative ? 1 : 0) << 31) | ((e - 15 + 127) << 23) | (m << 13));
}

/** bfloat16 → value by the sign/exponent/mantissa formula (8 exponent bits, bias 127, 7 mantissa bits). */
export function bf16RefDecode(b: number): number {
  const negative = (b & 0x8000) !== 0;
  const e = (b >> 7) & 0xff;
  const m = b & 0x7f;
  let v: number;
  if (e === 0xff) return m !== 0 ? NaN : negative ? -Infinity : Infinity;
  if (e === 0) v = m * 2 ** (-126 - 7);
  else v = (128 + m) * 2 ** (e - 127 - 7);
  return negative ? -v : v;
}

interface SortedCodes {
  /** Magnitudes of codes 0..maxCode, ascending, plus the virtual one beyond. */
  readonly values: Float64Array;
  readonly infinityCode: number;
}

function sortedCodes(maxCode: number, decode: (c: number) => number, beyond: number): SortedCodes {
  const values = new Float64Array(maxCode + 2);
  for (let c = 0; c <= maxCode; c++) values[c] = decode(c);
  values[maxCode + 1] = beyond;
  return { values, infinityCode: maxCode + 1 };
}

/** Nearest code by binary search over ascending magnitudes; ties to the even code. */
function nearestCode(table: SortedCodes, x: number, nanCode: number): number {
  if (Number.isNaN(x)) return nanCode;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  const { values, infinityCode } = table;
  if (a >= values[infinityCode]!) return sign | infinityCode;
  let lo = 0;
  let hi = infinityCode; // values[lo] <= a < values[hi]
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (values[mid]! <= a) lo = mid;
    else hi = mid;
  }
  const dLo = a - values[lo]!;
  const dHi = values[hi]! - a;
  const code = dLo < dHi ? lo : dHi < dLo ? hi : lo % 2 === 0 ? lo : hi;
  return sign | code;
}

let halfTable: SortedCodes | undefined;
let bf16Table: SortedCodes | undefined;

/** binary16 round-to-nearest-even of a float32 value; 65536 is the virtual step past 65504. */
export function halfRefEncode(x: number): number {
  halfTable ??= sortedCodes(0x7bff, halfRefDecode, 65536);
  return nearestCode(halfTable, x, 0x7e00);
}

/** bfloat16 round-to-nearest-even of a float32 value; 2^128 is the virtual step past the max. */
export function bf16RefEncode(x: number): number {
  bf16Table ??= sortedCodes(0x7f7f, bf16RefDecode, 2 ** 128);
  return nearestCode(bf16Table, x, 0x7fc0);
}

// --- sub-byte packing ----------------------------------------------------------------------------

/** torch quint4x2 / quint2x4 layout, bit by bit: bit j of element i lands at bit i·bits + j of the stream. */
export function packRef(values: ArrayLike<number>, bits: number): number[] {
  const out = new Array<number>(Math.ceil((values.length * bits) / 8)).fill(0);
  for (let i = 0; i < values.length; i++) {
    const field = ((values[i]! % 2 ** bits) + 2 ** bits) % 2 ** bits; // two's complement field
    for (let j = 0; j < bits; j++) {
      if (Math.floor(field / 2 ** j) % 2 === 1) {
        const pos = i * bits + j;
        out[Math.floor(pos / 8)]! += 2 ** (pos % 8);
      }
    }
  }
  return out;
}

// --- errors --------------------------------------------------------------------------------------

interface CodedError {
  code: string;
  params: Record<string, unknown>;
  message: string;
  name: string;
}

/** Runs fn, expects a QuantdError with `code` (and the given params, when listed); returns it. */
export function expectQuantdError(
  fn: () => unknown,
  code: string,
  params?: Record<string, unknown>,
): CodedError {
  let thrown: unknown;
  try {
    fn();
  } catch (e) {
    thrown = e;
  }
  expect(thrown, `expected ${code} to be thrown`).toBeInstanceOf(Error);
  const err = thrown as CodedError;
  expect(err.name).toBe('QuantdError');
  expect(err.code).toBe(code);
  if (params) expect(err.params).toMatchObject(params);
  return err;
}
