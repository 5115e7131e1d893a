/**
 * A summary of a model folder (`quantd inspect FOLDER`): its weight files (one, or the shards its
 * index names), how many tensors of which stored dtypes, the bytes on disk, the quantization
 * config a loader would find — config.json's `quantization_config`, else the side file a layout
 * wrote (AutoGPTQ's quantize_config.json, or quantization_config.json) — and, for a folder of a
 * layout's weight files (GPTQ, AWQ, bitsandbytes), the weights they hold quantized.
 */
import { stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { DATA_SHA256_KEY, SafetensorsFileReader } from '../format/index.js';
import { layoutContents, layoutScheme, weightTotals, type LayoutScheme } from './inspect-layout.js';
import { detectLayout } from './layouts/detect.js';
import type { QuantizedWeight } from './layouts/types.js';
import { quantizationConfigOf, type FoundConfig } from './quantization-config-files.js';
import { resolveModelInput } from './shards.js';

export interface FolderShard {
  readonly file: string;
  readonly tensors: number;
  /** The file's size on disk. */
  readonly bytes: number;
  /** The data SHA-256 it records, and whether it was checked (inspect --verify). */
  readonly checksum: { readonly sha256: string; readonly verified: boolean } | null;
}

export interface FolderSummary {
  readonly folder: string;
  /** The index file's name, or null for a folder with one weight file. */
  readonly index: string | null;
  readonly shards: readonly FolderShard[];
  readonly tensors: number;
  /** Stored dtype (safetensors name) → number of tensors, in order of first appearance. */
  readonly dtypes: Readonly<Record<string, number>>;
  /** The weight files' bytes on disk, together. */
  readonly bytes: number;
  /** Where the quantization config was found, and the config; null when there is none. */
  readonly quantization_config: FoundConfig | null;
  /** The layout its weight files are of (gptq, awq, nf4, fp4) and their quantized weights; null for others. */
  readonly layout: {
    readonly format: string;
    readonly scheme: LayoutScheme;
    /** Every shard's, in shard order. */
    readonly quantized: readonly QuantizedWeight[];
    readonly total: { readonly weights: number; readonly bytes: number; readonly bits_per_weight: number };
  } | null;
}

/**
 * Summarizes the model folder `folder` (its index is checked against its shards, as a run would).
 * `verify`: check each shard's recorded data SHA-256 (CHECKSUM_MISSING / CHECKSUM_MISMATCH).
 */
export async function summarizeFolder(folder: string, verify = false): Promise<FolderSummary> {
  const model = await resolveModelInput(folder);
  const shards: FolderShard[] = [];
  const dtypes: Record<string, number> = {};
  const quantized: QuantizedWeight[] = [];
  let format: string | null = null;
  for (const path of model.files) {
    const layout = await detectLayout(path);
    const reader = await SafetensorsFileReader.open(path);
    try {
      if (layout?.quantizedWeights) {
        format ??= layout.name;
        quantized.push(...(await layoutContents(reader, layout)).quantized);
      }
      if (verify) {
        const check = await reader.verifyChecksum();
        if (check === null) throw new QuantdError('CHECKSUM_MISSING', { path });
        if (!check.ok) throw new QuantdError('CHECKSUM_MISMATCH', { path, ...check });
      }
      for (const e of reader.header.entries) dtypes[e.dtype] = (dtypes[e.dtype] ?? 0) + 1;
      const sha256 = reader.header.metadata?.[DATA_SHA256_KEY];
      shards.push({
        file: basename(path),
        tensors: reader.header.entries.length,
        bytes: (await stat(path)).size,
        checksum: sha256 === undefined ? null : { sha256, verified: verify },
      });
    } finally {
      await reader.close();
    }
  }
  const config = await quantizationConfigOf(folder);
  return {
    folder,
    index: model.index === null ? null : basename(model.index),
    shards,
    tensors: shards.reduce((n, s) => n + s.tensors, 0),
    dtypes,
    bytes: shards.reduce((n, s) => n + s.bytes, 0),
    quantization_config: config,
    layout:
      format === null
        ? null
        : {
            format,
            scheme: layoutScheme(format, quantized, config),
            quantized,
            total: weightTotals(quantized),
          },
  };
}
