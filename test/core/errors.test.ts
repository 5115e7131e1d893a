/**
 * Unhappy paths of the numerics: docs/numerics.md "Bad input never passes silently". Every case pins
 * the catalogue code and the parameters that name the tensor and the offending value.
 */
import { describe, expect, it } from 'vitest';

import { decodeFp8 } from '../../src/core/fp8.js';
import { checkFakeQuantizable, fakeQuantize } from '../../src/core/fake-quantize.js';
import { planLayout } from '../../src/core/layout.js';
import { dequantizeTensor, fakeQuantizeTensor, quantizeTensor } from '../../src/core/ops.js';
import { chooseQParams } from '../../src/core/qparams.js';
import { quantize, quantizeValues } from '../../src/core/quantize.js';
import { parseSpec, type SpecOptions } from '../../src/core/spec.js';
import { validateQParams } from '../../src/core/validate-qparams.js';
import { expectQuantdError } from './oracles.js';
import { floatInput, qparams, quantizedInput, setup } from './fixtures.js';

describe('non-finite input to choose_qparams', () => {
  it('rejects NaN with INPUT_NOT_FINITE naming the tensor, the value and the flat index', () => {
    const { spec, layout, x } = setup({}, [4], [1, 2, NaN, 3]);
    const err = expectQuantdError(() => chooseQParams('enc.w', x, layout, spec), 'INPUT_NOT_FINITE', {
      tensor: 'enc.w',
      value: 'NaN',
      index: 2,
      op: 'choose_qparams',
    });
    expect(err.message).toBe('tensor enc.w holds NaN at flat index 2; choose_qparams needs finite input');
  });

  it('reports the flat (row-major) index for per_channel with strided channels', () => {
    // [2, 3] along axis 1: flat index 4 is row 1, column 1
    const { spec, layout, x } = setup({ scheme: 'per_channel', axis: 1 }, [2, 3], [0, 1, 2, 3, NaN, 5]);
    expectQuantdError(() => chooseQParams('w', x, layout, spec), 'INPUT_NOT_FINITE', {
      index: 4,
      value: 'NaN',
    });
  });

  it.each<[string, SpecOptions, number[]]>([
    ['per_tensor', {}, [4]],
    ['per_channel', { scheme: 'per_channel' }, [2, 2]],
    ['per_token', { scheme: 'per_token' }, [2, 2]],
    ['per_group', { scheme: 'per_group', group_size: 2 }, [2, 2]],
    ['per_channel float_qparams', { qdtype: 'uint8', scheme: 'per_channel', mode: 'float_qparams' }, [2, 2]],
    ['symmetric', { mode: 'symmetric' }, [4]],
    ['greedy', { qdtype: 'int4', range_search: 'greedy' }, [4]],
  ])('rejects ±Infinity (%s)', (_label, options, shape) => {
    for (const bad of [Infinity, -Infinity]) {
      const { spec, layout, x } = setup(options, shape, [0.5, -1, bad, 2]);
      expectQuantdError(() => chooseQParams('w', x, layout, spec), 'INPUT_NOT_FINITE', {
        tensor: 'w',
        value: String(bad),
        index: 2,
      });
    }
  });

  it('reaches the same error through quantizeTensor when the qparams are chosen', () => {
    const { spec, layout, x } = setup({ qdtype: 'uint8' }, [3], [1, Infinity, 0]);
    expectQuantdError(() => quantizeTensor(floatInput('emb', x, layout), spec), 'INPUT_NOT_FINITE', {
      tensor: 'emb',
      index: 1,
    });
  });
});

