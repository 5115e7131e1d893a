/**
 * Helpers for the job tests: servers with a data directory of their own (in-process, as
 * test/http does, or as a real `quantd serve` child process that can be killed:
 * test/reliability/server.ts), small synthetic
 * models, polling a job until it reaches a state, and comparing result files with the CLI's
 * outputs tensor by tensor (a job's files also carry quantd.data_sha256 in their metadata).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';

import type { StDType } from '../../src/core/index.js';
import { serializeSafetensors } from '../../src/format/index.js';
import {
  cliArgs,
  cliOutput,
  expectSameBytes,
  floats,
  readTensors,
  send,
  startTestServer,
  type Reply,
  type TestServer,
} from '../http/helpers.js';

export const SAFETENSORS = 'application/x-safetensors';
export const DATA_SHA256_KEY = 'quantd.data_sha256';

export interface Job {
  id: string;
  state: 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';
  op: string;
  input: { kind: 'upload'; bytes: number } | { kind: 'path'; path: string; bytes: number };
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  progress: {
    tensors_done: number;
    tensors_total: number | null;
    bytes_done: number;
    bytes_total: number | null;
    bytes_per_second: number | null;
    eta_seconds: number | null;
  } | null;
  attempts: number;
  error: { code: string; message: string } | null;
  result: { sharded: boolean; files: { name: string; bytes: number; data_sha256: string | null }[] } | null;
}

export const JOB_KEYS = [
  'id',
  'state',
  'op',
  'input',
  'created_at',
  'started_at',
  'finished_at',
  'progress',
  'attempts',
  'error',
  'result',
];

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `quantd-jobs-${prefix}-`));
}

/** An in-process server whose data directory is `dataDir`. */
export function startJobServer(
  dataDir: string,
  env: Readonly<Record<string, string>> = {},
  taskDelayMs = 0,
): Promise<TestServer> {
  return startTestServer({ QUANTD_DATA_DIR: dataDir, ...env }, taskDelayMs);
}

export interface Tensor {
  readonly name: string;
  readonly dtype: StDType;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** float32 values as bfloat16 bytes (truncated: any bfloat16 will do as an input). */
function bf16(values: Float32Array): Uint8Array {
  const u32 = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = u32[i]! >>> 16;
  return new Uint8Array(out.buffer);
}

export function f32Tensor(name: string, shape: readonly number[], seed: number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { name, dtype: 'F32', shape, data: new Uint8Array(floats(n, seed).buffer) };
}

export function bf16Tensor(name: string, shape: readonly number[], seed: number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { name, dtype: 'BF16', shape, data: bf16(floats(n, seed)) };
}

/** A small model: float32 and bfloat16 matrices, a bias and a norm. */
export function smallModel(seed = 1): Tensor[] {
  return [
    f32Tensor('model.layers.0.mlp.weight', [16, 32], seed),
    f32Tensor('model.layers.0.mlp.bias', [16], seed + 1),
    bf16Tensor('model.layers.0.attn.weight', [8, 64], seed + 2),
    bf16Tensor('model.norm.weight', [64], seed + 3),
  ];
}

/** A model of `count` small matrices (many tensors: a job with visible progress). */
export function manyTensors(count: number, seed = 7): Tensor[] {
  return Array.from({ length: count }, (_, i) =>
    f32Tensor(`layer.${String(i).padStart(3, '0')}.weight`, [8, 16], seed + i),
  );
}

export function modelBytes(tensors: readonly Tensor[]): Uint8Array {
  return serializeSafetensors(tensors, null);
}

export function writeModel(path: string, tensors: readonly Tensor[]): string {
  writeFileSync(path, modelBytes(tensors));
  return path;
}

/** Writes a sharded model (an index and one file per shard) into `dir`; returns the index's name. */
export function writeShardedModel(dir: string, shards: readonly (readonly Tensor[])[]): string {
  const weightMap: Record<string, string> = {};
  let total = 0;
  shards.forEach((tensors, i) => {
    const name = `model-${String(i + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`;
    writeModel(join(dir, name), tensors);
    for (const t of tensors) {
      weightMap[t.name] = name;
      total += t.data.byteLength;
    }
  });
  const index = 'model.safetensors.index.json';
  writeFileSync(join(dir, index), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }));
  return index;
}

