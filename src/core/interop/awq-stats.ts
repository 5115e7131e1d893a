/**
 * The AWQ search of ./awq-search.ts from a layer's input statistics (../linear-stats.ts) instead
 * of its input tokens. The output error of a weight change δ (one row) on inputs X [n, in] is a
 * quadratic form in the Hessian H = Σ xᵀx:
 *
 *   Σ_t (x_t · δ)² = δ H δᵀ
 *
 * so both searches see every calibration token (the sample search with sampleStride 1) without
 * holding any: the scale search's loss(α) is Σ_rows δ H δᵀ / (tokens · rows), the clipping
 * search's err(i) is δ_g H_gg δ_gᵀ / tokens on the group's diagonal block. Inputs divided by the
 * scales s have the Hessian D⁻¹ H D⁻¹ (D = diag s); x̄ is absSum / tokens.
 *
 * Layers that read one input (q, k and v after one norm) share one scale vector: the search runs
 * on their weights stacked, w̄ over all their rows, the loss summed over all of them.
 *
 * Cost (each form takes the lower triangle: half the products): the scale search is
 * nGrid · rows · in² / 2 multiply-adds, the clipping search maxShrink · nGrid · rows · in ·
 * group_size / 2.
 */
import type { LinearStats } from '../linear-stats.js';
import { quadraticForms, type QuadraticFormsKernel } from '../stats-error.js';
import { toHalf } from './awq.js';
import {
  awqPseudoQuantize,
  candidateScales,
  pseudoQuantizeRows,
  weightMeans,
  type AwqQuantizer,
} from './awq-search.js';

export interface AwqScaleSearch {
  /** per input channel: the weights are multiplied by it, the inputs divided */
  readonly scales: Float64Array;
  /** the grid step chosen (α = ratio / nGrid); -1: round-to-nearest (s = 1) was kept */
  readonly ratio: number;
  /** the chosen step's mean squared output error over the stacked rows */
  readonly loss: number;
}

/** Rows of δ formed at once for the quadratic forms (bounded scratch, whole kernel blocks). */
const ROW_CHUNK = 256;

/**
 * AWQ's per-input-channel scales for the weights (each [rows[k], in]) of the layers that read
 * the input `stats` describes.
 */
export function awqScalesFromStats(
  stats: LinearStats,
  weights: readonly Float32Array[],
  rows: readonly number[],
  options: AwqQuantizer & {
    readonly nGrid: number;
    /**
     * Try round-to-nearest (s = 1) first, and keep it unless a grid step has a strictly smaller
     * loss (default true): AutoAWQ's grid need not hold it (α = 0 is not s = 1), and on a model
     * where no scale helps its search picked a worse one (issue 41). False: AutoAWQ's grid alone.
     */
    readonly keepRoundToNearest?: boolean;
  },
  kernel?: QuadraticFormsKernel,
): AwqScaleSearch {
  const inF = stats.inFeatures;
  const xMean = Float64Array.from(stats.absSum, (v) => v / stats.tokens);
  const wMean = weightMeans(weights, rows, inF, options.groupSize);
  const totalRows = rows.reduce((a, b) => a + b, 0);
  const chunk = Math.min(ROW_CHUNK, Math.max(...rows));
  const delta = new Float64Array(chunk * inF);
  const forms = new Float64Array(chunk);
  let best = Infinity;
  let bestRatio = 0;
  let bestScales: Float64Array = new Float64Array(inF).fill(1);
  const first = options.keepRoundToNearest === false ? 0 : -1;
  for (let step = first; step < options.nGrid; step++) {
    const s = step < 0 ? bestScales : candidateScales(xMean, wMean, step / options.nGrid);
    let loss = 0;
    weights.forEach((w, k) => {
      for (let r0 = 0; r0 < rows[k]!; r0 += chunk) {
        const count = Math.min(chunk, rows[k]! - r0);
        const d = delta.subarray(0, count * inF);
        for (let e = 0; e < d.length; e++) d[e] = w[r0 * inF + e]! * s[e % inF]!;
        pseudoQuantizeRows(d, count, inF, options);
        for (let e = 0; e < d.length; e++) d[e] = w[r0 * inF + e]! - d[e]! / s[e % inF]!;
        quadraticForms(stats.hessian, d, count, inF, forms, kernel);
        for (let r = 0; r < count; r++) loss += forms[r]!;
      }
    });
    loss /= stats.tokens * totalRows;
    if (loss < best) {
      best = loss;
      bestRatio = step;
      bestScales = s;
    }
  }
  return { scales: bestScales, ratio: bestRatio, loss: best };
}

/**
 * AWQ's clipping search on `weight` [out, in] (the weight as the checkpoint quantizes it, after
 * its scales), in place: each row's group clamped to the bound max|w_g|·(1 − i/nGrid) of least
 * output error on the inputs `stats` describes, divided by `inputScales` when the inputs are
 * (null: as they are). Returns the bounds [out, groups] and how many of them are below their
 * group's max |w| (the groups the search clipped).
 */
