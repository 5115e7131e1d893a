/**
 * QUANTD_JOB_RETENTION: a finished job is deleted, with its files, once it has been finished for
 * longer than the retention (the sweep runs at start and every quarter of the retention); a
 * queued or running job is never touched. A bad duration stops the server with CONFIG_INVALID.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { loadConfig } from '../../src/config.js';
import { send, type TestServer } from '../http/helpers.js';
import {
  finished,
  json,
  smallModel,
  startJobServer,
  submitPath,
  tempDir,
  waitJob,
  writeModel,
  type Job,
} from './helpers.js';

const root = tempDir('retention');
let t: TestServer;

beforeAll(async () => {
  writeModel(join(root, 'model.safetensors'), smallModel());
  t = await startJobServer(root, { QUANTD_JOB_RETENTION: '1s' });
});
afterAll(async () => {
  await t?.server.shutdown('test done');
});

describe('job retention', () => {
  it('a finished job is gone, files and all, soon after its retention', async () => {
    const reply = await submitPath(t.port, { input: 'model.safetensors', params: { qdtype: 'int8' } });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job.state).toBe('succeeded');
    const dir = join(root, 'jobs', job.id);
    expect(existsSync(dir)).toBe(true);
    let status = 200;
    for (let i = 0; i < 100 && status === 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      status = (await send(t.port, `/v1/jobs/${job.id}`)).status;
    }
    expect(status).toBe(404);
    // hidden first, then its directory deleted (records.ts remove)
    for (let i = 0; i < 50 && existsSync(dir); i++) await new Promise((r) => setTimeout(r, 20));
    expect(existsSync(dir)).toBe(false);
  });

  it('durations: 7d, 12h, 30m, 45s, 500ms, 0; anything else is CONFIG_INVALID', () => {
    const of = (v: string): number => loadConfig({ QUANTD_JOB_RETENTION: v }).jobRetentionMs;
    expect(of('7d')).toBe(7 * 86_400_000);
    expect(of('12h')).toBe(12 * 3_600_000);
    expect(of('500ms')).toBe(500);
    expect(of('0')).toBe(0);
    expect(loadConfig({}).jobRetentionMs).toBe(7 * 86_400_000);
    expect(() => of('7')).toThrow(/QUANTD_JOB_RETENTION/);
    expect(() => of('a week')).toThrow(/duration/);
  });
});

describe('job store limit', () => {
  const dir = tempDir('store-limit');
  let s: TestServer;
  afterAll(async () => {
    await s?.server.shutdown('test done');
  });

  it('QUANTD_JOB_STORE_LIMIT: the oldest finished jobs go when the results kept exceed it', async () => {
    writeModel(join(dir, 'model.safetensors'), smallModel());
    // one result of this model is 2–4 KiB: a limit of 6 KiB keeps the newest one or two
    s = await startJobServer(dir, { QUANTD_JOB_STORE_LIMIT: '6k', QUANTD_JOB_RETENTION: '0' });
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const reply = await submitPath(s.port, { input: 'model.safetensors', params: { qdtype: 'int8' } });
      const job = await waitJob(s.port, json<Job>(reply).id, finished);
      expect(job.state).toBe('succeeded');
      const bytes = job.result!.files.reduce((n, f) => n + f.bytes, 0);
      expect(bytes).toBeGreaterThan(2048);
      expect(bytes).toBeLessThan(6144);
      ids.push(job.id);
    }
    await new Promise((r) => setTimeout(r, 200)); // the sweep after the last one
    const statuses = await Promise.all(ids.map(async (id) => (await send(s.port, `/v1/jobs/${id}`)).status));
    expect(statuses[0]).toBe(404);
    expect(statuses[1]).toBe(404);
    expect(statuses[3]).toBe(200);
    expect(existsSync(join(dir, 'jobs', ids[0]!))).toBe(false);
  });
});
