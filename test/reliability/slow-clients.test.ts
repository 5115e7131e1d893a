/**
 * Slow clients cannot keep admission full: 100 connections that each declare a 1 MiB body and
 * trickle it a byte every 200 ms fill every slot of a real `quantd serve` child (capacity 100).
 * The body pace (src/http/pace.ts, QUANTD_BODY_IDLE_MS=1000 here) cuts each of them with 408
 * BODY_TOO_SLOW, and a normal request, retried on 503, succeeds long before the trickle would end.
 */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { startChildServer, type ChildServer } from './server.js';

const TRICKLERS = 100;
const DECLARED = 1 << 20;

let server: ChildServer;
let port: number;

function normalRequest(): Promise<number> {
  const body = Buffer.alloc(4 * 1024);
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/quantize',
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/octet-stream',
          'x-tensor-dtype': 'F32',
          'x-tensor-shape': String(body.byteLength / 4),
          'content-length': body.byteLength,
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', () => resolve(-1));
    req.end(body);
  });
}

/** Declares a 1 MiB body and sends a byte every 200 ms; resolves with what the server answered. */
function trickle(): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    const timer = setInterval(() => socket.write('x'), 200);
    socket.on('connect', () =>
      socket.write(
        'POST /v1/quantize HTTP/1.1\r\nHost: x\r\ncontent-type: application/octet-stream\r\n' +
          `x-tensor-dtype: F32\r\nx-tensor-shape: ${DECLARED / 4}\r\ncontent-length: ${DECLARED}\r\n\r\n`,
      ),
    );
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    const done = (): void => {
      clearInterval(timer);
      resolve(text);
    };
    socket.on('close', done);
    socket.on('error', () => undefined);
  });
}

beforeAll(async () => {
  server = await startChildServer({
    QUANTD_LOG_LEVEL: 'silent',
    QUANTD_POOL_SIZE: '1',
    QUANTD_QUEUE_LIMIT: String(TRICKLERS - 1),
    QUANTD_BODY_IDLE_MS: '1000',
  });
  port = server.port;
});

afterAll(async () => {
  await server?.kill();
});

it(`${TRICKLERS} trickling connections are cut with 408 and a normal request gets through`, async () => {
  const tricklers = Array.from({ length: TRICKLERS }, trickle);
  await new Promise((r) => setTimeout(r, 300));
  const started = Date.now();
  let status = 0;
  while (Date.now() - started < 15_000) {
    status = await normalRequest();
    if (status === 200) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const waitedMs = Date.now() - started;
  const answers = await Promise.all(tricklers);
  const cut = answers.filter((a) => /^HTTP\/1\.1 408/.test(a) && a.includes('BODY_TOO_SLOW')).length;
  console.log(
    `slow-clients: normal request ${status} after ${waitedMs} ms; ${cut}/${TRICKLERS} tricklers got 408`,
  );
  expect(status).toBe(200);
  // a trickle of 1 MiB at 5 B/s would last days: the normal request got in because of the pace
  expect(waitedMs).toBeLessThan(15_000);
  expect(cut).toBe(TRICKLERS);
  expect(server.alive(), 'server alive').toBe(true);
});