export function awqClipFromStats(
  stats: LinearStats,
  weight: Float64Array,
  out: number,
  inputScales: Float64Array | null,
  options: AwqQuantizer & { readonly nGrid: number; readonly maxShrink: number },
  kernel?: QuadraticFormsKernel,
): { readonly bounds: Float64Array; readonly shrunk: number } {
  const inF = stats.inFeatures;
  const gs = options.groupSize;
  const groups = Math.ceil(inF / gs);
  const clip = new Float64Array(out * groups);
  let shrunk = 0;
  const steps = Math.floor(options.maxShrink * options.nGrid);
  for (let g = 0; g < groups; g++) {
    const begin = g * gs;
    const width = Math.min(begin + gs, inF) - begin;
    // the group's diagonal block of the (scaled inputs') Hessian
    const hg = new Float64Array(width * width);
    for (let i = 0; i < width; i++) {
      for (let j = 0; j < width; j++) {
        const v = stats.hessian[(begin + i) * inF + begin + j]!;
        hg[i * width + j] = inputScales ? v / inputScales[begin + i]! / inputScales[begin + j]! : v;
      }
    }
    // every row's candidate at once per shrink step; each row keeps its first least error
    const bestErr = new Float64Array(out).fill(Infinity);
    const orgMax = new Float64Array(out);
    const bestMax = new Float64Array(out);
    for (let r = 0; r < out; r++) {
      for (let k = 0; k < width; k++)
        orgMax[r] = Math.max(orgMax[r]!, Math.abs(weight[r * inF + begin + k]!));
      bestMax[r] = orgMax[r]!;
    }
    const cur = new Float64Array(out * width);
    const errs = new Float64Array(out);
    for (let i = 0; i < steps; i++) {
      for (let r = 0; r < out; r++) {
        const m = orgMax[r]! * (1 - i / options.nGrid);
        const c = cur.subarray(r * width, (r + 1) * width);
        for (let k = 0; k < width; k++) c[k] = Math.min(Math.max(weight[r * inF + begin + k]!, -m), m);
        awqPseudoQuantize(c, options.bits, options.zeroPoint);
        for (let k = 0; k < width; k++) c[k] = weight[r * inF + begin + k]! - c[k]!;
      }
      quadraticForms(hg, cur, out, width, errs, kernel);
      for (let r = 0; r < out; r++) {
        const err = errs[r]! / stats.tokens;
        if (err < bestErr[r]!) {
          bestErr[r] = err;
          bestMax[r] = orgMax[r]! * (1 - i / options.nGrid);
        }
      }
    }
    for (let r = 0; r < out; r++) {
      const b = bestMax[r]!;
      clip[r * groups + g] = b;
      if (b < orgMax[r]!) shrunk++;
      for (let k = 0; k < width; k++) {
        weight[r * inF + begin + k] = Math.min(Math.max(weight[r * inF + begin + k]!, -b), b);
      }
    }
  }
  return { bounds: clip, shrunk };
}

/** What AWQ does to one weight before it is packed. */
export interface AwqWeightPlan {
  /** its group's scales: column i multiplied by scales[i] (null: none) */
  readonly scales: Float64Array | null;
  /** the scales of the layers that read its output: row r divided by rowDivide[r] (null: none) */
  readonly rowDivide: Float64Array | null;
  /** the clipping search on these statistics of its input (null: no clipping) */
  readonly clipStats: LinearStats | null;
}

/**
 * The weight [out, in] the checkpoint packs: diag(1/rowDivide) · W · diag(scales), clipped, each
 * value rounded once from float64 to float16 (AutoAWQ holds the layer in float16), as float32.
 * `clipped`: the groups whose bound is below their max |w|.
 */
export function awqPlannedWeight(
  w: Float32Array,
  out: number,
  inF: number,
  plan: AwqWeightPlan,
  options: AwqQuantizer & { readonly nGrid: number; readonly maxShrink: number },
  kernel?: QuadraticFormsKernel,
): { readonly weight: Float32Array; readonly clipped: number } {
  const weight = new Float64Array(out * inF);
  for (let r = 0; r < out; r++) {
    const d = plan.rowDivide ? plan.rowDivide[r]! : 1;
    for (let i = 0; i < inF; i++) {
      const v = plan.scales ? w[r * inF + i]! * plan.scales[i]! : w[r * inF + i]!;
      weight[r * inF + i] = plan.rowDivide ? v / d : v;
    }
  }
  const clipped = plan.clipStats
    ? awqClipFromStats(plan.clipStats, weight, out, plan.scales, options, kernel).shrunk
    : 0;
  return { weight: Float32Array.from(weight, toHalf), clipped };
}

/** `values` divided elementwise by `divide` (a norm's weight or a bias taking 1/s), in float64. */
export function divideBy(values: Float32Array, divide: Float64Array): Float64Array {
  return Float64Array.from(values, (v, i) => v / divide[i]!);
}
