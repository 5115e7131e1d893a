/**
 * The AWQ search (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization for LLM
 * Compression and Acceleration"): the per-input-channel scale s that protects the weights of the
 * inputs with large activations, and then per-group clipping of the scaled weight, both chosen by
 * the layer's OUTPUT error on calibration inputs X [n, in]. The scaled weight W·diag(s) is what
 * gets quantized; 1/s folds into whatever produces X (the preceding norm or linear layer), so the
 * layer computes (X·diag(1/s))·Q(W·diag(s))ᵀ ≈ X·Wᵀ.
 *
 *   x̄ = mean over tokens of |X|;  w̄ = mean over rows of |W| / (max|W| of its group + 1e-6)
 *   for α = 0, 1/n_grid, …, (n_grid-1)/n_grid:
 *     s = max(x̄^α / (w̄^(1-α) + 1e-4), 1e-4);  s /= sqrt(max(s) · min(s))
 *     loss(α) = mean((X·Wᵀ − X·(Q(W·diag s)·diag(1/s))ᵀ)²)      the first least loss wins
 *   clipping, per output row and group, on every `sampleStride`-th token:
 *     for i = 0 … maxShrink·n_grid - 1: m = max|W_g|·(1 − i/n_grid)
 *       err(i) = mean over tokens of (X_g·W_gᵀ − X_g·Q(clamp(W_g, −m, m))ᵀ)²   the first least wins
 *
 * Q is AWQ's group quantizer (zero point: min/max per group, scale (max−min)/(2^bits−1) clamped
 * to 1e-5, zero −round(min/scale); symmetric: scale max|w|/(2^(bits−1)−1)). Every step in float64.
 */
import { linearOutput } from '../linear-eval.js';
import { rint } from '../rounding.js';

/** AWQ's group quantizer Q. */
export interface AwqQuantizer {
  readonly bits: number;
  readonly groupSize: number;
  /** asymmetric (AWQ's default: zero_point true) */
  readonly zeroPoint: boolean;
}

export interface AwqSearchOptions extends AwqQuantizer {
  readonly nGrid: number;
  readonly maxShrink: number;
  /** clipping uses every sampleStride-th token (AutoAWQ samples about 512) */
  readonly sampleStride: number;
}

export const AWQ_SEARCH_DEFAULTS = { nGrid: 20, maxShrink: 0.5, sampleStride: 1 } as const;

export interface AwqSearchResult {
  /** per input channel: W is scaled by it, X divided by it */
  readonly scales: Float64Array;
  /** the chosen α (index into the grid) */
  readonly ratio: number;
  /** per output row and group, [out, groups]: the clipping bound max|W_g|·(1 − i/n_grid) */
  readonly clip: Float64Array;
  /** the scaled, clipped weight [out, in] the checkpoint quantizes */
  readonly weight: Float64Array;
}

/** AWQ's pseudo-quantization of `w` (one group), in place: the dequantized values. */
export function awqPseudoQuantize(w: Float64Array, bits: number, zeroPoint: boolean): void {
  let lo = Infinity;
  let hi = -Infinity;
  let amax = 0;
  for (const v of w) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
    if (Math.abs(v) > amax) amax = Math.abs(v);
  }
  if (zeroPoint) {
    const maxInt = 2 ** bits - 1;
    const scale = Math.max(hi - lo, 1e-5) / maxInt;
    const zero = Math.min(Math.max(-rint(lo / scale), 0), maxInt);
    for (let i = 0; i < w.length; i++) {
      const q = Math.min(Math.max(rint(w[i]! / scale) + zero, 0), maxInt);
      w[i] = (q - zero) * scale;
    }
  } else {
    const maxInt = 2 ** (bits - 1) - 1;
    const minInt = -(2 ** (bits - 1));
    const scale = Math.max(amax, 1e-5) / maxInt;
    for (let i = 0; i < w.length; i++) w[i] = Math.min(Math.max(rint(w[i]! / scale), minInt), maxInt) * scale;
  }
}

/**
 * w̄: per input channel, the mean over every row of the weights (stacked: layers that share one
 * input) of |w| over the max |w| of its group (+1e-6).
 */
export function weightMeans(
  weights: readonly Float32Array[],
  rows: readonly number[],
  inF: number,
  groupSize: number,
): Float64Array {
  const wMean = new Float64Array(inF);
  let total = 0;
  weights.forEach((w, k) => {
    const out = rows[k]!;
    total += out;
    for (let r = 0; r < out; r++) {
      for (let g = 0; g < inF; g += groupSize) {
        const end = Math.min(g + groupSize, inF);
        let m = 0;
        for (let i = g; i < end; i++) m = Math.max(m, Math.abs(w[r * inF + i]!));
        for (let i = g; i < end; i++) wMean[i]! += Math.abs(w[r * inF + i]!) / (m + 1e-6);
      }
    }
  });
  for (let i = 0; i < inF; i++) wMean[i]! /= total;
  return wMean;
}

