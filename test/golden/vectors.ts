/** Reads the committed golden vectors (made by generate.py with PyTorch; see its docstring). */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface GoldenTensor {
  readonly dtype: string;
  readonly shape: number[];
  readonly data: string;
}

export interface GoldenCase {
  readonly id: string;
  readonly op: 'quantize' | 'dequantize' | 'fake_quantize' | 'range_search';
  readonly source: string;
  readonly spec?: Record<string, string | number>;
  readonly input?: GoldenTensor;
  readonly qparams?: { scale: GoldenTensor; zero_point: GoldenTensor };
  readonly q?: GoldenTensor;
  readonly shape?: number[];
  readonly out_dtype?: string;
  readonly bits?: number;
  readonly expect: Record<string, GoldenTensor>;
}

export interface GoldenFile {
  readonly torch_version: string;
  readonly family: string;
  readonly cases: GoldenCase[];
}

export const GOLDEN_DIR = new URL('.', import.meta.url).pathname;

export function loadGolden(family: string): GoldenFile {
  return JSON.parse(readFileSync(join(GOLDEN_DIR, 'vectors', `${family}.json`), 'utf8')) as GoldenFile;
}

export function bytes(t: GoldenTensor): Uint8Array {
  return new Uint8Array(Buffer.from(t.data, 'base64'));
}

export function hex(b: Uint8Array): string {
  return Buffer.from(b).toString('hex');
}
