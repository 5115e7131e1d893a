/**
 * ggml's K-quants Q4_K and Q6_K (super-blocks of QK_K = 256 values), byte-exact with
 * `quantize_row_q4_K_ref` / `quantize_row_q6_K_ref` of ggml-quants.c (what `llama-quantize`
 * runs without an importance matrix) and `dequantize_row_q4_K` / `dequantize_row_q6_K`.
 *
 * Q4_K: 8 sub-blocks of 32. Each sub-block gets an affine fit x ≈ scale·q − min (q in 0..15)
 * from `make_qkx2_quants` (weights av_x + |x| with av_x = sqrt(Σx²/32), nmax 15, rmin −1,
 * rdelta 0.1, nstep 20, squared error), then the 8 scales and 8 mins are quantized to 6 bits
 * against the super-block's d = max_scale/63 and dmin = max_min/63 (both stored as fp16), and
 * the codes are recomputed from the rounded scales: q = nearest_int((x + dmin·m)/(d·sc)).
 * Layout: d:f16, dmin:f16, scales:u8[12] (6-bit scales/mins packed as get_scale_min_k4 reads
 * them), qs:u8[128] — for each 64-value chunk, 32 bytes whose low nibbles are the chunk's first
 * 32 codes and high nibbles its last 32.
 *
 * Q6_K: 16 sub-blocks of 16. `make_qx_quants` (nmax 32, rmse_type 1: weights x², 19 trial
 * scales) gives each a symmetric scale; the scales are quantized to int8 against d =
 * max_scale/−128 (fp16) and the codes recomputed as clamp(nearest_int(x/(d·sc)), −32, 31) + 32.
 * Layout: ql:u8[128] (low 4 bits), qh:u8[64] (high 2 bits), scales:int8[16], d:f16 — for each
 * 128-value half, element l, l+32, l+64, l+96 share ql[l] / ql[l+32] nibbles and one qh byte.
 *
 * All arithmetic is float32, one rounding per C operation in C's order, no fused multiply-add;
 * nearest_int rounds half to EVEN (see ggml-common.ts).
 */
import { GROUP_MAX_EPS, fp16Bits, fp16Value, getU16, int8, putU16, signedAbsMax } from './ggml-common.js';

const f = Math.fround; // local on purpose, see ggml-common.ts

const nearestScratch = new Float32Array(1);
const nearestBits = new Int32Array(nearestScratch.buffer);

/**
 * ggml's `nearest_int`: adds 1.5·2^23 in float32 and reads the low 23 mantissa bits back. The
 * float32 addition rounds to nearest with ties to EVEN, so this is round-half-to-even for
 * |x| < 2^22 (ggml asserts that range in debug builds only; outside it the same bit arithmetic
 * runs here as in a release build).
 */
export function nearestInt(x: number): number {
  nearestScratch[0] = x + 12582912; // the store rounds the double sum to float32: one float32 add
  return (nearestBits[0]! & 0x007fffff) - 0x00400000;
}

export const QK_K = 256;
export const K_SCALE_SIZE = 12;
const RDELTA = f(0.1);

// --- Q4_K ------------------------------------------------------------------------------------

/**
 * make_qkx2_quants for one group (and make_qkx3_quants, which differs only in taking the weights
 * as an argument: with weights given they compute the same): writes the codes (0..nmax) to L[lo..lo+n) and returns the
 * scale; the group's min, negated as ggml returns it (`*the_min = -min`, so ≥ 0), goes to
 * `result.min`. `laux` is scratch of n bytes.
 */
