/**
 * dequantize: codes back to float32, `(float32(q) - zp) · scale` with both operations rounded
 * to float32 (torch: `(input.to(float32) - zero_point) * scale`). float16 / bfloat16 output is
 * this float32 result rounded once more, to nearest-even.
 */
import { QDTYPE_INFO, isSubByte, type QDType } from './dtypes.js';
import { fp8DecodeTable, type Fp8Format } from './fp8.js';
import type { Layout } from './layout.js';
import { unpackSubByte } from './pack.js';
import type { QParams } from './qparams.js';
import { fround } from './rounding.js';
import { typedView } from './tensor.js';

/** The value each stored code stands for, before scale and zero point. */
export function decodeValues(data: Uint8Array, qdtype: QDType, numel: number): ArrayLike<number> {
  const info = QDTYPE_INFO[qdtype];
  if (isSubByte(qdtype)) return unpackSubByte(data, numel, info.bits, info.signed);
  switch (qdtype) {
    case 'int8':
      return new Int8Array(data.buffer, data.byteOffset, numel);
    case 'uint8':
      return data.subarray(0, numel);
    case 'int16':
      return typedView(Int16Array, data);
    case 'int32':
      return typedView(Int32Array, data);
    default: {
      const table = fp8DecodeTable(qdtype as Fp8Format);
      const out = new Float32Array(numel);
      for (let i = 0; i < numel; i++) out[i] = table[data[i]!]!;
      return out;
    }
  }
}

/** One code's value: `(float32(q) - zp) · scale`, each operation rounded to float32; `zp` is float32. */
export const dequantizeCode = (q: number, zp: number, scale: number): number =>
  fround(fround(fround(q) - zp) * scale);

export function dequantize(data: Uint8Array, qdtype: QDType, layout: Layout, qp: QParams): Float32Array {
  const q = decodeValues(data, qdtype, layout.numel);
  const out = new Float32Array(layout.numel);
  const { outer, channels, inner } = layout;
  let i = 0;
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      const scale = qp.scale[c]!;
      const zp = fround(qp.zeroPoint[c]!);
      const end = i + inner;
      for (; i < end; i++) out[i] = dequantizeCode(q[i]!, zp, scale);
    }
  }
  return out;
}
