/**
 * Who and what the Open Inference Protocol endpoints let in, on real servers:
 *  - QUANTD_API_KEYS: health (live, ready, model ready) is open over HTTP and gRPC; server and
 *    model metadata and inference need the bearer token (401 {"error"} / UNAUTHENTICATED);
 *  - QUANTD_BODY_LIMIT bounds a body before it is read and a compressed body once decompressed
 *    (a small gzip "bomb" is 413);
 *  - the request's `timeout` parameter (microseconds) ends a slow inference with REQUEST_TIMEOUT
 *    (504 / DEADLINE_EXCEEDED), and inference shares the server's admission: 503 OVERLOADED with
 *    Retry-After (gRPC UNAVAILABLE) while the pool is full, health still answering.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import zlib from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { catalogue, type ErrorCode } from '../../src/errors/index.js';
import { bearer, eventually, expectGrpcError, startTestServer, type TestServer } from '../grpc/helpers.js';
import {
  call,
  floatBytes,
  floats,
  grpcError,
  grpcInfer,
  inferenceClient,
  request,
  restBody,
  restInfer,
  type HttpReply,
  type InferenceClient,
  type InputTensor,
} from './client.js';

const KEY = 'oip-test-key-0123456789';
const input: InputTensor = {
  name: 'input',
  datatype: 'FP32',
  shape: [4, 4],
  bytes: floatBytes(floats(16, 1), 'FP32'),
};

function expectError(reply: HttpReply, code: ErrorCode): string {
  const text = reply.body.toString('utf8');
  expect(reply.status, text).toBe(catalogue[code].http);
  expect(String(reply.headers['content-type'])).toMatch(/^application\/json/);
  const message = (JSON.parse(text) as { error: string }).error;
  expect(message.startsWith(`${code}: `), message).toBe(true);
  return message;
}

describe('QUANTD_API_KEYS and QUANTD_BODY_LIMIT', () => {
  let t: TestServer;
  let client: InferenceClient;
  const dataDir = mkdtempSync(join(tmpdir(), 'quantd-oip-'));
  beforeAll(async () => {
    t = await startTestServer({
      QUANTD_API_KEYS: KEY,
      QUANTD_BODY_LIMIT: '64k',
      QUANTD_DATA_DIR: dataDir,
    });
    client = inferenceClient(t.target);
  });
  afterAll(async () => {
    client?.close();
    await t?.server.shutdown('test');
    rmSync(dataDir, { recursive: true, force: true });
  });
  const auth = { authorization: `Bearer ${KEY}` };

  it('HTTP: health is open; metadata, inference and unknown /v2 paths need the token', async () => {
    for (const path of [
      '/v2/health/live',
      '/v2/health/ready',
      '/v2/models/quantize/ready',
      '/v2/models/quantize/versions/1/ready',
    ]) {
      expect((await request(t.base, path)).status, path).toBe(200);
    }
    for (const path of ['/v2', '/v2/', '/v2/models/quantize', '/v2/models/nope', '/v2/elsewhere']) {
      const reply = await request(t.base, path);
      expectError(reply, 'UNAUTHORIZED');
      expect(reply.headers['www-authenticate']).toMatch(/^Bearer/);
      expect(
        (await request(t.base, path, { headers: { authorization: 'Bearer wrong-key-0123456789' } })).status,
      ).toBe(401);
    }
    expect((await request(t.base, '/v2', { headers: auth })).status).toBe(200);
    expect((await request(t.base, '/v2/', { headers: auth })).status).toBe(200);
    expect((await request(t.base, '/v2/models/quantize', { headers: auth })).status).toBe(200);
    expectError(await restInfer(t.base, 'quantize', [input]), 'UNAUTHORIZED');
    const ok = await restInfer(t.base, 'quantize', [input], { headers: auth });
    expect(ok.status, ok.body.toString()).toBe(200);
  });

  it('gRPC: ServerLive, ServerReady, ModelReady are open; metadata and ModelInfer need the token', async () => {
    expect(await call(client, 'ServerLive', {})).toEqual({ live: true });
    expect(await call(client, 'ServerReady', {})).toEqual({ ready: true });
    expect(await call(client, 'ModelReady', { name: 'dequantize' })).toEqual({ ready: true });
    expectGrpcError(await grpcError(call(client, 'ServerMetadata', {})), 'UNAUTHORIZED');
    expectGrpcError(await grpcError(call(client, 'ModelMetadata', { name: 'quantize' })), 'UNAUTHORIZED');
    expectGrpcError(await grpcError(grpcInfer(client, 'quantize', [input])), 'UNAUTHORIZED');
    expect(await call(client, 'ServerMetadata', {}, bearer(KEY))).toMatchObject({ name: 'quantd' });
    const { outputs } = await grpcInfer(client, 'quantize', [input], { metadata: bearer(KEY) });
    expect(outputs.get('codes')!.datatype).toBe('INT8');
  });

  it('a body over the limit is refused on its Content-Length; a gzip body that inflates past it is 413', async () => {
    const big = { ...input, shape: [128, 128], bytes: new Uint8Array(4 * 128 * 128) };
    expectError(
      await restInfer(t.base, 'quantize', [big], { headers: auth, binaryInputs: true }),
      'PAYLOAD_TOO_LARGE',
    );
    // 1 MiB of zeros gzips to about 1 KiB: under the limit on the wire, 16 times over it inflated
    const { body, headerLength } = restBody([big], { binaryInputs: true });
    const padded = Buffer.concat([body, Buffer.alloc(1 << 20)]);
    const bomb = zlib.gzipSync(padded);
    expect(bomb.byteLength).toBeLessThan(64 * 1024);
    const reply = await request(t.base, '/v2/models/quantize/infer', {
      headers: {
        ...auth,
        'content-encoding': 'gzip',
        'inference-header-content-length': String(headerLength),
      },
      body: bomb,
    });
    expect(expectError(reply, 'PAYLOAD_TOO_LARGE')).toContain('decompressed');
    // within the limit once inflated: fine
    const small = await restInfer(t.base, 'quantize', [input], {
      headers: auth,
      binaryInputs: true,
      encoding: 'gzip',
    });
    expect(small.status, small.body.toString()).toBe(200);
  });
});

describe('a compressed body under the default (2 GiB) body limit', () => {
  let t: TestServer;
  const dataDir = mkdtempSync(join(tmpdir(), 'quantd-oip-bomb-'));
  beforeAll(async () => {
    t = await startTestServer({ QUANTD_DATA_DIR: dataDir });
  });
  afterAll(async () => {
    await t?.server.shutdown('test done');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('may inflate 256 times (at least 64 MiB), not to the body limit: a gzip bomb is 413 at once', async () => {
    // 96 MiB of zeros gzip to about 100 KiB: far under the limit, and past 256 × 100 KiB and 64 MiB
    const { body, headerLength } = restBody([input], { binaryInputs: true });
    const bomb = zlib.gzipSync(Buffer.concat([body, Buffer.alloc(96 << 20)]));
    expect(bomb.byteLength).toBeLessThan(256 * 1024);
    const reply = await request(t.base, '/v2/models/quantize/infer', {
      headers: { 'content-encoding': 'gzip', 'inference-header-content-length': String(headerLength) },
      body: bomb,
    });
    expect(expectError(reply, 'PAYLOAD_TOO_LARGE')).toContain('256 times');
  });
});

describe('one slow worker, no queue', () => {
  const DELAY_MS = 400;
  let t: TestServer;
  let client: InferenceClient;
  const dataDir = mkdtempSync(join(tmpdir(), 'quantd-oip-'));
  beforeAll(async () => {
    t = await startTestServer(
      {
        QUANTD_POOL_SIZE: '1',
        QUANTD_QUEUE_LIMIT: '0',
        QUANTD_INLINE_LIMIT: '0',
        QUANTD_DATA_DIR: dataDir,
      },
      { taskDelayMs: DELAY_MS },
    );
    client = inferenceClient(t.target);
  });
  afterAll(async () => {
    client?.close();
    await t?.server.shutdown('test');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('the timeout parameter (microseconds) ends a slow inference: 504 REQUEST_TIMEOUT / DEADLINE_EXCEEDED', async () => {
    let started = Date.now();
    const reply = await restInfer(t.base, 'quantize', [input], { parameters: { timeout: 50_000 } });
    expect(expectError(reply, 'REQUEST_TIMEOUT')).toContain('50 ms');
    expect(Date.now() - started).toBeLessThan(DELAY_MS);
    expect(await eventually(() => t.pending() === 0, 2000), 'the aborted task leaves the pool').toBe(true);

    started = Date.now();
    const err = await grpcError(grpcInfer(client, 'quantize', [input], { parameters: { timeout: 50_000 } }));
    expectGrpcError(err, 'REQUEST_TIMEOUT');
    expect(err.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(Date.now() - started).toBeLessThan(DELAY_MS);
    expect(await eventually(() => t.pending() === 0, 2000)).toBe(true);
  });

  it('inference takes an admission slot: 503 OVERLOADED (Retry-After) / UNAVAILABLE while full; health answers', async () => {
    // choose_qparams: the fewest kernel tasks (each held DELAY_MS)
    const first = restInfer(t.base, 'choose_qparams', [input]);
    expect(await eventually(() => t.pending() === 1, 3000), 'the first request reaches the pool').toBe(true);
    const second = await restInfer(t.base, 'quantize', [input]);
    expectError(second, 'OVERLOADED');
    expect(Number(second.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expectGrpcError(await grpcError(grpcInfer(client, 'quantize', [input])), 'OVERLOADED');
    expect((await request(t.base, '/v2/health/live')).status).toBe(200);
    expect((await request(t.base, '/v2/health/ready')).status).toBe(200);
    const done = await first;
    expect(done.status, done.body.toString()).toBe(200);
    const third = await restInfer(t.base, 'choose_qparams', [input]);
    expect(third.status).toBe(200);
  });
});
