/**
 * JSON and text bodies cannot end the server (issue 37, item 1). Fastify's own JSON and text
 * parsers read a body up to QUANTD_BODY_LIMIT (2 GiB) and then decoded it into one string: past
 * 512 MiB, V8's limit, Node threw ERR_STRING_TOO_LONG outside any handler and the process died
 * 4–11 s after the send. Against a real `quantd serve` child, with its default limits:
 *
 *  - every route that takes JSON or text — and every other kind of route, the unmatched ones
 *    included — answers a 600 MiB declared body at once, with the body never sent: 413 naming
 *    the JSON setting, 415 where the type is not taken, 404 where no route is;
 *  - a chunked JSON body is cut with 413 as soon as it passes its limit (the server's own count of
 *    the bytes it read, /metrics, is the limit and one socket read at most);
 *  - 600 MiB bodies sent whole (generated as they go, never held in memory), declared and
 *    chunked, leave the process alive, its stderr free of uncaught errors, and /healthz answering
 *    in under 100 ms (p99) throughout.
 *
 * QUANTD_RELIABILITY=long sends every route the whole-body vector and 1.5 GiB bodies.
 */
import http from 'node:http';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { parseRaw } from '../http/helpers.js';
import { startChildServer, type ChildServer } from './server.js';

const LONG = process.env['QUANTD_RELIABILITY'] === 'long';
const MiB = 1024 * 1024;
const HUGE = (LONG ? 1536 : 600) * MiB;
/** The defaults the child runs with (src/config.ts). */
const JSON_LIMIT = MiB;
const CALIBRATION_JSON_LIMIT = 8 * MiB;
const OIP_JSON_LIMIT = 4 * MiB;
/** The most a body reader takes from the socket at once (Node's reads of 64 KiB). */
const READ_SIZE = 64 * 1024;

const JSON_TYPE = 'application/json';
/** Every body is made of this block, over and over: JSON whitespace after a '['. */
const BLOCK = Buffer.alloc(MiB, 0x20);
BLOCK[0] = 0x5b;
const TEXT_TYPE = 'text/plain';

let server: ChildServer;
let data: string;

beforeAll(async () => {
  data = mkdtempSync(join(tmpdir(), 'quantd-json-bodies-'));
  server = await startChildServer({ QUANTD_DATA_DIR: data, QUANTD_LOG_LEVEL: 'warn' });
});

afterAll(async () => {
  await server?.kill();
  if (data) rmSync(data, { recursive: true, force: true });
});

/** What the child wrote that says an error escaped (the crash this file is about, or any other). */
function uncaught(): string[] {
  return server.stderr().match(/ERR_STRING_TOO_LONG|uncaught|Unhandled|FATAL ERROR|^\s+at /gim) ?? [];
}

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
  /** From the head's last byte written to the answer's last byte read. */
  readonly ms: number;
}

/**
 * Sends a request head that declares `length` body bytes, and not one byte of the body;
 * resolves with the answer, or rejects when none is complete within 5 s (a server waiting
 * for the body it would read).
 */
function declareOnly(method: string, path: string, type: string, length: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1');
    let text = '';
    let started = 0;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`${method} ${path} (${type}): no answer in 5 s without the body`));
    }, 5000);
    socket.on('connect', () => {
      socket.write(
        `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: ${type}\r\nContent-Length: ${length}\r\n\r\n`,
        () => (started = performance.now()),
      );
    });
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      const reply = parseRaw(text);
      if (reply?.complete) {
        clearTimeout(timer);
        socket.destroy();
        resolve({
          status: reply.status,
          headers: reply.headers,
          body: reply.body,
          ms: performance.now() - started,
        });
      }
    });
    socket.on('error', () => undefined);
  });
}

interface Cut {
  /** The answer's status, or 0 when the connection ended without one. */
  readonly status: number;
  readonly body: string;
}

/**
 * Sends up to `total` bytes of chunked JSON to `path` (made as they go from one 1 MiB block,
 * each write waiting for the socket to drain) and stops at the answer.
 */
