/**
 * A request body must keep a minimum pace (src/http/pace.ts): a client that goes silent, or
 * trickles its body below QUANTD_BODY_MIN_RATE once QUANTD_BODY_IDLE_MS has passed, gets 408
 * BODY_TOO_SLOW and its connection closed — so it cannot hold an admission slot for as long as it
 * likes. With one slot (QUANTD_POOL_SIZE=1, QUANTD_QUEUE_LIMIT=0), the next request is served
 * once the slow one is refused. A body the client sends at a normal pace is untouched.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  expectProblem,
  octetHeaders,
  parseRaw,
  rawExchange,
  send,
  startTestServer,
  type RawStep,
  type TestServer,
} from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'quantd-http-pace-'));
let t: TestServer;

beforeAll(async () => {
  t = await startTestServer({
    QUANTD_BODY_IDLE_MS: '600',
    QUANTD_BODY_MIN_RATE: '2000',
    QUANTD_POOL_SIZE: '1',
    QUANTD_QUEUE_LIMIT: '0',
    QUANTD_DATA_DIR: join(dir, 'data'),
  });
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(dir, { recursive: true, force: true });
});

const head = (path: string, length: number, type = 'application/octet-stream'): string =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: ${type}\r\n` +
  `X-Tensor-Dtype: float32\r\nX-Tensor-Shape: ${length / 4}\r\nContent-Length: ${length}\r\n\r\n`;

/** `count` writes of `bytes` bytes, `everyMs` apart. */
const trickle = (count: number, bytes: number, everyMs: number): RawStep[] =>
  Array.from({ length: count }, () => [new Uint8Array(bytes), { waitMs: everyMs }]).flat();

function problemOf(text: string): { status: number; headers: Record<string, string>; body: string } {
  const r = parseRaw(text);
  expect(r, text).not.toBeNull();
  return { status: r!.status, headers: { ...r!.headers }, body: r!.body };
}

describe('the minimum pace of a request body', () => {
  it('a client gone silent mid-body gets 408 BODY_TOO_SLOW and the connection closed', async () => {
    const started = Date.now();
    const r = await rawExchange(t.port, [head('/v1/quantize', 4096), new Uint8Array(16), { waitMs: 5000 }], {
      timeoutMs: 5000,
    });
    const elapsed = Date.now() - started;
    const reply = problemOf(r.text);
    expectProblem(reply, 'BODY_TOO_SLOW', ['too slowly']);
    expect(reply.headers['connection']).toBe('close');
    expect(elapsed).toBeLessThan(3000);
  });

  it('a body trickled below the minimum rate is refused after the grace period', async () => {
    // 40 bytes every 100 ms: 400 bytes/s, below 2000
    const r = await rawExchange(t.port, [head('/v1/quantize', 400_000), ...trickle(60, 40, 100)], {
      timeoutMs: 6000,
    });
    expectProblem(problemOf(r.text), 'BODY_TOO_SLOW');
  });

  it('a slow client does not keep the only admission slot: the next request is served', async () => {
    const slow = rawExchange(t.port, [head('/v1/quantize', 4096), new Uint8Array(8), { waitMs: 5000 }], {
      timeoutMs: 5000,
    });
    await new Promise((r) => setTimeout(r, 100));
    const body = new Uint8Array(Float32Array.of(1, 2, 3, 4).buffer);
    const busy = await send(t.port, '/v1/quantize?qdtype=int8', {
      headers: octetHeaders('float32', [4]),
      body,
    });
    expect(busy.status).toBe(503); // the slow client holds the slot for now
    expectProblem(problemOf((await slow).text), 'BODY_TOO_SLOW');
    const after = await send(t.port, '/v1/quantize?qdtype=int8', {
      headers: octetHeaders('float32', [4]),
      body,
    });
    expect(after.status, after.body.toString()).toBe(200);
  });

  it('a job upload trickled below the pace is refused and leaves no job behind', async () => {
    const r = await rawExchange(
      t.port,
      [head('/v1/jobs?qdtype=int8', 400_000, 'application/x-safetensors'), ...trickle(60, 40, 100)],
      { timeoutMs: 6000 },
    );
    expectProblem(problemOf(r.text), 'BODY_TOO_SLOW');
    const list = await send(t.port, '/v1/jobs');
    expect(JSON.parse(list.body.toString()).jobs).toEqual([]);
  });

  it('a body at a normal pace is untouched, however long it takes overall', async () => {
    // 8 KiB every 100 ms (80 KiB/s) for 1.5 s: longer than the idle limit, well above the rate
    const n = 16 * 8192;
    const r = await rawExchange(t.port, [head('/v1/quantize?qdtype=int8', n), ...trickle(16, 8192, 100)], {
      timeoutMs: 8000,
    });
    expect(problemOf(r.text).status, r.text.slice(0, 400)).toBe(200);
  });
});

describe('the time a connection has to send a request head (QUANTD_HEADERS_TIMEOUT_MS)', () => {
  let h: TestServer;
  beforeAll(async () => {
    h = await startTestServer({ QUANTD_HEADERS_TIMEOUT_MS: '800', QUANTD_DATA_DIR: join(dir, 'heads') });
  });
  afterAll(async () => {
    await h?.server.shutdown('test done');
  });

  // blank lines before a request line are allowed (RFC 9112 §2.2), so the parser waits for more
  it.each([
    ['blank lines only', '\n\r\n\r\n'],
    ['a request line and half a header', 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Half: a'],
  ])('%s: 408 HEAD_TOO_SLOW within a second or two, the connection closed', async (_, bytes) => {
    const started = Date.now();
    const r = await rawExchange(h.port, [bytes, { waitMs: 6000 }], { timeoutMs: 6000, untilResponse: false });
    const elapsed = Date.now() - started;
    expect(r.closedByServer, JSON.stringify(r)).toBe(true);
    expectProblem(problemOf(r.text), 'HEAD_TOO_SLOW', ['within 800 ms']);
    expect(elapsed).toBeGreaterThanOrEqual(700);
    expect(elapsed).toBeLessThan(3000);
  });

  it('an idle keep-alive connection between requests is not cut by it', async () => {
    const get = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';
    const r = await rawExchange(h.port, [get, { waitMs: 1500 }, get], {
      timeoutMs: 3000,
      untilResponse: false,
    });
    expect(r.text.match(/HTTP\/1\.1 200/g)?.length, r.text.slice(0, 600)).toBe(2);
  });
});
