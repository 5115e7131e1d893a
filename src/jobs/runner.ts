/**
 * Running one job (runJob): its state from running to succeeded or failed in job.json, its
 * progress, and its plan (request.ts) — a whole-model operation with runModel, or an interop
 * layout's writer (`layout.write`): where its input is read, where its result goes, what it
 * leaves (result files with their sizes and data SHA-256; the quality report, or the layout's
 * report). Also the checks of a submission that need the model's headers but no tensor data.
 *
 * Result names: an upload's result is `model.safetensors` (a layout's: `model.gguf`, `model.onnx`,
 * `model.safetensors`, beside which the layout writes its side files, named after it —
 * model.quantize_config.json, model.quantization_config.json, model.onnx.data); a model named by
 * path keeps its file name (its extension the layout's), or, sharded, is a directory of shards
 * and an index (model operations only: a layout reads one file).
 */
import { open, stat } from 'node:fs/promises';
import { basename, extname, join, relative, sep } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { ST_DTYPE_SIZE } from '../core/dtypes.js';
import { completeYielding } from '../core/time-slice.js';
import { SafetensorsFileReader } from '../format/index.js';
import {
  planOperationWork,
  resolveModelInput,
  runModel,
  type Compute,
  type ModelInput,
  type OperationRequest,
  type Progress,
} from '../service/index.js';
import { layoutExtension } from '../service/layouts/parse.js';
import { writeLayoutOutput } from '../service/layouts/write-folder.js';
import { isDirectory } from '../service/model-folder.js';
import { layoutReport } from '../service/layouts/report.js';
import type { JobLog } from './log.js';
import { DataDir, UPLOAD_RESULT_NAME, checkUploadedFolder, clientError, resolveInputPath } from './paths.js';
import { RecordConflict, now, type Entry, type JobBook } from './records.js';
import type { Encoding } from '../kernels/encoders.js';
import { unpackedFolder } from './folder-upload.js';
import { jobPlan, namedFiles, type JobPlan } from './request.js';
import { jobError, type Artifacts, type JobProgress, type ResultFile } from './store.js';
import { fileSha256 } from './verify.js';

export interface RunContext {
  readonly compute: Compute;
  /** Where a layout's encode tasks run (the worker pool). */
  readonly encoding: Encoding;
  /** Tensors processed at once (model operations). */
  readonly threads: number;
  readonly signal: AbortSignal;
  readonly onProgress: (p: Progress) => void;
}

export interface RunOutcome {
  readonly sharded: boolean;
  /** Every result file, named relative to the result directory. */
  readonly files: readonly ResultFile[];
  /** The quality report (model operations) or the layout's report (types, bits, errors): always one. */
  readonly report: unknown;
}

/**
 * What a run would refuse, refused at submission: every file of the model is a readable
 * safetensors file that the operation plans (model operations: a recipe rule that does not fit a
 * tensor, ...); a layout reads exactly one file. Returns what the result will take on disk: the
 * planned tensors' bytes for a model operation, the input's size for a layout (its size is known
 * once it runs; it writes at least about what it reads).
 */
export async function validatePlan(plan: JobPlan, input: string, model?: ModelInput): Promise<number> {
  const resolved = model ?? (await resolveModelInput(input));
  // a layout that converts whole model folders (gguf from a Hugging Face folder) reads its shards
  // itself; a safetensors layout writes a model folder as a folder, shard by shard
  const folder = plan.kind === 'layout' && (await layoutReadsFolder(plan, input));
  if (plan.kind === 'layout' && !folder && (resolved.index !== null || resolved.files.length !== 1)) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `layout=${plan.text} reads one .safetensors file; ${basename(input)} is a sharded model (write the layout from a single-file model)`,
    });
  }
  let outputBytes = 0;
  for (const file of resolved.files) {
    const reader = await SafetensorsFileReader.open(file);
    try {
      const shard = resolved.index !== null;
      if (plan.kind === 'model') {
        const planned = await completeYielding(
          planOperationWork(reader.header, plan.request, basename(file), shard),
        );
        outputBytes += planned.tensors.reduce(
          (n, t) => n + elementCount(t.shape) * ST_DTYPE_SIZE[t.dtype],
          0,
        );
      } else {
        outputBytes += (await stat(file)).size;
      }
    } finally {
      await reader.close();
    }
  }
  return outputBytes;
}

const elementCount = (shape: readonly number[]): number => shape.reduce((n, d) => n * d, 1);

/** Whether the layout takes `input` whole: a folder GGUF converts, or a folder in a safetensors layout. */
async function layoutReadsFolder(
  plan: Extract<JobPlan, { kind: 'layout' }>,
  input: string,
): Promise<boolean> {
  if ((await plan.layout.readsFolder?.(input)) === true) return true;
  return plan.layout.parts !== undefined && (await isDirectory(input));
}