function cutChunked(path: string, total: number): Promise<Cut> {
  return new Promise((resolve) => {
    let sent = 0;
    let answered = false;
    let status = 0;
    let body = '';
    const req = http.request(
      {
        host: '127.0.0.1',
        port: server.port,
        path,
        method: 'POST',
        agent: false,
        headers: { 'content-type': JSON_TYPE },
      },
      (res) => {
        answered = true;
        status = res.statusCode ?? 0;
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => req.destroy());
      },
    );
    req.on('error', () => undefined);
    req.on('close', () => resolve({ status, body }));
    const pump = (): void => {
      while (sent < total && !answered && !req.destroyed) {
        sent += BLOCK.byteLength;
        if (!req.write(BLOCK)) {
          req.once('drain', pump);
          return;
        }
      }
      if (sent >= total && !req.destroyed) req.end();
    };
    pump();
  });
}

interface Sent {
  /** The answer's status, or 0 when none came. */
  readonly status: number;
  /** Body bytes written to the socket before it was done or the server ended the connection. */
  readonly sent: number;
}

/**
 * Sends a request with a body of `total` bytes as a hostile client does: the head and the body
 * written to a plain socket as fast as it drains, whatever the server answers meanwhile (a FIN
 * does not stop it), until all is sent or the server ends the connection. Chunked bodies are
 * framed in 1 MiB chunks. Nothing is held: every chunk is the same block.
 */
function sendWhole(path: string, type: string, total: number, chunked: boolean): Promise<Sent> {
  return new Promise((resolve) => {
    const socket = net.connect({ port: server.port, host: '127.0.0.1', allowHalfOpen: true });
    let sent = 0;
    let text = '';
    let finished = false;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      socket.destroy();
      resolve({ status: parseRaw(text)?.status ?? 0, sent });
    };
    socket.on('data', (d: Buffer) => {
      if (text.length < 65536) text += d.toString('latin1');
    });
    socket.on('error', finish);
    socket.on('close', finish);
    const frame = chunked
      ? [Buffer.from(`${BLOCK.byteLength.toString(16)}\r\n`), BLOCK, Buffer.from('\r\n')]
      : [BLOCK];
    const pump = (): void => {
      while (sent < total) {
        if (finished) return;
        sent += BLOCK.byteLength;
        let drained = true;
        for (const part of frame) drained = socket.write(part);
        if (!drained) {
          socket.once('drain', pump);
          return;
        }
      }
      if (chunked) socket.end('0\r\n\r\n');
      else socket.end();
      setTimeout(finish, 3000); // the server closes its side after its answer; else give up
    };
    socket.on('connect', () => {
      const framing = chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${total}`;
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: ${type}\r\n${framing}\r\n\r\n`);
      pump();
    });
  });
}

/** Polls /healthz every 20 ms on a kept-alive connection until `until` settles; the latencies. */
async function healthDuring(until: Promise<unknown>): Promise<number[]> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const latencies: number[] = [];
  let over = false;
  void until.finally(() => (over = true));
  try {
    while (!over) {
      const t0 = performance.now();
      const status = await new Promise<number>((resolve) => {
        const req = http.get({ host: '127.0.0.1', port: server.port, path: '/healthz', agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', () => resolve(-1));
      });
      latencies.push(status === 200 ? performance.now() - t0 : Infinity);
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    agent.destroy();
  }
  return latencies;
}

const p99 = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] ?? NaN;
};

/** The catalogue code of an answer: problem+json's `code`, or /v2's `{"error": "CODE: …"}`. */
function codeOf(body: string): string {
  const parsed = JSON.parse(body) as { code?: string; error?: string };
  return parsed.code ?? /^([A-Z_]+):/.exec(parsed.error ?? '')?.[1] ?? '(none)';
}

/** quantd_http_request_bytes_total: body bytes the server read, for `route` or all routes. */
async function bytesRead(route?: string): Promise<number> {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  let total = 0;
  for (const [, labels, value] of text.matchAll(/^quantd_http_request_bytes_total\{([^}]*)\} (\S+)$/gm)) {
    if (route === undefined || labels!.includes(`route="${route}"`)) total += Number(value);
  }
  return total;
}

/** bytesRead(route) once it has moved from `before` (a request is counted when it closes), or after 2 s. */
async function bytesReadOnce(route: string, before: number): Promise<number> {
  for (let i = 0; i < 40; i++) {
    const now = await bytesRead(route);
    if (now !== before) return now;
    await new Promise((r) => setTimeout(r, 50));
  }
  return bytesRead(route);
}

