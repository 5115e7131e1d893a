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

export { decode } from '../gptq/golden.js';
