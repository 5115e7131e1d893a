/**
 * The job manager: accepts jobs, runs them in the background (QUANTD_JOB_CONCURRENCY at a time,
 * each a runModel over the shared worker pool, or a layout's writer: runner.ts), keeps their
 * job.json current (records.ts), and cancels, deletes and resumes them.
 *
 * - Every state change is written to job.json (progress at most once a second); a submission is
 *   answered, and a final state (succeeded, failed, cancelled) shown, only once written.
 * - A job is marked succeeded only after its run has renamed every result file into place (and
 *   the report, if it has one, is written), with each file's size and data SHA-256.
 * - Start-up resumes what the previous process left: queued and running jobs are run again from
 *   the start (their partial results removed; `attempts` counts the runs), an upload that was
 *   still being received is failed, a succeeded job whose result files are missing or of the wrong
 *   size is failed.
 * - Stopping (server shutdown) aborts running jobs without changing their state: the next start
 *   runs them again.
 * - Cluster mode (`cluster`, cluster.ts; its side of the manager in cluster-runs.ts): records
 *   live in Redis and every replica's book follows them; the queue is BullMQ's, whose workers on
 *   every replica take jobs; start-up resumes nothing itself (a job a replica left is taken again
 *   by the queue); a stopping replica puts its running jobs back in the queue. Files stay in the
 *   data directory, on a shared volume.
 */
import { existsSync } from 'node:fs';
import { EVERYONE, type Caller } from '../service/auth.js';
import { QuantdError } from '../errors/index.js';
import type { Compute } from '../service/index.js';
import { DataDir, checkUploadedFolder, clientError, newJobId, resolveInputPath } from './paths.js';
import type { Cluster } from './cluster.js';
import { ClusterRuns, type ClusterStats } from './cluster-runs.js';
import { referenceEncoding, type Encoding } from '../kernels/encoders.js';
import type { JobLog } from './log.js';
import { patientCompute, patientEncoding } from './patient-compute.js';
import { JobBook, RecordConflict, now, owns, type Entry } from './records.js';
import { unpackedFolder } from './folder-upload.js';
import { isLayoutJob, jobPlan, namedFiles, type JobPlan } from './request.js';
import { runJob, totalBytes, validatePlan, type RunDeps } from './runner.js';
import {
  FINISHED,
  JobStore,
  jobError,
  type Job,
  type JobInput,
  type JobResult,
  type JobState,
  type Submission,
} from './store.js';

/** Where the manager logs (a Fastify / pino logger fits). */
export type { JobLog } from './log.js';

export interface JobManagerOptions {
  readonly dataDir: string;
  readonly compute: Compute;
  /** Where layout jobs encode: the server's worker pool (default: the TypeScript reference inline). */
  readonly encoding?: () => Encoding;
  /** Jobs run at once (QUANTD_JOB_CONCURRENCY). */
  readonly concurrency: number;
  /** Tensors a job processes at once (the pool's threads). */
  readonly threads: number;
  readonly log?: JobLog;
  /** Least interval between progress writes to job.json (default 1000 ms). */
  readonly progressIntervalMs?: number;
  /** Queued + running jobs one key may have (QUANTD_JOB_QUOTA; default 16). */
  readonly quota?: number;
  /** Jobs one key may keep, finished ones included (QUANTD_JOB_LIMIT; default 1000). */
  readonly limit?: number;
  /** Finished jobs are deleted this long after they finished (QUANTD_JOB_RETENTION; 0: kept). */
  readonly retentionMs?: number;
  /** Bytes the results of finished jobs may hold together; the oldest go first (QUANTD_JOB_STORE_LIMIT). */
  readonly storeLimit?: number;
  /** Cluster mode: records and queue in Redis (QUANTD_REDIS_URL), connected. */
  readonly cluster?: Cluster;
}

/** A page of jobs: at most `limit`, after `cursor` (the `next` of the page before). */
export interface JobPage {
  readonly limit?: number;
  readonly cursor?: string;
}

export const DEFAULT_PAGE = 100;
export const MAX_PAGE = 1000;

const noLog = { info: () => {}, warn: () => {}, error: () => {} };

/** A change the console's live stream carries (JobManager.watch): a job as shown, or removed. */
export type JobEvent = { readonly job: Job } | { readonly removed: string };