describe('non-finite input to quantize with given qparams', () => {
  it('per_group rejects ±Infinity (torch asserts finite input there)', () => {
    const { spec, layout, x } = setup({ scheme: 'per_group', group_size: 2 }, [1, 4], [0, 1, -Infinity, 2]);
    const qp = qparams([0.1, 0.1], [0, 0]);
    expectQuantdError(() => quantizeValues('g', x, layout, spec, qp), 'INPUT_NOT_FINITE', {
      tensor: 'g',
      value: '-Infinity',
      index: 2,
      op: 'quantize per_group',
    });
    const y = Float32Array.from([Infinity, 0, 0, 0]);
    expectQuantdError(() => quantizeTensor(floatInput('g', y, layout), spec, qp), 'INPUT_NOT_FINITE', {
      index: 0,
      value: 'Infinity',
    });
  });

  it('per_tensor saturates ±Infinity to quant_max / quant_min', () => {
    const cases: [SpecOptions, number, number, [number, number]][] = [
      [{ qdtype: 'int8' }, 0.5, 0, [127, -128]],
      [{ qdtype: 'uint8' }, 0.5, 128, [255, 0]],
      [{ qdtype: 'int8', quant_min: -100, quant_max: 100 }, 0.5, 3, [100, -100]],
      [{ qdtype: 'uint4' }, 2, 3, [15, 0]],
      [{ qdtype: 'int2' }, 2, 0, [1, -2]],
      [{ qdtype: 'int16' }, 1e-3, 0, [32767, -32768]],
      [{ qdtype: 'int32' }, 1e-3, 0, [2147483647, -2147483648]],
    ];
    for (const [options, scale, zp, [hi, lo]] of cases) {
      const { spec, layout, x } = setup(options, [3], [Infinity, -Infinity, 0]);
      const q = quantizeValues('t', x, layout, spec, qparams([scale], [zp]));
      expect(Array.from(q), JSON.stringify(options)).toEqual([hi, lo, zp]);
    }
  });

  it('per_channel and per_token saturate ±Infinity too', () => {
    const pc = setup({ scheme: 'per_channel', axis: 1 }, [2, 2], [Infinity, -Infinity, -Infinity, Infinity]);
    expect(Array.from(quantizeValues('t', pc.x, pc.layout, pc.spec, qparams([1, 2], [0, 5])))).toEqual([
      127, -128, -128, 127,
    ]);
    const pt = setup({ scheme: 'per_token', mode: 'symmetric' }, [2, 2], [Infinity, 0, 0, -Infinity]);
    expect(Array.from(quantizeValues('t', pt.x, pt.layout, pt.spec, qparams([1, 1], [0, 0])))).toEqual([
      127, 0, 0, -128,
    ]);
  });

  it('fp8 clamps ±Infinity to ±quant_max before encoding', () => {
    const e4 = setup({ qdtype: 'float8_e4m3fn' }, [2], [Infinity, -Infinity]);
    const q4 = quantizeValues('t', e4.x, e4.layout, e4.spec, qparams([1], [0]));
    expect(Array.from(q4)).toEqual([0x7e, 0xfe]); // ±448
    const e5 = setup({ qdtype: 'float8_e5m2' }, [2], [Infinity, -Infinity]);
    const q5 = quantizeValues('t', e5.x, e5.layout, e5.spec, qparams([1], [0]));
    expect(Array.from(q5)).toEqual([0x7b, 0xfb]); // ±57344, not ±Infinity
    const narrowed = setup({ qdtype: 'float8_e4m3fn', quant_min: -240, quant_max: 240 }, [2], [1e9, -1e9]);
    const qn = quantizeValues('t', narrowed.x, narrowed.layout, narrowed.spec, qparams([1], [0]));
    expect(Array.from(qn).map((c) => decodeFp8(c, 'float8_e4m3fn'))).toEqual([240, -240]);
  });

  const everyScheme: [string, SpecOptions, number[], boolean][] = [
    ['per_tensor affine', {}, [4], false],
    ['per_tensor symmetric uint8', { qdtype: 'uint8', mode: 'symmetric' }, [4], false],
    ['per_channel', { scheme: 'per_channel', axis: 1 }, [2, 2], false],
    [
      'per_channel float_qparams',
      { qdtype: 'uint4', scheme: 'per_channel', mode: 'float_qparams' },
      [2, 2],
      true,
    ],
    ['per_token symmetric', { scheme: 'per_token', mode: 'symmetric' }, [2, 2], false],
    ['per_token affine', { scheme: 'per_token' }, [2, 2], true],
    ['per_group', { qdtype: 'int4', scheme: 'per_group', group_size: 2 }, [2, 2], false],
    ['fp8 e4m3fn', { qdtype: 'float8_e4m3fn' }, [4], false],
    ['fp8 e5m2 per_channel', { qdtype: 'float8_e5m2', scheme: 'per_channel' }, [2, 2], false],
    ['int2', { qdtype: 'int2' }, [4], false],
    ['int32', { qdtype: 'int32' }, [4], false],
  ];

  it.each(everyScheme)('NaN is rejected by every quantize: %s', (_label, options, shape, floatZp) => {
    for (let at = 0; at < 4; at++) {
      const values = [0.25, -0.5, 1, 0];
      values[at] = NaN;
      const { spec, layout, x } = setup(options, shape, values);
      const units = layout.channels;
      const zp = new Array<number>(units).fill(spec.qdtype === 'uint8' ? 128 : 0);
      const qp = qparams(new Array<number>(units).fill(0.125), zp, floatZp);
      expectQuantdError(() => quantize('x', x, layout, spec, qp), 'INPUT_NOT_FINITE', {
        tensor: 'x',
        value: 'NaN',
        index: at,
      });
    }
  });
});