/** [method, path, content type, status, code, the setting a 413 names] */
type Case = [string, string, string, number, string, string?];

const CASES: Case[] = [
  // routes that take JSON
  ['POST', '/v1/calibrations', JSON_TYPE, 413, 'PAYLOAD_TOO_LARGE', 'QUANTD_CALIBRATION_IMPORT_LIMIT'],
  ['POST', '/v1/jobs', JSON_TYPE, 413, 'PAYLOAD_TOO_LARGE', 'QUANTD_JSON_LIMIT'],
  ['POST', '/v2/models/quantize/infer', JSON_TYPE, 413, 'PAYLOAD_TOO_LARGE', 'QUANTD_OIP_JSON_LIMIT'],
  [
    'POST',
    '/v2/models/quantize/versions/1/infer',
    TEXT_TYPE,
    413,
    'PAYLOAD_TOO_LARGE',
    'QUANTD_OIP_JSON_LIMIT',
  ],
  // routes that take binary bodies, and Fastify's JSON parser ran before their handlers refused
  ['POST', '/v1/inspect', JSON_TYPE, 413, 'PAYLOAD_TOO_LARGE', 'QUANTD_JSON_LIMIT'],
  ['POST', '/v1/linear-error', `${JSON_TYPE}; charset=utf-8`, 413, 'PAYLOAD_TOO_LARGE', 'QUANTD_JSON_LIMIT'],
  [
    'POST',
    '/v1/calibrations/0123456789abcdef/batches',
    JSON_TYPE,
    413,
    'PAYLOAD_TOO_LARGE',
    'QUANTD_JSON_LIMIT',
  ],
  ['DELETE', '/v1/calibrations/0123456789abcdef', JSON_TYPE, 413, 'PAYLOAD_TOO_LARGE', 'QUANTD_JSON_LIMIT'],
  ['DELETE', '/v1/jobs/0123456789abcdef', JSON_TYPE, 413, 'PAYLOAD_TOO_LARGE', 'QUANTD_JSON_LIMIT'],
  // text/plain: no route takes it (the op routes and /v1/jobs, in scopes of their own, never had
  // Fastify's text parser; these did)
  ['POST', '/v1/inspect', TEXT_TYPE, 415, 'UNSUPPORTED_MEDIA_TYPE'],
  ['POST', '/v1/calibrations', TEXT_TYPE, 415, 'UNSUPPORTED_MEDIA_TYPE'],
  ['POST', '/v1/linear-error', TEXT_TYPE, 415, 'UNSUPPORTED_MEDIA_TYPE'],
  // no route: the body is not read at all
  ['POST', '/nowhere', JSON_TYPE, 404, 'NOT_FOUND'],
  ['POST', '/v1/nowhere', TEXT_TYPE, 404, 'NOT_FOUND'],
  ['POST', '/healthz', JSON_TYPE, 404, 'NOT_FOUND'],
  ['PUT', '/metrics', TEXT_TYPE, 404, 'NOT_FOUND'],
  ['POST', '/ui/index.html', JSON_TYPE, 404, 'NOT_FOUND'],
  ['POST', '/docs/json', JSON_TYPE, 404, 'NOT_FOUND'],
  ['POST', '/v2/nowhere', JSON_TYPE, 404, 'NOT_FOUND'],
  ['PATCH', '/v1/jobs', 'application/octet-stream', 404, 'NOT_FOUND'],
];

describe('a declared body over the limit is refused before a byte of it is sent', () => {
  let before = 0;
  beforeAll(async () => {
    before = await bytesRead();
  });
  const answerMs: number[] = [];
  afterAll(async () => {
    // and the server read none of those bodies (its own count, /metrics)
    await new Promise((r) => setTimeout(r, 200));
    const read = (await bytesRead()) - before;
    console.log(
      `${answerMs.length} declared ${HUGE / MiB} MiB bodies answered in ${Math.round(Math.min(...answerMs))}–${Math.round(Math.max(...answerMs))} ms, ${read} body bytes read`,
    );
    expect(read).toBe(0);
  });

  it.each(CASES)('%s %s (%s): %i %s', async (method, path, type, status, code, setting) => {
    const answer = await declareOnly(method, path, type, HUGE);
    expect(answer.status, answer.body).toBe(status);
    expect(codeOf(answer.body)).toBe(code);
    if (setting !== undefined) expect(answer.body).toContain(setting);
    // the rest of the body is not wanted: the connection closes after the answer
    expect(answer.headers['connection']).toBe('close');
    expect(answer.ms).toBeLessThan(1000);
    expect(server.alive()).toBe(true);
    answerMs.push(answer.ms);
  });
});

