/**
 * Slow requests, made slow with the pool's test hooks (QUANTD_TEST_HOOKS=1,
 * QUANTD_TEST_TASK_DELAY_MS: every kernel task in a worker is held that long first) and
 * QUANTD_INLINE_LIMIT=0 (every tensor goes to the pool):
 *  - load shedding: with QUANTD_POOL_SIZE=1 and QUANTD_QUEUE_LIMIT=0, a second request while one
 *    is in flight gets 503 OVERLOADED with Retry-After at once; after the first finishes (with
 *    the CLI's bytes) requests succeed again;
 *  - a client that disconnects mid-compute aborts its job: the pool has nothing in flight long
 *    before the task would have ended, and the server still serves (a 256 KiB body, and a small
 *    one: with QUANTD_INLINE_LIMIT=0 small bodies run on the pool as well);
 *  - QUANTD_REQUEST_TIMEOUT_MS: 504 REQUEST_TIMEOUT, long before the task would have ended;
 *  - /metrics sees the pool: an operation in flight, and task run times of the delay.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serializeSafetensors } from '../../src/format/index.js';
import {
  cliOutput,
  eventually,
  expectProblem,
  expectSameBytes,
  octetHeaders,
  parseRaw,
  rawExchange,
  send,
  startTestServer,
  type Reply,
  type TestServer,
} from './helpers.js';

const DELAY_MS = 500;
const dir = mkdtempSync(join(tmpdir(), 'quantd-http-slow-'));
const DATA = new Uint8Array(Float32Array.of(0.5, -1.5, 2.25, 3, -0.125, 7).buffer);
const SHAPE = [2, 3];
/** 256 KiB of float32: a body large enough to be given a cancellation signal whatever the limits. */
const BIG = new Uint8Array(Float32Array.from({ length: 65536 }, (_, i) => Math.sin(i)).buffer);
/** The CLI's qparams of DATA (as the one-tensor file "tensor"). */
let expected: Buffer;

const qparams = (port: number, signal?: AbortSignal): Promise<Reply> =>
  send(port, '/v1/qparams', {
    headers: octetHeaders('float32', SHAPE),
    body: DATA,
    ...(signal ? { signal } : {}),
  });

const pendingOf = (t: TestServer): number => t.server.handle.pool!.workers().pending;

