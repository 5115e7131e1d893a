/**
 * Whole-model runs: a model (one safetensors file, or shards with their index) in, the same
 * model quantized out, tensor by tensor with bounded memory, plus a quality report. A model
 * folder in (with `modelFolder`) gives a model folder out: its weights quantized, its other
 * files copied (./model-folder.ts).
 *
 * - Tensors of a file run concurrently (up to `concurrency`, within `memoryBudget` bytes held at
 *   once) and are written in file order, so the output is byte-identical to a one-at-a-time run.
 * - Each output file is written to a temporary name, fsynced and renamed into place, and (asked
 *   for, and always when sharded) records the SHA-256 of its data section in its metadata. Sharded outputs are staged in a hidden
 *   directory beside them; shards are moved into place once all are written, the index last, so
 *   an index never names a shard that is not complete.
 */
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { completeYielding } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import { SafetensorsFileReader, SafetensorsFileWriter, writeFileAtomic } from '../format/index.js';
import { forgetTemp, trackTempDirectory } from '../format/temp-files.js';
import type { Compute } from './compute.js';
import {
  executePlan,
  throwIfAborted,
  unitCost,
  unitsOf,
  type RunSummary,
  type StepReport,
} from './execute.js';
import { planOperationWork, type OperationRequest, type Plan } from './plan.js';
import { unusedRules } from './recipe.js';
import {
  companionFiles,
  copyCompanions,
  isDirectory,
  openOutputFolder,
  removeCreated,
} from './model-folder.js';
import { describeSelection } from './selection.js';
import { SLICE_BYTES } from './slices.js';
import { ReportBuilder, type QualityReport } from './report.js';
import { encodeIndex, resolveModelInput, type ModelInput } from './shards.js';

/** The least memory tensors in flight may hold together by default (small tensors overlap). */
export const DEFAULT_MODEL_BUDGET = 32 * 1024 * 1024;

export interface Progress {
  readonly tensorsDone: number;
  readonly tensorsTotal: number;
  readonly bytesDone: number;
  readonly bytesTotal: number;
  /** The tensor just finished. */
  readonly tensor: string;
}

export interface ModelRunOptions {
  readonly compute: Compute;
  /** Tensors processed at once (default 1). */
  readonly concurrency?: number;
  /** Bytes tensors in flight may hold together (default: the larger of 32 MiB and twice the largest tensor's need). */
  readonly memoryBudget?: number;
  readonly signal?: AbortSignal | undefined;
  readonly onProgress?: (p: Progress) => void;
  /** Record each output file's data SHA-256 in its metadata (always for sharded outputs). */
  readonly checksum?: boolean;
  /**
   * An input that is a directory is a model folder: the output is then a folder too, holding the
   * quantized file(s) under their input names, the index when sharded, and the input folder's
   * other files (./model-folder.ts). Without it, a directory's single file gives a single file.
   */
  readonly modelFolder?: boolean;
  /**
   * Tensors of more than twice this many bytes are read, computed and written in slices of about
   * this size (./slices.ts; default SLICE_BYTES); Infinity keeps every tensor whole.
   */
  readonly sliceBytes?: number;
}

export interface ModelRunResult {
  readonly summary: RunSummary;
  readonly report: QualityReport;
  /** The files written: the output file, or the shards and then the index. */
  readonly files: readonly OutputFile[];
  /** Whether the model came as shards with an index (and went out as a directory of shards). */
  readonly sharded: boolean;
  /** Whether the output is a directory (a sharded model, or a model folder). */
  readonly folder: boolean;
}

export interface OutputFile {
  readonly path: string;
  readonly bytes: number;
  /** SHA-256 of the data section, as recorded in the file's metadata; null when not recorded. */
  readonly dataSha256: string | null;
}

interface PlannedFile {
  readonly input: string;
  readonly reader: SafetensorsFileReader;
  readonly plan: Plan;
}

