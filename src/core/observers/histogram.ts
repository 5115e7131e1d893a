/**
 * torch 1.13's HistogramObserver: a running histogram over [lo, hi] and, for qparams, the
 * non-linear search (caffe2's NormMinimization) for the sub-range whose quantization error
 * (L2, each source bin spread uniformly) is least. Bit-identical to torch, quirks included:
 *
 *  - torch.histc is called with the range truncated to integers (`int(min_val)`), so values
 *    outside the truncated range are not counted, and a range inside (-1, 1) falls back to the
 *    batch's own extremes;
 *  - merging a wider batch upsamples the old histogram by upsample_rate, places it on the new
 *    grid (a float64 integral) and downsamples, widening hi so the grid divides evenly;
 *  - the search's totals are float32 sums in torch's order (torchSum), its thresholds float32;
 *  - dst_nbins is 2^bits of the dtype's storage (256 for quint4x2 too), whatever the range.
 *
 * Unlike torch, a batch holding NaN or an infinity is refused before anything changes (torch
 * raises too, after it has half-updated its state).
 */
import { QuantdError } from '../../errors/index.js';
import { notFinite } from '../qparams.js';
import { fround, rint } from '../rounding.js';
import type { ObserverConfig } from './config.js';
import { aminmax, type RunningRange } from './min-max.js';
import { calculateQParams, UNOBSERVED_QPARAMS, type ObserverQParams } from './qparams.js';
import { floorDivide, histcCount, histcEdges, torchSum } from './torch-float.js';

export interface HistogramState extends RunningRange {
  histogram: Float32Array;
}

function rangeInvalid(config: ObserverConfig, detail: string): QuantdError {
  return new QuantdError('OBSERVED_RANGE_INVALID', { observer: config.kind, detail });
}

const dstBins = (config: ObserverConfig): number => (config.dtype === 'qint32' ? 2 ** 32 : 256);

/**
 * One batch's step, planned from the batch's min `a` and max `b` alone: the edges its histc
 * counts between, and how the counts combine with the state. The counting itself is histcCount
 * here, or the kernels' qd_histc (src/kernels/tensor-ops.ts): the two are identical.
 */
export interface HistogramStep {
  readonly fresh: boolean;
  readonly a: number;
  readonly b: number;
  /** float32 edges of the batch's histc */
  readonly left: number;
  readonly right: number;
  readonly combinedMin: number;
  readonly combinedMax: number;
  readonly downsample: number;
  readonly startIdx: number;
}

/** The step for a batch of finite values with min `a` and max `b` (torch's forward, up to histc). */
export function planHistogram(
  config: ObserverConfig,
  state: HistogramState,
  a: number,
  b: number,
): HistogramStep {
  const bins = config.bins;
  const lo = state.lo[0]!;
  const hi = state.hi[0]!;
  if ((lo === Infinity && hi === -Infinity) || lo === hi) {
    const [left, right] = histcEdges(Math.trunc(a), Math.trunc(b), [a, b]);
    return { fresh: true, a, b, left, right, combinedMin: a, combinedMax: b, downsample: 1, startIdx: 0 };
  }
  const combinedMin = Math.min(a, lo);
  let combinedMax = Math.max(b, hi);
  // _adjust_min_max: a common grid of cell width (hi - lo) / (bins · upsample_rate)
  const up = config.upsampleRate;
  const cell = fround(fround(hi - lo) / fround(bins * up));
  const span = fround(fround(bins) * cell);
  const downsample = Math.ceil(fround(fround(combinedMax - combinedMin) / span));
  if (!(cell > 0) || !Number.isFinite(downsample) || downsample > 2 ** 40) {
    throw rangeInvalid(config, `the observed range [${lo}, ${hi}] is too narrow to merge [${a}, ${b}] into`);
  }
  const e = fround(fround(fround(downsample) * span) - fround(combinedMax - combinedMin));
  combinedMax = fround(combinedMax + e);
  const startIdx = rint(fround(fround(lo - combinedMin) / cell));
  const merging = !(combinedMin === lo && combinedMax === hi);
  if (merging && startIdx + bins * up > bins * downsample) {
    throw rangeInvalid(config, `merging [${a}, ${b}] into [${lo}, ${hi}] leaves the grid (as torch)`);
  }
  const [left, right] = histcEdges(Math.trunc(combinedMin), Math.trunc(combinedMax), [a, b]);
  return { fresh: false, a, b, left, right, combinedMin, combinedMax, downsample, startIdx };
}

/** Combines the batch's histc `counts` into `state` (mutated) as `step` planned. */
export function finishHistogram(
  config: ObserverConfig,
  state: HistogramState,
  step: HistogramStep,
  counts: Float32Array,
): void {
  if (step.fresh) {
    state.lo[0] = step.a;
    state.hi[0] = step.b;
    state.histogram = counts;
    return;
  }
  if (step.combinedMin === state.lo[0] && step.combinedMax === state.hi[0]) {
    for (let k = 0; k < counts.length; k++) counts[k] = fround(counts[k]! + state.histogram[k]!);
  } else {
    addResampled(counts, state.histogram, config.upsampleRate, step.downsample, step.startIdx);
  }
  state.histogram = counts;
  state.lo[0] = step.combinedMin;
  state.hi[0] = step.combinedMax;
}

/** The refusal of a batch holding NaN or an infinity (its range `a`..`b` shows one). */
export function checkHistogramBatch(
  config: ObserverConfig,
  x: ArrayLike<number>,
  a: number,
  b: number,
): void {
  if (Number.isFinite(a) && Number.isFinite(b)) return;
  const i = Array.prototype.findIndex.call(x, (v: number) => !Number.isFinite(v));
  throw notFinite(config.kind, x[i]!, i, 'the histogram observer');
}