beforeAll(async () => {
  const input = join(dir, 'in.safetensors');
  writeFileSync(
    input,
    serializeSafetensors([{ name: 'tensor', dtype: 'F32', shape: SHAPE, data: DATA }], null),
  );
  expected = await cliOutput('qparams', input, join(dir, 'out.safetensors'), []);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe(`one worker, no queue, tasks held ${DELAY_MS} ms`, () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(
      { QUANTD_POOL_SIZE: '1', QUANTD_QUEUE_LIMIT: '0', QUANTD_INLINE_LIMIT: '0' },
      DELAY_MS,
    );
    expect(t.server.handle.pool, 'a native or wasm backend, hence a pool').not.toBeNull();
  });
  afterAll(async () => {
    await t?.server.shutdown('test');
  });

  it('the test hooks make requests slow (the premise of this file)', async () => {
    const started = Date.now();
    const reply = await qparams(t.port);
    expect(reply.status).toBe(200);
    expect(Date.now() - started, 'QUANTD_TEST_TASK_DELAY_MS holds each kernel task').toBeGreaterThanOrEqual(
      DELAY_MS,
    );
  });

  it('load shedding: 503 OVERLOADED with Retry-After while one request is in flight, then 200 again', async () => {
    let firstDone = false;
    const first = qparams(t.port).finally(() => (firstDone = true));
    expect(await eventually(() => pendingOf(t) === 1, 2000), 'the first request reaches the pool').toBe(true);

    const started = Date.now();
    const second = await qparams(t.port);
    const p = expectProblem(second, 'OVERLOADED', ['retry later'], '/v1/qparams');
    expect(p.params).toMatchObject({ limit: 1 });
    expect(Number(second.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(firstDone, 'the 503 came while the first request was still running').toBe(false);
    expect(Date.now() - started, 'refused at once, not queued').toBeLessThan(DELAY_MS);

    const done = await first;
    expect(done.status, done.body.toString()).toBe(200);
    expectSameBytes(done.body, expected, 'the request in flight');

    const third = await qparams(t.port);
    expect(third.status, third.body.toString()).toBe(200);
    expectSameBytes(third.body, expected, 'the request after');
  });

  it.each(['/v1/qparams', '/%761/qparams'])(
    'load shedding answers before the body is read (headers only): %s',
    async (path) => {
      const first = qparams(t.port);
      expect(await eventually(() => pendingOf(t) === 1, 2000), 'the first request reaches the pool').toBe(
        true,
      );
      // Headers only: the 503 must come without the body (bounded memory). The router
      // decodes %76 to "v", so the second path is POST /v1/qparams too and must be admitted as one.
      const head =
        `POST ${path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\n` +
        `X-Tensor-Dtype: float32\r\nX-Tensor-Shape: 1048576\r\nContent-Length: ${4 * 1048576}\r\n\r\n`;
      const raw = await rawExchange(t.port, [head], { timeoutMs: DELAY_MS });
      const firstReply = await first;
      expect(firstReply.status).toBe(200);
      const res = parseRaw(raw.text);
      expect(res, 'a response to the headers alone').not.toBeNull();
      expectProblem({ status: res!.status, headers: res!.headers, body: res!.body }, 'OVERLOADED');
    },
  );

  it('a refused client that goes on sending its body still reads the 503 (lingering close)', async () => {
    const first = qparams(t.port);
    expect(await eventually(() => pendingOf(t) === 1, 2000), 'the first request reaches the pool').toBe(true);
    const size = 4 * 1048576;
    const head =
      `POST /v1/qparams HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\n` +
      `X-Tensor-Dtype: float32\r\nX-Tensor-Shape: ${size / 4}\r\nContent-Length: ${size}\r\n\r\n`;
    // The client sends the head and a little, is refused, and without reading anything sends the
    // rest of its body once the server has answered — as a client streaming a large body does.
    // A server that closes at once meets those bytes with a reset, and the reset makes the
    // client's kernel drop the unread 503: the client sees ECONNRESET instead of its answer.
    const answer = await new Promise<{ text: string; error: string | null }>((resolve) => {
      const socket = net.connect({ port: t.port, host: '127.0.0.1' });
      let text = '';
      let error: string | null = null;
      socket.pause();
      socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
      socket.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? e.message));
      socket.on('close', () => resolve({ text, error }));
      socket.write(head);
      socket.write(Buffer.alloc(65536));
      setTimeout(() => {
        socket.write(Buffer.alloc(size - 65536));
        setTimeout(() => socket.resume(), 300);
      }, 300);
    });
    expect((await first).status).toBe(200);
    expect(answer.error).toBeNull();
    const res = parseRaw(answer.text);
    expect(res?.complete, answer.text.slice(0, 200)).toBe(true);
    expectProblem({ status: res!.status, headers: res!.headers, body: res!.body }, 'OVERLOADED');
  });

  it('Expect: 100-continue — refused without the body while full, told to continue once admitted', async () => {
    const head =
      `POST /v1/qparams HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\n` +
      `X-Tensor-Dtype: float32\r\nX-Tensor-Shape: 2,3\r\nContent-Length: 24\r\nExpect: 100-continue\r\n\r\n`;
    /** Sends the head, then the body only once 100 Continue arrives; resolves with all it got. */
    const exchange = (): Promise<string> =>
      new Promise((resolve) => {
        const socket = net.connect({ port: t.port, host: '127.0.0.1' });
        let text = '';
        socket.on('data', (d: Buffer) => {
          const before = text;
          text += d.toString('latin1');
          if (!before.includes('100 Continue') && text.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
            socket.write(Buffer.from(DATA));
          }
          const final = parseRaw(text.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, ''));
          if (final?.complete) socket.end();
        });
        socket.on('error', () => undefined);
        socket.on('close', () => resolve(text));
        socket.write(head);
      });

    const first = qparams(t.port);
    expect(await eventually(() => pendingOf(t) === 1, 2000), 'the first request reaches the pool').toBe(true);
    const refused = await exchange();
    expect(refused, 'no go-ahead for a request that is refused').not.toContain('100 Continue');
    const res = parseRaw(refused);
    expectProblem({ status: res!.status, headers: res!.headers, body: res!.body }, 'OVERLOADED');
    expect((await first).status).toBe(200);

    const admitted = await exchange();
    expect(admitted.startsWith('HTTP/1.1 100 Continue\r\n\r\n'), admitted.slice(0, 100)).toBe(true);
    const final = parseRaw(admitted.slice('HTTP/1.1 100 Continue\r\n\r\n'.length));
    expect(final?.status, final?.body).toBe(200);
  });

  it('/metrics shows the operation in flight, then task run times of the delay', async () => {
    const metric = async (name: string): Promise<number> => {
      const text = (await send(t.port, '/metrics')).body.toString();
      const line = text.split('\n').find((l) => l.startsWith(`${name} `));
      expect(line, name).toBeDefined();
      return Number(line!.slice(name.length + 1));
    };
    const running = qparams(t.port);
    expect(await eventually(() => pendingOf(t) === 1, 2000)).toBe(true);
    expect(await metric('quantd_pool_operations_in_flight')).toBe(1);
    expect((await running).status).toBe(200);
    expect(await metric('quantd_pool_operations_in_flight')).toBe(0);
    expect(await metric('quantd_pool_task_run_milliseconds{quantile="0.5"}')).toBeGreaterThanOrEqual(
      DELAY_MS * 0.9,
    );
  });

  /** Disconnects a request once it is in the pool; resolves with the ms until nothing is in flight. */
  async function disconnect(body: Uint8Array, shape: readonly number[]): Promise<number | null> {
    const controller = new AbortController();
    const aborted = send(t.port, '/v1/qparams', {
      headers: octetHeaders('float32', shape),
      body,
      signal: controller.signal,
    }).then(
      () => 'completed',
      (err: Error) => err.name,
    );
    expect(await eventually(() => pendingOf(t) === 1, 2000), 'the request reaches the pool').toBe(true);
    const cut = Date.now();
    controller.abort();
    expect(await aborted).toBe('AbortError');
    // A job left running holds the pool for the rest of its tasks (>= DELAY_MS).
    const freed = await eventually(() => pendingOf(t) === 0, DELAY_MS * 0.6);
    const ms = Date.now() - cut;
    // whatever happened, let the job end before the next test
    await eventually(() => pendingOf(t) === 0, 4 * DELAY_MS);
    return freed ? ms : null;
  }

  it('a client that disconnects mid-compute aborts its job (256 KiB body); the server still serves', async () => {
    const ms = await disconnect(BIG, [BIG.byteLength / 4]);
    expect(ms, 'nothing in flight soon after the disconnect').not.toBeNull();
    expect(ms!).toBeLessThan(DELAY_MS * 0.6);

    const after = await qparams(t.port);
    expect(after.status, after.body.toString()).toBe(200);
    expectSameBytes(after.body, expected, 'the request after the abort');
    expect(pendingOf(t)).toBe(0);
  });

  it('a disconnect aborts a small request on the pool too (QUANTD_INLINE_LIMIT=0)', async () => {
    // op-routes.ts gives bodies under 256 KiB no signal ("computed in this thread"), which holds
    // only while the inline limit is the default.
    const ms = await disconnect(DATA, SHAPE);
    expect(ms, 'nothing in flight soon after the disconnect').not.toBeNull();
  });
});

