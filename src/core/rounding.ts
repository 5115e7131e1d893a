/**
 * Float32 arithmetic helpers. quantd's numerics are IEEE float32 with round-half-to-even;
 * JavaScript computes in float64, so every float32 operation is written as
 * `fround(a op b)`. For +, -, *, / and sqrt of float32 operands that is exactly the float32
 * result (float64 carries more than 2·24+2 bits, so the double rounding is innocuous).
 */

export const fround = Math.fround;

/** 1.5 · 2^52: adding and subtracting it rounds any |x| < 2^51 to an integer, ties to even. */
export const ROUNDING_MAGIC = 6755399441055744;
const TWO_POW_51 = 2251799813685248;
const TWO_POW_52 = 4503599627370496;

/**
 * Round half to even (torch.round, nearbyintf under the default rounding mode). Never use
 * Math.round for numerics: it rounds halves towards +infinity.
 * NaN and ±Infinity are returned unchanged; the sign is kept, so -0.3 rounds to -0 as in torch
 * (it shows in float zero points, which are stored as float32 bits).
 */
export function rint(x: number): number {
  const a = Math.abs(x);
  if (a < TWO_POW_51) {
    const r = a + ROUNDING_MAGIC - ROUNDING_MAGIC;
    return x < 0 || (x === 0 && 1 / x < 0) ? -r : r;
  }
  if (!(a < TWO_POW_52)) return x; // already an integer, or ±Infinity / NaN
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** float32 machine epsilon, 2^-23: torch.finfo(torch.float32).eps. */
export const FLOAT32_EPS = 1.1920928955078125e-7;
/** Smallest positive normal float32, 2^-126. */
export const FLOAT32_MIN_NORMAL = 1.1754943508222875e-38;
export const FLOAT32_MAX = 3.4028234663852886e38;
