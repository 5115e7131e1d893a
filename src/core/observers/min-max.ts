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
import type { Layout } from '../layout.js';
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

/** A batch's elements along ch_axis: `outer` runs of `channels` runs of `inner` elements. */
export interface ChannelUnits {
  readonly axis: number;
  readonly outer: number;
  readonly channels: number;
  readonly inner: number;
}

/** The channel geometry of `shape` along `chAxis` (negative counts from the end); null when out of range. */
export function channelUnits(shape: readonly number[], chAxis: number): ChannelUnits | null {
  const rank = shape.length;
  const axis = chAxis < 0 ? chAxis + rank : chAxis;
  if (axis < 0 || axis >= rank) return null;
  let outer = 1;
  let inner = 1;
  for (let d = 0; d < axis; d++) outer *= shape[d]!;
  for (let d = axis + 1; d < rank; d++) inner *= shape[d]!;
  return { axis, outer, channels: shape[axis]!, inner };
}

/** Per-channel min and max of `x` (shape `shape`) along `chAxis` (torch's permute + flatten + aminmax). */
export function channelMinMax(
  observer: string,
  x: ArrayLike<number>,
  shape: readonly number[],
  chAxis: number,
): [Float32Array, Float32Array] {
  const units = channelUnits(shape, chAxis);
  if (!units) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer,
      detail: `ch_axis ${chAxis} is out of range for a batch of shape ${shapeText(shape)}`,
    });
  }
  const { outer, channels, inner } = units;
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

/** Whether `kind` keeps only a running min and max (its batches reduce to their min and max). */
export const isMinMaxKind = (kind: ObserverConfig['kind']): boolean =>
  kind === 'min_max' ||
  kind === 'moving_average_min_max' ||
  kind === 'per_channel_min_max' ||
  kind === 'moving_average_per_channel_min_max';

/**
 * Folds a batch's own min and max (one per tensor, or per channel) into `range` (mutated): what
 * every min/max observer does with a batch once it is reduced — by aminmax here, or by the kernels.
 */
export function foldMinMax(
  config: ObserverConfig,
  range: RunningRange,
  batchLo: Float32Array,
  batchHi: Float32Array,
): void {
  const c = config.averagingConstant;
  const moving =
    config.kind === 'moving_average_min_max' || config.kind === 'moving_average_per_channel_min_max';
  const perTensor = config.kind === 'min_max' || config.kind === 'moving_average_min_max';
  if (perTensor) {
    const [a, b] = [batchLo[0]!, batchHi[0]!];
    if (!moving) {
      range.lo[0] = nanMin(a, range.lo[0]!);
      range.hi[0] = nanMax(b, range.hi[0]!);
    } else if (range.lo[0] === Infinity && range.hi[0] === -Infinity) {
      range.lo[0] = a;
      range.hi[0] = b;
    } else {
      range.lo[0] = average(range.lo[0]!, a, c);
      range.hi[0] = average(range.hi[0]!, b, c);
    }
    return;
  }
  if (range.lo.length === 0) {
    range.lo = batchLo;
    range.hi = batchHi;
    return;
  }
  if (batchLo.length !== range.lo.length) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer: config.kind,
      detail: `the batch has ${batchLo.length} channels on axis ${config.chAxis}; the observer has seen ${range.lo.length}`,
    });
  }
  for (let k = 0; k < batchLo.length; k++) {
    range.lo[k] = moving ? average(range.lo[k]!, batchLo[k]!, c) : nanMin(batchLo[k]!, range.lo[k]!);
    range.hi[k] = moving ? average(range.hi[k]!, batchHi[k]!, c) : nanMax(batchHi[k]!, range.hi[k]!);
  }
}

/** Folds one batch into `range` (mutated). `x` is float32 data of shape `shape`. */
export function observeMinMax(
  config: ObserverConfig,
  range: RunningRange,
  x: ArrayLike<number>,
  shape: readonly number[],
): void {
  if (x.length === 0) return;
  if (!isMinMaxKind(config.kind)) throw new Error(`observeMinMax: ${config.kind} is not a min/max observer`);
  if (config.kind === 'min_max' || config.kind === 'moving_average_min_max') {
    const [a, b] = aminmax(x);
    foldMinMax(config, range, Float32Array.of(a), Float32Array.of(b));
  } else {
    const [a, b] = channelMinMax(config.kind, x, shape, config.chAxis);
    foldMinMax(config, range, a, b);
  }
}

/**
 * The layout a min/max observer reduces a batch by (one unit per tensor, or per channel of
 * ch_axis), for reducing it elsewhere (the kernels); null where the batch does not fit it (the
 * observer itself then says why).
 */
export function minMaxLayout(config: ObserverConfig, shape: readonly number[], numel: number): Layout | null {
  let count = 1;
  for (const d of shape) count *= Number.isInteger(d) && d >= 0 ? d : NaN;
  if (count !== numel || numel === 0 || !isMinMaxKind(config.kind)) return null;
  if (config.kind === 'min_max' || config.kind === 'moving_average_min_max') {
    const base = { scheme: 'per_tensor', shape, numel, axis: null, groupSize: null } as const;
    return { ...base, outer: 1, channels: 1, inner: numel, qparamShape: [1] };
  }
  const units = channelUnits(shape, config.chAxis);
  if (!units) return null;
  const { axis, outer, channels, inner } = units;
  return {
    scheme: 'per_channel',
    shape,
    numel,
    outer,
    channels,
    inner,
    qparamShape: [channels],
    axis,
    groupSize: null,
  };
}
