/**
 * Worked examples with the arithmetic written out (float32 values as printed by numpy.float32;
 * checked against torch 1.13's MinMaxObserver where torch defines the case).
 */
import { describe, expect, it } from 'vitest';

import { dequantize } from '../../src/core/dequantize.js';
import { fakeQuantize } from '../../src/core/fake-quantize.js';
import { decodeFp8 } from '../../src/core/fp8.js';
import { chooseQParams } from '../../src/core/qparams.js';
import { quantizeValues, storageBytes } from '../../src/core/quantize.js';
import { qparams, setup } from './fixtures.js';

describe('choose_qparams', () => {
  it('uint8 affine on [-1, 3]: scale float32(4/255), zero point 64', () => {
    // min_neg = -1, max_pos = 3
    // scale = f32(3 - (-1)) / f32(255 - 0) = 4 / 255 = 0.01568627543747425 (float32)
    // zp    = 0 - round(f32(-1 / 0.01568627543747425)) = 0 - round(-63.749996) = 0 - (-64) = 64
    const { spec, layout, x } = setup({ qdtype: 'uint8' }, [4], [-1, 0, 1, 3]);
    const qp = chooseQParams('w', x, layout, spec);
    expect(qp.scale[0]).toBe(0.01568627543747425);
    expect(qp.zeroPoint).toBeInstanceOf(Int32Array);
    expect(qp.zeroPoint[0]).toBe(64);
    // quantize: inv = f32(1 / 0.01568627543747425) = 63.749996
    //   -1 → round(-63.749996) + 64 = -64 + 64 = 0
    //    0 → 0 + 64 = 64
    //    1 → round(63.749996) + 64 = 64 + 64 = 128
    //    3 → round(191.24998) + 64 = 191 + 64 = 255
    const q = quantizeValues('w', x, layout, spec, qp);
    expect(Array.from(q)).toEqual([0, 64, 128, 255]);
    // dequantize: (q - 64) · 0.01568627543747425, rounded to float32
    //   (0 - 64) · s = -1.003921627998352, (255 - 64) · s = 191 · s = 2.9960784912109375
    const d = dequantize(storageBytes(q, 'uint8'), 'uint8', layout, qp);
    expect(Array.from(d)).toEqual([-1.003921627998352, 0, 1.003921627998352, 2.9960784912109375]);
  });

  it('int8 symmetric: scale = amax / 127.5, zero point 0', () => {
    // max(-min_neg, max_pos) = 2.55 (float32 2.5499999523); scale = f32(2.55 / (255 / 2)) = f32(0.02)
    const a = setup({ qdtype: 'int8', mode: 'symmetric' }, [2], [-2.55, 1]);
    const qa = chooseQParams('w', a.x, a.layout, a.spec);
    expect(qa.scale[0]).toBe(0.019999999552965164);
    expect(qa.zeroPoint[0]).toBe(0);
    // amax 127.5 gives scale exactly 1; -127.5 · 1 rounds half to even → -128
    const b = setup({ qdtype: 'int8', mode: 'symmetric' }, [3], [-127.5, 3, 126.5]);
    const qb = chooseQParams('w', b.x, b.layout, b.spec);
    expect([qb.scale[0], qb.zeroPoint[0]]).toEqual([1, 0]);
    expect(Array.from(quantizeValues('w', b.x, b.layout, b.spec, qb))).toEqual([-128, 3, 126]);
  });

  it('uint8 symmetric: zero point 128, and (0 + 254) // 2 = 127 when quant_max is 254', () => {
    // full range: scale = 2.55 / (255 / 2) = f32(0.02), zp = 128 (torch's fixed value for uint8)
    const a = setup({ qdtype: 'uint8', mode: 'symmetric' }, [2], [-2.55, 1]);
    const qa = chooseQParams('w', a.x, a.layout, a.spec);
    expect([qa.scale[0], qa.zeroPoint[0]]).toEqual([0.019999999552965164, 128]);
    // customised range [0, 254]: scale = 2.55 / (254 / 2) = 2.55 / 127 = 0.020078739151358604, zp = 127
    const b = setup({ qdtype: 'uint8', mode: 'symmetric', quant_max: 254 }, [2], [-2.55, 1]);
    const qb = chooseQParams('w', b.x, b.layout, b.spec);
    expect([qb.scale[0], qb.zeroPoint[0]]).toEqual([0.020078739151358604, 127]);
  });

  it('a constant zero tensor gets scale eps and the zero point that keeps 0 exact', () => {
    // max_pos - min_neg = 0 → scale = max(0 / 255, 2^-23) = 2^-23; zp = 0 - round(0) = 0 (int8: -128 - 0 → clamp)
    const a = setup({ qdtype: 'uint8' }, [3], [0, 0, 0]);
    const qa = chooseQParams('w', a.x, a.layout, a.spec);
    expect([qa.scale[0], qa.zeroPoint[0]]).toEqual([2 ** -23, 0]);
    const b = setup({ qdtype: 'int8', eps: 0.25 }, [2], [0, 0]);
    const qb = chooseQParams('w', b.x, b.layout, b.spec);
    expect([qb.scale[0], qb.zeroPoint[0]]).toEqual([0.25, -128]);
  });

  it('float_qparams per_channel: scale (max - min) / 255, float zero point -min / scale', () => {
    // row 0: [1, 3] → scale = f32(2 / 255) = 0.007843137718737125, zp = f32(-1 / scale) = -127.49999237060547
    // row 1: [2, 2] → scale = 0 is not > eps → 1; zp = -2 / 1 = -2
    const { spec, layout, x } = setup(
      { qdtype: 'uint8', scheme: 'per_channel', mode: 'float_qparams' },
      [2, 2],
      [1, 3, 2, 2],
    );
    const qp = chooseQParams('w', x, layout, spec);
    expect(qp.zeroPoint).toBeInstanceOf(Float32Array);
    expect(Array.from(qp.scale)).toEqual([0.007843137718737125, 1]);
    expect(Array.from(qp.zeroPoint)).toEqual([-127.49999237060547, -2]);
    // quantize adds the float zero point before rounding:
    //   1 · 127.5 - 127.49999 = 0.0000076 → 0;  3 · 127.5 = 382.5 → 382.5 - 127.49999 = 255.00001 → 255
    //   row 1: 2 · 1 + (-2) = 0 → 0
    // (inv = f32(1 / 0.007843137718737125) = 127.49999; the products round as float32)
    expect(Array.from(quantizeValues('w', x, layout, spec, qp))).toEqual([0, 255, 0, 0]);
  });

  it('per_token affine: the zero point comes from the smaller of the two errors (seed 000)', () => {
    // row [-1, 3], qmin -128, qmax 127: scale = 4 / 255 = 0.01568627543747425
    // descaled_min = -63.749996, descaled_max = 191.24998
    // zp_from_min_error = -128 + -63.749996 = -191.75, zp_from_max_error = 127 + 191.24998 = 318.25
    // sum 126.5 > 0 → zp = qmin - descaled_min = -128 + 63.749996 = -64.25 → clamp → round → -64
    const { spec, layout, x } = setup({ scheme: 'per_token' }, [1, 2], [-1, 3]);
    const qp = chooseQParams('w', x, layout, spec);
    expect(qp.zeroPoint).toBeInstanceOf(Float32Array);
    expect([qp.scale[0], qp.zeroPoint[0]]).toEqual([0.01568627543747425, -64]);
    // q = round(x · 63.749996 + (-64)): -1 → round(-127.749996) = -128; 3 → round(127.24998) = 127
    expect(Array.from(quantizeValues('w', x, layout, spec, qp))).toEqual([-128, 127]);
  });

  it('per_token symmetric: scale = max(amax, 1e-5) / 127', () => {
    // row 0: amax 127 → scale 1; row 1: all zero → amax clamped to f32(1e-5) → f32(1e-5 / 127) = 7.874015750530816e-8
    const { spec, layout, x } = setup({ scheme: 'per_token', mode: 'symmetric' }, [2, 2], [-127, 63.5, 0, 0]);
    const qp = chooseQParams('w', x, layout, spec);
    expect(Array.from(qp.scale)).toEqual([1, 7.874015750530816e-8]);
    expect(Array.from(qp.zeroPoint)).toEqual([0, 0]);
    // 63.5 → 64 (ties to even)
    expect(Array.from(quantizeValues('w', x, layout, spec, qp))).toEqual([-127, 64, 0, 0]);
  });
});

