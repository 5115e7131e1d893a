/**
 * AWQ checkpoints in AutoAWQ's GEMM layout (`WQLinear_GEMM`, the "gemm" version that
 * transformers, AutoAWQ and vLLM load) from round-to-nearest group quantization: AutoAWQ's own
 * `pseudo_quantize_tensor` with zero point (asymmetric, its default), but WITHOUT the
 * activation-aware scale search and clipping (those need calibration data). The weights are
 * therefore plain RTN weights in AWQ's format, bit-identical to what AutoAWQ's quantizer and
 * packer write for a weight whose AWQ scales are all 1 and whose clipping is off.
 *
 * AutoAWQ casts the layer to float16 first (`_apply_quant`: `linear_layer.half()`), so every step
 * below is float16 arithmetic: each operation rounds its result to float16 (torch upcasts, computes
 * in float32 and rounds; float32 is wide enough for that double rounding to be exact):
 * ```
 * w      = fp16(weight)                                      per row, per group of group_size inputs
 * scale  = max(max(w) - min(w), fp16(1e-5)) / 15             (awq/quantize/quantizer.py)
 * zero   = clamp(-round(min(w) / scale), 0, 15)              round = half to even
 * q      = clamp(round(w / scale) + zero, 0, 15)
 * Q      = (q - zero) * scale                                 the pseudo-quantized fp16 weight
 * code   = round((Q + zero * scale) / scale)                 WQLinear_GEMM.from_linear re-derives it
 * ```
 * Unlike GPTQ, min and max are the group's own (0 is not forced into the range), zero points are
 * stored as they are (no "minus one"), and code is normally q again; a code outside [0, 15]
 * (float16 scales deep in the subnormal range) is refused with FEATURE_UNSUPPORTED.
 *
 * Layout (awq/modules/linear/gemm.py): weight [out, in] is transposed, and eight 4-bit values of
 * consecutive OUTPUT columns share an int32, in the order [0, 2, 4, 6, 1, 3, 5, 7]: nibble k
 * (bits 4k..4k+3) of word c holds output column 8c + ORDER[k].
 * - `qweight` int32 [in, out/8]; `qzeros` int32 [in/group_size, out/8] (same order);
 * - `scales` float16 [in/group_size, out]. No g_idx.
 */
import { QuantdError, shapeText } from '../../errors/index.js';
import { float16BitsFromFloat32, roundToFloat16 } from '../float16.js';
import { fround, rint } from '../rounding.js';

/** Output column of each nibble of a packed word (AutoAWQ's `order_map`). */
export const AWQ_ORDER: readonly number[] = [0, 2, 4, 6, 1, 3, 5, 7];
/** Nibble of each output column within its word (the inverse of AWQ_ORDER). */
export const AWQ_SLOT: readonly number[] = [0, 4, 1, 5, 2, 6, 3, 7];

export interface AwqParams {
  /** Input rows per group; -1 for one group over all input rows. */
  readonly groupSize: number;
}

export interface AwqShapes {
  readonly qweight: readonly [number, number];
  readonly qzeros: readonly [number, number];
  readonly scales: readonly [number, number];
  readonly groupSize: number;
  readonly groups: number;
}

export interface AwqPacked {
  readonly qweight: Int32Array;
  readonly qzeros: Int32Array;
  /** float16 bits. */
  readonly scales: Uint16Array;
}

const MAXQ = 15;

const f64 = new Float64Array(1);
const hi32 = new Uint32Array(f64.buffer);
const HI = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0; // the high word (little-endian: 1)
const TWO_24 = 16777216;
const MAGIC = 6755399441055744; // 1.5 · 2^52: x + MAGIC - MAGIC rounds |x| < 2^51 half to even
/** 2^(10 - e) for the float16 binades e = -14..15 (index e + 14); a table: `**` is slow here. */
const ULP_INV = Float64Array.from({ length: 30 }, (_, k) => 2 ** (10 - (k - 14)));

/**
 * x (a float64 holding the exact or correctly rounded result of one operation on float16 values)
 * rounded to the nearest float16, ties to even, as a number. Same result as roundToFloat16 (the
 * float64 → float16 rounding is innocuous after one float16 operation: 53 ≥ 2·11 + 2), about 3x
 * faster: AWQ rounds ten times per weight.
 */
export function toHalf(x: number): number {
  const a = x < 0 ? -x : x;
  let r: number;
  if (a >= 65520) {
    r = a === a ? Infinity : NaN; // 65520 is the tie between 65504 and 2^16: even is 2^16, i.e. ∞
  } else if (a < 6.103515625e-5) {
    r = (a * TWO_24 + MAGIC - MAGIC) / TWO_24; // subnormal: a multiple of 2^-24
  } else {
    f64[0] = a;
    const s = ULP_INV[(hi32[HI]! >>> 20) - 1023 + 14]!; // 2^e <= a < 2^(e+1), -14 <= e <= 15
    r = (a * s + MAGIC - MAGIC) / s;
  }
  return x < 0 || (x === 0 && 1 / x < 0) ? -r : r;
}

/** torch's clamp(min=1e-5) on a float16 tensor yields float16(1e-5) = 168 · 2^-24. */
const MIN_RANGE = roundToFloat16(1e-5);
const h = toHalf;

