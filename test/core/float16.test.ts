import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import {
  bfloat16BitsFromFloat32,
  float16BitsFromFloat32,
  float16DecodeTable,
  float32Bits,
  float32FromBfloat16Bits,
  float32FromBits,
  float32FromFloat16Bits,
  roundToFloat16,
} from '../../src/core/float16.js';
import { fromFloat32, toFloat32 } from '../../src/core/tensor.js';
import {
  bf16RefDecode,
  bf16RefEncode,
  f32Bits,
  f32FromBits,
  halfRefDecode,
  halfRefEncode,
  nextDown32,
  nextUp32,
} from './oracles.js';

const isHalfNaN = (h: number): boolean => (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
const isBf16NaN = (b: number): boolean => (b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0;

/** Compares with Object.is (zero signs matter) but lets NaN equal NaN. */
function sameBits(a: number, b: number): boolean {
  return Object.is(a, b);
}

describe('float32 bit helpers', () => {
  it('agree with a DataView', () => {
    for (const x of [0, -0, 1, -2.5, 0.1, 3.4028234663852886e38, 2 ** -149, Infinity, -Infinity]) {
      expect(float32Bits(x)).toBe(f32Bits(x));
      expect(Object.is(float32FromBits(f32Bits(x)), Math.fround(x))).toBe(true);
    }
    expect(float32FromBits(0xffffffff)).toBeNaN();
    expect(float32Bits(1)).toBe(0x3f800000);
    expect(float32Bits(-0)).toBe(0x80000000);
  });
});

describe('float16 decode', () => {
  it('matches the bit layout for all 65536 codes', () => {
    const table = float16DecodeTable();
    expect(table.length).toBe(65536);
    let mismatches = 0;
    for (let h = 0; h < 65536; h++) {
      const ref = halfRefDecode(h);
      const got = float32FromFloat16Bits(h);
      if (!sameBits(got, ref) || !sameBits(table[h]!, ref)) mismatches++;
    }
    expect(mismatches).toBe(0);
  });

  it('has the landmark values', () => {
    expect(float32FromFloat16Bits(0x3c00)).toBe(1);
    expect(float32FromFloat16Bits(0xc000)).toBe(-2);
    expect(float32FromFloat16Bits(0x7bff)).toBe(65504);
    expect(float32FromFloat16Bits(0x0400)).toBe(2 ** -14); // smallest normal
    expect(float32FromFloat16Bits(0x0001)).toBe(2 ** -24); // smallest subnormal
    expect(float32FromFloat16Bits(0x03ff)).toBe(1023 * 2 ** -24); // largest subnormal
    expect(float32FromFloat16Bits(0x7c00)).toBe(Infinity);
    expect(float32FromFloat16Bits(0xfc00)).toBe(-Infinity);
    expect(Object.is(float32FromFloat16Bits(0x8000), -0)).toBe(true);
    expect(float32FromFloat16Bits(0x7e00)).toBeNaN();
    expect(float32FromFloat16Bits(0x7c01)).toBeNaN();
    expect(float32FromFloat16Bits(0x3555)).toBe(0.333251953125);
  });
});

describe('float16 encode (round to nearest, ties to even)', () => {
  it('encode(decode(h)) === h for every non-NaN half, both zeros and infinities included', () => {
    const bad: string[] = [];
    let checked = 0;
    for (let h = 0; h < 65536; h++) {
      if (isHalfNaN(h)) continue;
      const got = float16BitsFromFloat32(halfRefDecode(h));
      if (got !== h) bad.push(`0x${h.toString(16)} → 0x${got.toString(16)}`);
      checked++;
    }
    expect(bad.slice(0, 10)).toEqual([]);
    expect(checked).toBe(65536 - 2 * 1023);
  });

  it('rounds every midpoint between consecutive halves to the even code, and its float32 neighbours to the nearer one', () => {
    const bad: string[] = [];
    let checked = 0;
    for (let h = 0; h < 0x7bff; h++) {
      const lo = halfRefDecode(h);
      const hi = halfRefDecode(h + 1);
      const mid = (lo + hi) / 2;
      if (Math.fround(mid) !== mid) bad.push(`midpoint ${mid} is not a float32`); // 12 bits fit
      const even = h % 2 === 0 ? h : h + 1;
      for (const sign of [0, 0x8000]) {
        const s = sign ? -1 : 1;
        const cases: [number, number][] = [
          [s * mid, sign | even],
          [s * nextDown32(mid), sign | h],
          [s * nextUp32(mid), sign | (h + 1)],
        ];
        for (const [x, want] of cases) {
          const got = float16BitsFromFloat32(x);
          if (got !== want) bad.push(`${x}: got 0x${got.toString(16)}, want 0x${want.toString(16)}`);
        }
        checked++;
      }
    }
    expect(bad.slice(0, 10)).toEqual([]);
    expect(checked).toBe(2 * 0x7bff);
  });

  it('overflows past 65504 exactly as IEEE does', () => {
    // 65504 = 0x7BFF; the next step (2^16) would be 0x7C00 = Infinity; the midpoint 65520 ties to
    // the even pattern, 0x7C00.
    expect(float16BitsFromFloat32(65520)).toBe(0x7c00);
    expect(float16BitsFromFloat32(-65520)).toBe(0xfc00);
    expect(float16BitsFromFloat32(nextDown32(65520))).toBe(0x7bff);
    expect(float16BitsFromFloat32(65519.99)).toBe(0x7bff); // float32(65519.99) = 65519.98828125
    expect(float16BitsFromFloat32(65504)).toBe(0x7bff);
    expect(float16BitsFromFloat32(1e6)).toBe(0x7c00);
    expect(float16BitsFromFloat32(3.4028234663852886e38)).toBe(0x7c00);
    expect(float16BitsFromFloat32(Infinity)).toBe(0x7c00);
    expect(float16BitsFromFloat32(-Infinity)).toBe(0xfc00);
    expect(roundToFloat16(65519.99)).toBe(65504);
    expect(roundToFloat16(65520)).toBe(Infinity);
  });

  it('rounds subnormals, including the ties around the smallest one', () => {
    const u = 2 ** -24; // one subnormal step
    expect(float16BitsFromFloat32(u / 2)).toBe(0x0000); // tie between 0 and 1 → 0
    expect(float16BitsFromFloat32(-u / 2)).toBe(0x8000);
    expect(float16BitsFromFloat32(nextUp32(u / 2))).toBe(0x0001);
    expect(float16BitsFromFloat32(nextDown32(u / 2))).toBe(0x0000);
    expect(float16BitsFromFloat32(1.5 * u)).toBe(0x0002); // tie between 1 and 2 → 2
    expect(float16BitsFromFloat32(2.5 * u)).toBe(0x0002); // tie between 2 and 3 → 2
    expect(float16BitsFromFloat32(1023.5 * u)).toBe(0x0400); // carries into the smallest normal
    expect(float16BitsFromFloat32(u / 4)).toBe(0x0000);
    expect(float16BitsFromFloat32(2 ** -149)).toBe(0x0000); // float32 subnormal
    expect(float16BitsFromFloat32(-(2 ** -140))).toBe(0x8000);
    expect(float16BitsFromFloat32(-0)).toBe(0x8000);
  });

  it('carries into the exponent on a round-up', () => {
    // 0x3BFF = 0.99951171875, 0x3C00 = 1: the midpoint 0.999755859375 ties to 0x3C00 (even)
    expect(float16BitsFromFloat32(0.999755859375)).toBe(0x3c00);
    expect(float16BitsFromFloat32(2047.5)).toBe(0x6800); // 2047 (0x67FF, odd) | 2048 → 2048
    expect(float16BitsFromFloat32(2046.5)).toBe(0x67fe); // 2046 (even) | 2047 → 2046
  });

  it('keeps NaN a NaN, quiet, with its sign', () => {
    for (const bits of [0x7fc00000, 0x7f800001, 0x7fffffff, 0xffc00000, 0xff800001]) {
      const h = float16BitsFromFloat32(f32FromBits(bits));
      expect(isHalfNaN(h), `0x${bits.toString(16)} → 0x${h.toString(16)}`).toBe(true);
      expect(h & 0x0200).toBe(0x0200); // quiet bit
    }
    expect(float16BitsFromFloat32(NaN) & 0x7fff).toBe(0x7e00);
    expect(float16BitsFromFloat32(f32FromBits(0xffc00000)) & 0x8000).toBe(0x8000);
  });

  it('equals the nearest-even oracle on random float32 values (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.float({ noNaN: true }),
          fc.float({ min: -70000, max: 70000, noNaN: true }),
          fc.float({ min: -(2 ** -13), max: 2 ** -13, noNaN: true }),
        ),
        (x) => {
          expect(float16BitsFromFloat32(x), `x = ${x}`).toBe(halfRefEncode(x));
        },
      ),
      { numRuns: 20_000 },
    );
  });
});

