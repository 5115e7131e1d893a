/**
 * Helpers for the GPTQ / AWQ / bitsandbytes layout tests: the golden files' hex words, a minimal
 * safetensors writer for hand-made inputs (written here from the format's spec, sharing no code
 * with src/format), and the synthetic llama-like model of scripts/synthetic-model.js.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { float32FromBfloat16Bits, float32FromFloat16Bits } from '../../src/core/float16.js';
import { synthetic, type SynthTensor } from '../model/helpers.js';

export { readRaw, sameBytes, tempRoot, tree, type RawFile, type RawTensor } from '../model/helpers.js';

export const GOLDEN = join(import.meta.dirname, 'golden');

export function golden<T>(file: string): { note: string; cases: T[] } {
  return JSON.parse(readFileSync(join(GOLDEN, file), 'utf8')) as { note: string; cases: T[] };
}

export const words = (hex: readonly string[]): number[] => hex.map((h) => Number.parseInt(h, 16));

/** The values of a golden weight: 16-bit words for float16/bfloat16, 32-bit for float32. */
export function goldenWeight(hex: readonly string[], dtype: string): Float32Array {
  const w = words(hex);
  if (dtype === 'float16') return Float32Array.from(w, float32FromFloat16Bits);
  if (dtype === 'bfloat16') return Float32Array.from(w, float32FromBfloat16Bits);
  return new Float32Array(Uint32Array.from(w).buffer);
}

/** The raw little-endian bytes of a golden weight in its own dtype. */
export function goldenWeightBytes(hex: readonly string[], dtype: string): Uint8Array {
  const w = words(hex);
  return dtype === 'float32'
    ? new Uint8Array(Uint32Array.from(w).buffer)
    : new Uint8Array(Uint16Array.from(w).buffer);
}

export const hex32 = (a: ArrayLike<number>): string[] =>
  Array.from(a, (v) => `0x${(v >>> 0).toString(16).padStart(8, '0')}`);
export const hex16 = (a: ArrayLike<number>): string[] =>
  Array.from(a, (v) => `0x${(v & 0xffff).toString(16).padStart(4, '0')}`);

export const ST_DTYPE = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' } as const;

export interface InputTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** Writes a safetensors file: 8-byte LE header length, JSON header, tensors back to back. */
export function writeSafetensors(path: string, tensors: readonly InputTensor[]): void {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.length] };
    offset += t.data.length;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  writeFileSync(path, Buffer.concat([prefix, Buffer.from(json), ...tensors.map((t) => Buffer.from(t.data))]));
}

export const f32Bytes = (values: ArrayLike<number>): Uint8Array =>
  new Uint8Array(Float32Array.from(values).buffer);

/** The synthetic llama-like model with `layers` layers (bf16 / f16 projections, f32 norms, an I64 buffer). */
export async function writeLlama(path: string, layers = 2, hidden = 128): Promise<SynthTensor[]> {
  const model = await synthetic();
  const tensors = model.llamaTensors({ layers, hidden });
  model.writeModelFile(path, tensors);
  return tensors;
}

/** The float32 values of a raw tensor of dtype F32 / F16 / BF16. */
export function floatsOf(t: { dtype: string; data: Uint8Array }): Float32Array {
  const bytes = Uint8Array.from(t.data);
  if (t.dtype === 'F32') return new Float32Array(bytes.buffer);
  const halves = new Uint16Array(bytes.buffer);
  return Float32Array.from(halves, t.dtype === 'F16' ? float32FromFloat16Bits : float32FromBfloat16Bits);
}

export const int32sOf = (t: { data: Uint8Array }): Int32Array =>
  new Int32Array(Uint8Array.from(t.data).buffer);
export const uint16sOf = (t: { data: Uint8Array }): Uint16Array =>
  new Uint16Array(Uint8Array.from(t.data).buffer);

/** Runs `f` and returns the QuantdError code it throws (or 'none'). */
export async function errorCode(f: () => unknown): Promise<string> {
  try {
    await f();
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
  return 'none';
}

/** The first bytes of a file, as detect() is given them. */
export function head(path: string, bytes = 4096): Uint8Array {
  return Uint8Array.from(readFileSync(path).subarray(0, bytes));
}
