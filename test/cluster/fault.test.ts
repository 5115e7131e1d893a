/**
 * The cluster under faults, the topology of the cluster profile as processes on 127.0.0.1: three
 * replicas of `quantd serve` on the machine's Redis and one shared data directory, HAProxy in
 * front. 50 jobs go in through the balancer; while they run, replicas are killed (kill -9) and
 * stopped (SIGTERM) and started again, one at a time. Every job must succeed, its result byte for
 * byte the file a single node writes for the same model, and be run to completion exactly once
 * (each replica logs the runs it finished; the runs of a replica that died were cut short).
 * Then every job is read over gRPC through HAProxy, and one more job is run by the CLI's
 * `--remote` through it.
 */
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { quantdAsync } from '../cli/cli-helpers.js';
import { send } from '../http/helpers.js';
import {
  SAFETENSORS,
  finished,
  manyTensors,
  modelBytes,
  startJobServer,
  tempDir,
  waitJob,
  type ChildServer,
  type Job,
} from '../jobs/helpers.js';
import { call, jobsClient, receive } from '../grpc/jobs-helpers.js';
import { dropPrefix, newPrefix, startReplica, type ClusterJob } from './helpers.js';
import { freePort, startHaproxy, type Backend, type Balancer } from './haproxy.js';

const JOBS = 50;
const MODELS = 5;
const QUERY = '?qdtype=int8&scheme=per_channel';
/** About 0.4 s a job on one thread: the faults find jobs running. */
const SLOW = { QUANTD_TEST_HOOKS: '1', QUANTD_TEST_TASK_DELAY_MS: '40', QUANTD_INLINE_LIMIT: '0' };

const root = tempDir('cluster-fault');
const data = join(root, 'data');
const prefix = newPrefix('fault');
const models = Array.from({ length: MODELS }, (_, i) => modelBytes(manyTensors(10, 100 + i)));
const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

/** Every replica process started (the killed ones too: their logs count). */
const processes: ChildServer[] = [];
const live = new Map<string, ChildServer>();
let balancer: Balancer | undefined;

afterAll(async () => {
  await balancer?.stop();
  await Promise.all(processes.map((p) => p.kill()));
  await dropPrefix(prefix);
  rmSync(root, { recursive: true, force: true });
});

async function start(backend: Backend): Promise<void> {
  const server = await startReplica({
    data,
    prefix,
    name: backend.name,
    env: {
      ...SLOW,
      QUANTD_HTTP_PORT: String(backend.httpPort),
      QUANTD_GRPC_PORT: String(backend.grpcPort),
      QUANTD_LOG_LEVEL: 'info',
      QUANTD_SHUTDOWN_TIMEOUT_MS: '5000',
      QUANTD_JOB_QUOTA: '100',
    },
  });
  processes.push(server);
  live.set(backend.name, server);
}

/** What a single node writes for each model (an in-process server with a data directory of its own). */
async function singleNodeResults(): Promise<string[]> {
  const server = await startJobServer(join(root, 'single'));
  try {
    const out: string[] = [];
    for (const model of models) {
      const reply = await send(server.port, `/v1/jobs${QUERY}`, {
        headers: { 'content-type': SAFETENSORS },
        body: model,
      });
      const job = JSON.parse(reply.body.toString()) as Job;
      await waitJob(server.port, job.id, finished);
      out.push(sha256((await send(server.port, `/v1/jobs/${job.id}/result`)).body));
    }
    return out;
  } finally {
    await server.server.shutdown('test done');
  }
}

