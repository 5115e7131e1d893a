/**
 * torch 1.13's FakeQuantize module (seed 003) as a state machine. Each step, with the switches
 * as they are set:
 *
 *   observer on     the observer folds the batch in; scale and zero_point become its qparams
 *   fake-quant on   the output is fake_quantize(x) with the current scale and zero_point
 *                   (per channel along the observer's ch_axis), else x unchanged
 *
 * Before anything was observed scale is 1 and zero_point 0, as torch initialises them; with
 * fixed_qparams (FixedQParamsFakeQuantize) they are the fixed ones throughout.
 */
import { QuantdError, shapeText } from '../../errors/index.js';
import { fakeQuantizeOnGrid } from '../fake-quantize.js';
import { isPerChannelKind, type ObserverConfig } from './config.js';
import { channelUnits } from './min-max.js';
import { checkBatch, newObserverState, observe, observerQParams, type ObserverState } from './observer.js';

export interface FakeQuantizeState {
  observerEnabled: boolean;
  fakeQuantEnabled: boolean;
  scale: Float32Array;
  zeroPoint: Int32Array | Float32Array;
  readonly observer: ObserverState;
}

export function newFakeQuantizeState(config: ObserverConfig): FakeQuantizeState {
  const fixed = config.kind === 'fixed_qparams';
  return {
    observerEnabled: true,
    fakeQuantEnabled: true,
    scale: Float32Array.of(fixed ? config.fixedScale : 1),
    zeroPoint:
      config.qscheme === 'per_channel_affine_float_qparams'
        ? Float32Array.of(0)
        : Int32Array.of(fixed ? config.fixedZeroPoint : 0),
    observer: newObserverState(config),
  };
}

/** One forward step: returns the module's output for the float32 batch `x` of shape `shape`. */
export function fakeQuantizeStep(
  config: ObserverConfig,
  state: FakeQuantizeState,
  x: Float32Array,
  shape: readonly number[],
): Float32Array {
  checkBatch(config, x, shape);
  if (state.observerEnabled) {
    observe(config, state.observer, x, shape);
    const qp = observerQParams(config, state.observer);
    state.scale = qp.scale;
    state.zeroPoint = qp.zeroPoint;
  }
  if (!state.fakeQuantEnabled) return x.slice();
  const grid = {
    quantMin: config.quantMin,
    quantMax: config.quantMax,
    floatZeroPoint: config.qscheme === 'per_channel_affine_float_qparams',
  };
  const perChannel = isPerChannelKind(config.kind);
  const layout = perChannel
    ? channelLayout(config, shape, state.scale.length)
    : { numel: x.length, outer: 1, channels: 1, inner: x.length };
  if (!perChannel && state.scale.length !== 1) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer: config.kind,
      detail: 'per-tensor qparams hold one scale',
    });
  }
  const qp = { scale: state.scale, zeroPoint: state.zeroPoint };
  return fakeQuantizeOnGrid(`${config.kind} input`, x, layout, grid, qp).out;
}

function channelLayout(
  config: ObserverConfig,
  shape: readonly number[],
  scales: number,
): { numel: number; outer: number; channels: number; inner: number } {
  const units = channelUnits(shape, config.chAxis);
  if (!units || units.channels !== scales) {
    throw new QuantdError('OBSERVER_INVALID', {
      observer: config.kind,
      detail: `fake-quantize along ch_axis ${config.chAxis} of a batch of shape ${shapeText(shape)} needs ${scales} channels (one per scale)`,
    });
  }
  return { numel: units.outer * scales * units.inner, ...units };
}