describe('validateQParams', () => {
  const int8 = parseSpec({});
  it.each([
    ['0', 0],
    ['negative', -0.5],
    ['-0', -0],
    ['NaN', NaN],
    ['Infinity', Infinity],
    ['-Infinity', -Infinity],
    ['1e-45 (reciprocal overflows float32)', 1e-45],
    ['2e-39 (reciprocal 5e38 overflows float32)', 2e-39],
  ])('rejects scale %s with SCALE_INVALID', (_label, bad) => {
    const qp = qparams([1, bad, 1], [0, 0, 0]);
    const err = expectQuantdError(() => validateQParams('w', qp, int8), 'SCALE_INVALID', {
      tensor: 'w',
      index: 1,
    });
    expect(err.message).toContain('scale[1]');
  });

  it('accepts tiny scales whose float32 reciprocal is finite', () => {
    expect(() => validateQParams('w', qparams([2 ** -126], [0]), int8)).not.toThrow();
    expect(() => validateQParams('w', qparams([3e-39], [0]), int8)).not.toThrow(); // 1/3e-39 ≈ 3.3e38
    expect(() => validateQParams('w', qparams([3e38], [0]), int8)).not.toThrow();
  });

  it('rejects zero points outside [quant_min, quant_max] with ZERO_POINT_OUT_OF_RANGE', () => {
    expectQuantdError(() => validateQParams('w', qparams([1], [128]), int8), 'ZERO_POINT_OUT_OF_RANGE', {
      tensor: 'w',
      index: 0,
      value: 128,
      quant_min: -128,
      quant_max: 127,
    });
    expectQuantdError(
      () => validateQParams('w', qparams([1, 1], [0, -129]), int8),
      'ZERO_POINT_OUT_OF_RANGE',
      {
        index: 1,
      },
    );
    const uint8 = parseSpec({ qdtype: 'uint8' });
    expectQuantdError(() => validateQParams('w', qparams([1], [-1]), uint8), 'ZERO_POINT_OUT_OF_RANGE');
    const narrowed = parseSpec({ qdtype: 'uint8', quant_min: 10, quant_max: 200 });
    expectQuantdError(() => validateQParams('w', qparams([1], [5]), narrowed), 'ZERO_POINT_OUT_OF_RANGE', {
      quant_min: 10,
    });
    expectQuantdError(
      () => validateQParams('w', qparams([1], [16]), parseSpec({ qdtype: 'uint4' })),
      'ZERO_POINT_OUT_OF_RANGE',
    );
    expect(() => validateQParams('w', qparams([1, 1], [-128, 127]), int8)).not.toThrow();
  });

  it('rejects a non-zero zero point for fp8 with ZERO_POINT_INVALID', () => {
    for (const qdtype of ['float8_e4m3fn', 'float8_e5m2']) {
      const spec = parseSpec({ qdtype });
      expectQuantdError(() => validateQParams('w', qparams([1], [1]), spec), 'ZERO_POINT_INVALID', {
        tensor: 'w',
        index: 0,
        value: 1,
      });
      expect(() => validateQParams('w', qparams([1], [0]), spec)).not.toThrow();
    }
  });

  it('rejects non-finite float zero points with ZERO_POINT_INVALID', () => {
    const spec = parseSpec({ qdtype: 'uint8', scheme: 'per_channel', mode: 'float_qparams' });
    expectQuantdError(() => validateQParams('w', qparams([1], [NaN], true), spec), 'ZERO_POINT_INVALID');
    expectQuantdError(() => validateQParams('w', qparams([1], [Infinity], true), spec), 'ZERO_POINT_INVALID');
    expect(() => validateQParams('w', qparams([1], [-300.5], true), spec)).not.toThrow();
  });

  it('is applied to given qparams by quantizeTensor and to every dequantizeTensor', () => {
    const { spec, layout, x } = setup({}, [2], [1, 2]);
    expectQuantdError(
      () => quantizeTensor(floatInput('w', x, layout), spec, qparams([0], [0])),
      'SCALE_INVALID',
    );
    expectQuantdError(
      () => quantizeTensor(floatInput('w', x, layout), spec, qparams([1], [200])),
      'ZERO_POINT_OUT_OF_RANGE',
    );
    const data = new Uint8Array(2);
    expectQuantdError(
      () => dequantizeTensor(quantizedInput('w', data, spec, layout, qparams([NaN], [0])), 'float32'),
      'SCALE_INVALID',
    );
  });
});

