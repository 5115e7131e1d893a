/**
 * Running one job's plan (request.ts): a whole-model operation with runModel, or an interop
 * layout's writer (`layout.write`) — where its input is read, where its result goes, what it
 * leaves (result files with their sizes and data SHA-256, a quality report or none) — and the
 * checks of a submission that need the model's headers but no tensor data.
 *
 * Result names: an upload's result is `model.safetensors` (a layout's: `model.gguf`, `model.onnx`,
 * `model.safetensors`, beside which the layout writes its side files — quantize_config.json,
 * model.onnx.data); a model named by path keeps its file name (its extension the layout's), or,
 * sharded, is a directory of shards and an index (model operations only: a layout reads one file).
 */
import { stat } from 'node:fs/promises';
import { basename, extname, join, relative, sep } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { SafetensorsFileReader } from '../format/index.js';
import {
  planOperation,
  resolveModelInput,
  runModel,
  type Compute,
  type ModelInput,
  type OperationRequest,
  type Progress,
} from '../service/index.js';
import { layoutExtension } from '../service/layouts/parse.js';
import { UPLOAD_RESULT_NAME } from './paths.js';
import type { JobPlan } from './request.js';
import type { JobProgress, ResultFile } from './store.js';

export interface RunContext {
  readonly compute: Compute;
  /** Tensors processed at once (model operations). */
  readonly threads: number;
  readonly signal: AbortSignal;
  readonly onProgress: (p: Progress) => void;
}

export interface RunOutcome {
  readonly sharded: boolean;
  /** Every result file, named relative to the result directory. */
  readonly files: readonly ResultFile[];
  /** The quality report (model operations); null for a layout, which writes none. */
  readonly report: unknown;
}

/**
 * What a run would refuse, refused at submission: every file of the model is a readable
 * safetensors file that the operation plans (model operations: a recipe rule that does not fit a
 * tensor, ...); a layout reads exactly one file.
 */
export async function validatePlan(plan: JobPlan, input: string, model?: ModelInput): Promise<void> {
  const resolved = model ?? (await resolveModelInput(input));
  if (plan.kind === 'layout' && (resolved.index !== null || resolved.files.length !== 1)) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `layout=${plan.text} reads one .safetensors file; ${basename(input)} is a sharded model (write the layout from a single-file model)`,
    });
  }
  for (const file of resolved.files) {
    const reader = await SafetensorsFileReader.open(file);
    try {
      if (plan.kind === 'model') planOperation(reader.header, plan.request, basename(file));
    } finally {
      await reader.close();
    }
  }
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
  const name = basename(input.model.files[0]!);
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
  const written = await plan.layout.write(input, output, plan.options, {
    onProgress: ctx.onProgress,
    signal: ctx.signal,
  });
  const files: ResultFile[] = [];
  for (const path of written.files) {
    const name = relative(resultDir, path);
    if (name === '' || name.startsWith('..') || name.includes(sep)) {
      throw new QuantdError('INTERNAL', {
        detail: `layout ${plan.layout.name} wrote ${path} outside the job's result`,
      });
    }
    files.push({ name, bytes: (await stat(path)).size, data_sha256: await dataSha256(path) });
  }
  return { sharded: false, files, report: null };
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
    files: run.files.map((f) => ({
      name: f.path.slice(resultDir.length + 1),
      bytes: f.bytes,
      data_sha256: f.dataSha256,
    })),
    report: run.report,
  };
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
