/**
 * The seeded fuzzer: thousands of malformed HTTP requests and gRPC calls against a real
 * `quantd serve` child process. Every answer must be a catalogued error (HTTP: 4xx problem+json
 * with its `code`, /v2: `{"error": "CODE: …"}`; gRPC: a non-OK status with `quantd-code`
 * metadata, both matching the catalogue's status for that code), or a success where the input
 * happened to be valid. No 5xx except the documented OVERLOADED; after every batch the child is
 * still the same live process, answers /healthz and a valid request, and its RSS is under
 * RSS_BOUND.
 *
 * The seed is printed; QUANTD_FUZZ_SEED=N replays a run exactly (the requests, not the timing).
 * QUANTD_RELIABILITY=long sends ten times as many.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { catalogue, GrpcStatus, type ErrorCode } from '../../src/errors/index.js';
import { callRaw, grpcMessage, loadMethods, rawClient, type GrpcAnswer } from './fuzz/grpc-cases.js';
import { httpCase, validOpCase, type HttpCase } from './fuzz/http-cases.js';
import { Prng, fuzzSeed } from './fuzz/prng.js';
import { sendRaw, type RawAnswer } from './fuzz/raw-http.js';
import { startChildServer, type ChildServer } from './server.js';

const LONG = process.env['QUANTD_RELIABILITY'] === 'long';
const HTTP_REQUESTS = LONG ? 30_000 : 3_000;
const GRPC_CALLS = LONG ? 10_000 : 1_000;
const BATCH = 250;
const CONCURRENCY = 4;
/** No answer within this long is a hang. */
const ANSWER_MS = 15_000;
const MIB = 1024 * 1024;
/** Bodies are capped at 8 MiB and 4 requests run at once: a few hundred MiB at most. */
const RSS_BOUND = 768 * MIB;
/** 5xx answers the catalogue documents as the server's normal refusals. */
const DOCUMENTED_5XX: ReadonlySet<string> = new Set(['OVERLOADED']);

const seed = fuzzSeed();
const data = mkdtempSync(join(tmpdir(), 'quantd-fuzz-'));
let server: ChildServer;
let peakRss = 0;

beforeAll(async () => {
  console.log(`fuzz seed ${seed} (replay: QUANTD_FUZZ_SEED=${seed})`);
  server = await startChildServer({
    QUANTD_DATA_DIR: data,
    QUANTD_BODY_LIMIT: '8m',
    QUANTD_UPLOAD_LIMIT: '8m',
    QUANTD_BODY_IDLE_MS: '3000',
    QUANTD_HEADERS_TIMEOUT_MS: '3000',
    QUANTD_LOG_LEVEL: 'error',
  });
});

afterAll(async () => {
  await server?.kill();
  rmSync(data, { recursive: true, force: true });
});

const isCode = (code: unknown): code is ErrorCode =>
  typeof code === 'string' && Object.hasOwn(catalogue, code);

/** Why an HTTP answer breaks the contract, or null. */
function httpViolation(c: HttpCase, a: RawAnswer): string | null {
  if (a.status === 0) return a.timedOut ? 'no answer (hang)' : 'connection closed without an answer';
  if (a.status < 300) return null;
  if (a.status < 400) return `unexpected ${a.status}`;
  if (c.method === 'HEAD') return null; // no body to carry the code
  const type = a.headers.get('content-type') ?? '';
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(a.body.toString('utf8')) as Record<string, unknown>;
  } catch {
    return `${a.status} with a body that is not JSON (${type}): ${a.body.toString('utf8').slice(0, 200)}`;
  }
  let code: unknown;
  if (type.startsWith('application/problem+json')) {
    code = body['code'];
    if (body['status'] !== a.status) return `problem status ${String(body['status'])} on a ${a.status}`;
  } else if (c.path.startsWith('/v2') && typeof body['error'] === 'string') {
    code = /^([A-Z_]+): /.exec(body['error'])?.[1];
  } else {
    return `${a.status} is neither problem+json nor an OIP error (${type})`;
  }
  if (!isCode(code)) return `${a.status} with code ${String(code)}, not in the catalogue`;
  if (catalogue[code].http !== a.status)
    return `${code} answered ${a.status}, catalogue says ${catalogue[code].http}`;
  if (a.status >= 500 && !DOCUMENTED_5XX.has(code))
    return `5xx ${code}: ${a.body.toString('utf8').slice(0, 300)}`;
  return null;
}

/** Why a gRPC answer breaks the contract, or null. */
function grpcViolation(a: GrpcAnswer): string | null {
  if (a.code === 0) return null;
  if (a.code === GrpcStatus.DEADLINE_EXCEEDED && a.quantdCode === undefined) return 'no answer (hang)';
  if (!isCode(a.quantdCode))
    return `status ${a.code} without a catalogued quantd-code: ${a.details.slice(0, 200)}`;
  const expected = GrpcStatus[catalogue[a.quantdCode].grpc];
  if (expected !== a.code) return `${a.quantdCode} sent status ${a.code}, catalogue says ${expected}`;
  if (['INTERNAL', 'UNKNOWN', 'DATA_LOSS'].includes(catalogue[a.quantdCode].grpc)) {
    return `server fault ${a.quantdCode}: ${a.details.slice(0, 300)}`;
  }
  return null;
}

