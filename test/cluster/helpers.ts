/**
 * Helpers for the cluster suite: replicas of `quantd serve` as child processes sharing one data
 * directory and one Redis under a key prefix of the test's own (removed afterwards), the Redis
 * they use, and a job's result as bytes.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { expect } from 'vitest';

import { getJob, startChildServer, waitJob, type ChildServer, type Job } from '../jobs/helpers.js';

export const REDIS_URL = process.env['QUANTD_TEST_REDIS_URL'] ?? 'redis://127.0.0.1:6379';

/** A job as cluster mode shows it: with the replica of each attempt. */
export type ClusterJob = Job & { runs?: { attempt: number; replica: string; started_at: string }[] };

/** A key prefix no other test (or run) uses. */
export const newPrefix = (name: string): string => `quantd-test-${name}-${randomBytes(4).toString('hex')}`;

/** Removes every key under `prefix` (what a test's replicas left in Redis). */
export async function dropPrefix(prefix: string, url = REDIS_URL): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      if (keys.length > 0) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

export interface ReplicaOptions {
  readonly data: string;
  readonly prefix: string;
  readonly name: string;
  readonly url?: string;
  readonly env?: Readonly<Record<string, string>>;
}

/** One replica: `quantd serve` in cluster mode, named `name`. */
export function startReplica(options: ReplicaOptions): Promise<ChildServer> {
  return startChildServer({
    QUANTD_DATA_DIR: options.data,
    QUANTD_REDIS_URL: options.url ?? REDIS_URL,
    QUANTD_REDIS_PREFIX: options.prefix,
    QUANTD_REPLICA_ID: options.name,
    QUANTD_CLUSTER_LOCK_MS: '2000',
    QUANTD_POOL_SIZE: '1',
    ...options.env,
  });
}

export const getClusterJob = (port: number, id: string): Promise<ClusterJob> => getJob(port, id);

/** Polls the job on `port` until `until` holds (fails after `ms`). */
export const waitClusterJob = (
  port: number,
  id: string,
  until: (job: ClusterJob) => boolean,
  ms = 60_000,
): Promise<ClusterJob> => waitJob(port, id, until, ms);

/** The bytes of a succeeded job's one result file, as the data directory holds them. */
export function resultBytes(data: string, job: Job): Buffer {
  expect(job.result?.files.length, JSON.stringify(job)).toBe(1);
  return readFileSync(join(data, 'jobs', job.id, 'result', job.result!.files[0]!.name));
}
