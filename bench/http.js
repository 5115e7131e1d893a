#!/usr/bin/env node
// npm run bench:http — the HTTP service against itself, in one run on 127.0.0.1:
//  (a) 64 MiB float32 → int8 per_channel through POST /v1/quantize vs an echo route returning the
//      same payload, in GB/s of request body (target ≥ 60 % of echo);
//  (b) 4 KiB tensors: requests/s through /v1/quantize, and through the Open Inference Protocol's
//      POST /v2/models/quantize/infer (binary data in and out), vs a trivial JSON route, with p50 /
//      p99 latency (target ≥ 50 %).
// The echo and JSON routes are added to the real app here, for the benchmark only.
import http from 'node:http';
import { parseArgs } from 'node:util';
import { loadConfig } from '../dist/src/config.js';
import { buildApp } from '../dist/src/http/app.js';
import { createCompute } from '../dist/src/pool/index.js';
import { loadInWorker } from './load.js';
import { randomFloats } from './ops.js';

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '64' },
    reps: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '16' },
    json: { type: 'boolean' },
  },
});

const config = loadConfig({
  ...process.env,
  QUANTD_LOG_LEVEL: 'silent',
  QUANTD_HTTP_PORT: '0',
  QUANTD_HOST: '127.0.0.1',
});
const handle = createCompute({ backend: config.backend, threads: config.poolSize, maxQueue: 1024 });
handle.pool?.workers();
const app = await buildApp({
  config: { ...config, queueLimit: 1024 },
  handle,
  version: 'bench',
  isReady: () => true,
});
app.post('/bench/echo', async (request, reply) => {
  const body = request.body;
  return reply
    .type('application/octet-stream')
    .send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
});
app.get('/bench/json', async () => ({ ok: true }));
await app.listen({ host: '127.0.0.1', port: 0 });
const port = app.server.address().port;
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function request(method, path, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent, headers }, (res) => {
      let bytes = 0;
      res.on('data', (c) => (bytes += c.length));
      res.on('end', () =>
        res.statusCode === 200 ? resolve(bytes) : reject(new Error(`${path}: ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function bestSeconds(fn, reps) {
  await fn();
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    await fn();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return best;
}

// (a) large payloads
const mib = Number(values.mib);
const numel = (mib * 1024 * 1024) / 4;
const big = Buffer.from(randomFloats(numel).buffer);
const rows = 4096;
const octet = (shape) => ({
  'content-type': 'application/octet-stream',
  'x-tensor-dtype': 'float32',
  'x-tensor-shape': shape,
});
const reps = Number(values.reps);
const echoS = await bestSeconds(
  () => request('POST', '/bench/echo', big, { 'content-type': 'application/octet-stream' }),
  reps,
);
const quantS = await bestSeconds(
  () => request('POST', '/v1/quantize?qdtype=int8&scheme=per_channel', big, octet(`${rows},${numel / rows}`)),
  reps,
);
const large = {
  echo_gbs: big.length / echoS / 1e9,
  quantize_gbs: big.length / quantS / 1e9,
};
large.ratio = large.quantize_gbs / large.echo_gbs;

// (b) small requests under concurrency, from a load generator in another thread
const small = Buffer.from(randomFloats(1024).buffer);
const load = (method, path, headers, body) =>
  loadInWorker(new URL('./load-worker.js', import.meta.url), {
    port,
    method,
    path,
    headers,
    body,
    seconds: Number(values.seconds),
    concurrency: Number(values.concurrency),
    warmupSeconds: 1,
  });
const jsonLoad = await load('GET', '/bench/json', {});
const quantLoad = await load('POST', '/v1/quantize?qdtype=int8', octet('1024'), small);
// the same tensor as an OIP request: a JSON header, then the tensor's bytes
const inferHead = Buffer.from(
  JSON.stringify({
    inputs: [
      { name: 'input', datatype: 'FP32', shape: [1024], parameters: { binary_data_size: small.length } },
    ],
    parameters: { binary_data_output: true },
  }),
);
const oipLoad = await load(
  'POST',
  '/v2/models/quantize/infer',
  { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(inferHead.length) },
  Buffer.concat([inferHead, small]),
);
const result = {
  mib,
  backend: `${handle.kernels.backend} ${handle.kernels.isa}`,
  large,
  json: jsonLoad,
  quantize_4k: quantLoad,
  small_ratio: quantLoad.rps / jsonLoad.rps,
  oip_infer_4k: oipLoad,
  oip_ratio: oipLoad.rps / jsonLoad.rps,
};

await app.close();
await handle.close();
agent.destroy();

if (values.json) {
  console.log(JSON.stringify(result, null, 2));
} else {
  console.log(`HTTP on 127.0.0.1, kernels ${result.backend}, concurrency ${values.concurrency}`);
  console.log('');
  console.log('| measurement | value | vs baseline |');
  console.log('|---|---:|---:|');
  console.log(`| echo ${mib} MiB (baseline) | ${large.echo_gbs.toFixed(2)} GB/s | |`);
  console.log(
    `| quantize ${mib} MiB f32 → int8 per_channel | ${large.quantize_gbs.toFixed(2)} GB/s | ${(large.ratio * 100).toFixed(0)} % |`,
  );
  console.log(
    `| trivial JSON route (baseline) | ${jsonLoad.rps.toFixed(0)} req/s, p50 ${jsonLoad.p50.toFixed(2)} ms, p99 ${jsonLoad.p99.toFixed(2)} ms | |`,
  );
  console.log(
    `| quantize 4 KiB tensor | ${quantLoad.rps.toFixed(0)} req/s, p50 ${quantLoad.p50.toFixed(2)} ms, p99 ${quantLoad.p99.toFixed(2)} ms | ${(result.small_ratio * 100).toFixed(0)} % |`,
  );
  console.log(
    `| OIP infer 4 KiB tensor (binary) | ${oipLoad.rps.toFixed(0)} req/s, p50 ${oipLoad.p50.toFixed(2)} ms, p99 ${oipLoad.p99.toFixed(2)} ms | ${(result.oip_ratio * 100).toFixed(0)} % |`,
  );
}
