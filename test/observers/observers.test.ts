/**
 * Observers and FakeQuantize against torch 1.13, bit for bit, over the multi-batch sequences
 * of test/observers/generate.py (observers.json): after every batch the running range, the
 * histogram and the qparams (or the refusal) must equal torch's.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import { bits, f32 } from './helpers.js';

import {
  chooseQuantizationParams,
  fakeQuantizeStep,
  floorDivide,
  fusedFakeQuantizeStep,
  histc,
  torchSum,
  newFakeQuantizeState,
  newObserverState,
  observe,
  observerConfig,
  observerQParams,
  type ObserverOptions,
} from '../../src/core/observers/index.js';
import { isQuantdError } from '../../src/errors/index.js';

interface Batch {
  shape: number[];
  data: string;
}
interface ObserverStep {
  x: Batch;
  observe_error?: string;
  state: { min?: string; max?: string; histogram?: string };
  qparams: { error?: string; scale?: string; zero_point?: number[]; zero_point_float?: string };
}
interface FakeQuantizeStepCase {
  observer_enabled: boolean;
  fake_quant_enabled: boolean;
  x: Batch;
  y: string;
  scale: string;
  zero_point?: number[];
  zero_point_float?: string;
  state: { min?: string; max?: string; histogram?: string };
}
interface Case {
  id: string;
  observer?: ObserverOptions;
  fake_quantize?: ObserverOptions;
  fixed?: boolean;
  fused?: boolean;
  steps: (ObserverStep & FakeQuantizeStepCase)[];
}

const golden = JSON.parse(readFileSync(new URL('./observers.json', import.meta.url), 'utf8')) as {
  torch_version: string;
  cases: Case[];
  primitives: {
    sums: { x: string; sum: string }[];
    floor_divide: { a: string; b: string; q: string };
    histc: { x: string; bins: number; min: number; max: number; histogram: string }[];
    choose_qparams: {
      min: number;
      max: number;
      qmin: number;
      qmax: number;
      symmetric: boolean;
      scale: number;
      zero_point: number;
    }[];
  };
};

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
  } catch (e) {
    return isQuantdError(e) ? e.code : String(e);
  }
  return undefined;
}

describe(`observers match torch ${golden.torch_version}`, () => {
  const observerCases = golden.cases.filter((c) => c.observer);
  it('covers every observer kind, the histogram search and the refusals', () => {
    const kinds = new Set(observerCases.map((c) => c.observer!.kind));
    expect([...kinds].sort()).toEqual(
      [
        'fixed_qparams',
        'histogram',
        'min_max',
        'moving_average_min_max',
        'moving_average_per_channel_min_max',
        'per_channel_min_max',
      ].sort(),
    );
    expect(observerCases.some((c) => c.steps.some((s) => s.qparams.error))).toBe(true);
    expect(observerCases.some((c) => c.steps.some((s) => s.observe_error))).toBe(true);
  });

  for (const c of observerCases) {
    it(c.id, () => {
      const config = observerConfig(c.observer!);
      const state = newObserverState(config);
      c.steps.forEach((step, i) => {
        const x = f32(step.x.data);
        if (step.observe_error) {
          // torch fails on int(NaN) / int(inf) after half-updating itself; quantd refuses first
          const before = JSON.stringify([Array.from(state.lo), Array.from(state.hi)]);
          expect(
            codeOf(() => observe(config, state, x, step.x.shape)),
            `step ${i}`,
          ).toBe('INPUT_NOT_FINITE');
          expect(JSON.stringify([Array.from(state.lo), Array.from(state.hi)])).toBe(before);
        } else {
          observe(config, state, x, step.x.shape);
        }
        if (step.state.min !== undefined) {
          expect(bits(state.lo), `step ${i} min`).toEqual(bits(f32(step.state.min)));
          expect(bits(state.hi), `step ${i} max`).toEqual(bits(f32(step.state.max!)));
        }
        if (step.state.histogram !== undefined) {
          expect(bits(state.histogram!), `step ${i} histogram`).toEqual(bits(f32(step.state.histogram)));
        }
        const expected = step.qparams;
        const finiteScale = expected.scale !== undefined && f32(expected.scale).every(Number.isFinite);
        if (expected.error || !finiteScale) {
          // torch asserts (NaN observed) or returns an infinite scale: quantd refuses
          expect(
            codeOf(() => observerQParams(config, state)),
            `step ${i}`,
          ).toBe('OBSERVED_RANGE_INVALID');
          return;
        }
        const qp = observerQParams(config, state);
        expect(bits(qp.scale), `step ${i} scale`).toEqual(bits(f32(expected.scale!)));
        if (expected.zero_point_float !== undefined) {
          expect(bits(qp.zeroPoint as Float32Array), `step ${i} zero_point`).toEqual(
            bits(f32(expected.zero_point_float)),
          );
        } else {
          expect(Array.from(qp.zeroPoint), `step ${i} zero_point`).toEqual(expected.zero_point);
        }
      });
    });
  }
});

describe(`FakeQuantize and FusedMovingAvgObsFakeQuantize match torch ${golden.torch_version}`, () => {
  it('covers the fused module', () => {
    expect(golden.cases.filter((k) => k.fused).length).toBeGreaterThanOrEqual(4);
  });
  for (const c of golden.cases.filter((k) => k.fake_quantize)) {
    it(c.id, () => {
      const config = observerConfig(c.fake_quantize!);
      const state = newFakeQuantizeState(config);
      c.steps.forEach((step, i) => {
        state.observerEnabled = step.observer_enabled;
        state.fakeQuantEnabled = step.fake_quant_enabled;
        const forward = c.fused ? fusedFakeQuantizeStep : fakeQuantizeStep;
        const y = forward(config, state, f32(step.x.data), step.x.shape);
        expect(bits(y), `step ${i} output`).toEqual(bits(f32(step.y)));
        expect(bits(state.scale), `step ${i} scale`).toEqual(bits(f32(step.scale)));
        if (step.zero_point_float !== undefined) {
          expect(bits(state.zeroPoint as Float32Array), `step ${i} zero_point`).toEqual(
            bits(f32(step.zero_point_float)),
          );
        } else {
          expect(Array.from(state.zeroPoint), `step ${i} zero_point`).toEqual(step.zero_point);
        }
        if (step.state.min !== undefined) {
          expect(bits(state.observer.lo), `step ${i} min`).toEqual(bits(f32(step.state.min)));
        }
      });
    });
  }
});

describe(`the float32 primitives match torch ${golden.torch_version}`, () => {
  const p = golden.primitives;
  it('torch.sum in torch order (AVX2 cascade), every length class', () => {
    for (const { x, sum } of p.sums) {
      const v = f32(x);
      expect(bits(Float32Array.of(torchSum(v))), `length ${v.length}`).toEqual(bits(f32(sum)));
    }
  });
  it('torch.div(rounding_mode="floor")', () => {
    const a = f32(p.floor_divide.a);
    const b = f32(p.floor_divide.b);
    const q = a.map((v, i) => floorDivide(v, b[i]!));
    expect(bits(q)).toEqual(bits(f32(p.floor_divide.q)));
  });
  it('torch.histc (edges, the last bin closed, out-of-range and min == max)', () => {
    for (const h of p.histc) {
      const out = new Float32Array(h.bins);
      histc(f32(h.x), h.bins, h.min, h.max, out);
      expect(bits(out), `${h.bins} bins [${h.min}, ${h.max}]`).toEqual(bits(f32(h.histogram)));
    }
  });
});

describe(`ATen ChooseQuantizationParams matches torch ${golden.torch_version}`, () => {
  it('over ranges 1e-7 to 1e3 wide, affine and symmetric', () => {
    const cases = golden.primitives.choose_qparams;
    expect(cases.length).toBeGreaterThan(300);
    const got = cases.map((c) => chooseQuantizationParams(c.min, c.max, c.qmin, c.qmax, c.symmetric));
    expect(got).toEqual(cases.map((c) => ({ scale: c.scale, zeroPoint: c.zero_point })));
  });
});
