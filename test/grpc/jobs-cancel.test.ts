/**
 * quantd.v1.Jobs with jobs that take their time (the pool's test delay on every tensor): Result and
 * Report before a job is done are JOB_NOT_READY; Cancel of a running or queued job returns it
 * cancelled — as HTTP's DELETE does, which then sees the same job — and Cancel of a finished job
 * removes it (a later Get is JOB_NOT_FOUND, over gRPC and HTTP alike).
 */
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { manyTensors, tempDir, writeModel, type Job } from '../jobs/helpers.js';
import { expectGrpcError, rejection, startTestServer, type TestServer } from './helpers.js';
import {
  asMessage,
  call,
  done,
  httpGet,
  httpJson,
  jobsClient,
  plain,
  receive,
  waitGrpcJob,
  type JobsClient,
} from './jobs-helpers.js';

const DELAY_MS = 40;
const root = tempDir('grpc-cancel');
const data = join(root, 'data');
let t: TestServer;
let client: JobsClient;

beforeAll(async () => {
  mkdirSync(join(data, 'models'), { recursive: true });
  writeModel(join(data, 'models', 'many.safetensors'), manyTensors(100));
  writeModel(join(data, 'models', 'few.safetensors'), manyTensors(4, 50));
  // every tensor goes to the pool (no inline path), where each waits DELAY_MS
  t = await startTestServer({ QUANTD_DATA_DIR: data, QUANTD_INLINE_LIMIT: '0' }, { taskDelayMs: DELAY_MS });
  client = await jobsClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

const running = (j: { state?: string; progress?: { tensors_done?: number } }): boolean =>
  j.state === 'running' && (j.progress?.tensors_done ?? 0) >= 1;

describe('a job that is not done', () => {
  it('Result and Report are JOB_NOT_READY naming its state; Get shows its progress', async () => {
    const { id } = await call(client, 'Submit', {
      path: 'models/many.safetensors',
      spec: { qdtype: 'int8' },
    });
    const job = await waitGrpcJob(client, id, running);
    expect(job.progress).toMatchObject({ tensors_total: 100 });
    expect(job.started_at).toBeTypeOf('string');
    expect(job.finished_at).toBeUndefined();
    const result = await receive(client.Result({ id }));
    expect(result.files).toEqual([]);
    expectGrpcError(result.error!, 'JOB_NOT_READY', [id, 'running']);
    expectGrpcError((await receive(client.Result({ id, file: 'many.safetensors' }))).error!, 'JOB_NOT_READY');
    expectGrpcError((await receive(client.Report({ id }))).error!, 'JOB_NOT_READY', ['running']);
    await call(client, 'Cancel', { id });
  });
});

describe('Cancel', () => {
  it('a running job: returned cancelled, its files removed, the same job over HTTP', async () => {
    const { id } = await call(client, 'Submit', {
      path: 'models/many.safetensors',
      spec: { qdtype: 'int8' },
    });
    await waitGrpcJob(client, id, running);
    const cancelled = await call(client, 'Cancel', { id });
    expect(cancelled).toMatchObject({ id, state: 'cancelled' });
    expect(cancelled.finished_at).toBeTypeOf('string');
    expect(cancelled.result).toBeUndefined();
    expect(readdirSync(join(data, 'jobs', id))).toEqual(['job.json']);
    const http = await httpJson<Job>(t.base, `/v1/jobs/${id}`);
    expect(http.state).toBe('cancelled');
    expect(plain(await call(client, 'Get', { id }))).toEqual(asMessage(http));
    expectGrpcError((await receive(client.Result({ id }))).error!, 'JOB_NOT_READY', ['cancelled']);

    // cancelling it again removes it, as a second DELETE does
    expect(await call(client, 'Cancel', { id })).toMatchObject({ id, state: 'cancelled' });
    expect(existsSync(join(data, 'jobs', id))).toBe(false);
    expectGrpcError(await rejection(call(client, 'Get', { id })), 'JOB_NOT_FOUND');
    expect((await httpGet(t.base, `/v1/jobs/${id}`)).status).toBe(404);
  });

  it('a queued job is cancelled before it starts; the running one goes on and succeeds', async () => {
    const first = await call(client, 'Submit', { path: 'models/few.safetensors', spec: { qdtype: 'int8' } });
    const queued = await call(client, 'Submit', {
      path: 'models/few.safetensors',
      spec: { qdtype: 'uint8' },
    });
    expect((await call(client, 'Get', { id: queued.id })).state).toBe('queued');
    const cancelled = await call(client, 'Cancel', { id: queued.id });
    expect(cancelled).toMatchObject({ state: 'cancelled' });
    expect(cancelled.started_at).toBeUndefined();
    expect(cancelled.attempts).toBe(0); // never ran
    const finished = await waitGrpcJob(client, first.id, done);
    expect(finished.state).toBe('succeeded');
    expect((await call(client, 'Get', { id: queued.id })).state).toBe('cancelled');

    // a succeeded job: removed with its files, returned as it was
    const removed = await call(client, 'Cancel', { id: first.id });
    expect(plain(removed)).toEqual(plain(finished));
    expect(existsSync(join(data, 'jobs', first.id))).toBe(false);
    expectGrpcError(await rejection(call(client, 'Get', { id: first.id })), 'JOB_NOT_FOUND');
  });
});
