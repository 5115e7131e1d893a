#!/usr/bin/env node
// npm run bench:gptq: the GPTQ and AWQ algorithms' costs, one thread — adding a calibration batch
// to a layer's input statistics (Σ xᵀx: tokens · in² / 2 multiply-adds), solving a square layer
// with GPTQ (the inverse Cholesky factor, ~in³/2, and the column loop, ~out · in² / 2), and AWQ's
// scale search (20 grid steps of out · in² / 2: the output error δHδᵀ of every row) and clipping
// search (10 steps of out · in · 128 / 2) — in TypeScript and in the native kernels, which give
// the same bits. Their work is not memory-bound, so the rate
// is multiply-adds per second rather than a ratio to memcpy.
// Each time is the best of three runs (one for runs over five seconds).
// Beside the statistics, a GEMM anchor measured in the same run: numpy's float64 Xᵀ·Y of the same
// [tokens, in] shape (tokens · in² multiply-adds, through the BLAS numpy links, OpenBLAS on Debian,
// on one thread), the rate a tuned BLAS reaches on this CPU; skipped when python3 has no numpy.
// Usage: node bench/gptq.js [--sizes 512,1024,2048] [--tokens 512] [--ts-max 1024]
//                           [--steps statistics,solve,awq]
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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
    steps: { type: 'string', default: 'statistics,solve,awq' },
  },
});
const steps = new Set(values.steps.split(','));
const sizes = values.sizes.split(',').map(Number);
const tokens = Number(values.tokens);
const tsMax = Number(values['ts-max']);
const native = loadNative();
let seed = 1;
const uniform = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5;
/**
 * Best of three runs (one, when it takes more than five seconds; more, up to 50, while they add
 * up to less than a quarter of a second: a millisecond's run is noise otherwise).
 */
const seconds = (f) => {
  let best = Infinity;
  let total = 0;
  for (let rep = 0; rep < 50 && (rep === 0 || best <= 5) && (rep < 3 || total < 0.25); rep++) {
    const t = performance.now();
    f();
    const s = (performance.now() - t) / 1000;
    best = Math.min(best, s);
    total += s;
  }
  return best;
};

/**
 * numpy's float64 GEMM of [tokens, k]ᵀ by [tokens, k] for each size: seconds (best of ten), or
 * null without python3 and numpy. Y is a copy of X: numpy hands X.T @ X itself to BLAS's syrk.
 */
function gemmAnchor() {
  const script = [
    'import sys, time',
    'import numpy as np',
    'tokens = int(sys.argv[1])',
    "for k in map(int, sys.argv[2].split(',')):",
    '    x = np.random.default_rng(k).random((tokens, k), dtype=np.float32).astype(np.float64)',
    '    y, h = x.copy(), np.empty((k, k))',
    "    best = float('inf')",
    '    for _ in range(10):',
    '        t = time.perf_counter(); np.matmul(x.T, y, out=h); best = min(best, time.perf_counter() - t)',
    '    print(k, best)',
  ].join('\n');
  const python = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
  const env = { ...process.env, OPENBLAS_NUM_THREADS: '1', OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1' };
  const r = spawnSync(python, ['-c', script, String(tokens), sizes.join(',')], { env, encoding: 'utf8' });
  if (r.status !== 0) return null;
  return new Map(
    r.stdout
      .trim()
      .split('\n')
      .map((line) => line.split(' ').map(Number)),
  );
}
const gemm = steps.has('statistics') ? gemmAnchor() : null;

console.log(`native ${native.isa}; ${tokens} tokens per batch; TypeScript up to in = ${tsMax}`);
if (gemm === null) console.log('(no GEMM anchor: python3 with numpy not found)');
console.log('in × out      step                path         seconds   G multiply-adds/s');
const row = (size, step, path, s, work) =>
  console.log(
    `${`${size}×${size}`.padEnd(13)} ${step.padEnd(19)} ${path.padEnd(12)} ${s.toFixed(4).padStart(8)}   ${(work / s / 1e9).toFixed(2).padStart(6)}`,
  );
for (const k of sizes) {
  const x = Float32Array.from({ length: tokens * k }, uniform);
  const w = Float32Array.from({ length: k * k }, uniform);
  const statsWork = (tokens * k * (k + 1)) / 2;
  const paths = [['native', native], ...(k <= tsMax ? [['typescript', null]] : [])];
  for (const [path, module] of steps.has('statistics') ? paths : []) {
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
  if (gemm?.has(k)) row(k, 'GEMM anchor', 'numpy BLAS', gemm.get(k), tokens * k * k);
  if (!steps.has('solve') && !steps.has('awq')) continue;
  const hessian = accumulateLinearStats('x', emptyLinearStats(k), x, [tokens, k]).hessian;
  const options = { bits: 4, groupSize: 128, sym: true, damp: 0.01, blockSize: 128, actOrder: false };
  for (const [path, module] of steps.has('solve') ? paths : []) {
    const s = seconds(() => gptqSolve('w', w, k, k, hessian, options, module?.gptqSolve));
    row(k, 'solve (4-bit g128)', path, s, k ** 3);
  }
  if (!steps.has('awq')) continue;
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
