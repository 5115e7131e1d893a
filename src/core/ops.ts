/**
 * The tensor-level operations every backend implements and every transport ends in: bytes of a
 * float tensor plus a spec in, bytes of codes and qparams out. This TypeScript version is the
 * reference the native and WebAssembly kernels are tested against.
 */
import type { FloatDType } from './dtypes.js';
import { quantizedByteLength } from './dtypes.js';
import { QuantdError } from '../errors/index.js';
import { dequantize } from './dequantize.js';
import { checkFakeQuantizable, fakeQuantize } from './fake-quantize.js';
import type { Layout } from './layout.js';
import { chooseQParams, type QParams } from './qparams.js';
import { quantize } from './quantize.js';
import type { QualityStats } from './quality-stats.js';
import type { QuantSpec } from './spec.js';
import { fromFloat32, toFloat32 } from './tensor.js';
import { validateQParams } from './validate-qparams.js';

export interface FloatInput {
  readonly name: string;
  readonly dtype: FloatDType;
  readonly data: Uint8Array;
  readonly layout: Layout;
}

export interface QuantizeOutput {
  /** Storage bytes of the codes (packed for sub-byte qdtypes). */
  readonly data: Uint8Array;
  readonly qparams: QParams;
  /** Error statistics, when asked for (QuantizeOptions.quality). */
  readonly quality?: QualityStats;
}

/** Given qparams are validated; otherwise they are chosen from the data. */
export function resolveQParams(
  name: string,
  x: Float32Array,
  layout: Layout,
  spec: QuantSpec,
  given: QParams | undefined,
): QParams {
  if (given) {
    validateQParams(name, given, spec);
    return given;
  }
  return chooseQParams(name, x, layout, spec);
}

export function quantizeTensor(input: FloatInput, spec: QuantSpec, given?: QParams): QuantizeOutput {
  const x = toFloat32(input.data, input.dtype);
  const qparams = resolveQParams(input.name, x, input.layout, spec, given);
  return { data: quantize(input.name, x, input.layout, spec, qparams), qparams };
}

export function chooseTensorQParams(input: FloatInput, spec: QuantSpec, given?: QParams): QParams {
  return resolveQParams(input.name, toFloat32(input.data, input.dtype), input.layout, spec, given);
}

export interface FakeQuantizeOutput {
  readonly data: Uint8Array;
  readonly mask: Uint8Array;
  readonly qparams: QParams;
}

export function fakeQuantizeTensor(
  input: FloatInput,
  spec: QuantSpec,
  outDType: FloatDType,
  given?: QParams,
): FakeQuantizeOutput {
  checkFakeQuantizable(spec);
  const x = toFloat32(input.data, input.dtype);
  const qparams = resolveQParams(input.name, x, input.layout, spec, given);
  const { out, mask } = fakeQuantize(input.name, x, input.layout, spec, qparams);
  return { data: fromFloat32(out, outDType), mask, qparams };
}

export interface QuantizedInput {
  readonly name: string;
  readonly data: Uint8Array;
  readonly spec: QuantSpec;
  readonly layout: Layout;
  readonly qparams: QParams;
}

/**
 * The codes must fill their tensor exactly. Containers are checked by the format layer; this
 * guards direct callers, for whom a short buffer would otherwise read past the view.
 */
export function checkCodesLength(input: QuantizedInput): void {
  const expected = quantizedByteLength(input.spec.qdtype, input.layout.numel);
  if (input.data.byteLength !== expected) {
    throw new QuantdError('INTERNAL', {
      detail: `tensor ${input.name}: ${input.data.byteLength} bytes of codes, its shape needs ${expected}`,
    });
  }
}

export function dequantizeTensor(input: QuantizedInput, outDType: FloatDType): Uint8Array {
  validateQParams(input.name, input.qparams, input.spec);
  checkCodesLength(input);
  return fromFloat32(dequantize(input.data, input.spec.qdtype, input.layout, input.qparams), outDType);
}
