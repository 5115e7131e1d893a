/**
 * One interface over every observer kind: a state that batches fold into, and qparams
 * computed from it. (Its export form is src/format/observer-state.ts.)
 */
import { QuantdError } from '../../errors/index.js';
import type { ObserverConfig } from './config.js';
import { histogramQParams, observeHistogram } from './histogram.js';
import { foldMinMax, observeMinMax } from './min-max.js';
import { calculateQParams, type ObserverQParams } from './qparams.js';

export interface ObserverState {
  /** Running minimum: one value (+Infinity unobserved), or one per channel (empty unobserved). */
  lo: Float32Array;
  hi: Float32Array;
  /** histogram observers only */
  histogram: Float32Array | null;
  /** Elements folded in so far (batches with NaN included). */
  observed: number;
}

export function newObserverState(config: ObserverConfig): ObserverState {
  const perTensor = config.qscheme.startsWith('per_tensor');
  return {
    lo: perTensor ? Float32Array.of(Infinity) : new Float32Array(0),
    hi: perTensor ? Float32Array.of(-Infinity) : new Float32Array(0),
    histogram: config.kind === 'histogram' ? new Float32Array(config.bins) : null,
    observed: 0,
  };
}

/** Refuses a batch whose shape is not dimensions, or does not hold its values (OBSERVER_INVALID). */
export function checkBatch(config: ObserverConfig, x: ArrayLike<number>, shape: readonly number[]): void {
  let numel = 1;
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) {
      throw new QuantdError('OBSERVER_INVALID', {
        observer: config.kind,
        detail: `batch shape has dimension ${d}`,
      });
    }
    numel *= d;
  }
  if (numel !== x.length) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer: config.kind,
      detail: `the batch holds ${x.length} values, its shape [${shape.join(', ')}] says ${numel}`,
    });
  }
}

/** Folds one float32 batch of shape `shape` into `state`. A refused batch changes nothing. */
export function observe(
  config: ObserverConfig,
  state: ObserverState,
  x: ArrayLike<number>,
  shape: readonly number[],
): void {
  checkBatch(config, x, shape);
  if (config.kind === 'fixed_qparams') {
    state.observed += x.length;
    return;
  }
  if (config.kind === 'histogram') {
    const next = { lo: state.lo.slice(), hi: state.hi.slice(), histogram: state.histogram! };
    observeHistogram(config, next, x);
    Object.assign(state, next);
  } else {
    const next = { lo: state.lo.slice(), hi: state.hi.slice() };
    observeMinMax(config, next, x, shape);
    Object.assign(state, next);
  }
  state.observed += x.length;
}

export function observerQParams(config: ObserverConfig, state: ObserverState): ObserverQParams {
  switch (config.kind) {
    case 'fixed_qparams':
      return { scale: Float32Array.of(config.fixedScale), zeroPoint: Int32Array.of(config.fixedZeroPoint) };
    case 'histogram':
      return histogramQParams(config, { lo: state.lo, hi: state.hi, histogram: state.histogram! });
    default:
      return calculateQParams(config, state.lo, state.hi);
  }
}

/** `state` after folding one batch in, as a new state (`state` itself is left as it was). */
export function observeBatch(
  config: ObserverConfig,
  state: ObserverState,
  x: ArrayLike<number>,
  shape: readonly number[],
): ObserverState {
  const next: ObserverState = {
    lo: state.lo.slice(),
    hi: state.hi.slice(),
    histogram: state.histogram,
    observed: state.observed,
  };
  observe(config, next, x, shape);
  return next;
}

/**
 * `state` after a batch of `count` elements whose min and max (per tensor, or per channel of
 * ch_axis) were reduced elsewhere — by the kernels — as a new state. Min/max kinds only.
 */
export function observeReduced(
  config: ObserverConfig,
  state: ObserverState,
  batchLo: Float32Array,
  batchHi: Float32Array,
  count: number,
): ObserverState {
  const next: ObserverState = {
    lo: state.lo.slice(),
    hi: state.hi.slice(),
    histogram: null,
    observed: state.observed,
  };
  foldMinMax(config, next, batchLo, batchHi);
  next.observed += count;
  return next;
}

/** A histogram's range search walks its bins at each of its steps (up to 50 000; ~15 ms at 2048 bins). */
const SEARCH_STEPS_COST = 256;

/**
 * A rough cost of observerQParams in elementary steps, to decide where it runs: a histogram's
 * range search is bins × steps; a min/max observer's is one step per channel.
 */
export function qparamsCost(config: ObserverConfig, state: ObserverState): number {
  return config.kind === 'histogram' ? config.bins * SEARCH_STEPS_COST : Math.max(1, state.lo.length);
}

/**
 * A rough cost of folding a batch of `numel` elements into an observer, to decide where it runs:
 * the batch's elements, and for a histogram the merge's bins · upsample_rate cells, which a
 * batch of a few elements costs as much as a large one.
 */
export function observeCost(config: ObserverConfig, numel: number): number {
  return numel + (config.kind === 'histogram' ? config.bins * config.upsampleRate : 0);
}
