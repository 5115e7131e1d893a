/**
 * What quantd writes, quantd must read back: for every spec parseSpec accepts, the qparams
 * chooseQParams picks must pass validateQParams (which dequantizeTensor and given-qparams
 * quantizeTensor apply), so a container quantd produced always dequantizes. Each fixed case
 * states its one outcome: it round-trips, or choosing refuses its range with QUANT_RANGE_INVALID.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { planLayout } from '../../src/core/layout.js';
import { dequantizeTensor, quantizeTensor } from '../../src/core/ops.js';
import { chooseQParams } from '../../src/core/qparams.js';
import { parseSpec, type SpecOptions } from '../../src/core/spec.js';
import { validateQParams } from '../../src/core/validate-qparams.js';
import { FP8_QDTYPES, INT_QDTYPES, optionsOf, quantCase } from './arbitraries.js';
import { float32sOf, floatInput, quantizedInput } from './fixtures.js';
import { expectQuantdError } from './oracles.js';

/**
 * The spec is accepted, and quantize → dequantize works on the container quantd itself produced:
 * the chosen qparams are valid qparams, and every value comes back within half a step of its
 * unit's scale (all inputs here lie inside the quantized range, so nothing clamps).
 */
function expectRoundTrip(options: SpecOptions, shape: number[], values: number[]): void {
  const spec = parseSpec(options);
  const layout = planLayout('t', shape, spec);
  const x = Float32Array.from(values);
  const out = quantizeTensor(floatInput('t', x, layout), spec);
  expect(() => validateQParams('t', out.qparams, spec)).not.toThrow();
  const back = float32sOf(
    dequantizeTensor(quantizedInput('t', out.data, spec, layout, out.qparams), 'float32'),
  );
  const { scale } = out.qparams;
  back.forEach((v, i) => {
    // per_tensor has one unit and per_token rows are contiguous, so unit = element's share of n.
    const s = scale[Math.floor((i * scale.length) / x.length)]!;
    expect(Math.abs(v - x[i]!), `element ${i}: ${x[i]} came back as ${v}`).toBeLessThanOrEqual(s * 0.5001);
  });
}

/**
 * The spec is accepted (given qparams may use any range inside the qdtype's), but choosing qparams
 * for it is refused with QUANT_RANGE_INVALID, before any code is written.
 */
function expectRefusedWhenChoosing(
  options: SpecOptions,
  shape: number[],
  values: number[],
  detail: RegExp,
): void {
  const spec = parseSpec(options);
  const layout = planLayout('t', shape, spec);
  const input = floatInput('t', Float32Array.from(values), layout);
  const err = expectQuantdError(() => quantizeTensor(input, spec), 'QUANT_RANGE_INVALID');
  expect(String(err.params['detail'])).toMatch(detail);
}

describe('chosen qparams are valid qparams', () => {
  it('for random tensors and specs of every qdtype and scheme (fast-check)', () => {
    fc.assert(
      fc.property(quantCase([...INT_QDTYPES, ...FP8_QDTYPES]), (c) => {
        const spec = parseSpec(optionsOf(c));
        const layout = planLayout('t', c.shape, spec);
        const qp = chooseQParams('t', c.x, layout, spec);
        expect(() => validateQParams('t', qp, spec)).not.toThrow();
      }),
      { numRuns: 300 },
    );
  });

  it('round-trips the default-range specs on a mixed-sign tensor', () => {
    expectRoundTrip({ qdtype: 'int8', mode: 'symmetric' }, [1, 4], [-2, 1, 0, 0.5]);
    expectRoundTrip({ qdtype: 'uint8', scheme: 'per_token' }, [2, 2], [-2, 1, 0, 0.5]);
    expectRoundTrip({ qdtype: 'int8', scheme: 'per_token', mode: 'symmetric' }, [2, 2], [-2, 1, 0, 0.5]);
  });

  // A narrowed range that still holds 0 is chosen for like the full one: symmetric per_token
  // divides amax by quant_max, so -2 becomes -100 and 1 becomes 50, inside [-128, 100].
  it('round-trips symmetric per_token int8 with a narrowed quant_max', () => {
    expectRoundTrip(
      { qdtype: 'int8', scheme: 'per_token', mode: 'symmetric', quant_max: 100 },
      [1, 2],
      [-2, 1],
    );
  });

  // per_token symmetric divides amax by quant_max; a range that excludes 0 is refused when
  // choosing (torch validate_qmin_qmax), and so is quant_max 0, so the scale is never negative
  // or infinite.
  it('refuses to choose for per_token symmetric with quant_max below 1', () => {
    expectRefusedWhenChoosing(
      { scheme: 'per_token', mode: 'symmetric', quant_min: -100, quant_max: -1 },
      [1, 2],
      [-2, 1],
      /includes 0/,
    );
    expectRefusedWhenChoosing(
      { scheme: 'per_token', mode: 'symmetric', quant_min: -100, quant_max: 0 },
      [1, 2],
      [-2, 1],
      /must be positive/,
    );
  });

  // Symmetric signed types (and fp8) have zero point 0, which a customised range without 0 would
  // not hold; choosing refuses such a range up front.
  it('refuses to choose for symmetric int8 with a range that excludes zero', () => {
    expectRefusedWhenChoosing(
      { qdtype: 'int8', mode: 'symmetric', quant_min: 5, quant_max: 100 },
      [1, 2],
      [-2, 1],
      /includes 0/,
    );
  });

  it('refuses to choose for fp8 (symmetric) with a range that excludes zero', () => {
    expectRefusedWhenChoosing(
      { qdtype: 'float8_e4m3fn', quant_min: 5, quant_max: 100 },
      [1, 2],
      [-2, 1],
      /includes 0/,
    );
  });
});
