/**
 * Values a hostile client puts where a name, a number or a dtype belongs: the vocabulary every
 * fuzzed request draws from.
 */
import type { Prng } from './prng.js';

const NAME_SHAPES: readonly ((r: Prng) => string)[] = [
  () => 'w',
  () => 'model.layers.0.mlp.weight',
  () => '',
  () => 'ä½ å¥½.wéight.🙂',
  () => '\u0000nul\u0000',
  () => 'lone\ud800surrogate',
  () => '../../etc/passwd',
  () => '%2e%2e/%00',
  () => 'x'.repeat(201),
  (r) => 'n'.repeat(10_000 + r.int(100)),
  () => 'w.scale',
  () => '__metadata__',
  () => 'a'.repeat(32) + '!',
  (r) => String.fromCodePoint(...Array.from({ length: 1 + r.int(40) }, () => 32 + r.int(0x2fff))),
];

export function hostileName(r: Prng): string {
  return r.pick(NAME_SHAPES)(r);
}

export const DTYPES = [
  'F32',
  'F16',
  'BF16',
  'F64',
  'I8',
  'U8',
  'I16',
  'I32',
  'I64',
  'BOOL',
  'F8_E4M3',
  'F8_E5M2',
];
const BAD_DTYPES = ['', 'f32', 'F33', 'I4', 'float32', 'Ä32', 'F32 ', 'x'.repeat(300)];

export function hostileDtype(r: Prng): string {
  return r.chance(0.5) ? r.pick(DTYPES) : r.pick(BAD_DTYPES);
}

export const OP_DTYPES = ['float32', 'float16', 'bfloat16', 'int8', 'uint8', 'FP32', 'float64', 'x', ''];

const NUMBERS = [0, 1, -1, 2, 3, 7, 64, 128, 255, 256, 1e-30, -0, 0.5, 2 ** 31, 2 ** 32, 2 ** 53 + 2, 1e300];

/** A number, often out of any sane range (NaN and ±Infinity included). */
export function hostileNumber(r: Prng): number {
  if (r.chance(0.15)) return r.pick([NaN, Infinity, -Infinity]);
  const n = r.pick(NUMBERS);
  return r.chance(0.3) ? -n : n;
}

/** A shape: usually small and valid, sometimes huge, negative, fractional or very deep. */
export function hostileShape(r: Prng): number[] {
  switch (r.int(6)) {
    case 0:
      return [2 ** 40, 2 ** 40];
    case 1:
      return [-1, 4];
    case 2:
      return Array.from({ length: 40 + r.int(2000) }, () => 1);
    case 3:
      return [1.5, 2];
    case 4:
      return [];
    default:
      return Array.from({ length: 1 + r.int(3) }, () => 1 + r.int(6));
  }
}

/** float32 bytes for `n` values, some of them NaN or ±Infinity when `hostile`. */
export function floatBytes(r: Prng, n: number, hostile: boolean): Buffer {
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    values[i] = hostile && r.chance(0.2) ? r.pick([NaN, Infinity, -Infinity, 3.4e38]) : r.next() * 4 - 2;
  }
  return Buffer.from(values.buffer);
}

/** Text for a query parameter or an option: valid words, numbers, garbage. */
export function hostileWord(r: Prng): string {
  return r.pick([
    'int8',
    'int4',
    'uint2',
    'float8_e4m3fn',
    'per_channel',
    'per_group',
    'per_token',
    'symmetric',
    'float_qparams',
    'greedy',
    'true',
    '',
    'NaN',
    'Infinity',
    '-1',
    '0',
    '1e400',
    '99999999999999999999',
    '3',
    '128',
    'ÿ',
    '\u0000',
    'x'.repeat(5000),
  ]);
}