describe('a chunked JSON body is cut as soon as it passes its limit', () => {
  it.each([
    ['/v1/inspect', '/v1/inspect', JSON_LIMIT, 'QUANTD_JSON_LIMIT'],
    ['/v1/jobs', '/v1/jobs', JSON_LIMIT, 'QUANTD_JSON_LIMIT'],
    ['/v1/calibrations', '/v1/calibrations', CALIBRATION_JSON_LIMIT, 'QUANTD_CALIBRATION_IMPORT_LIMIT'],
    ['/v2/models/quantize/infer', '/v2/models/:model/infer', OIP_JSON_LIMIT, 'QUANTD_OIP_JSON_LIMIT'],
  ])('%s: 413, the server read no more than %s allows', async (path, route, limit, setting) => {
    const before = await bytesRead(route);
    const result = await cutChunked(path, HUGE);
    expect(result.status, result.body).toBe(413);
    expect(codeOf(result.body)).toBe('PAYLOAD_TOO_LARGE');
    expect(result.body).toContain(setting);
    // what the server read of it (its own count, /metrics): past the limit by one socket read
    const read = (await bytesReadOnce(route, before)) - before;
    expect(read).toBeGreaterThan(limit);
    expect(read).toBeLessThanOrEqual(limit + READ_SIZE);
    expect(server.alive()).toBe(true);
    console.log(`chunked ${path}: cut after ${read} bytes read (limit ${limit})`);
  });
});

describe(`${HUGE / MiB} MiB bodies sent whole do not end the server`, () => {
  const vectors: readonly (readonly [string, string, boolean])[] = [
    ['/v1/inspect', TEXT_TYPE, false], // the reproduction
    ['/v1/inspect', JSON_TYPE, false],
    ['/v1/calibrations', JSON_TYPE, true],
    ['/v1/linear-error', TEXT_TYPE, true],
    ['/v2/models/quantize/infer', JSON_TYPE, true],
    ['/nowhere', JSON_TYPE, true],
    ...(LONG
      ? ([
          ['/v1/calibrations', JSON_TYPE, false],
          ['/v1/jobs', JSON_TYPE, true],
          ['/v1/calibrations/0123456789abcdef/batches', JSON_TYPE, false],
          ['/v2/models/quantize/infer', TEXT_TYPE, false],
          ['/v1/jobs/0123456789abcdef', JSON_TYPE, true],
        ] as const)
      : []),
  ];

  it.each(vectors)('%s (%s, chunked: %s)', async (path, type, chunked) => {
    // then a while for an escaped error to end the process (it came 4–11 s after the send)
    const sending = sendWhole(path, type, HUGE, chunked);
    const settled = sending.then(() => new Promise((r) => setTimeout(r, LONG ? 5000 : 1500)));
    const [result, latencies] = await Promise.all([sending, healthDuring(settled)]);
    // a refusal, or no answer where the client's writing was cut first; never a crash
    if (result.status !== 0) expect([404, 413, 415]).toContain(result.status);
    expect(server.alive(), server.stderr()).toBe(true);
    expect(uncaught(), server.stderr()).toEqual([]);
    expect(latencies.length).toBeGreaterThan(10);
    expect(p99(latencies), JSON.stringify(latencies.map(Math.round))).toBeLessThan(100);
    const health = await fetch(`${server.base}/healthz`);
    expect(health.status).toBe(200);
    console.log(
      `${HUGE / MiB} MiB to ${path} (${type}, ${chunked ? 'chunked' : 'declared'}): answered ${result.status || 'none'}, ` +
        `${Math.round(result.sent / MiB)} MiB written, /healthz p99 ${p99(latencies).toFixed(1)} ms over ${latencies.length} probes, ` +
        `RSS ${Math.round(server.rssBytes() / MiB)} MiB`,
    );
  });
});
