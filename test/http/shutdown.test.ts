/**
 * Graceful shutdown (src/server/serve.ts): with a slow request in flight (pool test hooks, as in
 * slow.test.ts), shutdown() stops taking requests — /readyz and new operations are refused (503,
 * or the connection refused once the listener is closed) — lets the request in flight finish with
 * 200 and the CLI's bytes, then closes the pool and resolves, promptly: it does not sit out
 * QUANTD_SHUTDOWN_TIMEOUT_MS once nothing is left to drain. Once with a client that closes its
 * connection after the response (node:http without an agent), once with a keep-alive client
 * (fetch, as most clients are).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { serializeSafetensors } from '../../src/format/index.js';
import {
  cliOutput,
  eventually,
  expectSameBytes,
  octetHeaders,
  send,
  startTestServer,
  type TestServer,
} from './helpers.js';

const DELAY_MS = 400;
/** Long enough that sitting it out is distinguishable from draining. */
const SHUTDOWN_TIMEOUT_MS = 6000;
const PROMPT_MS = 2000;
const dir = mkdtempSync(join(tmpdir(), 'quantd-http-shutdown-'));
const DATA = new Uint8Array(Float32Array.of(1, -2, 3.5, 0, 0.25, -7, 6, 1e-3).buffer);
const SHAPE = [2, 4];
let expected: Buffer;

beforeAll(async () => {
  const input = join(dir, 'in.safetensors');
  writeFileSync(
    input,
    serializeSafetensors([{ name: 'tensor', dtype: 'F32', shape: SHAPE, data: DATA }], null),
  );
  expected = await cliOutput('qparams', input, join(dir, 'out.safetensors'), []);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function slowServer(): Promise<TestServer> {
  const t = await startTestServer(
    {
      QUANTD_POOL_SIZE: '1',
      QUANTD_INLINE_LIMIT: '0',
      QUANTD_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
    },
    DELAY_MS,
  );
  expect(t.server.handle.pool, 'a native or wasm backend, hence a pool').not.toBeNull();
  return t;
}

/** A status, or the connection error of a request the server refused to take. */
async function statusOrRefusal(port: number, path: string, body?: Uint8Array): Promise<number | string> {
  try {
    const reply = await send(port, path, body ? { headers: octetHeaders('float32', SHAPE), body } : {});
    return reply.status;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? String(err);
  }
}

/**
 * Starts `inFlight` (a slow request), shuts down while it runs, and checks the drain: refusals
 * while draining, the request's 200 with the CLI's bytes, shutdown resolving within PROMPT_MS of it.
 */
async function drain(
  t: TestServer,
  inFlight: () => Promise<{ status: number; body: Uint8Array }>,
): Promise<void> {
  expect(await statusOrRefusal(t.port, '/readyz')).toBe(200);
  let answered = false;
  const request = inFlight().finally(() => (answered = true));
  expect(
    await eventually(() => t.server.handle.pool!.workers().pending === 1, 3000),
    'the slow request reaches the pool',
  ).toBe(true);

  let resolvedAt = 0;
  const stopping = t.server.shutdown('test').then(() => (resolvedAt = Date.now()));

  const readyz = await statusOrRefusal(t.port, '/readyz');
  expect([503, 'ECONNREFUSED', 'ECONNRESET'], `/readyz while draining: ${readyz}`).toContain(readyz);
  const op = await statusOrRefusal(t.port, '/v1/qparams', DATA);
  expect([503, 'ECONNREFUSED', 'ECONNRESET'], `a new operation while draining: ${op}`).toContain(op);
  expect(answered, 'the request is still in flight (slow tasks: the premise of this test)').toBe(false);
  expect(resolvedAt, 'shutdown waits for the request in flight').toBe(0);

  const reply = await request;
  const answeredAt = Date.now();
  expect(reply.status, Buffer.from(reply.body).toString()).toBe(200);
  expectSameBytes(reply.body, expected, 'the request in flight during shutdown');

  const within = await Promise.race([
    stopping.then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), PROMPT_MS)),
  ]);
  expect(within, `shutdown resolved within ${PROMPT_MS} ms of the last response`).toBe(true);
  expect(resolvedAt - answeredAt).toBeLessThan(PROMPT_MS);
  expect(await statusOrRefusal(t.port, '/healthz')).toBe('ECONNREFUSED');
  await stopping;
}

it('drains a request in flight (client closing its connection) and resolves', async () => {
  const t = await slowServer();
  try {
    await drain(t, () =>
      send(t.port, '/v1/qparams', { headers: octetHeaders('float32', SHAPE), body: DATA }),
    );
  } finally {
    await t.server.shutdown('test');
  }
});

it('drains a request in flight from a keep-alive client (fetch) and resolves promptly', async () => {
  const t = await slowServer();
  try {
    await drain(t, async () => {
      const r = await fetch(`${t.base}/v1/qparams`, {
        method: 'POST',
        headers: octetHeaders('float32', SHAPE),
        body: DATA,
      });
      return { status: r.status, body: new Uint8Array(await r.arrayBuffer()) };
    });
  } finally {
    t.server.http.server.closeAllConnections();
    await t.server.shutdown('test');
  }
});
