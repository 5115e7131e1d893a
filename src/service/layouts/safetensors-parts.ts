/**
 * What the safetensors layouts (GPTQ, AWQ, NF4/FP4, compressed-tensors) build on their
 * SafetensorsLayoutParts: the summary of a written file, and the single-file write (tensors plus a
 * side file named after the output). Model folders are written from the same parts by
 * ./write-folder.ts.
 */
import { basename } from 'node:path';

import { floatDTypeOfSt, type FloatDType } from '../../core/dtypes.js';
import type { TensorEntry } from '../../format/safetensors.js';
import { writeFileAtomic } from '../../format/file-io.js';
import type { StatsOutputError } from '../../core/stats-error.js';
import { planBytes, unquantizedModules, type Job } from './linear-common.js';
import { sideFilePath } from './quantization-config.js';
import type { LayoutHooks } from './run-jobs.js';
import type {
  LayoutFacts,
  LayoutFile,
  LayoutOptions,
  LayoutWriteResult,
  SafetensorsLayoutParts,
} from './types.js';

/** A tensor's row of the report while the file is written (the encoder's remarks come later). */
export interface ReportRow {
  type: string;
  note?: string;
  output_error?: StatsOutputError;
}

/** The facts of one file: its unquantized 2-D weights' modules, its quantized weights' dtypes. */
export function factsOf(entries: readonly TensorEntry[], quantized: ReadonlySet<string>): LayoutFacts {
  const dtypes = new Set<FloatDType>();
  for (const e of entries) if (quantized.has(e.name)) dtypes.add(floatDTypeOfSt(e.dtype)!);
  return { notConverted: unquantizedModules(entries, quantized), weightDTypes: [...dtypes] };
}

/** The facts of a whole model from those of its files. */
export function mergeFacts(files: readonly LayoutFacts[]): LayoutFacts {
  return {
    notConverted: files.flatMap((f) => f.notConverted),
    weightDTypes: [...new Set(files.flatMap((f) => f.weightDTypes))],
  };
}

/** A written file's summary from the jobs that wrote it. */
export function layoutFile(
  jobs: readonly Job[],
  tensors: LayoutFile['tensors'],
  facts: LayoutFacts,
): LayoutFile {
  const outputs = jobs.flatMap((j) => j.outputs);
  return {
    tensors,
    names: outputs.map((t) => t.name),
    dataBytes: outputs.reduce((n, t) => n + planBytes(t), 0),
    facts,
  };
}

/** InteropLayout.write of a safetensors layout: one file, and its side file named after it. */
export function singleFileWrite(parts: SafetensorsLayoutParts) {
  return async function write(
    input: string,
    output: string,
    options: LayoutOptions,
    hooks: LayoutHooks = {},
  ): Promise<LayoutWriteResult> {
    const file = await parts.writeTensors(input, output, options, hooks, null);
    const base = basename(output).replace(/\.safetensors$/, '');
    const config = parts.quantizationConfig(options, file.facts, base);
    const side = sideFilePath(output, config.sideFile);
    await writeFileAtomic(side, config.sideText);
    return { files: [output, side], tensors: file.tensors };
  };
}
