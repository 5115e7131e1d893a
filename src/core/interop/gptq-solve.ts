/**
 * The GPTQ algorithm (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for
 * Generative Pre-trained Transformers"): quantize a linear layer's weight W [out, in] column by
 * column, each column's rounding error fed back into the columns not yet quantized through the
 * inverse Hessian of the layer's inputs, H = XᵀX / n, so that the layer's OUTPUT X·Wᵀ moves as
 * little as possible (round-to-nearest only keeps each weight close).
 *
 *   dead inputs (H[i][i] = 0): H[i][i] = 1, W[:, i] = 0
 *   act_order: columns in order of decreasing H[i][i] (ties by index)
 *   H += damp · mean(diag H) · I;  U = upper Cholesky factor of H⁻¹ (H⁻¹ = UᵀU)
 *   for each column j (in blocks of `blockSize`, the lazy batch update):
 *     at a group start, the group's scale and zero from W as it stood when the column's block
 *     began (AutoGPTQ's find_params reads W, while the block's own updates go to a copy until
 *     the block ends); without groups, once from all of W before the loop
 *     q = clamp(round(w / scale) + zero, 0, maxq);   err = (w - scale·(q - zero)) / U[j][j]
 *     W[:, k] -= err · U[j][k] for the later columns k
 *
 * Every step in float64; the scales reach the GPTQ packer (gptq.ts) as float32. With act_order
 * and groups, groups are runs of the permuted order (AutoGPTQ's desc_act): g_idx maps each input
 * column to its group and is not monotonic.
 */
import { QuantdError } from '../../errors/index.js';
import { rint } from '../rounding.js';
import type { GptqBits } from './gptq.js';

export interface GptqSolveOptions {
  readonly bits: GptqBits;
  /** input columns per group; -1 for one group over all columns */
  readonly groupSize: number;
  readonly sym: boolean;
  /** damp_percent: the fraction of mean(diag H) added to the diagonal (AutoGPTQ's default 0.01) */
  readonly damp: number;
  /** columns per lazy batch update (128, as the paper) */
  readonly blockSize: number;
  /** desc_act: quantize columns in order of decreasing Hessian diagonal */
  readonly actOrder: boolean;
}

export const GPTQ_SOLVE_DEFAULTS = { damp: 0.01, blockSize: 128, actOrder: false } as const;

/**
 * GPTQ's two costly steps done elsewhere (the C kernels, native/src/gptq_solve.c) with every sum
 * in this file's order, so the result is the same to the bit.
 */
export interface GptqSolveKernel {
  /** U (n×n, H⁻¹ = UᵀU) from the damped Hessian h; -1, or the column where a factor failed. */
  inverseCholesky(h: Float64Array, n: number, u: Float64Array): number;
  /** solveColumns, below. */
  columns(
    wp: Float64Array,
    out: number,
    n: number,
    u: Float64Array,
    p: ColumnParams,
    codes: Uint8Array,
    scale: Float64Array,
    zero: Float64Array,
  ): void;
}

/** How the columns are quantized: bits' maxq, groups, symmetry, the lazy batch's width. */
export interface ColumnParams {
  readonly maxq: number;
  readonly groupSize: number;
  readonly grouped: boolean;
  readonly sym: boolean;
  readonly blockSize: number;
}

export interface GptqSolution {
  /** integer codes in [0, 2^bits - 1], [out, in] row-major, in the weight's own column order */
  readonly codes: Uint8Array;
  /** per group and output row, [groups, out]: float64 scale and zero point */
  readonly scale: Float64Array;
  readonly zero: Float64Array;
  /** the group of each input column */
  readonly gIdx: Int32Array;
  readonly groups: number;
}

/** AutoGPTQ's Quantizer.find_params for one row's values (perchannel, weight). */
function findParams(values: ArrayLike<number>, maxq: number, sym: boolean): [number, number] {
  let lo = 0;
  let hi = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (sym) {
    hi = Math.max(Math.abs(lo), hi);
    if (lo < 0) lo = -hi;
  }
  if (lo === 0 && hi === 0) {
    lo = -1;
    hi = 1;
  }
  const scale = (hi - lo) / maxq;
  const zero = sym ? (maxq + 1) / 2 : rint(-lo / scale);
  return [scale, zero];
}