export function observeHistogram(config: ObserverConfig, state: HistogramState, x: ArrayLike<number>): void {
  if (x.length === 0) return;
  const [a, b] = aminmax(x);
  checkHistogramBatch(config, x, a, b);
  const step = planHistogram(config, state, a, b);
  const counts = new Float32Array(config.bins);
  histcCount(x, step.left, step.right, counts);
  finishHistogram(config, state, step, counts);
}

/**
 * _combine_histograms: `old` repeated upsample times from cell `start` of a zero grid of
 * bins · downsample cells; its float64 running sum sampled every `downsample` cells; the
 * differences (the later one rounded to float32 first, as torch stores it) over upsample,
 * added to `into` in float32. Zero cells add nothing to a float64 sum, so only the old
 * histogram's cells are walked.
 */
function addResampled(into: Float32Array, old: Float32Array, up: number, down: number, start: number): void {
  const bins = into.length;
  const integral = new Float64Array(bins);
  let sum = 0;
  let cell = start; // grid index of the next old cell
  let k = 0; // output bin whose sample point is (k + 1) · down - 1
  const end = start + old.length * up;
  for (; k < bins; k++) {
    const sample = (k + 1) * down - 1;
    while (cell <= sample && cell < end) {
      sum += old[Math.floor((cell - start) / up)]!;
      cell++;
    }
    integral[k] = sum;
  }
  let previous = 0;
  for (let j = 0; j < bins; j++) {
    const shifted = j === 0 ? 0 : fround(previous);
    previous = integral[j]!;
    into[j] = fround(into[j]! + fround((integral[j]! - shifted) / up));
  }
}

/** The search's squared error if [startBin, endBin] became the quantization range. */
function quantizationError(
  config: ObserverConfig,
  state: HistogramState,
  startBin: number,
  endBin: number,
): number {
  const bins = config.bins;
  const dstNbins = dstBins(config);
  const binWidth = (state.hi[0]! - state.lo[0]!) / bins; // Python floats
  const dstBinWidth = (binWidth * (endBin - startBin + 1)) / dstNbins;
  if (dstBinWidth === 0) return 0;
  const bw = fround(binWidth);
  const dbw = fround(dstBinWidth);
  const half = fround(dstBinWidth / 2);
  const minusHalf = fround(-dstBinWidth / 2);
  const lastDst = fround(dstNbins - 1);
  const cube = (v: number): number => fround(fround(v * v) * v);
  const wholeBin = fround(fround(cube(half) - cube(minusHalf)) / 3);
  const norm = new Float32Array(bins);
  for (let i = 0; i < bins; i++) {
    const begin = fround(fround(i - startBin) * bw);
    const end = fround(begin + bw);
    const dstOfBegin = Math.min(Math.max(floorDivide(begin, dbw), 0), lastDst);
    const dstOfEnd = Math.min(Math.max(floorDivide(end, dbw), 0), lastDst);
    const beginCenter = fround(fround(dstOfBegin + 0.5) * dbw);
    const density = fround(state.histogram[i]! / bw);
    const part = (db: number, de: number): number =>
      fround(density * fround(fround(cube(de) - cube(db)) / 3));
    let n = fround(0 + part(fround(begin - beginCenter), half));
    n = fround(n + fround(fround(fround(dstOfEnd - dstOfBegin) - 1) * fround(density * wholeBin)));
    const endCenter = fround(fround(dstOfEnd * dbw) + half);
    n = fround(n + part(minusHalf, fround(end - endCenter)));
    norm[i] = n;
  }
  return torchSum(norm);
}

/** _non_linear_param_search: the [lo, hi] the qparams are computed from. */
function searchRange(config: ObserverConfig, state: HistogramState): [number, number] {
  const bins = config.bins;
  const h = state.histogram;
  const lo = state.lo[0]!;
  const binWidth = fround(fround(state.hi[0]! - lo) / fround(bins));
  const total = torchSum(h);
  const cSum = new Float32Array(bins);
  let running = 0; // torch's CPU cumsum accumulates float32 in float64
  for (let i = 0; i < bins; i++) cSum[i] = fround((running += h[i]!));
  const stepsize = 1e-5;
  let alpha = 0;
  let beta = 1;
  let startBin = 0;
  let endBin = bins - 1;
  let normMin = Infinity;
  while (alpha < beta) {
    const nextAlpha = alpha + stepsize;
    const nextBeta = beta - stepsize;
    const lowCut = fround(nextAlpha * total);
    const highCut = fround(nextBeta * total);
    let l = startBin;
    let r = endBin;
    while (l < endBin && cSum[l]! < lowCut) l++;
    while (r > startBin && cSum[r]! > highCut) r--;
    let nextStart = startBin;
    let nextEnd = endBin;
    if (l - startBin > endBin - r) {
      nextStart = l;
      alpha = nextAlpha;
    } else {
      nextEnd = r;
      beta = nextBeta;
    }
    if (nextStart === startBin && nextEnd === endBin) continue;
    const norm = quantizationError(config, state, nextStart, nextEnd);
    if (norm > normMin) break;
    normMin = norm;
    startBin = nextStart;
    endBin = nextEnd;
  }
  return [fround(lo + fround(binWidth * startBin)), fround(lo + fround(binWidth * (endBin + 1)))];
}

export function histogramQParams(config: ObserverConfig, state: HistogramState): ObserverQParams {
  if (state.lo[0] === Infinity && state.hi[0] === -Infinity) return UNOBSERVED_QPARAMS;
  const [lo, hi] = searchRange(config, state);
  return calculateQParams(config, Float32Array.of(lo), Float32Array.of(hi));
}