/**
 * Plans every file before reading any tensor: a recipe that does not fit fails up front. A
 * selection (or a dequantize) must find something in the model, not in every shard.
 */
async function planAll(model: ModelInput, request: OperationRequest): Promise<PlannedFile[]> {
  const planned: PlannedFile[] = [];
  const sharded = model.index !== null;
  try {
    for (const input of model.files) {
      const reader = await SafetensorsFileReader.open(input);
      let plan: PlannedFile['plan'];
      try {
        // in units, the event loop turning meanwhile (a server's job: ../core/time-slice.ts)
        plan = await completeYielding(planOperationWork(reader.header, request, input, sharded));
      } catch (err) {
        // a file whose plan fails is not in `planned` yet: close it here, not at garbage collection
        await reader.close();
        throw err;
      }
      planned.push({ input, reader, plan });
    }
    if (sharded && !planned.some((p) => p.plan.steps.some((s) => s.kind !== 'copy'))) {
      if (request.op === 'dequantize') throw new QuantdError('NOT_A_QTENSOR', { source: model.index! });
      throw new QuantdError('NO_TENSOR_SELECTED', { detail: describeSelection(request) });
    }
  } catch (err) {
    await Promise.all(planned.map((p) => p.reader.close()));
    throw err;
  }
  return planned;
}

/**
 * The default budget holds two of the largest units: a tensor (or slice) is read while the one
 * before it is quantized and written (with room for one only, a 7B-shaped bf16 checkpoint to int4
 * took 2.3–2.9 s where two take 1.9–2.3 s, at the same peak RSS: the largest step is a copy of
 * the embeddings).
 */
function budgetFor(
  planned: readonly PlannedFile[],
  requested: number | undefined,
  sliceBytes: number,
): number {
  if (requested !== undefined) return requested;
  let largest = 0; // a loop: spreading a model's steps into Math.max overflows the stack
  for (const p of planned)
    for (const unit of unitsOf(p.plan, sliceBytes)) largest = Math.max(largest, unitCost(unit));
  return Math.max(DEFAULT_MODEL_BUDGET, 2 * largest);
}

/** Small files written atomically (kept here for the modules that import it from the service). */
export { writeFileAtomic };

/**
 * Runs `request` over the model at `input` (file, index or directory) into `output` (a file for
 * a single-file model, a directory for a sharded one).
 */
export async function runModel(
  input: string,
  output: string,
  request: OperationRequest,
  options: ModelRunOptions,
): Promise<ModelRunResult> {
  const model = await resolveModelInput(input);
  const planned = await planAll(model, request);
  const report = new ReportBuilder();
  const sliceBytes = options.sliceBytes ?? SLICE_BYTES;
  const tensorsTotal = planned.reduce((n, p) => n + p.plan.steps.length, 0);
  const bytesTotal = planned.reduce((n, p) => n + p.reader.header.dataLength, 0);
  let tensorsDone = 0;
  let bytesDone = 0;
  const onStep = (r: StepReport): void => {
    report.add(r);
    tensorsDone++;
    bytesDone += r.bytesIn;
    options.onProgress?.({ tensorsDone, tensorsTotal, bytesDone, bytesTotal, tensor: r.name });
  };
  const execute = {
    onStep,
    signal: options.signal,
    releaseOutputs: true,
    quality: request.op === 'quantize',
    concurrency: options.concurrency ?? 1,
    memoryBudget: budgetFor(planned, options.memoryBudget, sliceBytes),
    sliceBytes,
  };
  const totals = { transformed: 0, passedThrough: 0, bytesIn: 0, bytesOut: 0 };
  const add = (s: RunSummary): void => {
    totals.transformed += s.transformed;
    totals.passedThrough += s.passedThrough;
    totals.bytesIn += s.bytesIn;
    totals.bytesOut += s.bytesOut;
  };
  const names = planned.flatMap((p) => p.reader.header.entries.map((e) => e.name));
  const unused = request.recipe ? unusedRules(request.recipe, names) : [];
  try {
    const sharded = model.index !== null;
    const folderInput = options.modelFolder === true && (await isDirectory(input)) ? input : null;
    if (!sharded && folderInput === null) {
      const { reader, plan } = planned[0]!;
      const one = await writeOne(reader, plan, output, options.compute, execute, options.checksum ?? false);
      add(one.summary);
      return { summary: totals, report: report.build(unused), files: [one.file], sharded, folder: false };
    }
    const checksum = sharded || (options.checksum ?? false);
    const files = await writeFolder(planned, model, output, folderInput, {
      compute: options.compute,
      execute,
      add,
      checksum,
    });
    return { summary: totals, report: report.build(unused), files, sharded, folder: true };
  } finally {
    await Promise.all(planned.map((p) => p.reader.close()));
  }
}

