#!/usr/bin/env node
// npm run bench:grpc — in one run on 127.0.0.1, the same process and grpc-js settings:
//  (a) 64 MiB float32 → int8 per_channel through QuantizeStream, against a raw gRPC echo stream
//      of the same bytes (target ≥ 60 % of echo; GB/s counts the float32 input);
//  (b) 4 KiB tensors through the unary Quantize under concurrency, against a unary call that
//      answers at once (target ≥ 50 % of its rate), from a load generator in another thread.
import { once } from 'node:events';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { startServer } from '../dist/src/server/serve.js';
import { LOADER_OPTIONS, PROTO_FILE } from '../dist/src/grpc/server.js';
import { loadInWorker } from './load.js';
import { randomFloats } from './ops.js';

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '64' },
    reps: { type: 'string', default: '5' },
    chunk: { type: 'string', default: '4' },
    seconds: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '16' },
  },
});
const mib = Number(values.mib);
const chunk = Number(values.chunk) * 1024 * 1024;
const numel = (mib * 1024 * 1024) / 4;
const data = Buffer.from(randomFloats(numel).buffer);
const rows = 4096;

const server = await startServer({
  ...process.env,
  QUANTD_HOST: '127.0.0.1',
  QUANTD_HTTP_PORT: '0',
  QUANTD_GRPC_PORT: '0',
  QUANTD_LOG_LEVEL: 'silent',
});
const options = {
  'grpc.max_receive_message_length': 2 ** 31 - 1,
  'grpc.max_send_message_length': 2 ** 31 - 1,
};

// the echo baseline
const echoDef = grpc.loadPackageDefinition(
  protoLoader.loadSync(new URL('./echo.proto', import.meta.url).pathname, { keepCase: true }),
);
const echoServer = new grpc.Server(options);
echoServer.addService(echoDef.bench.Echo.service, {
  Stream: (call) => {
    call.on('data', (piece) => call.write(piece));
    call.on('end', () => call.end());
  },
  Unary: (_call, callback) => callback(null, {}),
});
const echoPort = await new Promise((resolve, reject) =>
  echoServer.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) =>
    e ? reject(e) : resolve(p),
  ),
);
const echo = new echoDef.bench.Echo(`127.0.0.1:${echoPort}`, grpc.credentials.createInsecure(), options);

const def = grpc.loadPackageDefinition(protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS));
const quantizer = new def.quantd.v1.Quantizer(
  `127.0.0.1:${server.grpcPort}`,
  grpc.credentials.createInsecure(),
  options,
);

async function send(call, messages) {
  for (const m of messages) if (!call.write(m)) await once(call, 'drain');
  call.end();
}

async function runEcho() {
  const call = echo.Stream();
  let bytes = 0;
  call.on('data', (p) => (bytes += p.data.length));
  const done = once(call, 'end');
  const pieces = [];
  for (let at = 0; at < data.length; at += chunk) pieces.push({ data: data.subarray(at, at + chunk) });
  await send(call, pieces);
  await done;
  if (bytes !== data.length) throw new Error('echo lost bytes');
}

async function runQuantize() {
  const call = quantizer.QuantizeStream();
  let bytes = 0;
  let total = -1;
  call.on('data', (m) => (m.result ? (total = m.result.total_bytes) : (bytes += m.chunk.data.length)));
  const done = once(call, 'end');
  const messages = [
    {
      header: {
        operation: 'quantize',
        spec: { qdtype: 'int8', scheme: 'per_channel' },
        total_bytes: data.length,
        tensor: { name: 'w', dtype: 'F32', shape: [rows, numel / rows] },
        chunk_bytes: chunk,
      },
    },
  ];
  for (let at = 0; at < data.length; at += chunk)
    messages.push({ chunk: { offset: at, data: data.subarray(at, at + chunk) } });
  await send(call, messages);
  await done;
  if (bytes !== total) throw new Error('result incomplete');
}

async function best(fn) {
  await fn();
  let t = Infinity;
  for (let i = 0; i < Number(values.reps); i++) {
    const t0 = process.hrtime.bigint();
    await fn();
    t = Math.min(t, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return t;
}

const echoS = await best(runEcho);
const quantS = await best(runQuantize);

// (b) small requests under concurrency
const load = (port, service, method, request) =>
  loadInWorker(new URL('./grpc-load-worker.js', import.meta.url), {
    target: `127.0.0.1:${port}`,
    service,
    method,
    request,
    seconds: Number(values.seconds),
    concurrency: Number(values.concurrency),
    warmupSeconds: 1,
  });
const trivialLoad = await load(echoPort, 'echo', 'Unary', {});
const smallLoad = await load(server.grpcPort, 'quantd', 'Quantize', {
  spec: { qdtype: 'int8' },
  tensor: { name: 'tensor', dtype: 'F32', shape: [1024], data: new Uint8Array(randomFloats(1024).buffer) },
});
echo.close();
quantizer.close();
echoServer.forceShutdown();
await server.shutdown('bench');

const echoGbs = data.length / echoS / 1e9;
const quantGbs = data.length / quantS / 1e9;
console.log(
  `gRPC on 127.0.0.1, ${mib} MiB in ${values.chunk} MiB chunks, kernels ${server.handle.kernels.backend} ${server.handle.kernels.isa}`,
);
console.log('');
console.log('| stream | GB/s | vs echo |');
console.log('|---|---:|---:|');
console.log(`| echo ${mib} MiB (baseline) | ${echoGbs.toFixed(2)} | |`);
console.log(
  `| QuantizeStream f32 → int8 per_channel | ${quantGbs.toFixed(2)} | ${((quantGbs / echoGbs) * 100).toFixed(0)} % |`,
);
console.log('');
console.log(`| unary calls, concurrency ${values.concurrency} | calls/s | p50 ms | p99 ms | vs trivial |`);
console.log('|---|---:|---:|---:|---:|');
const row = (label, l, ratio) =>
  `| ${label} | ${l.rps.toFixed(0)} | ${l.p50.toFixed(2)} | ${l.p99.toFixed(2)} | ${ratio} |`;
console.log(row('trivial unary call (baseline)', trivialLoad, ''));
console.log(
  row('Quantize 4 KiB tensor → int8', smallLoad, `${((smallLoad.rps / trivialLoad.rps) * 100).toFixed(0)} %`),
);
