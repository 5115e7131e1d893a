/**
 * torch 1.13's FusedMovingAvgObsFakeQuantize (torch.fused_moving_avg_obs_fake_quant, seeds
 * 002/003): the moving-average observer and fake-quantize in one kernel. It differs from
 * FakeQuantize around a MovingAverage observer in three ways that change numbers:
 *
 *  - the running range restarts from the batch wherever it is infinite (not only when both ends
 *    are unobserved);
 *  - qparams come from ATen's ChooseQuantizationParams (float64 intermediates, a scale of 0.1
 *    for an empty range, scales below 6.1e-5 raised to it with the range stretched to match, the
 *    zero point taken from whichever end has the smaller error; symmetric: the range made
 *    symmetric first and the zero point the midpoint) instead of the observer's formula;
 *  - they are recomputed only while fake-quant is on, from the running range, observer on or off.
 *
 * Per-channel runs along axis 0 only, as torch.
 */
import { QuantdError } from '../../errors/index.js';
import { fakeQuantizeOnGrid } from '../fake-quantize.js';
import { fround, rint } from '../rounding.js';
import { isSymmetric, type ObserverConfig } from './config.js';
import type { FakeQuantizeState } from './fake-quantize-module.js';
import { aminmax, channelMinMax } from './min-max.js';
import { checkBatch } from './observer.js';

const SMALL_SCALE_THRESHOLD = fround(6.1e-5);

/** ATen quant_utils::ChooseQuantizationParams(min, max, qmin, qmax, preserve_sparsity). */
export function chooseQuantizationParams(
  min: number,
  max: number,
  qmin: number,
  qmax: number,
  preserveSparsity: boolean,
): { scale: number; zeroPoint: number } {
  let lo = min;
  let hi = max;
  if (lo < 0 && hi > 0 && preserveSparsity) {
    const symmetricQmin = -(Math.trunc((qmax - qmin) / 2) + 1);
    const symmetricQmax = Math.trunc((qmax - qmin) / 2);
    const maxScale = Math.max(Math.abs(fround(lo / symmetricQmin)), Math.abs(fround(hi / symmetricQmax)));
    lo = fround(maxScale * symmetricQmin);
    hi = fround(maxScale * symmetricQmax);
  }
  lo = Math.min(lo, 0);
  hi = Math.max(hi, 0);
  let scale = (hi - lo) / (qmax - qmin); // float64
  if (fround(scale) === 0 || !Number.isFinite(fround(1 / fround(scale)))) scale = 0.1;
  if (scale < SMALL_SCALE_THRESHOLD) {
    const original = fround(scale);
    scale = SMALL_SCALE_THRESHOLD;
    if (lo === 0) hi = fround(SMALL_SCALE_THRESHOLD * (qmax - qmin));
    else if (hi === 0) lo = fround(-SMALL_SCALE_THRESHOLD * (qmax - qmin));
    else {
      const amplifier = fround(SMALL_SCALE_THRESHOLD / original);
      lo = fround(lo * amplifier);
      hi = fround(hi * amplifier);
    }
  }
  const fromMin = qmin - lo / scale;
  const fromMax = qmax - hi / scale;
  const fromMinError = Math.abs(qmin) - Math.abs(lo / scale);
  const fromMaxError = Math.abs(qmax) - Math.abs(hi / scale);
  let initial = fromMinError < fromMaxError ? fromMin : fromMax;
  if (lo < 0 && hi > 0 && preserveSparsity) initial = (qmin + qmax) / 2;
  // an int32 in ATen: no negative zero
  const zeroPoint = (initial < qmin ? qmin : initial > qmax ? qmax : rint(initial)) + 0;
  return { scale: fround(scale), zeroPoint };
}

/** running + c · (current - running) in float32, restarting from `current` where running is infinite. */
const movingAverage = (running: number, current: number, c: number): number =>
  running === Infinity || running === -Infinity
    ? current
    : fround(running + fround(c * fround(current - running)));