export class JobManager {
  readonly data: DataDir;
  readonly store: JobStore;
  private readonly book: JobBook;
  private readonly queue: string[] = [];
  /** The server's compute, waiting out a full pool instead of failing (patient-compute.ts). */
  private readonly compute: Compute;
  private active = 0;
  private stopping = false;
  /** The retention sweep's timer (start()). */
  private sweeper: NodeJS.Timeout | undefined;
  /** Set by the server once its logger exists. */
  log: JobLog;
  /** What runJob needs (runner.ts). */
  private readonly runDeps: RunDeps;
  /** Cluster mode's side of the manager (cluster-runs.ts); undefined on a single node. */
  private readonly clustered: ClusterRuns | undefined;

  constructor(private readonly options: JobManagerOptions) {
    this.data = new DataDir(options.dataDir);
    this.compute = patientCompute(options.compute);
    this.store = new JobStore(this.data);
    this.book = new JobBook(options.cluster?.records ?? this.store);
    this.log = options.log ?? noLog;
    this.runDeps = {
      book: this.book,
      store: this.store,
      data: this.data,
      compute: this.compute,
      encoding: () => patientEncoding(options.encoding?.() ?? referenceEncoding),
      threads: options.threads,
      progressIntervalMs: options.progressIntervalMs ?? 1000,
      log: () => this.log,
      ...(options.cluster && { replica: options.cluster.replica }),
    };
    if (options.cluster) {
      this.clustered = new ClusterRuns(options.cluster, {
        book: this.book,
        store: this.store,
        runDeps: this.runDeps,
        concurrency: options.concurrency,
        log: () => this.log,
      });
    }
  }

  /** Cluster mode: the queue, the jobs running here and this replica's counters; null on a single node. */
  async clusterStats(): Promise<ClusterStats | null> {
    return (await this.clustered?.stats()) ?? null;
  }

  /** This replica's name in cluster mode; null on a single node. */
  get replica(): string | null {
    return this.clustered?.replica ?? null;
  }

  // --- start-up and shutdown ---------------------------------------------------------------

  /**
   * Loads the jobs of the data directory and resumes them (see the file comment), then starts
   * the queue. Nothing is created here: the data directory is made by the first submission (and
   * one that cannot be made answers OUTPUT_UNWRITABLE naming it).
   */
  async start(): Promise<void> {
    if (this.clustered) await this.clustered.start();
    else await this.resumeAll();
    await this.sweep();
    // past the store limit, room is made as soon as a result is kept
    if (this.options.storeLimit !== undefined) this.onFinished(() => void this.sweep());
    const retention = this.options.retentionMs ?? 0;
    if (retention > 0 || this.options.storeLimit !== undefined) {
      // often enough that nothing outlives its retention by much more than a quarter of it
      const every = retention > 0 ? Math.min(Math.max(retention / 4, 1000), 600_000) : 60_000;
      this.sweeper = setInterval(() => void this.sweep(), every);
      this.sweeper.unref();
    }
  }

  /** Single node: the records of the data directory loaded, and what was left resumed. */
  private async resumeAll(): Promise<void> {
    let ids: string[];
    try {
      ids = await this.store.ids();
    } catch (err) {
      this.log.warn({ err }, `jobs: cannot read ${this.data.jobs}: ${(err as Error).message}`);
      return;
    }
    const records = [];
    for (const id of ids) {
      try {
        const record = await this.store.read(id);
        if (record === null)
          await this.store.remove(id); // a submission that died before its first write
        else records.push(record);
      } catch (err) {
        this.log.warn({ err, job: id }, `jobs: ignoring ${this.data.jobFile(id)}: ${(err as Error).message}`);
      }
    }
    records.sort((a, b) => a.job.created_at.localeCompare(b.job.created_at));
    for (const record of records) {
      const entry: Entry = { record, dirty: false, deleted: false };
      this.book.entries.set(record.job.id, entry);
      try {
        await this.resume(entry);
      } catch (err) {
        this.log.error({ err, job: record.job.id }, `jobs: cannot resume: ${(err as Error).message}`);
      }
    }
    this.pump();
  }

