/**
 * The job manager's book of jobs: each job's record in memory and its writes to where records
 * are kept (job.json files; Redis in cluster mode, cluster-records.ts).
 *
 * - Every state change is written. Writes of one job are serialised and always write the latest
 *   state, so a slow progress write never lands after the final one.
 * - A change to a final state is shown (by get and list) only once it is written: until then the
 *   API shows the job as it was, so a client never sees a state a crash could take back.
 * - A job being removed is never written again.
 * - In cluster mode a write can lose to another replica's (the job was cancelled there, or taken
 *   over after this replica stalled): the entry then takes the record that won, and a run of it
 *   here is stopped (RecordConflict).
 */
import { EVERYONE, type Caller } from '../service/auth.js';
import { QuantdError } from '../errors/index.js';
import { checkJobId } from './paths.js';
import {
  FINISHED,
  type Job,
  type JobInput,
  type JobRecord,
  type JobState,
  type Submission,
} from './store.js';

/**
 * Why a run stopped early: the job was cancelled, the server is stopping, or (cluster mode)
 * another replica took the job over.
 */
export type StopReason = 'cancel' | 'shutdown' | 'superseded';

/** Where records are kept: job.json files (JobStore), or Redis in cluster mode. */
export interface RecordWriter {
  /** Writes a record; rejects with RecordConflict where another writer's state must win. */
  write(record: JobRecord): Promise<void>;
  /** Removes a job's record and its directory. */
  remove(id: string): Promise<void>;
}

/** A write refused because the stored record won (cluster mode); `current` is it, null if removed. */
export class RecordConflict extends Error {
  constructor(
    readonly id: string,
    readonly current: JobRecord | null,
  ) {
    super(`job ${id} was changed by another replica (${current?.job.state ?? 'removed'})`);
  }
}

export interface Entry {
  record: JobRecord;
  /** What the API shows while a final state is being written (see finish). */
  shown?: Job | undefined;
  controller?: AbortController | undefined;
  stopReason?: StopReason | undefined;
  /** Settles when the run (if any) has ended and cleaned up. */
  running?: Promise<void> | undefined;
  /** Serialised job.json writes. */
  writing?: Promise<void> | undefined;
  dirty: boolean;
  deleted: boolean;
}

export const now = (): string => new Date().toISOString();

/** Whether `caller` may see the job: an admin sees all; a key, the jobs it submitted. */
export const owns = (caller: Caller, entry: Entry): boolean =>
  caller.admin || entry.record.owner === caller.owner;

export class JobBook {
  /** In the order the jobs were created (loaded by created_at at start-up). */
  readonly entries = new Map<string, Entry>();
  /** Told each change of a job into a final state: succeeded, failed, cancelled (/metrics). */
  readonly finishedListeners = new Set<(state: JobState) => void>();
  /**
   * Told each change of what the API shows of a job (the console's live events): after update,
   * once a final state is written (finish), and when the job is removed (entry.deleted).
   */
  readonly changeListeners = new Set<(entry: Entry) => void>();

  private changed(entry: Entry): void {
    for (const listener of this.changeListeners) listener(entry);
  }

  constructor(private readonly records: RecordWriter) {}

  /** A new queued job (not yet in the book, not yet written). */
  newEntry(
    id: string,
    submission: Submission,
    input: JobInput,
    receiving: JobRecord['receiving'],
    owner: string | null = null,
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
    return {
      record: { format: 'quantd.job/1', job, submission, receiving, owner },
      dirty: false,
      deleted: false,
    };
  }

  /**
   * The entry of a job `caller` can see: JOB_NOT_FOUND otherwise — unknown, still uploading,
   * removed, or another key's (answered exactly as a job that does not exist).
   */
  visible(id: string, caller: Caller = EVERYONE): Entry {
    const entry = this.entries.get(checkJobId(id));
    if (!entry || entry.record.receiving !== null || entry.deleted || !owns(caller, entry))
      throw new QuantdError('JOB_NOT_FOUND', { id });
    return entry;
  }

  /** The jobs `caller` sees, newest first (uploads still being received are not jobs yet). */
  list(caller: Caller = EVERYONE): Job[] {
    return this.entriesOf(caller)
      .map((e) => e.shown ?? e.record.job)
      .reverse();
  }

  /** The entries of `caller`'s jobs (uploads being received included when `receiving`). */
  entriesOf(caller: Caller, receiving = false): Entry[] {
    return [...this.entries.values()].filter(
      (e) => (receiving || e.record.receiving === null) && !e.deleted && owns(caller, e),
    );
  }

