/**
 * Scalar helpers shared by the ggml block quantizers (ggml-legacy.ts, ggml-kquants.ts): the C
 * float32 semantics ggml's reference code relies on, spelled out for JavaScript doubles.
 *
 * Every float operation of the reference is one IEEE float32 operation: here each one is a
 * double operation followed by Math.fround, which gives the same result for +, -, *, / and sqrt
 * (a double carries more than twice float32's precision, so rounding twice is harmless). No
 * operation is ever fused (no FMA): the result equals ggml's reference compiled without
 * floating-point contraction.
 */
import { float16BitsFromFloat32, float16DecodeTable } from '../float16.js';

/**
 * One float32 rounding. Hot modules keep their own `const f = Math.fround` rather than importing
 * this one: a module runner that rewrites imports into property loads (vitest's) would otherwise
 * stop the builtin from being inlined.
 */
export const f = Math.fround;

/** GROUP_MAX_EPS of ggml-quants.c: a group whose largest magnitude is below it is all zero. */
export const GROUP_MAX_EPS = Math.fround(1e-15);

/**
 * The value of largest magnitude of x[xo..xo+n), signed; the first one wins a tie and NaN never
 * does (`if (ax > amax)`, as every ggml search starts). Its magnitude is the group's amax.
 */
export function signedAbsMax(x: Float32Array, xo: number, n: number): number {
  let amax = 0;
  let max = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[xo + i]!);
    if (ax > amax) {
      amax = ax;
      max = x[xo + i]!;
    }
  }
  return max;
}

/** GGML_FP32_TO_FP16: round to nearest, ties to even (F16C `_cvtss_sh(x, 0)` and ggml's bit trick agree). */
export function fp16Bits(x: number): number {
  return float16BitsFromFloat32(x);
}

/** GGML_FP16_TO_FP32 (exact). */
export function fp16Value(bits: number): number {
  return float16DecodeTable()[bits & 0xffff]!;
}

/**
 * C's float → int conversion as x86-64 performs it (cvttss2si): truncation toward zero, and
 * INT_MIN for NaN or a value outside int32. Only degenerate blocks (a scale whose reciprocal
 * overflows float32) reach the second case.
 */
export function cInt(x: number): number {
  if (!(x >= -2147483648 && x < 2147483648)) return -2147483648;
  return Math.trunc(x) | 0;
}

/** The int8_t an int converts to (two's complement wrap-around). */
export function int8(i: number): number {
  return (i << 24) >> 24;
}

/** C `roundf`: half away from zero. Exact for float32 input (|x| + 0.5 is exact in a double). */
export function roundf(x: number): number {
  if (!Number.isFinite(x)) return x;
  const r = Math.floor(Math.abs(x) + 0.5);
  return x < 0 || Object.is(x, -0) ? -r : r;
}

export function putU16(out: Uint8Array, at: number, v: number): void {
  out[at] = v & 0xff;
  out[at + 1] = (v >>> 8) & 0xff;
}

export function getU16(b: Uint8Array, at: number): number {
  return b[at]! | (b[at + 1]! << 8);
}

export function putU32(out: Uint8Array, at: number, v: number): void {
  out[at] = v & 0xff;
  out[at + 1] = (v >>> 8) & 0xff;
  out[at + 2] = (v >>> 16) & 0xff;
  out[at + 3] = (v >>> 24) & 0xff;
}

export function getU32(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}

/** A quantizer of one block: `n` floats of `x` from `xo` → the block's bytes at `out[oo]`. */
export type BlockQuantizer = (x: Float32Array, xo: number, out: Uint8Array, oo: number) => void;
/** A dequantizer of one block: the block's bytes at `b[bo]` → its floats at `y[yo]`. */
export type BlockDequantizer = (b: Uint8Array, bo: number, y: Float32Array, yo: number) => void;

/** Σx² of x[xo..xo+n), accumulated in float32 in order. */
export function sumSquares(x: Float32Array, xo: number, n: number): number {
  let s = 0;
  for (let j = 0; j < n; j++) s = f(s + f(x[xo + j]! * x[xo + j]!));
  return s;
}

/**
 * An importance matrix's weights for the n values at x[xo], as llama.cpp's quant_weights paths
 * compute them: w[j] = qw[qwo + j]·sqrt(σ² + x²). Returns their sum, added in order (the K types'
 * sub-block weight sums).
 */
export function matrixWeights(
  x: Float32Array,
  xo: number,
  qw: Float32Array,
  qwo: number,
  sigma2: number,
  n: number,
  w: Float32Array,
): number {
  for (let j = 0; j < n; j++) w[j] = f(qw[qwo + j]! * f(Math.sqrt(f(sigma2 + f(x[xo + j]! * x[xo + j]!)))));
  let sum = 0;
  for (let j = 0; j < n; j++) sum = f(sum + w[j]!);
  return sum;
}
