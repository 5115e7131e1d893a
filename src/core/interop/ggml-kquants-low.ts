/**
 * ggml's 2- and 3-bit K-quants, Q2_K and Q3_K (super-blocks of 256 values in 16 sub-blocks of
 * 16), byte-exact with `quantize_row_q2_K_ref` / `quantize_row_q3_K_ref` of ggml-quants.c (what
 * llama-quantize runs without an importance matrix) and their `dequantize_row_*`.
 *
 * Q2_K: each sub-block gets an affine fit x ≈ scale·q − min (q in 0..3) from make_qkx2_quants
 * with weights |x|, rmin −0.5, rdelta 0.1, 15 steps and the absolute error (use_mad); scales and
 * mins are quantized to 4 bits against d = max_scale/15 and dmin = max_min/15 (fp16), and the
 * codes recomputed from them. Layout: scales:u8[16] (scale | min << 4), qs:u8[64], d:f16, dmin:f16
 * — byte l of each 32-byte half holds the codes of elements l, l+32, l+64, l+96 of its 128.
 *
 * Q3_K: each sub-block gets a symmetric fit from make_q3_quants (codes −4..3, an rmse refinement
 * weighted by x²); the 16 scales are quantized to 6 bits signed against d = max_scale/−32 (fp16),
 * and the codes recomputed. Layout: hmask:u8[32] (bit k of byte m: the high bit of element
 * 32k + m), qs:u8[64] (low two bits, as Q2_K), scales:u8[12] (low nibbles of the 16 scales in
 * bytes 0–7, their high two bits in 8–11), d:f16.
 *
 * Float32 arithmetic, one rounding per C operation, no fused multiply-add (see ggml-common.ts).
 */
import { GROUP_MAX_EPS, fp16Bits, fp16Value, getU16, int8, putU16, signedAbsMax } from './ggml-common.js';
import { QK_K, makeQkx2Quants, nearestInt } from './ggml-kquants.js';

const f = Math.fround; // local on purpose, see ggml-common.ts

const q2k = {
  L: new Uint8Array(QK_K),
  laux: new Uint8Array(16),
  weights: new Float32Array(16),
  scales: new Float32Array(16),
  mins: new Float32Array(16),
  result: { min: 0 },
};

/** Q2_K's and Q3_K's packing of 2-bit codes: four elements 32 apart in one byte. */
function packTwoBits(L: Uint8Array, out: Uint8Array, qs: number): void {
  for (let j = 0; j < QK_K; j += 128) {
    for (let l = 0; l < 32; l++) {
      out[qs + j / 4 + l] = L[j + l]! | (L[j + l + 32]! << 2) | (L[j + l + 64]! << 4) | (L[j + l + 96]! << 6);
    }
  }
}

// --- Q2_K ------------------------------------------------------------------------------------

export function quantizeQ2_K(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  const { L, laux, weights, scales, mins, result } = q2k;
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 16; j++) {
    const base = xo + 16 * j;
    for (let l = 0; l < 16; l++) weights[l] = Math.abs(x[base + l]!);
    scales[j] = makeQkx2Quants(16, 3, x, base, weights, L, 16 * j, laux, f(-0.5), f(0.1), 15, true, result);
    mins[j] = result.min;
    if (scales[j]! > maxScale) maxScale = scales[j]!;
    if (result.min > maxMin) maxMin = result.min;
  }
  const sc = oo; // scales[16]
  if (maxScale > 0) {
    const iscale = f(15 / maxScale);
    for (let j = 0; j < 16; j++) out[sc + j] = nearestInt(f(iscale * scales[j]!)) & 0xff;
    putU16(out, oo + 80, fp16Bits(f(maxScale / 15)));
  } else {
    out.fill(0, sc, sc + 16);
    putU16(out, oo + 80, fp16Bits(0));
  }
  if (maxMin > 0) {
    const iscale = f(15 / maxMin);
    for (let j = 0; j < 16; j++) out[sc + j]! |= (nearestInt(f(iscale * mins[j]!)) << 4) & 0xff;
    putU16(out, oo + 82, fp16Bits(f(maxMin / 15)));
  } else {
    putU16(out, oo + 82, fp16Bits(0));
  }
  finishQ2_K(x, xo, L, out, oo);
}

/**
 * Q2_K after its scale bytes, d and dmin are written (by the reference or, with an importance
 * matrix, by quantize_row_q2_K_impl): each sub-block's codes against its rounded scale and min
 * (a sub-block whose scale is 0 keeps the fit's codes in L), packed.
 */
export function finishQ2_K(x: Float32Array, xo: number, L: Uint8Array, out: Uint8Array, oo: number): void {
  const sc = oo;
  const d = fp16Value(getU16(out, oo + 80));
  const dmin = fp16Value(getU16(out, oo + 82));
  for (let j = 0; j < 16; j++) {
    const dj = f(d * (out[sc + j]! & 0xf));
    if (dj === 0) continue;
    const dm = f(dmin * (out[sc + j]! >> 4));
    for (let ii = 0; ii < 16; ii++) {
      const l = nearestInt(f(f(x[xo + 16 * j + ii]! + dm) / dj));
      L[16 * j + ii] = Math.max(0, Math.min(3, l));
    }
  }
  packTwoBits(L, out, oo + 16);
}

export function dequantizeQ2_K(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo + 80));
  const min = fp16Value(getU16(b, bo + 82));
  let out = yo;
  let is = 0;
  for (let n = 0; n < 2; n++) {
    const q = bo + 16 + 32 * n;
    for (let shift = 0; shift < 8; shift += 2) {
      for (const half of [0, 16]) {
        const sc = b[bo + is++]!;
        const dl = f(d * (sc & 0xf));
        const ml = f(min * (sc >> 4));
        // dl · code is exact in float32: one rounding, with or without FMA
        for (let l = 0; l < 16; l++) y[out++] = f(dl * ((b[q + half + l]! >> shift) & 3) - ml);
      }
    }
  }
}

