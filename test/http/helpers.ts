/**
 * Helpers for the HTTP tests: real servers started in-process, an HTTP client that controls
 * every header (node:http, no keep-alive, no default Accept), raw sockets for requests no client
 * library sends (a body cut short, a declared length with nothing behind it), the one assertion
 * every error response must pass (RFC 9457 problem+json carrying its catalogue code), and the
 * CLI runs whose files the responses are compared with byte for byte.
 *
 * Servers come from dist/ (built by the test setup), as the CLI tests run the built binary: the
 * server a deployment runs. Loading src/server/serve.ts directly is its own test
 * (service.test.ts), because packageVersion() resolves package.json relative to the compiled file.
 */
import http from 'node:http';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect } from 'vitest';

import { catalogue, formatMessage, type ErrorCode } from '../../src/errors/index.js';
import { parseSafetensors, serializeSafetensors } from '../../src/format/index.js';
import type * as Serve from '../../src/server/serve.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { REPO } from '../cli/run-cli.js';

export type RunningServer = Serve.RunningServer;

const SERVE_URL = pathToFileURL(join(REPO, 'dist', 'src', 'server', 'serve.js')).href;

async function serveModule(): Promise<typeof Serve> {
  return (await import(SERVE_URL)) as typeof Serve;
}

export interface TestServer {
  readonly server: RunningServer;
  readonly port: number;
  /** http://127.0.0.1:PORT */
  readonly base: string;
}

/**
 * Starts a server on an ephemeral port with `env` over the test's environment. With
 * `taskDelayMs`, the pool's workers start with the test hooks on (QUANTD_TEST_HOOKS=1,
 * QUANTD_TEST_TASK_DELAY_MS): every kernel task is held that long first. The pool reads those
 * two from process.env when it starts its workers (inside startServer); they are restored after.
 */
export async function startTestServer(
  env: Readonly<Record<string, string>> = {},
  taskDelayMs = 0,
): Promise<TestServer> {
  const { startServer } = await serveModule();
  const hookKeys = ['QUANTD_TEST_HOOKS', 'QUANTD_TEST_TASK_DELAY_MS'] as const;
  const saved = hookKeys.map((k) => process.env[k]);
  if (taskDelayMs > 0) {
    process.env['QUANTD_TEST_HOOKS'] = '1';
    process.env['QUANTD_TEST_TASK_DELAY_MS'] = String(taskDelayMs);
  }
  try {
    const server = await startServer({
      ...process.env,
      QUANTD_HOST: '127.0.0.1',
      QUANTD_HTTP_PORT: '0',
      // the gRPC server starts beside the HTTP one: an ephemeral port too, so that servers coexist
      QUANTD_GRPC_PORT: '0',
      QUANTD_LOG_LEVEL: 'silent',
      QUANTD_POOL_SIZE: '2',
      ...env,
    });
    return { server, port: server.httpPort, base: `http://127.0.0.1:${server.httpPort}` };
  } finally {
    hookKeys.forEach((k, i) => {
      if (saved[i] === undefined) delete process.env[k];
      else process.env[k] = saved[i];
    });
  }
}

export interface Reply {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface SendOptions {
  readonly method?: string;
  readonly headers?: Readonly<Record<string, string | number>>;
  readonly body?: Uint8Array | string;
  readonly signal?: AbortSignal;
  /** Send the body chunked (no Content-Length), in pieces of this many bytes. */
  readonly chunked?: number;
}

/**
 * One request on its own connection (no agent: `Connection: close`), exactly the headers given
 * plus Host and, for a body, Content-Length unless `chunked`. Resolves with the whole response.
 */
export function send(port: number, path: string, options: SendOptions = {}): Promise<Reply> {
  const { body, chunked } = options;
  const headers: Record<string, string | number> = { ...options.headers };
  if (body !== undefined && chunked === undefined && !Object.keys(headers).includes('content-length')) {
    headers['content-length'] = typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
  }
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: options.method ?? (body === undefined ? 'GET' : 'POST'),
        headers,
        agent: false,
        ...(options.signal ? { signal: options.signal } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (body === undefined) {
      req.end();
    } else if (chunked !== undefined) {
      const bytes = typeof body === 'string' ? Buffer.from(body) : body;
      for (let i = 0; i < bytes.byteLength; i += chunked) req.write(bytes.subarray(i, i + chunked));
      req.end();
    } else {
      req.end(body);
    }
  });
}