export function json<T = unknown>(reply: Reply): T {
  return JSON.parse(reply.body.toString('utf8')) as T;
}

export async function getJob(port: number, id: string): Promise<Job> {
  const reply = await send(port, `/v1/jobs/${id}`);
  expect(reply.status, reply.body.toString()).toBe(200);
  return json<Job>(reply);
}

/** Polls the job until `until` holds (or fails after `ms`); returns the job then. */
export async function waitJob(
  port: number,
  id: string,
  until: (job: Job) => boolean,
  ms = 20_000,
  stepMs = 20,
): Promise<Job> {
  const deadline = Date.now() + ms;
  for (;;) {
    const job = await getJob(port, id);
    if (until(job)) return job;
    if (Date.now() > deadline) expect.fail(`job ${id} did not get there in ${ms} ms: ${JSON.stringify(job)}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export const finished = (job: Job): boolean => ['succeeded', 'failed', 'cancelled'].includes(job.state);

/** Submits an upload job; expects 202 with a Location. */
export async function submitUpload(port: number, body: Uint8Array, query = ''): Promise<Job> {
  const reply = await send(port, `/v1/jobs${query}`, { headers: { 'content-type': SAFETENSORS }, body });
  expect(reply.status, reply.body.toString()).toBe(202);
  const job = json<Job>(reply);
  expect(reply.headers['location']).toBe(`/v1/jobs/${job.id}`);
  return job;
}

export async function submitPath(port: number, request: Record<string, unknown>): Promise<Reply> {
  return send(port, '/v1/jobs', {
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(request),
  });
}

/** The CLI's output for `input` with query-style options (the file the job must reproduce). */
export async function cliFile(
  input: string,
  out: string,
  options: readonly (readonly [string, string])[],
  op = 'quantize',
): Promise<Buffer> {
  return cliOutput(op, input, out, cliArgs(options));
}

/**
 * Two safetensors files hold the same tensors, byte for byte, in the same order, with the same
 * metadata except quantd.data_sha256 (which the job's file must carry, and which must be right).
 */
export function expectSameTensors(actual: Uint8Array, expected: Uint8Array, label: string): void {
  const a = readTensors(actual, label);
  const e = readTensors(expected, `${label} (expected)`);
  expect(a.names, label).toEqual(e.names);
  for (const name of e.names) {
    const x = a.tensors.get(name)!;
    const y = e.tensors.get(name)!;
    expect({ dtype: x.dtype, shape: x.shape }, `${label}: ${name}`).toEqual({
      dtype: y.dtype,
      shape: y.shape,
    });
    expectSameBytes(x.data, y.data, `${label}: ${name}`);
  }
  const { [DATA_SHA256_KEY]: sha, ...rest } = a.metadata ?? {};
  const { [DATA_SHA256_KEY]: _ignored, ...expectedRest } = e.metadata ?? {};
  expect(rest, `${label}: metadata`).toEqual(expectedRest);
  expect(sha, `${label}: ${DATA_SHA256_KEY}`).toMatch(/^[0-9a-f]{64}$/);
}

/** Prometheus sample value of an unlabelled series. */
export async function metric(port: number, name: string): Promise<number> {
  const text = (await send(port, '/metrics')).body.toString();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? NaN);
}

// `quantd serve` as a child process: shared with the reliability suite
export { startChildServer, type ChildServer } from '../reliability/server.js';

export function readResultFile(path: string): Uint8Array {
  return new Uint8Array(readFileSync(path));
}
