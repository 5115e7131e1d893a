/**
 * src/core against a second, independent implementation of docs/numerics.md written here from the
 * formulas (and, for per_token affine, from seed 000's `_choose_qparams_per_token_asymmetric_impl`).
 * Scales, zero points, codes and dequantized values must agree bit for bit on random tensors, for
 * every qdtype and scheme; the order of operations at exact halves is what this catches.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { dequantize } from '../../src/core/dequantize.js';
import { planLayout } from '../../src/core/layout.js';
import { dequantizeTensor } from '../../src/core/ops.js';
import { chooseQParams } from '../../src/core/qparams.js';
import { quantizeValues, storageBytes } from '../../src/core/quantize.js';
import { parseSpec } from '../../src/core/spec.js';
import {
  BITS,
  FP8_QDTYPES,
  INT_QDTYPES,
  RANGE,
  optionsOf,
  quantCase,
  type AnyQDType,
  type QuantCase,
} from './arbitraries.js';
import { quantizedInput } from './fixtures.js';
import {
  bf16RefEncode,
  fp8RefDecode,
  fp8RefEncode,
  halfRefEncode,
  rintRef,
  type Fp8Name,
} from './oracles.js';

const f = Math.fround;
const EPS = 2 ** -23;
const isFp8 = (q: AnyQDType): q is Fp8Name => q === 'float8_e4m3fn' || q === 'float8_e5m2';
const clamp = (v: number, lo: number, hi: number): number => (v < lo ? lo : v > hi ? hi : v);

interface Units {
  readonly of: number[];
  readonly count: number;
}

/** Which qparam unit each flat element belongs to, from the shape's strides. */
function units(c: QuantCase): Units {
  const shape = c.shape;
  const numel = shape.reduce((p, d) => p * d, 1);
  const of = new Array<number>(numel);
  let count: number;
  switch (c.scheme) {
    case 'per_tensor':
      of.fill(0);
      count = 1;
      break;
    case 'per_channel': {
      const a = (c.axis ?? 0) < 0 ? (c.axis ?? 0) + shape.length : (c.axis ?? 0);
      const stride = shape.slice(a + 1).reduce((p, d) => p * d, 1);
      for (let i = 0; i < numel; i++) of[i] = Math.floor(i / stride) % shape[a]!;
      count = shape[a]!;
      break;
    }
    case 'per_token': {
      const last = shape[shape.length - 1]!;
      for (let i = 0; i < numel; i++) of[i] = Math.floor(i / last);
      count = numel / last;
      break;
    }
    case 'per_group': {
      const k = shape[1]!;
      const g = Math.min(c.groupSize ?? 128, k);
      for (let i = 0; i < numel; i++) of[i] = Math.floor(i / g);
      count = numel / g;
      break;
    }
  }
  return { of, count };
}

interface RefQParams {
  readonly scale: number[];
  readonly zp: number[];
}

function refChoose(c: QuantCase, u: Units, qmin: number, qmax: number): RefQParams {
  const lo = new Array<number>(u.count).fill(Infinity);
  const hi = new Array<number>(u.count).fill(-Infinity);
  c.x.forEach((v, i) => {
    const k = u.of[i]!;
    // zeros order -0 < +0: a zero minimum is -0 if the unit holds a -0, a zero maximum +0 if it holds a +0
    if (v < lo[k]! || (v === 0 && lo[k] === 0 && Object.is(v, -0))) lo[k] = v;
    if (v > hi[k]! || (v === 0 && hi[k] === 0 && Object.is(v, 0))) hi[k] = v;
  });
  const [fullMin, fullMax] = RANGE[c.qdtype];
  const signed = fullMin < 0;
  const custom = qmin !== fullMin || qmax !== fullMax;
  const scale: number[] = [];
  const zp: number[] = [];
  for (let k = 0; k < u.count; k++) {
    const mn = lo[k]!;
    const mx = hi[k]!;
    const minNeg = Math.min(mn, 0);
    const maxPos = Math.max(mx, 0);
    if (c.scheme === 'per_token' && c.mode === 'symmetric') {
      // scale = max(amax, 1e-5) / quant_max (127 for int8), zp = 0
      scale.push(f(Math.max(Math.max(-mn, mx), f(1e-5)) / f(qmax)));
      zp.push(0);
    } else if (c.scheme === 'per_token') {
      // seed 000 _choose_qparams_per_token_asymmetric_impl, every step in float32
      const s = Math.max(f(f(maxPos - minNeg) / f(qmax - qmin)), EPS);
      const descaledMin = f(minNeg / s);
      const descaledMax = f(maxPos / s);
      const fromMin = f(qmin + descaledMin);
      const fromMax = f(qmax + descaledMax);
      const z = f(fromMin + fromMax) > 0 ? f(qmin - descaledMin) : f(qmax - descaledMax);
      scale.push(s);
      zp.push(f(rintRef(clamp(z, qmin, qmax)))); // stored as float32
    } else if (c.mode === 'float_qparams') {
      let s = f(f(mx - mn) / f(qmax - qmin));
      s = s > EPS ? s : 1;
      scale.push(s);
      zp.push(f(-mn / s));
    } else if (c.mode === 'symmetric') {
      scale.push(Math.max(f(Math.max(-minNeg, maxPos) / f((qmax - qmin) / 2)), EPS));
      zp.push(signed ? 0 : custom ? Math.floor((qmin + qmax) / 2) : 2 ** (BITS[c.qdtype] - 1));
    } else {
      const s = Math.max(f(f(maxPos - minNeg) / f(qmax - qmin)), EPS);
      scale.push(s);
      zp.push(clamp(qmin - rintRef(f(minNeg / s)), qmin, qmax));
    }
  }
  return { scale, zp };
}

