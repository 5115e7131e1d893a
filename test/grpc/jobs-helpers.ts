/**
 * Helpers for the quantd.v1.Jobs tests: a real @grpc/grpc-js client built from
 * proto/quantd/v1/jobs.proto with the server's own loader options, promise wrappers for its unary
 * RPCs, a collector for Result / Report streams that checks the chunk protocol (file on every
 * chunk, contiguous offsets from 0, total_bytes and data_sha256 on the first chunk only, at most
 * 1 MiB of data each), polling over gRPC, and the HTTP side of the same jobs for comparison.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { expect } from 'vitest';

import { grpcServerModule } from './helpers.js';

/** The data bytes of one ResultChunk at most (jobs.proto). */
export const CHUNK_LIMIT = 1024 * 1024;

/** A Job message as the client decodes it (unset fields absent; proto3 `optional` adds `_name` keys). */
export type JobMessage = Record<string, unknown> & {
  id: string;
  state?: string;
  result?: { sharded?: boolean; files?: { name: string; bytes: number; data_sha256?: string }[] };
  error?: { code: string; message: string };
};

export interface SubmitRequest {
  path?: string;
  op?: string;
  spec?: Record<string, unknown>;
  dtype?: string;
  recipe_json?: string;
  rule?: string[];
  skip?: string[];
  min_size?: number;
  keep_1d?: boolean;
  layout?: string;
}

type Callback<T> = (err: grpc.ServiceError | null, response?: T) => void;
type Method<Req, Res> = (
  request: Req,
  metadata: grpc.Metadata,
  callback: Callback<Res>,
) => grpc.ClientUnaryCall;

export type JobsClient = grpc.Client & {
  Submit: Method<SubmitRequest, JobMessage>;
  Get: Method<{ id: string }, JobMessage>;
  List: Method<object, { jobs?: JobMessage[] }>;
  Cancel: Method<{ id: string }, JobMessage>;
  Result(request: { id: string; file?: string }, metadata?: grpc.Metadata): grpc.ClientReadableStream<Chunk>;
  Report(request: { id: string }, metadata?: grpc.Metadata): grpc.ClientReadableStream<Chunk>;
};

export interface Chunk {
  file?: string;
  offset?: number;
  data?: Buffer;
  total_bytes?: number;
  data_sha256?: string;
}

export async function jobsClient(target: string): Promise<JobsClient> {
  const { LOADER_OPTIONS } = await grpcServerModule();
  const definition = protoLoader.loadSync('quantd/v1/jobs.proto', LOADER_OPTIONS);
  const proto = grpc.loadPackageDefinition(definition) as unknown as {
    quantd: { v1: { Jobs: grpc.ServiceClientConstructor } };
  };
  return new proto.quantd.v1.Jobs(target, grpc.credentials.createInsecure()) as unknown as JobsClient;
}

/** One unary call of `client`; rejects with the grpc ServiceError. */
export function call<K extends 'Submit' | 'Get' | 'List' | 'Cancel'>(
  client: JobsClient,
  rpc: K,
  request: Parameters<JobsClient[K]>[0],
  metadata: grpc.Metadata = new grpc.Metadata(),
): Promise<NonNullable<Parameters<Parameters<JobsClient[K]>[2]>[1]>> {
  return new Promise((resolve, reject) => {
    const method = client[rpc] as Method<unknown, unknown>;
    method.call(client, request, metadata, (err, response) =>
      err ? reject(err) : resolve(response as NonNullable<Parameters<Parameters<JobsClient[K]>[2]>[1]>),
    );
  });
}

export interface Received {
  /** Each file in the order it came, with the first chunk's total_bytes and data_sha256. */
  readonly files: { name: string; bytes: Buffer; total: number; sha: string | undefined; chunks: number }[];
  readonly error: grpc.ServiceError | null;
}