describe('degenerate ranges', () => {
  it('rejects an empty tensor with EMPTY_TENSOR', () => {
    const { spec, layout, x } = setup({}, [0, 4], []);
    const err = expectQuantdError(() => chooseQParams('e', x, layout, spec), 'EMPTY_TENSOR', {
      tensor: 'e',
      shape: '[0, 4]',
    });
    expect(err.message).toContain('[0, 4]');
    const pc = setup({ scheme: 'per_channel', axis: 1 }, [0, 3], []);
    expectQuantdError(() => chooseQParams('e', pc.x, pc.layout, pc.spec), 'EMPTY_TENSOR');
  });

  it.each<[string, SpecOptions, number[]]>([
    ['affine per_tensor', {}, [2]],
    ['affine per_channel', { scheme: 'per_channel' }, [1, 2]],
    ['affine per_group', { scheme: 'per_group', group_size: 2 }, [1, 2]],
    ['per_token affine', { scheme: 'per_token' }, [1, 2]],
    ['float_qparams', { qdtype: 'uint8', scheme: 'per_channel', mode: 'float_qparams' }, [1, 2]],
  ])('rejects a range whose width overflows float32 (%s) with RANGE_OVERFLOW', (_label, options, shape) => {
    // 3e38 - (-3e38) = 6e38 > FLOAT32_MAX: the scale would be Infinity
    const { spec, layout, x } = setup(options, shape, [-3e38, 3e38]);
    expectQuantdError(() => chooseQParams('big', x, layout, spec), 'RANGE_OVERFLOW', { tensor: 'big' });
  });

  it('still handles ±3e38 in symmetric mode, where no difference is taken', () => {
    const { spec, layout, x } = setup({ mode: 'symmetric' }, [2], [-3e38, 3e38]);
    const qp = chooseQParams('big', x, layout, spec);
    expect(qp.scale[0]).toBe(Math.fround(Math.fround(3e38) / 127.5));
    expect(Array.from(quantizeValues('big', x, layout, spec, qp))).toEqual([-128, 127]);
  });

  it('greedy range search refuses values beyond float16 with FEATURE_UNSUPPORTED', () => {
    for (const big of [70000, -70000, 65505]) {
      const { spec, layout, x } = setup({ qdtype: 'int4', range_search: 'greedy' }, [3], [0, 1, big]);
      const err = expectQuantdError(() => chooseQParams('w', x, layout, spec), 'FEATURE_UNSUPPORTED');
      expect(err.message).toContain('w');
    }
    const ok = setup({ qdtype: 'int4', range_search: 'greedy' }, [3], [0, 1, 65504]);
    expect(() => chooseQParams('w', ok.x, ok.layout, ok.spec)).not.toThrow();
  });
});

describe('fake-quantize scope', () => {
  it.each<[string, SpecOptions, number[]]>([
    ['per_group', { scheme: 'per_group', group_size: 2 }, [2, 2]],
    ['per_token', { scheme: 'per_token' }, [2, 2]],
    ['fp8', { qdtype: 'float8_e4m3fn' }, [4]],
  ])('rejects %s with FEATURE_UNSUPPORTED', (_label, options, shape) => {
    const { spec, layout, x } = setup(options, shape, [0, 1, 2, 3]);
    expectQuantdError(() => checkFakeQuantizable(spec), 'FEATURE_UNSUPPORTED');
    expectQuantdError(
      () => fakeQuantizeTensor(floatInput('f', x, layout), spec, 'float32'),
      'FEATURE_UNSUPPORTED',
    );
  });

  it('rejects NaN input with INPUT_NOT_FINITE', () => {
    const { spec, layout, x } = setup({}, [3], [0, NaN, 1]);
    expectQuantdError(() => fakeQuantize('f', x, layout, spec, qparams([1], [0])), 'INPUT_NOT_FINITE', {
      tensor: 'f',
      index: 1,
    });
  });

  it('saturates ±Infinity and clears the mask there', () => {
    const { spec, layout, x } = setup({}, [3], [Infinity, -Infinity, 1]);
    const { out, mask } = fakeQuantize('f', x, layout, spec, qparams([0.5], [1]));
    // (127 - 1) · 0.5 = 63, (-128 - 1) · 0.5 = -64.5, (round(2) + 1 - 1) · 0.5 = 1
    expect(Array.from(out)).toEqual([63, -64.5, 1]);
    expect(Array.from(mask)).toEqual([0, 0, 1]);
  });

  it('planLayout errors surface before any arithmetic', () => {
    expectQuantdError(
      () => planLayout('w', [4, 6], parseSpec({ scheme: 'per_group', group_size: 4 })),
      'GROUP_SIZE_INVALID',
    );
  });
});
