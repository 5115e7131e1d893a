/**
 * Calibration from text (`quantd calibrate MODEL --text FILE`): the model's tokenizer cuts the
 * text into windows (src/service/eval/text.ts), a seeded sample of them if asked, and the model
 * runs on them in ONNX Runtime to give what each output asks for — an importance matrix
 * (./imatrix.ts), GPTQ's sequential statistics (./gptq.ts), AWQ's scales chosen on the block
 * output (./awq.ts). Everything that can be refused (the
 * folder, its architecture, its weights against config.json, the text's length, the options) is
 * refused before the model runs.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import type { Compute } from '../../core/compute.js';
import { QuantdError } from '../../errors/index.js';
import { writeFileAtomic } from '../../format/file-io.js';
import { writeImportanceMatrix } from '../../format/imatrix.js';
import { writeLayerStats } from '../../format/layer-stats.js';
import type { CalibrationRecipe } from '../calibration/recipe.js';
import { CalibrationSession } from '../calibration/session.js';
import { DEFAULT_TTL_SECONDS } from '../calibration/store.js';
import { observeFromText } from './observers.js';
import type { Encoding } from '../../kernels/encoders.js';
import { decoderSpec } from '../decoder/spec.js';
import type { OrtSessionOptions } from '../engines/onnxruntime.js';
import { readText, sampleWindows, windowsOf } from '../eval/text.js';
import { architectureOf } from '../layouts/gguf-hf/architectures.js';
import { openCheckpoint } from '../layouts/gguf-hf/checkpoint.js';
import { readHfFolder } from '../layouts/gguf-hf/folder.js';
import { loadTokenizer } from '../load-tokenizer.js';
import type { CalibrationContext } from './context.js';
import { calibrateAwq, checkAwqArchitecture, type AwqCalibrationOptions } from './awq.js';
import { calibrateGptq, type GptqCalibrationOptions } from './gptq.js';
import { computeImatrix } from './imatrix.js';
import { LayerRunner } from './layers.js';

export interface TextCalibration {
  /** A float Hugging Face model folder. */
  readonly model: string;
  /** A text file, or a .jsonl dataset of {"text": …} lines. */
  readonly text: string;
  readonly seqLen: number;
  /** Windows used: a seeded random sample of this many (default: all). */
  readonly samples?: number | undefined;
  readonly seed: number;
  /** Where to write llama.cpp's importance matrix (GGUF). */
  readonly imatrix?: string | undefined;
  /** Where to write GPTQ's statistics, and GPTQ's options. */
  readonly gptq?: { readonly output: string; readonly options: GptqCalibrationOptions } | undefined;
  /**
   * Activation observers (a calibration recipe) fed each linear input `M.input`; their qparams
   * to `output`, the layer statistics its rules gather to `statistics`.
   */
  readonly observers?:
    | {
        readonly recipe: CalibrationRecipe;
        readonly output?: string | undefined;
        readonly statistics?: string | undefined;
      }
    | undefined;
  /** Where to write AWQ's statistics and chosen scales, and AWQ's options. */
  readonly awq?: { readonly output: string; readonly options: AwqCalibrationOptions } | undefined;
  readonly ort?: OrtSessionOptions;
  readonly signal?: AbortSignal | undefined;
  readonly onProgress?: ((stage: string, done: number, total: number) => void) | undefined;
}

export interface TextCalibrationResult {
  readonly windows: number;
  readonly tokens: number;
  readonly seqLen: number;
  readonly files: readonly string[];
  /** What the searches chose (AWQ: per group of layers, which scales won). */
  readonly notes: readonly string[];
  readonly seconds: number;
  /** Forward-pass throughput of the importance matrix's run, tokens per second. */
  readonly tokensPerSecond?: number;
}

