#!/usr/bin/env node
// npm run bench:observers: GB/s of float32 activations folded into each observer kind, one
// thread — the TypeScript observers, and the kernels' Compute (min/max kinds reduce with the
// native kernels' minmax; the histogram counts with their histc) — beside memcpy measured in the
// same run, and the time to compute qparams from the state.
// Usage: node bench/observers.js [--mib 64] [--reps 3]
import { parseArgs } from 'node:util';
import {
  newObserverState,
  observe,
  observerConfig,
  observerQParams,
} from '../dist/src/core/observers/index.js';
import { InlineExecutor, KernelCompute, loadNative } from '../dist/src/kernels/index.js';
import { measureMemcpy, timeBestAsync } from './timing.js';

const { values } = parseArgs({
  options: { mib: { type: 'string', default: '64' }, reps: { type: 'string', default: '3' } },
});
const bytes = Number(values.mib) * 1024 * 1024;
const reps = Number(values.reps);
const n = bytes / 4;
const x = new Float32Array(n);
for (let i = 0; i < n; i++) x[i] = Math.sin(i * 0.37) * 3 + (i % 1000 === 0 ? 40 : 0);

const memcpy = measureMemcpy(bytes, reps);
console.log(`memcpy ${memcpy.toFixed(2)} GB/s (${values.mib} MiB)`);
const native = loadNative();
const kernels = new KernelCompute(new InlineExecutor(native), `native ${native.isa}`);
console.log('observer                              path          GB/s   × memcpy   qparams ms');
for (const kind of ['min_max', 'moving_average_min_max', 'per_channel_min_max', 'histogram']) {
  const config = observerConfig({ kind });
  const shape = kind.startsWith('per_channel') ? [4096, n / 4096] : [n];
  // each path folds the same batch into its state again and again; the state it ends with gives
  // the qparams timed
  const paths = [
    ['typescript', async (holder) => observe(config, holder.state, x, shape)],
    [
      kernels.backend,
      async (holder) => (holder.state = await kernels.observe({ config, state: holder.state, x, shape })),
    ],
  ];
  for (const [path, run] of paths) {
    const holder = { state: newObserverState(config) };
    const seconds = await timeBestAsync(() => run(holder), reps);
    const qparams = await timeBestAsync(async () => observerQParams(config, holder.state), reps);
    const rate = bytes / seconds / 1e9;
    console.log(
      `${kind.padEnd(36)}  ${path.padEnd(12)} ${rate.toFixed(2).padStart(5)}   ${(rate / memcpy).toFixed(3).padStart(8)}   ${(qparams * 1000).toFixed(1).padStart(10)}`,
    );
  }
}