  /**
   * Deletes finished jobs (succeeded, failed, cancelled) with their files: those finished longer
   * ago than the retention, then, while the results kept exceed the store limit, the oldest.
   * Queued and running jobs are never touched. Logged at info.
   */
  async sweep(at = Date.now()): Promise<string[]> {
    const retention = this.options.retentionMs ?? 0;
    const storeLimit = this.options.storeLimit ?? Infinity;
    const done = [...this.book.entries.values()]
      .filter((e) => !e.deleted && FINISHED.includes(e.record.job.state) && e.record.job.finished_at !== null)
      .sort((a, b) => a.record.job.finished_at!.localeCompare(b.record.job.finished_at!));
    const bytesOf = (e: Entry): number => (e.record.job.result?.files ?? []).reduce((n, f) => n + f.bytes, 0);
    let kept = done.reduce((n, e) => n + bytesOf(e), 0);
    const expired = done.filter((e) => {
      const old = retention > 0 && at - Date.parse(e.record.job.finished_at!) > retention;
      if (!old && kept <= storeLimit) return false;
      kept -= bytesOf(e);
      return true;
    });
    const removed: string[] = [];
    for (const entry of expired) {
      const id = entry.record.job.id;
      try {
        await this.book.remove(id);
        removed.push(id);
      } catch (err) {
        this.log.warn({ err, job: id }, `jobs: retention could not remove ${id}: ${(err as Error).message}`);
      }
    }
    if (removed.length > 0) {
      this.log.info(
        { jobs: removed },
        `jobs: removed ${removed.length} finished jobs (retention ${retention} ms, store limit ${storeLimit} bytes)`,
      );
    }
    return removed;
  }

  private async resume(entry: Entry): Promise<void> {
    const { job } = entry.record;
    await this.store.removeTemps(job.id);
    if (entry.record.receiving !== null) {
      const received = await this.store.uploadBytes(job.id);
      await this.store.removeUpload(job.id);
      const cause = new QuantdError('BODY_INCOMPLETE', {
        received,
        expected: entry.record.receiving.expected ?? `${received}+`,
      });
      this.book.update(entry, {
        state: 'failed',
        finished_at: now(),
        error: {
          code: cause.code,
          message: `the server stopped while receiving this upload: ${cause.message}; submit the job again`,
        },
      });
      entry.record = { ...entry.record, receiving: null };
      await this.book.save(entry);
      this.log.warn({ job: job.id }, 'jobs: an upload interrupted by a restart is marked failed');
      return;
    }
    if (job.state === 'queued' || job.state === 'running') {
      await this.store.clearResult(job.id);
      this.book.update(entry, { state: 'queued', started_at: null, progress: null, result: null });
      await this.book.save(entry);
      this.queue.push(job.id);
      this.log.info(
        { job: job.id, attempts: job.attempts },
        'jobs: resuming a job the previous process left',
      );
      return;
    }
    if (job.state === 'failed' || job.state === 'cancelled') {
      // what a crash may have left of a run that ended so
      await this.store.clearResult(job.id);
      await this.store.removeUpload(job.id);
      return;
    }
    if (job.state === 'succeeded' && job.result) {
      const problem = await this.store.checkResult(job.id, job.result);
      if (problem !== null) await this.failResult(entry, problem);
    }
  }

  /** A succeeded job whose result is damaged: failed, never served. */
  /**
   * A result file of job `id` failed its checksum as it was served (verify.ts): the job is marked
   * failed with `problem` (RESULT_CORRUPT), as a missing result file marks it, so that no later
   * download serves it. Never throws: it is told from a transfer that is already failing.
   */
  async resultCorrupt(id: string, problem: QuantdError): Promise<void> {
    const entry = this.book.entries.get(id);
    if (entry === undefined || entry.record.job.state !== 'succeeded') return;
    await this.failResult(entry, problem).catch((err: unknown) =>
      this.log.error({ err, job: id }, `jobs: corrupt result not recorded: ${(err as Error).message}`),
    );
  }

  private async failResult(entry: Entry, problem: QuantdError): Promise<void> {
    this.log.warn(
      { job: entry.record.job.id, code: problem.code },
      `jobs: result damaged: ${problem.message}`,
    );
    await this.book.finish(entry, { state: 'failed', error: jobError(problem), result: null });
  }