/** The tensor shapes of a [out, in] weight; AutoAWQ asserts out % 8 == 0 and in % group_size == 0. */
export function awqShapes(tensor: string, shape: readonly number[], params: AwqParams): AwqShapes {
  if (shape.length !== 2) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail: 'AWQ packs 2-D linear weights [out_features, in_features]',
    });
  }
  const [out, inF] = shape as [number, number];
  if (out === 0 || inF === 0 || out % 8 !== 0) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail: 'AWQ needs out_features to be a positive multiple of 8 (eight 4-bit values per int32)',
    });
  }
  const groupSize = params.groupSize === -1 ? inF : params.groupSize;
  if (!Number.isSafeInteger(groupSize) || groupSize <= 0 || inF % groupSize !== 0) {
    throw new QuantdError('GROUP_SIZE_INVALID', {
      tensor,
      detail: 'AWQ needs group_size (a positive integer, or -1) to divide in_features',
      group_size: params.groupSize,
      shape: shapeText(shape),
    });
  }
  const groups = inF / groupSize;
  return {
    qweight: [inF, out / 8],
    qzeros: [groups, out / 8],
    scales: [groups, out],
    groupSize,
    groups,
  };
}

/** Quantizes the float32 values `w` of a [out, in] weight into AWQ GEMM tensors. */
export function awqQuantize(
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  params: AwqParams,
): AwqPacked {
  const s = awqShapes(tensor, shape, params);
  const [out, inF] = shape as [number, number];
  const { groupSize, groups } = s;
  const words = out / 8;
  const qweight = new Int32Array(inF * words);
  const qzeros = new Int32Array(groups * words);
  const scales = new Uint16Array(groups * out);
  const w16 = new Float64Array(groupSize);

  for (let r = 0; r < out; r++) {
    const row = r * inF;
    const word = r >>> 3;
    const shift = AWQ_SLOT[r & 7]! * 4;
    for (let g = 0; g < groups; g++) {
      const begin = g * groupSize;
      let lo = Infinity;
      let hi = -Infinity;
      for (let k = 0; k < groupSize; k++) {
        const x = w[row + begin + k]!;
        if (!Number.isFinite(x)) {
          throw new QuantdError('INPUT_NOT_FINITE', {
            tensor,
            value: x,
            index: row + begin + k,
            op: 'AWQ quantization',
          });
        }
        const v = h(x);
        w16[k] = v;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
      let range = h(hi - lo);
      if (range < MIN_RANGE) range = MIN_RANGE;
      const scale = h(range / MAXQ);
      if (!Number.isFinite(scale)) throw unrepresentable(tensor, r, g, lo, hi, scale);
      let zero = -rint(h(lo / scale));
      zero = zero < 0 ? 0 : zero > MAXQ ? MAXQ : zero;
      const scaleZero = h(zero * scale);
      for (let k = 0; k < groupSize; k++) {
        let q = rint(h(w16[k]! / scale)) + zero;
        q = q < 0 ? 0 : q > MAXQ ? MAXQ : q;
        const fake = h((q - zero) * scale);
        const code = rint(h(h(fake + scaleZero) / scale));
        if (!(code >= 0 && code <= MAXQ)) throw unrepresentable(tensor, r, g, lo, hi, scale);
        qweight[(begin + k) * words + word]! |= code << shift;
      }
      qzeros[g * words + word]! |= zero << shift;
      scales[g * out + r] = float16BitsFromFloat32(scale);
    }
  }
  return { qweight, qzeros, scales };
}

function unrepresentable(
  tensor: string,
  row: number,
  group: number,
  lo: number,
  hi: number,
  scale: number,
): QuantdError {
  return new QuantdError('FEATURE_UNSUPPORTED', {
    detail:
      `tensor ${tensor}: row ${row}, group ${group} spans [${lo}, ${hi}] in float16; its AWQ scale ${scale} ` +
      'cannot re-derive codes in [0, 15] in AutoAWQ packing; exclude the tensor or rescale it',
  });
}

/** The 4-bit values of an AWQ-packed int32 tensor [rows, out/8] as [rows, out]. */
export function awqUnpack(packed: Int32Array, rows: number, out: number): Uint8Array {
  const words = out / 8;
  const values = new Uint8Array(rows * out);
  for (let i = 0; i < rows; i++) {
    for (let c = 0; c < words; c++) {
      const word = packed[i * words + c]!;
      for (let k = 0; k < 8; k++) values[i * out + c * 8 + AWQ_ORDER[k]!] = (word >>> (4 * k)) & 15;
    }
  }
  return values;
}

/** The float32 weight [out, in] of AWQ tensors: scale · (code − zero), exact in float32. */
export function awqDequantize(
  qweight: Int32Array,
  qzeros: Int32Array,
  scales: Float32Array,
  out: number,
  inF: number,
  groups: number,
): Float32Array {
  const codes = awqUnpack(qweight, inF, out); // [in, out]
  const zeros = awqUnpack(qzeros, groups, out); // [groups, out]
  const groupSize = inF / groups;
  const w = new Float32Array(out * inF);
  for (let i = 0; i < inF; i++) {
    const g = Math.floor(i / groupSize);
    for (let r = 0; r < out; r++) {
      w[r * inF + i] = fround(scales[g * out + r]! * (codes[i * out + r]! - zeros[g * out + r]!));
    }
  }
  return w;
}
