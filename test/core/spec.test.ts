import { describe, expect, it } from 'vitest';

import { QDTYPES, QDTYPE_INFO, quantizedByteLength } from '../../src/core/dtypes.js';
import {
  hasFloatZeroPoint,
  parseSpec,
  specToOptions,
  symmetricZeroPoint,
  type SpecOptions,
} from '../../src/core/spec.js';
import { expectQuantdError, nextDown32 } from './oracles.js';

describe('qdtype table (docs/numerics.md default ranges)', () => {
  it('has the documented ranges and storage', () => {
    const expected: Record<string, [number, number, number]> = {
      int8: [-128, 127, 8],
      uint8: [0, 255, 8],
      int16: [-32768, 32767, 16],
      int32: [-2147483648, 2147483647, 32],
      int4: [-8, 7, 4],
      uint4: [0, 15, 4],
      int2: [-2, 1, 2],
      uint2: [0, 3, 2],
      float8_e4m3fn: [-448, 448, 8],
      float8_e5m2: [-57344, 57344, 8],
    };
    expect([...QDTYPES].sort()).toEqual(Object.keys(expected).sort());
    for (const q of QDTYPES) {
      const info = QDTYPE_INFO[q];
      expect([info.min, info.max, info.bits], q).toEqual(expected[q]);
    }
    expect(quantizedByteLength('int4', 5)).toBe(3);
    expect(quantizedByteLength('uint2', 5)).toBe(2);
    expect(quantizedByteLength('int2', 4)).toBe(1);
    expect(quantizedByteLength('int16', 3)).toBe(6);
    expect(quantizedByteLength('int32', 3)).toBe(12);
  });
});

describe('parseSpec defaults', () => {
  it('defaults to int8, per_tensor, affine, the full range, eps 2^-23, minmax', () => {
    expect(parseSpec({})).toEqual({
      qdtype: 'int8',
      scheme: 'per_tensor',
      mode: 'affine',
      axis: null,
      groupSize: null,
      quantMin: -128,
      quantMax: 127,
      customRange: false,
      eps: 2 ** -23,
      rangeSearch: 'minmax',
    });
  });

  it('makes fp8 symmetric by default and integer types affine', () => {
    expect(parseSpec({ qdtype: 'float8_e4m3fn' }).mode).toBe('symmetric');
    expect(parseSpec({ qdtype: 'float8_e5m2' }).mode).toBe('symmetric');
    expect(parseSpec({ qdtype: 'float8_e5m2' })).toMatchObject({ quantMin: -57344, quantMax: 57344 });
    for (const q of ['int8', 'uint8', 'int16', 'int32', 'int4', 'uint4', 'int2', 'uint2']) {
      expect(parseSpec({ qdtype: q }).mode, q).toBe('affine');
    }
  });

  it('gives per_channel axis 0 and per_group group_size 128', () => {
    expect(parseSpec({ scheme: 'per_channel' })).toMatchObject({ axis: 0, groupSize: null });
    expect(parseSpec({ scheme: 'per_group' })).toMatchObject({ axis: null, groupSize: 128 });
    expect(parseSpec({ scheme: 'per_token' })).toMatchObject({ axis: null, groupSize: null });
  });

  it('accepts numbers and integer strings, and marks a narrowed range as custom', () => {
    const s = parseSpec({ qdtype: 'uint8', quant_min: ' 0 ', quant_max: '254' });
    expect(s).toMatchObject({ quantMin: 0, quantMax: 254, customRange: true });
    expect(parseSpec({ qdtype: 'int4', quant_min: -7, quant_max: 7 })).toMatchObject({
      quantMin: -7,
      quantMax: 7,
      customRange: true,
    });
    expect(parseSpec({ qdtype: 'uint8', quant_min: 0, quant_max: 255 }).customRange).toBe(false);
    expect(parseSpec({ scheme: 'per_channel', axis: '-1' }).axis).toBe(-1);
    expect(parseSpec({ scheme: 'per_channel', axis: '+2' }).axis).toBe(2);
    expect(parseSpec({ scheme: 'per_group', group_size: '32' }).groupSize).toBe(32);
    expect(parseSpec({ scheme: 'per_group', group_size: 2 }).groupSize).toBe(2);
  });

  it('rounds eps to float32 and accepts it down to 2^-126', () => {
    expect(parseSpec({ eps: 1e-6 }).eps).toBe(Math.fround(1e-6));
    expect(parseSpec({ eps: '0.5' }).eps).toBe(0.5);
    expect(parseSpec({ eps: 2 ** -126 }).eps).toBe(2 ** -126);
  });

  it('accepts greedy range search for 2/4-bit types', () => {
    expect(parseSpec({ qdtype: 'int4', range_search: 'greedy' }).rangeSearch).toBe('greedy');
    expect(parseSpec({ qdtype: 'uint2', scheme: 'per_group', range_search: 'greedy' }).rangeSearch).toBe(
      'greedy',
    );
  });

  it('round-trips through specToOptions (null options dropped)', () => {
    const specs = [
      parseSpec({}),
      parseSpec({ qdtype: 'uint4', scheme: 'per_channel', axis: -1, mode: 'float_qparams', eps: 1e-3 }),
      parseSpec({
        qdtype: 'int4',
        scheme: 'per_group',
        group_size: 64,
        quant_min: -7,
        range_search: 'greedy',
      }),
      parseSpec({ qdtype: 'float8_e4m3fn', scheme: 'per_token' }),
    ];
    for (const spec of specs) {
      const o = specToOptions(spec);
      const options: SpecOptions = { ...o, axis: o.axis ?? undefined, group_size: o.group_size ?? undefined };
      expect(parseSpec(options)).toEqual(spec);
    }
  });
});

