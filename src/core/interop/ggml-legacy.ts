/**
 * ggml's 32-element block types Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, byte-exact with the reference
 * quantizers of ggml-quants.c (`quantize_row_*_ref`, which llama.cpp's `llama-quantize` runs
 * when no importance matrix is given) and their `dequantize_row_*`.
 *
 * The rounding rules are ggml's, deliberately not torch's half-to-even (docs/numerics.md governs the
 * qtensor container, not this interop layout):
 *   Q8_0  code = roundf(x·id)                         half away from zero
 *   Q4_0  code = MIN(15, (int8_t)(x·id + 8.5f))       truncation of a float32 sum: half up
 *   Q4_1  code = MIN(15, (int8_t)((x − min)·id + 0.5f))
 *   Q5_0  code = MIN(31, (int8_t)(x·id + 16.5f))
 *   Q5_1  code = (uint8_t)((x − min)·id + 0.5f)        (no clamp in the reference)
 * where the scale d is computed in float32 and stored as fp16 (round to nearest even), while
 * the codes use the float32 reciprocal `id = d ? 1/d : 0` of the UNROUNDED d. Each product and
 * sum is rounded to float32 before the next step (see ggml-common.ts).
 *
 * Layouts (little-endian): Q8_0 = d:f16, qs:int8[32]; Q4_0 = d:f16, qs:u8[16];
 * Q4_1 = d:f16, m:f16, qs:u8[16]; Q5_0 = d:f16, qh:u32, qs:u8[16]; Q5_1 = d:f16, m:f16, qh:u32,
 * qs:u8[16]. Byte j of qs holds element j in its low nibble and element j+16 in its high
 * nibble; bit j of qh is the fifth bit of element j.
 */
import {
  cInt,
  fp16Bits,
  fp16Value,
  getU16,
  getU32,
  int8,
  putU16,
  putU32,
  roundf,
  signedAbsMax,
} from './ggml-common.js';

const f = Math.fround; // local on purpose, see ggml-common.ts

const QK = 32;
const HALF = QK / 2;
const FLT_MAX = 3.4028234663852886e38;