// --- Q3_K ------------------------------------------------------------------------------------

const q3k = { L: new Int8Array(QK_K), codes: new Uint8Array(QK_K), scales: new Float32Array(16) };

/**
 * make_q3_quants with do_rmse: codes −nmax..nmax−1 written to L[lo..) as code + nmax (0 for an
 * all-zero group), the scale returned.
 */
function makeQ3Quants(
  n: number,
  nmax: number,
  x: Float32Array,
  xo: number,
  L: Int8Array,
  lo: number,
): number {
  const max = signedAbsMax(x, xo, n);
  if (Math.abs(max) < GROUP_MAX_EPS) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  const iscale = f(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(f(iscale * xi))));
    L[lo + i] = l;
    const w = f(xi * xi);
    sumlx = f(sumlx + f(f(w * xi) * l));
    suml2 = f(suml2 + f(f(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[xo + i]!;
      const w = f(xi * xi);
      const li = L[lo + i]!;
      let slx = f(sumlx - f(f(w * xi) * li));
      if (slx > 0) {
        let sl2 = f(suml2 - f(f(w * li) * li));
        const newL = Math.max(-nmax, Math.min(nmax - 1, nearestInt(f(f(xi * sl2) / slx))));
        if (newL !== li) {
          slx = f(slx + f(f(w * xi) * newL));
          sl2 = f(sl2 + f(f(w * newL) * newL));
          if (sl2 > 0 && f(f(slx * slx) * suml2) > f(f(sumlx * sumlx) * sl2)) {
            L[lo + i] = newL;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (changed === 0) break;
  }
  for (let i = 0; i < n; i++) L[lo + i]! += nmax;
  return suml2 > 0 ? f(sumlx / suml2) : 0;
}

/** The j-th 6-bit scale of a Q3_K block, minus 32 (its 12 scale bytes at sc). */
function q3Scale(b: Uint8Array, sc: number, j: number): number {
  const low = j < 8 ? b[sc + j]! & 0xf : b[sc + j - 8]! >> 4;
  return (low | (((b[sc + 8 + (j % 4)]! >> (2 * Math.trunc(j / 4))) & 3) << 4)) - 32;
}

export function quantizeQ3_K(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  const { L, scales } = q3k;
  let maxScale = 0;
  let amax = 0;
  for (let j = 0; j < 16; j++) {
    scales[j] = makeQ3Quants(16, 4, x, xo + 16 * j, L, 16 * j);
    const scale = Math.abs(scales[j]!);
    if (scale > amax) {
      amax = scale;
      maxScale = scales[j]!;
    }
  }
  const sc = oo + 96;
  out.fill(0, sc, sc + 12);
  if (maxScale !== 0) {
    const iscale = f(-32 / maxScale);
    for (let j = 0; j < 16; j++) {
      // int8_t l = nearest_int(...); l = MAX(-32, MIN(31, l)) + 32
      const l = Math.max(-32, Math.min(31, int8(nearestInt(f(iscale * scales[j]!)) & 0xff))) + 32;
      if (j < 8) out[sc + j] = l & 0xf;
      else out[sc + j - 8]! |= (l & 0xf) << 4;
      out[sc + 8 + (j % 4)]! |= (l >> 4) << (2 * Math.trunc(j / 4));
    }
    putU16(out, oo + 108, fp16Bits(f(1 / iscale)));
  } else {
    putU16(out, oo + 108, fp16Bits(0));
  }
  finishQ3_K(x, xo, L, out, oo);
}

/**
 * Q3_K after its scale bytes and d are written (by the reference or, with an importance matrix,
 * by quantize_row_q3_K_impl): each sub-block's codes against its rounded scale (a sub-block whose
 * scale is 0 keeps the fit's codes, code + 4, in L), the high bits into hmask, the rest packed.
 */
export function finishQ3_K(x: Float32Array, xo: number, L: Int8Array, out: Uint8Array, oo: number): void {
  const { codes } = q3k;
  const sc = oo + 96;
  const dAll = fp16Value(getU16(out, oo + 108));
  for (let j = 0; j < 16; j++) {
    const d = f(dAll * q3Scale(out, sc, j));
    if (d === 0) continue;
    for (let ii = 0; ii < 16; ii++) {
      const l = nearestInt(f(x[xo + 16 * j + ii]! / d));
      L[16 * j + ii] = Math.max(-4, Math.min(3, l)) + 4;
    }
  }
  const hmask = oo;
  out.fill(0, hmask, hmask + 32);
  for (let j = 0; j < QK_K; j++) {
    let l = L[j]!;
    if (l > 3) {
      out[hmask + (j % 32)]! |= 1 << Math.trunc(j / 32);
      l -= 4;
    }
    codes[j] = l;
  }
  packTwoBits(codes, out, oo + 32);
}

export function dequantizeQ3_K(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const dAll = fp16Value(getU16(b, bo + 108));
  const sc = bo + 96;
  const hm = bo;
  let out = yo;
  let is = 0;
  let m = 1;
  for (let n = 0; n < 2; n++) {
    const q = bo + 32 + 32 * n;
    for (let shift = 0; shift < 8; shift += 2) {
      for (const half of [0, 16]) {
        const dl = f(dAll * q3Scale(b, sc, is++));
        for (let l = 0; l < 16; l++) {
          const code = ((b[q + half + l]! >> shift) & 3) - (b[hm + half + l]! & m ? 0 : 4);
          y[out++] = f(dl * code);
        }
      }
      m <<= 1;
    }
  }
}