export function checkFusable(config: ObserverConfig): void {
  const perChannel = config.kind === 'moving_average_per_channel_min_max';
  if (config.kind !== 'moving_average_min_max' && !perChannel) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer: config.kind,
      detail:
        'the fused moving-average fake-quantize works with moving_average_min_max or moving_average_per_channel_min_max',
    });
  }
  if (perChannel && config.chAxis !== 0) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer: config.kind,
      detail: 'the fused per-channel fake-quantize works along ch_axis 0 only (as torch)',
    });
  }
  if (config.qscheme === 'per_channel_affine_float_qparams') {
    throw new QuantdError('OBSERVER_INVALID', {
      observer: config.kind,
      detail:
        'the fused fake-quantize has integer zero points; per_channel_affine_float_qparams does not fit it',
    });
  }
}

/** One forward step of the fused module (the observer's running range lives in state.observer). */
export function fusedFakeQuantizeStep(
  config: ObserverConfig,
  state: FakeQuantizeState,
  x: Float32Array,
  shape: readonly number[],
): Float32Array {
  checkFusable(config);
  checkBatch(config, x, shape);
  const perChannel = config.kind === 'moving_average_per_channel_min_max';
  const range = state.observer;
  const c = config.averagingConstant;
  if (perChannel) {
    if (shape.length === 0) {
      throw new QuantdError('OBSERVER_INVALID', {
        observer: config.kind,
        detail: 'a per-channel batch needs a channel axis',
      });
    }
    const channels = shape[0]!;
    if (range.lo.length === 0) {
      range.lo = new Float32Array(channels).fill(Infinity);
      range.hi = new Float32Array(channels).fill(-Infinity);
      state.scale = new Float32Array(channels).fill(1);
      state.zeroPoint = new Int32Array(channels);
    } else if (range.lo.length !== channels) {
      throw new QuantdError('OBSERVER_INVALID', {
        observer: config.kind,
        detail: `the batch has ${channels} channels on axis 0; the observer has seen ${range.lo.length}`,
      });
    }
    if (state.observerEnabled && x.length > 0) {
      const [lo, hi] = channelMinMax(config.kind, x, shape, 0);
      for (let k = 0; k < channels; k++) {
        range.lo[k] = movingAverage(range.lo[k]!, lo[k]!, c);
        range.hi[k] = movingAverage(range.hi[k]!, hi[k]!, c);
      }
      range.observed += x.length;
    }
  } else if (state.observerEnabled && x.length > 0) {
    const [lo, hi] = aminmax(x);
    range.lo[0] = movingAverage(range.lo[0]!, lo, c);
    range.hi[0] = movingAverage(range.hi[0]!, hi, c);
    range.observed += x.length;
  }
  if (!state.fakeQuantEnabled) return x.slice();

  const symmetric = isSymmetric(config.qscheme);
  const n = range.lo.length;
  const scale = new Float32Array(n);
  const zeroPoint = new Int32Array(n);
  for (let k = 0; k < n; k++) {
    if (!(range.lo[k]! <= range.hi[k]!)) {
      throw new QuantdError('OBSERVED_RANGE_INVALID', {
        observer: config.kind,
        detail: `the running range${n > 1 ? ` of channel ${k}` : ''} is [${range.lo[k]}, ${range.hi[k]}]; fake-quantize needs an observed, NaN-free range`,
      });
    }
    const qp = chooseQuantizationParams(
      range.lo[k]!,
      range.hi[k]!,
      config.quantMin,
      config.quantMax,
      symmetric,
    );
    scale[k] = qp.scale;
    zeroPoint[k] = qp.zeroPoint;
  }
  state.scale = scale;
  state.zeroPoint = zeroPoint;
  let outer = 1;
  let inner = x.length;
  if (perChannel) {
    outer = 1;
    inner = n === 0 ? 0 : x.length / n;
  }
  const grid = { quantMin: config.quantMin, quantMax: config.quantMax, floatZeroPoint: false };
  const layout = { numel: x.length, outer, channels: n, inner };
  return fakeQuantizeOnGrid(`${config.kind} input`, x, layout, grid, { scale, zeroPoint }).out;
}