  /** Aborts running jobs (left as they are on disk, to run again on the next start) and waits for them. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.clustered?.stopTaking();
    if (this.sweeper) clearInterval(this.sweeper);
    const runs: Promise<void>[] = [];
    for (const entry of this.book.entries.values()) {
      if (entry.running) {
        entry.stopReason ??= 'shutdown';
        entry.controller?.abort(new QuantdError('CANCELLED', { detail: ': the server is shutting down' }));
        runs.push(entry.running);
      }
    }
    await Promise.all(runs);
    await Promise.all([...this.book.entries.values()].map((e) => e.writing?.catch(() => {})));
    await this.clustered?.close();
  }

  // --- submission --------------------------------------------------------------------------

  /** The plan of a submission (throws its 400) — done before an upload is accepted. */
  checkSubmission(submission: Submission): JobPlan {
    return jobPlan(submission);
  }

  /** A job reading the model at `input`, a path in the data directory. */
  async submitPath(submission: Submission, input: string, caller: Caller = EVERYONE): Promise<Job> {
    const plan = this.checkSubmission(submission);
    this.checkQuota(caller);
    const resolved = await resolveInputPath(this.data, input, namedFiles(plan));
    const outputBytes = await validatePlan(plan, resolved.path, resolved.model);
    await this.checkFreeSpace(outputBytes);
    const bytes = await totalBytes(resolved.model.files);
    const id = newJobId();
    await this.store.create(id);
    const entry = this.book.newEntry(
      id,
      submission,
      { kind: 'path', path: input, bytes },
      null,
      caller.owner,
    );
    try {
      await this.book.save(entry);
    } catch (err) {
      await this.store.remove(id);
      throw err;
    }
    this.book.entries.set(id, entry);
    const job = entry.record.job; // as accepted (the queue may start it at once)
    await this.enqueue(id);
    return job;
  }

  /**
   * Refuses a job whose result cannot fit: STORAGE_FULL (507) when the data directory has less
   * free space than `bytes`, before it is queued (it would fail when it ran). Where the free space
   * cannot be read, the job goes ahead (a full disk still fails it cleanly).
   */
  private async checkFreeSpace(bytes: number): Promise<void> {
    let free: number;
    try {
      free = await this.store.freeBytes();
    } catch (err) {
      this.log.warn({ err }, 'jobs: free space of the data directory unknown');
      return;
    }
    if (bytes > free) {
      throw new QuantdError('STORAGE_FULL', { path: this.data.jobs });
    }
  }

  /**
   * Starts an upload: a job directory and a job.json marked as receiving (hidden from the API; a
   * restart fails it). Returns the id and where to write the model; then `acceptUpload` or
   * `abandonUpload`.
   */
  async beginUpload(
    submission: Submission,
    expected: number | null,
    folder = false,
    caller: Caller = EVERYONE,
  ): Promise<{ id: string; path: string }> {
    this.checkSubmission(submission);
    this.checkQuota(caller);
    const id = newJobId();
    await this.store.create(id);
    const input: JobInput = { kind: 'upload', bytes: expected ?? 0, ...(folder && { folder: true }) };
    const entry = this.book.newEntry(id, submission, input, { expected }, caller.owner);
    try {
      await this.book.save(entry);
    } catch (err) {
      await this.store.remove(id);
      throw err;
    }
    this.book.entries.set(id, entry);
    return { id, path: this.data.uploadInput(id, folder) };
  }

  /** The upload is on disk: validated (header, plan), then queued. A bad model removes the job. */
  async acceptUpload(id: string, bytes: number): Promise<Job> {
    const entry = this.book.entries.get(id);
    if (!entry || entry.record.receiving === null) throw new QuantdError('JOB_NOT_FOUND', { id });
    const folder = entry.record.job.input.kind === 'upload' && entry.record.job.input.folder === true;
    try {
      const plan = jobPlan(entry.record.submission);
      const input = folder ? await unpackedFolder(this.data.uploadFolder(id)) : this.data.uploadFile(id);
      const model = folder ? await checkUploadedFolder(this.data, id, input, namedFiles(plan)) : undefined;
      await validatePlan(plan, input, model);
      entry.record = { ...entry.record, receiving: null };
      // the job exists from now: it is created now, and listed after those created before
      this.book.update(entry, {
        input: { kind: 'upload', bytes, ...(folder && { folder: true as const }) },
        created_at: now(),
      });
      this.book.moveToEnd(id, entry);
      await this.book.save(entry);
    } catch (err) {
      await this.abandonUpload(id);
      throw clientError(err, this.data, id);
    }
    const job = entry.record.job; // as accepted (the queue may start it at once)
    await this.enqueue(id);
    return job;
  }