export function makeQkx2Quants(
  n: number,
  nmax: number,
  x: Float32Array,
  xo: number,
  weights: Float32Array,
  L: Uint8Array,
  lo: number,
  laux: Uint8Array,
  rmin: number,
  rdelta: number,
  nstep: number,
  useMad: boolean,
  result: { min: number },
): number {
  let min = x[xo]!;
  let max = x[xo]!;
  let sumW = weights[0]!;
  let sumX = f(sumW * x[xo]!);
  for (let i = 1; i < n; i++) {
    const xi = x[xo + i]!;
    if (xi < min) min = xi;
    if (xi > max) max = xi;
    const w = weights[i]!;
    sumW = f(sumW + w);
    sumX = f(sumX + f(w * xi));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, lo, lo + n);
    result.min = -min;
    return 0;
  }
  let iscale = f(nmax / f(max - min));
  let scale = f(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i]!;
    const l = Math.max(0, Math.min(nmax, nearestInt(f(iscale * f(xi - min)))));
    L[lo + i] = l;
    let diff = f(f(f(scale * l) + min) - xi);
    diff = useMad ? Math.abs(diff) : f(diff * diff);
    bestError = f(bestError + f(weights[i]! * diff));
  }
  if (nstep < 1) {
    result.min = -min;
    return scale;
  }
  for (let is = 0; is <= nstep; is++) {
    // `min` is the best fit so far: later trials measure from it (as the reference does)
    iscale = f(f(f(rmin + f(rdelta * is)) + nmax) / f(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[xo + i]!;
      const l = Math.max(0, Math.min(nmax, nearestInt(f(iscale * f(xi - min)))));
      laux[i] = l;
      const wl = f(weights[i]! * l);
      sumL = f(sumL + wl);
      sumL2 = f(sumL2 + f(wl * l));
      sumXL = f(sumXL + f(wl * xi));
    }
    const D = f(f(sumW * sumL2) - f(sumL * sumL));
    if (D > 0) {
      let thisScale = f(f(f(sumW * sumXL) - f(sumX * sumL)) / D);
      let thisMin = f(f(f(sumL2 * sumX) - f(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = f(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        let diff = f(f(f(thisScale * laux[i]!) + thisMin) - x[xo + i]!);
        diff = useMad ? Math.abs(diff) : f(diff * diff);
        curError = f(curError + f(weights[i]! * diff));
      }
      if (curError < bestError) {
        L.set(laux.subarray(0, n), lo);
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  result.min = -min;
  return scale;
}

/**
 * The inverse of get_scale_min_k4: the j-th 6-bit scale and min into the 12 scale bytes at
 * q[qo] (written in order j = 0..7: the first four set bytes the last four then OR into).
 */
export function putScaleMinK4(j: number, ls: number, lm: number, q: Uint8Array, qo: number): void {
  if (j < 4) {
    q[qo + j] = ls;
    q[qo + j + 4] = lm;
  } else {
    q[qo + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
    q[qo + j - 4]! |= (ls >> 4) << 6;
    q[qo + j]! |= (lm >> 4) << 6;
  }
}

/** get_scale_min_k4: the j-th 6-bit scale and min of a Q4_K block's 12 scale bytes at q[qo]. */
export function scaleMinK4(j: number, q: Uint8Array, qo: number, out: { sc: number; m: number }): void {
  if (j < 4) {
    out.sc = q[qo + j]! & 63;
    out.m = q[qo + j + 4]! & 63;
  } else {
    out.sc = (q[qo + j + 4]! & 0xf) | ((q[qo + j - 4]! >> 6) << 4);
    out.m = (q[qo + j + 4]! >> 4) | ((q[qo + j]! >> 6) << 4);
  }
}

const q4k = {
  L: new Uint8Array(QK_K),
  laux: new Uint8Array(32),
  weights: new Float32Array(32),
  scales: new Float32Array(8),
  mins: new Float32Array(8),
  result: { min: 0 },
  sm: { sc: 0, m: 0 },
};

export function quantizeQ4_K(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  fitAffineSuperBlock(x, xo, out, oo, 15, -1, 20);
  packQ4_KCodes(x, xo, out, oo);
}

/**
 * Q4_K's and Q5_K's common first half: each sub-block of 32 fitted by make_qkx2_quants (weights
 * av_x + |x|; codes 0..nmax, rmin, rdelta 0.1, nstep), then the eight scales and mins quantized to
 * 6 bits against d = max_scale/63 and dmin = max_min/63: writes d, dmin and the 12 scale bytes.
 */
function fitAffineSuperBlock(
  x: Float32Array,
  xo: number,
  out: Uint8Array,
  oo: number,
  nmax: number,
  rmin: number,
  nstep: number,
): void {
  const { L, laux, weights, scales, mins, result } = q4k;
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < QK_K / 32; j++) {
    const base = xo + 32 * j;
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) sumX2 = f(sumX2 + f(x[base + l]! * x[base + l]!));
    const avX = f(Math.sqrt(f(sumX2 / 32)));
    for (let l = 0; l < 32; l++) weights[l] = f(avX + Math.abs(x[base + l]!));
    const scale = makeQkx2Quants(
      32,
      nmax,
      x,
      base,
      weights,
      L,
      32 * j,
      laux,
      f(rmin),
      RDELTA,
      nstep,
      false,
      result,
    );
    scales[j] = scale;
    mins[j] = result.min;
    if (scale > maxScale) maxScale = scale;
    if (result.min > maxMin) maxMin = result.min;
  }
  const invScale = maxScale > 0 ? f(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? f(63 / maxMin) : 0;
  for (let j = 0; j < QK_K / 32; j++) {
    // uint8_t ls = nearest_int(...); ls = MIN(63, ls)
    const ls = Math.min(63, nearestInt(f(invScale * scales[j]!)) & 0xff);
    const lm = Math.min(63, nearestInt(f(invMin * mins[j]!)) & 0xff);
    putScaleMinK4(j, ls, lm, out, oo + 4);
  }
  putU16(out, oo, fp16Bits(f(maxScale / 63)));
  putU16(out, oo + 2, fp16Bits(f(maxMin / 63)));
}

/**
 * The codes of a Q4_K super-block whose d, dmin and 12 scale bytes are written: each value's code
 * against its sub-block's rounded scale and min, packed into qs (both quantizers end this way).
 * `L` holds the search's codes, which sub-blocks whose rounded scale is 0 keep.
 */
export function packQ4_KCodes(x: Float32Array, xo: number, out: Uint8Array, oo: number, L = q4k.L): void {
  affineCodes(x, xo, out, oo, 15, L);
  let q = oo + 4 + K_SCALE_SIZE;
  for (let j = 0; j < QK_K; j += 64) {
    for (let l = 0; l < 32; l++) out[q + l] = L[j + l]! | (L[j + l + 32]! << 4);
    q += 32;
  }
}

/**
 * Each value's code (0..nmax) against its sub-block's rounded scale and min, from the d, dmin
 * and scale bytes written at out[oo..): what Q4_K and Q5_K pack. Sub-blocks of scale 0 keep the
 * search's codes, as in the reference.
 */
function affineCodes(
  x: Float32Array,
  xo: number,
  out: Uint8Array,
  oo: number,
  nmax: number,
  L: Uint8Array,
): void {
  const { sm } = q4k;
  const sc = oo + 4;
  const dAll = fp16Value(getU16(out, oo));
  const dminAll = fp16Value(getU16(out, oo + 2));
  for (let j = 0; j < QK_K / 32; j++) {
    scaleMinK4(j, out, sc, sm);
    const d = f(dAll * sm.sc);
    if (d === 0) continue;
    const dm = f(dminAll * sm.m);
    for (let ii = 0; ii < 32; ii++) {
      const l = nearestInt(f(f(x[xo + 32 * j + ii]! + dm) / d));
      L[32 * j + ii] = Math.max(0, Math.min(nmax, l));
    }
  }
}

// --- Q5_K ------------------------------------------------------------------------------------

/**
 * Q5_K: Q4_K's fit with codes 0..31 (make_qkx2_quants with rmin −0.5 and 15 steps). Layout:
 * d:f16, dmin:f16, scales:u8[12] (as Q4_K), qh:u8[32], qs:u8[128] — for each 64-value chunk c,
 * 32 bytes of low nibbles (first 32 codes) and high nibbles (last 32), and the codes' fifth bits
 * in qh bit 2c (first 32) and 2c+1 (last 32).
 */
export function quantizeQ5_K(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  fitAffineSuperBlock(x, xo, out, oo, 31, -0.5, 15);
  packQ5_KCodes(x, xo, out, oo);
}

/** The codes of a Q5_K super-block whose d, dmin and scale bytes are written, packed (`L` as Q4_K's). */
export function packQ5_KCodes(x: Float32Array, xo: number, out: Uint8Array, oo: number, L = q4k.L): void {
  affineCodes(x, xo, out, oo, 31, L);
  const qh = oo + 4 + K_SCALE_SIZE;
  out.fill(0, qh, qh + 32);
  let ql = qh + 32;
  for (let n = 0, bit = 0; n < QK_K; n += 64, bit += 2) {
    for (let j = 0; j < 32; j++) {
      const l1 = L[n + j]!;
      const l2 = L[n + j + 32]!;
      if (l1 > 15) out[qh + j]! |= 1 << bit;
      if (l2 > 15) out[qh + j]! |= 2 << bit;
      out[ql + j] = (l1 & 0xf) | ((l2 & 0xf) << 4);
    }
    ql += 32;
  }
}

export function dequantizeQ5_K(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  const min = fp16Value(getU16(b, bo + 2));
  const sc = bo + 4;
  const qh = bo + 4 + K_SCALE_SIZE;
  const sm = q4k.sm;
  let ql = qh + 32;
  let out = yo;
  for (let is = 0, bit = 0; is < 8; is += 2, bit += 2) {
    scaleMinK4(is, b, sc, sm);
    const d1 = f(d * sm.sc);
    const m1 = f(min * sm.m);
    scaleMinK4(is + 1, b, sc, sm);
    const d2 = f(d * sm.sc);
    const m2 = f(min * sm.m);
    // d1 · code is exact in float32 (≤ 22 significant bits): one rounding, with or without FMA
    for (let l = 0; l < 32; l++)
      y[out++] = f(d1 * ((b[ql + l]! & 0xf) + ((b[qh + l]! >> bit) & 1 ? 16 : 0)) - m1);
    for (let l = 0; l < 32; l++)
      y[out++] = f(d2 * ((b[ql + l]! >> 4) + ((b[qh + l]! >> (bit + 1)) & 1 ? 16 : 0)) - m2);
    ql += 32;
  }
}

export function dequantizeQ4_K(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  const min = fp16Value(getU16(b, bo + 2));
  const sc = bo + 4;
  const sm = q4k.sm;
  let q = bo + 4 + K_SCALE_SIZE;
  let out = yo;
  for (let is = 0; is < 8; is += 2) {
    scaleMinK4(is, b, sc, sm);
    const d1 = f(d * sm.sc);
    const m1 = f(min * sm.m);
    scaleMinK4(is + 1, b, sc, sm);
    const d2 = f(d * sm.sc);
    const m2 = f(min * sm.m);
    // d1 · code is exact in float32 (≤ 21 significant bits): one rounding, with or without FMA
    for (let l = 0; l < 32; l++) y[out++] = f(d1 * (b[q + l]! & 0xf) - m1);
    for (let l = 0; l < 32; l++) y[out++] = f(d2 * (b[q + l]! >> 4) - m2);
    q += 32;
  }
}

// --- Q6_K ------------------------------------------------------------------------------------

/**
 * make_qx_quants with rmse_type 1: writes nmax + code (0..2·nmax−1) to L[lo..lo+n) and returns
 * the scale. The weights are `qw[qwo..qwo+n)` (an importance matrix's), or x² without them.
 */
export function makeQxQuants(
  n: number,
  nmax: number,
  x: Float32Array,
  xo: number,
  L: Int8Array | Uint8Array,
  lo: number,
  qw: Float32Array | null = null,
  qwo = 0,
): number {
  const max = signedAbsMax(x, xo, n);
  if (Math.abs(max) < GROUP_MAX_EPS) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  let iscale = f(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(f(iscale * xi))));
    L[lo + i] = l + nmax;
    const w = qw !== null ? qw[qwo + i]! : f(xi * xi);
    sumlx = f(sumlx + f(f(w * xi) * l));
    suml2 = f(suml2 + f(f(w * l) * l));
  }
  let scale = suml2 !== 0 ? f(sumlx / suml2) : 0;
  let best = f(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = f(-f(nmax + f(RDELTA * is)) / max);
    sumlx = 0;
    suml2 = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[xo + i]!;
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(f(iscale * xi))));
      const w = qw !== null ? qw[qwo + i]! : f(xi * xi);
      sumlx = f(sumlx + f(f(w * xi) * l));
      suml2 = f(suml2 + f(f(w * l) * l));
    }
    if (suml2 > 0 && f(sumlx * sumlx) > f(best * suml2)) {
      for (let i = 0; i < n; i++) {
        const l = nearestInt(f(iscale * x[xo + i]!));
        L[lo + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, l));
      }
      scale = f(sumlx / suml2);
      best = f(scale * sumlx);
    }
  }
  return scale;
}

