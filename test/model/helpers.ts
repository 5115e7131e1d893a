/**
 * Helpers for the whole-model tests: the synthetic llama-like model (scripts/synthetic-model.js),
 * an independent safetensors parser written from the format's spec (8-byte little-endian header
 * length, JSON header, data offsets relative to the data section) that shares no code with
 * src/format, the data-section SHA-256 computed here, and scratch directories.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { bfloat16BitsFromFloat32, float16BitsFromFloat32 } from '../../src/core/float16.js';
import { REPO } from '../cli/run-cli.js';

export type SynthDType = 'F32' | 'F16' | 'BF16' | 'I64';
export type SynthTensor = [name: string, dtype: SynthDType, shape: number[]];

/** The API of scripts/synthetic-model.js (plain JS, typed here). */
export interface SyntheticModel {
  llamaTensors(options?: { layers?: number; hidden?: number }): SynthTensor[];
  tensorBytes(name: string, dtype: SynthDType, shape: readonly number[]): Uint8Array;
  writeModelFile(path: string, tensors: readonly SynthTensor[]): number;
  writeShardedModel(dir: string, tensors: readonly SynthTensor[], shards: number): number;
}

export async function synthetic(): Promise<SyntheticModel> {
  const url = pathToFileURL(join(REPO, 'scripts', 'synthetic-model.js')).href;
  return (await import(url)) as SyntheticModel;
}

export interface RawTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly offsets: readonly [number, number];
  readonly data: Buffer;
}

export interface RawFile {
  readonly headerLength: number;
  readonly metadata: Record<string, string> | null;
  /** In data order. */
  readonly tensors: readonly RawTensor[];
  readonly byName: ReadonlyMap<string, RawTensor>;
  readonly data: Buffer;
}

const SIZES: Readonly<Record<string, number>> = {
  BOOL: 1, U8: 1, I8: 1, F8_E4M3: 1, F8_E5M2: 1, I16: 2, U16: 2, F16: 2, BF16: 2,
  I32: 4, U32: 4, F32: 4, I64: 8, U64: 8, F64: 8,
}; // prettier-ignore

/**
 * A safetensors parser from the spec alone, strict about what every reader relies on: the
 * length prefix, a JSON object header, offsets that tile the data section exactly, each tensor's
 * byte length = numel × dtype size.
 */
export function parseRaw(bytes: Buffer): RawFile {
  if (bytes.length < 8) throw new Error('shorter than the 8-byte prefix');
  const n = Number(bytes.readBigUInt64LE(0));
  if (8 + n > bytes.length) throw new Error(`header length ${n} past the end`);
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8')) as Record<string, unknown>;
  const data = bytes.subarray(8 + n);
  const metadata = (header['__metadata__'] as Record<string, string> | undefined) ?? null;
  const tensors: RawTensor[] = [];
  for (const [name, value] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, data_offsets } = value as {
      dtype: string;
      shape: number[];
      data_offsets: number[];
    };
    const [begin, end] = data_offsets as [number, number];
    const size = SIZES[dtype];
    if (size === undefined) throw new Error(`${name}: unknown dtype ${dtype}`);
    if (end - begin !== shape.reduce((a, b) => a * b, size)) throw new Error(`${name}: byte length`);
    tensors.push({ name, dtype, shape, offsets: [begin, end], data: data.subarray(begin, end) });
  }
  tensors.sort((a, b) => a.offsets[0] - b.offsets[0]);
  let at = 0;
  for (const t of tensors) {
    if (t.offsets[0] !== at) throw new Error(`${t.name}: gap or overlap at ${at}`);
    at = t.offsets[1];
  }
  if (at !== data.length) throw new Error(`data section of ${data.length} bytes, tensors cover ${at}`);
  return { headerLength: n, metadata, tensors, byName: new Map(tensors.map((t) => [t.name, t])), data };
}

export function readRaw(path: string): RawFile {
  return parseRaw(readFileSync(path));
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** A scratch directory under the system temp dir, removed by cleanup(). */
export function tempRoot(prefix = 'quantd-model-'): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Every entry under `dir`, hidden ones included, sorted. */
export function tree(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).sort();
}

/** Byte equality with the first differing offset in the message. */
export function sameBytes(actual: Uint8Array, expected: Uint8Array): string | null {
  const a = Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength);
  const e = Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength);
  if (a.equals(e)) return null;
  let i = 0;
  while (i < Math.min(a.length, e.length) && a[i] === e[i]) i++;
  return `${a.length} bytes vs ${e.length}; first difference at byte ${i}`;
}

/** The recipe of docs/models.md, with one rule that matches nothing (it must be reported). */
export const DOC_RECIPE = {
  default: { qdtype: 'int8', scheme: 'per_channel' },
  rules: [
    { glob: '*.embed_tokens.*', skip: true },
    { glob: '*.mlp.*', qdtype: 'int4', scheme: 'per_group', group_size: 128, mode: 'symmetric' },
    { regex: 'self_attn\\.(q|k|v)_proj', qdtype: 'int8', scheme: 'per_channel' },
    { glob: '*.cross_attn.*', name: 'never matches', skip: true },
  ],
};

/** The CLI spec flags of each rule of DOC_RECIPE that quantizes, by report label. */
export const DOC_RULE_FLAGS: Readonly<Record<string, readonly string[]>> = {
  'rule 2 (*.mlp.*)': [
    '--qdtype',
    'int4',
    '--scheme',
    'per_group',
    '--group-size',
    '128',
    '--mode',
    'symmetric',
  ],
  'rule 3 (re:self_attn\\.(q|k|v)_proj)': ['--qdtype', 'int8', '--scheme', 'per_channel'],
  default: ['--qdtype', 'int8', '--scheme', 'per_channel'],
};

/** A float tensor of test data: its name, dtype and shape, and values to plant (NaN, ±Infinity). */
export interface PlantedSpec {
  readonly name: string;
  readonly dtype: 'F32' | 'F16' | 'BF16';
  readonly shape: readonly number[];
  /** Values to plant: flat index → value. */
  readonly plant?: Readonly<Record<number, number>>;
}

/**
 * The bytes of `spec`: a linear congruential stream in [-0.5, 0.5) scaled by `scale(i)`, the
 * planted values set, rounded to float16 / bfloat16 where the dtype says.
 */
export function plantedBytes(
  spec: PlantedSpec,
  seed: number,
  scale: (i: number) => number = (i) => 1 + (i % 7),
): Uint8Array {
  const n = spec.shape.reduce((a, b) => a * b, 1);
  const x = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = (s / 2 ** 32 - 0.5) * scale(i);
  }
  for (const [i, v] of Object.entries(spec.plant ?? {})) x[Number(i)] = v;
  if (spec.dtype === 'F32') return new Uint8Array(x.buffer);
  const half = spec.dtype === 'F16' ? float16BitsFromFloat32 : bfloat16BitsFromFloat32;
  return new Uint8Array(Uint16Array.from(x, (v) => half(v)).buffer);
}
