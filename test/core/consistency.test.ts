/**
 * What quantd writes, quantd must read back: for every spec parseSpec accepts, the qparams
 * chooseQParams picks must pass validateQParams (which dequantizeTensor and given-qparams
 * quantizeTensor apply), so a container quantd produced always dequantizes.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { planLayout } from '../../src/core/layout.js';
import { dequantizeTensor, quantizeTensor } from '../../src/core/ops.js';
import { chooseQParams } from '../../src/core/qparams.js';
import { parseSpec, type QuantSpec, type SpecOptions } from '../../src/core/spec.js';
import { validateQParams } from '../../src/core/validate-qparams.js';
import { FP8_QDTYPES, INT_QDTYPES, optionsOf, quantCase } from './arbitraries.js';
import { floatInput, quantizedInput } from './fixtures.js';

/**
 * Either the spec is rejected up front (a fix in parseSpec), or quantize → dequantize works on the
 * container quantd itself produced.
 */
function roundTripsOrIsRejected(options: SpecOptions, shape: number[], values: number[]): void {
  let spec: QuantSpec;
  try {
    spec = parseSpec(options);
  } catch (e) {
    expect((e as { code?: string }).code).toMatch(/^(QUANT_RANGE_INVALID|MODE_UNSUPPORTED)$/);
    return;
  }
  const layout = planLayout('t', shape, spec);
  const x = Float32Array.from(values);
  let out: ReturnType<typeof quantizeTensor>;
  try {
    out = quantizeTensor(floatInput('t', x, layout), spec);
  } catch (e) {
    // choose_qparams refuses a range without 0 (torch validate_qmin_qmax)
    expect((e as { code?: string }).code).toBe('QUANT_RANGE_INVALID');
    return;
  }
  expect(() => validateQParams('t', out.qparams, spec)).not.toThrow();
  expect(() =>
    dequantizeTensor(quantizedInput('t', out.data, spec, layout, out.qparams), 'float32'),
  ).not.toThrow();
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

  it('for the default-range specs on a mixed-sign tensor', () => {
    roundTripsOrIsRejected({ qdtype: 'int8', mode: 'symmetric' }, [1, 4], [-2, 1, 0, 0.5]);
    roundTripsOrIsRejected({ qdtype: 'uint8', scheme: 'per_token' }, [2, 2], [-2, 1, 0, 0.5]);
    roundTripsOrIsRejected(
      { qdtype: 'int8', scheme: 'per_token', mode: 'symmetric' },
      [2, 2],
      [-2, 1, 0, 0.5],
    );
    roundTripsOrIsRejected(
      { qdtype: 'int8', scheme: 'per_token', mode: 'symmetric', quant_max: 100 },
      [1, 2],
      [-2, 1],
    );
  });

  // per_token symmetric divides amax by quant_max; a range that excludes 0 is refused when
  // choosing (torch validate_qmin_qmax), so the scale can never be negative.
  it('per_token symmetric with a negative quant_max', () => {
    roundTripsOrIsRejected(
      { scheme: 'per_token', mode: 'symmetric', quant_min: -100, quant_max: -1 },
      [1, 2],
      [-2, 1],
    );
  });

  // Symmetric signed types (and fp8) have zero point 0, which a customised range without 0 would
  // not hold; choosing refuses such a range up front.
  it('symmetric int8 with a range that excludes zero', () => {
    roundTripsOrIsRejected(
      { qdtype: 'int8', mode: 'symmetric', quant_min: 5, quant_max: 100 },
      [1, 2],
      [-2, 1],
    );
  });

  it('symmetric fp8 with a range that excludes zero', () => {
    roundTripsOrIsRejected({ qdtype: 'float8_e4m3fn', quant_min: 5, quant_max: 100 }, [1, 2], [-2, 1]);
  });
});
