/**
 * A summary of a GGUF file (`quantd inspect FILE.gguf`): its tensors with their ggml types,
 * shapes, bytes and bits per weight, the count and bytes of each type, the metadata (arrays by
 * their type and length: a vocabulary is tens of thousands of strings) and what a tokenizer is
 * made of. Read from the header alone (GgufFileReader): the data section is never read.
 */
import { LLAMA_FILE_TYPES } from '../core/interop/llama-mixtures.js';
import { GgufFileReader } from '../format/gguf-file.js';
import type { GgufValue } from '../format/gguf.js';

export interface GgufTensorSummary {
  readonly name: string;
  /** ggml's type name: F32, F16, Q4_K, ... */
  readonly type: string;
  /** Row-major, as safetensors and torch give it (GGUF stores ne[0], the row length, first). */
  readonly shape: readonly number[];
  readonly bytes: number;
  readonly bits_per_weight: number;
}

/** A metadata value: a scalar as it is (64-bit integers as numbers when exact, else text). */
export type GgufMetadataValue =
  | number
  | string
  | boolean
  | {
      readonly array: string;
      readonly length: number;
      readonly values?: readonly (number | string | boolean)[];
    };

export interface GgufTokenizerSummary {
  /** tokenizer.ggml.model: llama (SentencePiece), gpt2 (byte-level BPE), ... */
  readonly model: string | null;
  /** tokenizer.ggml.pre: the pre-tokenizer of a BPE vocabulary. */
  readonly pre: string | null;
  readonly vocab_size: number;
  readonly merges: number;
  /** tokenizer.ggml.*_token_id: bos, eos, unknown, padding, separator, ... */
  readonly special: Readonly<Record<string, number>>;
  readonly add_bos: boolean | null;
  readonly add_eos: boolean | null;
  readonly chat_template: boolean;
}

export interface GgufSummary {
  readonly file: string;
  readonly format: 'gguf';
  readonly version: number;
  readonly size: number;
  readonly architecture: string | null;
  readonly name: string | null;
  /** general.file_type: llama.cpp's llama_ftype, by its number and llama-quantize's name. */
  readonly file_type: { readonly id: number; readonly name: string | null } | null;
  readonly alignment: number;
  readonly metadata: Readonly<Record<string, GgufMetadataValue>>;
  readonly tokenizer: GgufTokenizerSummary | null;
  /** Per ggml type, in order of first appearance: tensors, weights, bytes. */
  readonly types: Readonly<Record<string, { tensors: number; weights: number; bytes: number }>>;
  readonly tensors: readonly GgufTensorSummary[];
  readonly total: { readonly weights: number; readonly bytes: number; readonly bits_per_weight: number };
}

/** Arrays up to this long are shown whole (a rope's sections, a layer's head counts). */
const SHOWN_ARRAY = 16;

/** llama_ftype values that are not llama-quantize file types quantd writes. */
const PLAIN_FILE_TYPES: Readonly<Record<number, string>> = { 0: 'F32', 1: 'F16', 32: 'BF16' };

const bitsPerWeight = (bytes: number, weights: number): number =>
  weights === 0 ? 0 : Math.round(((bytes * 8) / weights) * 1e4) / 1e4;

function scalar(v: GgufValue): number | string | boolean {
  if (v.type === 'uint64' || v.type === 'int64') {
    const n = Number(v.value);
    return Number.isSafeInteger(n) ? n : v.value.toString();
  }
  return v.value as number | string | boolean;
}

function metadataValue(v: GgufValue): GgufMetadataValue {
  if (v.type !== 'array') return scalar(v);
  const shown = v.value.length <= SHOWN_ARRAY && v.itemType !== 'array';
  return {
    array: v.itemType,
    length: v.value.length,
    ...(shown && { values: v.value.map(scalar) }),
  };
}

function tokenizerOf(kvs: ReadonlyMap<string, GgufValue>): GgufTokenizerSummary | null {
  const prefix = 'tokenizer.ggml.';
  if (![...kvs.keys()].some((k) => k.startsWith(prefix))) return null;
  const text = (key: string): string | null => {
    const v = kvs.get(key);
    return v?.type === 'string' ? v.value : null;
  };
  const flag = (key: string): boolean | null => {
    const v = kvs.get(key);
    return v?.type === 'bool' ? v.value : null;
  };
  const length = (key: string): number => {
    const v = kvs.get(key);
    return v?.type === 'array' ? v.value.length : 0;
  };
  const special: Record<string, number> = {};
  for (const [key, v] of kvs) {
    const m = /^tokenizer\.ggml\.(\w+)_token_id$/.exec(key);
    if (m && v.type !== 'array' && v.type !== 'string' && v.type !== 'bool') special[m[1]!] = Number(v.value);
  }
  return {
    model: text(`${prefix}model`),
    pre: text(`${prefix}pre`),
    vocab_size: length(`${prefix}tokens`),
    merges: length(`${prefix}merges`),
    special,
    add_bos: flag(`${prefix}add_bos_token`),
    add_eos: flag(`${prefix}add_eos_token`),
    chat_template: kvs.has('tokenizer.chat_template'),
  };
}

function fileTypeOf(kvs: ReadonlyMap<string, GgufValue>): GgufSummary['file_type'] {
  const v = kvs.get('general.file_type');
  if (v === undefined || v.type === 'array' || v.type === 'string' || v.type === 'bool') return null;
  const id = Number(v.value);
  const named = [...LLAMA_FILE_TYPES.values()].find((t) => t.ftype === id);
  return { id, name: named?.name ?? PLAIN_FILE_TYPES[id] ?? null };
}

/** Summarizes the GGUF file at `path` (GGUF_INVALID for a malformed header). */
export async function summarizeGguf(path: string): Promise<GgufSummary> {
  const reader = await GgufFileReader.open(path);
  try {
    const { header } = reader;
    const kvs = header.kvs;
    const text = (key: string): string | null => {
      const v = kvs.get(key);
      return v?.type === 'string' ? v.value : null;
    };
    const types: Record<string, { tensors: number; weights: number; bytes: number }> = {};
    const tensors = header.tensors.map((t): GgufTensorSummary => {
      const row = (types[t.type.name] ??= { tensors: 0, weights: 0, bytes: 0 });
      row.tensors += 1;
      row.weights += t.numel;
      row.bytes += t.bytes;
      return {
        name: t.name,
        type: t.type.name,
        shape: [...t.dims].reverse(),
        bytes: t.bytes,
        bits_per_weight: bitsPerWeight(t.bytes, t.numel),
      };
    });
    const weights = header.tensors.reduce((n, t) => n + t.numel, 0);
    const bytes = header.tensors.reduce((n, t) => n + t.bytes, 0);
    return {
      file: path,
      format: 'gguf',
      version: header.version,
      size: reader.size,
      architecture: text('general.architecture'),
      name: text('general.name'),
      file_type: fileTypeOf(kvs),
      alignment: header.alignment,
      metadata: Object.fromEntries([...kvs].map(([k, v]) => [k, metadataValue(v)])),
      tokenizer: tokenizerOf(kvs),
      types,
      tensors,
      total: { weights, bytes, bits_per_weight: bitsPerWeight(bytes, weights) },
    };
  } finally {
    await reader.close();
  }
}
