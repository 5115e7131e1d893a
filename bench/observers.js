#!/usr/bin/env node
// npm run bench:observers: GB/s of float32 activations folded into each observer kind, one
// thread (the TypeScript observers, as a pool worker runs them), beside memcpy measured in the
// same run, and the time to compute qparams from the state.
// Usage: node bench/observers.js [--mib 64] [--reps 3]
import { parseArgs } from 'node:util';
import {
  newObserverState,
  observe,
  observerConfig,
  observerQParams,
} from '../dist/src/core/observers/index.js';
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
console.log('observer                              GB/s   × memcpy   qparams ms');
for (const kind of ['min_max', 'moving_average_min_max', 'per_channel_min_max', 'histogram']) {
  const config = observerConfig({ kind });
  const state = newObserverState(config);
  const shape = kind.startsWith('per_channel') ? [4096, n / 4096] : [n];
  const seconds = await timeBestAsync(async () => observe(config, state, x, shape), reps);
  const qparams = await timeBestAsync(async () => observerQParams(config, state), reps);
  const rate = bytes / seconds / 1e9;
  console.log(
    `${kind.padEnd(36)} ${rate.toFixed(2).padStart(5)}   ${(rate / memcpy).toFixed(3).padStart(8)}   ${(qparams * 1000).toFixed(1).padStart(10)}`,
  );
}
