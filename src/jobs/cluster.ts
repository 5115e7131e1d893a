/**
 * Cluster mode's parts, connected (QUANTD_REDIS_URL set): the records (cluster-records.ts) and
 * the queue (cluster-queue.ts) on one Redis, and this replica's name. The job manager takes them
 * in place of job.json files and its in-process queue; everything else it does is the same.
 */
import { hostname } from 'node:os';
import { Redis } from 'ioredis';
import { QuantdError } from '../errors/index.js';
import { ClusterQueue } from './cluster-queue.js';
import { ClusterRecords } from './cluster-records.js';
import type { Artifacts } from './store.js';

/** How long closing waits for Redis before it drops the connections. */
const CLOSE_WAIT_MS = 5000;

export interface ClusterConfig {
  /** redis://[user:password@]host:port[/db] (QUANTD_REDIS_URL). */
  readonly url: string;
  /** Prefix of every key (QUANTD_REDIS_PREFIX): replicas of one service share it. */
  readonly prefix: string;
  /** This replica's name in Job.runs (QUANTD_REPLICA_ID; default host name and process id). */
  readonly replica?: string;
  /** How long a replica that stops renewing keeps a running job (QUANTD_CLUSTER_LOCK_MS). */
  readonly lockMs: number;
}

export interface Cluster {
  readonly replica: string;
  readonly records: ClusterRecords;
  readonly queue: ClusterQueue;
  /** Calls `listener` each time the connection to Redis is back after it was lost. */
  onReconnect(listener: () => void): void;
  /** Closes the queue (waiting for its runs) and the connections. */
  close(): Promise<void>;
}

/** Connects to Redis; QUEUE_UNAVAILABLE (naming the URL's host) when it cannot. */
export async function connectCluster(config: ClusterConfig, files: Artifacts): Promise<Cluster> {
  const replica = config.replica ?? `${hostname()}-${process.pid}`;
  // Commands wait for a reconnection instead of failing after N tries: a run's writes must land
  // (a lost final write would leave its job running for ever), and BullMQ's workers require it.
  const options = { maxRetriesPerRequest: null, lazyConnect: true, connectionName: `quantd:${replica}` };
  const commands = new Redis(config.url, options);
  const subscriber = new Redis(config.url, options);
  for (const connection of [commands, subscriber]) connection.on('error', () => {}); // retried by ioredis
  try {
    await Promise.all([commands.connect(), subscriber.connect()]);
  } catch (err) {
    commands.disconnect();
    subscriber.disconnect();
    throw queueUnavailable(config.url, err);
  }
  const records = new ClusterRecords(commands, subscriber, config.prefix, replica, files);
  const queue = new ClusterQueue({ connection: commands, prefix: config.prefix, lockMs: config.lockMs });
  let connected = true;
  commands.on('close', () => {
    connected = false;
  });
  return {
    replica,
    records,
    queue,
    onReconnect(listener) {
      commands.on('ready', () => {
        if (connected) return;
        connected = true;
        listener();
      });
    },
    async close() {
      const graceful = (async () => {
        await queue.close();
        await Promise.all([commands.quit().catch(() => {}), subscriber.quit().catch(() => {})]);
      })();
      // with Redis gone, commands wait for it for ever: a stopping replica does not
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>(
        (resolve) => (timer = setTimeout(() => resolve('late'), CLOSE_WAIT_MS)),
      );
      const outcome = await Promise.race([graceful, late]);
      clearTimeout(timer);
      if (outcome === 'late') {
        commands.disconnect();
        subscriber.disconnect();
        await queue.close(true).catch(() => {});
      }
    },
  };
}

/** The error of a Redis that cannot be reached; the URL is shown without its password. */
export function queueUnavailable(url: string, err: unknown): QuantdError {
  let where = url;
  try {
    const parsed = new URL(url);
    where = `${parsed.hostname}:${parsed.port || 6379}`;
  } catch {
    // not a URL: ioredis said why
  }
  return new QuantdError('QUEUE_UNAVAILABLE', { detail: `${where}: ${(err as Error).message}` });
}
