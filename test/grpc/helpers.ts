/**
 * Helpers for the gRPC tests: real servers (HTTP + gRPC on one compute) started in-process from
 * dist/ (built by the test setup; the server a deployment runs), a real @grpc/grpc-js client built
 * from proto/quantd/v1/quantd.proto with the server's own loader options, promise wrappers for the
 * unary RPCs and QuantizeStream, the one assertion every gRPC error must pass (catalogue status,
 * details "CODE: message", trailing metadata quantd-code / quantd-params), plain HTTP requests to
 * the same server, and CLI runs whose files the results are compared with byte for byte.
 */
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { expect } from 'vitest';

import {
  catalogue,
  formatMessage,
  GrpcStatus,
  type ErrorCode,
  type ErrorParams,
} from '../../src/errors/index.js';
import { parseSafetensors } from '../../src/format/index.js';
import type * as Serve from '../../src/server/serve.js';
import type * as GrpcServer from '../../src/grpc/server.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { REPO } from '../cli/run-cli.js';

export type RunningServer = Serve.RunningServer;

const dist = (...parts: string[]): string => pathToFileURL(join(REPO, 'dist', 'src', ...parts)).href;

async function serveModule(): Promise<typeof Serve> {
  return (await import(dist('server', 'serve.js'))) as typeof Serve;
}

export async function grpcServerModule(): Promise<typeof GrpcServer> {
  return (await import(dist('grpc', 'server.js'))) as typeof GrpcServer;
}

export interface TestServer {
  readonly server: RunningServer;
  /** 127.0.0.1:PORT of the gRPC server */
  readonly target: string;
  /** http://127.0.0.1:PORT of the HTTP server */
  readonly base: string;
  /** Operations admitted to the worker pool and not finished. */
  pending(): number;
}

/**
 * Starts a server on ephemeral ports with `env` over the test's environment. With `taskDelayMs`
 * the pool's workers start with the test hooks on (QUANTD_TEST_HOOKS=1 and
 * QUANTD_TEST_TASK_DELAY_MS, read from process.env when startServer starts the pool; restored
 * after). `hooks` turns the test hooks on without a delay (the pool's `__spin` test task).
 */
export async function startTestServer(
  env: Readonly<Record<string, string>> = {},
  { taskDelayMs = 0, hooks = false }: { taskDelayMs?: number; hooks?: boolean } = {},
): Promise<TestServer> {
  const { startServer } = await serveModule();
  const hookKeys = ['QUANTD_TEST_HOOKS', 'QUANTD_TEST_TASK_DELAY_MS'] as const;
  const saved = hookKeys.map((k) => process.env[k]);
  if (taskDelayMs > 0 || hooks) process.env['QUANTD_TEST_HOOKS'] = '1';
  if (taskDelayMs > 0) process.env['QUANTD_TEST_TASK_DELAY_MS'] = String(taskDelayMs);
  try {
    const server = await startServer({
      ...process.env,
      QUANTD_HOST: '127.0.0.1',
      QUANTD_HTTP_PORT: '0',
      QUANTD_GRPC_PORT: '0',
      QUANTD_LOG_LEVEL: 'silent',
      QUANTD_POOL_SIZE: '2',
      ...env,
    });
    return {
      server,
      target: `127.0.0.1:${server.grpcPort}`,
      base: `http://127.0.0.1:${server.httpPort}`,
      pending: () => server.handle.pool?.workers().pending ?? 0,
    };
  } finally {
    hookKeys.forEach((k, i) => {
      if (saved[i] === undefined) delete process.env[k];
      else process.env[k] = saved[i];
    });
  }
}

// --- messages (proto3 JSON-ish objects as @grpc/proto-loader gives them) -------------------------

export interface SpecMessage {
  qdtype?: string;
  scheme?: string;
  mode?: string;
  axis?: number;
  group_size?: number;
  quant_min?: number;
  quant_max?: number;
  eps?: number;
  range_search?: string;
  include?: string[];
  exclude?: string[];
}

export interface TensorMessage {
  name?: string;
  dtype?: string;
  shape?: number[];
  data?: Uint8Array;
}

export interface OperationRequest {
  safetensors?: Uint8Array;
  tensor?: TensorMessage;
  spec?: SpecMessage;
  dtype?: string;
  form?: 'SAFETENSORS' | 'TENSORS';
}

