/**
 * Properties of the integer pipeline on random float32 tensors (fast-check; a failure prints the
 * seed and the shrunk counterexample). Every qdtype, every scheme, chosen qparams:
 *
 *   (a) inside the representable range, |x - dequant(quant(x))| <= scale/2 + rounding slack
 *   (b) quantize(dequantize(q)) === q with the same qparams (where float32 holds the codes exactly)
 *   (c) codes lie in [quant_min, quant_max] (also for random given qparams and ±Infinity)
 *   (d) the stored bytes (packed for sub-byte types) decode back to the codes
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { decodeValues, dequantize } from '../../src/core/dequantize.js';
import { fakeQuantize } from '../../src/core/fake-quantize.js';
import { planLayout, type Layout } from '../../src/core/layout.js';
import { dequantizeTensor, quantizeTensor } from '../../src/core/ops.js';
import { unpackSubByte } from '../../src/core/pack.js';
import { chooseQParams, type QParams } from '../../src/core/qparams.js';
import { quantizeValues, storageBytes, type QuantizedArray } from '../../src/core/quantize.js';
import { parseSpec, type QuantSpec } from '../../src/core/spec.js';
import {
  BITS,
  FP8_QDTYPES,
  INT_QDTYPES,
  RANGE,
  optionsOf,
  quantCase,
  valuesOf,
  type QuantCase,
} from './arbitraries.js';
import { float32sOf, floatInput, quantizedInput } from './fixtures.js';
import { fp8RefDecode, fp8RefEncode, halfRefDecode, halfRefEncode, rintRef, ulp32 } from './oracles.js';

const RUNS = 500;

interface Pipeline {
  readonly c: QuantCase;
  readonly spec: QuantSpec;
  readonly layout: Layout;
  readonly qp: QParams;
  readonly q: QuantizedArray;
  readonly bytes: Uint8Array;
  readonly deq: Float32Array;
  readonly qmin: number;
  readonly qmax: number;
}

function run(c: QuantCase): Pipeline {
  const spec = parseSpec(optionsOf(c));
  const layout = planLayout('t', c.shape, spec);
  const qp = chooseQParams('t', c.x, layout, spec);
  const q = quantizeValues('t', c.x, layout, spec, qp);
  const bytes = storageBytes(q, spec.qdtype);
  const deq = dequantize(bytes, spec.qdtype, layout, qp);
  const [lo, hi] = RANGE[c.qdtype];
  return { c, spec, layout, qp, q, bytes, deq, qmin: c.quantMin ?? lo, qmax: c.quantMax ?? hi };
}

/** The qparam unit of flat element i. */
const unitOf = (layout: Layout, i: number): number => Math.floor(i / layout.inner) % layout.channels;

const intCases = quantCase(INT_QDTYPES);