/** Reads a Result / Report stream to its end, checking the chunk protocol. */
export async function receive(stream: grpc.ClientReadableStream<Chunk>): Promise<Received> {
  const chunks: Chunk[] = [];
  const error = await new Promise<grpc.ServiceError | null>((resolve) => {
    stream.on('data', (c: Chunk) => chunks.push(c));
    stream.on('error', (e: grpc.ServiceError) => resolve(e));
    stream.on('end', () => resolve(null));
  });
  const files: { name: string; parts: Buffer[]; total: number; sha: string | undefined }[] = [];
  let offset = 0;
  for (const c of chunks) {
    const data = c.data ?? Buffer.alloc(0);
    expect(c.file, 'every chunk names its file').toBeTruthy();
    expect(data.byteLength, 'at most 1 MiB per chunk').toBeLessThanOrEqual(CHUNK_LIMIT);
    const current = files.at(-1);
    if (current === undefined || current.name !== c.file || (c.offset ?? 0) === 0) {
      if (current) expect(offset, `${current.name}: chunks carry total_bytes`).toBe(current.total);
      expect(c.offset ?? 0, `${c.file}: a file starts at offset 0`).toBe(0);
      expect(c.total_bytes, `${c.file}: total_bytes on the first chunk`).toBeTypeOf('number');
      files.push({ name: c.file!, parts: [data], total: c.total_bytes!, sha: c.data_sha256 });
      offset = data.byteLength;
    } else {
      expect(c.offset, `${c.file}: contiguous offsets`).toBe(offset);
      expect(c.total_bytes, `${c.file}: total_bytes on the first chunk only`).toBeUndefined();
      expect(c.data_sha256, `${c.file}: data_sha256 on the first chunk only`).toBeUndefined();
      expect(data.byteLength, `${c.file}: no empty chunk after the first`).toBeGreaterThan(0);
      current.parts.push(data);
      offset += data.byteLength;
    }
  }
  const last = files.at(-1);
  if (last && error === null) expect(offset, `${last.name}: chunks carry total_bytes`).toBe(last.total);
  return {
    files: files.map((f) => ({
      name: f.name,
      bytes: Buffer.concat(f.parts),
      total: f.total,
      sha: f.sha,
      chunks: f.parts.length,
    })),
    error,
  };
}

/** Polls Get until `until` holds (or fails after `ms`). */
export async function waitGrpcJob(
  client: JobsClient,
  id: string,
  until: (job: JobMessage) => boolean,
  ms = 30_000,
): Promise<JobMessage> {
  const deadline = Date.now() + ms;
  for (;;) {
    const job = await call(client, 'Get', { id });
    if (until(job)) return job;
    if (Date.now() > deadline) expect.fail(`job ${id} did not get there in ${ms} ms: ${JSON.stringify(job)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export const done = (job: JobMessage): boolean =>
  ['succeeded', 'failed', 'cancelled'].includes(job.state ?? '');

/**
 * The HTTP JSON of a job as the gRPC message must carry it: nulls (proto3: the field unset)
 * removed, recursively. The server sets every other field, zeros and false included.
 */
export function asMessage(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(asMessage);
  if (typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === null) continue;
    out[k] = asMessage(v);
  }
  return out;
}

/** A decoded message without the synthetic `_name` keys of proto3 `optional` fields (oneofs: true). */
export function plain(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(plain);
  if (typeof value !== 'object' || value === null || Buffer.isBuffer(value)) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => !k.startsWith('_'))
      .map(([k, v]) => [k, plain(v)]),
  );
}

/** GET on the HTTP side of the same server. */
export async function httpGet(base: string, path: string): Promise<{ status: number; body: Buffer }> {
  const res = await fetch(`${base}${path}`);
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
}

export async function httpJson<T = unknown>(base: string, path: string, init?: RequestInit): Promise<T> {
  const res = await fetch(`${base}${path}`, init);
  const text = await res.text();
  expect(res.ok, `${path}: ${res.status} ${text}`).toBe(true);
  return JSON.parse(text) as T;
}
