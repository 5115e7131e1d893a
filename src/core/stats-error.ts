/**
 * What a layer's input statistics (./linear-stats.ts) say about a change of its weight: the
 * output error of a change δ (one row) on the calibration tokens X is the quadratic form
 *
 *   Σ_t (x_t · δ)² = δ H δᵀ,   H = Σ xᵀx
 *
 * so a quantized weight's output error over every calibration token is known without the tokens:
 * relative to the output's own energy (Σ_rows w H wᵀ), as a relative MSE and an SQNR. AWQ's
 * searches (./interop/awq-stats.ts) sum the same forms.
 */
import type { LinearStats } from './linear-stats.js';

/**
 * δ H δᵀ for one row δ of `inF` values, H [inF, inF] row-major and symmetric: its lower triangle
 * only, Σ_i δ_i (2 Σ_{j<i} H_ij δ_j + H_ii δ_i), half the multiply-adds of the full form. The C
 * kernel (native/src/quadratic.c) takes every sum in this order.
 */
export function quadraticForm(h: Float64Array, d: Float64Array, inF: number): number {
  let acc = 0;
  for (let i = 0; i < inF; i++) {
    const di = d[i]!;
    if (di === 0) continue;
    const base = i * inF;
    let row = 0;
    for (let j = 0; j < i; j++) row += h[base + j]! * d[j]!;
    acc += di * (2 * row + h[base + i]! * di);
  }
  return acc;
}

/** δ H δᵀ of each row of d [rows, n] into out, equal to the bit to quadraticForm (a C kernel). */
export type QuadraticFormsKernel = (
  h: Float64Array,
  d: Float64Array,
  rows: number,
  n: number,
  out: Float64Array,
) => void;

/** quadraticForm of each row of d [rows, n] into out: through `kernel` when there is one. */
export function quadraticForms(
  h: Float64Array,
  d: Float64Array,
  rows: number,
  n: number,
  out: Float64Array,
  kernel?: QuadraticFormsKernel,
): void {
  if (kernel) return kernel(h, d, rows, n, out);
  for (let r = 0; r < rows; r++) out[r] = quadraticForm(h, d.subarray(r * n, (r + 1) * n), n);
}

/** A quantized weight's output error on the calibration tokens, from their statistics. */
export interface StatsOutputError {
  readonly tokens: number;
  /** Σ (y − ŷ)² / Σ y² over every token and output */
  readonly relative_mse: number;
  /** 10 · log10(Σ y² / Σ (y − ŷ)²), Infinity when the outputs are equal */
  readonly sqnr_db: number;
}

/**
 * The output error of `effective` (the weight the quantized layer computes with, [out, in])
 * against `w`, on the inputs `stats` describes.
 */
export function statsOutputError(
  stats: LinearStats,
  w: Float32Array,
  effective: Float32Array | Float64Array,
  out: number,
  kernel?: QuadraticFormsKernel,
): StatsOutputError {
  const inF = stats.inFeatures;
  const chunk = Math.min(ROWS_AT_ONCE, out);
  const delta = new Float64Array(chunk * inF);
  const ref = new Float64Array(chunk * inF);
  const forms = new Float64Array(chunk);
  let error = 0;
  let energy = 0;
  for (let r0 = 0; r0 < out; r0 += chunk) {
    const count = Math.min(chunk, out - r0);
    for (let e = 0; e < count * inF; e++) {
      ref[e] = w[r0 * inF + e]!;
      delta[e] = w[r0 * inF + e]! - effective[r0 * inF + e]!;
    }
    quadraticForms(stats.hessian, delta, count, inF, forms, kernel);
    for (let r = 0; r < count; r++) error += forms[r]!;
    quadraticForms(stats.hessian, ref, count, inF, forms, kernel);
    for (let r = 0; r < count; r++) energy += forms[r]!;
  }
  return {
    tokens: stats.tokens,
    relative_mse: energy > 0 ? error / energy : error > 0 ? Infinity : 0,
    sqnr_db: 10 * Math.log10(energy / error),
  };
}

/** Rows whose forms are taken at once (a bounded scratch, whole kernel blocks). */
const ROWS_AT_ONCE = 256;
