/**
 * A summary of a safetensors file of an interop layout (`quantd inspect` of a GPTQ, AWQ or
 * bitsandbytes NF4 / FP4 file): each weight it holds quantized — found and checked by the
 * layout's own reader (`quantizedWeights`), with its bits, group or block size and the tensors
 * that hold it —, the tensors stored as they are, the quantization config a loader would read
 * (the side file named after the file, else its folder's), and the scheme those agree on: bits
 * and group size from the tensors, sym / desc_act from the config.
 */
import { stat } from 'node:fs/promises';
import { ST_DTYPE_SIZE, numelOf, type StDType } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import { DATA_SHA256_KEY, SafetensorsFileReader } from '../format/index.js';
import type { InteropLayout, QuantizedWeight } from './layouts/types.js';
import { quantizationConfigOfFile, type FoundConfig } from './quantization-config-files.js';

/** What the quantized weights share (null where they differ, or nothing says). */
export interface LayoutScheme {
  readonly bits: number | null;
  readonly group_size: number | null;
  /** Symmetric codes: GPTQ's `sym`, AWQ's `zero_point` negated; null for bitsandbytes. */
  readonly sym: boolean | null;
  /** GPTQ's act-order (`desc_act`); null for the others. */
  readonly desc_act: boolean | null;
}

export interface StoredTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly bytes: number;
}

export interface LayoutFileSummary {
  readonly file: string;
  /** The layout: gptq, awq, nf4 or fp4. */
  readonly format: string;
  readonly size: number;
  readonly checksum: { readonly sha256: string; readonly verified: boolean } | null;
  readonly quantization_config: FoundConfig | null;
  readonly scheme: LayoutScheme;
  readonly quantized: readonly QuantizedWeight[];
  /** The tensors stored as they are (embeddings, norms, lm_head, ...). */
  readonly tensors: readonly StoredTensor[];
  /** Over the quantized weights: their elements, their stored bytes, and the bits per weight. */
  readonly total: { readonly weights: number; readonly bytes: number; readonly bits_per_weight: number };
}

/** The value every weight has, or null when they differ (or there is none). */
function shared<T>(values: readonly T[]): T | null {
  return values.length > 0 && values.every((v) => v === values[0]) ? values[0]! : null;
}

const flag = (config: FoundConfig | null, key: string): boolean | null => {
  const v = config?.config[key];
  return typeof v === 'boolean' ? v : null;
};

/** The scheme of `weights` of layout `format`, with what `config` says. */
export function layoutScheme(
  format: string,
  weights: readonly QuantizedWeight[],
  config: FoundConfig | null,
): LayoutScheme {
  const zeroPoint = flag(config, 'zero_point');
  return {
    bits: shared(weights.map((w) => w.bits)),
    group_size: shared(weights.map((w) => w.group_size)),
    sym: format === 'gptq' ? flag(config, 'sym') : format === 'awq' && zeroPoint !== null ? !zeroPoint : null,
    desc_act: format === 'gptq' ? flag(config, 'desc_act') : null,
  };
}

/** Elements, bytes and bits per weight of quantized weights together. */
export function weightTotals(weights: readonly QuantizedWeight[]): LayoutFileSummary['total'] {
  const count = weights.reduce((n, w) => n + numelOf(w.shape), 0);
  const bytes = weights.reduce((n, w) => n + w.bytes, 0);
  return {
    weights: count,
    bytes,
    bits_per_weight: count === 0 ? 0 : Math.round(((bytes * 8) / count) * 1e4) / 1e4,
  };
}

/** The quantized weights of an open file of `layout`, and the tensors stored as they are. */
export async function layoutContents(
  reader: SafetensorsFileReader,
  layout: InteropLayout,
): Promise<{ quantized: readonly QuantizedWeight[]; tensors: StoredTensor[] }> {
  if (!layout.quantizedWeights) {
    throw new QuantdError('INTERNAL', { detail: `layout ${layout.name} lists no quantized weights` });
  }
  const quantized = await layout.quantizedWeights(reader);
  const members = new Set(quantized.flatMap((w) => w.stored));
  const tensors = reader.header.entries
    .filter((e) => !members.has(e.name))
    .map((e) => ({
      name: e.name,
      dtype: e.dtype,
      shape: e.shape,
      bytes: numelOf(e.shape) * ST_DTYPE_SIZE[e.dtype as StDType],
    }));
  return { quantized, tensors };
}

/**
 * Summarizes the file at `path` of `layout`. `verify`: check its recorded data SHA-256
 * (CHECKSUM_MISSING / CHECKSUM_MISMATCH), as for any safetensors file.
 */
export async function summarizeLayoutFile(
  path: string,
  layout: InteropLayout,
  verify = false,
): Promise<LayoutFileSummary> {
  const reader = await SafetensorsFileReader.open(path);
  try {
    if (verify) {
      const check = await reader.verifyChecksum();
      if (check === null) throw new QuantdError('CHECKSUM_MISSING', { path });
      if (!check.ok) throw new QuantdError('CHECKSUM_MISMATCH', { path, ...check });
    }
    const { quantized, tensors } = await layoutContents(reader, layout);
    const config = await quantizationConfigOfFile(path);
    const sha256 = reader.header.metadata?.[DATA_SHA256_KEY];
    return {
      file: path,
      format: layout.name,
      size: (await stat(path)).size,
      checksum: sha256 === undefined ? null : { sha256, verified: verify },
      quantization_config: config,
      scheme: layoutScheme(layout.name, quantized, config),
      quantized,
      tensors,
      total: weightTotals(quantized),
    };
  } finally {
    await reader.close();
  }
}