/** Runs `count` tasks, CONCURRENCY at a time. */
async function inParallel(count: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) await task(next++);
    }),
  );
}

/** The child is the same live process, healthy, working, and within its memory bound. */
async function expectHealthy(r: Prng, after: string): Promise<void> {
  expect(server.alive(), `the server died after ${after}: ${server.stderr().slice(-2000)}`).toBe(true);
  process.kill(server.pid, 0); // throws if no process has that pid any more
  const health = await sendRaw(
    server.port,
    { head: 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close', body: Buffer.alloc(0) },
    ANSWER_MS,
  );
  expect(health.status, `/healthz after ${after}`).toBe(200);
  const valid = validOpCase(r);
  const answer = await sendRaw(server.port, valid, ANSWER_MS);
  expect(answer.status, `a valid request after ${after}: ${answer.body.toString().slice(0, 300)}`).toBe(200);
  const rss = server.rssBytes();
  peakRss = Math.max(peakRss, rss);
  expect(rss, `RSS after ${after}`).toBeLessThan(RSS_BOUND);
}

function tally(counts: Map<string, number>, key: string): void {
  counts.set(key, (counts.get(key) ?? 0) + 1);
}

function summary(counts: Map<string, number>): string {
  return [...counts]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${k}: ${n}`)
    .join(', ');
}

describe(`fuzzing a quantd serve child (seed ${seed})`, () => {
  it(`${HTTP_REQUESTS} hostile HTTP requests: catalogued 4xx or 2xx, never a crash`, async () => {
    const r = new Prng(seed);
    const byStatus = new Map<string, number>();
    const failures: string[] = [];
    let fiveXx = 0;
    const started = Date.now();
    for (let done = 0; done < HTTP_REQUESTS; done += BATCH) {
      const cases = Array.from({ length: Math.min(BATCH, HTTP_REQUESTS - done) }, () => httpCase(r));
      await inParallel(cases.length, async (i) => {
        const c = cases[i]!;
        const answer = await sendRaw(server.port, c, ANSWER_MS);
        tally(byStatus, String(answer.status));
        if (answer.status >= 500) fiveXx++;
        const violation = httpViolation(c, answer);
        if (violation) {
          failures.push(`#${done + i} ${c.label} ${c.method} ${c.path.slice(0, 120)}: ${violation}`);
        }
      });
      await expectHealthy(r, `HTTP request ${done + cases.length}`);
    }
    console.log(
      `HTTP: ${HTTP_REQUESTS} requests in ${((Date.now() - started) / 1000).toFixed(1)} s; by status ` +
        `${summary(byStatus)}; 5xx: ${fiveXx}; crashes: ${server.alive() ? 0 : 1}; ` +
        `peak RSS ${(peakRss / MIB).toFixed(0)} MiB (bound ${RSS_BOUND / MIB} MiB); violations: ${failures.length}`,
    );
    expect(failures.slice(0, 20), `${failures.length} violations`).toEqual([]);
  });

  it(`${GRPC_CALLS} hostile gRPC calls: non-OK statuses carry a catalogued quantd-code`, async () => {
    const r = new Prng(seed ^ 0x9e3779b9);
    const methods = loadMethods();
    const client: grpc.Client = rawClient(server.target);
    const byStatus = new Map<string, number>();
    const failures: string[] = [];
    const started = Date.now();
    try {
      for (let done = 0; done < GRPC_CALLS; done += BATCH) {
        const count = Math.min(BATCH, GRPC_CALLS - done);
        const calls = Array.from({ length: count }, () => {
          const method = r.pick(methods);
          const n = method.requestStream ? 1 + r.int(4) : 1;
          return { method, messages: Array.from({ length: n }, () => grpcMessage(r, method)) };
        });
        await inParallel(count, async (i) => {
          const { method, messages } = calls[i]!;
          const answer = await callRaw(client, method, messages, ANSWER_MS);
          tally(byStatus, answer.code === 0 ? 'OK' : (answer.quantdCode ?? `status ${answer.code}`));
          const violation = grpcViolation(answer);
          if (violation) failures.push(`#${done + i} ${method.path}: ${violation}`);
        });
        await expectHealthy(r, `gRPC call ${done + count}`);
      }
    } finally {
      client.close();
    }
    console.log(
      `gRPC: ${GRPC_CALLS} calls in ${((Date.now() - started) / 1000).toFixed(1)} s; by outcome ` +
        `${summary(byStatus)}; crashes: ${server.alive() ? 0 : 1}; peak RSS ${(peakRss / MIB).toFixed(0)} MiB; ` +
        `violations: ${failures.length}`,
    );
    expect(failures.slice(0, 20), `${failures.length} violations`).toEqual([]);
  });
});
