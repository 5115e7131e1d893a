/**
 * quantize: float32 values to integer (or fp8) codes with given qparams. The two operation
 * orders below are torch's and they differ at exact halves, so each scheme keeps its own:
 *
 *   per_tensor, per_channel:   q = clamp(round(x · inv) + zp, qmin, qmax)
 *   float_qparams, per_token,
 *   per_group:                 q = clamp(round(x · inv + zp), qmin, qmax)
 *   fp8 (any scheme):          q = fp8(clamp(x · inv, qmin, qmax))   round-to-nearest-even
 *
 * with inv = float32(1 / scale). Every product and sum is rounded to float32; the zero point
 * joins the float32 arithmetic as torch adds it (converted to float32). Example (int8,
 * scale 0.5, zp 0): x = 1.25 → x·inv = 2.5 → round → 2 (ties to even), not 3.
 *
 * NaN is always rejected (no code represents it); ±Infinity saturates to qmin/qmax, except in
 * per_group, where torch's kernel asserts finite input.
 */
import { QDTYPE_INFO, isSubByte, type QDType } from './dtypes.js';
import { encodeFp8, type Fp8Format } from './fp8.js';
import type { Layout } from './layout.js';
import { packSubByte } from './pack.js';
import { notFinite, type QParams } from './qparams.js';
import { ROUNDING_MAGIC, fround } from './rounding.js';
import type { QuantSpec } from './spec.js';
import { bytesOf } from './tensor.js';

export type QuantizedArray = Int8Array | Uint8Array | Int16Array | Int32Array;

/** |x · inv| beyond this saturates every qdtype, whatever the zero point (< 2^32). */
const SATURATED = 2 ** 50;

/** Adds the zero point before rounding (true) or after (false): see the table above. */
export function addsZeroPointBeforeRounding(spec: Pick<QuantSpec, 'scheme' | 'mode'>): boolean {
  return spec.mode === 'float_qparams' || spec.scheme === 'per_token' || spec.scheme === 'per_group';
}

function allocate(qdtype: QDType, numel: number): QuantizedArray {
  switch (qdtype) {
    case 'uint8':
    case 'float8_e4m3fn':
    case 'float8_e5m2':
      return new Uint8Array(numel);
    case 'int16':
      return new Int16Array(numel);
    case 'int32':
      return new Int32Array(numel);
    default:
      return new Int8Array(numel); // int8 and the sub-byte types before packing
  }
}

/** Quantized values, one per element, unpacked (int codes, or fp8 bit patterns). */
export function quantizeValues(
  tensor: string,
  x: Float32Array,
  layout: Layout,
  spec: QuantSpec,
  qp: QParams,
): QuantizedArray {
  const out = allocate(spec.qdtype, layout.numel);
  const { outer, channels, inner } = layout;
  const { quantMin: qmin, quantMax: qmax } = spec;
  const float8 = QDTYPE_INFO[spec.qdtype].float8;
  const addFirst = addsZeroPointBeforeRounding(spec);
  const finiteOnly = spec.scheme === 'per_group';
  const op = `quantize ${spec.scheme}`;
  let i = 0;
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      const inv = fround(1 / qp.scale[c]!);
      const zp = fround(qp.zeroPoint[c]!);
      const end = i + inner;
      if (float8) {
        const format = spec.qdtype as Fp8Format;
        for (; i < end; i++) {
          const v = x[i]!;
          if (v !== v || (finiteOnly && !Number.isFinite(v))) throw notFinite(tensor, v, i, op);
          const t = fround(v * inv);
          out[i] = encodeFp8(t < qmin ? qmin : t > qmax ? qmax : t, format);
        }
        continue;
      }
      // Hot loops: the rounding is inlined (see rounding.ts: adding and subtracting 1.5·2^52
      // rounds half to even for |t| < 2^51). Scaled values beyond ±2^50 saturate whatever the
      // zero point, so they are clamped to ±2^50 first, in the one rarely taken branch that
      // also catches NaN (v · inv is NaN exactly when v is, scales being finite and positive).
      for (; i < end; i++) {
        const v = x[i]!;
        let t = fround(v * inv);
        if (!(t >= -SATURATED && t <= SATURATED)) {
          if (t !== t || (finiteOnly && !Number.isFinite(v))) throw notFinite(tensor, v, i, op);
          t = t > 0 ? SATURATED : -SATURATED;
        }
        const q = addFirst
          ? fround(t + zp) + ROUNDING_MAGIC - ROUNDING_MAGIC
          : fround(t + ROUNDING_MAGIC - ROUNDING_MAGIC + zp);
        out[i] = q < qmin ? qmin : q > qmax ? qmax : q;
      }
    }
  }
  return out;
}

/** Storage bytes of quantized values: packed for sub-byte types, little-endian otherwise. */
export function storageBytes(values: QuantizedArray, qdtype: QDType): Uint8Array {
  if (isSubByte(qdtype)) return packSubByte(values, QDTYPE_INFO[qdtype].bits);
  return bytesOf(values);
}

export function quantize(
  tensor: string,
  x: Float32Array,
  layout: Layout,
  spec: QuantSpec,
  qp: QParams,
): Uint8Array {
  return storageBytes(quantizeValues(tensor, x, layout, spec, qp), spec.qdtype);
}
