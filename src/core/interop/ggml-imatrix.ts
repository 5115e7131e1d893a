/**
 * ggml's quantizers with an importance matrix — the `quant_weights` paths of ggml-quants.c
 * (`quantize_row_*_impl`), what llama-quantize runs when given `--imatrix`. The matrix gives
 * one weight per column of a tensor (the mean squared activation that column multiplies);
 * every row of the tensor is quantized against the same weights. Byte-exact with llama.cpp:
 * test/gguf-mix/ compares whole models with node-llama-cpp's libllama.
 *
 * What changes against the reference quantizers:
 *   Q4_0, Q5_0   make_qx_quants (rmse_type 1) weighted by qw·sqrt(σ² + x²), σ² = Σx²/n over
 *                the ROW; the code is the search's, the scale its least-squares fit
 *   Q4_1, Q5_1   make_qkx3_quants (rmin −0.9, rdelta 0.05, 36 steps) with the same weights
 *   Q4_K, Q5_K   per super-block σ² = 2Σx²/256; the eight sub-block fits as Q4_1's (Q5_1's),
 *                then the eight scales and eight mins are themselves fitted to 6 bits by
 *                make_qp_quants, weighted by each sub-block's weight sum
 *   Q6_K         make_qx_quants weighted by qw itself
 *   Q2_K         per super-block σ² = Σx²/256; sub-blocks of 16 fitted as Q4_1's (nmax 3), the
 *                16 scales and mins to 4 bits by make_qp_quants
 *   Q3_K         per super-block σ² = 2Σx²/256; sub-blocks of 16 by make_qx_quants (nmax 4), the
 *                16 scales by make_qx_quants (nmax 32) weighted by the sub-blocks' weight sums
 *   IQ4_NL/XS    quantize_row_iq4_nl_impl's search weighted by qw·sqrt(σ² + x²), σ² = 2Σx²/32
 *                per block (IQ4_NL), 2Σx²/256 per super-block (IQ4_XS)
 *   Q8_0         ignores the matrix
 * Float32 throughout, one rounding per C operation, in C's order (see ggml-common.ts).
 */
import { QuantdError } from '../../errors/index.js';
import { ggmlRowBytes, ggmlTypeByName } from './ggml.js';
import { GROUP_MAX_EPS, fp16Bits, matrixWeights, putU16, putU32, sumSquares } from './ggml-common.js';
import {
  QK_K,
  makeQkx2Quants,
  makeQxQuants,
  nearestInt,
  packQ4_KCodes,
  packQ5_KCodes,
  putScaleMinK4,
  quantizeQ6_KWeighted,
} from './ggml-kquants.js';
import { finishQ2_K, finishQ3_K } from './ggml-kquants-low.js';
import { quantizeIQ4_NLWeighted, quantizeIQ4_XSWeighted } from './ggml-iquants.js';
import { quantizeQ8_0 } from './ggml-legacy.js';

const f = Math.fround; // local on purpose, see ggml-common.ts

const q2kScratch = {
  L: new Uint8Array(QK_K),
  laux: new Uint8Array(16),
  weight: new Float32Array(16),
  sw: new Float32Array(QK_K / 16),
  scales: new Float32Array(QK_K / 16),
  mins: new Float32Array(QK_K / 16),
  ls: new Uint8Array(QK_K / 16),
  lm: new Uint8Array(QK_K / 16),
  result: { min: 0 },
};

const q3kScratch = {
  L: new Int8Array(QK_K),
  weight: new Float32Array(16),
  sw: new Float32Array(QK_K / 16),
  scales: new Float32Array(QK_K / 16),
  ls: new Int8Array(QK_K / 16),
};

const RMIN = f(-0.9);
const RDELTA = f(0.05);
const QK = 32;

/**
 * Quantizes one row of `n` values at x[xo..) with the importance weights qw[0..n) into out[oo..);
 * the row holds whole blocks of the type.
 */
export type WeightedRowQuantizer = (
  x: Float32Array,
  xo: number,
  n: number,
  qw: Float32Array,
  out: Uint8Array,
  oo: number,
) => void;

const scratch = {
  weight: new Float32Array(QK),
  L: new Uint8Array(QK_K),
  laux: new Uint8Array(QK),
  ls: new Uint8Array(QK_K / 32),
  lm: new Uint8Array(QK_K / 32),
  sw: new Float32Array(QK_K / 32),
  scales: new Float32Array(QK_K / 32),
  mins: new Float32Array(QK_K / 32),
  result: { min: 0 },
};