export interface OperationResponse {
  safetensors?: Buffer;
  tensors?: { name: string; dtype: string; shape: number[]; data: Buffer }[];
  metadata?: Record<string, string>;
}

export interface StreamHeader {
  operation?: string;
  spec?: SpecMessage;
  dtype?: string;
  total_bytes?: number;
  tensor?: TensorMessage;
  chunk_bytes?: number;
}

export type StreamRequest =
  { header: StreamHeader; chunk?: never } | { chunk: { offset: number; data: Uint8Array }; header?: never };

export interface StreamResponse {
  part?: 'result' | 'chunk';
  result?: { total_bytes?: number; metadata?: Record<string, string> };
  chunk?: { offset?: number; data?: Buffer };
}

export const UNARY_RPCS = ['Quantize', 'Dequantize', 'FakeQuantize', 'ChooseQParams'] as const;
export type UnaryRpc = (typeof UNARY_RPCS)[number];
/** The HTTP route / CLI command of each unary RPC. */
export const OP_OF: Readonly<Record<UnaryRpc, string>> = {
  Quantize: 'quantize',
  Dequantize: 'dequantize',
  FakeQuantize: 'fake-quantize',
  ChooseQParams: 'qparams',
};

type UnaryMethod = (
  request: OperationRequest,
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
  callback: (err: grpc.ServiceError | null, response?: OperationResponse) => void,
) => grpc.ClientUnaryCall;

export type QuantizerClient = grpc.Client &
  Record<UnaryRpc, UnaryMethod> & {
    QuantizeStream(
      metadata?: grpc.Metadata,
      options?: grpc.CallOptions,
    ): grpc.ClientDuplexStream<StreamRequest, StreamResponse>;
  };

let quantizerCtor: grpc.ServiceClientConstructor | undefined;

/** The Quantizer client class, from the proto file with the server's loader options. */
export async function quantizerClass(): Promise<grpc.ServiceClientConstructor> {
  if (!quantizerCtor) {
    const { LOADER_OPTIONS, PROTO_FILE } = await grpcServerModule();
    const definition = protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS);
    const proto = grpc.loadPackageDefinition(definition) as unknown as {
      quantd: { v1: { Quantizer: grpc.ServiceClientConstructor } };
    };
    quantizerCtor = proto.quantd.v1.Quantizer;
  }
  return quantizerCtor;
}

/** A client of `target`; no message size limits unless `options` set them. */
export async function quantizerClient(
  target: string,
  credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
  options: grpc.ChannelOptions = {
    'grpc.max_receive_message_length': -1,
    'grpc.max_send_message_length': -1,
  },
): Promise<QuantizerClient> {
  const Ctor = await quantizerClass();
  return new Ctor(target, credentials, options) as unknown as QuantizerClient;
}

export interface CallExtras {
  readonly metadata?: grpc.Metadata;
  readonly deadline?: number;
  /** Receives the call object once started (to cancel it). */
  readonly onCall?: (call: grpc.ClientUnaryCall) => void;
}

/** One unary call; rejects with the grpc ServiceError. */
export function unary(
  client: QuantizerClient,
  rpc: UnaryRpc,
  request: OperationRequest,
  extras: CallExtras = {},
): Promise<OperationResponse> {
  return new Promise((resolve, reject) => {
    const call = client[rpc].call(
      client,
      request,
      extras.metadata ?? new grpc.Metadata(),
      extras.deadline === undefined ? {} : { deadline: extras.deadline },
      (err, response) => (err ? reject(err) : resolve(response ?? {})),
    );
    extras.onCall?.(call);
  });
}

/** The error a promise rejects with (fails the test when it resolves). */
export async function rejection(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await promise;
  } catch (err) {
    return err as grpc.ServiceError;
  }
  return expect.fail('the call succeeded; an error was expected');
}

/**
 * Asserts that `err` is catalogue error `code` over gRPC: the catalogue's gRPC status, details
 * "CODE: message" where the message is the catalogue template filled from the params in trailing
 * metadata quantd-params, trailing metadata quantd-code = CODE, and each fragment in the details.
 * Returns the params.
 */
