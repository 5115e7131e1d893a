#!/usr/bin/env node
// npm run bench: GB/s of float32 input per op and backend, beside this machine's memcpy bandwidth
// measured in the same run, and the ratios. Ratios are the result; absolute numbers on shared
// machines are noise. One thread per backend row; the pool rows compare 1 and 2 workers.
// Usage: node bench/run.js [--mib 64] [--reps 5] [--json] [--only native]
import { parseArgs } from 'node:util';
import { InlineExecutor, KernelCompute, loadNative, loadWasm } from '../dist/src/kernels/index.js';
import { PoolCompute } from '../dist/src/pool/index.js';
import { benchLayouts } from './layouts.js';
import { benchOps, referenceCompute } from './ops.js';
import { measureMemcpy, timeBestAsync } from './timing.js';

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '64' },
    reps: { type: 'string', default: '5' },
    json: { type: 'boolean' },
    only: { type: 'string' },
  },
});
const mib = Number(values.mib);
const reps = Number(values.reps);
const numel = (mib * 1024 * 1024) / 4;

const backends = [];
const tryAdd = (name, make) => {
  try {
    backends.push({ name, compute: make() });
  } catch (err) {
    console.error(`(${name} unavailable: ${err.message})`);
  }
};
const nativeCompute = (isa) => {
  const m = loadNative(isa);
  return new KernelCompute(new InlineExecutor(m), `native ${m.isa}`);
};
tryAdd('native', () => nativeCompute());
// the AVX2 twin too where the best ISA is AVX-512: the machine kind the targets were set
// on has AVX2 only (and WebAssembly's 128-bit SIMD is half of it)
if (backends[0]?.compute.backend === 'native avx512') tryAdd('native', () => nativeCompute('avx2'));
tryAdd('wasm', () => {
  const m = loadWasm();
  return new KernelCompute(new InlineExecutor(m), `wasm ${m.isa}`);
});
backends.push({ name: 'js', compute: referenceCompute });
const selected = values.only ? backends.filter((b) => b.name === values.only) : backends;

const memcpy = measureMemcpy(mib * 1024 * 1024, reps);
const rows = [];
const ops = benchOps(numel);
for (const op of ops) {
  for (const b of selected) {
    const seconds = await timeBestAsync(() => op.run(b.compute), b.name === 'js' ? Math.min(reps, 2) : reps);
    const gbs = op.inputBytes / seconds / 1e9;
    rows.push({ op: op.name, backend: b.compute.backend, gbs, ratio: gbs / memcpy });
  }
}

// Scaling: the same op on the worker pool with one and with two workers (every op split).
const scaling = [];
if (!values.only || values.only === 'native') {
  const native = loadNative();
  const kernels = { backend: 'native', isa: native.isa, module: native, fallbacks: [] };
  const sharedOps = benchOps(numel, { shared: true });
  for (const opName of ['quantize per_tensor int8', 'choose+quantize+pack per_group int4 g128']) {
    const op = sharedOps.find((o) => o.name === opName);
    const perThreads = {};
    for (const threads of [1, 2]) {
      const pool = new PoolCompute(kernels, { threads, inlineLimit: 0 });
      await op.run(pool); // start the workers
      const seconds = await timeBestAsync(() => op.run(pool), reps);
      perThreads[threads] = op.inputBytes / seconds / 1e9;
      await pool.close();
    }
    scaling.push({
      op: opName,
      one: perThreads[1],
      two: perThreads[2],
      speedup: perThreads[2] / perThreads[1],
    });
  }
}

const layoutMib = 4;
const layouts = values.only ? [] : await benchLayouts(mib, layoutMib, reps);

if (values.json) {
  console.log(JSON.stringify({ mib, reps, memcpy_gbs: memcpy, rows, scaling, layouts }, null, 2));
} else {
  console.log(`tensor: ${mib} MiB of float32 (${numel} elements); best of ${reps}`);
  console.log(`memcpy: ${memcpy.toFixed(2)} GB/s (one thread, same run)`);
  console.log('');
  console.log('| op | backend | GB/s | × memcpy |');
  console.log('|---|---|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.op} | ${r.backend} | ${r.gbs.toFixed(2)} | ${r.ratio.toFixed(2)} |`);
  if (scaling.length) {
    console.log('');
    console.log('| op (worker pool, native) | 1 worker GB/s | 2 workers GB/s | speedup |');
    console.log('|---|---:|---:|---:|');
    for (const s of scaling)
      console.log(`| ${s.op} | ${s.one.toFixed(2)} | ${s.two.toFixed(2)} | ${s.speedup.toFixed(2)}× |`);
  }
  if (layouts.length) {
    console.log('');
    console.log(`Interop layouts (kernels: ${mib} MiB; TypeScript: ${layoutMib} MiB, [rows, ${4096}])`);
    console.log('');
    console.log('| layout | backend | GB/s | × memcpy |');
    console.log('|---|---|---:|---:|');
    for (const r of layouts)
      console.log(`| ${r.layout} | ${r.backend} | ${r.gbs.toFixed(2)} | ${(r.gbs / memcpy).toFixed(2)} |`);
  }
}
