/**
 * `quantd calibrate BATCH... --observers recipe.json -o qparams.safetensors`: a calibration
 * session run in this process, offline. Each BATCH is a safetensors file of activations, or a
 * folder whose *.safetensors are taken in name order; they fold in one after another, as the
 * server's /v1/calibrations does, and the qparams are written as NAME.scale / NAME.zero_point.
 * `--save-state FILE` writes the session's export form; `--resume FILE` continues from one
 * (instead of --observers), so a calibration can run in parts, here or on a server. The batches
 * fold on the kernels' Compute (the worker pool, as quantize runs): the layer statistics' Σ xᵀx is
 * the C kernel's, the TypeScript's bits 30–100 times faster; progress by batches on stderr.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { errorCode, writeFileAtomic } from '../format/file-io.js';
import { writeLayerStats } from '../format/layer-stats.js';
import { describeKernels } from '../kernels/index.js';
import { createCompute } from '../pool/index.js';
import { parseCalibrationRecipe } from '../service/calibration/recipe.js';
import { CalibrationSession, DEFAULT_TTL_SECONDS } from '../service/calibration/session.js';
import { batchTensors } from '../service/calibration/store.js';
import type { ParsedCommand } from './args.js';
import type { Io } from './io.js';
import { humanBytes } from './output.js';
import { guardOutputs } from './output-guard.js';
import { ProgressReporter } from './progress.js';

async function readInput(path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    if (errorCode(err) === 'ENOENT') throw new QuantdError('FILE_NOT_FOUND', { path });
    throw new QuantdError('FILE_UNREADABLE', { path, detail: (err as Error).message });
  }
}

async function readJson(path: string): Promise<unknown> {
  const text = (await readInput(path)).toString('utf8');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new QuantdError('RECIPE_INVALID', { where: path, detail: `not JSON: ${(err as Error).message}` });
  }
}

/** The batch files: each argument a file, or a folder's *.safetensors in name order; their sizes. */
async function batchFiles(args: readonly string[]): Promise<Array<{ path: string; bytes: number }>> {
  const files: Array<{ path: string; bytes: number }> = [];
  const sized = async (path: string): Promise<{ path: string; bytes: number }> => {
    try {
      return { path, bytes: (await stat(path)).size };
    } catch {
      throw new QuantdError('FILE_NOT_FOUND', { path });
    }
  };
  for (const arg of args) {
    let info;
    try {
      info = await stat(arg);
    } catch {
      throw new QuantdError('FILE_NOT_FOUND', { path: arg });
    }
    if (!info.isDirectory()) {
      files.push({ path: arg, bytes: info.size });
      continue;
    }
    const names = (await readdir(arg)).filter((n) => n.endsWith('.safetensors')).sort();
    if (names.length === 0) {
      throw new QuantdError('USAGE', { detail: `folder ${arg} holds no *.safetensors batch` });
    }
    for (const n of names) files.push(await sized(join(arg, n)));
  }
  return files;
}

/**
 * What the session gathered, for the summary line: its observers' values, its layer
 * statistics' tokens (each layer counts its own: a batch may leave a layer out).
 */
function gatheredText(session: CalibrationSession): string {
  const parts: string[] = [];
  if (session.observers.size > 0) {
    let observed = 0;
    for (const w of session.observers.values()) observed += w.state.observed;
    const n = session.observers.size;
    parts.push(`${n} observer${n === 1 ? '' : 's'}, ${observed} values`);
  }
  if (session.stats.size > 0) {
    let low = Infinity;
    let high = 0;
    for (const s of session.stats.values()) {
      low = Math.min(low, s.tokens);
      high = Math.max(high, s.tokens);
    }
    const n = session.stats.size;
    parts.push(
      `statistics of ${n} layer${n === 1 ? '' : 's'}, ${low === high ? low : `${low}–${high}`} tokens${n === 1 ? '' : ' each'}`,
    );
  }
  return parts.length > 0 ? parts.join('; ') : 'nothing gathered';
}

