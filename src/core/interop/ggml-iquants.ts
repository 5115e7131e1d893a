/**
 * ggml's 4-bit non-linear quants IQ4_NL (blocks of 32) and IQ4_XS (super-blocks of QK_K = 256),
 * byte-exact with what `llama-quantize` writes without an importance matrix: ggml-quants.c's
 * `quantize_iq4_nl` / `quantize_iq4_xs` with no quant_weights (both run quantize_row_iq4_nl_impl
 * with ntry 7), and `dequantize_row_iq4_nl` / `dequantize_row_iq4_xs`. IQ4_XS's
 * `quantize_row_iq4_xs_ref` is that same call. IQ4_NL's `quantize_row_iq4_nl_ref` is not: it runs
 * the impl with ntry −1 (no search, codes from the first scale), a faster path ggml keeps for
 * `from_float_ref`; llama-quantize never uses it, so quantd does not either.
 *
 * With an importance matrix (quantizeIQ4_NLWeighted / quantizeIQ4_XSWeighted, what llama-quantize
 * runs with --imatrix) the same impl weighs the search by qw·sqrt(σ² + x²) instead of x².
 *
 * A code is an index into ggml's 16-entry table kvalues_iq4nl (a non-uniform grid from −127 to
 * 113) and a value is scale · table[code]. The code of x/scale is the table's nearest entry
 * (`best_index_int8`: a midpoint tie goes to the upper entry).
 *
 * Scale search per 32 values (weights w = x², as the impl uses when quant_weights is NULL):
 * the first scale maps the value of largest magnitude, `max`, onto table[0] = −127 (d = max/127);
 * its least-squares refit d = Σw·q·x / Σw·q² is the starting point, then 15 trial reciprocals
 * (itry − 127)/max, itry = −7..7, each refitted and kept when Σ(w·q·x)² / Σw·q² grows
 * (compared as sumqx² > best·sumq2). A group with |max| < GROUP_MAX_EPS gets scale 0.
 *
 * IQ4_NL layout: d:f16 (the scale), qs:u8[16] (low nibbles the first 16 codes, high nibbles the
 * last 16); the codes are recomputed from the float32 reciprocal of the unrounded scale.
 * IQ4_XS layout: d:f16, scales_h:u16, scales_l:u8[4], qs:u8[128]. The 8 sub-block scales are
 * quantized to 6 bits against d = −max_scale/32 (max_scale the scale of largest magnitude):
 * l = clamp(nearest_int(scale/d), −32, 31) + 32, low 4 bits in scales_l (two per byte, even
 * sub-block low), high 2 bits in scales_h (2·ib); each sub-block's codes are recomputed from the
 * float32 reciprocal of d·(l − 32) with the unrounded d; qs as IQ4_NL's, 16 bytes per sub-block.
 *
 * All arithmetic is float32, one rounding per C operation in C's order, no fused multiply-add.
 */
import {
  GROUP_MAX_EPS,
  fp16Bits,
  fp16Value,
  getU16,
  matrixWeights,
  putU16,
  signedAbsMax,
  sumSquares,
} from './ggml-common.js';
import { QK_K, nearestInt } from './ggml-kquants.js';

const f = Math.fround; // local on purpose, see ggml-common.ts

/** kvalues_iq4nl of ggml-common.h. */
export const IQ4NL_VALUES: readonly number[] = [
  -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];
const K = Int8Array.from(IQ4NL_VALUES);
/** ntry of quantize_iq4_nl / quantize_iq4_xs. */
const NTRY = 7;

/**
 * best_index_int8 over the table: the index of the nearest entry to the float32 `x`. A binary
 * search brackets x between two entries, then `x − lo < hi − x` (float32 subtractions) picks the
 * lower one, so a tie goes up. NaN fails every comparison and ends on the last entry (15).
 */
function bestIndex(x: number): number {
  if (x <= K[0]!) return 0;
  if (x >= K[15]!) return 15;
  let ml = 0;
  let mu = 15;
  while (mu - ml > 1) {
    const mav = (ml + mu) >> 1;
    if (x < K[mav]!) mu = mav;
    else ml = mav;
  }
  return f(x - K[mu - 1]!) < f(K[mu]! - x) ? mu - 1 : mu;
}

/**
 * The scale search of quantize_row_iq4_nl_impl for the 32 values at x[xo] (ntry 7), weighted by
 * `w` (an importance matrix's weights for these 32 values) or, without one, by x². The impl also
 * stores the codes of its first trial, but every caller recomputes them from the final scale, so
 * they are not kept here.
 */
function searchScale(x: Float32Array, xo: number, w: Float32Array | null = null): number {
  const max = signedAbsMax(x, xo, 32);
  if (Math.abs(max) < GROUP_MAX_EPS) return 0;
  let d = f(-max / K[0]!);
  let id = f(1 / d);
  let sumqx = 0;
  let sumq2 = 0;
  for (let j = 0; j < 32; j++) {
    const xj = x[xo + j]!;
    const q = K[bestIndex(f(id * xj))]!;
    const wq = f((w === null ? f(xj * xj) : w[j]!) * q);
    sumqx = f(sumqx + f(wq * xj));
    sumq2 = f(sumq2 + f(wq * q));
  }
  d = sumq2 > 0 ? f(sumqx / sumq2) : 0;
  let best = f(d * sumqx);
  for (let itry = -NTRY; itry <= NTRY; itry++) {
    id = f((itry + K[0]!) / max);
    sumqx = 0;
    sumq2 = 0;
    for (let j = 0; j < 32; j++) {
      const xj = x[xo + j]!;
      const q = K[bestIndex(f(id * xj))]!;
      const wq = f((w === null ? f(xj * xj) : w[j]!) * q);
      sumqx = f(sumqx + f(wq * xj));
      sumq2 = f(sumq2 + f(wq * q));
    }
    if (sumq2 > 0 && f(sumqx * sumqx) > f(best * sumq2)) {
      d = f(sumqx / sumq2);
      best = f(d * sumqx);
    }
  }
  return d;
}

