/**
 * What GPTQ and AWQ need to know about a linear layer's inputs, gathered over calibration
 * batches: every batch X [tokens, in] (leading dimensions flattened, the last one is in_features)
 * adds to
 *
 *   hessian  Σ xᵀx over tokens   [in, in]   GPTQ's H = 2/n · Σ xᵀx (its scale does not change
 *                                            GPTQ's result: the damping is relative to mean(diag H))
 *   absSum   Σ |x| per channel   [in]       AWQ's x̄ = absSum / n
 *   tokens   n
 *
 * all in float64, so the sums do not depend on how the tokens were split into batches beyond
 * float64 rounding. A batch holding NaN or ±Inf is refused before anything changes.
 */
import { QuantdError, shapeText } from '../errors/index.js';

export interface LinearStats {
  readonly inFeatures: number;
  readonly tokens: number;
  /** Σ xᵀx, [in, in] row-major, symmetric */
  readonly hessian: Float64Array;
  /** Σ |x| per input channel */
  readonly absSum: Float64Array;
}

/** A Hessian of more inputs than this (8·in² bytes: 2 GiB) is refused. */
export const MAX_STATS_FEATURES = 16_384;

export function emptyLinearStats(inFeatures: number): LinearStats {
  return {
    inFeatures,
    tokens: 0,
    hessian: new Float64Array(inFeatures * inFeatures),
    absSum: new Float64Array(inFeatures),
  };
}

/**
 * Statistics of no token yet whose sums are not allocated (zero-length arrays): adding the first
 * batch allocates them (zeros, as any statistics of no token are). A layer's in² values then
 * exist once, where the first batch is added, not also as an unused zero copy beside them.
 */
export function unallocatedLinearStats(inFeatures: number): LinearStats {
  return { inFeatures, tokens: 0, hessian: new Float64Array(0), absSum: new Float64Array(0) };
}

/** The in_features of a batch of `shape`, or a catalogued error naming `tensor`. */
export function batchFeatures(tensor: string, shape: readonly number[]): number {
  const inF = shape.length === 0 ? 0 : shape[shape.length - 1]!;
  if (shape.length < 1 || inF === 0 || inF > MAX_STATS_FEATURES) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail: `linear-layer statistics need a batch [..., in_features] with 1 ≤ in_features ≤ ${MAX_STATS_FEATURES}`,
    });
  }
  return inF;
}

/** Tokens per pass over the Hessian: their rows stay in cache while each Hessian row is updated. */
const TOKEN_BLOCK = 16;

/**
 * `stats` with the batch `x` (float32 values, [tokens, inFeatures]) added: a new object, `stats`
 * unchanged (a batch is all or nothing for its session).
 */
export function accumulateLinearStats(
  tensor: string,
  stats: LinearStats,
  x: Float32Array,
  shape: readonly number[],
): LinearStats {
  const inF = batchFeatures(tensor, shape);
  if (inF !== stats.inFeatures) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail: `earlier batches of this tensor had in_features ${stats.inFeatures}`,
    });
  }
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]!)) {
      throw new QuantdError('INPUT_NOT_FINITE', { tensor, value: x[i]!, index: i, op: 'linear statistics' });
    }
  }
  // no token yet: the sums are zeros, allocated here (unallocatedLinearStats gives none)
  const fresh = stats.tokens === 0;
  const hessian = fresh ? new Float64Array(inF * inF) : stats.hessian.slice();
  const absSum = fresh ? new Float64Array(inF) : stats.absSum.slice();
  addLinearStats(hessian, absSum, inF, x);
  return { inFeatures: inF, tokens: stats.tokens + x.length / inF, hessian, absSum };
}

/**
 * In place: the tokens of x (finite values, [tokens, inF]) added to Σ xᵀx (the lower triangle,
 * then mirrored) and Σ |x|, each entry's terms in token order (what the C kernel
 * qd_linear_stats_add, native/src/linear_stats.c, computes to the bit). Every product is added,
 * zeros too: the kernel's tiles take every token, and adding +0 to a -0 sum gives +0, so skipping
 * a zero x_i (as this once did) would keep a -0 the kernel does not.
 */
export function addLinearStats(
  hessian: Float64Array,
  absSum: Float64Array,
  inF: number,
  x: Float32Array,
): void {
  const n = x.length / inF;
  const xs = new Float64Array(TOKEN_BLOCK * inF);
  for (let t0 = 0; t0 < n; t0 += TOKEN_BLOCK) {
    const nb = Math.min(TOKEN_BLOCK, n - t0);
    for (let k = 0; k < nb * inF; k++) xs[k] = x[t0 * inF + k]!;
    for (let k = 0; k < nb * inF; k++) absSum[k % inF]! += Math.abs(xs[k]!);
    // the lower triangle, token by token in order within each entry (sums stay sequential)
    for (let i = 0; i < inF; i++) {
      const row = i * inF;
      for (let t = 0; t < nb; t++) {
        const base = t * inF;
        const xi = xs[base + i]!;
        for (let j = 0; j <= i; j++) hessian[row + j]! += xi * xs[base + j]!;
      }
    }
  }
  for (let i = 0; i < inF; i++) for (let j = 0; j < i; j++) hessian[j * inF + i] = hessian[i * inF + j]!;
}
