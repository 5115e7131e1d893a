/**
 * A Hugging Face folder's weights, opened and checked against its config.json before any tensor
 * is read: every float tensor has a llama.cpp name in the architecture (which also tells what it
 * is), the shape config.json implies, a layer within num_hidden_layers, and every block is
 * complete. The GGUF conversion and the ONNX decoder both start from this.
 */
import { floatDTypeOfSt } from '../../../core/dtypes.js';
import { QuantdError, shapeText } from '../../../errors/index.js';
import { SafetensorsFileReader } from '../../../format/safetensors-file.js';
import type { TensorEntry } from '../../../format/safetensors.js';
import type { Architecture } from './architectures.js';
import { hfInvalid, weightFiles } from './folder.js';
import type { Hyperparameters } from './hyperparameters.js';

export interface CheckpointTensor {
  readonly reader: SafetensorsFileReader;
  readonly entry: TensorEntry;
  /** llama.cpp's name of the tensor; null: not a weight it reads (integer buffers, inv_freq). */
  readonly ggufName: string | null;
}

export interface Checkpoint {
  /** Every tensor of every shard, in shard and file order. */
  readonly tensors: readonly CheckpointTensor[];
  close(): Promise<void>;
}

const LAYER = /^blk\.(\d+)\./;

function checkComplete(
  names: ReadonlySet<string>,
  arch: Architecture,
  h: Hyperparameters,
  dir: string,
): void {
  const required = ['token_embd.weight', 'output_norm.weight'];
  if (!h.tiedEmbeddings) required.push('output.weight');
  for (let i = 0; i < h.layers; i++) required.push(...arch.blockTensors.map((t) => `blk.${i}.${t}`));
  const missing = required.filter((n) => !names.has(n));
  if (missing.length > 0) {
    throw hfInvalid(
      dir,
      `config.json describes ${h.layers} layers but the weights lack ${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ` and ${missing.length - 3} more` : ''}`,
    );
  }
}

function checkTensor(
  reader: SafetensorsFileReader,
  entry: TensorEntry,
  arch: Architecture,
  h: Hyperparameters,
  configPath: string,
): string | null {
  const name = arch.tensorName(entry.name);
  if (name === null || floatDTypeOfSt(entry.dtype) === undefined) return null;
  if (name === undefined) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${reader.path}: tensor ${JSON.stringify(entry.name)} has no llama.cpp name in the ${arch.gguf} architecture`,
    });
  }
  const layer = LAYER.exec(name);
  const expected = arch.shapeOf(name, h);
  if (
    (layer && Number(layer[1]) >= h.layers) ||
    (expected !== undefined && shapeText(expected) !== shapeText(entry.shape))
  ) {
    throw hfInvalid(
      configPath,
      layer && Number(layer[1]) >= h.layers
        ? `num_hidden_layers is ${h.layers} but the weights hold ${entry.name}`
        : `contradicts the weights: ${entry.name} has shape ${shapeText(entry.shape)}, config.json implies ${shapeText(expected!)}`,
    );
  }
  return name;
}

/** Opens the folder's shards and checks every tensor (the readers are closed on failure). */
export async function openCheckpoint(
  dir: string,
  arch: Architecture,
  h: Hyperparameters,
  configPath: string,
): Promise<Checkpoint> {
  const readers: SafetensorsFileReader[] = [];
  const close = async (): Promise<void> => {
    for (const r of readers) await r.close();
  };
  try {
    for (const file of await weightFiles(dir)) readers.push(await SafetensorsFileReader.open(file));
    const tensors: CheckpointTensor[] = [];
    const names = new Set<string>();
    for (const reader of readers) {
      for (const entry of reader.header.entries) {
        const ggufName = checkTensor(reader, entry, arch, h, configPath);
        if (ggufName !== null) {
          if (names.has(ggufName)) throw new QuantdError('NAME_COLLISION', { source: dir, tensor: ggufName });
          names.add(ggufName);
        }
        tensors.push({ reader, entry, ggufName });
      }
    }
    checkComplete(names, arch, h, dir);
    return { tensors, close };
  } catch (err) {
    await close();
    throw err;
  }
}
