#!/usr/bin/env node
// npm run bench:model — a synthetic llama-shaped bfloat16 checkpoint (scripts/synthetic-model.js;
// by default hidden 4096, intermediate 11008, vocab 32000, 2 layers: 1.33 GB, the shapes of a 7B
// model's tensors) quantized whole, each run in a child process as a user runs it:
//  1. quantd quantize --recipe: int4 per_group g128 symmetric (embeddings skipped, norms passed through);
//  2. quantd quantize --layout gguf:type=Q4_K, and 3. gguf:type=Q8_0 (every 2-D weight);
//  4. --layout gptq and 5. --layout awq (4-bit g128 round-to-nearest, for vLLM / transformers);
//  6. one 512 MiB float32 tensor (a file of its own) → int8 per_channel, the CLI's single tensor;
//  7. sequential single-tensor calls: each tensor POSTed to a running server's /v1/quantize as
//     application/octet-stream (int4 g128), one after another — the script a user writes without
//     model runs.
// Beside each: the I/O floor measured in the same run — reading the run's input from the page
// cache plus writing its output bytes and fdatasyncing them — and the run's ratio to it; peak RSS
// (whole process, workers included) against 3 × the largest tensor + 256 MiB (the model's; the
// 512 MiB tensor's own bound is 1.75 GiB); memcpy GB/s.
import { spawn } from 'node:child_process';
import {
  existsSync,
  fdatasyncSync,
  mkdirSync,
  openSync,
  readSync,
  readdirSync,
  closeSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { llamaTensors, writeModelFile } from '../scripts/synthetic-model.js';
import { startServe } from './serve.js';
import { measureMemcpy } from './timing.js';

const { values } = parseArgs({
  options: {
    layers: { type: 'string', default: '2' },
    hidden: { type: 'string', default: '4096' },
    intermediate: { type: 'string', default: '11008' },
    vocab: { type: 'string', default: '32000' },
    json: { type: 'boolean' },
    keep: { type: 'boolean' },
  },
});
const ROOT = new URL('..', import.meta.url).pathname;
const dir = join(tmpdir(), 'quantd-bench-model');
mkdirSync(dir, { recursive: true });

const shape = {
  layers: Number(values.layers),
  hidden: Number(values.hidden),
  intermediate: Number(values.intermediate),
  vocab: Number(values.vocab),
  heads: 32,
  kvHeads: 32,
};
const tensors = llamaTensors(shape);
const model = join(dir, `model-${Object.values(shape).join('-')}.safetensors`);
if (!existsSync(model)) {
  console.error(`generating ${model} (once; reused by later runs)…`);
  writeModelFile(`${model}.part`, tensors);
  rmSync(model, { force: true });
  (await import('node:fs')).renameSync(`${model}.part`, model);
}
const modelBytes = statSync(model).size;
// the single-tensor run: one 512 MiB float32 weight, as a user quantizes one tensor with the CLI
const single = join(dir, 'tensor-f32-8192x16384.safetensors');
if (!existsSync(single)) {
  console.error(`generating ${single} (once; reused by later runs)…`);
  writeModelFile(`${single}.part`, [['model.layers.0.mlp.down_proj.weight', 'F32', [8192, 16384]]]);
  (await import('node:fs')).renameSync(`${single}.part`, single);
}
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

/**
 * Runs the CLI in a child process that reports its own peak RSS (workers included) at exit: the
 * high-water mark of its memory (VmHWM) where Linux has it, because getrusage's maxRSS of a child
 * starts at its parent's RSS when it was forked (this script holds the memcpy buffers by then).
 */
function cli(args) {
  const script = `
    const { main } = await import(${JSON.stringify(join(ROOT, 'dist/src/cli/main.js'))});
    const { existsSync, readFileSync } = await import('node:fs');
    const code = await main(${JSON.stringify(args)});
    const hwm = existsSync('/proc/self/status') && /VmHWM:\\s*(\\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    process.stderr.write('maxrss ' + (hwm ? hwm[1] : process.resourceUsage().maxRSS) + '\\n');
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
async function server() {
  const { child, port } = await startServe({ QUANTD_LOG_LEVEL: 'silent' });
  return { port, stop: () => child.kill('SIGTERM') };
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
      writeSync(out, result);
    }
  } finally {
    closeSync(fd);
    closeSync(out);
    stop();
  }
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, rss: NaN };
}

/**
 * Seconds to read `path` whole from the page cache as `cat` does, 128 KiB at a time into one
 * buffer that stays in cache (4× faster here than reads of 1 MiB or more, which copy at memory
 * speed): the least time reading can take.
 */
function readSeconds(path) {
  const buffer = Buffer.allocUnsafe(128 * 1024);
  const fd = openSync(path, 'r');
  const t0 = process.hrtime.bigint();
  try {
    while (readSync(fd, buffer, 0, buffer.length, null) > 0);
  } finally {
    closeSync(fd);
  }
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

/** Seconds to write `bytes` to a new file 16 MiB at a time and fdatasync it. */
function writeSeconds(bytes) {
  const path = join(dir, 'floor.bin');
  const buffer = Buffer.alloc(16 * 2 ** 20, 0x5a);
  const fd = openSync(path, 'w');
  const t0 = process.hrtime.bigint();
  try {
    for (let left = bytes; left > 0; left -= buffer.length)
      writeSync(fd, buffer, 0, Math.min(left, buffer.length));
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

/**
 * Removes a run's output and what it wrote beside it: the recipe run's report
 * (out.report.json), GPTQ's quantize_config.json and AWQ's quantization_config.json
 * (out-gptq.quantize_config.json, ...): every file named after the output's stem.
 */
function removeOutput(output) {
  const stem = basename(output).replace(/\.[^.]+$/, '');
  for (const name of readdirSync(dir))
    if (name.startsWith(`${stem}.`)) rmSync(join(dir, name), { force: true });
}

const memcpy = measureMemcpy(256 * 2 ** 20, 5);
/** Seconds to read `path` from the page cache, once it is there (every run reads it from there). */
function cachedReadSeconds(path) {
  readSeconds(path);
  return Math.min(readSeconds(path), readSeconds(path));
}
const read = cachedReadSeconds(model);
const quiet = ['-q', '--no-progress', '--force'];
const runs = [
  ['int4 g128: quantd quantize --recipe', 'out.safetensors', ['--recipe', recipe]],
  ['GGUF Q4_K: quantd quantize --layout', 'out-q4_k.gguf', ['--layout', 'gguf:type=Q4_K']],
  ['GGUF Q8_0: quantd quantize --layout', 'out-q8_0.gguf', ['--layout', 'gguf:type=Q8_0']],
  ['GPTQ 4-bit g128 (vLLM): quantd quantize --layout', 'out-gptq.safetensors', ['--layout', 'gptq']],
  ['AWQ 4-bit g128 (vLLM): quantd quantize --layout', 'out-awq.safetensors', ['--layout', 'awq']],
  [
    'one 512 MiB float32 tensor → int8 per_channel: quantd quantize',
    'out-tensor.safetensors',
    ['--qdtype', 'int8', '--scheme', 'per_channel'],
    single,
  ],
];
const rows = [];
for (const [how, file, args, input = model] of runs) {
  const output = join(dir, file);
  const inRead = input === model ? read : cachedReadSeconds(input);
  const run = await cli(['quantize', input, '-o', output, ...args, ...quiet]);
  const outBytes = statSync(output).size;
  const inBytes = statSync(input).size;
  // a single tensor's bound: 3 × its bytes (the file is little more) + 256 MiB
  const rssBound = input === model ? bound : 3 * inBytes + 256 * 2 ** 20;
  rows.push({ how, ...run, inBytes, outBytes, floor: inRead + writeSeconds(outBytes), rssBound });
  if (!values.keep) removeOutput(output);
}
const sequential = await sequentialCalls();
const sequentialBytes = statSync(join(dir, 'sequential.bin')).size;
rows.push({
  how: 'int4 g128: sequential single-tensor POST /v1/quantize',
  ...sequential,
  inBytes: modelBytes,
  outBytes: sequentialBytes,
  floor: read + writeSeconds(sequentialBytes),
});
if (!values.keep) rmSync(join(dir, 'sequential.bin'), { force: true });

const gib = (b) => (b / 2 ** 30).toFixed(2);
const mib = (b) => (Number.isFinite(b) ? `${(b / 2 ** 20).toFixed(0)} MiB` : 'n/a');
const result = rows.map((r) => ({
  how: r.how,
  seconds: r.seconds,
  gbs: r.inBytes / r.seconds / 1e9,
  output_bytes: r.outBytes,
  io_floor_seconds: r.floor,
  x_io_floor: r.floor / r.seconds,
  peak_rss: r.rss,
  rss_bound: r.rssBound ?? bound,
}));
if (values.json) {
  const summary = { model_bytes: modelBytes, largest_tensor: largest, rss_bound: bound, memcpy_gbs: memcpy };
  console.log(JSON.stringify({ ...summary, read_seconds: read, rows: result }, null, 2));
} else {
  console.log(
    `model: ${tensors.length} tensors, ${gib(modelBytes)} GiB bf16 (hidden ${shape.hidden}, intermediate ${shape.intermediate}, vocab ${shape.vocab}, ${shape.layers} layers), largest tensor ${mib(largest)}`,
  );
  console.log(
    `memcpy: ${memcpy.toFixed(2)} GB/s (one thread, same run); reading the model from the page cache: ${read.toFixed(2)} s; RSS bound 3 × largest + 256 MiB = ${mib(bound)}\n`,
  );
  console.log('| run | wall s | GB/s in | output | I/O floor s | × I/O floor | peak RSS | within bound |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---|');
  for (const r of result) {
    const within = Number.isFinite(r.peak_rss) ? (r.peak_rss < r.rss_bound ? 'yes' : 'NO') : '';
    console.log(
      `| ${r.how} | ${r.seconds.toFixed(2)} | ${r.gbs.toFixed(2)} | ${mib(r.output_bytes)} | ${r.io_floor_seconds.toFixed(2)} | ${r.x_io_floor.toFixed(2)} | ${mib(r.peak_rss)} | ${within} |`,
    );
  }
}