function notPositiveDefinite(tensor: string, column: number): QuantdError {
  return new QuantdError('FEATURE_UNSUPPORTED', {
    detail: `tensor ${tensor}: its input Hessian is not positive definite after damping (column ${column}); use more calibration data or a larger damp`,
  });
}

/** In place: `a` (n×n, symmetric positive definite) → its lower Cholesky factor L (a = LLᵀ). */
function cholesky(tensor: string, a: Float64Array, n: number): void {
  for (let j = 0; j < n; j++) {
    let d = a[j * n + j]!;
    for (let k = 0; k < j; k++) {
      const v = a[j * n + k]!;
      d -= v * v;
    }
    if (!(d > 0)) throw notPositiveDefinite(tensor, j);
    const ljj = Math.sqrt(d);
    a[j * n + j] = ljj;
    for (let i = j + 1; i < n; i++) {
      let s = a[i * n + j]!;
      for (let k = 0; k < j; k++) s -= a[i * n + k]! * a[j * n + k]!;
      a[i * n + j] = s / ljj;
    }
    for (let k = j + 1; k < n; k++) a[j * n + k] = 0;
  }
}

/** U, upper triangular with H⁻¹ = UᵀU, from H (n×n): Cholesky, inverse, Cholesky of the inverse. */
function inverseCholeskyUpper(tensor: string, h: Float64Array, n: number): Float64Array {
  const l = h.slice();
  cholesky(tensor, l, n);
  // L⁻¹ by forward substitution, then H⁻¹ = L⁻ᵀ L⁻¹
  const li = new Float64Array(n * n);
  for (let c = 0; c < n; c++) {
    for (let i = c; i < n; i++) {
      let s = i === c ? 1 : 0;
      for (let k = c; k < i; k++) s -= l[i * n + k]! * li[k * n + c]!;
      li[i * n + c] = s / l[i * n + i]!;
    }
  }
  const inv = new Float64Array(n * n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j <= i; j++) {
      let s = 0;
      for (let k = i; k < n; k++) s += li[k * n + i]! * li[k * n + j]!;
      inv[i * n + j] = s;
      inv[j * n + i] = s;
    }
  }
  cholesky(tensor, inv, n); // lower L2 with H⁻¹ = L2 L2ᵀ: U = L2ᵀ
  const u = new Float64Array(n * n);
  for (let i = 0; i < n; i++) for (let j = 0; j <= i; j++) u[j * n + i] = inv[i * n + j]!;
  return u;
}

/** Runs GPTQ on W [out, in] (float32 values) with the input Hessian H [in, in]. */
export function gptqSolve(
  tensor: string,
  w: ArrayLike<number>,
  out: number,
  inF: number,
  hessian: ArrayLike<number>,
  options: GptqSolveOptions,
  kernel?: GptqSolveKernel,
): GptqSolution {
  const { bits, sym, blockSize } = options;
  const maxq = 2 ** bits - 1;
  const groupSize = options.groupSize === -1 ? inF : options.groupSize;
  const grouped = options.groupSize !== -1;
  if (hessian.length !== inF * inF) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `tensor ${tensor}: its Hessian holds ${hessian.length} values; in_features ${inF} needs ${inF}×${inF}`,
    });
  }
  const h = Float64Array.from(hessian);
  const diag = Array.from({ length: inF }, (_, i) => h[i * inF + i]!);
  const perm = Array.from({ length: inF }, (_, i) => i);
  if (options.actOrder) perm.sort((a, b) => diag[b]! - diag[a]! || a - b);
  // W in the permuted column order (float64), dead inputs zeroed
  const wp = new Float64Array(out * inF);
  for (let r = 0; r < out; r++) {
    for (let j = 0; j < inF; j++) {
      const col = perm[j]!;
      const v = w[r * inF + col]!;
      if (!Number.isFinite(v)) {
        throw new QuantdError('INPUT_NOT_FINITE', { tensor, value: v, index: r * inF + col, op: 'GPTQ' });
      }
      wp[r * inF + j] = diag[col] === 0 ? 0 : v;
    }
  }
  const hp = new Float64Array(inF * inF);
  for (let i = 0; i < inF; i++) {
    for (let j = 0; j < inF; j++) hp[i * inF + j] = h[perm[i]! * inF + perm[j]!]!;
    if (hp[i * inF + i] === 0) hp[i * inF + i] = 1;
  }
  let mean = 0;
  for (let i = 0; i < inF; i++) mean += hp[i * inF + i]!;
  const damp = (options.damp * mean) / inF;
  for (let i = 0; i < inF; i++) hp[i * inF + i]! += damp;
  let u: Float64Array;
  if (kernel) {
    u = new Float64Array(inF * inF);
    const failed = kernel.inverseCholesky(hp, inF, u);
    if (failed >= 0) throw notPositiveDefinite(tensor, failed);
  } else {
    u = inverseCholeskyUpper(tensor, hp, inF);
  }

  const groups = Math.ceil(inF / groupSize);
  const scale = new Float64Array(groups * out);
  const zero = new Float64Array(groups * out);
  const codesP = new Uint8Array(out * inF);
  const p = { maxq, groupSize, grouped, sym, blockSize };
  if (kernel) kernel.columns(wp, out, inF, u, p, codesP, scale, zero);
  else solveColumns(wp, out, inF, u, p, codesP, scale, zero);
  const codes = new Uint8Array(out * inF);
  const gIdx = new Int32Array(inF);
  for (let j = 0; j < inF; j++) {
    const col = perm[j]!;
    gIdx[col] = Math.floor(j / groupSize);
    for (let r = 0; r < out; r++) codes[r * inF + col] = codesP[r * inF + j]!;
  }
  return { codes, scale, zero, gIdx, groups };
}