/** An octet-stream body: one raw tensor with its dtype and shape headers. */
export function octetHeaders(
  dtype: string,
  /** dimensions, or the header's text as sent */
  shape: readonly number[] | string,
  extra: Readonly<Record<string, string>> = {},
): Record<string, string> {
  return {
    'content-type': 'application/octet-stream',
    'x-tensor-dtype': dtype,
    'x-tensor-shape': typeof shape === 'string' ? shape : shape.join(','),
    ...extra,
  };
}

export const SAFETENSORS = 'application/x-safetensors';

export interface RawResult {
  /** Everything the server sent, as latin1 text. */
  readonly text: string;
  /** The socket error, if the connection was reset. */
  readonly error: string | null;
  /** Whether the server closed the connection (rather than the timeout ending the exchange). */
  readonly closedByServer: boolean;
}

export type RawStep = string | Uint8Array | { readonly waitMs: number } | 'half-close';

/**
 * Writes `steps` to a plain TCP connection (strings, bytes, pauses, a half-close: FIN, the
 * request ended) and collects what comes back until the server closes the connection, a full
 * response has arrived and `untilResponse` is set, or `timeoutMs` passes.
 */
export function rawExchange(
  port: number,
  steps: readonly RawStep[],
  { timeoutMs = 3000, untilResponse = true }: { timeoutMs?: number; untilResponse?: boolean } = {},
): Promise<RawResult> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let text = '';
    let error: string | null = null;
    let finished = false;
    const finish = (closedByServer: boolean): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, error, closedByServer });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (untilResponse && parseRaw(text)?.complete) finish(false);
    });
    socket.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? e.message));
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    void (async () => {
      for (const step of steps) {
        if (socket.destroyed) return;
        if (step === 'half-close') socket.end();
        else if (typeof step === 'object' && 'waitMs' in step)
          await new Promise((r) => setTimeout(r, step.waitMs));
        else socket.write(step);
      }
    })();
  });
}

export interface RawResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  readonly complete: boolean;
}

/** The first HTTP/1.1 response in `text` (Content-Length framed), or null before its head. */
export function parseRaw(text: string): RawResponse | null {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? '')?.[1] ?? NaN);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const rest = text.slice(end + 4);
  const length = Number(headers['content-length'] ?? NaN);
  const complete = Number.isFinite(length) && rest.length >= length;
  return { status, headers, body: complete ? rest.slice(0, length) : rest, complete };
}

export interface Problem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly code: string;
  readonly instance: string;
  readonly request_id: string;
  readonly params: Record<string, unknown>;
}

/**
 * Asserts that a response is the problem for `code`: the catalogue's status, content type
 * application/problem+json, `type` urn:quantd:error:CODE, the catalogue title, a detail that is
 * the catalogue message filled from `params` (every placeholder given), the request path as
 * `instance`, a request id, and each fragment in the detail. Returns the problem.
 */
export function expectProblem(
  reply: {
    status: number;
    headers: Readonly<Record<string, string | string[] | undefined>>;
    body: string | Buffer;
  },
  code: ErrorCode,
  fragments: readonly string[] = [],
  instance?: string,
): Problem {
  const def = catalogue[code];
  const text = reply.body.toString();
  expect(reply.status, `status of ${code}; body ${text}`).toBe(def.http);
  expect(String(reply.headers['content-type']), `content type of ${code}; body ${text}`).toMatch(
    /^application\/problem\+json(;|$)/,
  );
  const problem = JSON.parse(text) as Problem;
  expect(problem, text).toMatchObject({
    type: `urn:quantd:error:${code}`,
    code,
    status: def.http,
    title: def.title,
  });
  expect(typeof problem.params, text).toBe('object');
  for (const [, name] of def.message.matchAll(/\{(\w+)\}/g)) {
    expect(Object.keys(problem.params), `param ${name} of ${code}`).toContain(name);
  }
  // The detail is the catalogue message filled from params. JSON has no Infinity or NaN: a
  // parameter that came out as null must still stand for one word of the detail.
  const HOLE = '\u0000';
  const filled = formatMessage(
    code,
    Object.fromEntries(
      Object.entries(problem.params).map(([k, v]) => [k, v === null ? HOLE : v]),
    ) as Parameters<typeof formatMessage>[1],
  );
  const pattern = filled
    .split(HOLE)
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('(?:null|NaN|-?Infinity)');
  expect(problem.detail).toMatch(new RegExp(`^${pattern}$`));
  for (const fragment of fragments) expect(problem.detail).toContain(fragment);
  if (instance !== undefined) expect(problem.instance).toBe(instance);
  expect(typeof problem.request_id).toBe('string');
  expect(problem.request_id.length).toBeGreaterThan(0);
  return problem;
}

