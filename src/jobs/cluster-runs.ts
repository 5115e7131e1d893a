/**
 * The jobs of a replica in cluster mode (cluster.ts): what the job manager does with the queue
 * and the records in Redis in place of its own queue and job.json files.
 *
 * - Start: the book follows Redis's change stream, takes every record (reconcile), and the
 *   replica's worker starts taking jobs from the queue; each is run by the same runJob as on a
 *   single server, unless it finished or went meanwhile.
 * - Reconcile, at start and after each reconnection: records Redis lost are put back, unfinished
 *   jobs queued again.
 * - Reads afresh (fresh) before the manager answers for a job.
 * - Stopping: jobs taken from then on, and runs stopped by the shutdown, go back to the queue.
 */
import { QuantdError } from '../errors/index.js';
import type { Cluster } from './cluster.js';
import type { QueueStats, RunEnd } from './cluster-queue.js';
import type { JobLog } from './log.js';
import { isJobId } from './paths.js';
import { now, type Entry, type JobBook } from './records.js';
import { runJob, type RunDeps } from './runner.js';
import { FINISHED, jobError, type Artifacts, type JobRecord } from './store.js';

export interface ClusterRunsDeps {
  readonly book: JobBook;
  readonly store: Artifacts;
  readonly runDeps: RunDeps;
  /** Jobs this replica runs at once (QUANTD_JOB_CONCURRENCY). */
  readonly concurrency: number;
  readonly log: () => JobLog;
}

/** The queue across the cluster, the jobs running here and this replica's counters (/metrics). */
export interface ClusterStats {
  readonly queue: { readonly waiting: number; readonly active: number };
  readonly runningHere: number;
  readonly counters: Readonly<QueueStats>;
}

