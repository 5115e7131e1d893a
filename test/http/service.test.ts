/**
 * The operational endpoints (README, The HTTP service): /healthz reports the kernel backend and ISA the server
 * loaded, /readyz is 200 when up, /metrics is Prometheus text whose counters, histogram and byte
 * counters move with each request (chunked uploads counted too), with the pool and backend gauges; /docs serves Swagger UI and
 * /docs/json is an OpenAPI 3 document of the four /v1 operations, each taking both binary body
 * types. Also start-up: configuration and backend errors reject startServer with their code,
 * a js-backend server (no pool) serves, and the server module loads from the source tree.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { REPO } from '../cli/run-cli.js';
import {
  SAFETENSORS,
  eventually,
  expectProblem,
  expectSameBytes,
  octetHeaders,
  send,
  startTestServer,
  type TestServer,
} from './helpers.js';
import type * as App from '../../src/http/app.js';

const VERSION = (JSON.parse(readFileSync(`${REPO}/package.json`, 'utf8')) as { version: string }).version;
const DATA = new Uint8Array(Float32Array.of(1, -2, 3, 0.5).buffer);
// The app the test server runs: dist/ (built by the test setup), typed by its source.
const APP_URL = pathToFileURL(join(REPO, 'dist', 'src', 'http', 'app.js')).href;

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ QUANTD_POOL_SIZE: '1' });
});
afterAll(async () => {
  await t?.server.shutdown('test');
});

const json = async (path: string, port = t.port): Promise<Record<string, unknown>> => {
  const reply = await send(port, path);
  expect(reply.status, `${path}: ${reply.body.toString()}`).toBe(200);
  expect(reply.headers['content-type']).toMatch(/^application\/json/);
  return JSON.parse(reply.body.toString()) as Record<string, unknown>;
};

describe('draining', () => {
  it('an API request while draining is 503 SHUTTING_DOWN with Retry-After (the app refuses it)', async () => {
    const { buildApp } = (await import(APP_URL)) as typeof App;
    const app = await buildApp({
      config: t.server.config,
      handle: t.server.handle,
      version: 'test',
      isReady: () => false,
    });
    try {
      const reply = await app.inject({
        method: 'POST',
        url: '/v1/quantize',
        headers: octetHeaders('float32', [4]),
        payload: Buffer.from(DATA),
      });
      expect(reply.statusCode).toBe(503);
      expect(reply.headers['retry-after']).toBe('1');
      expect(JSON.parse(reply.body)).toMatchObject({ code: 'SHUTTING_DOWN', status: 503 });
      expect((await app.inject({ url: '/readyz' })).statusCode).toBe(503);
    } finally {
      await app.close();
    }
  });
});

describe('/healthz and /readyz', () => {
  it('/healthz reports the backend and ISA in use', async () => {
    const health = await json('/healthz');
    const { backend, isa } = t.server.handle.kernels;
    expect(health).toMatchObject({ status: 'ok', version: VERSION, backend, isa });
    expect(['native', 'wasm', 'js']).toContain(health['backend']);
    expect(health['kernels']).toBe(`kernels: ${backend} ${isa}`);
    expect(typeof health['uptime_seconds']).toBe('number');
  });

  it('/readyz is 200 when up', async () => {
    expect(await json('/readyz')).toEqual({ status: 'ready', draining: false });
  });

  it('a js-backend server (no worker pool) reports js and serves the same bytes', async () => {
    const js = await startTestServer({ QUANTD_BACKEND: 'js' });
    try {
      expect(js.server.handle.pool).toBeNull();
      expect(await json('/healthz', js.port)).toMatchObject({ backend: 'js', isa: 'ts' });
      expect(await json('/readyz', js.port)).toMatchObject({ status: 'ready' });
      const metrics = (await send(js.port, '/metrics')).body.toString();
      expect(metrics).toContain('quantd_kernel_backend_info{backend="js",isa="ts"} 1');
      const body = { headers: octetHeaders('float32', [4]), body: DATA };
      const [a, b] = await Promise.all([
        send(js.port, '/v1/quantize', body),
        send(t.port, '/v1/quantize', body),
      ]);
      expect([a.status, b.status]).toEqual([200, 200]);
      expectSameBytes(a.body, b.body, 'js backend vs the default backend');
    } finally {
      await js.server.shutdown('test');
    }
  });
});

/** Prometheus sample values by exact series (name{labels}), from a /metrics text. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

async function scrape(port = t.port): Promise<Map<string, number>> {
  const reply = await send(port, '/metrics');
  expect(reply.status).toBe(200);
  expect(reply.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return samples(reply.body.toString());
}

const Q = 'route="/v1/quantize",method="POST"';

describe('/metrics', () => {
  it('is Prometheus text with the request, duration, byte, pool and backend series', async () => {
    await send(t.port, '/v1/quantize', { headers: octetHeaders('float32', [4]), body: DATA });
    const reply = await send(t.port, '/metrics');
    const text = reply.body.toString();
    for (const [name, type] of [
      ['quantd_http_requests_total', 'counter'],
      ['quantd_http_request_duration_seconds', 'histogram'],
      ['quantd_http_request_bytes_total', 'counter'],
      ['quantd_http_response_bytes_total', 'counter'],
      ['quantd_pool_operations_in_flight', 'gauge'],
      ['quantd_pool_queue_depth', 'gauge'],
      ['quantd_pool_task_wait_milliseconds', 'gauge'],
      ['quantd_pool_task_run_milliseconds', 'gauge'],
      ['quantd_kernel_backend_info', 'gauge'],
    ]) {
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
      expect(text).toMatch(new RegExp(`^# HELP ${name} \\S`, 'm'));
    }
    const s = samples(text);
    const { backend, isa } = t.server.handle.kernels;
    expect(s.get(`quantd_kernel_backend_info{backend="${backend}",isa="${isa}"}`)).toBe(1);
    expect(s.get(`quantd_http_requests_total{${Q},status="200"}`)).toBeGreaterThanOrEqual(1);
    expect(
      s.get(`quantd_http_request_duration_seconds_bucket{le="+Inf",${Q},status="200"}`),
    ).toBeGreaterThanOrEqual(1);
    expect(s.get('quantd_pool_operations_in_flight')).toBe(0);
    expect(s.get('quantd_pool_queue_depth')).toBe(0);
    for (const q of ['0.5', '0.9', '0.99']) {
      expect(s.has(`quantd_pool_task_run_milliseconds{quantile="${q}"}`)).toBe(true);
      expect(s.has(`quantd_pool_task_wait_milliseconds{quantile="${q}"}`)).toBe(true);
    }
  });

  it('the counters, the histogram and the byte counters move with each request', async () => {
    const before = await scrape();
    const ok = await send(t.port, '/v1/quantize', { headers: octetHeaders('float32', [4]), body: DATA });
    const bad = await send(t.port, '/v1/quantize?qdtype=int9', {
      headers: octetHeaders('float32', [4]),
      body: DATA,
    });
    const missing = await send(t.port, '/v1/nothing');
    expect([ok.status, bad.status, missing.status]).toEqual([200, 400, 404]);

    const delta = (after: Map<string, number>, key: string): number =>
      (after.get(key) ?? 0) - (before.get(key) ?? 0);
    let after = await scrape();
    // the series are updated when the response closes: give that a moment
    await eventually(() => delta(after, `quantd_http_requests_total{${Q},status="400"}`) === 1, 1000);
    after = await scrape();
    expect(delta(after, `quantd_http_requests_total{${Q},status="200"}`)).toBe(1);
    expect(delta(after, `quantd_http_requests_total{${Q},status="400"}`)).toBe(1);
    expect(delta(after, 'quantd_http_requests_total{route="unmatched",method="GET",status="404"}')).toBe(1);
    expect(delta(after, `quantd_http_request_duration_seconds_count{${Q},status="200"}`)).toBe(1);
    expect(delta(after, `quantd_http_request_duration_seconds_bucket{le="+Inf",${Q},status="200"}`)).toBe(1);
    expect(delta(after, `quantd_http_request_duration_seconds_sum{${Q},status="200"}`)).toBeGreaterThan(0);
    expect(delta(after, 'quantd_http_request_bytes_total{route="/v1/quantize"}')).toBe(2 * DATA.byteLength);
    expect(delta(after, 'quantd_http_response_bytes_total{route="/v1/quantize"}')).toBe(
      ok.body.byteLength + bad.body.byteLength,
    );
  });

  it('request bytes count chunked uploads too (no Content-Length)', async () => {
    const before = await scrape();
    const reply = await send(t.port, '/v1/quantize', {
      headers: octetHeaders('float32', [4]),
      body: DATA,
      chunked: 4,
    });
    expect(reply.status).toBe(200);
    const key = 'quantd_http_request_bytes_total{route="/v1/quantize"}';
    let after = await scrape();
    await eventually(
      () =>
        (after.get(`quantd_http_requests_total{${Q},status="200"}`) ?? 0) >
        (before.get(`quantd_http_requests_total{${Q},status="200"}`) ?? 0),
      1000,
    );
    after = await scrape();
    expect((after.get(key) ?? 0) - (before.get(key) ?? 0)).toBe(DATA.byteLength);
  });
});

describe('/docs', () => {
  it('/docs serves the Swagger UI', async () => {
    const reply = await send(t.port, '/docs');
    const page = reply.status === 302 ? await send(t.port, String(reply.headers.location)) : reply;
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    expect(page.body.toString()).toContain('swagger-ui');
  });

  it('/docs/json is an OpenAPI 3 document of the four operations, each taking both binary bodies', async () => {
    const doc = (await json('/docs/json')) as {
      openapi: string;
      info: { title: string; version: string };
      paths: Record<string, Record<string, Record<string, unknown>>>;
    };
    expect(doc.openapi).toMatch(/^3\./);
    expect(doc.info).toMatchObject({ title: 'quantd', version: VERSION });
    // the operations; /v1/jobs*, /v1/calibrations*, /v1/linear-error and /v1/inspect are documented
    // too (test/jobs, test/calibration, test/http/linear-error.test.ts, console-routes.test.ts)
    const ops = Object.keys(doc.paths).filter(
      (p) =>
        p.startsWith('/v1/') &&
        !p.startsWith('/v1/jobs') &&
        !p.startsWith('/v1/calibrations') &&
        p !== '/v1/linear-error' &&
        p !== '/v1/inspect',
    );
    expect(ops.sort()).toEqual(['/v1/dequantize', '/v1/fake-quantize', '/v1/qparams', '/v1/quantize']);
    for (const path of ops) {
      const post = doc.paths[path]!['post'] as {
        requestBody: { content: Record<string, unknown> };
        parameters: { name: string; in: string }[];
        responses: Record<string, { content?: Record<string, unknown> }>;
      };
      expect(post, path).toBeDefined();
      expect(Object.keys(post.requestBody.content).sort(), path).toEqual([
        'application/octet-stream',
        SAFETENSORS,
      ]);
      expect(Object.keys(post.responses['200']!.content ?? {}), path).toEqual(
        expect.arrayContaining([SAFETENSORS, 'application/json']),
      );
      const query = post.parameters.filter((p) => p.in === 'query').map((p) => p.name);
      if (path === '/v1/dequantize') expect(query).toEqual(['dtype']);
      else expect(query).toEqual(expect.arrayContaining(['qdtype', 'scheme', 'mode', 'include', 'exclude']));
      const headers = post.parameters.filter((p) => p.in === 'header').map((p) => p.name.toLowerCase());
      expect(headers).toEqual(expect.arrayContaining(['x-tensor-dtype', 'x-tensor-shape']));
    }
    expect(ops.every((p) => !doc.paths[p]!['get'])).toBe(true);
  });
});

describe('start-up', () => {
  it.each([
    [{ QUANTD_HTTP_PORT: '99999' }, 'CONFIG_INVALID', 'QUANTD_HTTP_PORT'],
    [{ QUANTD_BODY_LIMIT: '12' }, 'CONFIG_INVALID', 'QUANTD_BODY_LIMIT'],
    [{ QUANTD_API_KEYS: 'short' }, 'CONFIG_INVALID', 'QUANTD_API_KEYS'],
    [{ QUANTD_BACKEND: 'wasm', QUANTD_ISA: 'avx9000' }, 'BACKEND_UNAVAILABLE', 'wasm'],
  ])('%o rejects startServer with %s', async (env, code, fragment) => {
    const started = startTestServer(env);
    await expect(started).rejects.toMatchObject({ code });
    await expect(started).rejects.toThrow(fragment);
  });

  it('the server module loads and starts from the source tree (src/server/serve.ts)', async () => {
    const { startServer } = await import('../../src/server/serve.js');
    const server = await startServer({
      ...process.env,
      QUANTD_HOST: '127.0.0.1',
      QUANTD_HTTP_PORT: '0',
      QUANTD_GRPC_PORT: '0',
      QUANTD_LOG_LEVEL: 'silent',
      QUANTD_BACKEND: 'js',
    });
    try {
      const health = await json('/healthz', server.httpPort);
      expect(health['version']).toBe(VERSION);
    } finally {
      await server.shutdown('test');
    }
  });

  it('problem responses from a second server are its own (one registry per instance)', async () => {
    const other = await startTestServer({ QUANTD_BACKEND: 'js' });
    try {
      expectProblem(await send(other.port, '/nope'), 'NOT_FOUND');
      const s = await scrape(other.port);
      expect(s.get(`quantd_http_requests_total{${Q},status="200"}`)).toBeUndefined();
    } finally {
      await other.server.shutdown('test');
    }
  });
});
