/**
 * `quantd calibrate MODEL --text FILE` (or `--dataset FILE.jsonl`): runs the model on the text
 * and writes what is asked — `--imatrix OUT.gguf` (llama.cpp's importance matrix), `--gptq
 * STATS.safetensors` (GPTQ's sequential statistics, for --layout gptq:calibration=STATS), `--awq
 * STATS.safetensors` (AWQ's scales chosen on the block output, for --layout awq:calibration=STATS) — with
 * `--seq-len L` tokens a window, `--samples N` windows chosen with `--seed S`.
 */
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';

import { GPTQ_SOLVE_DEFAULTS } from '../core/interop/gptq-solve.js';
import { QuantdError } from '../errors/index.js';
import { errorCode } from '../format/file-io.js';
import { parseCalibrationRecipe } from '../service/calibration/recipe.js';
import { createCompute } from '../pool/index.js';
import { calibrateFromText } from '../service/calibrate/run.js';
import type { GptqCalibrationOptions } from '../service/calibrate/gptq.js';
import { gptqAlgorithm, gptqParams } from '../service/layouts/gptq.js';
import { awqParams } from '../service/layouts/awq.js';
import { AWQ_GRID, type AwqCalibrationOptions } from '../service/calibrate/awq.js';
import { parseLayout } from '../service/layouts/parse.js';
import type { ParsedCommand } from './args.js';
import type { Io } from './io.js';
import { guardOutputs } from './output-guard.js';
import { ProgressReporter } from './progress.js';

function positiveInt(values: ParsedCommand['values'], flag: string, fallback?: number): number | undefined {
  const raw = values[flag] as string | undefined;
  if (raw === undefined) return fallback;
  const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new QuantdError('OPTION_INVALID', {
      option: flag,
      detail: 'must be a positive integer',
      value: raw,
    });
  }
  return n;
}

/** --gptq-options as the gptq layout's options (bits, group_size, sym, damp_percent, desc_act) and true_sequential. */
function gptqOptions(text: string | undefined): GptqCalibrationOptions {
  const { options } = parseLayout(`gptq${text ? `:${text}` : ''}`);
  const { true_sequential: sequential, ...layout } = options;
  if (sequential !== undefined && sequential !== 'true' && sequential !== 'false') {
    throw new QuantdError('OPTION_INVALID', {
      option: 'true_sequential',
      detail: 'must be true or false',
      value: sequential,
    });
  }
  const params = gptqParams(layout);
  // the algorithm's options are checked as the layout checks them (it needs a file name to)
  const algorithm = gptqAlgorithm({ ...layout, calibration: 'statistics' })!;
  return {
    params,
    damp: algorithm.damp ?? GPTQ_SOLVE_DEFAULTS.damp,
    actOrder: algorithm.actOrder,
    trueSequential: sequential !== 'false',
  };
}

/** --awq-options as the awq layout's options (group_size), and the grid. */
function awqOptions(text: string | undefined): AwqCalibrationOptions {
  const { options } = parseLayout(`awq${text ? `:${text}` : ''}`);
  return { groupSize: awqParams(options).groupSize, nGrid: AWQ_GRID };
}

async function readJsonFile(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new QuantdError(errorCode(err) === 'ENOENT' ? 'FILE_NOT_FOUND' : 'FILE_UNREADABLE', {
      path,
      detail: (err as Error).message,
    });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new QuantdError('RECIPE_INVALID', { where: path, detail: `not JSON: ${(err as Error).message}` });
  }
}