export function expectGrpcError(
  err: grpc.ServiceError,
  code: ErrorCode,
  fragments: readonly string[] = [],
): Record<string, unknown> {
  const def = catalogue[code];
  expect(err, 'an error').toBeDefined();
  expect(err.code, `status of ${code}: ${err.details}`).toBe(GrpcStatus[def.grpc]);
  expect(err.details.startsWith(`${code}: `), `details of ${code}: ${err.details}`).toBe(true);
  expect(err.metadata.get('quantd-code'), `quantd-code trailer (details: ${err.details})`).toEqual([code]);
  const rawParams = err.metadata.get('quantd-params');
  expect(rawParams.length, 'one quantd-params trailer').toBe(1);
  const params = JSON.parse(String(rawParams[0])) as Record<string, unknown>;
  for (const [, name] of def.message.matchAll(/\{(\w+)\}/g)) {
    expect(Object.keys(params), `param ${name} of ${code}`).toContain(name);
  }
  // JSON has no NaN / Infinity: a null param stands for one word of the message
  const HOLE = '\u0000';
  const filled = formatMessage(
    code,
    Object.fromEntries(Object.entries(params).map(([k, v]) => [k, v === null ? HOLE : v])) as ErrorParams,
  );
  const pattern = filled
    .split(HOLE)
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('(?:null|NaN|-?Infinity)');
  expect(err.details).toMatch(new RegExp(`^${code}: ${pattern}$`));
  for (const fragment of fragments) expect(err.details).toContain(fragment);
  return params;
}

export interface StreamOutcome {
  readonly responses: StreamResponse[];
  readonly status: grpc.StatusObject;
  readonly error: grpc.ServiceError | null;
}

export interface StreamOptions {
  readonly metadata?: grpc.Metadata;
  readonly deadline?: number;
  /** Do not half-close after the messages (the caller ends or cancels via `control`). */
  readonly keepOpen?: boolean;
  readonly control?: (call: grpc.ClientDuplexStream<StreamRequest, StreamResponse>) => void;
}

/**
 * Runs one QuantizeStream: writes `messages` in order (honouring back-pressure, stopping once the
 * server has ended the call), half-closes, and collects every response and the final status.
 */
export async function runStream(
  client: QuantizerClient,
  messages: Iterable<StreamRequest>,
  options: StreamOptions = {},
): Promise<StreamOutcome> {
  const call = client.QuantizeStream(
    options.metadata ?? new grpc.Metadata(),
    options.deadline === undefined ? {} : { deadline: options.deadline },
  );
  options.control?.(call);
  const responses: StreamResponse[] = [];
  let error: grpc.ServiceError | null = null;
  let ended = false;
  call.on('data', (r: StreamResponse) => responses.push(r));
  call.on('error', (e: grpc.ServiceError) => (error = e));
  const status = new Promise<grpc.StatusObject>((resolve) =>
    call.on('status', (s: grpc.StatusObject) => {
      ended = true;
      resolve(s);
    }),
  );
  const finished = new Promise<void>((resolve) => {
    call.on('end', resolve);
    call.on('error', () => resolve());
  });
  for (const message of messages) {
    if (ended) break;
    if (!call.write(message)) await Promise.race([once(call, 'drain'), status]);
  }
  if (!options.keepOpen && !ended) call.end();
  const s = await status;
  await finished;
  return { responses, status: s, error };
}

/** The header, then `data` in chunks of `chunkSize` with their offsets. */
export function* streamMessages(
  header: StreamHeader,
  data: Uint8Array,
  chunkSize: number,
): Generator<StreamRequest> {
  yield { header };
  for (let at = 0; at < data.byteLength; at += chunkSize) {
    yield { chunk: { offset: at, data: data.subarray(at, Math.min(at + chunkSize, data.byteLength)) } };
  }
}

export interface AssembledResult {
  readonly bytes: Buffer;
  readonly totalBytes: number;
  readonly metadata: Record<string, string>;
  readonly chunkSizes: number[];
}

/**
 * Checks the response protocol of a successful stream — one StreamResult first, then chunks with
 * contiguous offsets from 0, none empty, none over `chunkBytes`, together total_bytes — and
 * returns the result container.
 */
