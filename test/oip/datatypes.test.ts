/**
 * src/oip's datatype conversions: JSON numbers to FP16 / BF16 round to the nearest value, ties to
 * even, exactly (also where rounding to float32 first would land on a midpoint it was not on);
 * element lists convert to and from little-endian bytes with range checks; nested `data` flattens
 * row-major; the model registry answers what the metadata endpoints say.
 */
import { describe, expect, it } from 'vitest';

import { float32FromBfloat16Bits, float32FromFloat16Bits } from '../../src/core/index.js';
import { isQuantdError } from '../../src/errors/index.js';
import {
  DATATYPE_SIZE,
  bf16BitsOf,
  bytesFromElements,
  datatypeOfSt,
  elementsOf,
  findModel,
  flattenData,
  fp16BitsOf,
  modelMetadata,
  MODEL_NAMES,
} from '../../src/oip/index.js';

/** The nearest 16-bit value by search over all finite values of the format (ties to even). */
function reference(x: number, decode: (bits: number) => number, maxBits: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  let lo = 0;
  let hi = maxBits; // largest finite
  if (a >= decode(hi)) {
    // beyond the largest finite: halfway to the next power decides (IEEE overflow)
    const next = 2 * decode(hi) - decode(hi - 1);
    return sign | (a >= (decode(hi) + next) / 2 ? maxBits + 1 : hi);
  }
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (decode(mid) <= a) lo = mid;
    else hi = mid;
  }
  const dLo = a - decode(lo);
  const dHi = decode(hi) - a;
  const pick = dLo < dHi ? lo : dHi < dLo ? hi : (lo & 1) === 0 ? lo : hi;
  return sign | pick;
}

const half = (bits: number): number => float32FromFloat16Bits(bits);
const brain = (bits: number): number => float32FromBfloat16Bits(bits);

describe('FP16 / BF16 from JSON numbers', () => {
  it('rounds doubles to the nearest FP16, ties to even (random doubles of every scale)', () => {
    let s = 12345;
    const wrong: number[] = [];
    for (let i = 0; i < 20000; i++) {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      const x = ((s / 2 ** 32) * 2 - 1) * 2 ** ((i % 40) - 26);
      if (fp16BitsOf(x) !== reference(x, half, 0x7bff)) wrong.push(x);
    }
    expect(wrong).toEqual([]);
  });

  it('rounds doubles to the nearest BF16, ties to even', () => {
    let s = 777;
    const wrong: number[] = [];
    for (let i = 0; i < 20000; i++) {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      const x = ((s / 2 ** 32) * 2 - 1) * 2 ** ((i % 200) - 100);
      if (bf16BitsOf(x) !== reference(x, brain, 0x7f7f)) wrong.push(x);
    }
    expect(wrong).toEqual([]);
  });

  it('is not fooled by a double that rounds to a 16-bit midpoint in float32', () => {
    // 1 + 2^-11 is the midpoint of FP16 1 and 1 + 2^-10; a hair above it rounds up, though its
    // float32 rounding is the midpoint itself (which ties to even: 1)
    expect(fp16BitsOf(1 + 2 ** -11 + 2 ** -40)).toBe(0x3c01);
    expect(fp16BitsOf(1 + 2 ** -11)).toBe(0x3c00);
    expect(fp16BitsOf(1 + 2 ** -11 - 2 ** -40)).toBe(0x3c00);
    expect(bf16BitsOf(1 + 2 ** -8 + 2 ** -40)).toBe(0x3f81);
    expect(bf16BitsOf(1 + 2 ** -8)).toBe(0x3f80);
  });

  it('keeps signs, zeros, infinities, NaN; overflows as IEEE does', () => {
    expect(fp16BitsOf(-0)).toBe(0x8000);
    expect(fp16BitsOf(0)).toBe(0);
    expect(fp16BitsOf(65504)).toBe(0x7bff);
    expect(fp16BitsOf(65519.99)).toBe(0x7bff);
    expect(fp16BitsOf(65520)).toBe(0x7c00);
    expect(fp16BitsOf(-1e9)).toBe(0xfc00);
    expect(fp16BitsOf(NaN) & 0x7c00).toBe(0x7c00);
    expect(bf16BitsOf(-2.5)).toBe(0xc020);
  });
});

