/**
 * Observers through the kernels' Compute (every native ISA this CPU has, and wasm): min/max
 * observers reduce batches with the kernels' minmax, the others (and batches holding NaN) run
 * the TypeScript reference; either way every state and qparams after every batch of the torch
 * sequences equals the core observers' (and so torch's).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import { bits, f32 } from './helpers.js';

import type { ObserverState } from '../../src/core/observers/index.js';
import {
  newObserverState,
  observe,
  observerConfig,
  observerQParams,
  type ObserverOptions,
} from '../../src/core/observers/index.js';
import { InlineExecutor, KernelCompute } from '../../src/kernels/index.js';
import { parityVariants } from '../kernels/helpers.js';

const golden = JSON.parse(readFileSync(new URL('./observers.json', import.meta.url), 'utf8')) as {
  cases: { id: string; observer?: ObserverOptions; steps: { x: { shape: number[]; data: string } }[] }[];
};

const outcome = (run: () => unknown): unknown => {
  try {
    return run();
  } catch (err) {
    return String(err);
  }
};

describe.each(parityVariants())('observers on %s', (_name, module) => {
  const compute = new KernelCompute(new InlineExecutor(module), 'test');
  for (const c of golden.cases.filter((k) => k.observer && k.observer.kind !== 'fixed_qparams')) {
    it(c.id, async () => {
      const config = observerConfig(c.observer!);
      let viaKernels: ObserverState = newObserverState(config);
      const core = newObserverState(config);
      for (const [i, step] of c.steps.entries()) {
        const x = f32(step.x.data);
        const expected = outcome(() => observe(config, core, x, step.x.shape));
        try {
          viaKernels = await compute.observe({ config, state: viaKernels, x, shape: step.x.shape });
          expect(expected, `step ${i}`).toBeUndefined();
        } catch (err) {
          expect(String(err), `step ${i}`).toBe(expected);
        }
        expect(bits(viaKernels.lo), `step ${i} min`).toEqual(bits(core.lo));
        expect(bits(viaKernels.hi), `step ${i} max`).toEqual(bits(core.hi));
        expect(viaKernels.observed).toBe(core.observed);
        expect(outcome(() => observerQParams(config, viaKernels))).toEqual(
          outcome(() => observerQParams(config, core)),
        );
      }
    });
  }
});