describe('bfloat16', () => {
  it('decodes all 65536 codes from the bit layout', () => {
    let mismatches = 0;
    for (let b = 0; b < 65536; b++) {
      if (!sameBits(float32FromBfloat16Bits(b), bf16RefDecode(b))) mismatches++;
    }
    expect(mismatches).toBe(0);
    expect(float32FromBfloat16Bits(0x3f80)).toBe(1);
    expect(float32FromBfloat16Bits(0x4049)).toBe(3.140625);
    expect(float32FromBfloat16Bits(0x7f7f)).toBe(3.3895313892515355e38);
    expect(float32FromBfloat16Bits(0x0001)).toBe(2 ** -133);
    expect(float32FromBfloat16Bits(0xff80)).toBe(-Infinity);
  });

  it('encode(decode(b)) === b for every non-NaN code', () => {
    const bad: string[] = [];
    let checked = 0;
    for (let b = 0; b < 65536; b++) {
      if (isBf16NaN(b)) continue;
      const got = bfloat16BitsFromFloat32(bf16RefDecode(b));
      if (got !== b) bad.push(`0x${b.toString(16)} → 0x${got.toString(16)}`);
      checked++;
    }
    expect(bad.slice(0, 10)).toEqual([]);
    expect(checked).toBe(65536 - 2 * 127);
  });

  it('rounds every midpoint to the even code and its float32 neighbours to the nearer one', () => {
    const bad: string[] = [];
    let checked = 0;
    for (let b = 0; b < 0x7f7f; b++) {
      const lo = bf16RefDecode(b);
      const hi = bf16RefDecode(b + 1);
      const mid = (lo + hi) / 2;
      if (Math.fround(mid) !== mid) bad.push(`midpoint ${mid} is not a float32`);
      const even = b % 2 === 0 ? b : b + 1;
      for (const sign of [0, 0x8000]) {
        const s = sign ? -1 : 1;
        const cases: [number, number][] = [
          [s * mid, sign | even],
          [s * nextDown32(mid), sign | b],
          [s * nextUp32(mid), sign | (b + 1)],
        ];
        for (const [x, want] of cases) {
          const got = bfloat16BitsFromFloat32(x);
          if (got !== want) bad.push(`${x}: got 0x${got.toString(16)}, want 0x${want.toString(16)}`);
        }
        checked++;
      }
    }
    expect(bad.slice(0, 10)).toEqual([]);
    expect(checked).toBe(2 * 0x7f7f);
  });

  it('carries into the exponent and overflows to Infinity', () => {
    // 0x3FFF = 1.9921875, 0x4000 = 2; their midpoint 1.99609375 (float32 0x3FFF8000) ties to
    // 0x4000: the mantissa carry bumps the exponent.
    expect(bfloat16BitsFromFloat32(1.99609375)).toBe(0x4000);
    expect(bfloat16BitsFromFloat32(nextDown32(1.99609375))).toBe(0x3fff);
    expect(bfloat16BitsFromFloat32(-1.99609375)).toBe(0xc000);
    // 0x7F7F is the largest finite; (1 + 255/256) · 2^127 is the midpoint with 2^128 → Infinity.
    const mid = (1 + 255 / 256) * 2 ** 127;
    expect(bfloat16BitsFromFloat32(mid)).toBe(0x7f80);
    expect(bfloat16BitsFromFloat32(nextDown32(mid))).toBe(0x7f7f);
    expect(bfloat16BitsFromFloat32(3.4028234663852886e38)).toBe(0x7f80);
    expect(bfloat16BitsFromFloat32(Infinity)).toBe(0x7f80);
    expect(bfloat16BitsFromFloat32(-Infinity)).toBe(0xff80);
    expect(bfloat16BitsFromFloat32(-0)).toBe(0x8000);
    // float32 subnormals: 2^-134 is half of bf16's smallest subnormal → 0 (even)
    expect(bfloat16BitsFromFloat32(2 ** -134)).toBe(0x0000);
    expect(bfloat16BitsFromFloat32(3 * 2 ** -134)).toBe(0x0002);
  });

  it('keeps NaN a NaN (never rounds a payload into Infinity)', () => {
    for (const bits of [0x7fc00000, 0x7f800001, 0x7f80ffff, 0x7fffffff, 0xff800001, 0xffc00000]) {
      const b = bfloat16BitsFromFloat32(f32FromBits(bits));
      expect(isBf16NaN(b), `0x${bits.toString(16)} → 0x${b.toString(16)}`).toBe(true);
      expect(float32FromBfloat16Bits(b)).toBeNaN();
    }
  });

  it('equals the nearest-even oracle on random float32 values (fast-check)', () => {
    fc.assert(
      fc.property(fc.float({ noNaN: true }), (x) => {
        expect(bfloat16BitsFromFloat32(x), `x = ${x}`).toBe(bf16RefEncode(x));
      }),
      { numRuns: 20_000 },
    );
  });
});

