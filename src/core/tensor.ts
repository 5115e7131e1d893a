/**
 * Raw tensor bytes and their float32 view. Tensors travel as little-endian bytes (as safetensors
 * stores them); numerics work on Float32Array. These helpers convert between the two, copying
 * only when a conversion or an alignment fix requires it.
 */
import { bfloat16BitsFromFloat32, float16BitsFromFloat32, float16DecodeTable } from './float16.js';
import type { FloatDType } from './dtypes.js';

export interface RawTensor {
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

type TypedArrayConstructor<T> = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  new (length: number): T;
  readonly BYTES_PER_ELEMENT: number;
};

/**
 * A typed-array view of `bytes`, or an aligned copy when `bytes` does not start on an element
 * boundary (safetensors does not align tensor data).
 */
export function typedView<T extends ArrayBufferView>(ctor: TypedArrayConstructor<T>, bytes: Uint8Array): T {
  const size = ctor.BYTES_PER_ELEMENT;
  const length = Math.floor(bytes.byteLength / size);
  if (bytes.byteOffset % size === 0) return new ctor(bytes.buffer, bytes.byteOffset, length);
  const copy = new Uint8Array(length * size);
  copy.set(bytes.subarray(0, length * size));
  return new ctor(copy.buffer, 0, length);
}

export function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** float32 values of a float tensor (exact: float16 and bfloat16 widen without rounding). */
export function toFloat32(data: Uint8Array, dtype: FloatDType): Float32Array {
  if (dtype === 'float32') return typedView(Float32Array, data);
  const halves = typedView(Uint16Array, data);
  const out = new Float32Array(halves.length);
  if (dtype === 'float16') {
    const table = float16DecodeTable();
    for (let i = 0; i < halves.length; i++) out[i] = table[halves[i]!]!;
  } else {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < halves.length; i++) bits[i] = halves[i]! << 16;
  }
  return out;
}

/** Bytes of `values` in `dtype`, rounding to nearest-even for float16 and bfloat16. */
export function fromFloat32(values: Float32Array, dtype: FloatDType): Uint8Array {
  if (dtype === 'float32') return bytesOf(values);
  const out = new Uint16Array(values.length);
  const encode = dtype === 'float16' ? float16BitsFromFloat32 : bfloat16BitsFromFloat32;
  for (let i = 0; i < values.length; i++) out[i] = encode(values[i]!);
  return bytesOf(out);
}