describe('QUANTD_REQUEST_TIMEOUT_MS', () => {
  const TIMEOUT_MS = 300;
  const LONG_DELAY_MS = 1500;
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(
      { QUANTD_POOL_SIZE: '1', QUANTD_INLINE_LIMIT: '0', QUANTD_REQUEST_TIMEOUT_MS: String(TIMEOUT_MS) },
      LONG_DELAY_MS,
    );
  });
  afterAll(async () => {
    await t?.server.shutdown('test');
  });

  it('a request running past the timeout gets 504 REQUEST_TIMEOUT, and its job is aborted', async () => {
    const started = Date.now();
    const reply = await send(t.port, '/v1/quantize', {
      headers: octetHeaders('float32', [BIG.byteLength / 4], { 'x-request-id': 'slow-1' }),
      body: BIG,
    });
    const elapsed = Date.now() - started;
    const p = expectProblem(reply, 'REQUEST_TIMEOUT', [`within ${TIMEOUT_MS} ms`], '/v1/quantize');
    expect(p.request_id).toBe('slow-1');
    expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 10);
    expect(elapsed, 'answered at the timeout, not when the task ended').toBeLessThan(LONG_DELAY_MS);
    expect(await eventually(() => pendingOf(t) === 0, 500), 'the job is aborted').toBe(true);
  });
});