  /** Moves an entry to the end of the creation order (an upload becomes a job when accepted). */
  moveToEnd(id: string, entry: Entry): void {
    this.entries.delete(id);
    this.entries.set(id, entry);
  }

  /**
   * Removes a job: hidden and never written again at once, its directory deleted, then gone from
   * the book. When the directory cannot be deleted the job stays, visible again, for a later
   * sweep or DELETE (it used to vanish from the book and leave its files behind).
   */
  async remove(id: string): Promise<void> {
    const entry = this.entries.get(id);
    if (entry) {
      entry.deleted = true;
      await entry.writing?.catch(() => {}); // a write in flight must not land after the removal
    }
    try {
      await this.records.remove(id);
    } catch (err) {
      if (entry) entry.deleted = false; // still there: a later sweep or DELETE tries again
      throw err;
    }
    if (entry) {
      this.entries.delete(id);
      this.changed(entry);
    }
  }

  /**
   * A record as Redis holds it (cluster mode: another replica's change, or read afresh): a new
   * job is added; a known one adopts it when it is newer than what the entry holds (isNewer).
   */
  take(id: string, record: JobRecord | null): void {
    const entry = this.entries.get(id);
    if (entry === undefined) {
      if (record === null) return;
      const added: Entry = { record, dirty: false, deleted: false };
      this.entries.set(id, added);
      this.changed(added);
      return;
    }
    if (record === null || isNewer(record.job, entry)) this.adopt(entry, record);
  }

  /**
   * Takes a record written elsewhere (another replica's change, or the one a write lost to):
   * the entry shows it, and a run of it here stops, as cancelled or as taken over.
   */
  adopt(entry: Entry, current: JobRecord | null): void {
    const mine = entry.record.job;
    entry.dirty = false;
    if (current === null) entry.deleted = true;
    else entry.record = current;
    const job = entry.record.job;
    const lost = current === null || FINISHED.includes(job.state) || job.attempts !== mine.attempts;
    if (lost && entry.controller && !entry.controller.signal.aborted) {
      entry.stopReason = current === null || job.state === 'cancelled' ? 'cancel' : 'superseded';
      entry.controller.abort(
        new QuantdError('CANCELLED', { detail: ': the job was changed by another replica' }),
      );
    }
    if (current === null) this.entries.delete(mine.id);
    this.changed(entry);
  }

  update(entry: Entry, change: Partial<Job>): void {
    const from = entry.record.job.state;
    entry.record = { ...entry.record, job: { ...entry.record.job, ...change } };
    const to = entry.record.job.state;
    if (to !== from && FINISHED.includes(to)) for (const listener of this.finishedListeners) listener(to);
    if (entry.shown === undefined) this.changed(entry);
  }

  /** A change to a final state: shown once job.json holds it (see the file comment). */
  async finish(entry: Entry, change: Partial<Job>): Promise<void> {
    entry.shown = entry.record.job;
    this.update(entry, change);
    try {
      await this.save(entry);
    } finally {
      entry.shown = undefined;
      this.changed(entry);
    }
  }

  /**
   * Writes the entry's latest state; resolves once a write that includes it has completed, and
   * rejects with the write's error (STORAGE_FULL, OUTPUT_UNWRITABLE).
   */
  save(entry: Entry): Promise<void> {
    entry.dirty = true;
    entry.writing ??= (async () => {
      try {
        while (entry.dirty && !entry.deleted) {
          entry.dirty = false;
          await this.records.write(entry.record);
        }
      } catch (err) {
        if (err instanceof RecordConflict) this.adopt(entry, err.current);
        throw err;
      } finally {
        entry.writing = undefined;
      }
    })();
    return entry.writing;
  }
}

/**
 * Whether a record read from Redis is newer than an entry's: reads and the change stream arrive
 * in no set order with each other, and this replica's own run is ahead of any record of it. A
 * finished job never changes again; a finished record ends an unfinished entry (cancelled or
 * finished elsewhere); a later attempt replaces an earlier one (taken over); within one attempt,
 * a record is newer only where no run of it goes on here.
 */
function isNewer(stored: Job, entry: Entry): boolean {
  const mine = entry.record.job;
  if (FINISHED.includes(mine.state)) return false;
  if (FINISHED.includes(stored.state)) return true;
  if (stored.attempts !== mine.attempts) return stored.attempts > mine.attempts;
  return entry.running === undefined;
}
