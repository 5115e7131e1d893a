/**
 * The min/max observers of torch 1.13 (torch.ao.quantization.observer), as state updates:
 *
 *   min_max                              lo = min(lo, min(x)),  hi = max(hi, max(x))
 *   moving_average_min_max               first batch: lo = min(x); then lo += c · (min(x) - lo)
 *   per_channel_min_max                  the same per channel (ch_axis), running min/max
 *   moving_average_per_channel_min_max   the same per channel, moving average
 *
 * in float32, NaN propagating as in torch (torch.aminmax and torch.min/max keep a NaN; the
 * observer then holds NaN and its qparams are refused). An empty batch changes nothing.
 */
import { QuantdError, shapeText } from '../../errors/index.js';
import { fround } from '../rounding.js';
import type { ObserverConfig } from './config.js';

export interface RunningRange {
  /** One entry per tensor (+Infinity when unobserved) or per channel (empty when unobserved). */
  lo: Float32Array;
  hi: Float32Array;
}

/** torch.aminmax: NaN if any element is NaN. */
export function aminmax(x: ArrayLike<number>, from = 0, to = x.length): [number, number] {
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = from; i < to; i++) {
    const v = x[i]!;
    if (v !== v) return [NaN, NaN];
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return [lo, hi];
}

/** torch.min / torch.max of two values: NaN wins. */
const nanMin = (a: number, b: number): number => (a !== a || b !== b ? NaN : Math.min(a, b));
const nanMax = (a: number, b: number): number => (a !== a || b !== b ? NaN : Math.max(a, b));

/** lo + c · (cur - lo), each step rounded to float32 as torch's tensor ops do. */
const average = (old: number, cur: number, c: number): number => fround(old + fround(c * fround(cur - old)));

/** Per-channel min and max of `x` (shape `shape`) along `axis` (torch's permute + flatten + aminmax). */
export function channelMinMax(
  observer: string,
  x: ArrayLike<number>,
  shape: readonly number[],
  chAxis: number,
): [Float32Array, Float32Array] {
  const rank = shape.length;
  const axis = chAxis < 0 ? chAxis + rank : chAxis;
  if (rank === 0 || axis < 0 || axis >= rank) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer,
      detail: `ch_axis ${chAxis} is out of range for a batch of shape ${shapeText(shape)}`,
    });
  }
  const channels = shape[axis]!;
  let inner = 1;
  for (let d = axis + 1; d < rank; d++) inner *= shape[d]!;
  const outer = channels === 0 || inner === 0 ? 0 : x.length / (channels * inner);
  const lo = new Float32Array(channels).fill(Infinity);
  const hi = new Float32Array(channels).fill(-Infinity);
  let i = 0;
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      const [a, b] = aminmax(x, i, i + inner);
      lo[c] = nanMin(lo[c]!, a);
      hi[c] = nanMax(hi[c]!, b);
      i += inner;
    }
  }
  return [lo, hi];
}

/** Folds one batch into `range` (mutated). `x` is float32 data of shape `shape`. */
export function observeMinMax(
  config: ObserverConfig,
  range: RunningRange,
  x: ArrayLike<number>,
  shape: readonly number[],
): void {
  if (x.length === 0) return;
  const c = config.averagingConstant;
  switch (config.kind) {
    case 'min_max': {
      const [a, b] = aminmax(x);
      range.lo[0] = nanMin(a, range.lo[0]!);
      range.hi[0] = nanMax(b, range.hi[0]!);
      return;
    }
    case 'moving_average_min_max': {
      const [a, b] = aminmax(x);
      if (range.lo[0] === Infinity && range.hi[0] === -Infinity) {
        range.lo[0] = a;
        range.hi[0] = b;
      } else {
        range.lo[0] = average(range.lo[0]!, a, c);
        range.hi[0] = average(range.hi[0]!, b, c);
      }
      return;
    }
    case 'per_channel_min_max':
    case 'moving_average_per_channel_min_max': {
      const [a, b] = channelMinMax(config.kind, x, shape, config.chAxis);
      if (range.lo.length === 0) {
        range.lo = a;
        range.hi = b;
        return;
      }
      if (a.length !== range.lo.length) {
        throw new QuantdError('OBSERVER_INVALID', {
          observer: config.kind,
          detail: `the batch has ${a.length} channels on axis ${config.chAxis}; the observer has seen ${range.lo.length}`,
        });
      }
      const moving = config.kind === 'moving_average_per_channel_min_max';
      for (let k = 0; k < a.length; k++) {
        range.lo[k] = moving ? average(range.lo[k]!, a[k]!, c) : nanMin(a[k]!, range.lo[k]!);
        range.hi[k] = moving ? average(range.hi[k]!, b[k]!, c) : nanMax(b[k]!, range.hi[k]!);
      }
      return;
    }
    default:
      throw new Error(`observeMinMax: ${config.kind} is not a min/max observer`);
  }
}