  /** Queues an accepted job: in this process, or in the cluster's queue (ClusterRuns.enqueue). */
  private async enqueue(id: string): Promise<void> {
    if (this.clustered) return this.clustered.enqueue(id);
    this.queue.push(id);
    this.pump();
  }

  /** The upload failed (ended early, too large, disk full): no job, its files removed. */
  async abandonUpload(id: string): Promise<void> {
    await this.book.remove(id);
  }

  // --- queries -----------------------------------------------------------------------------

  /** Calls `listener` each time a job changes into a final state (succeeded, failed, cancelled). */
  onFinished(listener: (state: JobState) => void): void {
    this.book.finishedListeners.add(listener);
  }

  /**
   * Calls `listener` with each change `caller` may see: a job as the API now shows it, or the id
   * of a job removed. Returns the function that stops it.
   */
  watch(caller: Caller, listener: (event: JobEvent) => void): () => void {
    const onChange = (entry: Entry): void => {
      if (entry.record.receiving !== null || !owns(caller, entry)) return;
      const job = entry.record.job;
      listener(entry.deleted ? { removed: job.id } : { job: entry.shown ?? job });
    };
    this.book.changeListeners.add(onChange);
    return () => this.book.changeListeners.delete(onChange);
  }

  /**
   * Refuses a new job when `caller` is at its quota: QUANTD_JOB_QUOTA queued and running jobs,
   * or QUANTD_JOB_LIMIT jobs kept. With auth off the one tenant has the quota; an admin key none.
   */
  private checkQuota(caller: Caller): void {
    if (caller.admin && caller.owner !== null) return;
    const mine = this.book.entriesOf({ owner: caller.owner, admin: false }, true);
    const quota = this.options.quota ?? 16;
    const limit = this.options.limit ?? 1000;
    const unfinished = mine.filter((e) => !FINISHED.includes(e.record.job.state)).length;
    if (unfinished >= quota) {
      throw new QuantdError('QUOTA_EXCEEDED', {
        detail: `${unfinished} jobs queued or running, the most one key may have (QUANTD_JOB_QUOTA ${quota}); wait for one to finish or cancel one`,
      });
    }
    if (mine.length >= limit) {
      throw new QuantdError('QUOTA_EXCEEDED', {
        detail: `${mine.length} jobs kept, the most one key may keep (QUANTD_JOB_LIMIT ${limit}); delete finished jobs (DELETE /v1/jobs/ID)`,
      });
    }
  }

  /** All of `caller`'s jobs, newest first (uploads still being received are not jobs yet). */
  list(caller: Caller = EVERYONE): Job[] {
    return this.book.list(caller);
  }

  /**
   * One page of `caller`'s jobs, newest first (created_at, then id), and the cursor of the next
   * page when there is one. A cursor is opaque to clients: the position of the page's last job.
   */
  page(caller: Caller, page: JobPage = {}): { jobs: Job[]; next: string | null } {
    const limit = page.limit ?? DEFAULT_PAGE;
    const key = (j: Job): string => `${j.created_at} ${j.id}`;
    const all = this.book.list(caller).sort((a, b) => (key(a) < key(b) ? 1 : key(a) > key(b) ? -1 : 0));
    let from = 0;
    if (page.cursor !== undefined) {
      const after = decodeCursor(page.cursor);
      from = all.findIndex((j) => key(j) < after);
      if (from < 0) from = all.length;
    }
    const jobs = all.slice(from, from + limit);
    const last = jobs[jobs.length - 1];
    const more = from + limit < all.length && last !== undefined;
    return { jobs, next: more ? Buffer.from(key(last), 'utf8').toString('base64url') : null };
  }

  async get(id: string, caller: Caller = EVERYONE): Promise<Job> {
    await this.clustered?.fresh(id);
    const entry = this.book.visible(id, caller);
    return entry.shown ?? entry.record.job;
  }

