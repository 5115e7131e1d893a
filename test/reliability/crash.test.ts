/**
 * A server killed or stopped mid-job leaves a data directory the next start serves correctly:
 *  - kill -9 while a job runs: the jobs that had finished serve byte-identical results (SHA-256
 *    before and after), the interrupted one runs again and succeeds, and no temporary or partial
 *    file is left anywhere in the data directory;
 *  - SIGTERM while a job runs and a request is in flight: the request is answered, the process
 *    exits 0 within QUANTD_SHUTDOWN_TIMEOUT_MS, the job is left to run again (no partial result),
 *    and it does on the next start.
 * What test/jobs/restart.test.ts covers is not repeated here: the re-run's bytes against the CLI,
 * an upload cut off by the kill, a result damaged by hand.
 */
import { createHash } from 'node:crypto';
import { readdirSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { send } from '../http/helpers.js';
import {
  SAFETENSORS,
  finished,
  getJob,
  manyTensors,
  modelBytes,
  smallModel,
  submitUpload,
  tempDir,
  waitJob,
  type Job,
} from '../jobs/helpers.js';
import { startChildServer, type ChildServer } from './server.js';

const QUERY = '?qdtype=int8&scheme=per_channel';
/** Slow kernels, so that a job of 40 tensors is caught running. */
const SLOW = { QUANTD_TEST_HOOKS: '1', QUANTD_TEST_TASK_DELAY_MS: '40', QUANTD_INLINE_LIMIT: '0' };
const SHUTDOWN_TIMEOUT_MS = 4000;

const root = tempDir('crash');
const servers: ChildServer[] = [];

afterAll(async () => {
  await Promise.all(servers.map((s) => s.kill()));
  rmSync(root, { recursive: true, force: true });
});

async function start(data: string, env: Readonly<Record<string, string>> = {}): Promise<ChildServer> {
  const server = await startChildServer({ QUANTD_DATA_DIR: data, ...env });
  servers.push(server);
  return server;
}

/** Every file under `dir`, relative to it. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

/** Temporary files of atomic writes (file-io.ts names them `.NAME.quantd-tmp-PID-HEX`). */
const temporary = (data: string): string[] => filesUnder(data).filter((f) => f.includes('quantd-tmp'));

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

async function resultHash(port: number, id: string): Promise<string> {
  const reply = await send(port, `/v1/jobs/${id}/result`);
  expect(reply.status, reply.body.toString().slice(0, 300)).toBe(200);
  return sha256(reply.body);
}

/** Submits the slow job and waits until it has done some of its tensors. */
async function slowJobRunning(server: ChildServer): Promise<Job> {
  const slow = await submitUpload(server.port, modelBytes(manyTensors(40, 50)), QUERY);
  return waitJob(
    server.port,
    slow.id,
    (j) => j.state === 'running' && j.progress!.tensors_done >= 1,
    20_000,
    5,
  );
}

describe('kill -9 mid-job, then a start on the same data directory', () => {
  it('serves the finished results byte for byte, re-runs the interrupted job, leaves no temporary file', async () => {
    const data = join(root, 'kill');
    const first = await start(data, SLOW);
    const done: { id: string; hash: string }[] = [];
    for (const seed of [1, 2, 3]) {
      const job = await submitUpload(first.port, modelBytes(smallModel(seed)), QUERY);
      expect((await waitJob(first.port, job.id, finished)).state).toBe('succeeded');
      done.push({ id: job.id, hash: await resultHash(first.port, job.id) });
    }
    const slow = await slowJobRunning(first);

    await first.kill();
    const killed = await first.exited;
    expect(killed.signal).toBe('SIGKILL');

    const second = await start(data);
    for (const { id, hash } of done) {
      expect(await resultHash(second.port, id), `job ${id}`).toBe(hash);
      expect((await getJob(second.port, id)).attempts).toBe(1);
    }
    const rerun = await waitJob(second.port, slow.id, finished);
    expect(rerun.state, JSON.stringify(rerun.error)).toBe('succeeded');
    expect(rerun.attempts).toBe(2);
    const [file] = rerun.result!.files;
    const body = (await send(second.port, `/v1/jobs/${slow.id}/result`)).body;
    expect(body.byteLength).toBe(file!.bytes);

    expect(temporary(data)).toEqual([]);
    for (const { id } of [...done, slow]) {
      expect(filesUnder(join(data, 'jobs', id, 'result')), `job ${id}'s result directory`).toEqual([
        'model.safetensors',
      ]);
    }
    await second.stop();
    expect((await second.exited).code).toBe(0);
  });
});

describe('SIGTERM mid-job', () => {
  it('answers the request in flight, exits 0 within the shutdown timeout, leaves no partial file', async () => {
    const data = join(root, 'term');
    const first = await start(data, { ...SLOW, QUANTD_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS) });
    const slow = await slowJobRunning(first);

    // a request that takes a while on the slow kernels: 20 tensors, 40 ms a task, 2 workers
    const inFlight = send(first.port, `/v1/quantize${QUERY}`, {
      headers: { 'content-type': SAFETENSORS },
      body: modelBytes(manyTensors(20, 90)),
    });
    await new Promise((r) => setTimeout(r, 150));
    const signalled = Date.now();
    first.child.kill('SIGTERM');
    const answer = await inFlight;
    const exit = await first.exited;
    const tookMs = Date.now() - signalled;

    expect(answer.status, answer.body.toString().slice(0, 300)).toBe(200);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(tookMs).toBeLessThan(SHUTDOWN_TIMEOUT_MS + 1000);
    console.log(`SIGTERM with a job running and a request in flight: exit 0 after ${tookMs} ms`);

    // the job is left to run again: no result, no temporary file
    expect(temporary(data)).toEqual([]);
    expect(filesUnder(join(data, 'jobs', slow.id)).filter((f) => f.startsWith('result'))).toEqual([]);

    const second = await start(data);
    const rerun = await waitJob(second.port, slow.id, finished);
    expect(rerun.state, JSON.stringify(rerun.error)).toBe('succeeded');
    expect(rerun.attempts).toBe(2);
    expect(temporary(data)).toEqual([]);
    await second.stop();
  });
});
