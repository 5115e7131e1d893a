/**
 * Early shedding (src/http/shed.ts): while every admission slot is taken, a compute request is
 * refused before Fastify sees it — and its answer is the one Fastify's path gives: the same
 * status, headers and problem (but its request id), the same connection handling (closed after a
 * large unread body, kept after a small one), counted in /metrics under its route. Whatever the
 * onRequest hook would answer first — 401 without the token, 415 for a content coding, 413 for a
 * declared oversize body, SHUTTING_DOWN while draining, a route the router finds only by decoding
 * — is still answered by it. Real listening servers (inject() bypasses the server's listeners).
 */
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { REPO } from '../cli/run-cli.js';
import {
  expectProblem,
  octetHeaders,
  send,
  startTestServer,
  type Reply,
  type TestServer,
} from './helpers.js';
import type * as App from '../../src/http/app.js';
import type * as Service from '../../src/service/index.js';

const APP_URL = pathToFileURL(join(REPO, 'dist', 'src', 'http', 'app.js')).href;
const SERVICE_URL = pathToFileURL(join(REPO, 'dist', 'src', 'service', 'index.js')).href;

const SMALL = new Uint8Array(new Float32Array(16).buffer); // 64 B: Node discards it, the connection lives
const LARGE = new Uint8Array(new Float32Array(1 << 18).buffer); // 1 MiB: refused unread, then closed

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ QUANTD_POOL_SIZE: '1' });
});
afterAll(async () => {
  await t?.server.shutdown('test');
});

interface Served {
  readonly app: FastifyInstance;
  readonly port: number;
  /** Answers Fastify sent (the early path sends its own). */
  readonly hooked: () => number;
}

/** An app on a full admission (capacity 1, its slot held), listening on an ephemeral port. */
async function fullApp(
  options: { earlyShed?: boolean; apiKeys?: string[]; ready?: boolean } = {},
): Promise<Served> {
  const { buildApp } = (await import(APP_URL)) as typeof App;
  const { Admission } = (await import(SERVICE_URL)) as typeof Service;
  const admission = new Admission(1);
  admission.acquire(); // held for the app's life: every compute request is refused
  const app = await buildApp({
    config: { ...t.server.config, apiKeys: options.apiKeys ?? [], bodyLimit: 4 << 20 },
    handle: t.server.handle,
    version: 'test',
    isReady: () => options.ready ?? true,
    admission,
    ...(options.earlyShed !== undefined && { earlyShed: options.earlyShed }),
  });
  // (onSend: every answer Fastify sends passes it, errors from the hooks too)
  let hooked = 0;
  app.addHook('onSend', async () => {
    hooked++;
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, port: (app.server.address() as AddressInfo).port, hooked: () => hooked };
}

let early: Served;
let fastify: Served;
beforeAll(async () => {
  early = await fullApp();
  fastify = await fullApp({ earlyShed: false });
});
afterAll(async () => {
  await early?.app.close();
  await fastify?.app.close();
});

/** A reply's headers that must agree between the two paths (all but the date). */
function comparable(reply: Reply): Record<string, unknown> {
  const { date: _date, ...rest } = reply.headers;
  return rest;
}

const quantize = (port: number, body: Uint8Array, headers: Record<string, string> = {}): Promise<Reply> =>
  send(port, '/v1/quantize?qdtype=int8', {
    headers: { ...octetHeaders('float32', [body.byteLength / 4]), 'x-request-id': 'same-id', ...headers },
    body,
  });

describe('early shedding', () => {
  it.each([
    ['a large body (answered unread, the connection closed)', LARGE, 'close'],
    ['a small body (discarded by Node, the connection kept)', SMALL, 'keep-alive'],
  ])('%s: the same answer as Fastify path, without reaching Fastify', async (_name, body, connection) => {
    const before = { early: early.hooked(), fastify: fastify.hooked() };
    // the client asks to keep its connection: whether it is kept is the server's choice
    const ask = { connection: 'keep-alive' };
    const [a, b] = await Promise.all([quantize(early.port, body, ask), quantize(fastify.port, body, ask)]);
    expect(early.hooked() - before.early, 'the early path answered, not Fastify').toBe(0);
    expect(fastify.hooked() - before.fastify, 'the comparison app answered through Fastify').toBe(1);
    const problem = expectProblem(a, 'OVERLOADED', ['retry later'], '/v1/quantize?qdtype=int8');
    expect(problem.params).toEqual({ queued: 1, limit: 1 });
    expect(a.status).toBe(b.status);
    expect(a.body.toString()).toBe(b.body.toString());
    expect(comparable(a)).toEqual(comparable(b));
    expect(a.headers['connection']).toBe(connection);
    expect(a.headers['retry-after']).toBe('1');
  });

  it('counts its refusals in /metrics under the route', async () => {
    const series = 'quantd_http_requests_total{route="/v1/quantize",method="POST",status="503"}';
    const count = async (): Promise<number> => {
      const text = (await send(early.port, '/metrics')).body.toString();
      const line = text.split('\n').find((l) => l.startsWith(series));
      return line === undefined ? 0 : Number(line.slice(series.length + 1));
    };
    const before = await count();
    await quantize(early.port, LARGE);
    await quantize(early.port, SMALL);
    expect(await count()).toBe(before + 2);
  });

  it('leaves to the hook what it would answer first (415, 413, a decoded path)', async () => {
    const before = early.hooked();
    const coded = await quantize(early.port, SMALL, { 'content-encoding': 'gzip' });
    expectProblem(coded, 'ENCODING_UNSUPPORTED');
    const oversize = await send(early.port, '/v1/quantize?qdtype=int8', {
      headers: { ...octetHeaders('float32', [2 << 20]), 'content-length': String(8 << 20) },
      body: SMALL,
    });
    expectProblem(oversize, 'PAYLOAD_TOO_LARGE');
    // the router decodes %71 to "q": the same route, found only by Fastify, refused by the hook
    const decoded = await send(early.port, '/v1/%71uantize?qdtype=int8', {
      headers: octetHeaders('float32', [SMALL.byteLength / 4]),
      body: SMALL,
    });
    expectProblem(decoded, 'OVERLOADED');
    expect(early.hooked() - before).toBe(3);
  });

  it('with keys: no token is 401 (the hook), the token is 503 (early)', async () => {
    const keyed = await fullApp({ apiKeys: ['k-1'] });
    try {
      expectProblem(await quantize(keyed.port, SMALL), 'UNAUTHORIZED');
      expect(keyed.hooked()).toBe(1);
      expectProblem(await quantize(keyed.port, SMALL, { authorization: 'Bearer k-1' }), 'OVERLOADED');
      expect(keyed.hooked(), 'the token checked, the request refused early').toBe(1);
    } finally {
      await keyed.app.close();
    }
  });

  it('while draining: SHUTTING_DOWN from the hook, never OVERLOADED', async () => {
    const draining = await fullApp({ ready: false });
    try {
      expectProblem(await quantize(draining.port, LARGE), 'SHUTTING_DOWN');
      expect(draining.hooked()).toBe(1);
    } finally {
      await draining.app.close();
    }
  });
});
