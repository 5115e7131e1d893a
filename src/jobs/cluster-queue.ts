/**
 * The queue of cluster mode: BullMQ on Redis. Any replica adds a job; any replica's worker takes
 * it (QUANTD_JOB_CONCURRENCY at a time), holds a lock on it while it runs, and renews the lock.
 *
 * - A replica that dies (kill -9, a lost host) stops renewing: once the lock has expired
 *   (QUANTD_CLUSTER_LOCK_MS), another replica's stall check puts the job back in the queue and
 *   a worker takes it again. A job whose runs stall more than MAX_STALLS times is failed.
 * - A replica that stops (SIGTERM) puts its running jobs back at once, for another to take.
 * - The queue carries only job ids: the job itself is its record (cluster-records.ts), which
 *   also decides whether a run may go on (cancelled, finished, taken over).
 */
import { Queue, WaitingError, Worker, type Job as BullJob } from 'bullmq';
import type { Redis } from 'ioredis';
import type { JobLog } from './log.js';

/** Stalls a job may have before it is failed (a job that brings its replica down, again and again). */
export const MAX_STALLS = 3;

const QUEUE = 'jobs';

/** How a run of the job ended: finished (whatever its state), or stopped to run again elsewhere. */
export type RunEnd = 'finished' | 'requeue';

/** Counters of this replica since it started (/metrics). */
export interface QueueStats {
  /** Jobs this replica's stall check found without a live lock (their replica had stopped). */
  stalled: number;
  /** Jobs this replica put back in the queue as it stopped. */
  requeued: number;
  /** Jobs this replica took over from a replica that had stopped (attempt 2 and on). */
  takenOver: number;
  /** Jobs failed here for stalling MAX_STALLS times. */
  stalledOut: number;
}

export interface ClusterQueueOptions {
  /** A connection for the queue's commands; the worker opens its own (BullMQ duplicates it). */
  readonly connection: Redis;
  readonly prefix: string;
  /** How long a replica that stops renewing keeps a job (BullMQ's lockDuration). */
  readonly lockMs: number;
}

export class ClusterQueue {
  private readonly queue: Queue;
  private worker: Worker | undefined;
  readonly stats: QueueStats = { stalled: 0, requeued: 0, takenOver: 0, stalledOut: 0 };

  constructor(private readonly options: ClusterQueueOptions) {
    this.queue = new Queue(QUEUE, { connection: options.connection, prefix: options.prefix });
  }

  /**
   * Starts taking jobs: `run(id)` runs one to its end. `onStalledOut(id)` is told of a job failed
   * for stalling MAX_STALLS times (its record is still running: the caller fails it).
   */
  start(
    concurrency: number,
    run: (id: string) => Promise<RunEnd>,
    onStalledOut: (id: string) => void,
    log: () => JobLog,
  ): void {
    const { connection, prefix, lockMs } = this.options;
    this.worker = new Worker(
      QUEUE,
      async (job: BullJob<{ id: string }>, token?: string) => {
        if ((await run(job.data.id)) === 'requeue') {
          this.stats.requeued++;
          await job.moveToWait(token);
          throw new WaitingError();
        }
      },
      {
        connection,
        prefix,
        concurrency,
        lockDuration: lockMs,
        stalledInterval: Math.max(250, Math.floor(lockMs / 2)),
        maxStalledCount: MAX_STALLS,
      },
    );
    this.worker.on('stalled', () => {
      this.stats.stalled++;
    });
    this.worker.on('failed', (job, err) => {
      if (!job || !/stalled more than allowable limit/i.test(err.message)) return;
      this.stats.stalledOut++;
      onStalledOut(job.data.id);
    });
    // the worker goes on (ioredis reconnects); without a listener an error would be thrown
    this.worker.on('error', (err) => log().warn({ err }, `jobs: queue: ${err.message}`));
  }

  /** Adds a job (its id once: adding an id the queue holds is a no-op). */
  async enqueue(id: string): Promise<void> {
    await this.queue.add('run', { id }, { jobId: id, removeOnComplete: true, removeOnFail: { count: 1000 } });
  }

  /** Takes a job out of the queue if no worker holds it (a running one is stopped by its record). */
  async dequeue(id: string): Promise<void> {
    const job = await this.queue.getJob(id);
    await job?.remove().catch(() => {});
  }

  /** Jobs waiting and running (active) in the whole cluster's queue. */
  async counts(): Promise<{ waiting: number; active: number }> {
    const counts = await this.queue.getJobCounts('waiting', 'active', 'prioritized', 'delayed');
    return {
      waiting: (counts['waiting'] ?? 0) + (counts['prioritized'] ?? 0) + (counts['delayed'] ?? 0),
      active: counts['active'] ?? 0,
    };
  }

  /**
   * Stops taking jobs. Runs in flight are stopped by the caller first (their jobs go back to the
   * queue): this waits for them, then closes the connections — or, `force`d (Redis gone), does not
   * wait for anything.
   */
  async close(force = false): Promise<void> {
    await this.worker?.close(force);
    await this.queue.close();
  }
}
