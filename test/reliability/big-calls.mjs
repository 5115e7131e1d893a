/**
 * A worker thread that sends `n` large requests at once (slots.test.ts's memory budget), so that
 * the copies and writes of their bodies load this thread, not the test's, whose /healthz probe
 * must measure the server; at the lowest priority, as load-clients.mjs runs, for the same reason.
 *
 * workerData: { kind: 'grpc' | 'http', n, body (the request bytes: a gRPC message, or an HTTP
 *   body, in shared memory), grpc: { target, path } | http: { port, path, headers },
 *   cancel: null | { metricsPort } — cancel every call once the server's memory budget holds
 *   some of them (its quantd_admission_memory_bytes gauge) }.
 * Posts one message: { answers: [{ code, quantdCode }] (gRPC code, or HTTP status; -1: no
 *   answer), held (the gauge when cancelled), cancelledAt (epoch ms) }.
 */
import { createRequire } from 'node:module';
import { get, request } from 'node:http';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';

const require = createRequire(import.meta.url);
/** @type {typeof import('@grpc/grpc-js')} */
const grpc = require('@grpc/grpc-js');

try {
  setPriority(19);
} catch {
  // not permitted here: the clients then compete with the server as equals
}

const { kind, n, body, cancel } = workerData;
const payload = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
const identity = (b) => b;

/** The server's memory gauge, from /metrics. */
function memoryHeld(port) {
  return new Promise((resolve) => {
    get({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => {
        const line = text.split('\n').find((l) => l.startsWith('quantd_admission_memory_bytes '));
        resolve(Number(line?.split(' ')[1] ?? NaN));
      });
    }).on('error', () => resolve(NaN));
  });
}

function grpcCall(client) {
  let call;
  const answer = new Promise((resolve) => {
    call = client.makeUnaryRequest(
      workerData.grpc.path,
      identity,
      identity,
      payload,
      { deadline: Date.now() + 120_000 },
      (err) =>
        resolve(
          err ? { code: err.code, quantdCode: err.metadata?.get('quantd-code')[0]?.toString() } : { code: 0 },
        ),
    );
  });
  return { answer, cancel: () => call.cancel() };
}

function httpCall() {
  let req;
  const answer = new Promise((resolve) => {
    const { port, path, headers } = workerData.http;
    req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent: false,
        headers: { ...headers, 'content-length': payload.byteLength },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ code: res.statusCode ?? 0 }));
        res.on('error', () => resolve({ code: -1 }));
      },
    );
    req.on('error', () => resolve({ code: -1 }));
    req.end(payload);
  });
  return { answer, cancel: () => req.destroy() };
}

const clients =
  kind === 'grpc'
    ? Array.from(
        { length: n },
        () =>
          new grpc.Client(workerData.grpc.target, grpc.credentials.createInsecure(), {
            'grpc.max_receive_message_length': -1,
          }),
      )
    : [];
const calls = Array.from({ length: n }, (_, i) => (kind === 'grpc' ? grpcCall(clients[i]) : httpCall()));
let held = null;
let cancelledAt = null;
if (cancel) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    held = await memoryHeld(cancel.metricsPort);
    if (held > 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  cancelledAt = Date.now();
  for (const c of calls) c.cancel();
}
const answers = await Promise.all(calls.map((c) => c.answer));
for (const c of clients) c.close();
parentPort.postMessage({ answers, held, cancelledAt });
