/**
 * ggml block quantizers against pinned bytes (test/interop/golden/gguf-*.json). Each case says
 * how its bytes were derived: "hand" (worked by hand, the working is in gguf_reference.py) or
 * "reference" (gguf_reference.py, an independent scalar numpy float32 re-computation of ggml's
 * quantize_row_*_ref, or quantize_iq4_nl for IQ4_NL). Regenerate with /usr/bin/python3 test/interop/golden/gguf_reference.py.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import {
  GGML_TYPES,
  QUANT_TYPES,
  ggmlDecode,
  ggmlEncode,
  ggmlTypeByName,
  type GgmlQuantType,
} from '../../src/core/interop/ggml.js';
import { cInt, roundf } from '../../src/core/interop/ggml-common.js';
import { nearestInt } from '../../src/core/interop/ggml-kquants.js';

interface GoldenCase {
  readonly name: string;
  readonly how: 'hand' | 'reference';
  readonly note: string;
  readonly input: number[];
  readonly expected: string;
  readonly dequant: string;
}
interface GoldenFile {
  readonly type: GgmlQuantType;
  readonly block_elements: number;
  readonly block_bytes: number;
  readonly cases: GoldenCase[];
}

const load = (type: string): GoldenFile =>
  JSON.parse(
    readFileSync(new URL(`./golden/gguf-${type.toLowerCase()}.json`, import.meta.url), 'utf8'),
  ) as GoldenFile;

const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

describe.each(QUANT_TYPES)('%s golden blocks', (type) => {
  const golden = load(type);
  const t = ggmlTypeByName(type)!;

  it('the file describes this type, with hand-worked or reference cases', () => {
    expect(golden.type).toBe(type);
    expect(golden.block_elements).toBe(t.blockSize);
    expect(golden.block_bytes).toBe(t.typeSize);
    expect(golden.cases.length).toBeGreaterThanOrEqual(3);
  });

  it.each(golden.cases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const x = Float32Array.from(c.input);
    // the inputs are float32 values written exactly
    c.input.forEach((v, i) => expect(Object.is(x[i], v), `input[${i}] = ${v} is a float32`).toBe(true));
    const bytes = ggmlEncode(type, x, t.blockSize);
    expect(hex(bytes)).toBe(c.expected);
    const back = ggmlDecode(type, bytes, x.length);
    expect(hex(new Uint8Array(back.buffer))).toBe(c.dequant);
  });
});

describe('the derivations can fail', () => {
  it('a one-ulp change of an input changes the pinned bytes', () => {
    const c = load('Q4_0').cases.find((k) => k.name === 'float32 add rounds before truncation')!;
    const x = Float32Array.from(c.input);
    // 0.4999995 + 8.5f rounds to 8.999999 (9 - 2^-20) in float32: the code drops to 8
    x[1] = 0.4999995;
    expect(hex(ggmlEncode('Q4_0', x, 32))).not.toBe(c.expected);
    expect(ggmlEncode('Q4_0', x, 32)[3]).toBe(0x88);
  });

  it('every quantized type has at least one hand-worked or constructed edge case', () => {
    for (const type of QUANT_TYPES) {
      const names = load(type).cases.map((c) => c.name);
      expect(
        names.some((n) => /zero|ramp|tie/.test(n)),
        type,
      ).toBe(true);
    }
  });
});

describe('ggml scalar rules', () => {
  it('nearest_int rounds half to even (a float32 add of 1.5·2^23)', () => {
    expect([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49999976, 4194303].map(nearestInt)).toEqual([
      0, 2, 2, 0, -2, -2, 3, 4194303,
    ]);
  });

  it('roundf rounds half away from zero, keeping the sign of zero', () => {
    expect([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997].map(roundf)).toEqual([1, 2, 3, -1, -3, 0]);
    expect(Object.is(roundf(-0.25), -0)).toBe(true);
  });

  it('float → int conversion truncates, and gives INT_MIN where x86 does', () => {
    expect([8.99, -0.99, 16.5].map(cInt)).toEqual([8, 0, 16]);
    expect([NaN, Infinity, -Infinity, 2 ** 31].map(cInt)).toEqual(Array(4).fill(-(2 ** 31)));
  });

  it('the type table has ggml ids and block sizes (static_assert-like checks ran at load)', () => {
    const pick = (n: string) => {
      const t = ggmlTypeByName(n)!;
      return [t.id, t.blockSize, t.typeSize];
    };
    expect(pick('F32')).toEqual([0, 1, 4]);
    expect(pick('F16')).toEqual([1, 1, 2]);
    expect(pick('Q4_0')).toEqual([2, 32, 18]);
    expect(pick('Q4_1')).toEqual([3, 32, 20]);
    expect(pick('Q5_0')).toEqual([6, 32, 22]);
    expect(pick('Q5_1')).toEqual([7, 32, 24]);
    expect(pick('Q8_0')).toEqual([8, 32, 34]);
    expect(pick('Q4_K')).toEqual([12, 256, 144]);
    expect(pick('Q2_K')).toEqual([10, 256, 84]);
    expect(pick('Q3_K')).toEqual([11, 256, 110]);
    expect(pick('Q5_K')).toEqual([13, 256, 176]);
    expect(pick('Q6_K')).toEqual([14, 256, 210]);
    expect(pick('IQ4_NL')).toEqual([20, 32, 18]);
    expect(pick('IQ4_XS')).toEqual([23, 256, 136]);
    expect(new Set(GGML_TYPES.map((t) => t.id)).size).toBe(GGML_TYPES.length);
  });

  it('F16 rounds to nearest even', () => {
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even -> 1.0 (0x3c00)
    const b = ggmlEncode('F16', Float32Array.of(1 + 2 ** -11, 1 + 3 * 2 ** -11), 2);
    expect(hex(b)).toBe('003c023c');
  });
});
