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
 */
import { sep } from 'node:path';
import { QuantdError } from '../errors/index.js';
import type { Compute, Progress } from '../service/index.js';
import { DataDir, checkJobId, newJobId, resolveInputPath } from './paths.js';
import { patientCompute } from './patient-compute.js';
import { JobBook, now, type Entry } from './records.js';
import { isLayoutJob, jobPlan, type JobPlan } from './request.js';
import { outputPath, progressOf, runPlan, totalBytes, validatePlan } from './runner.js';
import {
  FINISHED,
  JobStore,
  jobError,
  type Job,
  type JobInput,
  type JobResult,
  type Submission,
} from './store.js';

/** Where the manager logs (a Fastify / pino logger fits). */
export interface JobLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface JobManagerOptions {
  readonly dataDir: string;
  readonly compute: Compute;
  /** Jobs run at once (QUANTD_JOB_CONCURRENCY). */
  readonly concurrency: number;
  /** Tensors a job processes at once (the pool's threads). */
  readonly threads: number;
  readonly log?: JobLog;
  /** Least interval between progress writes to job.json (default 1000 ms). */
  readonly progressIntervalMs?: number;
}

const noLog = { info: () => {}, warn: () => {}, error: () => {} };

export class JobManager {
  readonly data: DataDir;
  readonly store: JobStore;
  private readonly entries = new Map<string, Entry>();
  private readonly queue: string[] = [];
  /** The server's compute, waiting out a full pool instead of failing (patient-compute.ts). */
  private readonly compute: Compute;
  private active = 0;
  private stopping = false;
  /** Set by the server once its logger exists. */
  log: JobLog;

  constructor(private readonly options: JobManagerOptions) {
    this.data = new DataDir(options.dataDir);
    this.compute = patientCompute(options.compute);
    this.store = new JobStore(this.data);
    this.log = options.log ?? noLog;
  }

  // --- start-up and shutdown ---------------------------------------------------------------