/** Where the result of a run goes (see the file comment). */
export function outputPath(
  plan: JobPlan,
  resultDir: string,
  input: { readonly kind: 'upload' } | { readonly kind: 'path'; readonly model: ModelInput },
): string {
  const ext = plan.kind === 'layout' ? layoutExtension(plan.layout) : '.safetensors';
  if (input.kind === 'upload') return join(resultDir, UPLOAD_RESULT_NAME.replace(/\.safetensors$/, ext));
  if (plan.kind === 'model' && input.model.index !== null) return resultDir;
  // a sharded model folder written as one file (gguf) is named after its index: model.gguf
  const index = input.model.index;
  const name =
    index !== null ? basename(index).replace(/\.index\.json$/, '') : basename(input.model.files[0]!);
  return join(resultDir, plan.kind === 'layout' ? `${basename(name, extname(name))}${ext}` : name);
}

/** Runs the plan: its result files are in place (renamed) when this resolves. */
export async function runPlan(
  plan: JobPlan,
  input: string,
  output: string,
  resultDir: string,
  ctx: RunContext,
): Promise<RunOutcome> {
  if (plan.kind === 'model') return runOperation(plan.request, input, output, resultDir, ctx);
  // a model folder in a safetensors layout becomes the result folder itself (its files, side
  // files and config, as `quantd quantize FOLDER -o OUT --layout` writes OUT)
  const folder = plan.layout.parts !== undefined && (await isDirectory(input));
  const written = await writeLayoutOutput(plan.layout, input, folder ? resultDir : output, plan.options, {
    onProgress: ctx.onProgress,
    signal: ctx.signal,
    encoding: ctx.encoding,
  });
  const files: ResultFile[] = [];
  for (const path of written.files) {
    const name = relative(resultDir, path);
    if (name === '' || name.startsWith('..') || name.includes(sep)) {
      throw new QuantdError('INTERNAL', {
        detail: `layout ${plan.layout.name} wrote ${path} outside the job's result`,
      });
    }
    files.push({ name, ...(await checksums(path)), data_sha256: await dataSha256(path) });
  }
  const names = files.map((f) => f.name);
  return { sharded: false, files, report: layoutReport(plan.layout.name, plan.options, written, names) };
}

async function runOperation(
  request: OperationRequest,
  input: string,
  output: string,
  resultDir: string,
  ctx: RunContext,
): Promise<RunOutcome> {
  const run = await runModel(input, output, request, {
    compute: ctx.compute,
    concurrency: ctx.threads,
    checksum: true,
    signal: ctx.signal,
    onProgress: ctx.onProgress,
  });
  return {
    sharded: run.sharded,
    files: await Promise.all(
      run.files.map(async (f) => ({
        name: f.path.slice(resultDir.length + 1),
        ...(await checksums(f.path)),
        data_sha256: f.dataSha256,
      })),
    ),
    report: run.report,
  };
}

/** A result file's size and whole-file SHA-256, recorded so that it is verified before it is served. */
async function checksums(path: string): Promise<{ bytes: number; sha256: string }> {
  const handle = await open(path, 'r');
  try {
    const bytes = (await handle.stat()).size;
    return { bytes, sha256: await fileSha256(handle, bytes) };
  } finally {
    await handle.close();
  }
}

/** The SHA-256 of a safetensors file's data section; null for other files (GGUF, ONNX, JSON). */
async function dataSha256(path: string): Promise<string | null> {
  if (extname(path) !== '.safetensors') return null;
  const reader = await SafetensorsFileReader.open(path);
  try {
    return await reader.dataSha256();
  } finally {
    await reader.close();
  }
}

export interface RunDeps {
  readonly book: JobBook;
  readonly store: Artifacts;
  readonly data: DataDir;
  readonly compute: Compute;
  readonly encoding: () => Encoding;
  readonly threads: number;
  /** Least interval between progress writes to job.json. */
  readonly progressIntervalMs: number;
  readonly log: () => JobLog;
  /** Cluster mode: this replica's name, recorded in each attempt it runs (Job.runs). */
  readonly replica?: string;
}

/**
 * Runs a queued job to its end: running → succeeded (every result file in place, the report
 * written) or failed (its partial files removed). A cancelled job's files are removed and its
 * state left as cancelled; a run stopped by shutdown leaves the job as it is, to run again.
 *
 * A run writes into its own directory (run.N), published as the result by one rename once
 * complete. In cluster mode the first write (running, attempt N) claims the job: where another
 * replica's write wins instead, or wins later (a cancel, a takeover), this run stops and leaves
 * the files of the job to the winner, removing only its own directory.
 */