/**
 * A 32-block's codes as Q4_x / Q5_x store them: element j in the low nibble of qs[j], element
 * j+16 in its high nibble; for 5 bits (qh ≥ 0) the fifth bits in the u32 at qh, bit j per element.
 */
function packLegacyCodes(L: Uint8Array, out: Uint8Array, qs: number, qh: number): void {
  let high = 0;
  for (let j = 0; j < 16; j++) {
    out[qs + j] = (L[j]! & 0xf) | ((L[j + 16]! & 0xf) << 4);
    high |= ((L[j]! >> 4) & 1) << j;
    high |= ((L[j + 16]! >> 4) & 1) << (j + 16);
  }
  if (qh >= 0) putU32(out, qh, high >>> 0);
}

/** Q4_0 (nmax 8, 4 bits) and Q5_0 (nmax 16, 5 bits): symmetric fits, codes 0..2·nmax−1. */
function symmetricRow(bits: 4 | 5): WeightedRowQuantizer {
  const nmax = bits === 4 ? 8 : 16;
  const size = bits === 4 ? 18 : 22;
  return (x, xo, n, qw, out, oo) => {
    const sigma2 = f(sumSquares(x, xo, n) / n);
    const { L } = scratch;
    for (let ib = 0; ib < n / QK; ib++) {
      const { weight } = scratch;
      matrixWeights(x, xo + QK * ib, qw, QK * ib, sigma2, QK, weight);
      const d = makeQxQuants(QK, nmax, x, xo + QK * ib, L, 0, weight, 0);
      const o = oo + size * ib;
      putU16(out, o, fp16Bits(d));
      packLegacyCodes(L, out, o + (bits === 4 ? 2 : 6), bits === 5 ? o + 2 : -1);
    }
  };
}

/** Q4_1 (nmax 15) and Q5_1 (nmax 31): affine fits by make_qkx3_quants. */
function affineRow(bits: 4 | 5): WeightedRowQuantizer {
  const nmax = bits === 4 ? 15 : 31;
  const size = bits === 4 ? 20 : 24;
  return (x, xo, n, qw, out, oo) => {
    const sigma2 = f(sumSquares(x, xo, n) / n);
    const { L, laux, result } = scratch;
    for (let ib = 0; ib < n / QK; ib++) {
      const { weight } = scratch;
      matrixWeights(x, xo + QK * ib, qw, QK * ib, sigma2, QK, weight);
      const d = makeQkx2Quants(
        QK,
        nmax,
        x,
        xo + QK * ib,
        weight,
        L,
        0,
        laux,
        RMIN,
        RDELTA,
        36,
        false,
        result,
      );
      const o = oo + size * ib;
      putU16(out, o, fp16Bits(d));
      putU16(out, o + 2, fp16Bits(-result.min));
      packLegacyCodes(L, out, o + (bits === 4 ? 4 : 8), bits === 5 ? o + 4 : -1);
    }
  };
}

/**
 * make_qp_quants: fits n non-negative values (a super-block's sub-block scales or mins) to codes
 * 0..nmax against one scale, weighted by qw; writes the codes to L and returns the scale.
 */