/** A safetensors file's tensors, in data order, with their metadata. */
export interface Tensors {
  readonly names: readonly string[];
  readonly metadata: Readonly<Record<string, string>> | null;
  readonly tensors: ReadonlyMap<string, { dtype: string; shape: readonly number[]; data: Uint8Array }>;
}

export function readTensors(bytes: Uint8Array, source = 'response'): Tensors {
  const file = parseSafetensors(bytes, source);
  const tensors = new Map(
    file.header.entries.map((e) => [
      e.name,
      // a copy: aligned, and its .buffer is this tensor alone
      { dtype: e.dtype, shape: e.shape, data: new Uint8Array(file.tensorBytes(e)) },
    ]),
  );
  return {
    names: file.header.entries.map((e) => e.name),
    metadata: file.header.metadata === null ? null : { ...file.header.metadata },
    tensors,
  };
}

interface JsonResult {
  metadata: Record<string, string> | null;
  tensors: Record<string, { dtype: string; shape: number[]; data: string }>;
}

/** The JSON form of a result, decoded (base64 data), names in the JSON's order. */
export function readJsonTensors(body: Buffer): Tensors {
  const json = JSON.parse(body.toString('utf8')) as JsonResult;
  const names = Object.keys(json.tensors);
  return {
    names,
    metadata: json.metadata,
    tensors: new Map(
      names.map((n) => {
        const t = json.tensors[n]!;
        return [n, { dtype: t.dtype, shape: t.shape, data: new Uint8Array(Buffer.from(t.data, 'base64')) }];
      }),
    ),
  };
}

/** Re-serializes decoded tensors in `order` (the container the JSON stands for). */
export function serializeTensors(t: Tensors, order: readonly string[]): Uint8Array {
  return serializeSafetensors(
    order.map((name) => {
      const x = t.tensors.get(name)!;
      return {
        name,
        dtype: x.dtype as Parameters<typeof serializeSafetensors>[0][number]['dtype'],
        shape: x.shape,
        data: x.data,
      };
    }),
    t.metadata,
  );
}

/** Byte-for-byte equality with a useful message (length, first differing offset). */
export function expectSameBytes(actual: Uint8Array, expected: Uint8Array, label: string): void {
  const a = Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength);
  const e = Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength);
  if (a.equals(e)) return;
  let i = 0;
  while (i < Math.min(a.length, e.length) && a[i] === e[i]) i++;
  expect.fail(`${label}: ${a.length} bytes vs ${e.length} expected; first difference at byte ${i}`);
}

/** Runs the real CLI (`quantd OP IN -o OUT ...args`) and returns OUT's bytes. */
export async function cliOutput(
  op: string,
  input: string,
  out: string,
  args: readonly string[],
): Promise<Buffer> {
  const r = await quantdAsync([op, input, '-o', out, '-q', ...args]);
  expect(r.code, `quantd ${op} ${args.join(' ')}: ${r.stderr}`).toBe(0);
  return readFileSync(out);
}

/** Query options as the CLI spells them: [['group_size', '16']] → ['--group-size', '16']. */
export function cliArgs(options: readonly (readonly [string, string])[]): string[] {
  return options.flatMap(([k, v]) => [`--${k.replace(/_/g, '-')}`, v]);
}

export function queryOf(options: readonly (readonly [string, string])[]): string {
  const q = new URLSearchParams(options.map(([k, v]): [string, string] => [k, v])).toString();
  return q === '' ? '' : `?${q}`;
}

/** Polls `check` until it holds or `ms` pass; returns whether it held. */
export async function eventually(check: () => boolean, ms: number, stepMs = 5): Promise<boolean> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, stepMs));
  }
  return true;
}

/** Deterministic float32 values in about [-4, 4], with a few exact zeros. */
export function floats(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = i % 17 === 0 ? 0 : (s / 2 ** 32) * 8 - 4;
  }
  return out;
}
