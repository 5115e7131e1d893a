/**
 * A model folder in a safetensors layout (GPTQ, AWQ, NF4/FP4, compressed-tensors): the folder's
 * weights, one file or shards with their index, become the same files in the layout, and the
 * folder out loads where its users load it — `quantize_config.json` / `quantization_config.json`
 * inside it, config.json with its `quantization_config` (for transformers' from_pretrained and
 * vLLM), and the input's other files copied byte for byte (../model-folder.ts).
 *
 * Everything the run could refuse is refused before the first tensor is written: the options,
 * a model without any linear weight, a config.json that is not a JSON object or is quantized
 * already, a file to copy that cannot be read. Files are staged in a hidden directory and moved into place when all are complete;
 * the index, config.json and side file come after them.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { throwIfAborted } from '../../errors/index.js';
import { readTextIfAny, writeFileAtomic } from '../../format/file-io.js';
import { SafetensorsFileReader } from '../../format/safetensors-file.js';
import {
  companionFiles,
  copyCompanions,
  isDirectory,
  openOutputFolder,
  removeCreated,
} from '../model-folder.js';
import type { Progress } from '../model.js';
import { INDEX_SUFFIX, encodeIndex, resolveModelInput, type ModelInput } from '../shards.js';
import { isLinearWeight, noLinear } from './linear-common.js';
import { checkModelConfig, withQuantizationConfig } from './quantization-config.js';
import type { LayoutHooks } from './run-jobs.js';
import { mergeFacts } from './safetensors-parts.js';
import type {
  InteropLayout,
  LayoutFile,
  LayoutOptions,
  LayoutWriteResult,
  SafetensorsLayoutParts,
} from './types.js';

const CONFIG = 'config.json';

interface ModelTotals {
  readonly tensors: number;
  readonly bytes: number;
  /** Each file's data bytes, in model.files order. */
  readonly fileBytes: readonly number[];
}

/** Counts the model's tensors and bytes (for progress) and refuses one without a linear weight. */
async function modelTotals(model: ModelInput): Promise<ModelTotals> {
  let tensors = 0;
  let bytes = 0;
  let linear = false;
  const fileBytes: number[] = [];
  for (const file of model.files) {
    const reader = await SafetensorsFileReader.open(file);
    try {
      tensors += reader.header.entries.length;
      bytes += reader.header.dataLength;
      fileBytes.push(reader.header.dataLength);
      linear ||= reader.header.entries.some(isLinearWeight);
    } finally {
      await reader.close();
    }
  }
  if (!linear) throw noLinear();
  return { tensors, bytes, fileBytes };
}

/** The input's config.json text, checked; null when the folder has none. */
async function readModelConfig(folder: string): Promise<string | null> {
  const path = join(folder, CONFIG);
  const text = await readTextIfAny(path);
  if (text === null) return null;
  checkModelConfig(text, path);
  return text;
}

/** The model's name without extension: "model" for model.safetensors or its index. */
function modelBaseName(model: ModelInput): string {
  return model.index !== null
    ? basename(model.index).slice(0, -INDEX_SUFFIX.length)
    : basename(model.files[0]!).replace(/\.safetensors$/, '');
}

/** Progress over the whole model, from each file's own (which restarts at zero). */
function modelProgress(hooks: LayoutHooks, totals: ModelTotals) {
  const done = { tensors: 0, bytes: 0 };
  const onProgress = hooks.onProgress;
  const forFile: LayoutHooks = {
    ...hooks,
    onProgress:
      onProgress &&
      ((p: Progress) =>
        onProgress({
          tensorsDone: done.tensors + p.tensorsDone,
          tensorsTotal: totals.tensors,
          bytesDone: done.bytes + p.bytesDone,
          bytesTotal: totals.bytes,
          tensor: p.tensor,
        })),
  };
  const fileDone = (tensors: number, bytes: number): void => {
    done.tensors += tensors;
    done.bytes += bytes;
  };
  return { forFile, fileDone };
}

/** Writes the model folder `input` in `layout` into the folder `output` (see the file comment). */
export async function writeLayoutFolder(
  layout: InteropLayout,
  parts: SafetensorsLayoutParts,
  input: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks = {},
): Promise<LayoutWriteResult> {
  layout.checkOptions(options);
  const model = await resolveModelInput(input);
  const totals = await modelTotals(model);
  const configText = await readModelConfig(input);
  // a statistics file given in the folder (calibration=FILE) is the run's input, not the model's
  const statistics = options['calibration'] !== undefined ? resolve(input, options['calibration']) : null;
  const companions = (await companionFiles(input)).filter((name) => resolve(input, name) !== statistics);
  const created = await openOutputFolder(output, input, model.index ? 'a sharded model' : 'a model folder');
  const staging = join(output, `.quantd-staging-${randomBytes(6).toString('hex')}`);
  const { forFile, fileDone } = modelProgress(hooks, totals);
  let done = false;
  await mkdir(staging);
  try {
    const written: Array<{ readonly name: string; readonly file: LayoutFile }> = [];
    for (const [i, path] of model.files.entries()) {
      throwIfAborted(hooks.signal);
      const name = basename(path);
      const file = await parts.writeTensors(path, join(staging, name), options, forFile, model.files);
      written.push({ name, file });
      fileDone(file.tensors.length, totals.fileBytes[i]!);
    }
    const files: string[] = [];
    for (const { name } of written) {
      await rename(join(staging, name), join(output, name));
      files.push(join(output, name));
    }
    if (model.index !== null) {
      const index = join(output, basename(model.index));
      const shards = written.map(({ name, file }) => ({
        file: name,
        tensors: file.names,
        dataBytes: file.dataBytes,
      }));
      await writeFileAtomic(index, encodeIndex(shards, model.indexMetadata));
      files.push(index);
    }
    files.push(...(await copyCompanions(input, output, companions)));
    const facts = mergeFacts(written.map((w) => w.file.facts));
    const config = parts.quantizationConfig(options, facts, modelBaseName(model));
    const side = join(output, config.sideFile);
    await writeFileAtomic(side, config.sideText);
    if (!files.includes(side)) files.push(side);
    if (configText !== null) {
      await writeFileAtomic(join(output, CONFIG), withQuantizationConfig(configText, config.configText));
    }
    done = true;
    return { files, tensors: written.flatMap((w) => w.file.tensors) };
  } finally {
    await rm(staging, { recursive: true, force: true });
    if (!done && created !== undefined) await removeCreated(output, created);
  }
}

/**
 * Writes `input` in `layout`: a model folder of a safetensors layout as a model folder, anything
 * else through the layout's own write (one file, or GGUF's whole-folder conversion).
 */
export async function writeLayoutOutput(
  layout: InteropLayout,
  input: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks = {},
): Promise<LayoutWriteResult> {
  if (layout.parts !== undefined && (await isDirectory(input))) {
    return writeLayoutFolder(layout, layout.parts, input, output, options, hooks);
  }
  return layout.write(input, output, options, hooks);
}
