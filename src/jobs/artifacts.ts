/**
 * Where a job's files live, as the manager and the runner use them: its directory, its upload,
 * the directories of its runs, its published result and its report. A single server and every
 * replica of a cluster use the data directory (JobStore, store.ts), on a shared volume in a
 * cluster. Another store (S3-compatible) implements the same operations with the same promises:
 * a run is published whole or not at all, and a published result is never replaced by another.
 */
import type { QuantdError } from '../errors/index.js';
import type { JobResult } from './store.js';

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