export async function calibrateFromText(
  request: TextCalibration,
  resources: { readonly compute: Compute; readonly encoding: Encoding },
): Promise<TextCalibrationResult> {
  const started = performance.now();
  if (
    request.imatrix === undefined &&
    request.gptq === undefined &&
    request.awq === undefined &&
    request.observers === undefined
  ) {
    throw new QuantdError('USAGE', {
      detail:
        'calibration from text needs an output: --imatrix FILE.gguf, --gptq STATS.safetensors, --awq STATS.safetensors, --observers RECIPE.json -o QPARAMS.safetensors',
    });
  }
  const folder = await readHfFolder(request.model);
  const configPath = join(request.model, 'config.json');
  const arch = architectureOf(folder.config, configPath);
  const spec = decoderSpec(folder.config, configPath);
  if (request.awq !== undefined) checkAwqArchitecture(spec);
  if (request.seqLen > spec.h.context) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'seq_len',
      detail: `is longer than the model's context (max_position_embeddings ${spec.h.context})`,
      value: String(request.seqLen),
    });
  }
  const checkpoint = await openCheckpoint(request.model, arch, spec.h, configPath);
  const work = await mkdtemp(join(tmpdir(), 'quantd-calibrate-'));
  try {
    const tokenizer = await loadTokenizer(request.model);
    const text = await readText(request.text);
    const all = windowsOf(text, request.text, tokenizer, request.seqLen);
    const windows =
      request.samples === undefined ? all.windows : sampleWindows(all.windows, request.samples, request.seed);
    const ctx: CalibrationContext = {
      work,
      compute: resources.compute,
      encoding: resources.encoding,
      seqLen: request.seqLen,
      ort: request.ort ?? {},
      signal: request.signal,
      purpose: 'calibrate a model from text',
      onProgress: request.onProgress,
    };
    const files: string[] = [];
    let tokensPerSecond: number | undefined;
    if (request.imatrix !== undefined) {
      const t0 = performance.now();
      const sums = await computeImatrix(request.model, arch, windows, ctx);
      tokensPerSecond = (windows.length * request.seqLen) / ((performance.now() - t0) / 1000);
      await writeImportanceMatrix(request.imatrix, sums, {
        names: [basename(request.text)],
        chunks: windows.length,
        chunkSize: request.seqLen,
      });
      files.push(request.imatrix);
    }
    const notes: string[] = [];
    if (request.observers !== undefined) {
      const { recipe, output, statistics } = request.observers;
      const session = new CalibrationSession('text', recipe, DEFAULT_TTL_SECONDS, new Date());
      const observed = await observeFromText(request.model, windows, session, ctx);
      notes.push(`observers: ${observed.length} activations observed`);
      if (output !== undefined) {
        await writeFileAtomic(output, await session.qparamsFile(resources.compute));
        files.push(output);
      }
      if (statistics !== undefined) {
        if (session.stats.size === 0) {
          throw new QuantdError('NO_TENSOR_SELECTED', {
            detail: 'no rule of the recipe gathers layer statistics ({"match": …, "statistics": "linear"})',
          });
        }
        await writeLayerStats(statistics, session.stats, { 'quantd.calibration': 'text' });
        files.push(statistics);
      }
    }
    for (const method of ['gptq', 'awq'] as const) {
      const asked = request[method];
      if (asked === undefined) continue;
      const runner = new LayerRunner(spec, checkpoint, ctx);
      try {
        if (method === 'gptq') {
          await calibrateGptq(runner, windows, asked.output, request.gptq!.options, ctx);
        } else {
          notes.push(...(await calibrateAwq(runner, windows, asked.output, request.awq!.options, ctx)));
        }
      } finally {
        await runner.close();
      }
      files.push(asked.output);
    }
    return {
      windows: windows.length,
      tokens: windows.length * request.seqLen,
      seqLen: request.seqLen,
      files,
      notes,
      seconds: (performance.now() - started) / 1000,
      ...(tokensPerSecond !== undefined && { tokensPerSecond }),
    };
  } finally {
    await checkpoint.close();
    await rm(work, { recursive: true, force: true });
  }
}