  /**
   * The result of a succeeded job (JOB_NOT_READY otherwise), its files checked: one missing or of
   * the wrong size fails the job instead of being served.
   */
  async result(id: string, caller: Caller = EVERYONE): Promise<{ job: Job; result: JobResult; dir: string }> {
    await this.clustered?.fresh(id);
    const entry = this.book.visible(id, caller);
    const job = entry.shown ?? entry.record.job;
    if (job.state !== 'succeeded' || job.result === null) {
      throw new QuantdError('JOB_NOT_READY', { id, state: job.state });
    }
    const problem = await this.store.checkResult(id, job.result);
    if (problem !== null) {
      await this.failResult(entry, problem);
      throw new QuantdError('JOB_NOT_READY', { id, state: 'failed' });
    }
    return { job, result: job.result, dir: this.data.resultDir(id) };
  }

  /**
   * The report of a succeeded job (JOB_NOT_READY before): the quality report, or a layout job's
   * report (quantd.layout-report/1). A layout job that finished under a version that kept no
   * such report has none: NOT_FOUND (docs/models.md).
   */
  async reportPath(id: string, caller: Caller = EVERYONE): Promise<string> {
    await this.clustered?.fresh(id);
    const entry = this.book.visible(id, caller);
    const job = entry.shown ?? entry.record.job;
    if (job.state !== 'succeeded') throw new QuantdError('JOB_NOT_READY', { id, state: job.state });
    const path = this.data.reportFile(id);
    if (isLayoutJob(entry.record.submission) && !existsSync(path)) {
      throw new QuantdError('NOT_FOUND', {
        detail: `job ${id} (layout ${String(entry.record.submission.params['layout'])}) finished before layout jobs kept a report; run it again for one`,
      });
    }
    return path;
  }

  // --- cancel and delete -------------------------------------------------------------------

  /**
   * DELETE: a queued or running job is cancelled (its run aborted, its files removed, job.json
   * kept with state cancelled) and returned; a finished one is removed entirely (null).
   */
  async delete(id: string, caller: Caller = EVERYONE): Promise<Job | null> {
    await this.clustered?.fresh(id);
    const entry = this.book.visible(id, caller);
    const { job } = entry.record;
    if (FINISHED.includes(job.state)) {
      await this.book.remove(id);
      return null;
    }
    const queued = this.queue.indexOf(id);
    if (queued >= 0) this.queue.splice(queued, 1);
    this.book.update(entry, { state: 'cancelled', finished_at: now() });
    const running = entry.running;
    if (running) {
      entry.stopReason = 'cancel';
      entry.controller?.abort(new QuantdError('CANCELLED', { detail: ': the job was cancelled' }));
    }
    try {
      await this.book.save(entry);
    } catch (err) {
      if (!(err instanceof RecordConflict)) throw err;
      // cluster mode: it finished on its replica first (answered as it finished), or was removed
      if (entry.deleted) throw new QuantdError('JOB_NOT_FOUND', { id });
      return entry.record.job;
    }
    await this.clustered?.dequeue(id);
    await running;
    await this.store.clearResult(id);
    await this.store.removeUpload(id);
    return entry.record.job;
  }

  // --- running -----------------------------------------------------------------------------

  private pump(): void {
    while (!this.stopping && this.active < this.options.concurrency && this.queue.length > 0) {
      const id = this.queue.shift()!;
      const entry = this.book.entries.get(id);
      if (!entry || entry.record.job.state !== 'queued') continue;
      this.active++;
      entry.running = runJob(entry, this.runDeps)
        .catch((err: unknown) => this.log.error({ err, job: id }, `jobs: ${(err as Error).message}`))
        .finally(() => {
          this.active--;
          entry.running = undefined;
          entry.controller = undefined;
          this.pump();
        });
    }
  }
}

/** The position a page cursor holds; a cursor that is not one of ours is OPTION_INVALID. */
function decodeCursor(cursor: string): string {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!/^\d{4}-\d\d-\d\dT[\d:.]+Z [A-Za-z0-9_-]+$/.test(text)) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'cursor',
      detail: 'is not a cursor this server gave (the `next` of a page)',
      value: cursor.slice(0, 100),
    });
  }
  return text;
}
