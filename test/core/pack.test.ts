import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { packSubByte, unpackSubByte } from '../../src/core/pack.js';
import { packRef } from './oracles.js';

describe('packSubByte: torch quint4x2 / quint2x4 layout, LSB first, flat, zero-padded', () => {
  it.each([
    // five 4-bit 3s: 0x33 0x33 0x03 (torch test_qtensor_sub_byte)
    [[3, 3, 3, 3, 3], 4, [51, 51, 3]],
    [[3, 3, 3, 3], 4, [51, 51]],
    // five 2-bit 3s: 0b11111111, 0b00000011
    [[3, 3, 3, 3, 3], 2, [255, 3]],
    [[3, 3, 3, 3], 2, [255]],
    [[3], 2, [3]],
    [[3], 4, [3]],
    [[], 4, []],
    [[], 2, []],
    // element 0 in the low nibble: [1, 2] → 0x21
    [[1, 2], 4, [0x21]],
    [[15, 0, 15], 4, [0x0f, 0x0f]],
    // 2-bit fields at bits 0, 2, 4, 6: [1, 2, 3, 0] → 0b00111001
    [[1, 2, 3, 0], 2, [0b00111001]],
    [[0, 0, 0, 0, 1], 2, [0, 1]],
  ])('%j at %i bits → %j', (values, bits, expected) => {
    expect(Array.from(packSubByte(values, bits))).toEqual(expected);
  });

  it('stores signed values as two’s-complement fields', () => {
    // int4: -8 → 0b1000, 7 → 0b0111, -1 → 0b1111
    expect(Array.from(packSubByte(new Int8Array([-8, 7]), 4))).toEqual([0x78]);
    expect(Array.from(packSubByte(new Int8Array([-1, -8]), 4))).toEqual([0x8f]);
    expect(Array.from(packSubByte(new Int8Array([-1, -1, -1]), 4))).toEqual([0xff, 0x0f]);
    // int2: -2 → 0b10, -1 → 0b11, 0, 1 → 0b01: 2 | 3 << 2 | 0 << 4 | 1 << 6 = 78
    expect(Array.from(packSubByte(new Int8Array([-2, -1, 0, 1]), 2))).toEqual([78]);
    expect(Array.from(packSubByte(new Int8Array([-2]), 2))).toEqual([2]);
  });
});

describe('unpackSubByte', () => {
  it('sign-extends two’s-complement fields when signed', () => {
    expect(Array.from(unpackSubByte(new Uint8Array([0x78]), 2, 4, true))).toEqual([-8, 7]);
    expect(Array.from(unpackSubByte(new Uint8Array([0x78]), 2, 4, false))).toEqual([8, 7]);
    expect(Array.from(unpackSubByte(new Uint8Array([78]), 4, 2, true))).toEqual([-2, -1, 0, 1]);
    expect(Array.from(unpackSubByte(new Uint8Array([78]), 4, 2, false))).toEqual([2, 3, 0, 1]);
    expect(Array.from(unpackSubByte(new Uint8Array([51, 51, 3]), 5, 4, false))).toEqual([3, 3, 3, 3, 3]);
    expect(Array.from(unpackSubByte(new Uint8Array([255, 3]), 5, 2, false))).toEqual([3, 3, 3, 3, 3]);
    expect(Array.from(unpackSubByte(new Uint8Array([255, 3]), 5, 2, true))).toEqual([-1, -1, -1, -1, -1]);
  });

  it('reads only numel values (ignores padding) and honours subarray offsets', () => {
    expect(Array.from(unpackSubByte(new Uint8Array([0xff]), 1, 4, false))).toEqual([15]);
    const backing = new Uint8Array([0xaa, 0x21, 0x43]);
    expect(Array.from(unpackSubByte(backing.subarray(1), 3, 4, false))).toEqual([1, 2, 3]);
  });
});

describe('pack / unpack properties (fast-check)', () => {
  const widths = [
    { bits: 4, signed: true, min: -8, max: 7 },
    { bits: 4, signed: false, min: 0, max: 15 },
    { bits: 2, signed: true, min: -2, max: 1 },
    { bits: 2, signed: false, min: 0, max: 3 },
  ];

  it.each(widths)(
    '$bits-bit signed=$signed: bytes equal the bit-by-bit oracle and unpack inverts pack',
    (w) => {
      fc.assert(
        fc.property(
          fc.array(fc.integer({ min: w.min, max: w.max }), { minLength: 0, maxLength: 300 }),
          (values) => {
            const packed = packSubByte(Int8Array.from(values), w.bits);
            expect(packed.length).toBe(Math.ceil((values.length * w.bits) / 8));
            expect(Array.from(packed)).toEqual(packRef(values, w.bits));
            expect(Array.from(unpackSubByte(packed, values.length, w.bits, w.signed))).toEqual(values);
          },
        ),
        { numRuns: 300 },
      );
    },
  );
});
