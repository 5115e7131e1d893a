/**
 * Every HTTP answer carries the security headers (src/http/security-headers.ts), whoever writes
 * it: a route's success (JSON, a binary result, metrics text), a problem, a 404, /v2's own
 * errors, a live stream, a redirect, the early shed's 503 (shed.ts), the answers written straight
 * to the socket for requests Node's parser rejects and for an unknown Expect (client-error.ts).
 * Data answers have a policy that lets nothing load, run or frame them and are not cached; the
 * console and the API docs are pages with policies of their own, which still forbid framing.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { REPO } from '../cli/run-cli.js';
import { startJobServer, tempDir } from '../jobs/helpers.js';
import { octetHeaders, parseRaw, rawExchange, send, type TestServer } from './helpers.js';
import type * as App from '../../src/http/app.js';
import type * as Service from '../../src/service/index.js';

const APP_URL = pathToFileURL(join(REPO, 'dist', 'src', 'http', 'app.js')).href;
const SERVICE_URL = pathToFileURL(join(REPO, 'dist', 'src', 'service', 'index.js')).href;

const KEY = 'security-headers-test-key-0001';
const AUTH = { authorization: `Bearer ${KEY}` };
const API_POLICY = "default-src 'none'; frame-ancestors 'none'";

type Headers = Readonly<Record<string, string | string[] | undefined>>;

/** The headers every answer has, whatever its kind. */
function expectCommon(headers: Headers, what: string): void {
  expect(headers['x-content-type-options'], what).toBe('nosniff');
  expect(headers['x-frame-options'], what).toBe('DENY');
  expect(headers['referrer-policy'], what).toBe('no-referrer');
  expect(headers['cross-origin-resource-policy'], what).toBe('same-origin');
  expect(String(headers['content-security-policy']), what).toContain("frame-ancestors 'none'");
}

/** A data answer's: the API's policy, and no cache keeps it. */
function expectData(headers: Headers, what: string): void {
  expectCommon(headers, what);
  expect(headers['content-security-policy'], what).toBe(API_POLICY);
  expect(headers['cache-control'], what).toBe('no-store');
}

let t: TestServer;
beforeAll(async () => {
  t = await startJobServer(tempDir('security-headers'), { QUANTD_API_KEYS: KEY });
});
afterAll(async () => {
  await t?.server.shutdown('test done');
});

describe('data answers: the API policy, no-store', () => {
  it.each([
    ['GET /healthz', '/healthz', {}, 200],
    ['GET /readyz', '/readyz', {}, 200],
    ['GET /metrics', '/metrics', {}, 200],
    ['GET /v1/jobs', '/v1/jobs', AUTH, 200],
    ['a 401 problem', '/v1/jobs', {}, 401],
    ['a 404 problem (no route)', '/nowhere', {}, 404],
    ['an API 404 problem', '/v1/jobs/0123456789abcdef', AUTH, 404],
    ['GET /v2/health/live', '/v2/health/live', {}, 200],
    ['GET /v2 (server metadata)', '/v2', AUTH, 200],
    ["/v2's own 404", '/v2/nowhere', AUTH, 404],
    ['the /ui redirect', '/ui', {}, 308],
  ] as const)('%s', async (what, path, headers, status) => {
    const reply = await send(t.port, path, { headers });
    expect(reply.status, reply.body.toString()).toBe(status);
    expectData(reply.headers, what);
  });

  it('a binary result (POST /v1/quantize) and a problem for a bad body', async () => {
    const body = new Uint8Array(Float32Array.of(1, 2, 3, 4).buffer);
    const ok = await send(t.port, '/v1/quantize?qdtype=int8', {
      headers: { ...AUTH, ...octetHeaders('float32', [4]) },
      body,
    });
    expect(ok.status).toBe(200);
    expectData(ok.headers, 'a quantize result');
    const bad = await send(t.port, '/v1/quantize?qdtype=int3', {
      headers: { ...AUTH, ...octetHeaders('float32', [4]) },
      body,
    });
    expect(bad.status).toBe(400);
    expectData(bad.headers, 'a 400 problem');
  });

  it('the live job stream (GET /v1/jobs/events, written by hand)', async () => {
    const headers = await new Promise<http.IncomingHttpHeaders>((resolve, reject) => {
      const req = http.get(
        { host: '127.0.0.1', port: t.port, path: '/v1/jobs/events', headers: AUTH },
        (res) => {
          expect(res.statusCode).toBe(200);
          resolve(res.headers);
          req.destroy();
        },
      );
      req.on('error', reject);
    });
    expectData(headers, 'server-sent events');
  });

  it("answers written to the socket: a request Node's parser refuses, an unknown Expect", async () => {
    const malformed = await rawExchange(t.port, [
      'GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n',
    ]);
    const refused = parseRaw(malformed.text)!;
    expect(refused.status).toBe(400);
    expectData(refused.headers, 'a clientError answer');
    const expectation = await rawExchange(t.port, [
      'POST /v1/quantize HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Length: 4\r\n\r\n',
    ]);
    const failed = parseRaw(expectation.text)!;
    expect(failed.status).toBe(417);
    expectData(failed.headers, 'a 417 answer');
  });
});

describe('pages: their own policy, no framing', () => {
  it('the console (/ui/): its policy, revalidated', async () => {
    const page = await send(t.port, '/ui/');
    expect(page.status).toBe(200);
    expectCommon(page.headers, '/ui/');
    expect(page.headers['content-security-policy']).toMatch(/^default-src 'self'; /);
    expect(page.headers['cache-control']).toBe('no-cache');
  });

  it('the API docs (/docs/): scripts and styles from this server only', async () => {
    for (const path of ['/docs/', '/docs/json', '/docs/static/swagger-ui-bundle.js']) {
      const reply = await send(t.port, path);
      expect(reply.status, path).toBe(200);
      expectCommon(reply.headers, path);
      const policy = String(reply.headers['content-security-policy']);
      expect(policy).toMatch(/^default-src 'none'; script-src 'self'; /);
      expect(policy).not.toMatch(/unsafe-eval|https:|\*/);
    }
  });
});

describe('the early shed (shed.ts) answers before Fastify, with the headers too', () => {
  let app: FastifyInstance;
  let hooked = 0;
  beforeAll(async () => {
    const { buildApp } = (await import(APP_URL)) as typeof App;
    const { Admission } = (await import(SERVICE_URL)) as typeof Service;
    const admission = new Admission(1);
    admission.acquire(); // held: every compute request is refused
    app = await buildApp({
      config: { ...t.server.config, apiKeys: [] },
      handle: t.server.handle,
      version: 'test',
      isReady: () => true,
      admission,
    });
    // (every answer Fastify sends passes onSend; the early shed's do not)
    app.addHook('onSend', async () => {
      hooked++;
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('503 OVERLOADED', async () => {
    const port = (app.server.address() as AddressInfo).port;
    const reply = await send(port, '/v1/quantize?qdtype=int8', {
      headers: octetHeaders('float32', [4]),
      body: new Uint8Array(16),
    });
    expect(reply.status).toBe(503);
    expect(hooked, 'answered before Fastify').toBe(0);
    expectData(reply.headers, 'an early 503');
  });
});