type ExecuteArgs = Parameters<typeof executePlan>[4];

async function writeOne(
  reader: SafetensorsFileReader,
  plan: Plan,
  path: string,
  compute: Compute,
  execute: ExecuteArgs,
  checksum: boolean,
): Promise<{ summary: RunSummary; file: OutputFile }> {
  const writer = await SafetensorsFileWriter.create(path, plan.tensors, plan.metadata, { checksum });
  try {
    const summary = await executePlan(plan, reader, writer, compute, execute);
    await writer.commit();
    return { summary, file: { path, bytes: writer.fileBytes, dataSha256: writer.digest } };
  } catch (err) {
    await writer.abort();
    throw err;
  }
}

interface FolderRun {
  readonly compute: Compute;
  readonly execute: ExecuteArgs;
  readonly add: (s: RunSummary) => void;
  readonly checksum: boolean;
}

/**
 * A directory output: the files of the model under their input names (staged, then moved into
 * place), the index when sharded (last, so it never names an incomplete shard), and, for a model
 * folder (`folderInput`), the folder's other files copied across.
 */
async function writeFolder(
  planned: readonly PlannedFile[],
  model: ModelInput,
  output: string,
  folderInput: string | null,
  run: FolderRun,
): Promise<OutputFile[]> {
  const { compute, execute, add } = run;
  const companions = folderInput === null ? [] : await companionFiles(folderInput);
  const created = await openOutputFolder(
    output,
    folderInput ?? dirname(model.index ?? model.files[0]!),
    model.index !== null ? 'a sharded model' : 'a model folder',
  );
  const staging = join(output, `.quantd-staging-${randomBytes(6).toString('hex')}`);
  let done = false;
  await mkdir(staging);
  trackTempDirectory(staging); // removed even when a signal ends the process
  try {
    const shards = [];
    for (const { input, reader, plan } of planned) {
      throwIfAborted(execute?.signal);
      const staged = join(staging, basename(input));
      const { summary, file } = await writeOne(reader, plan, staged, compute, execute, run.checksum);
      add(summary);
      const tensors = plan.tensors.map((t) => t.name);
      shards.push({ file: basename(input), staged: file, tensors, dataBytes: summary.bytesOut });
    }
    const files: OutputFile[] = [];
    for (const shard of shards) {
      const path = join(output, shard.file);
      await rename(shard.staged.path, path);
      files.push({ ...shard.staged, path });
    }
    if (model.index !== null) {
      const indexPath = join(output, basename(model.index));
      const indexText = encodeIndex(shards, model.indexMetadata);
      await writeFileAtomic(indexPath, indexText);
      files.push({ path: indexPath, bytes: Buffer.byteLength(indexText), dataSha256: null });
    }
    if (folderInput !== null) {
      for (const path of await copyCompanions(folderInput, output, companions)) {
        files.push({ path, bytes: (await stat(path)).size, dataSha256: null });
      }
    }
    done = true;
    return files;
  } finally {
    await rm(staging, { recursive: true, force: true });
    forgetTemp(staging);
    // a failed run leaves no directory it made: from the output up to the first one created
    // (rmdir removes only empty ones)
    if (!done && created !== undefined) await removeCreated(output, created);
  }
}
