/**
 * Jobs made slow with the pool's test hooks (every kernel task held QUANTD_TEST_TASK_DELAY_MS in
 * its worker; QUANTD_INLINE_LIMIT=0 sends even small tensors to the pool):
 *  - a running job shows its progress moving (tensors and bytes done of the totals, a rate and an
 *    ETA), job.json on disk follows it, and its result and report are 409 JOB_NOT_READY until it
 *    has succeeded;
 *  - DELETE of a running job: 202 with state cancelled, the pool idle again long before the job
 *    would have ended, its files removed (job.json stays, cancelled); DELETE of a queued job
 *    cancels it before it starts; DELETE of a cancelled job removes it (204).
 */
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { expectProblem, send, type TestServer } from '../http/helpers.js';
import {
  finished,
  json,
  manyTensors,
  metric,
  modelBytes,
  startJobServer,
  submitUpload,
  tempDir,
  waitJob,
  type Job,
} from './helpers.js';

const DELAY_MS = 60;
const TENSORS = 24;
const root = tempDir('progress');
const data = join(root, 'data');
let t: TestServer;

beforeAll(async () => {
  t = await startJobServer(data, { QUANTD_INLINE_LIMIT: '0' }, DELAY_MS);
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

const onDisk = (id: string): Job =>
  (JSON.parse(readFileSync(join(data, 'jobs', id, 'job.json'), 'utf8')) as { job: Job }).job;

describe('a running job', () => {
  it('shows its progress moving, with a rate and an ETA, and has no result until it succeeds', async () => {
    const model = manyTensors(TENSORS);
    const { id } = await submitUpload(t.port, modelBytes(model), '?qdtype=int8&scheme=per_channel');
    const first = await waitJob(
      t.port,
      id,
      (j) => j.state === 'running' && j.progress!.tensors_done >= 1,
      20_000,
      5,
    );
    expect(first.attempts).toBe(1);
    expect(first.started_at).not.toBeNull();
    expect(first.progress).toMatchObject({ tensors_total: TENSORS, bytes_total: TENSORS * 8 * 16 * 4 });
    expect(first.progress!.bytes_done).toBeGreaterThan(0);
    expect(first.progress!.tensors_done).toBeLessThan(TENSORS);

    // not ready while running
    expectProblem(await send(t.port, `/v1/jobs/${id}/result`), 'JOB_NOT_READY', [id, 'running']);
    expectProblem(await send(t.port, `/v1/jobs/${id}/result/model.safetensors`), 'JOB_NOT_READY');
    expectProblem(await send(t.port, `/v1/jobs/${id}/report`), 'JOB_NOT_READY');

    const later = await waitJob(
      t.port,
      id,
      (j) => j.state !== 'running' || j.progress!.tensors_done > first.progress!.tensors_done,
      20_000,
      5,
    );
    expect(later.state).toBe('running');
    expect(typeof later.progress!.eta_seconds).toBe('number');
    expect(later.progress!.eta_seconds).toBeGreaterThan(0);
    expect(later.progress!.bytes_per_second).toBeGreaterThan(0);
    expect(later.progress!.bytes_done).toBeGreaterThan(first.progress!.bytes_done);
    // job.json follows (at most once a second): running, with progress
    expect(onDisk(id).state).toBe('running');

    const done = await waitJob(t.port, id, finished);
    expect(done.state, JSON.stringify(done.error)).toBe('succeeded');
    expect(done.progress).toMatchObject({ tensors_done: TENSORS, tensors_total: TENSORS, eta_seconds: 0 });
    expect(onDisk(id)).toEqual(done);
    expect((await send(t.port, `/v1/jobs/${id}/result`)).status).toBe(200);
  });
});

describe('cancelling', () => {
  it('a running job: 202 cancelled, the pool idle at once, its files removed', async () => {
    const { id } = await submitUpload(t.port, modelBytes(manyTensors(200)));
    await waitJob(t.port, id, (j) => j.state === 'running' && j.progress!.tensors_done >= 1, 20_000, 5);
    expect(await metric(t.port, 'quantd_pool_operations_in_flight')).toBeGreaterThan(0);

    const started = Date.now();
    const reply = await send(t.port, `/v1/jobs/${id}`, { method: 'DELETE' });
    expect(reply.status, reply.body.toString()).toBe(202);
    const cancelled = json<Job>(reply);
    expect(cancelled).toMatchObject({ id, state: 'cancelled', error: null, result: null });
    expect(cancelled.finished_at).not.toBeNull();

    // the pool has nothing left of it, long before the 200 tensors would have run
    let inFlight = await metric(t.port, 'quantd_pool_operations_in_flight');
    while (inFlight !== 0 && Date.now() - started < 5000) {
      await new Promise((r) => setTimeout(r, 20));
      inFlight = await metric(t.port, 'quantd_pool_operations_in_flight');
    }
    expect(inFlight).toBe(0);
    expect(Date.now() - started).toBeLessThan((200 * 2 * DELAY_MS) / 2);
    expect(await metric(t.port, 'quantd_pool_queue_depth')).toBe(0);

    // its files are removed; job.json remains, cancelled
    expect(readdirSync(join(data, 'jobs', id))).toEqual(['job.json']);
    expect(onDisk(id).state).toBe('cancelled');
    expect((await send(t.port, `/v1/jobs/${id}`)).status).toBe(200);
    expect(json<Job>(await send(t.port, `/v1/jobs/${id}`)).state).toBe('cancelled');
    expectProblem(await send(t.port, `/v1/jobs/${id}/result`), 'JOB_NOT_READY', ['cancelled']);

    // deleting it again removes it
    expect((await send(t.port, `/v1/jobs/${id}`, { method: 'DELETE' })).status).toBe(204);
    expect(existsSync(join(data, 'jobs', id))).toBe(false);
    expectProblem(await send(t.port, `/v1/jobs/${id}`), 'JOB_NOT_FOUND');
  });

  it('a queued job is cancelled before it starts; the running one goes on', async () => {
    const running = await submitUpload(t.port, modelBytes(manyTensors(16)));
    const queued = await submitUpload(t.port, modelBytes(manyTensors(16, 99)));
    expect(json<Job>(await send(t.port, `/v1/jobs/${queued.id}`)).state).toBe('queued');
    const reply = await send(t.port, `/v1/jobs/${queued.id}`, { method: 'DELETE' });
    expect(reply.status).toBe(202);
    expect(json<Job>(reply)).toMatchObject({ state: 'cancelled', started_at: null, attempts: 0 });
    expect(readdirSync(join(data, 'jobs', queued.id))).toEqual(['job.json']);
    const done = await waitJob(t.port, running.id, finished);
    expect(done.state).toBe('succeeded');
    expect(json<Job>(await send(t.port, `/v1/jobs/${queued.id}`))).toMatchObject({
      state: 'cancelled',
      attempts: 0,
    });
  });
});
