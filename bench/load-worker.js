// A load generator in its own thread (own event loop, own core), so that client work does not
// share the server's thread: `concurrency` keep-alive connections issue one request after
// another for `seconds`, after a warm-up; reports requests/s and latency quantiles.
import http from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';

const { port, method, path, headers, body, seconds, concurrency, warmupSeconds } = workerData;
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
const payload = body ? Buffer.from(body) : undefined;

function once() {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent, headers }, (res) => {
      res.resume();
      res.on('end', () =>
        res.statusCode === 200 ? resolve() : reject(new Error(`${path}: ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end(payload);
  });
}

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
agent.destroy();
parentPort.postMessage({ rps: latencies.length / elapsed, p50: q(0.5), p99: q(0.99) });
