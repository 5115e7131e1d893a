/** The torch reference's GPTQ cases (generate.py → gptq-solve.json), for the solver's tests. */
import { readFileSync } from 'node:fs';

import type { GptqSolveOptions } from '../../src/core/interop/gptq-solve.js';
import type { GptqBits } from '../../src/core/interop/gptq.js';

export interface GptqCase {
  id: string;
  bits: GptqBits;
  group_size: number;
  sym: boolean;
  act_order: boolean;
  block_size: number;
  damp: number;
  in: number;
  out: number;
  n: number;
  /** base64 of float32 / uint8 / float64 little-endian values */
  x: string;
  w: string;
  codes: string;
  scales: string;
  zeros: string;
  g_idx: number[];
  gptq_error: number;
  rtn_error: number;
}

export const GPTQ_CASES = (
  JSON.parse(readFileSync(new URL('./gptq-solve.json', import.meta.url), 'utf8')) as { cases: GptqCase[] }
).cases;

/** A base64 field as the typed array it holds. */
export function decode<T>(b64: string, ctor: new (buffer: ArrayBuffer) => T): T {
  const raw = Buffer.from(b64, 'base64');
  return new ctor(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
}

/** The solver's options of a case. */
export function caseOptions(c: GptqCase): GptqSolveOptions {
  return {
    bits: c.bits,
    groupSize: c.group_size,
    sym: c.sym,
    damp: c.damp,
    blockSize: c.block_size,
    actOrder: c.act_order,
  };
}
