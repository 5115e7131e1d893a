// The load generators of bench/http.js and bench/grpc.js: `concurrency` callers issuing one
// request after another for `seconds` after a warm-up, in a thread of their own (own event loop,
// own core), so that client work does not share the server's thread.
import { Worker } from 'node:worker_threads';

/** Runs `once` (one request, resolved when answered) under load; calls/s and latency quantiles. */
export async function runLoad(once, { seconds, concurrency, warmupSeconds }) {
  const run = async (durationMs, latencies) => {
    const until = Date.now() + durationMs;
    const loop = async () => {
      while (Date.now() < until) {
        const t0 = process.hrtime.bigint();
        await once();
        latencies?.push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, loop));
  };
  await run(warmupSeconds * 1000);
  const latencies = [];
  const t0 = Date.now();
  await run(seconds * 1000, latencies);
  const elapsed = (Date.now() - t0) / 1000;
  latencies.sort((a, b) => a - b);
  const q = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))];
  return { rps: latencies.length / elapsed, p50: q(0.5), p99: q(0.99) };
}

/** Runs the load-generator module `url` in a worker thread with `workerData`; its report. */
export function loadInWorker(url, workerData) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(url, { workerData });
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}