/**
 * The column loop, in place on wp (W in the permuted order, float64, [out, n]): codes [out, n] in
 * the permuted order, and each group's scale and zero [groups, out].
 */
function solveColumns(
  wp: Float64Array,
  out: number,
  n: number,
  u: Float64Array,
  p: ColumnParams,
  codesP: Uint8Array,
  scale: Float64Array,
  zero: Float64Array,
): void {
  const { maxq, groupSize, grouped, sym, blockSize } = p;
  const rowScale = new Float64Array(out);
  const rowZero = new Float64Array(out);
  const setParams = (g: number, from: number, to: number): void => {
    for (let r = 0; r < out; r++) {
      const [s, z] = findParams(wp.subarray(r * n + from, r * n + to), maxq, sym);
      rowScale[r] = s;
      rowZero[r] = z;
      scale[g * out + r] = s;
      zero[g * out + r] = z;
    }
  };
  if (!grouped) setParams(0, 0, n);
  const err = new Float64Array(out * blockSize);
  const w1 = new Float64Array(out * blockSize);
  for (let b0 = 0; b0 < n; b0 += blockSize) {
    const b1 = Math.min(b0 + blockSize, n);
    const width = b1 - b0;
    // the block's columns, updated in this copy; wp keeps the block-start values
    for (let r = 0; r < out; r++) w1.set(wp.subarray(r * n + b0, r * n + b1), r * blockSize);
    for (let j = b0; j < b1; j++) {
      if (grouped && j % groupSize === 0) setParams(j / groupSize, j, Math.min(j + groupSize, n));
      const d = u[j * n + j]!;
      const c = j - b0;
      for (let r = 0; r < out; r++) {
        const row = r * blockSize;
        const x = w1[row + c]!;
        const s = rowScale[r]!;
        const z = rowZero[r]!;
        let q = rint(x / s) + z;
        q = q < 0 ? 0 : q > maxq ? maxq : q;
        codesP[r * n + j] = q;
        const e = (x - s * (q - z)) / d;
        err[row + c] = e;
        for (let k = c + 1; k < width; k++) w1[row + k]! -= e * u[j * n + b0 + k]!;
      }
    }
    // the block's errors reach every later column at once
    for (let r = 0; r < out; r++) {
      const row = r * n;
      for (let c = 0; c < width; c++) {
        const e = err[r * blockSize + c]!;
        if (e === 0) continue;
        const uj = (b0 + c) * n;
        for (let k = b1; k < n; k++) wp[row + k]! -= e * u[uj + k]!;
      }
    }
  }
}
