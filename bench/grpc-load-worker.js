// bench/grpc.js's load generator, in its own thread (as bench/load-worker.js is for HTTP): one
// gRPC client issuing `concurrency` unary calls at a time, one after another, for `seconds` after
// a warm-up; reports calls/s and latency quantiles.
import { parentPort, workerData } from 'node:worker_threads';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { LOADER_OPTIONS, PROTO_FILE } from '../dist/src/grpc/server.js';

const { target, service, method, request, seconds, concurrency, warmupSeconds } = workerData;
// the bench's echo service, or quantd's (whose loader options hold a function: not cloneable)
const def = grpc.loadPackageDefinition(
  service === 'echo'
    ? protoLoader.loadSync(new URL('./echo.proto', import.meta.url).pathname, { keepCase: true })
    : protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS),
);
const Client = service === 'echo' ? def.bench.Echo : def.quantd.v1.Quantizer;
const client = new Client(target, grpc.credentials.createInsecure());
const message = request.data ? { ...request, data: Buffer.from(request.data) } : request;
if (message.tensor) message.tensor = { ...message.tensor, data: Buffer.from(message.tensor.data) };

const once = () =>
  new Promise((resolve, reject) => client[method](message, (err) => (err ? reject(err) : resolve())));

async function run(durationMs, latencies) {
  const until = Date.now() + durationMs;
  const loop = async () => {
    while (Date.now() < until) {
      const t0 = process.hrtime.bigint();
      await once();
      latencies?.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
}

await run(warmupSeconds * 1000);
const latencies = [];
const t0 = Date.now();
await run(seconds * 1000, latencies);
const elapsed = (Date.now() - t0) / 1000;
latencies.sort((a, b) => a - b);
const q = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))];
client.close();
parentPort.postMessage({ rps: latencies.length / elapsed, p50: q(0.5), p99: q(0.99) });
