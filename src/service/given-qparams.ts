/**
 * Qparams supplied in the input: NAME.scale and NAME.zero_point beside NAME (docs/container.md) are used
 * instead of choosing. They are checked here for dtype and shape and converted to the float32
 * scales and int32 / float32 zero points the numerics take.
 */
import {
  checkQParamShape,
  hasFloatZeroPoint,
  numelOf,
  symmetricZeroPoint,
  toFloat32,
  typedView,
  type Layout,
  type QParams,
  type QuantSpec,
} from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import type { TensorEntry } from '../format/index.js';

export interface GivenEntries {
  readonly scale?: TensorEntry;
  readonly zeroPoint?: TensorEntry;
}

const FLOAT_QPARAM_DTYPES = ['F32', 'F64', 'F16', 'BF16'];
const INT_QPARAM_DTYPES = ['I8', 'U8', 'I16', 'U16', 'I32', 'U32', 'I64'];

/** Numbers of a numeric tensor, widened to float64 (exact for every dtype accepted above). */
function numbersOf(dtype: string, data: Uint8Array): ArrayLike<number> {
  switch (dtype) {
    case 'F32':
      return typedView(Float32Array, data);
    case 'F64':
      return typedView(Float64Array, data);
    case 'F16':
      return toFloat32(data, 'float16');
    case 'BF16':
      return toFloat32(data, 'bfloat16');
    case 'I8':
      return new Int8Array(data.buffer, data.byteOffset, data.byteLength);
    case 'U8':
      return data;
    case 'I16':
      return typedView(Int16Array, data);
    case 'U16':
      return typedView(Uint16Array, data);
    case 'I32':
      return typedView(Int32Array, data);
    case 'U32':
      return typedView(Uint32Array, data);
    default: {
      const big = typedView(BigInt64Array, data);
      return Array.from(big, (v) => Number(v));
    }
  }
}

export interface GivenData {
  readonly scale?: { entry: TensorEntry; data: Uint8Array };
  readonly zeroPoint?: { entry: TensorEntry; data: Uint8Array };
}

function checkDtype(tensor: string, qparam: string, entry: TensorEntry, allowed: string[]): void {
  if (!allowed.includes(entry.dtype)) {
    throw new QuantdError('QPARAMS_DTYPE_INVALID', {
      tensor,
      qparam,
      dtype: entry.dtype,
      expected: allowed.join(', '),
    });
  }
}

/** Converts supplied qparams; validation of their values happens in the numerics. */
export function toQParams(tensor: string, given: GivenData, spec: QuantSpec, layout: Layout): QParams {
  const count = numelOf(layout.qparamShape);
  if (!given.scale) {
    throw new QuantdError('QPARAMS_MISSING', {
      tensor,
      detail: `${tensor}.zero_point is given without ${tensor}.scale`,
    });
  }
  checkDtype(tensor, 'scale', given.scale.entry, FLOAT_QPARAM_DTYPES);
  checkQParamShape(tensor, 'scale', given.scale.entry.shape, layout);
  const scale = Float32Array.from(numbersOf(given.scale.entry.dtype, given.scale.data));

  const floatZp = hasFloatZeroPoint(spec);
  if (!given.zeroPoint) {
    if (spec.mode !== 'symmetric') {
      throw new QuantdError('QPARAMS_MISSING', {
        tensor,
        detail: `${tensor}.scale is given without ${tensor}.zero_point; only symmetric mode implies the zero point`,
      });
    }
    return { scale, zeroPoint: new Int32Array(count).fill(symmetricZeroPoint(spec)) };
  }
  const zpEntry = given.zeroPoint.entry;
  checkDtype(tensor, 'zero_point', zpEntry, [...INT_QPARAM_DTYPES, ...FLOAT_QPARAM_DTYPES]);
  checkQParamShape(tensor, 'zero_point', zpEntry.shape, layout);
  const values = numbersOf(zpEntry.dtype, given.zeroPoint.data);
  if (floatZp) return { scale, zeroPoint: Float32Array.from(values) };
  const zeroPoint = new Int32Array(count);
  for (let i = 0; i < count; i++) {
    const v = values[i]!;
    if (!Number.isInteger(v)) {
      throw new QuantdError('ZERO_POINT_INVALID', {
        tensor,
        index: i,
        value: v,
        detail: `mode ${spec.mode} needs integer zero points`,
      });
    }
    if (spec.mode === 'symmetric' && v !== symmetricZeroPoint(spec)) {
      throw new QuantdError('ZERO_POINT_INVALID', {
        tensor,
        index: i,
        value: v,
        detail: `mode symmetric fixes the zero point at ${symmetricZeroPoint(spec)} for ${spec.qdtype}`,
      });
    }
    if (v < spec.quantMin || v > spec.quantMax) {
      throw new QuantdError('ZERO_POINT_OUT_OF_RANGE', {
        tensor,
        index: i,
        value: v,
        quant_min: spec.quantMin,
        quant_max: spec.quantMax,
      });
    }
    zeroPoint[i] = v;
  }
  return { scale, zeroPoint };
}