describe('parseSpec rejections', () => {
  const rejects: [string, SpecOptions, string][] = [
    ['an unknown qdtype', { qdtype: 'int3' }, 'UNKNOWN_QDTYPE'],
    ['a torch-style qdtype name', { qdtype: 'qint8' }, 'UNKNOWN_QDTYPE'],
    ['an unknown scheme', { scheme: 'per_row' }, 'UNKNOWN_SCHEME'],
    ['an unknown mode', { mode: 'asymmetric' }, 'UNKNOWN_MODE'],
    // widening the range
    ['int8 quant_min -129', { quant_min: -129 }, 'QUANT_RANGE_INVALID'],
    ['uint8 quant_max 256', { qdtype: 'uint8', quant_max: 256 }, 'QUANT_RANGE_INVALID'],
    ['int4 quant_max 8', { qdtype: 'int4', quant_max: 8 }, 'QUANT_RANGE_INVALID'],
    ['uint2 quant_min -1', { qdtype: 'uint2', quant_min: -1 }, 'QUANT_RANGE_INVALID'],
    ['fp8 quant_max 449', { qdtype: 'float8_e4m3fn', quant_max: 449 }, 'QUANT_RANGE_INVALID'],
    // min >= max
    ['quant_min == quant_max', { quant_min: 5, quant_max: 5 }, 'QUANT_RANGE_INVALID'],
    ['quant_min > quant_max', { quant_min: 6, quant_max: 5 }, 'QUANT_RANGE_INVALID'],
    // non-integers
    ['quant_min 1.5', { quant_min: 1.5 }, 'OPTION_INVALID'],
    ['quant_max "1e2"', { quant_max: '1e2' }, 'OPTION_INVALID'],
    ['quant_max "0x10"', { quant_max: '0x10' }, 'OPTION_INVALID'],
    ['quant_min ""', { quant_min: '' }, 'OPTION_INVALID'],
    ['axis "1.0"', { scheme: 'per_channel', axis: '1.0' }, 'OPTION_INVALID'],
    ['axis NaN', { scheme: 'per_channel', axis: NaN }, 'OPTION_INVALID'],
    ['group_size "abc"', { scheme: 'per_group', group_size: 'abc' }, 'OPTION_INVALID'],
    ['group_size 64.5', { scheme: 'per_group', group_size: 64.5 }, 'OPTION_INVALID'],
    // options that do not belong to the scheme
    ['axis with per_tensor', { axis: 0 }, 'OPTION_INVALID'],
    ['axis with per_group', { scheme: 'per_group', axis: 1 }, 'OPTION_INVALID'],
    ['group_size with per_tensor', { group_size: 32 }, 'OPTION_INVALID'],
    ['group_size with per_channel', { scheme: 'per_channel', group_size: 32 }, 'OPTION_INVALID'],
    ['group_size 1', { scheme: 'per_group', group_size: 1 }, 'OPTION_INVALID'],
    ['group_size 0', { scheme: 'per_group', group_size: 0 }, 'OPTION_INVALID'],
    ['group_size -4', { scheme: 'per_group', group_size: '-4' }, 'OPTION_INVALID'],
    ['range_search exhaustive', { range_search: 'exhaustive' }, 'OPTION_INVALID'],
    // eps
    ['eps 0', { eps: 0 }, 'EPS_INVALID'],
    ['eps 1e-45 (a float32 subnormal)', { eps: 1e-45 }, 'EPS_INVALID'],
    ['eps just below 2^-126', { eps: nextDown32(2 ** -126) }, 'EPS_INVALID'],
    ['eps negative', { eps: -1 }, 'EPS_INVALID'],
    ['eps 1e39 (float32 Infinity)', { eps: 1e39 }, 'EPS_INVALID'],
    // NaN is rejected before the range check: parseNumber classifies it as "not a finite number".
    ['eps NaN', { eps: NaN }, 'OPTION_INVALID'],
    ['eps "NaN"', { eps: 'NaN' }, 'OPTION_INVALID'],
    ['eps Infinity', { eps: Infinity }, 'OPTION_INVALID'],
    ['eps "abc"', { eps: 'abc' }, 'OPTION_INVALID'],
    // combinations torch does not define
    ['float_qparams per_tensor', { mode: 'float_qparams' }, 'MODE_UNSUPPORTED'],
    ['float_qparams per_token', { scheme: 'per_token', mode: 'float_qparams' }, 'MODE_UNSUPPORTED'],
    ['float_qparams per_group', { scheme: 'per_group', mode: 'float_qparams' }, 'MODE_UNSUPPORTED'],
    ['affine fp8', { qdtype: 'float8_e4m3fn', mode: 'affine' }, 'MODE_UNSUPPORTED'],
    [
      'float_qparams fp8',
      { qdtype: 'float8_e5m2', scheme: 'per_channel', mode: 'float_qparams' },
      'MODE_UNSUPPORTED',
    ],
    [
      'symmetric per_token uint8',
      { qdtype: 'uint8', scheme: 'per_token', mode: 'symmetric' },
      'MODE_UNSUPPORTED',
    ],
    [
      'symmetric per_token uint4',
      { qdtype: 'uint4', scheme: 'per_token', mode: 'symmetric' },
      'MODE_UNSUPPORTED',
    ],
    ['greedy with int8', { qdtype: 'int8', range_search: 'greedy' }, 'MODE_UNSUPPORTED'],
    ['greedy with fp8', { qdtype: 'float8_e4m3fn', range_search: 'greedy' }, 'MODE_UNSUPPORTED'],
    ['greedy per_token', { qdtype: 'int4', scheme: 'per_token', range_search: 'greedy' }, 'MODE_UNSUPPORTED'],
  ];

  it.each(rejects)('rejects %s', (_label, options, code) => {
    expectQuantdError(() => parseSpec(options), code);
  });

  it('names the offending value in the message', () => {
    expect(expectQuantdError(() => parseSpec({ qdtype: 'int3' }), 'UNKNOWN_QDTYPE').message).toContain(
      'int3',
    );
    expect(expectQuantdError(() => parseSpec({ scheme: 'per_row' }), 'UNKNOWN_SCHEME').message).toContain(
      'per_row',
    );
    const q = expectQuantdError(() => parseSpec({ qdtype: 'uint8', quant_max: 256 }), 'QUANT_RANGE_INVALID');
    expect(q.message).toContain('256');
    const o = expectQuantdError(() => parseSpec({ quant_min: 1.5 }), 'OPTION_INVALID', {
      option: 'quant_min',
    });
    expect(o.message).toContain('1.5');
    expectQuantdError(() => parseSpec({ eps: 0 }), 'EPS_INVALID', { value: '0' });
  });
});