describe('elements and bytes', () => {
  it('round-trips every fixed-size datatype', () => {
    const cases: [string, (number | boolean)[]][] = [
      ['BOOL', [true, false, true]],
      ['UINT8', [0, 255, 7]],
      ['INT8', [-128, 127, 0]],
      ['UINT16', [0, 65535]],
      ['INT16', [-32768, 32767]],
      ['UINT32', [0, 4294967295]],
      ['INT32', [-2147483648, 2147483647]],
      ['INT64', [-(2 ** 53) + 1, 2 ** 53 - 1]],
      ['UINT64', [0, 2 ** 53 - 1]],
      ['FP32', [1.5, -0.25, 3.4028234663852886e38]],
      ['FP64', [Math.PI, -1e300]],
      ['FP16', [1, -2.5, 65504, 2 ** -24]],
      ['BF16', [1, -2.5, 3.3895313892515355e38]],
    ];
    for (const [datatype, values] of cases) {
      const dt = datatype as keyof typeof DATATYPE_SIZE;
      const bytes = bytesFromElements(dt, values, 'x', 'data');
      expect(bytes.byteLength).toBe(values.length * DATATYPE_SIZE[dt]);
      expect(elementsOf(dt, bytes), datatype).toEqual(values);
    }
  });

  it.each([
    ['INT8', [128], 'integers in [-128, 127]'],
    ['UINT8', [-1], 'integers in [0, 255]'],
    ['INT32', [1.5], 'integers'],
    ['BOOL', [1], 'true or false'],
    ['FP32', ['1'], 'numbers'],
  ] as const)('refuses %s element %j with INFER_INPUT_INVALID', (datatype, values, expected) => {
    try {
      bytesFromElements(datatype, values, 'x', 'data');
      expect.fail('accepted');
    } catch (err) {
      expect(isQuantdError(err) && err.code).toBe('INFER_INPUT_INVALID');
      expect((err as Error).message).toContain(expected);
      expect((err as Error).message).toContain('data[0]');
    }
  });

  it('flattens nested data row-major, and refuses what is not a list', () => {
    expect(
      flattenData(
        [
          [1, 2, 3],
          [4, 5, 6],
        ],
        'x',
      ),
    ).toEqual([1, 2, 3, 4, 5, 6]);
    expect(
      flattenData(
        [
          [[1], [2]],
          [[3], [4]],
        ],
        'x',
      ),
    ).toEqual([1, 2, 3, 4]);
    expect(flattenData([1, 2], 'x')).toEqual([1, 2]);
    expect(() => flattenData(5, 'x')).toThrow(/must be an array/);
  });

  it('fp8 codes travel as UINT8; the other stored dtypes as their own datatype', () => {
    expect(datatypeOfSt('F8_E4M3')).toBe('UINT8');
    expect(datatypeOfSt('F8_E5M2')).toBe('UINT8');
    expect(datatypeOfSt('I8')).toBe('INT8');
    expect(datatypeOfSt('BF16')).toBe('BF16');
  });
});

describe('models', () => {
  it('every model has metadata with version 1; unknown names and versions are NOT_FOUND', () => {
    for (const name of MODEL_NAMES) {
      const meta = modelMetadata(findModel(name));
      expect(meta.name).toBe(name);
      expect(meta.versions).toEqual(['1']);
      expect(findModel(name, '1').name).toBe(name);
    }
    for (const [name, version] of [
      ['quantise', undefined],
      ['quantize', '2'],
    ] as const) {
      try {
        findModel(name, version);
        expect.fail('found');
      } catch (err) {
        expect(isQuantdError(err) && err.code).toBe('NOT_FOUND');
      }
    }
  });
});