const q6k = { L: new Int8Array(QK_K), scales: new Float32Array(16) };

export function quantizeQ6_K(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  quantizeQ6_KWeighted(x, xo, null, 0, out, oo);
}

/**
 * quantize_row_q6_K_impl for one super-block: with an importance matrix's weights `qw[qwo..)` the
 * sub-block fits weigh each value by them; without (null), by x² as the reference quantizer does.
 */
export function quantizeQ6_KWeighted(
  x: Float32Array,
  xo: number,
  qw: Float32Array | null,
  qwo: number,
  out: Uint8Array,
  oo: number,
): void {
  const { L, scales } = q6k;
  let maxScale = 0;
  let maxAbsScale = 0;
  for (let ib = 0; ib < QK_K / 16; ib++) {
    const scale = makeQxQuants(16, 32, x, xo + 16 * ib, L, 16 * ib, qw, qwo + 16 * ib);
    scales[ib] = scale;
    const abs = Math.abs(scale);
    if (abs > maxAbsScale) {
      maxAbsScale = abs;
      maxScale = scale;
    }
  }
  if (maxAbsScale < GROUP_MAX_EPS) {
    out.fill(0, oo, oo + 210); // memset the block; d = fp16(0) = 0
    return;
  }
  const iscale = f(-128 / maxScale);
  const dBits = fp16Bits(f(1 / iscale));
  const sc = oo + 192; // int8 scales[16], then d
  for (let ib = 0; ib < QK_K / 16; ib++) {
    out[sc + ib] = Math.min(127, nearestInt(f(iscale * scales[ib]!))) & 0xff;
  }
  putU16(out, oo + 208, dBits);
  const dAll = fp16Value(dBits);
  for (let j = 0; j < QK_K / 16; j++) {
    const d = f(dAll * int8(out[sc + j]!));
    if (d === 0) continue;
    for (let ii = 0; ii < 16; ii++) {
      const l = nearestInt(f(x[xo + 16 * j + ii]! / d));
      L[16 * j + ii] = Math.max(-32, Math.min(31, l)) + 32;
    }
  }
  for (let half = 0; half < 2; half++) {
    const j = 128 * half;
    const ql = oo + 64 * half;
    const qh = oo + 128 + 32 * half;
    for (let l = 0; l < 32; l++) {
      const a = L[j + l]!;
      const b = L[j + l + 32]!;
      const c = L[j + l + 64]!;
      const e = L[j + l + 96]!;
      out[ql + l] = (a & 0xf) | ((c & 0xf) << 4);
      out[ql + l + 32] = (b & 0xf) | ((e & 0xf) << 4);
      out[qh + l] = ((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6)) & 0xff;
    }
  }
}

export function dequantizeQ6_K(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo + 208));
  for (let half = 0; half < 2; half++) {
    const ql = bo + 64 * half;
    const qh = bo + 128 + 32 * half;
    const sc = bo + 192 + 8 * half;
    const out = yo + 128 * half;
    for (let l = 0; l < 32; l++) {
      const is = l >> 4;
      const a = b[ql + l]!;
      const c = b[ql + l + 32]!;
      const h = b[qh + l]!;
      const q1 = ((a & 0xf) | ((h & 3) << 4)) - 32;
      const q2 = ((c & 0xf) | (((h >> 2) & 3) << 4)) - 32;
      const q3 = ((a >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const q4 = ((c >> 4) | (((h >> 6) & 3) << 4)) - 32;
      y[out + l] = f(f(d * int8(b[sc + is]!)) * q1);
      y[out + l + 32] = f(f(d * int8(b[sc + is + 2]!)) * q2);
      y[out + l + 64] = f(f(d * int8(b[sc + is + 4]!)) * q3);
      y[out + l + 96] = f(f(d * int8(b[sc + is + 6]!)) * q4);
    }
  }
}