function makeQpQuants(n: number, nmax: number, x: Float32Array, L: Uint8Array, qw: Float32Array): number {
  let max = 0;
  for (let i = 0; i < n; i++) max = max > x[i]! ? max : x[i]!;
  if (max < GROUP_MAX_EPS) {
    L.fill(0, 0, n);
    return 0;
  }
  let iscale = f(nmax / max);
  for (let i = 0; i < n; i++) L[i] = nearestInt(f(iscale * x[i]!)) & 0xff;
  const scale = f(1 / iscale);
  let bestMse = 0;
  for (let i = 0; i < n; i++) {
    const diff = f(x[i]! - f(scale * L[i]!));
    bestMse = f(bestMse + f(f(qw[i]! * diff) * diff));
  }
  for (let is = -4; is <= 4; is++) {
    if (is === 0) continue;
    const iscaleIs = f(f(f(f(0.1) * is) + nmax) / max);
    const scaleIs = f(1 / iscaleIs);
    let mse = 0;
    for (let i = 0; i < n; i++) {
      const l = Math.min(nmax, nearestInt(f(iscaleIs * x[i]!)));
      const diff = f(x[i]! - f(scaleIs * l));
      mse = f(mse + f(f(qw[i]! * diff) * diff));
    }
    if (mse < bestMse) {
      bestMse = mse;
      iscale = iscaleIs;
    }
  }
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const l = Math.min(nmax, nearestInt(f(iscale * x[i]!)));
    L[i] = l & 0xff;
    const w = qw[i]!;
    sumlx = f(sumlx + f(f(w * x[i]!) * l));
    suml2 = f(suml2 + f(f(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const w = qw[i]!;
      const li = L[i]!;
      let slx = f(sumlx - f(f(w * x[i]!) * li));
      let sl2 = f(suml2 - f(f(w * li) * li));
      if (slx > 0 && sl2 > 0) {
        const newL = Math.min(nmax, nearestInt(f(f(x[i]! * sl2) / slx)));
        if (newL !== li) {
          slx = f(slx + f(f(w * x[i]!) * newL));
          sl2 = f(sl2 + f(f(w * newL) * newL));
          if (f(f(slx * slx) * suml2) > f(f(sumlx * sumlx) * sl2)) {
            L[i] = newL & 0xff;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (changed === 0) break;
  }
  return suml2 > 0 ? f(sumlx / suml2) : 0;
}

/**
 * quantize_row_q4_K_impl (nmax 15) and quantize_row_q5_K_impl (nmax 31): one row of super-blocks
 * of 256; the codes are packed as the reference quantizers pack them.
 */
function affineKRow(nmax: 15 | 31): WeightedRowQuantizer {
  const size = nmax === 15 ? 144 : 176;
  const pack = nmax === 15 ? packQ4_KCodes : packQ5_KCodes;
  return (x, xo, n, qw, out, oo) => {
    const { L, laux, ls, lm, sw, scales, mins, result, weight: weights } = scratch;
    for (let i = 0; i < n / QK_K; i++) {
      const xb = xo + QK_K * i;
      const sigma2 = f(f(2 * sumSquares(x, xb, QK_K)) / QK_K);
      for (let j = 0; j < QK_K / 32; j++) {
        const base = xb + 32 * j;
        sw[j] = matrixWeights(x, base, qw, QK_K * i + 32 * j, sigma2, 32, weights);
        scales[j] = makeQkx2Quants(
          32,
          nmax,
          x,
          base,
          weights,
          L,
          32 * j,
          laux,
          RMIN,
          RDELTA,
          36,
          false,
          result,
        );
        mins[j] = result.min;
      }
      const dBlock = makeQpQuants(QK_K / 32, 63, scales, ls, sw);
      const mBlock = makeQpQuants(QK_K / 32, 63, mins, lm, sw);
      const o = oo + size * i;
      for (let j = 0; j < QK_K / 32; j++)
        putScaleMinK4(j, Math.min(63, ls[j]!), Math.min(63, lm[j]!), out, o + 4);
      putU16(out, o, fp16Bits(dBlock));
      putU16(out, o + 2, fp16Bits(mBlock));
      pack(x, xb, out, o, L);
    }
  };
}

/**
 * quantize_row_q2_K_impl: per super-block σ² = Σx²/256; each sub-block of 16 fitted by
 * make_qkx3_quants (nmax 3, rmin −0.9, rdelta 0.05, 36 steps, squared error) with weights
 * qw·sqrt(σ² + x²); the 16 scales and 16 mins fitted to 4 bits by make_qp_quants, weighted by
 * each sub-block's weight sum; then the codes against the rounded scales, as the reference's.
 */
const q2KRow: WeightedRowQuantizer = (x, xo, n, qw, out, oo) => {
  const { L, laux, sw, scales, mins, ls, lm, result, weight } = q2kScratch;
  for (let i = 0; i < n / QK_K; i++) {
    const xb = xo + QK_K * i;
    const sigma2 = f(sumSquares(x, xb, QK_K) / QK_K);
    for (let j = 0; j < QK_K / 16; j++) {
      const base = xb + 16 * j;
      sw[j] = matrixWeights(x, base, qw, QK_K * i + 16 * j, sigma2, 16, weight);
      scales[j] = makeQkx2Quants(16, 3, x, base, weight, L, 16 * j, laux, RMIN, RDELTA, 36, false, result);
      mins[j] = result.min;
    }
    const dBlock = makeQpQuants(QK_K / 16, 15, scales, ls, sw);
    const mBlock = makeQpQuants(QK_K / 16, 15, mins, lm, sw);
    const o = oo + 84 * i;
    putU16(out, o + 80, fp16Bits(dBlock));
    putU16(out, o + 82, fp16Bits(mBlock));
    for (let j = 0; j < QK_K / 16; j++) out[o + j] = ls[j]! | (lm[j]! << 4);
    finishQ2_K(x, xb, L, out, o);
  }
};

/**
 * quantize_row_q3_K_impl: per super-block σ² = 2Σx²/256; each sub-block of 16 fitted by
 * make_qx_quants (nmax 4, rmse_type 1) with weights qw·sqrt(σ² + x²); the 16 scales fitted by
 * make_qx_quants (nmax 32) weighted by each sub-block's weight sum and stored as its codes; then
 * the codes against the rounded scales, as the reference's.
 */
const q3KRow: WeightedRowQuantizer = (x, xo, n, qw, out, oo) => {
  const { L, sw, scales, ls, weight } = q3kScratch;
  for (let i = 0; i < n / QK_K; i++) {
    const xb = xo + QK_K * i;
    const sigma2 = f(f(2 * sumSquares(x, xb, QK_K)) / QK_K);
    for (let j = 0; j < QK_K / 16; j++) {
      const base = xb + 16 * j;
      sw[j] = matrixWeights(x, base, qw, QK_K * i + 16 * j, sigma2, 16, weight);
      scales[j] = makeQxQuants(16, 4, x, base, L, 16 * j, weight, 0);
    }
    const o = oo + 110 * i;
    const dBlock = makeQxQuants(QK_K / 16, 32, scales, 0, ls, 0, sw, 0);
    const sc = o + 96;
    out.fill(0, sc, sc + 12);
    for (let j = 0; j < QK_K / 16; j++) {
      const l = ls[j]!; // 0..63: the scale's code + 32
      if (j < 8) out[sc + j] = l & 0xf;
      else out[sc + j - 8]! |= (l & 0xf) << 4;
      out[sc + 8 + (j % 4)]! |= (l >> 4) << (2 * Math.trunc(j / 4));
    }
    putU16(out, o + 108, fp16Bits(dBlock));
    finishQ3_K(x, xb, L, out, o);
  }
};

const iq4NLRow: WeightedRowQuantizer = (x, xo, n, qw, out, oo) => {
  for (let i = 0; i < n / QK; i++) quantizeIQ4_NLWeighted(x, xo + QK * i, qw, QK * i, out, oo + 18 * i);
};

const iq4XSRow: WeightedRowQuantizer = (x, xo, n, qw, out, oo) => {
  for (let i = 0; i < n / QK_K; i++)
    quantizeIQ4_XSWeighted(x, xo + QK_K * i, qw, QK_K * i, out, oo + 136 * i);
};

const q6KRow: WeightedRowQuantizer = (x, xo, n, qw, out, oo) => {
  for (let i = 0; i < n / QK_K; i++) quantizeQ6_KWeighted(x, xo + QK_K * i, qw, QK_K * i, out, oo + 210 * i);
};

const q8_0Row: WeightedRowQuantizer = (x, xo, n, _qw, out, oo) => {
  for (let i = 0; i < n / QK; i++) quantizeQ8_0(x, xo + QK * i, out, oo + 34 * i);
};

/** The types quantd quantizes with an importance matrix, by ggml name. */
export const WEIGHTED_QUANTIZERS: Readonly<Record<string, WeightedRowQuantizer>> = {
  Q4_0: symmetricRow(4),
  Q5_0: symmetricRow(5),
  Q4_1: affineRow(4),
  Q5_1: affineRow(5),
  Q4_K: affineKRow(15),
  Q5_K: affineKRow(31),
  Q6_K: q6KRow,
  Q8_0: q8_0Row,
  Q2_K: q2KRow,
  Q3_K: q3KRow,
  IQ4_NL: iq4NLRow,
  IQ4_XS: iq4XSRow,
};

/** Whether quantd quantizes `type` with an importance matrix. */
export const takesImatrix = (type: string): boolean => Object.hasOwn(WEIGHTED_QUANTIZERS, type);

/**
 * Whether the matrix changes `type`'s bytes: ggml's quantize_q8_0 takes quant_weights and
 * discards them (`(void)quant_weights; // not used`), every other type here has a weighted path.
 */
export const usesImatrix = (type: string): boolean => takesImatrix(type) && type !== 'Q8_0';

/**
 * ggmlEncode with an importance matrix: rows of `ne0` values, each against the same weights
 * `qw` (one per column).
 */
export function ggmlEncodeWeighted(type: string, x: Float32Array, ne0: number, qw: Float32Array): Uint8Array {
  const quantize = WEIGHTED_QUANTIZERS[type];
  const t = ggmlTypeByName(type);
  if (quantize === undefined || t === undefined || qw.length !== ne0) {
    throw new QuantdError('INTERNAL', {
      detail: `no ${type} quantizer for an importance matrix of ${qw.length}`,
    });
  }
  const rowBytes = ggmlRowBytes(t, ne0);
  const rows = x.length / ne0;
  const out = new Uint8Array(rows * rowBytes);
  for (let r = 0; r < rows; r++) quantize(x, r * ne0, ne0, qw, out, r * rowBytes);
  return out;
}