describe('tensor byte conversions (tensor.ts)', () => {
  const le16 = (codes: number[], offset = 0): Uint8Array => {
    const bytes = new Uint8Array(offset + codes.length * 2);
    codes.forEach((c, i) => {
      bytes[offset + 2 * i] = c & 0xff;
      bytes[offset + 2 * i + 1] = c >> 8;
    });
    return bytes.subarray(offset);
  };

  it('widens float16 and bfloat16 exactly, aligned or not', () => {
    const codes = [0x0000, 0x8000, 0x3c00, 0x0001, 0x7bff, 0xfc00, 0x3555, 0x1234];
    for (const offset of [0, 1]) {
      const half = toFloat32(le16(codes, offset), 'float16');
      expect(Array.from(half)).toEqual(codes.map(halfRefDecode));
      const bf = toFloat32(le16(codes, offset), 'bfloat16');
      expect(Array.from(bf)).toEqual(codes.map(bf16RefDecode));
    }
  });

  it('narrows float32 to float16 / bfloat16 with round-to-nearest-even, little-endian', () => {
    const values = new Float32Array([1, 65520, 0.999755859375, 1.99609375, -0, 2 ** -25]);
    const half = fromFloat32(values, 'float16');
    expect(Array.from(half)).toEqual(Array.from(le16([0x3c00, 0x7c00, 0x3c00, 0x3ffc, 0x8000, 0x0000])));
    const bf = fromFloat32(values, 'bfloat16');
    expect(Array.from(bf)).toEqual(Array.from(le16([0x3f80, 0x4780, 0x3f80, 0x4000, 0x8000, 0x3300])));
    const f32 = fromFloat32(values, 'float32');
    expect(Array.from(f32.subarray(0, 4))).toEqual([0, 0, 0x80, 0x3f]);
  });
});
