#!/usr/bin/env node
// npm run bench: GB/s of float32 input per op and backend, beside this machine's memcpy
// bandwidth measured in the same run. Ratios are the result; absolute numbers on shared
// machines are noise. Usage: node bench/run.js [--mib 64] [--reps 5] [--json]
import { parseArgs } from 'node:util';
import { benchOps } from './ops.js';
import { measureMemcpy, timeBest } from './timing.js';

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '64' },
    reps: { type: 'string', default: '5' },
    json: { type: 'boolean' },
  },
});
const mib = Number(values.mib);
const reps = Number(values.reps);
const numel = (mib * 1024 * 1024) / 4;

const memcpy = measureMemcpy(mib * 1024 * 1024, reps);
const rows = [];
for (const op of benchOps(numel)) {
  for (const backend of op.backends) {
    const seconds = timeBest(() => backend.run(), reps);
    const gbs = op.inputBytes / seconds / 1e9;
    rows.push({ op: op.name, backend: backend.name, gbs, ratio: gbs / memcpy });
  }
}

if (values.json) {
  console.log(JSON.stringify({ mib, reps, memcpy_gbs: memcpy, rows }, null, 2));
} else {
  console.log(`tensor: ${mib} MiB of float32 (${numel} elements); best of ${reps}; one thread`);
  console.log(`memcpy: ${memcpy.toFixed(2)} GB/s`);
  console.log('');
  console.log('| op | backend | GB/s | × memcpy |');
  console.log('|---|---|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.op} | ${r.backend} | ${r.gbs.toFixed(2)} | ${r.ratio.toFixed(2)} |`);
}
