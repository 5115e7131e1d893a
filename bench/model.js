#!/usr/bin/env node
// npm run bench:model — a ~1 GiB synthetic bf16 llama-like model (scripts/synthetic-model.js:
// hidden 2048, vocab 32000, 11 layers) quantized to int4 per_group g128 symmetric by recipe
// (embeddings skipped, 1-D norms passed through), one run, three ways:
//  1. quantd quantize --recipe: tensors concurrently on the worker pool (default concurrency);
//  2. the same with --concurrency 1 (one tensor at a time, each still split across workers);
//  3. sequential single-tensor calls: each tensor POSTed to a running server's /v1/quantize as
//     application/octet-stream, one after another — the script a user writes without model runs.
// Prints wall time, GB/s of model bytes, peak RSS (runs 1–2, whole process incl. workers) against
// the bound 3 × largest tensor + 256 MiB, and memcpy GB/s measured in the same run.
import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  openSync,
  readSync,
  closeSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { llamaTensors, writeModelFile } from '../scripts/synthetic-model.js';
import { measureMemcpy } from './timing.js';

const { values } = parseArgs({
  options: {
    layers: { type: 'string', default: '11' },
    json: { type: 'boolean' },
    keep: { type: 'boolean' },
  },
});
const ROOT = new URL('..', import.meta.url).pathname;
const dir = join(tmpdir(), 'quantd-bench-model');
mkdirSync(dir, { recursive: true });

const tensors = llamaTensors({
  layers: Number(values.layers),
  hidden: 2048,
  vocab: 32000,
  heads: 16,
  kvHeads: 8,
});
const model = join(dir, `model-${values.layers}.safetensors`);
if (!existsSync(model)) {
  console.error(`generating ${model} (once; reused by later runs)…`);
  writeModelFile(`${model}.part`, tensors);
  rmSync(model, { force: true });
  (await import('node:fs')).renameSync(`${model}.part`, model);
}
const modelBytes = statSync(model).size;
const SIZE = { F32: 4, F16: 2, BF16: 2, I64: 8 };
const largest = Math.max(...tensors.map(([, d, s]) => s.reduce((a, b) => a * b, SIZE[d])));
const bound = 3 * largest + 256 * 2 ** 20;
const recipe = join(dir, 'recipe.json');
writeFileSync(
  recipe,
  JSON.stringify({
    default: { qdtype: 'int4', scheme: 'per_group', group_size: 128, mode: 'symmetric' },
    rules: [{ glob: '*.embed_tokens.*', skip: true }],
  }),
);

/** Runs the CLI in a child process that reports its own peak RSS (workers included) at exit. */
function cli(args) {
  const script = `
    const { main } = await import(${JSON.stringify(join(ROOT, 'dist/src/cli/main.js'))});
    const code = await main(${JSON.stringify(args)});
    process.stderr.write('maxrss ' + process.resourceUsage().maxRSS + '\\n');
    process.exit(code);`;
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (c) => (err += c));
    child.on('exit', (code) => {
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      const rss = Number(/maxrss (\d+)/.exec(err)?.[1] ?? NaN) * 1024;
      if (code !== 0) reject(new Error(`quantd ${args.join(' ')} exited ${code}: ${err}`));
      else resolve({ seconds, rss });
    });
  });
}