describe('quantize at exact halves', () => {
  it('per_tensor, scale 0.5, zp 0: 1.25 → round(2.5) = 2 and 1.75 → round(3.5) = 4', () => {
    const { spec, layout, x } = setup({}, [6], [1.25, 1.75, -1.25, -1.75, 0.25, 0.75]);
    // x · 2 = [2.5, 3.5, -2.5, -3.5, 0.5, 1.5] → [2, 4, -2, -4, 0, 2]
    expect(Array.from(quantizeValues('t', x, layout, spec, qparams([0.5], [0])))).toEqual([
      2, 4, -2, -4, 0, 2,
    ]);
  });

  it('per_tensor / per_channel round before adding the zero point, per_group / per_token after', () => {
    // scale 0.5, zp 1, x = 1.25 and 3.25 (x · inv = 2.5 and 6.5):
    //   per_tensor / per_channel: round(2.5) + 1 = 2 + 1 = 3;  round(6.5) + 1 = 6 + 1 = 7
    //   per_group / per_token:    round(2.5 + 1) = round(3.5) = 4;  round(7.5) = 8
    const values = [1.25, 3.25];
    const pt = setup({}, [2], values);
    expect(Array.from(quantizeValues('t', pt.x, pt.layout, pt.spec, qparams([0.5], [1])))).toEqual([3, 7]);
    const pc = setup({ scheme: 'per_channel' }, [1, 2], values);
    expect(Array.from(quantizeValues('t', pc.x, pc.layout, pc.spec, qparams([0.5], [1])))).toEqual([3, 7]);
    const pg = setup({ scheme: 'per_group', group_size: 2 }, [1, 2], values);
    expect(Array.from(quantizeValues('t', pg.x, pg.layout, pg.spec, qparams([0.5], [1])))).toEqual([4, 8]);
    const tk = setup({ scheme: 'per_token' }, [1, 2], values);
    expect(Array.from(quantizeValues('t', tk.x, tk.layout, tk.spec, qparams([0.5], [1], true)))).toEqual([
      4, 8,
    ]);
    // with an even zero point the two orders agree: round(2.5) + 2 = 4 = round(4.5)
    expect(Array.from(quantizeValues('t', pt.x, pt.layout, pt.spec, qparams([0.5], [2])))).toEqual([4, 8]);
    expect(Array.from(quantizeValues('t', pg.x, pg.layout, pg.spec, qparams([0.5], [2])))).toEqual([4, 8]);
  });

  it('float_qparams adds a non-integer zero point before rounding', () => {
    // scale 0.5, zp 0.5: x · 2 + 0.5 for x = [1, 1.5, 0.25, -1.25] → [2.5, 3.5, 1, -2] → [2, 4, 1, 0 (clamped)]
    const { spec, layout, x } = setup(
      { qdtype: 'uint8', scheme: 'per_channel', mode: 'float_qparams' },
      [1, 4],
      [1, 1.5, 0.25, -1.25],
    );
    const qp = qparams([0.5], [0.5], true);
    const q = quantizeValues('t', x, layout, spec, qp);
    expect(Array.from(q)).toEqual([2, 4, 1, 0]);
    // dequantize: (q - 0.5) · 0.5 → [0.75, 1.75, 0.25, -0.25]
    expect(Array.from(dequantize(storageBytes(q, 'uint8'), 'uint8', layout, qp))).toEqual([
      0.75, 1.75, 0.25, -0.25,
    ]);
    // fake-quantize agrees, and the clamped element has mask 0: round(-2) = -2 < 0
    const fq = fakeQuantize('t', x, layout, spec, qp);
    expect(Array.from(fq.out)).toEqual([0.75, 1.75, 0.25, -0.25]);
    expect(Array.from(fq.mask)).toEqual([1, 1, 1, 0]);
  });

  it('fake-quantize per_tensor: (clamp(round(x · inv) + zp) - zp) · scale and the in-range mask', () => {
    // int4, scale 0.5, zp 1: x = [1.25, 3.5, -5, 100, 3, -4.5]
    //   round(x · 2) + 1 = [3, 8, -9, 201, 7, -8]
    //   clamp to [-8, 7] → [3, 7, -8, 7, 7, -8]; minus zp, times 0.5 → [1, 3, -4.5, 3, 3, -4.5]
    //   mask: inside [-8, 7] before clamping → [1, 0, 0, 0, 1, 1] (the bounds themselves count)
    const { spec, layout, x } = setup({ qdtype: 'int4' }, [6], [1.25, 3.5, -5, 100, 3, -4.5]);
    const { out, mask } = fakeQuantize('t', x, layout, spec, qparams([0.5], [1]));
    expect(Array.from(out)).toEqual([1, 3, -4.5, 3, 3, -4.5]);
    expect(Array.from(mask)).toEqual([1, 0, 0, 0, 1, 1]);
  });
});

