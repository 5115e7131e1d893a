/**
 * A worker thread of closed-loop load clients (load.test.ts), standing in for clients on other
 * machines: each client has its own connection, and the thread lowers its own priority to the
 * lowest (Linux renices the calling thread only), so that on this one machine the clients get
 * the CPU the server leaves instead of taking the server's. Without that, 30 clients retrying
 * at once took the CPU of the server's worker pool (itself at nice 10) and measured their own
 * queueing: admitted calls finished at a tenth of the rate.
 *
 * workerData: { kind: 'http' | 'grpc', clients, endAt (epoch ms), body (the request bytes),
 *   http: { url, headers } | grpc: { target, path } }.
 * Posts one message: { answers: [{ status, code, ms }], loopP99Ms } — the HTTP status (0: no
 * answer) or gRPC code, the quantd code of a refusal, the milliseconds until the decision
 * arrived; and this thread's own event-loop delay (p99), the part of `ms` that is the client's.
 */
import { createRequire } from 'node:module';
import { Agent, request } from 'node:http';
import { setPriority } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';

const require = createRequire(import.meta.url);
/** @type {typeof import('@grpc/grpc-js')} */
const grpc = require('@grpc/grpc-js');

try {
  setPriority(19);
} catch {
  // not permitted here: the clients then compete with the server as equals
}
const loop = monitorEventLoopDelay({ resolution: 5 });
loop.enable();

const { kind, clients, endAt, body } = workerData;
const payload = Buffer.from(body.buffer, body.byteOffset, body.byteLength);

/** One HTTP request; resolves with its answer once its body has been read. */
function overHttp(agent) {
  const { url, headers } = workerData.http;
  const start = performance.now();
  return new Promise((resolve) => {
    const req = request(url, { method: 'POST', agent, headers }, (res) => {
      const ms = performance.now() - start; // the answer's head: the decision
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        let code;
        if (res.statusCode !== 200) {
          try {
            code = JSON.parse(Buffer.concat(chunks).toString('utf8')).code;
          } catch {
            code = undefined;
          }
        }
        resolve({ status: res.statusCode ?? 0, code, ms });
      });
    });
    // a request that gets no answer (its connection reset) is status 0
    req.on('error', () => resolve({ status: 0, code: 'NO_ANSWER', ms: performance.now() - start }));
    req.end(payload);
  });
}

const identity = (b) => b;

/** One unary gRPC call with the pre-encoded message; resolves with its status. */
function overGrpc(client) {
  const start = performance.now();
  return new Promise((resolve) => {
    const deadline = Date.now() + 60_000;
    client.makeUnaryRequest(workerData.grpc.path, identity, identity, payload, { deadline }, (err) => {
      const value = err?.metadata?.get('quantd-code')[0];
      resolve({
        status: err ? err.code : 0,
        code: value === undefined ? undefined : String(value),
        ms: performance.now() - start,
      });
    });
  });
}

const answers = [];
if (kind === 'http') {
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < endAt) answers.push(await overHttp(agent));
    }),
  );
  agent.destroy();
} else {
  // grpc-js shares one connection to a target among its clients unless told otherwise
  const Client = grpc.makeGenericClientConstructor({}, 'Load');
  await Promise.all(
    Array.from({ length: clients }, async () => {
      const client = new Client(workerData.grpc.target, grpc.credentials.createInsecure(), {
        'grpc.use_local_subchannel_pool': 1,
      });
      while (Date.now() < endAt) answers.push(await overGrpc(client));
      client.close();
    }),
  );
}
parentPort.postMessage({ answers, loopP99Ms: loop.percentile(99) / 1e6 });