  /**
   * Loads the jobs of the data directory and resumes them (see the file comment), then starts
   * the queue. Nothing is created here: the data directory is made by the first submission (and
   * one that cannot be made answers OUTPUT_UNWRITABLE naming it).
   */
  async start(): Promise<void> {
    let ids: string[];
    try {
      ids = await this.store.ids();
    } catch (err) {
      this.log.warn({ err }, `jobs: cannot read ${this.data.jobs}: ${(err as Error).message}`);
      return;
    }
    const records: JobRecord[] = [];
    for (const id of ids) {
      let record: JobRecord | null;
      try {
        record = await this.store.read(id);
      } catch (err) {
        this.log.warn({ err, job: id }, `jobs: ignoring ${this.data.jobFile(id)}: ${(err as Error).message}`);
        continue;
      }
      if (record === null) {
        // created, never described: a submission that died before its first write
        await this.store.remove(id);
        continue;
      }
      records.push(record);
    }
    records.sort((a, b) => a.job.created_at.localeCompare(b.job.created_at));
    for (const record of records) {
      const entry: Entry = { record, dirty: false, deleted: false };
      this.entries.set(record.job.id, entry);
      try {
        await this.resume(entry);
      } catch (err) {
        this.log.error({ err, job: record.job.id }, `jobs: cannot resume: ${(err as Error).message}`);
      }
    }
    this.pump();
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
      this.update(entry, {
        state: 'failed',
        finished_at: now(),
        error: {
          code: cause.code,
          message: `the server stopped while receiving this upload: ${cause.message}; submit the job again`,
        },
      });
      entry.record = { ...entry.record, receiving: null };
      await this.save(entry);
      this.log.warn({ job: job.id }, 'jobs: an upload interrupted by a restart is marked failed');
      return;
    }
    if (job.state === 'queued' || job.state === 'running') {
      await this.store.clearResult(job.id);
      this.update(entry, { state: 'queued', started_at: null, progress: null, result: null });
      await this.save(entry);
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
  private async failResult(entry: Entry, problem: QuantdError): Promise<void> {
    this.log.warn(
      { job: entry.record.job.id, code: problem.code },
      `jobs: result damaged: ${problem.message}`,
    );
    await this.finish(entry, { state: 'failed', error: jobError(problem), result: null });
  }

  /** Aborts running jobs (left as they are on disk, to run again on the next start) and waits for them. */
  async stop(): Promise<void> {
    this.stopping = true;
    const runs: Promise<void>[] = [];
    for (const entry of this.entries.values()) {
      if (entry.running) {
        entry.stopReason ??= 'shutdown';
        entry.controller?.abort(new QuantdError('CANCELLED', { detail: ': the server is shutting down' }));
        runs.push(entry.running);
      }
    }
    await Promise.all(runs);
    await Promise.all([...this.entries.values()].map((e) => e.writing?.catch(() => {})));
  }

  // --- submission --------------------------------------------------------------------------

  /**
   * Validates a submission for the model at `input` — options, recipe, and the plan of every file
   * (a recipe rule that does not fit a tensor) — without reading any tensor data.
   */
  private async validate(submission: Submission, input: string): Promise<OperationRequest> {
    const request = jobRequest(submission);
    await planModel(input, request);
    return request;
  }

  /** Builds the request of a submission (throws its 400) — done before an upload is accepted. */
  checkSubmission(submission: Submission): OperationRequest {
    return jobRequest(submission);
  }

  /** A job reading the model at `input`, a path in the data directory. */
  async submitPath(submission: Submission, input: string): Promise<Job> {
    this.checkSubmission(submission);
    const resolved = await resolveInputPath(this.data, input);
    await this.validate(submission, resolved.path);
    const bytes = await totalBytes(resolved.model.files);
    const id = newJobId();
    await this.store.create(id);
    const entry = this.newEntry(id, submission, { kind: 'path', path: input, bytes }, null);
    try {
      await this.save(entry);
    } catch (err) {
      await this.store.remove(id);
      throw err;
    }
    this.entries.set(id, entry);
    const job = entry.record.job; // as accepted (the queue may start it at once)
    this.queue.push(id);
    this.pump();
    return job;
  }

  /**
   * Starts an upload: a job directory and a job.json marked as receiving (hidden from the API; a
   * restart fails it). Returns the id and where to write the model; then `acceptUpload` or
   * `abandonUpload`.
   */
  async beginUpload(submission: Submission, expected: number | null): Promise<{ id: string; path: string }> {
    this.checkSubmission(submission);
    const id = newJobId();
    await this.store.create(id);
    const entry = this.newEntry(id, submission, { kind: 'upload', bytes: expected ?? 0 }, { expected });
    try {
      await this.save(entry);
    } catch (err) {
      await this.store.remove(id);
      throw err;
    }
    this.entries.set(id, entry);
    return { id, path: this.data.uploadFile(id) };
  }

  /** The upload is on disk: validated (header, plan), then queued. A bad model removes the job. */
  async acceptUpload(id: string, bytes: number): Promise<Job> {
    const entry = this.entries.get(id);
    if (!entry || entry.record.receiving === null) throw new QuantdError('JOB_NOT_FOUND', { id });
    try {
      await this.validate(entry.record.submission, this.data.uploadFile(id));
      entry.record = { ...entry.record, receiving: null };
      // the job exists from now: it is created now, and listed after those created before
      this.update(entry, { input: { kind: 'upload', bytes }, created_at: now() });
      this.entries.delete(id);
      this.entries.set(id, entry);
      await this.save(entry);
    } catch (err) {
      await this.abandonUpload(id);
      throw this.shown(err, id);
    }
    const job = entry.record.job; // as accepted (the queue may start it at once)
    this.queue.push(id);
    this.pump();
    return job;
  }

  /** The upload failed (ended early, too large, disk full): no job, its files removed. */
  async abandonUpload(id: string): Promise<void> {
    const entry = this.entries.get(id);
    if (entry) {
      entry.deleted = true;
      await entry.writing?.catch(() => {}); // a write in flight must not land after the removal
      this.entries.delete(id);
    }
    await this.store.remove(id);
  }

  private newEntry(
    id: string,
    submission: Submission,
    input: JobInput,
    receiving: JobRecord['receiving'],
  ): Entry {
    const job: Job = {
      id,
      state: 'queued',
      op: submission.op,
      input,
      created_at: now(),
      started_at: null,
      finished_at: null,
      progress: null,
      attempts: 0,
      error: null,
      result: null,
    };
    return { record: { format: 'quantd.job/1', job, submission, receiving }, dirty: false, deleted: false };
  }

  // --- queries -----------------------------------------------------------------------------

  /** Jobs, newest first (uploads still being received are not jobs yet). */
  list(): Job[] {
    // entries are in the order the jobs were created (loaded by created_at at start-up)
    return [...this.entries.values()]
      .filter((e) => e.record.receiving === null && !e.deleted)
      .map((e) => e.shown ?? e.record.job)
      .reverse();
  }

  get(id: string): Job {
    const entry = this.entry(id);
    return entry.shown ?? entry.record.job;
  }

  private entry(id: string): Entry {
    const entry = this.entries.get(checkJobId(id));
    if (!entry || entry.record.receiving !== null || entry.deleted)
      throw new QuantdError('JOB_NOT_FOUND', { id });
    return entry;
  }

  /**
   * The result of a succeeded job (JOB_NOT_READY otherwise), its files checked: one missing or of
   * the wrong size fails the job instead of being served.
   */
  async result(id: string): Promise<{ job: Job; result: JobResult; dir: string }> {
    const entry = this.entry(id);
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

  reportPath(id: string): string {
    const job = this.get(id);
    if (job.state !== 'succeeded') throw new QuantdError('JOB_NOT_READY', { id, state: job.state });
    return this.data.reportFile(id);
  }

  // --- cancel and delete -------------------------------------------------------------------

  /**
   * DELETE: a queued or running job is cancelled (its run aborted, its files removed, job.json
   * kept with state cancelled) and returned; a finished one is removed entirely (null).
   */
  async delete(id: string): Promise<Job | null> {
    const entry = this.entry(id);
    const { job } = entry.record;
    if (FINISHED.includes(job.state)) {
      entry.deleted = true;
      await entry.writing?.catch(() => {}); // a write in flight must not land after the removal
      this.entries.delete(id);
      await this.store.remove(id);
      return null;
    }
    const queued = this.queue.indexOf(id);
    if (queued >= 0) this.queue.splice(queued, 1);
    this.update(entry, { state: 'cancelled', finished_at: now() });
    const running = entry.running;
    if (running) {
      entry.stopReason = 'cancel';
      entry.controller?.abort(new QuantdError('CANCELLED', { detail: ': the job was cancelled' }));
    }
    await this.save(entry);
    await running;
    await this.store.clearResult(id);
    await this.store.removeUpload(id);
    return entry.record.job;
  }

  // --- running -----------------------------------------------------------------------------

  private pump(): void {
    while (!this.stopping && this.active < this.options.concurrency && this.queue.length > 0) {
      const id = this.queue.shift()!;
      const entry = this.entries.get(id);
      if (!entry || entry.record.job.state !== 'queued') continue;
      this.active++;
      entry.running = this.run(entry)
        .catch((err: unknown) => this.log.error({ err, job: id }, `jobs: ${(err as Error).message}`))
        .finally(() => {
          this.active--;
          entry.running = undefined;
          entry.controller = undefined;
          this.pump();
        });
    }
  }

  private async run(entry: Entry): Promise<void> {
    const id = entry.record.job.id;
    const controller = new AbortController();
    entry.controller = controller;
    entry.stopReason = undefined;
    const started = Date.now();
    this.update(entry, {
      state: 'running',
      started_at: new Date(started).toISOString(),
      finished_at: null,
      attempts: entry.record.job.attempts + 1,
      progress: {
        tensors_done: 0,
        tensors_total: null,
        bytes_done: 0,
        bytes_total: null,
        bytes_per_second: null,
        eta_seconds: null,
      },
      error: null,
      result: null,
    });
    const interval = this.options.progressIntervalMs ?? 1000;
    let lastWrite = 0;
    const onProgress = (p: Progress): void => {
      if (entry.record.job.state !== 'running') return;
      this.update(entry, { progress: progressOf(p, started) });
      const t = Date.now();
      if (t - lastWrite >= interval) {
        lastWrite = t;
        this.save(entry).catch((err: unknown) =>
          this.log.warn({ err, job: id }, `jobs: progress not saved: ${(err as Error).message}`),
        );
      }
    };
    try {
      await this.save(entry);
      await this.store.clearResult(id);
      const request = jobRequest(entry.record.submission);
      const { input, output } = await this.paths(entry);
      const run = await runModel(input, output, request, {
        compute: this.compute,
        concurrency: this.options.threads,
        checksum: true,
        signal: controller.signal,
        onProgress,
      });
      await this.store.writeReport(id, run.report);
      // cancelled (or stopping) just as the run ended: the cancellation wins (checked right
      // before the state changes, with nothing awaited in between)
      if (controller.signal.aborted || entry.record.job.state !== 'running') {
        throw new QuantdError('CANCELLED', { detail: '' });
      }
      const resultDir = this.data.resultDir(id);
      const result: JobResult = {
        sharded: run.sharded,
        files: run.files.map((f) => ({
          name: f.path.slice(resultDir.length + 1),
          bytes: f.bytes,
          data_sha256: f.dataSha256,
        })),
      };
      const last = entry.record.job.progress;
      await this.finish(entry, {
        state: 'succeeded',
        finished_at: now(),
        result,
        progress: last && { ...last, eta_seconds: 0 },
      });
      if (entry.record.job.input.kind === 'upload') await this.store.removeUpload(id);
      this.log.info({ job: id, seconds: (Date.now() - started) / 1000 }, 'jobs: succeeded');
    } catch (err) {
      if (entry.stopReason === 'shutdown') return; // runs again on the next start
      if (entry.stopReason === 'cancel' || entry.record.job.state === 'cancelled') {
        await this.store.clearResult(id);
        return;
      }
      const error = jobError(this.shown(err, id));
      this.log.warn({ job: id, code: error.code }, `jobs: failed: ${error.message}`);
      await this.store.clearResult(id).catch(() => {});
      await this.finish(entry, { state: 'failed', finished_at: now(), error, result: null }).catch(
        (e: unknown) => this.log.error({ err: e, job: id }, `jobs: state not saved: ${(e as Error).message}`),
      );
      if (entry.record.job.input.kind === 'upload') await this.store.removeUpload(id).catch(() => {});
    }
  }

  /** What a job reads and where its result goes: a file named like the input, or a directory. */
  private async paths(entry: Entry): Promise<{ input: string; output: string }> {
    const { job } = entry.record;
    const resultDir = this.data.resultDir(job.id);
    if (job.input.kind === 'upload') {
      await this.store.makeDir(resultDir);
      return { input: this.data.uploadFile(job.id), output: join(resultDir, UPLOAD_RESULT_NAME) };
    }
    // resolved again: what the path names may have changed since the submission
    const resolved = await resolveInputPath(this.data, job.input.path);
    if (resolved.model.index !== null) return { input: resolved.path, output: resultDir };
    await this.store.makeDir(resultDir);
    return { input: resolved.path, output: join(resultDir, basename(resolved.model.files[0]!)) };
  }

  /**
   * An error as a client sees it: the paths in its parameters relative to the data directory,
   * and a job's upload named "upload" (where it is stored is the server's business).
   */
  private shown(err: unknown, id: string): unknown {
    if (!(err instanceof QuantdError)) return err;
    const upload = this.data.uploadFile(id);
    const root = this.data.root + sep;
    const params = Object.fromEntries(
      Object.entries(err.params).map(([k, v]) => [
        k,
        typeof v === 'string' ? v.split(upload).join('upload').split(root).join('') : v,
      ]),
    );
    return new QuantdError(err.code, params);
  }

  // --- job.json ----------------------------------------------------------------------------

  private update(entry: Entry, change: Partial<Job>): void {
    entry.record = { ...entry.record, job: { ...entry.record.job, ...change } };
  }

  /**
   * A change to a final state: shown once job.json holds it (until then the API shows the job as
   * it was), so that a client never sees a state a crash could take back.
   */
  private async finish(entry: Entry, change: Partial<Job>): Promise<void> {
    entry.shown = entry.record.job;
    this.update(entry, change);
    try {
      await this.save(entry);
    } finally {
      entry.shown = undefined;
    }
  }

  /**
   * Writes the entry's latest state; resolves once a write that includes it has completed, and
   * rejects with the write's error (STORAGE_FULL, OUTPUT_UNWRITABLE).
   */
  private save(entry: Entry): Promise<void> {
    entry.dirty = true;
    entry.writing ??= (async () => {
      try {
        while (entry.dirty && !entry.deleted) {
          entry.dirty = false;
          await this.store.write(entry.record);
        }
      } finally {
        entry.writing = undefined;
      }
    })();
    return entry.writing;
  }
}

function progressOf(p: Progress, started: number): JobProgress {
  const seconds = (Date.now() - started) / 1000;
  const rate = seconds > 0 ? p.bytesDone / seconds : null;
  const left = Math.max(0, p.bytesTotal - p.bytesDone);
  return {
    tensors_done: p.tensorsDone,
    tensors_total: p.tensorsTotal,
    bytes_done: p.bytesDone,
    bytes_total: p.bytesTotal,
    bytes_per_second: rate === null ? null : Math.round(rate),
    eta_seconds: rate === null || rate === 0 ? null : Math.round((left / rate) * 10) / 10,
  };
}

async function totalBytes(files: readonly string[]): Promise<number> {
  let n = 0;
  for (const f of files) n += (await stat(f)).size;
  return n;
}

/** Plans every file of the model (headers only): what a run would refuse, refused now. */
async function planModel(input: string, request: OperationRequest): Promise<void> {
  const model = await resolveModelInput(input);
  for (const file of model.files) {
    const reader = await SafetensorsFileReader.open(file);
    try {
      planOperation(reader.header, request, basename(file));
    } finally {
      await reader.close();
    }
  }
}
