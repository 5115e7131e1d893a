#!/usr/bin/env node
// npm run bench:gptq: the GPTQ and AWQ algorithms' costs, one thread — adding a calibration batch
// to a layer's input statistics (Σ xᵀx: tokens · in² / 2 multiply-adds), solving a square layer
// with GPTQ (the inverse Cholesky factor, ~in³/2, and the column loop, ~out · in² / 2), and AWQ's
// scale search (20 grid steps of out · in² / 2: the output error δHδᵀ of every row) and clipping
// search (10 steps of out · in · 128 / 2) — in TypeScript and in the native kernels, which give
// the same bits. Their work is not memory-bound, so the rate
// is multiply-adds per second rather than a ratio to memcpy.
// Each time is the best of three runs (one for runs over five seconds).
// Usage: node bench/gptq.js [--sizes 512,1024,2048] [--tokens 512] [--ts-max 1024]
import { parseArgs } from 'node:util';
import { gptqSolve } from '../dist/src/core/interop/gptq-solve.js';
import { awqPlannedWeight, awqScalesFromStats } from '../dist/src/core/interop/awq-stats.js';
import { accumulateLinearStats, addLinearStats, emptyLinearStats } from '../dist/src/core/linear-stats.js';
import { loadNative } from '../dist/src/kernels/index.js';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '512,1024,2048' },
    tokens: { type: 'string', default: '512' },
    'ts-max': { type: 'string', default: '1024' },
  },
});
const sizes = values.sizes.split(',').map(Number);
const tokens = Number(values.tokens);
const tsMax = Number(values['ts-max']);
const native = loadNative();
let seed = 1;
const uniform = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5;
/** Best of three runs (one, when it takes more than five seconds). */
const seconds = (f) => {
  let best = Infinity;
  for (let rep = 0; rep < 3 && (rep === 0 || best <= 5); rep++) {
    const t = performance.now();
    f();
    best = Math.min(best, (performance.now() - t) / 1000);
  }
  return best;
};

console.log(`native ${native.isa}; ${tokens} tokens per batch; TypeScript up to in = ${tsMax}`);
console.log('in × out      step                path         seconds   G multiply-adds/s');
const row = (size, step, path, s, work) =>
  console.log(
    `${`${size}×${size}`.padEnd(13)} ${step.padEnd(19)} ${path.padEnd(12)} ${s.toFixed(2).padStart(7)}   ${(work / s / 1e9).toFixed(2).padStart(6)}`,
  );
for (const k of sizes) {
  const x = Float32Array.from({ length: tokens * k }, uniform);
  const w = Float32Array.from({ length: k * k }, uniform);
  const statsWork = (tokens * k * (k + 1)) / 2;
  const paths = [['native', native], ...(k <= tsMax ? [['typescript', null]] : [])];
  for (const [path, module] of paths) {
    const h = new Float64Array(k * k);
    const a = new Float64Array(k);
    row(
      k,
      'statistics',
      path,
      seconds(() => (module ? module.linearStatsAdd(h, a, k, x) : addLinearStats(h, a, k, x))),
      statsWork,
    );
  }
  const hessian = accumulateLinearStats('x', emptyLinearStats(k), x, [tokens, k]).hessian;
  const options = { bits: 4, groupSize: 128, sym: true, damp: 0.01, blockSize: 128, actOrder: false };
  for (const [path, module] of paths) {
    const s = seconds(() => gptqSolve('w', w, k, k, hessian, options, module?.gptqSolve));
    row(k, 'solve (4-bit g128)', path, s, k ** 3);
  }
  const stats = { inFeatures: k, tokens, hessian, absSum: new Float64Array(k).fill(tokens / 4) };
  const awq = { bits: 4, groupSize: 128, zeroPoint: true, nGrid: 20, maxShrink: 0.5 };
  for (const [path, module] of paths) {
    const kernel = module?.quadraticForms;
    const found = awqScalesFromStats(stats, [w], [k], awq, kernel);
    row(
      k,
      'awq scales (g128)',
      path,
      seconds(() => awqScalesFromStats(stats, [w], [k], awq, kernel)),
      10 * k ** 3,
    );
    const plan = { scales: found.scales, rowDivide: null, clipStats: stats };
    const s = seconds(() => awqPlannedWeight(w, k, k, plan, awq, kernel));
    row(k, 'awq clip (g128)', path, s, 10 * k * k * 64);
  }
}
