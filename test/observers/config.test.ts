/**
 * Observer options: torch's defaults, the clear refusals (OBSERVER_INVALID) for what torch
 * rejects or would compute nonsense from, and the export form round trip.
 */
import { describe, expect, it } from 'vitest';

import {
  fakeQuantizeStep,
  fusedFakeQuantizeStep,
  newFakeQuantizeState,
  newObserverState,
  observe,
  observerConfig,
  observerQParams,
  type ObserverOptions,
} from '../../src/core/observers/index.js';
import { isQuantdError } from '../../src/errors/index.js';
import { exportObserver, importObserver } from '../../src/format/observer-state.js';

function refusal(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    if (isQuantdError(e)) return `${e.code}: ${e.message}`;
    throw e;
  }
  throw new Error('expected a refusal');
}

describe('observer options', () => {
  it("fills in torch's defaults", () => {
    const c = observerConfig({ kind: 'min_max' });
    expect([c.dtype, c.qscheme, c.quantMin, c.quantMax, c.reduceRange, c.customRange]).toEqual([
      'quint8',
      'per_tensor_affine',
      0,
      255,
      false,
      false,
    ]);
    expect(c.eps).toBe(2 ** -23);
    expect(observerConfig({ kind: 'per_channel_min_max' }).qscheme).toBe('per_channel_affine');
    expect(observerConfig({ kind: 'histogram' })).toMatchObject({ bins: 2048, upsampleRate: 128 });
    expect(observerConfig({ kind: 'moving_average_min_max' }).averagingConstant).toBe(Math.fround(0.01));
    expect(observerConfig({ kind: 'min_max', dtype: 'qint8', reduce_range: true })).toMatchObject({
      quantMin: -64,
      quantMax: 63,
    });
    // a custom range is halved by reduce_range, rounding down (torch's quant_min // 2)
    expect(
      observerConfig({ kind: 'min_max', dtype: 'qint8', quant_min: -7, quant_max: 7, reduce_range: true }),
    ).toMatchObject({ quantMin: -4, quantMax: 3 });
  });

  const bad: [string, ObserverOptions, RegExp][] = [
    ['an unknown kind', { kind: 'percentile' }, /kind must be one of min_max/],
    [
      'an unknown option',
      { kind: 'min_max', colour: 1 } as ObserverOptions,
      /min_max takes no option colour/,
    ],
    [
      'an option of another kind',
      { kind: 'min_max', bins: 10 },
      /min_max takes no option bins \(it takes: kind, dtype/,
    ],
    [
      'eps on fixed qparams',
      { kind: 'fixed_qparams', scale: 0.1, zero_point: 0, eps: 1e-3 },
      /fixed_qparams takes no option eps/,
    ],
    [
      'a per-channel qscheme on a per-tensor observer',
      { kind: 'min_max', qscheme: 'per_channel_affine' },
      /does not fit/,
    ],
    [
      'a per-tensor qscheme on a per-channel observer',
      { kind: 'per_channel_min_max', qscheme: 'per_tensor_affine' },
      /does not fit/,
    ],
    [
      'symmetric quint8 with reduce_range',
      { kind: 'min_max', qscheme: 'per_tensor_symmetric', reduce_range: true },
      /not defined for quint8/,
    ],
    ['a range without 0', { kind: 'min_max', quant_min: 1, quant_max: 10 }, /must contain 0/],
    [
      'a range outside the dtype',
      { kind: 'min_max', dtype: 'qint8', quant_min: -200, quant_max: 10 },
      /quant_min must be an integer in \[-128, 127\]/,
    ],
    ['half a range', { kind: 'min_max', quant_min: 0 }, /go together/],
    ['eps 0', { kind: 'min_max', eps: 0 }, /eps must be a finite number/],
    [
      'an averaging constant above 1',
      { kind: 'moving_average_min_max', averaging_constant: 2 },
      /averaging_constant/,
    ],
    ['0 bins', { kind: 'histogram', bins: 0 }, /bins must be an integer/],
    ['fixed qparams without a scale', { kind: 'fixed_qparams', zero_point: 0 }, /needs scale and zero_point/],
    [
      'a fixed zero point outside the range',
      { kind: 'fixed_qparams', scale: 0.1, zero_point: 300 },
      /zero_point must be an integer in \[0, 255\]/,
    ],
  ];
  for (const [what, options, message] of bad) {
    it(`refuses ${what}`, () => {
      const text = refusal(() => observerConfig(options));
      expect(text.split(':')[0]).toBe('OBSERVER_INVALID');
      expect(text).toMatch(message);
    });
  }

  it('refuses a batch whose channel count or shape does not fit, and leaves the state as it was', () => {
    const config = observerConfig({ kind: 'per_channel_min_max', ch_axis: 1 });
    const state = newObserverState(config);
    observe(config, state, Float32Array.of(1, 2, 3, 4, 5, 6), [2, 3]);
    const before = [Array.from(state.lo), Array.from(state.hi), state.observed];
    expect(refusal(() => observe(config, state, Float32Array.of(1, 2, 3, 4), [2, 2]))).toMatch(
      /OBSERVER_INVALID: .*2 channels on axis 1; the observer has seen 3/,
    );
    expect(refusal(() => observe(config, state, Float32Array.of(1, 2, 3), [2, 3]))).toMatch(/holds 3 values/);
    expect(refusal(() => observe(config, state, Float32Array.of(1, 2, 3), [3]))).toMatch(
      /ch_axis 1 is out of range/,
    );
    expect([Array.from(state.lo), Array.from(state.hi), state.observed]).toEqual(before);
  });

  it('FakeQuantize and its fused variant refuse a batch whose shape does not hold its values', () => {
    const config = observerConfig({ kind: 'moving_average_per_channel_min_max' });
    for (const step of [fakeQuantizeStep, fusedFakeQuantizeStep]) {
      const state = newFakeQuantizeState(config);
      state.observerEnabled = false; // the check comes first whatever the switches
      expect(refusal(() => step(config, state, Float32Array.of(1, 2, 3), [2, 2]))).toMatch(
        /OBSERVER_INVALID: .*the batch holds 3 values, its shape \[2, 2\] says 4/,
      );
    }
  });

  it('an infinite observed range is OBSERVED_RANGE_INVALID, not an infinite scale', () => {
    const config = observerConfig({ kind: 'min_max' });
    const state = newObserverState(config);
    observe(config, state, Float32Array.of(1, Infinity), [2]);
    expect(refusal(() => observerQParams(config, state))).toMatch(
      /^OBSERVED_RANGE_INVALID: .*infinity was observed/,
    );
  });
});

describe('export form quantd.observer/1', () => {
  it('restores every kind bit for bit, NaN included, and goes on identically', () => {
    const kinds: ObserverOptions[] = [
      { kind: 'min_max' },
      { kind: 'moving_average_min_max', averaging_constant: 0.3 },
      { kind: 'per_channel_min_max', dtype: 'qint8', qscheme: 'per_channel_symmetric' },
      { kind: 'moving_average_per_channel_min_max' },
      { kind: 'histogram', bins: 64, upsample_rate: 8 },
    ];
    for (const options of kinds) {
      const config = observerConfig(options);
      const a = newObserverState(config);
      observe(config, a, Float32Array.of(-1, 2, 0.5, 3), [2, 2]);
      const { config: c2, state: b } = importObserver(JSON.parse(JSON.stringify(exportObserver(config, a))));
      expect(c2.options).toEqual(options);
      for (const s of [a, b]) observe(c2, s, Float32Array.of(-4, 1, 7, 0.25), [2, 2]);
      expect(exportObserver(c2, b)).toEqual(exportObserver(config, a));
      expect(observerQParams(c2, b)).toEqual(observerQParams(config, a));
    }
  });

  it('refuses a damaged export', () => {
    const config = observerConfig({ kind: 'histogram', bins: 16 });
    const good = exportObserver(config, newObserverState(config));
    expect(refusal(() => importObserver({ ...good, format: 'quantd.observer/9' }))).toMatch(
      /format must be quantd.observer\/1/,
    );
    expect(refusal(() => importObserver({ ...good, histogram: 'AAAAAA==' }))).toMatch(
      /histogram holds 1 bins; the observer has 16/,
    );
    expect(refusal(() => importObserver({ ...good, min: 'AAA' }))).toMatch(/min is not whole float32 values/);
    expect(refusal(() => importObserver({ ...good, observed: -1 }))).toMatch(/observed must be a count/);
    expect(refusal(() => importObserver({ ...good, observer: { kind: 'histogram', bins: -1 } }))).toMatch(
      /bins must be/,
    );
  });
});