/** docs/numerics.md quantize, one element. */
function refQuantize(c: QuantCase, x: number, s: number, zp: number, qmin: number, qmax: number): number {
  const inv = f(1 / s);
  if (isFp8(c.qdtype)) return fp8RefEncode(clamp(f(x * inv), qmin, qmax), c.qdtype);
  const zeroFirst = c.mode === 'float_qparams' || c.scheme === 'per_token' || c.scheme === 'per_group';
  // the zero point joins float32 arithmetic as a float32 (torch adds it to a float32 tensor)
  const q = zeroFirst ? rintRef(f(f(x * inv) + f(zp))) : f(rintRef(f(x * inv)) + f(zp));
  return clamp(q, qmin, qmax) + 0; // codes are stored as integers: a -0 becomes 0
}

/** docs/numerics.md dequantize, one element: (f32(q) - zp) · scale. */
function refDequantize(c: QuantCase, q: number, s: number, zp: number): number {
  const v = isFp8(c.qdtype) ? fp8RefDecode(q, c.qdtype) : f(q);
  return f(f(v - f(zp)) * s);
}

const hex = (xs: ArrayLike<number>): string =>
  Array.from(xs, (b) => b.toString(16).padStart(2, '0')).join('');

function check(c: QuantCase): void {
  const spec = parseSpec(optionsOf(c));
  const layout = planLayout('t', c.shape, spec);
  const [lo, hi] = RANGE[c.qdtype];
  const qmin = c.quantMin ?? lo;
  const qmax = c.quantMax ?? hi;
  const u = units(c);
  expect(layout.channels).toBe(u.count);

  const ref = refChoose(c, u, qmin, qmax);
  const qp = chooseQParams('t', c.x, layout, spec);
  for (let k = 0; k < u.count; k++) {
    if (!Object.is(qp.scale[k], ref.scale[k])) expect.fail(`scale[${k}]: ${qp.scale[k]} vs ${ref.scale[k]}`);
    if (!Object.is(qp.zeroPoint[k], ref.zp[k]))
      expect.fail(`zero_point[${k}]: ${qp.zeroPoint[k]} vs ${ref.zp[k]}`);
  }

  const q = quantizeValues('t', c.x, layout, spec, qp);
  const deq = dequantize(storageBytes(q, c.qdtype), c.qdtype, layout, qp);
  const refDeq = new Float32Array(c.x.length);
  for (let i = 0; i < c.x.length; i++) {
    const k = u.of[i]!;
    const want = refQuantize(c, c.x[i]!, ref.scale[k]!, ref.zp[k]!, qmin, qmax);
    if (q[i] !== want) expect.fail(`q[${i}] for x = ${c.x[i]}: ${q[i]} vs ${want}`);
    refDeq[i] = refDequantize(c, want, ref.scale[k]!, ref.zp[k]!);
    if (!Object.is(deq[i], refDeq[i])) expect.fail(`dequant[${i}]: ${deq[i]} vs ${refDeq[i]}`);
  }

  // float16 / bfloat16 output: the float32 result rounded once more, to nearest even
  const input = quantizedInput('t', storageBytes(q, c.qdtype), spec, layout, qp);
  const le16 = (codes: number[]): string => hex(codes.flatMap((h) => [h & 0xff, h >> 8]));
  expect(hex(dequantizeTensor(input, 'float16'))).toBe(le16(Array.from(refDeq, halfRefEncode)));
  expect(hex(dequantizeTensor(input, 'bfloat16'))).toBe(le16(Array.from(refDeq, bf16RefEncode)));
}

describe('src/core equals an independent implementation of docs/numerics.md (fast-check)', () => {
  it('integer qdtypes: qparams, codes and dequantized values bit for bit', () => {
    fc.assert(fc.property(quantCase(INT_QDTYPES), check), { numRuns: 500 });
  });

  it('fp8: qparams, codes and dequantized values bit for bit', () => {
    fc.assert(fc.property(quantCase(FP8_QDTYPES), check), { numRuns: 300 });
  });

  it('per_token affine: zero points near 0 keep torch.round’s sign (found by hand, torch 1.13)', () => {
    // row [-127.7, 127.3]: scale 1, descaled_min -127.7, descaled_max 127.3,
    // errors (-128 - 127.7) + (127 + 127.3) = -1.4 <= 0 → zp = 127 - 127.3 = -0.3 → round → -0.0
    // (torch stores float32 bits 0x80000000)
    const c: QuantCase = {
      qdtype: 'int8',
      scheme: 'per_token',
      mode: 'affine',
      shape: [1, 2],
      axis: undefined,
      groupSize: undefined,
      quantMin: undefined,
      quantMax: undefined,
      x: Float32Array.from([-127.7, 127.3]),
    };
    check(c);
    const spec = parseSpec(optionsOf(c));
    const qp = chooseQParams('t', c.x, planLayout('t', c.shape, spec), spec);
    expect(qp.scale[0]).toBe(1);
    expect(Object.is(qp.zeroPoint[0], -0)).toBe(true);
  });
});