/** Starts `quantd serve` on a free port; resolves with its port and a stop function. */
function server() {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(ROOT, 'bin/quantd.js'), 'serve'], {
      env: {
        ...process.env,
        QUANTD_HTTP_PORT: '0',
        QUANTD_GRPC_PORT: '0',
        QUANTD_HOST: '127.0.0.1',
        QUANTD_LOG_LEVEL: 'silent',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    child.stdout.on('data', (c) => {
      const m = /http:\/\/[^:]+:(\d+)/.exec(String(c));
      if (m) resolve({ port: Number(m[1]), stop: () => child.kill('SIGTERM') });
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
}

function post(port, path, body, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () =>
        res.statusCode === 200
          ? resolve(Buffer.concat(chunks))
          : reject(new Error(`${res.statusCode} ${Buffer.concat(chunks)}`)),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Run 3: every tensor by itself through /v1/quantize, results written to one file in order. */
async function sequentialCalls() {
  const { port, stop } = await server();
  const fd = openSync(model, 'r');
  const prefix = Buffer.alloc(8);
  readSync(fd, prefix, 0, 8, 0);
  const n = Number(prefix.readBigUInt64LE());
  const json = Buffer.alloc(n);
  readSync(fd, json, 0, n, 8);
  const header = JSON.parse(json);
  const out = openSync(join(dir, 'sequential.bin'), 'w');
  const t0 = process.hrtime.bigint();
  try {
    for (const [name, entry] of Object.entries(header)) {
      if (name === '__metadata__') continue;
      const [b, e] = entry.data_offsets;
      const data = Buffer.alloc(e - b);
      readSync(fd, data, 0, e - b, 8 + n + b);
      const quantize = entry.shape.length === 2 && entry.dtype !== 'I64' && !name.includes('embed_tokens');
      const result = quantize
        ? await post(port, '/v1/quantize?qdtype=int4&scheme=per_group&group_size=128&mode=symmetric', data, {
            'content-type': 'application/octet-stream',
            'x-tensor-dtype': entry.dtype,
            'x-tensor-shape': entry.shape.join(','),
          })
        : data;
      (await import('node:fs')).writeSync(out, result);
    }
  } finally {
    closeSync(fd);
    closeSync(out);
    stop();
  }
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, rss: NaN };
}

const memcpy = measureMemcpy(256 * 2 ** 20, 5);
const out = join(dir, 'out.safetensors');
const rows = [
  [
    'quantd quantize --recipe (concurrent tensors)',
    await cli(['quantize', model, '-o', out, '--recipe', recipe, '-q', '--no-progress', '--force']),
  ],
  [
    'quantd quantize --recipe --concurrency 1',
    await cli([
      'quantize',
      model,
      '-o',
      out,
      '--recipe',
      recipe,
      '-q',
      '--no-progress',
      '--force',
      '--concurrency',
      '1',
    ]),
  ],
  ['sequential single-tensor POST /v1/quantize', await sequentialCalls()],
];
if (!values.keep) rmSync(join(dir, 'sequential.bin'), { force: true });

const gib = (b) => (b / 2 ** 30).toFixed(2);
const mib = (b) => (Number.isFinite(b) ? `${(b / 2 ** 20).toFixed(0)} MiB` : 'n/a');
const result = rows.map(([how, r]) => ({
  how,
  seconds: r.seconds,
  gbs: modelBytes / r.seconds / 1e9,
  peak_rss: r.rss,
}));
if (values.json) {
  console.log(
    JSON.stringify(
      {
        model_bytes: modelBytes,
        largest_tensor: largest,
        rss_bound: bound,
        memcpy_gbs: memcpy,
        rows: result,
      },
      null,
      2,
    ),
  );
} else {
  console.log(
    `model: ${tensors.length} tensors, ${gib(modelBytes)} GiB bf16, largest tensor ${mib(largest)}; int4 per_group g128 symmetric by recipe`,
  );
  console.log(
    `memcpy: ${memcpy.toFixed(2)} GB/s (one thread, same run); RSS bound 3 × largest + 256 MiB = ${mib(bound)}\n`,
  );
  console.log('| run | wall s | GB/s | × sequential calls | peak RSS | within bound |');
  console.log('|---|---|---|---|---|---|');
  const seq = result[2].seconds;
  for (const r of result) {
    const within = Number.isFinite(r.peak_rss) ? (r.peak_rss < bound ? 'yes' : 'NO') : '';
    console.log(
      `| ${r.how} | ${r.seconds.toFixed(2)} | ${r.gbs.toFixed(2)} | ${(seq / r.seconds).toFixed(2)} | ${mib(r.peak_rss)} | ${within} |`,
    );
  }
}