describe('integer qdtypes with chosen qparams (fast-check)', () => {
  it('(a) inside the representable range the round-trip error is at most scale/2 plus float32 slack', () => {
    let inside = 0;
    let total = 0;
    fc.assert(
      fc.property(intCases, (c) => {
        const p = run(c);
        total += p.layout.numel;
        for (let i = 0; i < p.layout.numel; i++) {
          const u = unitOf(p.layout, i);
          const s = p.qp.scale[u]!;
          const zp = Math.fround(p.qp.zeroPoint[u]!);
          const x = c.x[i]!;
          const q = p.q[i]!;
          expect(s).toBeGreaterThan(0);
          if (x < (p.qmin - zp) * s || x > (p.qmax - zp) * s) continue;
          inside++;
          const err = Math.abs(x - p.deq[i]!);
          // Slack: x·inv carries ~2^-23 relative error (2 ulps of x); adding the zero point to a
          // non-integer x·inv rounds at the ulp of |q| + |zp| (in code units), and so may float32(q)
          // and q - zp for int32 codes past 2^24; the final product rounds at half an ulp of the result.
          const slack = 2 * ulp32(x) + 2 * s * ulp32(Math.abs(q) + Math.abs(zp) + 1) + ulp32(p.deq[i]!);
          if (!(err <= s / 2 + slack)) {
            expect.fail(`x[${i}] = ${x}: dequant ${p.deq[i]} (q ${q}, scale ${s}, zp ${zp}), error ${err}`);
          }
        }
      }),
      { numRuns: RUNS },
    );
    // chosen qparams cover the tensor's own range, so most elements were checked
    expect(inside).toBeGreaterThan(total / 2);
  });

  it('(b) quantize(dequantize(q)) === q with the same qparams', () => {
    fc.assert(
      fc.property(intCases, (c) => {
        const p = run(c);
        const again = quantizeValues('t', p.deq, p.layout, p.spec, p.qp);
        for (let i = 0; i < p.layout.numel; i++) {
          const zp = p.qp.zeroPoint[unitOf(p.layout, i)]!;
          // int32 codes (and zero points) beyond 2^18 are not exact in float32 arithmetic: torch loses them too
          if (Math.abs(p.q[i]!) > 2 ** 18 || Math.abs(zp) > 2 ** 18) continue;
          if (again[i] !== p.q[i])
            expect.fail(`element ${i}: q ${p.q[i]} → dequant ${p.deq[i]} → q ${again[i]}`);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('(c) codes are integers in [quant_min, quant_max]; values far outside saturate', () => {
    fc.assert(
      fc.property(intCases, (c) => {
        const p = run(c);
        for (let i = 0; i < p.layout.numel; i++) {
          const q = p.q[i]!;
          if (!Number.isInteger(q) || q < p.qmin || q > p.qmax) expect.fail(`q[${i}] = ${q}`);
          const u = unitOf(p.layout, i);
          const s = p.qp.scale[u]!;
          const zp = Math.fround(p.qp.zeroPoint[u]!);
          const x = c.x[i]!;
          // one step of margin, plus the float32 error of x · inv and of the zero-point addition
          const margin =
            1 + 2 ** -20 * (Math.abs(x / s) + Math.abs(zp) + Math.abs(p.qmin) + Math.abs(p.qmax));
          if (x < (p.qmin - zp - margin) * s) expect(q).toBe(p.qmin);
          if (x > (p.qmax - zp + margin) * s) expect(q).toBe(p.qmax);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('(d) storage bytes have the documented length and decode back to the codes', () => {
    fc.assert(
      fc.property(intCases, (c) => {
        const p = run(c);
        const numel = p.layout.numel;
        const bits = BITS[c.qdtype];
        const codes = Array.from(p.q);
        expect(p.bytes.length).toBe(Math.ceil((numel * bits) / 8));
        expect(Array.from(decodeValues(p.bytes, c.qdtype, numel))).toEqual(codes);
        if (bits < 8) {
          const signed = RANGE[c.qdtype][0] < 0;
          expect(Array.from(unpackSubByte(p.bytes, numel, bits, signed))).toEqual(codes);
          const used = (numel * bits) % 8;
          if (used !== 0) expect(p.bytes[p.bytes.length - 1]! >> used).toBe(0); // zero padding
        }
        // the tensor-level API gives the same bytes and qparams, and dequantizes to the same floats
        const input = floatInput('t', c.x, p.layout);
        const out = quantizeTensor(input, p.spec);
        expect(Array.from(out.data)).toEqual(Array.from(p.bytes));
        expect(Array.from(out.qparams.scale)).toEqual(Array.from(p.qp.scale));
        expect(Array.from(out.qparams.zeroPoint)).toEqual(Array.from(p.qp.zeroPoint));
        const back = dequantizeTensor(
          quantizedInput('t', out.data, p.spec, p.layout, out.qparams),
          'float32',
        );
        expect(float32sOf(back)).toEqual(Array.from(p.deq));
      }),
      { numRuns: RUNS },
    );
  });

  it('fake-quantize equals dequantize(quantize(x)); the mask marks the unclamped in-range elements', () => {
    const cases = intCases.filter((c) => c.scheme === 'per_tensor' || c.scheme === 'per_channel');
    fc.assert(
      fc.property(cases, (c) => {
        const p = run(c);
        const { out, mask } = fakeQuantize('t', c.x, p.layout, p.spec, p.qp);
        for (let i = 0; i < p.layout.numel; i++) {
          if (Math.abs(p.q[i]!) > 2 ** 24) continue; // float32(q) inexact for large int32 codes
          // Integer zero points: q - zp is exact, so fake-quantize is dequantize(quantize(x)) bit for
          // bit. Float zero points: torch's fake_quantize_per_channel_affine does not round q - zp to
          // float32 before the product (checked with torch 1.13: x 1, scale 0.54296875,
          // zp -0.8417266, range [0, 1] gives 1.0, where float32 (q - zp) · scale is 0.99999994).
          const u = unitOf(p.layout, i);
          const want =
            c.mode === 'float_qparams'
              ? Math.fround((p.q[i]! - Math.fround(p.qp.zeroPoint[u]!)) * p.qp.scale[u]!)
              : p.deq[i]!;
          if (!Object.is(out[i], want)) expect.fail(`element ${i}: fake ${out[i]} vs ${want}`);
          // docs/numerics.md: mask = qmin <= round(x · inv) + zp <= qmax, before clamping
          const inv = Math.fround(1 / p.qp.scale[u]!);
          const zp = Math.fround(p.qp.zeroPoint[u]!);
          const t =
            c.mode === 'float_qparams'
              ? rintRef(Math.fround(Math.fround(c.x[i]! * inv) + zp))
              : Math.fround(rintRef(Math.fround(c.x[i]! * inv)) + zp);
          const inRange = t >= p.qmin && t <= p.qmax ? 1 : 0;
          if (mask[i] !== inRange)
            expect.fail(`mask[${i}] = ${mask[i]}, unclamped ${t} in [${p.qmin}, ${p.qmax}]`);
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe('random given qparams (fast-check)', () => {
  const given = intCases.chain((c) => {
    const spec = parseSpec(optionsOf(c));
    const layout = planLayout('t', c.shape, spec);
    const floatZp = c.mode === 'float_qparams' || (c.scheme === 'per_token' && c.mode === 'affine');
    const [lo, hi] = RANGE[c.qdtype];
    const qmin = c.quantMin ?? lo;
    const qmax = c.quantMax ?? hi;
    const scale = fc.float({ min: 2 ** -20, max: 2 ** 20, noNaN: true });
    const zp = floatZp
      ? fc.float({ min: -300, max: 300, noNaN: true })
      : fc.integer({ min: Math.max(qmin, -(2 ** 24)), max: Math.min(qmax, 2 ** 24) });
    const n = layout.channels;
    return fc.record({
      c: fc.constant(c),
      spec: fc.constant(spec),
      layout: fc.constant(layout),
      scale: fc.array(scale, { minLength: n, maxLength: n }),
      zp: fc.array(zp, { minLength: n, maxLength: n }),
      infinities: fc.boolean(),
    });
  });

  it('(c) codes stay in [quant_min, quant_max], ±Infinity saturates (except per_group, which rejects it)', () => {
    fc.assert(
      fc.property(given, ({ c, spec, layout, scale, zp, infinities }) => {
        const floatZp = c.mode === 'float_qparams' || (c.scheme === 'per_token' && c.mode === 'affine');
        const qp: QParams = {
          scale: Float32Array.from(scale),
          zeroPoint: floatZp ? Float32Array.from(zp) : Int32Array.from(zp),
        };
        const x = Float32Array.from(c.x);
        if (infinities && x.length >= 2) {
          x[0] = Infinity;
          x[x.length - 1] = -Infinity;
        }
        if (infinities && x.length >= 2 && c.scheme === 'per_group') {
          expect(() => quantizeValues('t', x, layout, spec, qp)).toThrow(/finite/);
          return;
        }
        const q = quantizeValues('t', x, layout, spec, qp);
        for (let i = 0; i < q.length; i++) {
          if (!Number.isInteger(q[i]) || q[i]! < spec.quantMin || q[i]! > spec.quantMax)
            expect.fail(`q[${i}] = ${q[i]}`);
        }
        if (infinities && x.length >= 2) {
          expect(q[0]).toBe(spec.quantMax);
          expect(q[q.length - 1]).toBe(spec.quantMin);
        }
      }),
      { numRuns: RUNS },
    );
  });
});

describe('fp8 with chosen (symmetric) qparams (fast-check)', () => {
  const fp8Cases = quantCase(FP8_QDTYPES);

  it('codes are never NaN, stay within the rounded [quant_min, quant_max], and requantize to themselves', () => {
    fc.assert(
      fc.property(fp8Cases, (c) => {
        const p = run(c);
        const format = c.qdtype as (typeof FP8_QDTYPES)[number];
        const lowest = fp8RefDecode(fp8RefEncode(p.qmin, format), format);
        const highest = fp8RefDecode(fp8RefEncode(p.qmax, format), format);
        const again = quantizeValues('t', p.deq, p.layout, p.spec, p.qp);
        for (let i = 0; i < p.layout.numel; i++) {
          const v = fp8RefDecode(p.q[i]!, format);
          if (!(v >= lowest && v <= highest)) expect.fail(`code 0x${p.q[i]!.toString(16)} = ${v}`);
          if (again[i] !== p.q[i])
            expect.fail(`element ${i}: 0x${p.q[i]!.toString(16)} → 0x${again[i]!.toString(16)}`);
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe('float16 / bfloat16 inputs are upcast exactly before quantizing (fast-check)', () => {
  it('quantizeTensor on float16 bytes equals quantizing the decoded float32 values', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }).chain((n) => valuesOf(n)),
        fc.constantFrom('int8', 'uint4', 'int2'),
        (x, qdtype) => {
          // encode with the independent oracle, clamp away overflow to keep the input finite
          const halves = Uint16Array.from(x, (v) => {
            const h = halfRefEncode(v);
            return (h & 0x7c00) === 0x7c00 ? (h & 0x8000) | 0x7bff : h;
          });
          const decoded = Float32Array.from(halves, halfRefDecode);
          const spec = parseSpec({ qdtype });
          const layout = planLayout('h', [x.length], spec);
          const out = quantizeTensor(
            { name: 'h', dtype: 'float16', data: new Uint8Array(halves.buffer), layout },
            spec,
          );
          const ref = quantizeTensor(floatInput('h', decoded, layout), spec);
          expect(Array.from(out.data)).toEqual(Array.from(ref.data));
          expect(Array.from(out.qparams.scale)).toEqual(Array.from(ref.qparams.scale));
        },
      ),
      { numRuns: 150 },
    );
  });
});
