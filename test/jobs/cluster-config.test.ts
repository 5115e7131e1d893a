/**
 * Cluster mode's configuration and its failure to start, without a Redis (`npm test` needs none):
 * a bad QUANTD_REDIS_URL or replica name is CONFIG_INVALID naming it; a Redis that cannot be
 * reached is QUEUE_UNAVAILABLE naming host and port (never the password), at once. The cluster
 * itself is tested against a real Redis by `npm run test:cluster` (test/cluster).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { loadConfig } from '../../src/config.js';
import { QuantdError } from '../../src/errors/index.js';
import { connectCluster } from '../../src/jobs/cluster.js';
import { DataDir } from '../../src/jobs/paths.js';
import { JobStore } from '../../src/jobs/store.js';

const root = mkdtempSync(join(tmpdir(), 'quantd-cluster-config-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const configError = (env: Record<string, string>): QuantdError => {
  try {
    loadConfig(env);
  } catch (err) {
    return err as QuantdError;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
};

describe('cluster configuration', () => {
  it('is off without QUANTD_REDIS_URL, and takes a redis:// URL, a prefix, a replica name and a lock', () => {
    const single = loadConfig({});
    expect(single.redisUrl).toBeNull();
    expect(single.replicaId).toBeNull();
    expect([single.redisPrefix, single.clusterLockMs]).toEqual(['quantd', 30_000]);
    const cluster = loadConfig({
      QUANTD_REDIS_URL: 'redis://10.0.0.5:6380/2',
      QUANTD_REDIS_PREFIX: 'prod:quantd',
      QUANTD_REPLICA_ID: 'quantd-7',
      QUANTD_CLUSTER_LOCK_MS: '5000',
    });
    expect(cluster).toMatchObject({
      redisUrl: 'redis://10.0.0.5:6380/2',
      redisPrefix: 'prod:quantd',
      replicaId: 'quantd-7',
      clusterLockMs: 5000,
    });
  });

  it('refuses what is not a Redis URL (the password never shown) and names that are not names', () => {
    const url = configError({ QUANTD_REDIS_URL: 'http://user:secret@host:6379' });
    expect(url.code).toBe('CONFIG_INVALID');
    expect(url.message).toContain('QUANTD_REDIS_URL');
    expect(url.message).not.toContain('secret');
    expect(configError({ QUANTD_REDIS_URL: 'localhost:6379' }).code).toBe('CONFIG_INVALID');
    const replica = configError({ QUANTD_REPLICA_ID: 'a b' });
    expect([replica.code, replica.message.includes('QUANTD_REPLICA_ID')]).toEqual(['CONFIG_INVALID', true]);
    expect(configError({ QUANTD_REDIS_PREFIX: 'x'.repeat(65) }).code).toBe('CONFIG_INVALID');
    expect(configError({ QUANTD_CLUSTER_LOCK_MS: '10' }).code).toBe('CONFIG_INVALID');
  });

  it('a Redis that cannot be reached: QUEUE_UNAVAILABLE at once, naming host and port only', async () => {
    const started = Date.now();
    const err = await connectCluster(
      { url: 'redis://admin:secret@127.0.0.1:1', prefix: 'quantd', lockMs: 30_000 },
      new JobStore(new DataDir(root)),
    ).then(
      () => null,
      (e: unknown) => e as QuantdError,
    );
    expect(err).toBeInstanceOf(QuantdError);
    expect(err!.code).toBe('QUEUE_UNAVAILABLE');
    expect(err!.message).toContain('127.0.0.1:1');
    expect(err!.message).not.toContain('secret');
    expect(Date.now() - started).toBeLessThan(5000);
  });
});