function minMax(x: Float32Array, xo: number): [number, number] {
  let min = FLT_MAX;
  let max = -FLT_MAX;
  for (let j = 0; j < QK; j++) {
    const v = x[xo + j]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return [min, max];
}

const reciprocal = (d: number): number => (d !== 0 ? f(1 / d) : 0);

// --- Q8_0 ------------------------------------------------------------------------------------

export function quantizeQ8_0(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  let amax = 0;
  for (let j = 0; j < QK; j++) {
    const a = Math.abs(x[xo + j]!);
    amax = amax > a ? amax : a; // MAX(amax, fabsf(v))
  }
  const d = f(amax / 127);
  const id = reciprocal(d);
  putU16(out, oo, fp16Bits(d));
  for (let j = 0; j < QK; j++) {
    out[oo + 2 + j] = cInt(roundf(f(x[xo + j]! * id))) & 0xff;
  }
}

export function dequantizeQ8_0(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  for (let j = 0; j < QK; j++) y[yo + j] = int8(b[bo + 2 + j]!) * d;
}

// --- Q4_0 ------------------------------------------------------------------------------------

export function quantizeQ4_0(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  const d = f(signedAbsMax(x, xo, QK) / -8);
  const id = reciprocal(d);
  putU16(out, oo, fp16Bits(d));
  for (let j = 0; j < HALF; j++) {
    const x0 = f(x[xo + j]! * id);
    const x1 = f(x[xo + HALF + j]! * id);
    const xi0 = Math.min(15, int8(cInt(f(x0 + 8.5)))) & 0xff;
    const xi1 = Math.min(15, int8(cInt(f(x1 + 8.5)))) & 0xff;
    out[oo + 2 + j] = (xi0 | (xi1 << 4)) & 0xff;
  }
}

export function dequantizeQ4_0(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  for (let j = 0; j < HALF; j++) {
    const q = b[bo + 2 + j]!;
    y[yo + j] = ((q & 0x0f) - 8) * d;
    y[yo + HALF + j] = ((q >> 4) - 8) * d;
  }
}

// --- Q4_1 ------------------------------------------------------------------------------------

export function quantizeQ4_1(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  const [min, max] = minMax(x, xo);
  const d = f(f(max - min) / 15);
  const id = reciprocal(d);
  putU16(out, oo, fp16Bits(d));
  putU16(out, oo + 2, fp16Bits(min));
  for (let j = 0; j < HALF; j++) {
    const x0 = f(f(x[xo + j]! - min) * id);
    const x1 = f(f(x[xo + HALF + j]! - min) * id);
    const xi0 = Math.min(15, int8(cInt(f(x0 + 0.5)))) & 0xff;
    const xi1 = Math.min(15, int8(cInt(f(x1 + 0.5)))) & 0xff;
    out[oo + 4 + j] = (xi0 | (xi1 << 4)) & 0xff;
  }
}

export function dequantizeQ4_1(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  const m = fp16Value(getU16(b, bo + 2));
  for (let j = 0; j < HALF; j++) {
    const q = b[bo + 4 + j]!;
    // a 4-bit code times an fp16 value is exact in float32: one rounding, with or without FMA
    y[yo + j] = f((q & 0x0f) * d + m);
    y[yo + HALF + j] = f((q >> 4) * d + m);
  }
}

// --- Q5_0 ------------------------------------------------------------------------------------

export function quantizeQ5_0(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  const d = f(signedAbsMax(x, xo, QK) / -16);
  const id = reciprocal(d);
  putU16(out, oo, fp16Bits(d));
  let qh = 0;
  for (let j = 0; j < HALF; j++) {
    const x0 = f(x[xo + j]! * id);
    const x1 = f(x[xo + HALF + j]! * id);
    const xi0 = Math.min(31, int8(cInt(f(x0 + 16.5)))) & 0xff;
    const xi1 = Math.min(31, int8(cInt(f(x1 + 16.5)))) & 0xff;
    out[oo + 6 + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
    qh |= ((xi0 & 0x10) >>> 4) << j;
    qh |= ((xi1 & 0x10) >>> 4) << (j + HALF);
  }
  putU32(out, oo + 2, qh);
}

export function dequantizeQ5_0(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  const qh = getU32(b, bo + 2);
  for (let j = 0; j < HALF; j++) {
    const q = b[bo + 6 + j]!;
    const h0 = ((qh >>> j) << 4) & 0x10;
    const h1 = (qh >>> (j + 12)) & 0x10;
    y[yo + j] = (((q & 0x0f) | h0) - 16) * d;
    y[yo + HALF + j] = (((q >> 4) | h1) - 16) * d;
  }
}

// --- Q5_1 ------------------------------------------------------------------------------------

export function quantizeQ5_1(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  const [min, max] = minMax(x, xo);
  const d = f(f(max - min) / 31);
  const id = reciprocal(d);
  putU16(out, oo, fp16Bits(d));
  putU16(out, oo + 2, fp16Bits(min));
  let qh = 0;
  for (let j = 0; j < HALF; j++) {
    const x0 = f(f(x[xo + j]! - min) * id);
    const x1 = f(f(x[xo + HALF + j]! - min) * id);
    const xi0 = cInt(f(x0 + 0.5)) & 0xff; // (uint8_t)(x0 + 0.5f)
    const xi1 = cInt(f(x1 + 0.5)) & 0xff;
    out[oo + 8 + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
    qh |= ((xi0 & 0x10) >>> 4) << j;
    qh |= ((xi1 & 0x10) >>> 4) << (j + HALF);
  }
  putU32(out, oo + 4, qh);
}

export function dequantizeQ5_1(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  const m = fp16Value(getU16(b, bo + 2));
  const qh = getU32(b, bo + 4);
  for (let j = 0; j < HALF; j++) {
    const q = b[bo + 8 + j]!;
    const h0 = ((qh >>> j) << 4) & 0x10;
    const h1 = (qh >>> (j + 12)) & 0x10;
    y[yo + j] = f(((q & 0x0f) | h0) * d + m);
    y[yo + HALF + j] = f(((q >> 4) | h1) * d + m);
  }
}
