/**
 * One raw tensor (an HTTP octet-stream body, a gRPC Tensor message) as the one-tensor file it
 * stands for, so that every transport runs the same plan on it.
 */
import { FLOAT_TO_ST, ST_DTYPE_SIZE, isFloatDType, numelOf, type StDType } from '../core/index.js';
import { QuantdError, shapeText } from '../errors/index.js';
import type { SafetensorsHeader, TensorEntry } from '../format/index.js';

export interface InMemoryFile {
  readonly header: SafetensorsHeader;
  tensorBytes(entry: TensorEntry): Uint8Array;
}

/** float32 / float16 / bfloat16 (or the safetensors names F32 / F16 / BF16), else undefined. */
export function floatStDType(text: string): StDType | undefined {
  if (isFloatDType(text)) return FLOAT_TO_ST[text];
  return (['F32', 'F16', 'BF16'] as const).find((d) => d === text.toUpperCase());
}

export function singleTensorFile(
  name: string,
  dtype: StDType,
  shape: readonly number[],
  data: Uint8Array,
  source: string,
): InMemoryFile {
  const expected = numelOf(shape) * ST_DTYPE_SIZE[dtype];
  if (expected !== data.byteLength) {
    throw new QuantdError('SAFETENSORS_SIZE_MISMATCH', {
      source,
      tensor: name,
      dtype,
      shape: shapeText(shape),
      expected,
      actual: data.byteLength,
    });
  }
  const entry: TensorEntry = { name, dtype, shape, begin: 0, end: data.byteLength };
  return {
    header: { entries: [entry], metadata: null, dataOffset: 0, dataLength: data.byteLength },
    tensorBytes: () => data,
  };
}
