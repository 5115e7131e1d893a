/**
 * A summary of a model folder (`quantd inspect FOLDER`): its weight files (one, or the shards its
 * index names), how many tensors of which stored dtypes, the bytes on disk, and the quantization
 * config a loader would find — config.json's `quantization_config`, else the side file a layout
 * wrote (AutoGPTQ's quantize_config.json, or quantization_config.json).
 */
import { stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { DATA_SHA256_KEY, SafetensorsFileReader } from '../format/index.js';
import { readTextIfAny } from '../format/file-io.js';
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
  readonly quantization_config: {
    readonly file: string;
    readonly config: Readonly<Record<string, unknown>>;
  } | null;
}

/** The files a quantization config is looked for in, first found wins, with how to take it out. */
const CONFIG_SOURCES: ReadonlyArray<readonly [string, (json: Record<string, unknown>) => unknown]> = [
  ['config.json', (json) => json['quantization_config']],
  ['quantize_config.json', (json) => json],
  ['quantization_config.json', (json) => json['quantization_config']],
];

async function readJsonObject(path: string): Promise<Record<string, unknown> | null> {
  const text = await readTextIfAny(path);
  if (text === null) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new QuantdError('HF_MODEL_INVALID', {
      path,
      detail: `is not valid JSON (${(err as Error).message})`,
    });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new QuantdError('HF_MODEL_INVALID', { path, detail: 'is not a JSON object' });
  }
  return json as Record<string, unknown>;
}

async function quantizationConfigOf(folder: string): Promise<FolderSummary['quantization_config']> {
  for (const [file, take] of CONFIG_SOURCES) {
    const json = await readJsonObject(join(folder, file));
    const config = json === null ? undefined : take(json);
    if (typeof config === 'object' && config !== null && !Array.isArray(config)) {
      return { file, config: config as Record<string, unknown> };
    }
  }
  return null;
}

/**
 * Summarizes the model folder `folder` (its index is checked against its shards, as a run would).
 * `verify`: check each shard's recorded data SHA-256 (CHECKSUM_MISSING / CHECKSUM_MISMATCH).
 */
export async function summarizeFolder(folder: string, verify = false): Promise<FolderSummary> {
  const model = await resolveModelInput(folder);
  const shards: FolderShard[] = [];
  const dtypes: Record<string, number> = {};
  for (const path of model.files) {
    const reader = await SafetensorsFileReader.open(path);
    try {
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
  return {
    folder,
    index: model.index === null ? null : basename(model.index),
    shards,
    tensors: shards.reduce((n, s) => n + s.tensors, 0),
    dtypes,
    bytes: shards.reduce((n, s) => n + s.bytes, 0),
    quantization_config: await quantizationConfigOf(folder),
  };
}
