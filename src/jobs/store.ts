/**
 * Persistence of jobs in the data directory (layout: paths.ts). A job is one directory; its
 * job.json is always written whole, atomically (temporary file, fsync, rename), so a crash leaves
 * the previous version or the new one, never a mix. Uploads are streamed to the job's input file
 * as they arrive — never held in memory — and fsynced before the job is accepted.
 *
 * Storage errors map onto the catalogue the same way everywhere: a full disk (ENOSPC, EDQUOT) is
 * STORAGE_FULL, anything else that prevents a write OUTPUT_UNWRITABLE, both naming the path.
 */
import { mkdir, open, readFile, readdir, rename, rm, stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { QuantdError } from '../errors/index.js';
import { writeError, writeFileAtomic } from '../format/file-io.js';
import type { Operation } from '../service/index.js';
import { DataDir, isJobId, isRunDirName } from './paths.js';

export type JobState = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export const FINISHED: readonly JobState[] = ['succeeded', 'failed', 'cancelled'];

export interface JobProgress {
  readonly tensors_done: number;
  /** null until the model has been planned. */
  readonly tensors_total: number | null;
  readonly bytes_done: number;
  readonly bytes_total: number | null;
  readonly bytes_per_second: number | null;
  readonly eta_seconds: number | null;
}

export type JobInput =
  | { readonly kind: 'upload'; readonly bytes: number; readonly folder?: true }
  | { readonly kind: 'path'; readonly path: string; readonly bytes: number };

export interface ResultFile {
  readonly name: string;
  readonly bytes: number;
  /** SHA-256 of the file's data section (also in its metadata); null for a shard index. */
  readonly data_sha256: string | null;
  /** SHA-256 of the whole file, checked before it is served (absent in records of older versions). */
  readonly sha256?: string;
}

export interface JobResult {
  readonly sharded: boolean;
  readonly files: readonly ResultFile[];
}

export interface JobError {
  readonly code: string;
  readonly message: string;
}

/** A job as the API shows it (docs/models.md, "Jobs over HTTP"). */
export interface Job {
  readonly id: string;
  readonly state: JobState;
  readonly op: Operation;
  readonly input: JobInput;
  readonly created_at: string;
  readonly started_at: string | null;
  readonly finished_at: string | null;
  readonly progress: JobProgress | null;
  readonly attempts: number;
  readonly error: JobError | null;
  readonly result: JobResult | null;
  /** Cluster mode: which replica ran each attempt (absent on a single node). */
  readonly runs?: readonly JobRun[];
}

/** One attempt of a job in cluster mode: the replica (QUANTD_REPLICA_ID) that ran it. */
export interface JobRun {
  readonly attempt: number;
  readonly replica: string;
  readonly started_at: string;
}

/** Option values as submitted: query parameters (strings, repeated ones as lists) or JSON. */
export type JobParams = Readonly<Record<string, string | number | boolean | readonly string[]>>;

/** What a job was asked to do: enough to run it again after a restart. */
export interface Submission {
  readonly op: Operation;
  readonly params: JobParams;
  /** The recipe object, if one was given. */
  readonly recipe?: unknown;
}

/** job.json: the job, what it runs, and whether its upload is still being received. */
export interface JobRecord {
  readonly format: typeof RECORD_FORMAT;
  readonly job: Job;
  readonly submission: Submission;
  /** Set while the upload is being received (the job does not exist for the API yet). */
  readonly receiving: { readonly expected: number | null } | null;
  /**
   * The id of the key that submitted it (src/service/auth.ts); null with auth off. Absent in
   * records of earlier versions: such jobs are an admin's (or everyone's, with auth off).
   */
  readonly owner?: string | null;
}

export const RECORD_FORMAT = 'quantd.job/1';

/** The error of a job: a catalogue error as {code, message}; anything else is INTERNAL. */
export function jobError(err: unknown): JobError {
  const error =
    err instanceof QuantdError
      ? err
      : new QuantdError('INTERNAL', { detail: err instanceof Error ? err.message : String(err) });
  const { code, message } = error.toJSON();
  return { code, message };
}

/**
 * Where a job's files live, as the manager and the runner use them: its directory, its upload,
 * the directories of its runs, its published result and its report. A single server and every
 * replica of a cluster use the data directory (JobStore, below), on a shared volume in a
 * cluster. Another store (S3-compatible) implements the same operations with the same promises:
 * a run is published whole or not at all, and a published result is never replaced by another.
 */
export interface Artifacts {
  /** Creates the directory of a new job. */
  create(id: string): Promise<void>;
  /** Removes everything of a job. */
  remove(id: string): Promise<void>;
  /** Creates a directory of a job (a run's). */
  makeDir(path: string): Promise<void>;
  /**
   * Publishes a finished run's directory as the job's result, atomically; where a result is
   * already published (an earlier run of the same bytes), keeps it and drops the run's.
   */
  publish(id: string, runDir: string): Promise<void>;
  /** Removes one run's directory (a run that stopped and leaves the job to another). */
  discardRun(runDir: string): Promise<void>;
  /** Removes a job's result, report and runs' directories (a run that did not finish). */
  clearResult(id: string): Promise<void>;
  /** Removes the temporary files a crash left in a job's directory. */
  removeTemps(id: string): Promise<void>;
  /** Bytes of a job's upload received so far (0: none). */
  uploadBytes(id: string): Promise<number>;
  removeUpload(id: string): Promise<void>;
  writeReport(id: string, report: unknown): Promise<void>;
  /** Bytes free for results. */
  freeBytes(): Promise<number>;
  /** Why a succeeded job's result cannot be served (a file missing or changed), or null. */
  checkResult(id: string, result: JobResult): Promise<QuantdError | null>;
}

/** The data directory's records (job.json) and files (Artifacts): a single server's store. */
export class JobStore implements Artifacts {
  constructor(readonly data: DataDir) {}

  /** Creates the jobs directory (and the data directory) if missing. */
  async ensureRoot(): Promise<void> {
    try {
      await mkdir(this.data.jobs, { recursive: true });
    } catch (err) {
      throw writeError(this.data.jobs, err);
    }
  }

  /** Creates the directory of a new job. */
  async create(id: string): Promise<void> {
    await this.ensureRoot();
    const dir = this.data.jobDir(id);
    try {
      await mkdir(dir);
    } catch (err) {
      throw writeError(dir, err);
    }
  }

  async write(record: JobRecord): Promise<void> {
    await writeFileAtomic(this.data.jobFile(record.job.id), `${JSON.stringify(record, null, 2)}\n`);
  }

  /** The record of job `id`; null when its directory or job.json is missing. Throws when unreadable. */
  async read(id: string): Promise<JobRecord | null> {
    let text: string;
    try {
      text = await readFile(this.data.jobFile(id), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    const record = JSON.parse(text) as JobRecord;
    if (record?.format !== RECORD_FORMAT || record.job?.id !== id) {
      throw new Error(`${this.data.jobFile(id)} is not a ${RECORD_FORMAT} record of job ${id}`);
    }
    return record;
  }

  /** The ids of the job directories (names that are not job ids are left alone). */
  async ids(): Promise<string[]> {
    try {
      return (await readdir(this.data.jobs)).filter(isJobId);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }

  /** Removes a job's directory, everything in it. */
  async remove(id: string): Promise<void> {
    await rm(this.data.jobDir(id), { recursive: true, force: true });
  }

  /** Removes a job's result directory, its report and the directories of runs that did not finish. */
  async clearResult(id: string): Promise<void> {
    await rm(this.data.resultDir(id), { recursive: true, force: true });
    await rm(this.data.reportFile(id), { force: true });
    let names: string[];
    try {
      names = await readdir(this.data.jobDir(id));
    } catch {
      return;
    }
    for (const name of names.filter(isRunDirName)) {
      await rm(join(this.data.jobDir(id), name), { recursive: true, force: true });
    }
  }

  /**
   * Publishes a run's files as the job's result: one rename of its directory, so no reader sees a
   * part of it. Where a result is already in place — an earlier run of the same job that finished
   * before its replica stopped — that result stays (a run's bytes are the same every time) and
   * this run's directory is removed.
   */
  async publish(id: string, runDir: string): Promise<void> {
    try {
      await rename(runDir, this.data.resultDir(id));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw writeError(this.data.resultDir(id), err);
      await this.discardRun(runDir);
    }
  }

  async discardRun(runDir: string): Promise<void> {
    await rm(runDir, { recursive: true, force: true });
  }

  /** Creates a directory of a job (its result directory). */
  async makeDir(path: string): Promise<void> {
    try {
      await mkdir(path, { recursive: true });
    } catch (err) {
      throw writeError(path, err);
    }
  }

  /** The bytes of a job's upload on disk (0 when there is none). */
  async uploadBytes(id: string): Promise<number> {
    try {
      return (await stat(this.data.uploadFile(id))).size;
    } catch {
      return 0;
    }
  }

  /** Removes the temporary files of atomic writes a crash left in a job's directory. */
  async removeTemps(id: string): Promise<void> {
    const dir = this.data.jobDir(id);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return;
    }
    for (const name of names.filter((n) => n.startsWith('.') && n.includes('.quantd-tmp-'))) {
      await rm(join(dir, name), { force: true });
    }
  }

  async removeUpload(id: string): Promise<void> {
    await rm(this.data.uploadFile(id), { force: true });
    await rm(this.data.uploadFolder(id), { force: true, recursive: true });
  }

  async writeReport(id: string, report: unknown): Promise<void> {
    await writeFileAtomic(this.data.reportFile(id), `${JSON.stringify(report, null, 2)}\n`);
  }

  /** Bytes free for an unprivileged writer on the file system of the jobs directory. */
  async freeBytes(): Promise<number> {
    const s = await statfs(this.data.jobs);
    return s.bavail * s.bsize;
  }

  /**
   * Why a succeeded job's result cannot be served — a file missing, or of another size than when
   * it was written — or null when every file is there.
   */
  async checkResult(id: string, result: JobResult): Promise<QuantdError | null> {
    const dir = this.data.resultDir(id);
    for (const file of result.files) {
      const path = join(dir, file.name);
      const shown = this.data.shown(path);
      let size: number;
      try {
        size = (await stat(path)).size;
      } catch {
        return new QuantdError('FILE_NOT_FOUND', { path: shown });
      }
      if (size !== file.bytes) {
        return new QuantdError('SAFETENSORS_TRUNCATED', {
          source: shown,
          detail: 'the result file changed after the job succeeded; it is not served',
          expected: file.bytes,
          actual: size,
        });
      }
    }
    return null;
  }
}

/** Where an upload is written: a FileHandle, or a stand-in in tests. */
export interface UploadSink {
  writev(buffers: Uint8Array[]): Promise<unknown>;
  sync(): Promise<void>;
  close(): Promise<void>;
}

export interface UploadOptions {
  /** The declared length, or null for a chunked body. */
  readonly expected: number | null;
  /** Most bytes accepted (QUANTD_UPLOAD_LIMIT). */
  readonly limit: number;
  /** Settles when the client has gone (connection half-closed or reset) mid-body. */
  readonly cut?: Promise<unknown>;
  /** Opens the file (default: a new file, refused if it exists). */
  readonly open?: (path: string) => Promise<UploadSink>;
  /** Called with the bytes received so far, after each write. */
  readonly onBytes?: (received: number) => void;
}

/** Bytes gathered before one write (fewer, larger writes than one per socket chunk). */
const WRITE_BATCH = 1 << 20;

const openNew = (path: string): Promise<UploadSink> => open(path, 'wx');

/**
 * Streams `source` to a new file at `path`: written as it arrives, fsynced at the end. Fails,
 * removing the file, with BODY_INCOMPLETE when the body ends early or the client goes,
 * PAYLOAD_TOO_LARGE past `limit`, STORAGE_FULL when the disk fills and OUTPUT_UNWRITABLE for
 * other write errors. The source is read, never destroyed: the connection must carry the answer.
 * Resolves with the byte count.
 */
export async function receiveUpload(source: Readable, path: string, options: UploadOptions): Promise<number> {
  const { expected, limit } = options;
  let received = 0;
  // what arrived: read, and still buffered in the stream when the client went
  const incomplete = (): QuantdError => {
    const arrived = received + source.readableLength;
    return new QuantdError('BODY_INCOMPLETE', { received: arrived, expected: expected ?? `${arrived}+` });
  };
  let sink: UploadSink;
  try {
    sink = await (options.open ?? openNew)(path);
  } catch (err) {
    throw writeError(path, err);
  }
  let batch: Uint8Array[] = [];
  let batchBytes = 0;
  /** The write in progress (the stream is paused meanwhile). */
  let writing: Promise<void> | null = null;
  const flush = async (): Promise<void> => {
    if (batchBytes === 0) return;
    const buffers = batch;
    batch = [];
    batchBytes = 0;
    try {
      await sink.writev(buffers);
    } catch (err) {
      throw writeError(path, err);
    }
    options.onBytes?.(received);
  };
  let closed = false;
  try {
    // 'data' events, not an async iterator: a chunk is never taken from the stream without being
    // counted, and the stream is never destroyed (the connection carries the answer).
    await new Promise<void>((resolve, reject) => {
      let settled = false;
      let ended = false;
      const settle = (error?: QuantdError): void => {
        if (settled) return;
        settled = true;
        source.off('data', onData);
        source.off('end', onEnd);
        source.off('error', onBroken);
        source.off('close', onBroken);
        if (error) {
          source.pause();
          reject(error);
        } else {
          resolve();
        }
      };
      const finish = (): void => settle(expected !== null && received < expected ? incomplete() : undefined);
      const onData = (chunk: Uint8Array): void => {
        received += chunk.byteLength;
        if (received > limit) {
          settle(
            new QuantdError('PAYLOAD_TOO_LARGE', {
              size: `more than ${limit}`,
              limit,
              setting: 'QUANTD_UPLOAD_LIMIT',
            }),
          );
          return;
        }
        batch.push(chunk);
        batchBytes += chunk.byteLength;
        if (batchBytes < WRITE_BATCH) return;
        source.pause();
        writing = flush().then(
          () => {
            writing = null;
            if (settled) return;
            if (ended) finish();
            else source.resume();
          },
          (err: QuantdError) => {
            writing = null;
            settle(err);
          },
        );
      };
      const onEnd = (): void => {
        ended = true;
        if (writing === null) finish();
      };
      // the connection broke off mid-body (reset, aborted), or the client half-closed it
      const onBroken = (): void => settle(incomplete());
      source.on('data', onData);
      source.once('end', onEnd);
      source.once('error', onBroken);
      source.once('close', onBroken);
      void options.cut?.then(onBroken);
    });
    await flush();
    try {
      await sink.sync();
      closed = true;
      await sink.close();
    } catch (err) {
      throw writeError(path, err);
    }
    return received;
  } catch (err) {
    await (writing as Promise<void> | null)?.catch(() => {});
    if (!closed) await sink.close().catch(() => {});
    await rm(path, { force: true, recursive: true }); // a file, or an unpacked folder
    throw err;
  }
}