export function assembleResult(outcome: StreamOutcome, chunkBytes: number): AssembledResult {
  expect(outcome.error?.details ?? null, 'stream error').toBeNull();
  expect(outcome.status.code).toBe(grpc.status.OK);
  const [first, ...rest] = outcome.responses;
  expect(first?.part, 'the first response is the StreamResult').toBe('result');
  const totalBytes = first!.result!.total_bytes ?? 0;
  const parts: Buffer[] = [];
  const chunkSizes: number[] = [];
  let offset = 0;
  for (const r of rest) {
    expect(r.part, 'every later response is a chunk').toBe('chunk');
    const data = r.chunk!.data ?? Buffer.alloc(0);
    expect(r.chunk!.offset ?? 0, 'chunk offsets are contiguous').toBe(offset);
    expect(data.byteLength, 'no empty chunk').toBeGreaterThan(0);
    expect(data.byteLength, 'chunks are at most chunk_bytes').toBeLessThanOrEqual(chunkBytes);
    parts.push(data);
    chunkSizes.push(data.byteLength);
    offset += data.byteLength;
  }
  expect(offset, 'the chunks carry total_bytes').toBe(totalBytes);
  return { bytes: Buffer.concat(parts), totalBytes, metadata: first!.result!.metadata ?? {}, chunkSizes };
}

// --- HTTP and CLI ---------------------------------------------------------------------------------

/** Query string of a spec as the HTTP API takes it (include/exclude repeated). */
export function queryOf(spec: SpecMessage = {}, dtype?: string): string {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(spec)) {
    if (value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) q.append(key, String(v));
    else q.append(key, String(value));
  }
  if (dtype) q.append('dtype', dtype);
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}

/** CLI options of a spec: group_size → --group-size; include/exclude repeated. */
export function cliArgs(spec: SpecMessage = {}, dtype?: string): string[] {
  const args: string[] = [];
  for (const [key, value] of Object.entries(spec)) {
    if (value === undefined) continue;
    const flag = `--${key.replace(/_/g, '-')}`;
    for (const v of Array.isArray(value) ? value : [value]) args.push(flag, String(v));
  }
  if (dtype) args.push('--dtype', dtype);
  return args;
}

/** Runs the real CLI (`quantd OP IN -o OUT -q ...args`) and returns OUT's bytes. */
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

export interface HttpReply {
  readonly status: number;
  readonly type: string;
  readonly body: Buffer;
}

/** POST /v1/OP on `base`: a safetensors body, or one raw tensor (octet-stream + dtype/shape). */
export async function httpOp(
  base: string,
  op: string,
  query: string,
  body:
    { safetensors: Uint8Array } | { tensor: { dtype: string; shape: readonly number[]; data: Uint8Array } },
): Promise<HttpReply> {
  const init: RequestInit =
    'safetensors' in body
      ? { headers: { 'content-type': 'application/x-safetensors' }, body: body.safetensors }
      : {
          headers: {
            'content-type': 'application/octet-stream',
            'x-tensor-dtype': body.tensor.dtype,
            'x-tensor-shape': body.tensor.shape.join(','),
          },
          body: body.tensor.data,
        };
  const res = await fetch(`${base}/v1/${op}${query}`, { method: 'POST', ...init });
  return {
    status: res.status,
    type: res.headers.get('content-type') ?? '',
    body: Buffer.from(await res.arrayBuffer()),
  };
}

// --- bytes and tensors ----------------------------------------------------------------------------

/** Byte-for-byte equality with a useful message (lengths, first differing offset). */
export function expectSameBytes(actual: Uint8Array | undefined, expected: Uint8Array, label: string): void {
  expect(actual, `${label}: no bytes`).toBeDefined();
  const a = Buffer.from(actual!.buffer, actual!.byteOffset, actual!.byteLength);
  const e = Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength);
  if (a.equals(e)) return;
  let i = 0;
  while (i < Math.min(a.length, e.length) && a[i] === e[i]) i++;
  expect.fail(`${label}: ${a.length} bytes vs ${e.length} expected; first difference at byte ${i}`);
}

export interface DecodedTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: number[];
  readonly data: Buffer;
}

/** A safetensors file's tensors in data order, and its metadata. */
export function decodeContainer(bytes: Uint8Array): {
  tensors: DecodedTensor[];
  metadata: Record<string, string>;
} {
  const file = parseSafetensors(new Uint8Array(bytes), 'container');
  return {
    tensors: file.header.entries.map((e) => ({
      name: e.name,
      dtype: e.dtype,
      shape: [...e.shape],
      data: Buffer.from(file.tensorBytes(e)),
    })),
    metadata: { ...(file.header.metadata ?? {}) },
  };
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

export const bytesOf = (a: ArrayBufferView): Uint8Array =>
  new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** Bearer metadata. */
export function bearer(token: string): grpc.Metadata {
  const m = new grpc.Metadata();
  m.set('authorization', `Bearer ${token}`);
  return m;
}