export async function calibrateText(parsed: ParsedCommand, io: Io): Promise<void> {
  const text = (parsed.values['text'] ?? parsed.values['dataset']) as string;
  if (parsed.values['text'] !== undefined && parsed.values['dataset'] !== undefined) {
    throw new QuantdError('USAGE', { detail: 'give --text FILE or --dataset FILE.jsonl, not both' });
  }
  if (parsed.positionals.length !== 1) {
    throw new QuantdError('USAGE', {
      detail: 'quantd calibrate MODEL --text FILE takes one model folder (the float model to run)',
    });
  }
  for (const flag of ['resume', 'save-state'] as const) {
    if (parsed.values[flag] !== undefined) {
      throw new QuantdError('USAGE', {
        detail: `--${flag} continues a calibration from activation batches; from text, a run is whole`,
      });
    }
  }
  const recipePath = parsed.values['observers'] as string | undefined;
  const qparamsOut = parsed.values['output'] as string | undefined;
  const statisticsOut = parsed.values['statistics'] as string | undefined;
  if ((qparamsOut !== undefined || statisticsOut !== undefined) && recipePath === undefined) {
    throw new QuantdError('USAGE', {
      detail: '-o and --statistics take what the observers of --observers RECIPE.json saw',
    });
  }
  if (recipePath !== undefined && qparamsOut === undefined && statisticsOut === undefined) {
    throw new QuantdError('USAGE', {
      detail: '--observers needs -o QPARAMS.safetensors, --statistics STATS, or both',
    });
  }
  const model = parsed.positionals[0]!;
  const imatrix = parsed.values['imatrix'] as string | undefined;
  const gptqOut = parsed.values['gptq'] as string | undefined;
  const gptqText = parsed.values['gptq-options'] as string | undefined;
  if (gptqText !== undefined && gptqOut === undefined) {
    throw new QuantdError('USAGE', { detail: '--gptq-options goes with --gptq STATS.safetensors' });
  }
  const gptq = gptqOut === undefined ? undefined : { output: gptqOut, options: gptqOptions(gptqText) };
  const awqOut = parsed.values['awq'] as string | undefined;
  const awqText = parsed.values['awq-options'] as string | undefined;
  if (awqText !== undefined && awqOut === undefined) {
    throw new QuantdError('USAGE', { detail: '--awq-options goes with --awq STATS.safetensors' });
  }
  const awq = awqOut === undefined ? undefined : { output: awqOut, options: awqOptions(awqText) };
  const observers =
    recipePath === undefined
      ? undefined
      : {
          recipe: parseCalibrationRecipe(await readJsonFile(recipePath)),
          output: qparamsOut,
          statistics: statisticsOut,
        };
  await guardOutputs(
    [text, ...(recipePath ? [recipePath] : [])],
    {
      files: [imatrix, gptqOut, awqOut, qparamsOut, statisticsOut].filter(
        (f): f is string => f !== undefined,
      ),
    },
    parsed.values['force'] === true,
  );
  const quiet = parsed.values['quiet'] === true;
  const progress =
    io.progress && !quiet && !parsed.values['no-progress']
      ? new ProgressReporter(io.progress, 'calibrate')
      : null;
  const handle = createCompute();
  try {
    const result = await calibrateFromText(
      {
        model,
        text,
        seqLen: positiveInt(parsed.values, 'seq-len', 512)!,
        samples: positiveInt(parsed.values, 'samples'),
        seed: positiveInt(parsed.values, 'seed', 1)!,
        imatrix,
        gptq,
        awq,
        observers,
        ort: { threads: positiveInt(parsed.values, 'threads', availableParallelism())! },
        onProgress: (_stage, done, total) =>
          progress?.update({
            tensorsDone: done,
            tensorsTotal: total,
            bytesDone: 0,
            bytesTotal: 0,
            unit: 'steps',
          }),
      },
      { compute: handle.compute, encoding: handle.encoding() },
    );
    progress?.done();
    if (!quiet) {
      const rate =
        result.tokensPerSecond === undefined
          ? ''
          : `, forward pass ${Math.round(result.tokensPerSecond)} tokens/s`;
      for (const note of result.notes) io.stderr(note);
      io.stderr(
        `calibrated on ${result.windows} windows of ${result.seqLen} tokens (${result.tokens} tokens) in ${result.seconds.toFixed(1)} s${rate}; wrote ${result.files.join(', ')}`,
      );
    }
  } finally {
    progress?.done();
    await handle.close();
  }
}
