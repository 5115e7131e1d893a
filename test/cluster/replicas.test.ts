/**
 * Cluster mode with real processes: two replicas of `quantd serve` on one Redis and one data
 * directory. A job submitted to one is seen at once by the other, run by whichever takes it, and
 * served by both; a replica killed mid-job (kill -9) leaves the job to the other once its lock
 * expires; one stopped (SIGTERM) hands it back at once; a job cancelled on one replica stops on
 * the one running it. Every result is the CLI's file, byte for byte, and no run's directory or
 * temporary file is left behind.
 */
import { readdirSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { send } from '../http/helpers.js';
import {
  SAFETENSORS,
  cliFile,
  expectSameTensors,
  finished,
  manyTensors,
  metric,
  modelBytes,
  tempDir,
  writeModel,
  type ChildServer,
} from '../jobs/helpers.js';
import { MAX_STALLS } from '../../src/jobs/cluster-queue.js';
import {
  dropPrefix,
  getClusterJob,
  newPrefix,
  resultBytes,
  startReplica,
  waitClusterJob,
  type ClusterJob,
} from './helpers.js';

const OPTIONS = [
  ['qdtype', 'int8'],
  ['scheme', 'per_channel'],
] as const;
const QUERY = '?qdtype=int8&scheme=per_channel';
/** Slow kernels, so that a job of 40 tensors is caught running (about 2 s). */
const SLOW = { QUANTD_TEST_HOOKS: '1', QUANTD_TEST_TASK_DELAY_MS: '50', QUANTD_INLINE_LIMIT: '0' };

const root = tempDir('cluster');
const data = join(root, 'data');
const prefixes: string[] = [];
const replicas = new Map<string, ChildServer>();
const model = modelBytes(manyTensors(40));
let expected: Buffer | undefined;
/** The first result of a job: every other must be the same file, byte for byte. */
let first: Buffer | undefined;

afterAll(async () => {
  await Promise.all([...replicas.values()].map((r) => r.kill()));
  for (const prefix of prefixes) await dropPrefix(prefix);
  rmSync(root, { recursive: true, force: true });
});

/** Two replicas of their own (a key prefix of their own: no other test's replica takes their jobs). */
async function pair(
  a: string,
  b: string,
  env: Readonly<Record<string, string>> = {},
): Promise<[ChildServer, ChildServer]> {
  const prefix = newPrefix('replicas');
  prefixes.push(prefix);
  const [x, y] = await Promise.all([a, b].map((name) => startReplica({ data, prefix, name, env })));
  replicas.set(a, x!).set(b, y!);
  return [x!, y!];
}

const byName = (name: string): ChildServer => replicas.get(name)!;

/** A job's result: the CLI's tensors (and a data SHA-256 of its own), and the same bytes every time. */
async function expectResult(job: ClusterJob): Promise<void> {
  expected ??= await cliFile(
    writeModel(join(root, 'model.safetensors'), manyTensors(40)),
    join(root, 'cli.safetensors'),
    OPTIONS,
  );
  const bytes = resultBytes(data, job);
  expectSameTensors(bytes, expected, `job ${job.id}`);
  first ??= bytes;
  expect(bytes.equals(first), `job ${job.id}: not the bytes of the first job`).toBe(true);
}

async function submit(server: ChildServer): Promise<ClusterJob> {
  const reply = await send(server.port, `/v1/jobs${QUERY}`, {
    headers: { 'content-type': SAFETENSORS },
    body: model,
  });
  expect(reply.status, reply.body.toString()).toBe(202);
  return JSON.parse(reply.body.toString()) as ClusterJob;
}

/** What no finished job may leave: a run's directory, a temporary file. */
function leftovers(): string[] {
  return readdirSync(join(data, 'jobs'), { recursive: true, withFileTypes: true })
    .map((e) => relative(data, join(e.parentPath, e.name)))
    .filter((p) => /(^|\/)run\.\d+(\/|$)|quantd-tmp/.test(p));
}

/**
 * A slow job submitted to `to`, caught running: the job, the replica running it (by name) and
 * the other one of the pair.
 */
async function caughtRunning(
  to: ChildServer,
  [a, b]: readonly [ChildServer, ChildServer],
  [nameA]: readonly [string, string],
): Promise<{ job: ClusterJob; runner: string; other: ChildServer }> {
  const submitted = await submit(to);
  const job = await waitClusterJob(
    to.port,
    submitted.id,
    (j) => j.state === 'running' && j.progress!.tensors_done > 2,
  );
  const runner = job.runs!.at(-1)!.replica;
  return { job, runner, other: runner === nameA ? b : a };
}

describe('two replicas, one Redis, one data directory', () => {
  it('a job submitted to one is seen at once by the other, run once, and served by both', async () => {
    const [a, b] = await pair('a1', 'b1');
    const jobs = await Promise.all([submit(a), submit(b), submit(a)]);
    // read-after-write across replicas: the other answers for the job at once
    for (const job of jobs) expect((await getClusterJob(b.port, job.id)).id).toBe(job.id);
    for (const job of jobs) expect((await getClusterJob(a.port, job.id)).id).toBe(job.id);
    for (const submitted of jobs) {
      const job = await waitClusterJob(b.port, submitted.id, finished);
      expect(job.state, JSON.stringify(job)).toBe('succeeded');
      expect(job.attempts).toBe(1);
      expect(job.runs?.map((r) => r.replica)).toHaveLength(1);
      expect(['a1', 'b1']).toContain(job.runs![0]!.replica);
      await expectResult(job);
      for (const server of [a, b]) {
        const result = await send(server.port, `/v1/jobs/${job.id}/result`);
        expect(result.status).toBe(200);
        expect(Buffer.from(result.body).equals(first!)).toBe(true);
      }
    }
    // both listed by both, in the same order
    const listed = async (s: ChildServer): Promise<string[]> =>
      (JSON.parse((await send(s.port, '/v1/jobs')).body.toString()) as { jobs: ClusterJob[] }).jobs.map(
        (j) => j.id,
      );
    await expect.poll(() => listed(a)).toEqual(await listed(b));
    expect(leftovers()).toEqual([]);
  });

  it('kill -9 of the replica running a job: the other takes it over once its lock expires and finishes it', async () => {
    const [a, b] = await pair('a2', 'b2', SLOW);
    const { job, runner, other: survivor } = await caughtRunning(a, [a, b], ['a2', 'b2']);
    await byName(runner).kill();
    const done = await waitClusterJob(survivor.port, job.id, finished);
    expect(done.state, JSON.stringify(done)).toBe('succeeded');
    expect(done.attempts).toBe(2);
    expect(done.runs!.map((r) => r.replica)).toEqual([runner, runner === 'a2' ? 'b2' : 'a2']);
    // the survivor counted the stall and the takeover; the queue is empty again
    expect(await metric(survivor.port, 'quantd_cluster_taken_over_total')).toBe(1);
    expect(await metric(survivor.port, 'quantd_cluster_stalled_total')).toBe(1);
    const metrics = (await send(survivor.port, '/metrics')).body.toString();
    expect(metrics).toContain('quantd_cluster_queue_jobs{state="waiting"} 0');
    expect(metrics).toContain('quantd_cluster_replica_running_jobs 0');
    await expectResult(done);
    expect(leftovers()).toEqual([]);
  });

  it('SIGTERM of the replica running a job hands it back at once; the other finishes it', async () => {
    const [a, b] = await pair('a3', 'b3', SLOW);
    const { job, runner, other: survivor } = await caughtRunning(b, [a, b], ['a3', 'b3']);
    await byName(runner).stop();
    const stopped = Date.now();
    const taken = await waitClusterJob(survivor.port, job.id, (j) => j.attempts === 2, 10_000);
    // not after the lock's expiry (2 s): it was put back in the queue by the replica that stopped
    expect(Date.now() - stopped).toBeLessThan(1500);
    expect(taken.runs!.at(-1)!.replica).not.toBe(runner);
    const done = await waitClusterJob(survivor.port, job.id, finished);
    expect(done.state).toBe('succeeded');
    await expectResult(done);
    expect(leftovers()).toEqual([]);
  });

  it('a job cancelled on one replica stops on the one running it, and leaves no file', async () => {
    const [a, b] = await pair('a4', 'b4', SLOW);
    const { job, other } = await caughtRunning(a, [a, b], ['a4', 'b4']);
    const reply = await send(other.port, `/v1/jobs/${job.id}`, { method: 'DELETE' });
    expect(reply.status, reply.body.toString()).toBe(202);
    expect((JSON.parse(reply.body.toString()) as ClusterJob).state).toBe('cancelled');
    for (const server of [a, b]) expect((await getClusterJob(server.port, job.id)).state).toBe('cancelled');
    // the runner stops within a task or two, and removes what it wrote
    await expect
      .poll(() => readdirSync(join(data, 'jobs', job.id)).filter((n) => n !== 'input.safetensors'), {
        timeout: 5000,
      })
      .toEqual([]);
    const done = await getClusterJob(a.port, job.id);
    expect(done.state).toBe('cancelled');
    expect(done.result).toBeNull();
  });

  it('a job that brings down every replica that runs it is failed after MAX_STALLS takeovers, naming the last', async () => {
    const [a, b] = await pair('a5', 'b5', SLOW);
    const job = await submit(a);
    const live = new Map<string, ChildServer>([
      ['a5', a],
      ['b5', b],
    ]);
    let spawned = 0;
    let last = '';
    for (let stall = 0; stall <= MAX_STALLS; stall++) {
      const anyLive = [...live.values()][0]!;
      const running = await waitClusterJob(
        anyLive.port,
        job.id,
        (j) => j.state === 'running' && j.attempts === stall + 1 && j.progress!.tensors_done > 0,
      );
      last = running.runs!.at(-1)!.replica;
      await live.get(last)!.kill();
      live.delete(last);
      // a new replica in the place of the one killed, so that one is left to take the job
      const name = `c5-${spawned++}`;
      const fresh = await startReplica({ data, prefix: prefixes.at(-1)!, name, env: SLOW });
      replicas.set(name, fresh);
      live.set(name, fresh);
    }
    const done = await waitClusterJob([...live.values()][0]!.port, job.id, finished);
    expect(done.state, JSON.stringify(done)).toBe('failed');
    expect(done.error!.code).toBe('INTERNAL');
    expect(done.error!.message).toContain(`the last: ${last}`);
    expect(done.attempts).toBe(MAX_STALLS + 1);
    expect(leftovers().filter((p) => p.includes(job.id))).toEqual([]);
  });
});