export class ClusterRuns {
  /** Jobs running on this replica. */
  private running = 0;
  private stopping = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly deps: ClusterRunsDeps,
  ) {}

  get replica(): string {
    return this.cluster.replica;
  }

  /**
   * The book follows Redis (every change another replica makes), is filled with every record,
   * and this replica's workers start taking jobs from the queue.
   */
  async start(): Promise<void> {
    await this.cluster.records.subscribe((change) => this.deps.book.take(change.id, change.record));
    await this.reconcile();
    this.cluster.queue.start(
      this.deps.concurrency,
      (id) => this.runQueued(id),
      (id) => void this.failStalled(id),
      this.deps.log,
    );
    this.cluster.onReconnect(() => void this.reconcile());
  }

  /**
   * At start and after each reconnection to Redis (changes may have been missed):
   * the book takes every record in Redis; a record this replica holds that Redis lost (restarted
   * without persistence) is put back, one removed meanwhile is dropped; every job not finished is
   * in the queue (adding an id the queue holds changes nothing). Jobs running here are left to
   * their runs.
   */
  private async reconcile(): Promise<void> {
    let stored: Map<string, JobRecord>;
    try {
      const records = await this.cluster.records.load();
      records.sort((a, b) => a.job.created_at.localeCompare(b.job.created_at));
      stored = new Map(records.map((r) => [r.job.id, r]));
    } catch (err) {
      this.deps.log().warn({ err }, `jobs: cannot read the records in Redis: ${(err as Error).message}`);
      return;
    }
    for (const [id, record] of stored) this.deps.book.take(id, record);
    for (const entry of [...this.deps.book.entries.values()]) {
      if (!stored.has(entry.record.job.id)) await this.restore(entry);
      else if (!FINISHED.includes(entry.record.job.state) && entry.running === undefined) {
        await this.cluster.queue
          .enqueue(entry.record.job.id)
          .catch((err: unknown) =>
            this.deps.log().warn({ err }, `jobs: cannot queue: ${(err as Error).message}`),
          );
      }
    }
  }

  /**
   * A record this replica holds and Redis does not. Removed meanwhile (its marker
   * says so): dropped here too. Lost by Redis (restarted without persistence): put back as this
   * replica last saw it, and queued again if it had not finished (a run of it here goes on; its
   * next write puts its record back anyway).
   */
  private async restore(entry: Entry): Promise<void> {
    const { job } = entry.record;
    if (entry.record.receiving !== null || entry.deleted) return;
    try {
      if (!(await this.cluster.records.restore(entry.record))) {
        if (await this.cluster.records.wasRemoved(job.id)) this.deps.book.take(job.id, null);
        return;
      }
      this.deps.log().warn({ job: job.id }, 'jobs: a record Redis had lost is put back');
      if (!FINISHED.includes(job.state) && entry.running === undefined)
        await this.cluster.queue.enqueue(job.id);
    } catch (err) {
      this.deps
        .log()
        .warn({ err, job: job.id }, `jobs: cannot restore a record in Redis: ${(err as Error).message}`);
    }
  }

  /** Runs a job a worker took, unless it has finished or gone meanwhile. */
  private async runQueued(id: string): Promise<RunEnd> {
    if (this.stopping) return 'requeue';
    const record = await this.cluster.records.read(id);
    if (record === null || record.receiving !== null || FINISHED.includes(record.job.state))
      return 'finished';
    this.deps.book.take(id, record);
    const entry = this.deps.book.entries.get(id)!;
    entry.record = record;
    if (record.job.state === 'running') this.cluster.queue.stats.takenOver++;
    this.running++;
    entry.running = runJob(entry, this.deps.runDeps)
      .catch((err: unknown) => this.deps.log().error({ err, job: id }, `jobs: ${(err as Error).message}`))
      .finally(() => {
        this.running--;
        entry.running = undefined;
        entry.controller = undefined;
      });
    await entry.running;
    return entry.stopReason === 'shutdown' ? 'requeue' : 'finished';
  }

  /** A job whose runs stopped their replicas MAX_STALLS times is failed. */
  private async failStalled(id: string): Promise<void> {
    const record = await this.cluster.records.read(id).catch(() => null);
    if (record === null || FINISHED.includes(record.job.state)) return;
    this.deps.book.take(id, record);
    const entry = this.deps.book.entries.get(id)!;
    const cause = new QuantdError('INTERNAL', {
      detail: `the job stopped the replicas that ran it ${record.job.attempts} times (the last: ${record.job.runs?.at(-1)?.replica ?? 'unknown'})`,
    });
    try {
      // files first: the queue has failed the job, so no run of it goes on anywhere, and a
      // failed job shown is one whose files are gone
      await this.deps.store.clearResult(id);
      if (record.job.input.kind === 'upload') await this.deps.store.removeUpload(id);
      await this.deps.book.finish(entry, {
        state: 'failed',
        finished_at: now(),
        error: jobError(cause),
        result: null,
      });
    } catch (err) {
      this.deps.log().warn({ err, job: id }, `jobs: ${(err as Error).message}`);
    }
  }

  /**
   * The book takes the job's record as Redis holds it now, so that a job submitted or changed on
   * another replica a moment ago is answered as it is (the change stream follows within
   * milliseconds, but a client may be quicker). A record Redis lost is put back.
   */
  async fresh(id: string): Promise<void> {
    if (!isJobId(id)) return;
    try {
      const record = await this.cluster.records.read(id);
      const known = this.deps.book.entries.get(id);
      if (record !== null) this.deps.book.take(id, record);
      else if (known !== undefined) await this.restore(known);
    } catch (err) {
      throw new QuantdError('QUEUE_UNAVAILABLE', { detail: (err as Error).message });
    }
  }

  /**
   * Queues an accepted job. A job the queue cannot take is removed and QUEUE_UNAVAILABLE
   * answered: it was never accepted.
   */
  async enqueue(id: string): Promise<void> {
    try {
      await this.cluster.queue.enqueue(id);
    } catch (err) {
      await this.deps.book.remove(id).catch(() => {});
      throw new QuantdError('QUEUE_UNAVAILABLE', { detail: (err as Error).message });
    }
  }

  /** Takes a cancelled job out of the queue (a run elsewhere stops when its replica hears of it). */
  async dequeue(id: string): Promise<void> {
    await this.cluster.queue.dequeue(id).catch(() => {});
  }

  async stats(): Promise<ClusterStats> {
    return {
      queue: await this.cluster.queue.counts(),
      runningHere: this.running,
      counters: this.cluster.queue.stats,
    };
  }

  /** From now on, jobs the worker takes go back to the queue (the replica is stopping). */
  stopTaking(): void {
    this.stopping = true;
  }

  /** Closes the queue and the connections (after the runs have stopped). */
  async close(): Promise<void> {
    await this.cluster.close();
  }
}