describe('fp8 quantize', () => {
  it('e4m3fn, scale 1: clamp to ±448, then round to nearest even on the fp8 grid', () => {
    // 17 lies between 16 (0x58 = 0.1011.000) and 18 (0x59): tie → even mantissa → 16
    // 19 lies between 18 (0x59) and 20 (0x5A): tie → 20
    // 500 → clamp 448 (0x7E); -0.001 → nearest is -2^-9 (0x81); 2^-10 is half of 2^-9 → 0
    const { spec, layout, x } = setup({ qdtype: 'float8_e4m3fn' }, [6], [17, 19, 500, -0.001, 2 ** -10, -0]);
    const q = quantizeValues('t', x, layout, spec, qparams([1], [0]));
    expect(Array.from(q)).toEqual([0x58, 0x5a, 0x7e, 0x81, 0x00, 0x80]);
    expect(Array.from(q).map((c) => decodeFp8(c, 'float8_e4m3fn'))).toEqual([16, 20, 448, -(2 ** -9), 0, -0]);
  });

  it('e5m2 symmetric: scale = amax / 57344', () => {
    // amax = 114688 → scale = 114688 / (f32(57344 - (-57344)) / 2) = 2
    // -114688 · 0.5 = -57344 → 0xFB; 3 · 0.5 = 1.5 = 0.01111.10 → 0x3E
    const { spec, layout, x } = setup({ qdtype: 'float8_e5m2' }, [2], [-114688, 3]);
    const qp = chooseQParams('t', x, layout, spec);
    expect([qp.scale[0], qp.zeroPoint[0]]).toEqual([2, 0]);
    expect(Array.from(quantizeValues('t', x, layout, spec, qp))).toEqual([0xfb, 0x3e]);
    expect(Array.from(dequantize(new Uint8Array([0xfb, 0x3e]), 'float8_e5m2', layout, qp))).toEqual([
      -114688, 3,
    ]);
  });
});

describe('sub-byte storage', () => {
  it('int4 per_tensor codes are packed two to a byte, low nibble first', () => {
    // scale 1, zp 0: [1, -1, 7, -8, 3] → nibbles [1, 0xF, 7, 0x8, 3] → [0xF1, 0x87, 0x03]
    const { spec, layout, x } = setup({ qdtype: 'int4' }, [5], [1, -1, 7, -8, 3]);
    const q = quantizeValues('t', x, layout, spec, qparams([1], [0]));
    expect(Array.from(storageBytes(q, 'int4'))).toEqual([0xf1, 0x87, 0x03]);
    expect(
      Array.from(dequantize(new Uint8Array([0xf1, 0x87, 0x03]), 'int4', layout, qparams([1], [0]))),
    ).toEqual([1, -1, 7, -8, 3]);
  });
});
