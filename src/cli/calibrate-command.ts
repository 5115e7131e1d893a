/**
 * `quantd calibrate BATCH... --observers recipe.json -o qparams.safetensors`: a calibration
 * session run in this process, offline. Each BATCH is a safetensors file of activations, or a
 * folder whose *.safetensors are taken in name order; they fold in one after another, as the
 * server's /v1/calibrations does, and the qparams are written as NAME.scale / NAME.zero_point.
 * `--save-state FILE` writes the session's export form; `--resume FILE` continues from one
 * (instead of --observers), so a calibration can run in parts, here or on a server.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { referenceCompute } from '../core/compute.js';
import { QuantdError } from '../errors/index.js';
import { errorCode, writeFileAtomic } from '../format/file-io.js';
import { writeLayerStats } from '../format/layer-stats.js';
import { parseCalibrationRecipe } from '../service/calibration/recipe.js';
import { CalibrationSession, DEFAULT_TTL_SECONDS } from '../service/calibration/session.js';
import { batchTensors } from '../service/calibration/store.js';
import type { ParsedCommand } from './args.js';
import type { Io } from './io.js';
import { guardOutputs } from './output-guard.js';

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

/** The batch files: each argument a file, or a folder's *.safetensors in name order. */
async function batchFiles(args: readonly string[]): Promise<string[]> {
  const files: string[] = [];
  for (const arg of args) {
    let info;
    try {
      info = await stat(arg);
    } catch {
      throw new QuantdError('FILE_NOT_FOUND', { path: arg });
    }
    if (!info.isDirectory()) {
      files.push(arg);
      continue;
    }
    const names = (await readdir(arg)).filter((n) => n.endsWith('.safetensors')).sort();
    if (names.length === 0) {
      throw new QuantdError('USAGE', { detail: `folder ${arg} holds no *.safetensors batch` });
    }
    files.push(...names.map((n) => join(arg, n)));
  }
  return files;
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
  const reads = [...files, ...(observers ? [observers] : []), ...(resume ? [resume] : [])];
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
  for (const file of files) {
    const tensors = batchTensors(await readInput(file));
    try {
      await session.fold(tensors, referenceCompute, async () => {});
    } catch (err) {
      if (err instanceof QuantdError && err.code === 'NO_TENSOR_SELECTED') {
        throw new QuantdError('NO_TENSOR_SELECTED', {
          detail: `${file}: no tensor matches a rule of the recipe`,
        });
      }
      throw err;
    }
  }
  if (statistics !== undefined && session.stats.size === 0) {
    throw new QuantdError('NO_TENSOR_SELECTED', {
      detail:
        'no rule of the recipe gathers layer statistics for --statistics ({"match": …, "statistics": "linear"})',
    });
  }
  if (output) await writeFileAtomic(output, await session.qparamsFile(referenceCompute));
  if (statistics) await writeLayerStats(statistics, session.stats, { 'quantd.calibration': 'cli' });
  if (saveState) await writeFileAtomic(saveState, session.exportText(session.snapshot()));
  if (parsed.values['quiet'] !== true) {
    const summary = session.summary() as { batches: number; observed: number };
    const written = [output, statistics && `statistics ${statistics}`, saveState && `state ${saveState}`];
    io.stderr(
      `calibrated ${new Set([...session.observers.keys(), ...session.stats.keys()]).size} tensors over ${summary.batches} batches ` +
        `(${summary.observed} values) → ${written.filter(Boolean).join(', ')}`,
    );
  }
}
