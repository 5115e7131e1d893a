import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { FLOAT32_EPS, FLOAT32_MAX, FLOAT32_MIN_NORMAL, fround, rint } from '../../src/core/rounding.js';
import { f32FromBits, rintRef } from './oracles.js';

/** Same value and same zero sign (torch.round keeps it: round(-0.3) is -0.0); NaN equals NaN. */
const sameSigned = (a: number, b: number): boolean => Object.is(a, b);

const P22 = 2 ** 22;
const P23 = 2 ** 23;
const P51 = 2 ** 51;
const P52 = 2 ** 52;
const P53 = 2 ** 53;

describe('rint: round half to even (torch.round / nearbyintf), never Math.round', () => {
  // [input, expected] — every expectation is written out by hand.
  const cases: [number, number][] = [
    [0.5, 0],
    [-0.5, -0], // torch.round(-0.5) is -0.0: the sign of a zero result is kept
    [1.5, 2],
    [-1.5, -2],
    [2.5, 2], // Math.round would give 3
    [-2.5, -2], // Math.round would give -2 too, but -3.5 below tells them apart
    [3.5, 4],
    [-3.5, -4], // Math.round gives -3
    [0.49999999999999994, 0], // the classic floor(x + 0.5) trap
    [-0.49999999999999994, -0],
    [-0.3, -0],
    [0.3, 0],
    [-0, -0],
    [0, 0],
    [1.4999999, 1],
    [1.5000001, 2],
    [-7.5, -8],
    [254.5, 254],
    [255.5, 256],
    [P22 + 0.5, P22], // the last float32 binade with halves: 2^22 + 0.5 → even 2^22
    [P22 + 1.5, P22 + 2],
    [-(P22 + 0.5), -P22],
    [P23, P23], // from 2^23 on every float32 is an integer
    [P23 + 1, P23 + 1],
    [2 ** 24 + 2, 2 ** 24 + 2],
    [3e38, 3e38],
    // the double regions the magic-number trick has to special-case
    [P51 - 1.5, P51 - 2],
    [P51 - 0.5, P51],
    [-(P51 - 0.5), -P51],
    [-(P51 - 1.5), -(P51 - 2)],
    [P51 + 0.5, P51],
    [P51 + 1.5, P51 + 2],
    [P51 + 2.5, P51 + 2],
    [-(P51 + 0.5), -P51],
    [-(P51 + 1.5), -(P51 + 2)],
    [P52 - 0.5, P52], // 2^52 - 1 is odd, 2^52 even
    [P52 - 1.5, P52 - 2],
    [P52, P52],
    [P52 + 1, P52 + 1],
    [-(P52 + 1), -(P52 + 1)],
    [P53, P53],
    [P53 + 2, P53 + 2],
    [1e300, 1e300],
    [-1e300, -1e300],
    [Infinity, Infinity],
    [-Infinity, -Infinity],
  ];

  it.each(cases)('rint(%s) = %s', (x, expected) => {
    expect(Object.is(rint(x), expected), `rint(${x}) = ${rint(x)}`).toBe(true);
  });

  it('keeps NaN', () => {
    expect(Number.isNaN(rint(NaN))).toBe(true);
  });

  it('agrees with the floor/ceil definition on every kind of float32 (fast-check)', () => {
    fc.assert(
      fc.property(fc.float({ noNaN: true }), (x) => {
        expect(sameSigned(rint(x), rintRef(x)), `rint(${x})`).toBe(true);
      }),
      { numRuns: 20_000 },
    );
  });

  it('agrees with the floor/ceil definition on float32 halves k + 0.5 (fast-check)', () => {
    fc.assert(
      fc.property(fc.integer({ min: -(2 ** 23), max: 2 ** 23 }), (k) => {
        const x = fround(k + 0.5);
        expect(sameSigned(rint(x), rintRef(x)), `rint(${x})`).toBe(true);
      }),
      { numRuns: 5_000 },
    );
  });

  it('agrees with the floor/ceil definition on doubles between 2^50 and 2^54 (fast-check)', () => {
    const region = fc.oneof(
      fc.double({ min: 2 ** 50, max: 2 ** 54, noNaN: true }),
      fc.integer({ min: 0, max: 2 ** 30 }).map((k) => P51 + k * 0.5),
      fc.integer({ min: -(2 ** 30), max: 0 }).map((k) => P52 + k * 0.5),
    );
    fc.assert(
      fc.property(region, fc.boolean(), (x, negative) => {
        const v = negative ? -x : x;
        expect(sameSigned(rint(v), rintRef(v)), `rint(${v})`).toBe(true);
      }),
      { numRuns: 5_000 },
    );
  });
});

describe('float32 constants', () => {
  it('match their bit patterns', () => {
    expect(FLOAT32_EPS).toBe(f32FromBits(0x34000000)); // 2^-23
    expect(FLOAT32_EPS).toBe(2 ** -23);
    expect(FLOAT32_MIN_NORMAL).toBe(f32FromBits(0x00800000)); // 2^-126
    expect(FLOAT32_MAX).toBe(f32FromBits(0x7f7fffff)); // (2 - 2^-23) · 2^127
  });

  it('fround is float32 rounding', () => {
    expect(fround(0.1)).toBe(f32FromBits(0x3dcccccd));
    expect(fround(16777217)).toBe(16777216); // 2^24 + 1 ties to even
    expect(fround(3.5e38)).toBe(Infinity);
  });
});