describe('symmetric zero point and zero-point kind', () => {
  it('is 0 for signed types and 128 for uint8; (qmin + qmax) // 2 for a customised uint8 range', () => {
    expect(symmetricZeroPoint(parseSpec({ qdtype: 'int8', mode: 'symmetric' }))).toBe(0);
    expect(symmetricZeroPoint(parseSpec({ qdtype: 'int4', mode: 'symmetric', quant_min: -7 }))).toBe(0);
    expect(symmetricZeroPoint(parseSpec({ qdtype: 'uint8', mode: 'symmetric' }))).toBe(128);
    expect(symmetricZeroPoint(parseSpec({ qdtype: 'uint8', mode: 'symmetric', quant_max: 254 }))).toBe(127); // 254 // 2
    expect(symmetricZeroPoint(parseSpec({ qdtype: 'uint8', mode: 'symmetric', quant_min: 1 }))).toBe(128); // 256 // 2
    expect(
      symmetricZeroPoint(parseSpec({ qdtype: 'uint8', mode: 'symmetric', quant_min: 3, quant_max: 250 })),
    ).toBe(
      126, // 253 // 2
    );
    // torch names only uint8; quantd uses the same midpoint rule 2^(bits-1) for the other unsigned types
    expect(symmetricZeroPoint(parseSpec({ qdtype: 'uint4', mode: 'symmetric' }))).toBe(8);
    expect(symmetricZeroPoint(parseSpec({ qdtype: 'uint2', mode: 'symmetric' }))).toBe(2);
  });

  it('uses float zero points for float_qparams and per_token affine only', () => {
    expect(hasFloatZeroPoint({ scheme: 'per_channel', mode: 'float_qparams' })).toBe(true);
    expect(hasFloatZeroPoint({ scheme: 'per_token', mode: 'affine' })).toBe(true);
    expect(hasFloatZeroPoint({ scheme: 'per_token', mode: 'symmetric' })).toBe(false);
    expect(hasFloatZeroPoint({ scheme: 'per_tensor', mode: 'affine' })).toBe(false);
    expect(hasFloatZeroPoint({ scheme: 'per_channel', mode: 'affine' })).toBe(false);
    expect(hasFloatZeroPoint({ scheme: 'per_group', mode: 'affine' })).toBe(false);
  });
});