/** The scales of grid point `ratio` (α): x̄^α / (w̄^(1−α) + 1e-4), floored at 1e-4, normalized. */
export function candidateScales(xMean: Float64Array, wMean: Float64Array, ratio: number): Float64Array {
  const inF = xMean.length;
  const s = new Float64Array(inF);
  let sMax = -Infinity;
  let sMin = Infinity;
  for (let i = 0; i < inF; i++) {
    s[i] = Math.max(xMean[i]! ** ratio / (wMean[i]! ** (1 - ratio) + 1e-4), 1e-4);
    sMax = Math.max(sMax, s[i]!);
    sMin = Math.min(sMin, s[i]!);
  }
  const norm = Math.sqrt(sMax * sMin);
  for (let i = 0; i < inF; i++) s[i]! /= norm;
  return s;
}

/** Pseudo-quantizes each row of `q` [out, in] group by group, in place. */
export function pseudoQuantizeRows(q: Float64Array, out: number, inF: number, o: AwqQuantizer): void {
  for (let r = 0; r < out; r++) {
    for (let g = 0; g < inF; g += o.groupSize) {
      awqPseudoQuantize(
        q.subarray(r * inF + g, r * inF + Math.min(g + o.groupSize, inF)),
        o.bits,
        o.zeroPoint,
      );
    }
  }
}

export function awqSearch(
  x: Float32Array,
  n: number,
  w: Float32Array,
  out: number,
  inF: number,
  options: AwqSearchOptions,
): AwqSearchResult {
  const gs = options.groupSize;
  const xMean = new Float64Array(inF);
  for (let s = 0; s < n; s++) for (let i = 0; i < inF; i++) xMean[i]! += Math.abs(x[s * inF + i]!);
  for (let i = 0; i < inF; i++) xMean[i]! /= n;
  const wMean = weightMeans([w], [out], inF, gs);

  const layer = { x, n, inFeatures: inF, w, outFeatures: out };
  const reference = linearOutput(layer);
  let best = Infinity;
  let bestRatio = 0;
  let bestScales: Float64Array = new Float64Array(inF).fill(1);
  for (let step = 0; step < options.nGrid; step++) {
    const s = candidateScales(xMean, wMean, step / options.nGrid);
    const q = new Float64Array(out * inF);
    for (let r = 0; r < out; r++) for (let i = 0; i < inF; i++) q[r * inF + i] = w[r * inF + i]! * s[i]!;
    pseudoQuantizeRows(q, out, inF, options);
    for (let r = 0; r < out; r++) for (let i = 0; i < inF; i++) q[r * inF + i]! /= s[i]!;
    const y = linearOutput(layer, q);
    let loss = 0;
    for (let j = 0; j < y.length; j++) loss += (reference[j]! - y[j]!) ** 2;
    loss /= y.length;
    if (loss < best) {
      best = loss;
      bestRatio = step;
      bestScales = s;
    }
  }

  // clipping, on the scaled weight and the correspondingly scaled inputs
  const weight = new Float64Array(out * inF);
  for (let r = 0; r < out; r++)
    for (let i = 0; i < inF; i++) weight[r * inF + i] = w[r * inF + i]! * bestScales[i]!;
  const tokens: number[] = [];
  for (let t = 0; t < n; t += options.sampleStride) tokens.push(t);
  const groups = Math.ceil(inF / gs);
  const clip = new Float64Array(out * groups);
  const steps = Math.floor(options.maxShrink * options.nGrid);
  for (let r = 0; r < out; r++) {
    for (let g = 0; g < groups; g++) {
      const begin = g * gs;
      const end = Math.min(begin + gs, inF);
      const wg = weight.subarray(r * inF + begin, r * inF + end);
      const xs = tokens.map((t) => {
        const row = new Float64Array(end - begin);
        for (let i = begin; i < end; i++) row[i - begin] = x[t * inF + i]! / bestScales[i]!;
        return row;
      });
      const dot = (a: Float64Array, b: Float64Array): number => {
        let acc = 0;
        for (let i = 0; i < a.length; i++) acc += a[i]! * b[i]!;
        return acc;
      };
      const original = xs.map((xt) => dot(xt, wg));
      let orgMax = 0;
      for (const v of wg) orgMax = Math.max(orgMax, Math.abs(v));
      let bestErr = Infinity;
      let bestMax = orgMax;
      for (let i = 0; i < steps; i++) {
        const m = orgMax * (1 - i / options.nGrid);
        const cur = wg.map((v) => Math.min(Math.max(v, -m), m));
        awqPseudoQuantize(cur, options.bits, options.zeroPoint);
        let err = 0;
        xs.forEach((xt, t) => (err += (dot(xt, cur) - original[t]!) ** 2));
        err /= xs.length;
        if (err < bestErr) {
          bestErr = err;
          bestMax = m;
        }
      }
      clip[r * groups + g] = bestMax;
      for (let i = 0; i < wg.length; i++) wg[i] = Math.min(Math.max(wg[i]!, -bestMax), bestMax);
    }
  }
  return { scales: bestScales, ratio: bestRatio, clip, weight };
}