/** GET through the balancer, again where a replica went down under the request. */
async function get(path: string): Promise<{ status: number; body: Buffer }> {
  for (let tries = 0; ; tries++) {
    try {
      const reply = await send(balancer!.httpPort, path);
      if ((reply.status !== 502 && reply.status !== 503) || tries >= 20) return reply;
    } catch (err) {
      if (tries >= 20) throw err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The ids of the jobs each replica's log says it finished (succeeded), over all processes. */
function completions(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const p of processes) {
    for (const line of p.stdout().split('\n')) {
      if (!line.includes('"jobs: succeeded"')) continue;
      const id = (JSON.parse(line) as { job: string }).job;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
  }
  return counts;
}

describe('three replicas behind HAProxy, replicas killed and restarted under 50 jobs', () => {
  it('every job succeeds once, byte-identical to a single node', async () => {
    const expected = await singleNodeResults();
    const backends: Backend[] = [];
    for (const name of ['r1', 'r2', 'r3'])
      backends.push({ name, httpPort: await freePort(), grpcPort: await freePort() });
    await Promise.all(backends.map(start));
    balancer = await startHaproxy(root, backends);

    const jobs: { id: string; model: number }[] = [];
    for (let i = 0; i < JOBS; i++) {
      const reply = await send(balancer.httpPort, `/v1/jobs${QUERY}`, {
        headers: { 'content-type': SAFETENSORS },
        body: models[i % MODELS]!,
      });
      expect(reply.status, reply.body.toString()).toBe(202);
      jobs.push({ id: (JSON.parse(reply.body.toString()) as Job).id, model: i % MODELS });
    }

    // faults, one replica at a time: kill -9 and SIGTERM in turn, each started again at once
    let faults = 0;
    const pending = async (): Promise<number> => {
      let n = 0;
      for (const job of jobs) {
        const reply = await get(`/v1/jobs/${job.id}`);
        if (reply.status === 200 && !finished(JSON.parse(reply.body.toString()) as Job)) n++;
      }
      return n;
    };
    while (faults < 6 && (await pending()) > 5) {
      const backend = backends[faults % backends.length]!;
      const victim = live.get(backend.name)!;
      if (faults % 2 === 0) await victim.kill();
      else await victim.stop();
      faults++;
      await start(backend);
      await new Promise((r) => setTimeout(r, 700));
    }
    expect(faults, 'the jobs finished before the faults could be made').toBeGreaterThanOrEqual(4);

    const deadline = Date.now() + 180_000;
    const done = new Map<string, ClusterJob>();
    while (done.size < JOBS) {
      for (const job of jobs) {
        if (done.has(job.id)) continue;
        const reply = await get(`/v1/jobs/${job.id}`);
        expect(reply.status, reply.body.toString()).toBe(200);
        const shown = JSON.parse(reply.body.toString()) as ClusterJob;
        if (finished(shown)) done.set(job.id, shown);
      }
      if (Date.now() > deadline) expect.fail(`${JOBS - done.size} jobs did not finish`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const retried = [...done.values()].filter((j) => j.attempts > 1).length;
    for (const job of jobs) {
      const shown = done.get(job.id)!;
      expect(shown.state, JSON.stringify(shown)).toBe('succeeded');
      const result = await get(`/v1/jobs/${job.id}/result`);
      expect(result.status).toBe(200);
      expect(sha256(result.body), `job ${job.id}`).toBe(expected[job.model]);
    }
    // run to completion once each: one "succeeded" line per job over every replica's log
    const counts = completions();
    expect([...counts.keys()].sort()).toEqual(jobs.map((j) => j.id).sort());
    expect([...counts.values()].filter((n) => n !== 1)).toEqual([]);
    // no run's directory, temporary file or upload left
    const left = readdirSync(join(data, 'jobs'), { recursive: true, withFileTypes: true })
      .map((e) => relative(data, join(e.parentPath, e.name)))
      .filter((p) => /(^|\/)run\.\d+(\/|$)|quantd-tmp|input\.safetensors/.test(p));
    expect(left).toEqual([]);
    // gRPC (HTTP/2) through the balancer too: every job, and one result streamed
    const client = await jobsClient(`127.0.0.1:${balancer.grpcPort}`);
    try {
      for (const job of jobs) {
        const message = await call(client, 'Get', { id: job.id });
        expect(message.state).toBe('succeeded');
        expect((message['runs'] as unknown[]).length).toBe(done.get(job.id)!.attempts);
      }
      const streamed = await receive(client.Result({ id: jobs[0]!.id }));
      expect(streamed.error).toBeNull();
      expect(sha256(streamed.files[0]!.bytes)).toBe(expected[jobs[0]!.model]);
    } finally {
      client.close();
    }
    // the CLI's --remote through the balancer: uploaded, followed and downloaded through
    // whichever replicas HAProxy picks, the same bytes
    const input = join(root, 'remote-in.safetensors');
    writeFileSync(input, models[0]!);
    const out = join(root, 'remote-out.safetensors');
    const cli = await quantdAsync([
      'quantize',
      input,
      '-o',
      out,
      '--qdtype',
      'int8',
      '--scheme',
      'per_channel',
      '--remote',
      `http://127.0.0.1:${balancer.httpPort}`,
      '--no-progress',
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(sha256(readFileSync(out))).toBe(expected[0]);
    console.log(
      `cluster fault test: ${JOBS} jobs, ${faults} faults, ${retried} jobs taken over, all succeeded once`,
    );
  });
});