/** The 32 codes of x[xo..] for the reciprocal `id`, packed as 16 bytes at out[qo]. */
function packCodes(x: Float32Array, xo: number, id: number, out: Uint8Array, qo: number): void {
  for (let j = 0; j < 16; j++) {
    out[qo + j] = bestIndex(f(id * x[xo + j]!)) | (bestIndex(f(id * x[xo + 16 + j]!)) << 4);
  }
}

// --- IQ4_NL ----------------------------------------------------------------------------------

/** An importance matrix's weights for a group of 32 (matrixWeights). */
const weights32 = new Float32Array(32);

/** quantize_row_iq4_nl_impl's σ²: Σx² of the super-block, times 2.f/size. */
const sigma2Of = (x: Float32Array, xo: number, size: number): number =>
  f(sumSquares(x, xo, size) * f(2 / size));

export function quantizeIQ4_NL(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  quantizeIQ4_NLWeighted(x, xo, null, 0, out, oo);
}

/** IQ4_NL with an importance matrix's weights qw[qwo..qwo+32) (null: without one). */
export function quantizeIQ4_NLWeighted(
  x: Float32Array,
  xo: number,
  qw: Float32Array | null,
  qwo: number,
  out: Uint8Array,
  oo: number,
): void {
  if (qw !== null) matrixWeights(x, xo, qw, qwo, sigma2Of(x, xo, 32), 32, weights32);
  const w = qw === null ? null : weights32;
  const d = searchScale(x, xo, w);
  putU16(out, oo, fp16Bits(d));
  // `scale ? 1/scale : 0` in C: NaN is true there, so compare with 0 rather than test truthiness
  packCodes(x, xo, d !== 0 ? f(1 / d) : 0, out, oo + 2);
}

export function dequantizeIQ4_NL(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  for (let j = 0; j < 16; j++) {
    const q = b[bo + 2 + j]!;
    y[yo + j] = f(d * K[q & 0xf]!);
    y[yo + 16 + j] = f(d * K[q >> 4]!);
  }
}

// --- IQ4_XS ----------------------------------------------------------------------------------

const scalesXs = new Float32Array(QK_K / 32);

export function quantizeIQ4_XS(x: Float32Array, xo: number, out: Uint8Array, oo: number): void {
  quantizeIQ4_XSWeighted(x, xo, null, 0, out, oo);
}

/** IQ4_XS with an importance matrix's weights qw[qwo..qwo+256) (null: without one). */
export function quantizeIQ4_XSWeighted(
  x: Float32Array,
  xo: number,
  qw: Float32Array | null,
  qwo: number,
  out: Uint8Array,
  oo: number,
): void {
  const sigma2 = qw === null ? 0 : sigma2Of(x, xo, QK_K);
  let maxScale = 0;
  let amaxScale = 0;
  for (let ib = 0; ib < QK_K / 32; ib++) {
    if (qw !== null) matrixWeights(x, xo + 32 * ib, qw, qwo + 32 * ib, sigma2, 32, weights32);
    const w = qw === null ? null : weights32;
    const d = searchScale(x, xo + 32 * ib, w);
    scalesXs[ib] = d;
    if (Math.abs(d) > amaxScale) {
      amaxScale = Math.abs(d);
      maxScale = d;
    }
  }
  const d = f(-maxScale / 32); // −0 when every scale is 0: d is stored as 0x8000
  putU16(out, oo, fp16Bits(d));
  const id = d !== 0 ? f(1 / d) : 0;
  let scalesH = 0;
  for (let ib = 0; ib < QK_K / 32; ib++) {
    const l = Math.max(-32, Math.min(31, nearestInt(f(id * scalesXs[ib]!))));
    const dl = f(d * l);
    packCodes(x, xo + 32 * ib, dl !== 0 ? f(1 / dl) : 0, out, oo + 8 + 16 * ib);
    const u = l + 32;
    if (ib % 2 === 0) out[oo + 4 + (ib >> 1)] = u & 0xf;
    else out[oo + 4 + (ib >> 1)]! |= (u & 0xf) << 4;
    scalesH |= (u >> 4) << (2 * ib);
  }
  putU16(out, oo + 2, scalesH);
}

export function dequantizeIQ4_XS(b: Uint8Array, bo: number, y: Float32Array, yo: number): void {
  const d = fp16Value(getU16(b, bo));
  const scalesH = getU16(b, bo + 2);
  for (let ib = 0; ib < QK_K / 32; ib++) {
    const ls = ((b[bo + 4 + (ib >> 1)]! >> (4 * (ib % 2))) & 0xf) | (((scalesH >> (2 * ib)) & 3) << 4);
    const dl = f(d * (ls - 32));
    const q = bo + 8 + 16 * ib;
    const o = yo + 32 * ib;
    for (let j = 0; j < 16; j++) {
      y[o + j] = f(dl * K[b[q + j]! & 0xf]!);
      y[o + 16 + j] = f(dl * K[b[q + j]! >> 4]!);
    }
  }
}