export async function calibrate(parsed: ParsedCommand, io: Io): Promise<void> {
  const output = parsed.values['output'] as string | undefined;
  const observers = parsed.values['observers'] as string | undefined;
  const resume = parsed.values['resume'] as string | undefined;
  const saveState = parsed.values['save-state'] as string | undefined;
  const statistics = parsed.values['statistics'] as string | undefined;
  if (!output && !statistics) {
    throw new QuantdError('USAGE', {
      detail: 'quantd calibrate needs -o QPARAMS.safetensors, --statistics STATS (layer statistics), or both',
    });
  }
  if ((observers === undefined) === (resume === undefined)) {
    throw new QuantdError('USAGE', {
      detail:
        'quantd calibrate needs one of --observers RECIPE.json (a new calibration) and --resume STATE.json',
    });
  }
  if (parsed.positionals.length === 0 && resume === undefined) {
    throw new QuantdError('USAGE', {
      detail: 'quantd calibrate needs at least one batch (a safetensors file or a folder)',
    });
  }
  const files = await batchFiles(parsed.positionals);
  const reads = [...files.map((f) => f.path), ...(observers ? [observers] : []), ...(resume ? [resume] : [])];
  await guardOutputs(
    reads,
    { files: [output, saveState, statistics].filter((f): f is string => f !== undefined) },
    parsed.values['force'] === true,
  );

  const session = resume
    ? CalibrationSession.restore(await readJson(resume), { id: 'cli', ttlSeconds: DEFAULT_TTL_SECONDS })
    : new CalibrationSession(
        'cli',
        parseCalibrationRecipe(await readJson(observers!)),
        DEFAULT_TTL_SECONDS,
        new Date(),
      );
  const quiet = parsed.values['quiet'] === true;
  const progress =
    io.progress && !quiet && !parsed.values['no-progress']
      ? new ProgressReporter(io.progress, 'calibrate')
      : null;
  const bytesTotal = files.reduce((n, f) => n + f.bytes, 0);
  let bytesDone = 0;
  const started = performance.now();
  const handle = createCompute();
  try {
    for (const [i, file] of files.entries()) {
      const tensors = batchTensors(await readInput(file.path));
      try {
        await session.fold(tensors, handle.compute, async () => {});
      } catch (err) {
        if (err instanceof QuantdError && err.code === 'NO_TENSOR_SELECTED') {
          throw new QuantdError('NO_TENSOR_SELECTED', {
            detail: `${file.path}: no tensor matches a rule of the recipe`,
          });
        }
        throw err;
      }
      bytesDone += file.bytes;
      progress?.update({
        tensorsDone: i + 1,
        tensorsTotal: files.length,
        bytesDone,
        bytesTotal,
        counted: 'batches',
      });
    }
    if (statistics !== undefined && session.stats.size === 0) {
      throw new QuantdError('NO_TENSOR_SELECTED', {
        detail:
          'no rule of the recipe gathers layer statistics for --statistics ({"match": …, "statistics": "linear"})',
      });
    }
    if (output) await writeFileAtomic(output, await session.qparamsFile(handle.compute));
  } finally {
    progress?.done();
    await handle.close();
  }
  if (statistics) await writeLayerStats(statistics, session.stats, { 'quantd.calibration': 'cli' });
  if (saveState) await writeFileAtomic(saveState, session.exportText(session.snapshot()));
  if (!quiet) {
    const seconds = (performance.now() - started) / 1000;
    const written = [output, statistics && `statistics ${statistics}`, saveState && `state ${saveState}`];
    io.stderr(
      `calibrated ${new Set([...session.observers.keys(), ...session.stats.keys()]).size} tensors over ${session.batches} batches ` +
        `(${gatheredText(session)}; ${humanBytes(bytesDone)} in ${seconds.toFixed(2)} s) → ${written.filter(Boolean).join(', ')}; ` +
        describeKernels(handle.kernels),
    );
  }
}
