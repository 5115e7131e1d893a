/**
 * torch's greedy range search for 2- and 4-bit quantization (`choose_qparams_optimized`,
 * reference `param_search_greedy` in test_quantized_tensor.py): starting from [min, max], shrink
 * the range by one bin (1/200 of it) at a time from whichever end lowers the L2 error of a
 * uniform quantization more, until 84 % of the bins remain; keep the best local optimum seen.
 *
 * Everything mirrors the numpy reference operation for operation, in float32: the candidate
 * minimum and the scale are rounded through float16 (the embedding-bag format stores them as
 * fp16), squared errors accumulate in 8 lanes and then a sequential tail, and the loss is the
 * float32 square root.
 */
import { QuantdError } from '../errors/index.js';
import { roundToFloat16 } from './float16.js';
import { fround, rint } from './rounding.js';

export const GREEDY_BINS = 200;
export const GREEDY_RATIO = 0.16;
const LANES = 8;
const FLOAT16_MAX = 65504;

/** L2 error of quantizing x uniformly over [xmin, xmax] (seed: _compress_uniform_simplified). */
export function uniformLoss(x: Float32Array, bits: number, xmin: number, xmax: number): number {
  const lo = roundToFloat16(xmin);
  const range = fround(xmax - lo);
  const levels = fround(2 ** bits - 1);
  const scale = range === 0 ? 1 : roundToFloat16(fround(range / levels));
  const inverse = fround(1 / scale);
  const lanes = [0, 0, 0, 0, 0, 0, 0, 0];
  const n = x.length;
  const whole = n - (n % LANES);
  const squaredError = (v: number): number => {
    let q = rint(fround(fround(v - lo) * inverse));
    q = Math.min(Math.max(q, 0), levels); // NaN propagates, as np.clip lets it
    const err = fround(v - fround(fround(q * scale) + lo));
    return fround(err * err);
  };
  for (let i = 0; i < whole; i++) {
    const lane = i % LANES;
    lanes[lane] = fround(lanes[lane]! + squaredError(x[i]!));
  }
  let loss = 0;
  for (let l = 0; l < LANES; l++) loss = fround(loss + lanes[l]!);
  for (let i = whole; i < n; i++) loss = fround(loss + squaredError(x[i]!));
  return fround(Math.sqrt(loss));
}

export interface SearchedRange {
  readonly min: number;
  readonly max: number;
}

/** The range [min, max] torch's greedy search settles on for the values x (all finite). */
export function greedyRangeSearch(tensor: string, x: Float32Array, bits: number): SearchedRange {
  let xmin = Infinity;
  let xmax = -Infinity;
  for (let i = 0; i < x.length; i++) {
    xmin = Math.min(xmin, x[i]!); // -0 < +0, as reduceMinMax orders zeros
    xmax = Math.max(xmax, x[i]!);
  }
  if (Math.abs(xmin) > FLOAT16_MAX || Math.abs(xmax) > FLOAT16_MAX) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `range_search greedy rounds the range through float16 (as torch does); tensor ${tensor} has values in [${xmin}, ${xmax}], beyond ±${FLOAT16_MAX}`,
    });
  }
  const stepsize = fround(fround(xmax - xmin) / GREEDY_BINS);
  const minBins = fround(GREEDY_BINS * fround(1 - fround(GREEDY_RATIO)));
  const threshold = fround(minBins * stepsize);

  let curMin = xmin;
  let curMax = xmax;
  let curLoss = uniformLoss(x, bits, xmin, xmax);
  let best: { min: number; max: number; loss: number } | undefined;
  while (fround(curMin + threshold) < curMax) {
    const leftMin = fround(curMin + stepsize);
    const rightMax = fround(curMax - stepsize);
    const loss1 = uniformLoss(x, bits, leftMin, curMax);
    const loss2 = uniformLoss(x, bits, curMin, rightMax);
    if (curLoss < loss1 && curLoss < loss2 && (best === undefined || curLoss < best.loss)) {
      best = { min: curMin, max: curMax, loss: curLoss };
    }
    // A range too narrow for its magnitude (a step below one float32 ulp) cannot shrink: torch's
    // loop would never end; the search ends where it stands.
    if (loss1 < loss2 ? leftMin === curMin : rightMax === curMax) break;
    if (loss1 < loss2) {
      curMin = leftMin;
      curLoss = loss1;
    } else {
      curMax = rightMax;
      curLoss = loss2;
    }
  }
  return best ? { min: best.min, max: best.max } : { min: xmin, max: xmax };
}