export async function runJob(entry: Entry, deps: RunDeps): Promise<void> {
  const { book, store, data } = deps;
  const id = entry.record.job.id;
  const controller = new AbortController();
  entry.controller = controller;
  entry.stopReason = undefined;
  const started = Date.now();
  const attempt = entry.record.job.attempts + 1;
  const startedAt = new Date(started).toISOString();
  book.update(entry, {
    state: 'running',
    started_at: startedAt,
    finished_at: null,
    attempts: attempt,
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
    ...(deps.replica !== undefined && {
      runs: [...(entry.record.job.runs ?? []), { attempt, replica: deps.replica, started_at: startedAt }],
    }),
  });
  let lastWrite = 0;
  const onProgress = (p: Progress): void => {
    if (entry.record.job.state !== 'running' || controller.signal.aborted) return;
    book.update(entry, { progress: progressOf(p, started) });
    const t = Date.now();
    if (t - lastWrite >= deps.progressIntervalMs) {
      lastWrite = t;
      book.save(entry).catch((err: unknown) => {
        if (err instanceof RecordConflict) return; // the run is stopped (book.adopt)
        deps.log().warn({ err, job: id }, `jobs: progress not saved: ${(err as Error).message}`);
      });
    }
  };
  const runDir = data.runDir(id, attempt);
  let claimed = false;
  try {
    await book.save(entry);
    claimed = true;
    await store.clearResult(id); // what earlier attempts left
    const plan = jobPlan(entry.record.submission);
    const { input, output } = await paths(entry, plan, deps, runDir);
    const run = await runPlan(plan, input, output, runDir, {
      compute: deps.compute,
      encoding: deps.encoding(),
      threads: deps.threads,
      signal: controller.signal,
      onProgress,
    });
    await store.writeReport(id, run.report);
    // cancelled (or stopping) just as the run ended: the cancellation wins (checked right
    // before the result is published, with nothing awaited in between)
    if (controller.signal.aborted || entry.record.job.state !== 'running') {
      throw new QuantdError('CANCELLED', { detail: '' });
    }
    await store.publish(id, runDir);
    const last = entry.record.job.progress;
    await book.finish(entry, {
      state: 'succeeded',
      finished_at: now(),
      result: { sharded: run.sharded, files: run.files },
      progress: last && { ...last, eta_seconds: 0 },
    });
    if (entry.record.job.input.kind === 'upload') await store.removeUpload(id);
    deps.log().info({ job: id, seconds: (Date.now() - started) / 1000 }, 'jobs: succeeded');
  } catch (err) {
    // not claimed: another replica runs it, or it was cancelled
    if (!claimed && err instanceof RecordConflict) return;
    if (entry.stopReason === 'shutdown') return; // runs again on the next start, or elsewhere
    if (entry.stopReason === 'superseded') {
      await store.discardRun(runDir).catch(() => {});
      return;
    }
    if (entry.stopReason === 'cancel' || entry.record.job.state === 'cancelled') {
      await store.clearResult(id);
      return;
    }
    const error = jobError(clientError(err, data, id));
    deps.log().warn({ job: id, code: error.code }, `jobs: failed: ${error.message}`);
    try {
      // recorded first: a replica that took the job over keeps its files
      await book.finish(entry, { state: 'failed', finished_at: now(), error, result: null });
    } catch (e) {
      if (e instanceof RecordConflict) {
        await store.discardRun(runDir).catch(() => {});
        return;
      }
      deps.log().error({ err: e, job: id }, `jobs: state not saved: ${(e as Error).message}`);
    }
    await store.clearResult(id).catch(() => {});
    if (entry.record.job.input.kind === 'upload') await store.removeUpload(id).catch(() => {});
  }
}

/** What a job reads and where its result goes (outputPath), in `resultDir` (the run's directory). */
async function paths(
  entry: Entry,
  plan: JobPlan,
  deps: RunDeps,
  resultDir: string,
): Promise<{ input: string; output: string }> {
  const { job } = entry.record;
  if (job.input.kind === 'upload' && job.input.folder === true) {
    // an uploaded folder (input/FOLDER) is named like a folder by path: after its index or weights
    const input = await unpackedFolder(deps.data.uploadFolder(job.id));
    // checked again as it is about to be read: every file of it must still be the upload's own
    const model = await checkUploadedFolder(deps.data, job.id, input, namedFiles(plan));
    const output = outputPath(plan, resultDir, { kind: 'path', model });
    if (output !== resultDir) await deps.store.makeDir(resultDir);
    return { input, output };
  }
  if (job.input.kind === 'upload') {
    await deps.store.makeDir(resultDir);
    return { input: deps.data.uploadFile(job.id), output: outputPath(plan, resultDir, { kind: 'upload' }) };
  }
  // resolved again: what the path names may have changed since the submission
  const resolved = await resolveInputPath(deps.data, job.input.path, namedFiles(plan));
  const output = outputPath(plan, resultDir, { kind: 'path', model: resolved.model });
  if (output !== resultDir) await deps.store.makeDir(resultDir);
  return { input: resolved.path, output };
}

/** A run's progress as job.json shows it, with its rate and ETA since `started`. */
export function progressOf(p: Progress, started: number): JobProgress {
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

export async function totalBytes(files: readonly string[]): Promise<number> {
  let n = 0;
  for (const f of files) n += (await stat(f)).size;
  return n;
}
