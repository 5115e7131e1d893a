/** The torch reference's AWQ search cases (generate.py → awq-search.json), decoded. */
import { readFileSync } from 'node:fs';

export interface AwqCase {
  id: string;
  bits: number;
  group_size: number;
  zero_point: boolean;
  in: number;
  out: number;
  n: number;
  x: string;
  w: string;
  scales: string;
  ratio: number;
  clip: string;
  awq_error: number;
  rtn_error: number;
}

export const AWQ_CASES = (
  JSON.parse(readFileSync(new URL('./awq-search.json', import.meta.url), 'utf8')) as { cases: AwqCase[] }
).cases;

/** A base64 field as a typed array. */
export function decode<T>(b64: string, ctor: new (buffer: ArrayBuffer) => T): T {
  const raw = Buffer.from(b64, 'base64');
  return new ctor(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
}
