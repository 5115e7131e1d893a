import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { decodeFp8, encodeFp8, fp8DecodeTable } from '../../src/core/fp8.js';
import {
  FP8,
  f32FromBits,
  fp8NanCodes,
  fp8RefDecode,
  fp8RefEncode,
  nextDown32,
  nextUp32,
  type Fp8Name,
} from './oracles.js';

const FORMATS: Fp8Name[] = ['float8_e4m3fn', 'float8_e5m2'];

const hex = (c: number): string => `0x${c.toString(16).padStart(2, '0')}`;

describe.each(FORMATS)('%s', (format) => {
  const f = FP8[format];
  const nanCodes = new Set(fp8NanCodes(format));

  it('decodes all 256 codes as the bit layout says (zero signs included)', () => {
    const table = fp8DecodeTable(format);
    expect(table.length).toBe(256);
    for (let code = 0; code < 256; code++) {
      const ref = fp8RefDecode(code, format);
      expect(
        Object.is(decodeFp8(code, format), ref),
        `${hex(code)}: ${decodeFp8(code, format)} vs ${ref}`,
      ).toBe(true);
      expect(Object.is(table[code], ref)).toBe(true);
    }
  });

  it('has NaN exactly at the codes the format reserves', () => {
    const decodedNaN = [];
    for (let code = 0; code < 256; code++) if (Number.isNaN(decodeFp8(code, format))) decodedNaN.push(code);
    expect(decodedNaN).toEqual([...nanCodes].sort((a, b) => a - b));
  });

  it('encode(decode(code)) === code for every non-NaN code; ±0 keep their sign', () => {
    let checked = 0;
    for (let code = 0; code < 256; code++) {
      if (nanCodes.has(code)) continue;
      expect(encodeFp8(decodeFp8(code, format), format), hex(code)).toBe(code);
      expect(encodeFp8(fp8RefDecode(code, format), format), hex(code)).toBe(code);
      checked++;
    }
    expect(checked).toBe(256 - nanCodes.size);
    expect(encodeFp8(0, format)).toBe(0x00);
    expect(encodeFp8(-0, format)).toBe(0x80);
  });

  it('encodes NaN as the format NaN', () => {
    for (const bits of [0x7fc00000, 0x7f800001, 0xffc00000]) {
      const code = encodeFp8(f32FromBits(bits), format);
      expect(code & 0x7f, hex(code)).toBe(0x7f);
      expect(decodeFp8(code, format)).toBeNaN();
    }
    expect(encodeFp8(NaN, format)).toBe(0x7f);
  });

  it('has the documented landmarks', () => {
    expect(decodeFp8(f.maxCode, format)).toBe(f.max);
    expect(decodeFp8(0x80 | f.maxCode, format)).toBe(-f.max);
    if (format === 'float8_e4m3fn') {
      expect(decodeFp8(0x38, format)).toBe(1); // 0.0111.000 = 2^(7-7)
      expect(decodeFp8(0x01, format)).toBe(2 ** -9); // smallest subnormal: 1/8 · 2^-6
      expect(decodeFp8(0x07, format)).toBe(7 * 2 ** -9); // largest subnormal
      expect(decodeFp8(0x08, format)).toBe(2 ** -6); // smallest normal
      expect(decodeFp8(0x7e, format)).toBe(448);
      expect(decodeFp8(0x7d, format)).toBe(416);
      expect(decodeFp8(0x7f, format)).toBeNaN();
      expect(decodeFp8(0xff, format)).toBeNaN();
    } else {
      expect(decodeFp8(0x3c, format)).toBe(1); // 0.01111.00 = 2^(15-15)
      expect(decodeFp8(0x01, format)).toBe(2 ** -16); // smallest subnormal: 1/4 · 2^-14
      expect(decodeFp8(0x04, format)).toBe(2 ** -14); // smallest normal
      expect(decodeFp8(0x7b, format)).toBe(57344);
      expect(decodeFp8(0x7c, format)).toBe(Infinity);
      expect(decodeFp8(0xfc, format)).toBe(-Infinity);
      expect(decodeFp8(0x7d, format)).toBeNaN();
    }
  });

  it('rounds every midpoint between consecutive finite values to nearest-even, and its float32 neighbours to the nearer value', () => {
    // Positive codes 0..maxCode are ascending in value; every pair (c, c + 1) is one midpoint.
    let checked = 0;
    for (let c = 0; c < f.maxCode; c++) {
      const lo = fp8RefDecode(c, format);
      const hi = fp8RefDecode(c + 1, format);
      expect(hi).toBeGreaterThan(lo);
      const mid = (lo + hi) / 2;
      expect(Math.fround(mid)).toBe(mid);
      const even = c % 2 === 0 ? c : c + 1;
      for (const sign of [0, 0x80]) {
        const s = sign ? -1 : 1;
        const below = s * nextDown32(mid);
        const above = s * nextUp32(mid);
        // hand rule first, then the independent nearest-value oracle
        expect(encodeFp8(s * mid, format), `mid ${s * mid}`).toBe(sign | even);
        expect(encodeFp8(s * mid, format)).toBe(fp8RefEncode(s * mid, format));
        expect(encodeFp8(below, format), `below ${below}`).toBe(sign | c);
        expect(encodeFp8(above, format), `above ${above}`).toBe(sign | (c + 1));
        expect(encodeFp8(below, format)).toBe(fp8RefEncode(below, format));
        expect(encodeFp8(above, format)).toBe(fp8RefEncode(above, format));
        checked++;
      }
    }
    expect(checked).toBe(2 * f.maxCode);
  });

  it('handles values beyond the largest finite', () => {
    const overflowMid = (f.max + f.beyond) / 2; // 464 for e4m3fn, 61440 for e5m2
    if (format === 'float8_e4m3fn') {
      expect(overflowMid).toBe(464);
      // 448 = 0x7E (mantissa 110, even) vs 480 (would be 0x7F, odd): the tie goes to 448
      expect(encodeFp8(464, format)).toBe(0x7e);
      expect(encodeFp8(-464, format)).toBe(0xfe);
      expect(encodeFp8(nextDown32(464), format)).toBe(0x7e);
      expect(encodeFp8(nextUp32(464), format)).toBe(0x7f); // NaN: e4m3fn has no infinity
      expect(encodeFp8(-nextUp32(464), format)).toBe(0xff);
      expect(encodeFp8(480, format)).toBe(0x7f);
      expect(encodeFp8(1e30, format)).toBe(0x7f);
      expect(encodeFp8(Infinity, format)).toBe(0x7f);
      expect(encodeFp8(-Infinity, format)).toBe(0xff);
      expect(encodeFp8(3.4028234663852886e38, format)).toBe(0x7f);
    } else {
      expect(overflowMid).toBe(61440);
      // 57344 = 0x7B (mantissa 11, odd) vs 65536 (0x7C, even): the tie goes to Infinity
      expect(encodeFp8(61440, format)).toBe(0x7c);
      expect(encodeFp8(-61440, format)).toBe(0xfc);
      expect(encodeFp8(nextDown32(61440), format)).toBe(0x7b);
      expect(encodeFp8(-nextDown32(61440), format)).toBe(0xfb);
      expect(encodeFp8(65536, format)).toBe(0x7c);
      expect(encodeFp8(1e30, format)).toBe(0x7c);
      expect(encodeFp8(Infinity, format)).toBe(0x7c);
      expect(encodeFp8(-Infinity, format)).toBe(0xfc);
    }
  });

  it('rounds subnormals; half the smallest subnormal ties to zero', () => {
    const tiny = fp8RefDecode(0x01, format); // 2^-9 or 2^-16
    expect(encodeFp8(tiny / 2, format)).toBe(0x00);
    expect(encodeFp8(-tiny / 2, format)).toBe(0x80);
    expect(encodeFp8(nextUp32(tiny / 2), format)).toBe(0x01);
    expect(encodeFp8(-nextUp32(tiny / 2), format)).toBe(0x81);
    expect(encodeFp8(nextDown32(tiny / 2), format)).toBe(0x00);
    expect(encodeFp8(tiny / 4, format)).toBe(0x00);
    expect(encodeFp8(1.5 * tiny, format)).toBe(0x02); // tie between codes 1 and 2 → 2
    expect(encodeFp8(2.5 * tiny, format)).toBe(0x02); // tie between 2 and 3 → 2
    // float32 subnormals are far below every fp8 step
    expect(encodeFp8(2 ** -149, format)).toBe(0x00);
    expect(encodeFp8(-(2 ** -130), format)).toBe(0x80);
    // the largest subnormal and the smallest normal: the midpoint carries into the exponent
    const smallestNormalCode = 1 << f.mantBits;
    const lastSub = fp8RefDecode(smallestNormalCode - 1, format);
    const firstNormal = fp8RefDecode(smallestNormalCode, format);
    expect(encodeFp8((lastSub + firstNormal) / 2, format)).toBe(smallestNormalCode);
  });

  it('equals the nearest-even oracle on random float32 values (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.float({ noNaN: true }),
          fc.float({ min: -2 * f.beyond, max: 2 * f.beyond, noNaN: true }),
          fc.float({ min: -(2 ** -5), max: 2 ** -5, noNaN: true }),
        ),
        (x) => {
          expect(encodeFp8(x, format), `x = ${x}`).toBe(fp8RefEncode(x, format));
        },
      ),
      { numRuns: 5_000 },
    );
  });
});
