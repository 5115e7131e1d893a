/**
 * A damaged result is never served (issue 37, item 7). A verified file used to be remembered by
 * inode, size and mtime, so one byte flipped with its mtime put back was served as 200 after the
 * first download. Now every download hashes the bytes as they go out and holds the last chunk
 * back until the whole matched: a real `quantd serve` child, a job's 4 MiB result downloaded once
 * (good), one byte flipped in the middle and the mtime restored, then downloaded twice over HTTP
 * and twice over gRPC: every one of them fails where the client sees it (HTTP/1.1: the connection
 * closed before Content-Length; later, 409 JOB_NOT_READY; gRPC: DATA_LOSS, then
 * FAILED_PRECONDITION), no client receives the whole damaged file, and the job shows failed with
 * RESULT_CORRUPT.
 */
import * as grpc from '@grpc/grpc-js';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serializeSafetensors } from '../../src/format/index.js';
import { jobsClient, receive, type JobsClient } from '../grpc/jobs-helpers.js';
import { startChildServer, type ChildServer } from './server.js';

const root = mkdtempSync(join(tmpdir(), 'quantd-corrupt-'));
const data = join(root, 'data');
let server: ChildServer;
let client: JobsClient;

beforeAll(async () => {
  server = await startChildServer({ QUANTD_DATA_DIR: data });
  client = await jobsClient(server.target);
});
afterAll(async () => {
  client?.close();
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** A float32 model of 16 MiB: its int8 result is over 4 MiB, several chunks of every transport. */
function model(seed: number): Buffer {
  const values = new Float32Array(2048 * 2048);
  for (let i = 0; i < values.length; i++) values[i] = Math.sin(i * 0.001 + seed) * 4;
  return Buffer.from(
    serializeSafetensors(
      [{ name: 'layer.weight', dtype: 'F32', shape: [2048, 2048], data: new Uint8Array(values.buffer) }],
      null,
    ),
  );
}

interface Download {
  readonly status: number;
  readonly declared: number | undefined;
  readonly received: Buffer;
  /** The connection ended before the declared length (or the response errored). */
  readonly cut: boolean;
  readonly text: string;
}

function download(path: string): Promise<Download> {
  return new Promise((resolve) => {
    const req = request(`${server.base}${path}`, { agent: false }, (res) => {
      const chunks: Buffer[] = [];
      let cut = false;
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('aborted', () => (cut = true));
      res.on('error', () => (cut = true));
      res.on('close', () => {
        const received = Buffer.concat(chunks);
        const declared =
          res.headers['content-length'] === undefined ? undefined : Number(res.headers['content-length']);
        resolve({
          status: res.statusCode ?? 0,
          declared,
          received,
          cut: cut || !res.complete || (declared !== undefined && received.length < declared),
          text: res.statusCode === 200 ? '' : received.toString('utf8'),
        });
      });
    });
    req.on('error', () =>
      resolve({ status: 0, declared: undefined, received: Buffer.alloc(0), cut: true, text: '' }),
    );
    req.end();
  });
}

interface JobView {
  id: string;
  state: string;
  error: { code: string; message: string } | null;
  result: { files: { name: string; bytes: number; sha256: string }[] } | null;
}

async function succeededJob(seed: number): Promise<JobView> {
  const body = model(seed);
  const submitted = await new Promise<JobView>((resolve, reject) => {
    const req = request(
      `${server.base}/v1/jobs?qdtype=int8&scheme=per_channel`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/x-safetensors', 'content-length': body.length },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve(JSON.parse(Buffer.concat(chunks).toString()) as JobView));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
  for (;;) {
    const job = JSON.parse((await download(`/v1/jobs/${submitted.id}`)).received.toString()) as JobView;
    if (job.state === 'succeeded') return job;
    if (job.state === 'failed') throw new Error(JSON.stringify(job.error));
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Flips the middle byte of the file and puts its mtime back to the nanosecond, as the issue did
 * (GNU touch: Node's utimes takes float seconds and loses the last digits).
 */
function flipKeepingMtime(path: string): void {
  const before = statSync(path, { bigint: true });
  const bytes = readFileSync(path);
  bytes[bytes.length >> 1]! ^= 0x01;
  writeFileSync(path, bytes);
  const ns = before.mtimeNs;
  const stamp = `@${ns / 1_000_000_000n}.${String(ns % 1_000_000_000n).padStart(9, '0')}`;
  execFileSync('touch', ['-m', '-d', stamp, path]);
  expect(statSync(path, { bigint: true }).mtimeNs).toBe(ns);
}

async function jobState(id: string): Promise<JobView> {
  return JSON.parse((await download(`/v1/jobs/${id}`)).received.toString()) as JobView;
}

describe('a result byte flipped with its mtime restored', () => {
  it('over HTTP: both downloads fail visibly, the job shows RESULT_CORRUPT', async () => {
    const job = await succeededJob(1);
    const file = job.result!.files[0]!;
    expect(file.bytes).toBeGreaterThan(4 * 1024 * 1024);
    const good = await download(`/v1/jobs/${job.id}/result`);
    expect(good.status).toBe(200);
    expect(good.cut).toBe(false);
    expect(sha256(good.received)).toBe(file.sha256);

    flipKeepingMtime(join(data, 'jobs', job.id, 'result', file.name));
    const first = await download(`/v1/jobs/${job.id}/result`);
    const second = await download(`/v1/jobs/${job.id}/result/${file.name}`);
    console.log(
      `HTTP: first download ${first.status}, ${first.received.length} of ${first.declared} bytes, cut ${first.cut}; ` +
        `second ${second.status} ${second.text.slice(0, 120)}`,
    );
    // the first is cut before its declared length: never a whole 200 of damaged bytes
    expect(first.status === 200 ? first.cut : first.status === 500).toBe(true);
    expect(first.received.length).toBeLessThan(file.bytes);
    // the job is failed by then: the second is refused outright
    expect(second.status).toBe(409);
    expect(JSON.parse(second.text)).toMatchObject({ code: 'JOB_NOT_READY' });
    const after = await jobState(job.id);
    expect(after.state).toBe('failed');
    expect(after.error?.code).toBe('RESULT_CORRUPT');
    expect(after.result).toBeNull();
    expect(server.alive()).toBe(true);
  });

  it('over gRPC Jobs/Result: DATA_LOSS, then FAILED_PRECONDITION; the job shows RESULT_CORRUPT', async () => {
    const job = await succeededJob(2);
    const file = job.result!.files[0]!;
    const good = await receive(client.Result({ id: job.id }));
    expect(good.error).toBeNull();
    expect(sha256(good.files[0]!.bytes)).toBe(file.sha256);

    flipKeepingMtime(join(data, 'jobs', job.id, 'result', file.name));
    const first = await receive(client.Result({ id: job.id }));
    expect(first.error?.code).toBe(grpc.status.DATA_LOSS);
    expect(first.error?.metadata.get('quantd-code')).toEqual(['RESULT_CORRUPT']);
    const received = first.files.reduce((n, f) => n + f.bytes.length, 0);
    expect(received).toBeLessThan(file.bytes);
    const second = await receive(client.Result({ id: job.id }));
    expect(second.error?.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(second.error?.metadata.get('quantd-code')).toEqual(['JOB_NOT_READY']);
    const after = await jobState(job.id);
    expect(after.state).toBe('failed');
    expect(after.error?.code).toBe('RESULT_CORRUPT');
  });
});
