/**
 * Redis restarted under running jobs, with a Redis of the test's own (redis-server from the
 * machine's packages, on a free port): the replicas reconnect and every job finishes once.
 * - With AOF (appendfsync always), as the README recommends for production: Redis comes back
 *   with every record and the queue.
 * - Without persistence (the machine's own Redis is run so): Redis comes back empty; each replica
 *   puts back the records it holds and queues again what had not finished (a job running at the
 *   restart is finished by its run, or taken over). What this cannot save — every replica and
 *   Redis lost at once — is in docs/scaling.md.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { send } from '../http/helpers.js';
import {
  SAFETENSORS,
  finished,
  manyTensors,
  modelBytes,
  tempDir,
  type ChildServer,
  type Job,
} from '../jobs/helpers.js';
import { startReplica, waitClusterJob } from './helpers.js';
import { freePort } from './haproxy.js';

const QUERY = '?qdtype=int8&scheme=per_channel';
const SLOW = { QUANTD_TEST_HOOKS: '1', QUANTD_TEST_TASK_DELAY_MS: '40', QUANTD_INLINE_LIMIT: '0' };
const root = tempDir('cluster-redis');
const replicas: ChildServer[] = [];
const redises: ChildProcess[] = [];
const model = modelBytes(manyTensors(20));

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.kill()));
  for (const r of redises) if (r.exitCode === null) r.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
});

/** redis-server in the foreground on `port`, keeping its files in `dir`; resolves once it answers. */
async function redisServer(port: number, dir: string, aof: boolean): Promise<ChildProcess> {
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', ''];
  args.push(...(aof ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']));
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  redises.push(child);
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
  const deadline = Date.now() + 10_000;
  while (!/Ready to accept connections/.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`redis-server did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return child;
}

async function stopRedis(child: ChildProcess): Promise<void> {
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

function completions(servers: readonly ChildServer[], ids: readonly string[]): number[] {
  const lines = servers.flatMap((s) => s.stdout().split('\n')).filter((l) => l.includes('"jobs: succeeded"'));
  return ids.map((id) => lines.filter((l) => l.includes(id)).length);
}

describe.each([
  ['with AOF', true],
  ['without persistence', false],
])('Redis restarted mid-job, %s', (label, aof) => {
  it('the replicas reconnect; every job finishes once, with the same bytes', async () => {
    const dir = join(root, label.replace(/\W+/g, '-'));
    mkdirSync(join(dir, 'redis'), { recursive: true });
    const port = await freePort();
    let redis = await redisServer(port, join(dir, 'redis'), aof);
    const url = `redis://127.0.0.1:${port}`;
    const env = { ...SLOW, QUANTD_LOG_LEVEL: 'info' };
    const pair = await Promise.all(
      ['x', 'y'].map((name) => startReplica({ data: join(dir, 'data'), prefix: 'quantd', name, url, env })),
    );
    replicas.push(...pair);
    const [a, b] = pair as [ChildServer, ChildServer];
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const reply = await send((i % 2 === 0 ? a : b).port, `/v1/jobs${QUERY}`, {
        headers: { 'content-type': SAFETENSORS },
        body: model,
      });
      expect(reply.status, reply.body.toString()).toBe(202);
      ids.push((JSON.parse(reply.body.toString()) as Job).id);
    }
    await waitClusterJob(a.port, ids[0]!, (j) => j.state === 'running' && j.progress!.tensors_done > 2);
    await stopRedis(redis);
    await new Promise((r) => setTimeout(r, 500));
    redis = await redisServer(port, join(dir, 'redis'), aof);

    const shas = new Set<string>();
    for (const id of ids) {
      const job = await waitClusterJob(b.port, id, finished, 120_000);
      expect(job.state, JSON.stringify(job)).toBe('succeeded');
      shas.add(sha256((await send(a.port, `/v1/jobs/${id}/result`)).body));
    }
    expect(shas.size).toBe(1);
    expect(completions(pair, ids)).toEqual(ids.map(() => 1));
    await Promise.all(pair.map((r) => r.stop()));
    await stopRedis(redis);
  });
});
