/**
 * Checks on quantization parameters the caller supplied (an input file's NAME.scale and
 * NAME.zero_point, or a container being dequantized). Chosen qparams satisfy these by
 * construction.
 */
import { QuantdError, shapeText } from '../errors/index.js';
import { QDTYPE_INFO } from './dtypes.js';
import type { Layout } from './layout.js';
import type { QParams } from './qparams.js';
import { fround } from './rounding.js';
import { hasFloatZeroPoint, type QuantSpec } from './spec.js';

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** per_tensor qparams may be given as a scalar ([]) or as [1]; all other shapes must match. */
export function checkQParamShape(
  tensor: string,
  qparam: 'scale' | 'zero_point',
  shape: readonly number[],
  layout: Layout,
): void {
  const ok = sameShape(shape, layout.qparamShape) || (layout.scheme === 'per_tensor' && shape.length === 0);
  if (!ok) {
    throw new QuantdError('QPARAMS_SHAPE_MISMATCH', {
      tensor,
      qparam,
      shape: shapeText(shape),
      expected: shapeText(layout.qparamShape),
      scheme: layout.scheme,
    });
  }
}

export function validateQParams(tensor: string, qp: QParams, spec: QuantSpec): void {
  for (let i = 0; i < qp.scale.length; i++) {
    const s = qp.scale[i]!;
    if (!(s > 0) || !Number.isFinite(s) || !Number.isFinite(fround(1 / s))) {
      throw new QuantdError('SCALE_INVALID', { tensor, index: i, value: s });
    }
  }
  const floatZp = hasFloatZeroPoint(spec);
  const float8 = QDTYPE_INFO[spec.qdtype].float8;
  for (let i = 0; i < qp.zeroPoint.length; i++) {
    const zp = qp.zeroPoint[i]!;
    if (floatZp) {
      if (!Number.isFinite(zp)) {
        throw new QuantdError('ZERO_POINT_INVALID', {
          tensor,
          index: i,
          value: zp,
          detail: 'must be finite',
        });
      }
    } else if (float8 && zp !== 0) {
      throw new QuantdError('ZERO_POINT_INVALID', {
        tensor,
        index: i,
        value: zp,
        detail: `${spec.qdtype} is quantized symmetrically; zero points must be 0`,
      });
    } else if (zp < spec.quantMin || zp > spec.quantMax) {
      throw new QuantdError('ZERO_POINT_OUT_OF_RANGE', {
        tensor,
        index: i,
        value: zp,
        quant_min: spec.quantMin,
        quant_max: spec.quantMax,
      });
    }
  }
}
