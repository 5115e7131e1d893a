// bench/http.js's load generator (bench/load.js): `concurrency` keep-alive connections.
import http from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';
import { runLoad } from './load.js';

const { port, method, path, headers, body, concurrency } = workerData;
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

const report = await runLoad(once, workerData);
agent.destroy();
parentPort.postMessage(report);
