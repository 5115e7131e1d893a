/**
 * GPTQ checkpoints ("gptq" = v1 checkpoint format of AutoGPTQ / GPTQModel / vLLM / transformers)
 * from round-to-nearest (RTN) group quantization. No calibration data and no Hessian: this is NOT
 * the GPTQ algorithm's error feedback, it is what AutoGPTQ's own quantizer and packer write for a
 * weight when every column is rounded independently (the GPTQ loop with the feedback step left
 * out). The codes, zero points and fp16 scales are bit-identical to that pipeline:
 *
 * 1. Parameters (auto_gptq/quantization/quantizer.py `Quantizer.find_params`, perchannel, weight):
 *    per row of a group of `group_size` input columns (all of them for group_size -1), in float32:
 *    ```
 *    xmin = min(min(x), 0); xmax = max(max(x), 0)
 *    sym:  xmax = max(|xmin|, xmax); xmin = -xmax where xmin < 0
 *    xmin == xmax == 0  →  xmin = -1, xmax = +1
 *    scale = (xmax - xmin) / maxq                       maxq = 2^bits - 1
 *    zero  = sym ? (maxq + 1) / 2 : round(-xmin / scale)      round = half to even
 *    ```
 * 2. Fake quantization (quantizer.py `quantize`), float32, then stored in the layer's dtype (GPTQ
 *    writes `Q.to(layer.weight.dtype)` back into the layer; the layer dtype here is the tensor's
 *    dtype in the input file):
 *    `Q = dtype(scale * (clamp(round(x / scale) + zero, 0, maxq) - zero))`
 * 3. Packing (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py `QuantLinear.pack`) re-derives the
 *    integer codes from Q, dividing by the float16 scale it stores:
 *    `code = round((Q + zero * scale) / fp16(scale))` (float32; zero * scale uses the float32
 *    scale). For ordinary weights that is the code of step 2 again (in every golden vector); it
 *    could differ only where Q's rounding to the layer dtype and the fp16 scale's error add up to
 *    half a step, and is then what AutoGPTQ writes. One place quantd departs from AutoGPTQ: a
 *    re-derived code outside [0, maxq] (bfloat16 layers at 8 bits, asymmetric: bfloat16's 2^-8
 *    relative rounding of Q times |q − zero| up to 255 exceeds half a step; or a float16 scale
 *    in the subnormal range) is written unmasked by AutoGPTQ, ORing bits into its neighbours'
 *    fields; quantd clamps it to [0, maxq] and counts it (`clampedCodes`). A float16 scale of 0
 *    or ∞ (ranges below ~1e-7 or above ~1e6) leaves nothing to write: FEATURE_UNSUPPORTED.
 *
 * Layout (nn.Linear weight W is [out, in]; GPTQ works on its transpose):
 * - `qweight` int32 [in·bits/32, out]: the codes of input column i of output j sit in word row
 *   ⌊i·bits/32⌋, bits (i·bits mod 32) upwards, LSB first (bits 2, 4, 8; 3-bit is not supported).
 * - `qzeros` int32 [groups, out·bits/32]: zero points packed the same way along the OUTPUT dim,
 *   stored as zero − 1 (the v1 "minus one" convention; loaders add 1 back).
 * - `scales` float16 [groups, out]; `g_idx` int32 [in] = ⌊i / group_size⌋.
 *
 * The v1 format cannot store a zero point of 0 (asymmetric groups whose values are all ≥ −scale/2):
 * AutoGPTQ's `(zeros - 1).astype(uint32)` turns it into 0xFFFFFFFF and ORs it over the whole word.
 * quantd follows GPTQModel's v2 → v1 conversion (`convert_gptq_v2_to_v1_format_module`) instead:
 * pack the true zero points, then subtract 0x11111111 (4-bit; 0x55555555 2-bit, 0x01010101 8-bit)
 * from each word with wrap-around. Where every zero point is ≥ 1 (always for sym) both give the
 * same bytes; where one is 0 the borrow reaches the next field, exactly as in GPTQModel, whose
 * loader (adding the constant back) recovers the true zero point, while per-field "+1" kernels
 * (exllama, vLLM's gptq) read that group's zero point as 2^bits.
 */
import { QuantdError, shapeText } from '../../errors/index.js';
import type { FloatDType } from '../dtypes.js';
import {
  bfloat16BitsFromFloat32,
  float16BitsFromFloat32,
  float32FromBfloat16Bits,
  float32FromFloat16Bits,
} from '../float16.js';
import { fround, rint } from '../rounding.js';

export type GptqBits = 2 | 4 | 8;
export const GPTQ_BITS: readonly GptqBits[] = [2, 4, 8];

export interface GptqParams {
  readonly bits: GptqBits;
  /** Input columns per group; -1 for one group over all input columns. */
  readonly groupSize: number;
  /** Symmetric: zero point 2^(bits-1) everywhere (AutoGPTQ's default). */
  readonly sym: boolean;
}

export interface GptqShapes {
  readonly qweight: readonly [number, number];
  readonly qzeros: readonly [number, number];
  readonly scales: readonly [number, number];
  readonly gIdx: readonly [number];
  /** Input columns per group (group_size -1 resolved to in_features). */
  readonly groupSize: number;
  readonly groups: number;
}

export interface GptqPacked {
  readonly qweight: Int32Array;
  readonly qzeros: Int32Array;
  /** float16 bits. */
  readonly scales: Uint16Array;
  readonly gIdx: Int32Array;
  /** Groups (rows × groups) whose zero point is 0, stored with GPTQModel's borrow (see above). */
  readonly zeroPointZero: number;
  /** Re-derived codes outside [0, maxq], clamped where AutoGPTQ would corrupt neighbours (see above). */
  readonly clampedCodes: number;
}

/**
 * The tensor shapes of a [out, in] weight, or a catalogued error when GPTQ cannot hold it:
 * AutoGPTQ sizes qweight as in // 32 * bits and qzeros as out // 32 * bits, so both dimensions
 * must be multiples of 32.
 */
export function gptqShapes(tensor: string, shape: readonly number[], params: GptqParams): GptqShapes {
  if (shape.length !== 2) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail: 'GPTQ packs 2-D linear weights [out_features, in_features]',
    });
  }
  const [out, inF] = shape as [number, number];
  if (out === 0 || inF === 0 || out % 32 !== 0 || inF % 32 !== 0) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail:
        'GPTQ needs in_features and out_features to be positive multiples of 32 (qweight holds in // 32 * bits rows, qzeros out // 32 * bits columns)',
    });
  }
  const groupSize = params.groupSize === -1 ? inF : params.groupSize;
  if (!Number.isSafeInteger(groupSize) || groupSize <= 0) {
    throw new QuantdError('GROUP_SIZE_INVALID', {
      tensor,
      detail: 'group_size must be a positive integer or -1',
      group_size: params.groupSize,
      shape: shapeText(shape),
    });
  }
  const groups = Math.ceil(inF / groupSize);
  return {
    qweight: [(inF / 32) * params.bits, out],
    qzeros: [groups, (out / 32) * params.bits],
    scales: [groups, out],
    gIdx: [inF],
    groupSize,
    groups,
  };
}

/** Rounds a float32 value to `dtype` and back (the layer dtype GPTQ stores Q in). */
function storedAs(dtype: FloatDType): (x: number) => number {
  if (dtype === 'float16') return (x) => float32FromFloat16Bits(float16BitsFromFloat32(x));
  if (dtype === 'bfloat16') return (x) => float32FromBfloat16Bits(bfloat16BitsFromFloat32(x));
  return (x) => x;
}

/** The word every v1 zero-point word is lowered by: a 1 in every field (GPTQModel's constants). */
export function gptqOnesPattern(bits: GptqBits): number {
  let p = 0;
  for (let shift = 0; shift < 32; shift += bits) p += 2 ** shift;
  return p;
}

/**
 * Quantizes the float32 values `w` of a [out, in] weight whose file dtype is `dtype` into the
 * GPTQ tensors (see the module comment for every step).
 */
export function gptqQuantize(
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  dtype: FloatDType,
  params: GptqParams,
): GptqPacked {
  const s = gptqShapes(tensor, shape, params);
  const [out, inF] = shape as [number, number];
  const { bits, sym } = params;
  const maxq = 2 ** bits - 1;
  const { groupSize, groups } = s;
  const store = storedAs(dtype);
  const qweight = new Int32Array(s.qweight[0] * out);
  const zerosV2 = new Int32Array(s.qzeros[0] * s.qzeros[1]);
  const scales = new Uint16Array(groups * out);
  const zeroWords = s.qzeros[1];
  let zeroPointZero = 0;
  let clampedCodes = 0;

  for (let r = 0; r < out; r++) {
    const row = r * inF;
    for (let g = 0; g < groups; g++) {
      const begin = g * groupSize;
      const end = Math.min(begin + groupSize, inF);
      let lo = Infinity;
      let hi = -Infinity;
      for (let i = begin; i < end; i++) {
        const x = w[row + i]!;
        if (!Number.isFinite(x)) {
          throw new QuantdError('INPUT_NOT_FINITE', {
            tensor,
            value: x,
            index: row + i,
            op: 'GPTQ quantization',
          });
        }
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
      let xmin = Math.min(lo, 0);
      let xmax = Math.max(hi, 0);
      if (sym) {
        xmax = Math.max(Math.abs(xmin), xmax);
        if (xmin < 0) xmin = -xmax;
      }
      if (xmin === 0 && xmax === 0) {
        xmin = -1;
        xmax = 1;
      }
      const scale = fround(fround(xmax - xmin) / maxq);
      const zero = sym ? (maxq + 1) / 2 : rint(fround(-xmin / scale));
      const half = float16BitsFromFloat32(scale);
      const hs = float32FromFloat16Bits(half);
      if (!(hs > 0) || !Number.isFinite(hs) || !(zero >= 0 && zero <= maxq)) {
        throw unrepresentable(tensor, r, g, lo, hi, scale);
      }
      scales[g * out + r] = half;
      const scaleZero = fround(zero * scale);
      for (let i = begin; i < end; i++) {
        let q = rint(fround(w[row + i]! / scale)) + zero;
        q = q < 0 ? 0 : q > maxq ? maxq : q;
        const fake = store(fround(scale * (q - zero)));
        let code = rint(fround(fround(fake + scaleZero) / hs));
        if (!(code >= 0 && code <= maxq)) {
          clampedCodes++;
          code = code > maxq ? maxq : 0;
        }
        const bit = i * bits;
        qweight[(bit >>> 5) * out + r]! |= code << (bit & 31);
      }
      if (zero === 0) zeroPointZero++;
      const zbit = r * bits;
      zerosV2[g * zeroWords + (zbit >>> 5)]! |= zero << (zbit & 31);
    }
  }

  const ones = gptqOnesPattern(bits);
  const qzeros = new Int32Array(zerosV2.length);
  for (let k = 0; k < zerosV2.length; k++) qzeros[k] = (zerosV2[k]! - ones) | 0;
  return { qweight, qzeros, scales, gIdx: gptqGroupIndex(inF, groupSize), zeroPointZero, clampedCodes };
}

/**
 * The GPTQ tensors of a solution of the GPTQ algorithm (gptq-solve.ts): its codes as they are,
 * its scales rounded to float16 (what the format stores), its zero points and g_idx packed as
 * gptqQuantize packs them. Dequantized, a weight is fp16(scale)·(code − zero).
 */
export function gptqPackSolution(
  tensor: string,
  solution: {
    readonly codes: Uint8Array;
    readonly scale: Float64Array;
    readonly zero: Float64Array;
    readonly gIdx: Int32Array;
    readonly groups: number;
  },
  out: number,
  inF: number,
  bits: GptqBits,
): GptqPacked {
  const { codes, scale, zero, gIdx, groups } = solution;
  const qweight = new Int32Array((inF / 32) * bits * out);
  const zeroWords = (out / 32) * bits;
  const zerosV2 = new Int32Array(groups * zeroWords);
  const scales = new Uint16Array(groups * out);
  let zeroPointZero = 0;
  for (let g = 0; g < groups; g++) {
    for (let r = 0; r < out; r++) {
      const s = scale[g * out + r]!;
      const half = float16BitsFromFloat32(s);
      const hs = float32FromFloat16Bits(half);
      if (!(hs > 0) || !Number.isFinite(hs)) {
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail: `tensor ${tensor}: row ${r}, group ${g}: its GPTQ scale ${s} is ${hs} in float16, which GPTQ cannot store; exclude the tensor or rescale it`,
        });
      }
      scales[g * out + r] = half;
      const z = zero[g * out + r]!;
      if (z === 0) zeroPointZero++;
      const zbit = r * bits;
      zerosV2[g * zeroWords + (zbit >>> 5)]! |= z << (zbit & 31);
    }
  }
  for (let r = 0; r < out; r++) {
    for (let i = 0; i < inF; i++) {
      const bit = i * bits;
      qweight[(bit >>> 5) * out + r]! |= codes[r * inF + i]! << (bit & 31);
    }
  }
  const ones = gptqOnesPattern(bits);
  const qzeros = new Int32Array(zerosV2.length);
  for (let k = 0; k < zerosV2.length; k++) qzeros[k] = (zerosV2[k]! - ones) | 0;
  return { qweight, qzeros, scales, gIdx: Int32Array.from(gIdx), zeroPointZero, clampedCodes: 0 };
}

/** g_idx: each input column's group, ⌊i / group_size⌋. */
export function gptqGroupIndex(inF: number, groupSize: number): Int32Array {
  return Int32Array.from({ length: inF }, (_, i) => Math.floor(i / groupSize));
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
      `tensor ${tensor}: row ${row}, group ${group} spans [${lo}, ${hi}]; its GPTQ scale ${scale} ` +
      `is ${float32FromFloat16Bits(float16BitsFromFloat32(scale))} in float16, which GPTQ cannot store ` +
      '(its packing divides by the float16 scale); exclude the tensor or rescale it',
  });
}

/** Zero points (true values, not minus one) of a v1 qzeros tensor [groups, out·bits/32]. */
export function gptqUnpackZeros(qzeros: Int32Array, groups: number, out: number, bits: GptqBits): Int32Array {
  const ones = gptqOnesPattern(bits);
  const words = (out * bits) / 32;
  const mask = 2 ** bits - 1;
  const zeros = new Int32Array(groups * out);
  for (let g = 0; g < groups; g++) {
    for (let r = 0; r < out; r++) {
      const bit = r * bits;
      const word = ((qzeros[g * words + (bit >>> 5)]! + ones) | 0) >>> 0;
      zeros[g * out + r] = (word >>> (bit & 31)) & mask;
    }
  }
  return zeros;
}

/** Codes of a qweight tensor [in·bits/32, out] as [out, in]. */
export function gptqUnpackCodes(qweight: Int32Array, out: number, inF: number, bits: GptqBits): Uint8Array {
  const mask = 2 ** bits - 1;
  const codes = new Uint8Array(out * inF);
  for (let i = 0; i < inF; i++) {
    const bit = i * bits;
    const base = (bit >>> 5) * out;
    const shift = bit & 31;
    for (let r = 0; r < out; r++) codes[r * inF + i] = (qweight[base + r]! >>> shift) & mask;
  }
  return codes;
}

/**
 * The float32 weight [out, in] of GPTQ tensors: scale · (code − zero), exact in float32 (the
 * kernels compute the same product in float16). `gIdx` null means ⌊i / (in / groups)⌋, for
 * files without g_idx (groups must then divide in_features).
 */
export function gptqDequantize(
  qweight: Int32Array,
  qzeros: Int32Array,
  scales: Float32Array,
  gIdx: Int32Array | null,
  out: number,
  inF: number,
  groups: number,
  bits: GptqBits,
): Float32Array {
  const codes = gptqUnpackCodes(qweight, out, inF, bits);
  const zeros = gptqUnpackZeros(qzeros, groups, out, bits);
  const groupSize = inF / groups;
  const w = new Float32Array(out * inF);
  for (let r = 0; r < out; r++) {
    for (let i = 0; i < inF; i++) {
      const g = gIdx ? gIdx[i]! : Math.floor(i / groupSize);
      w[r * inF + i] = fround(scales[g * out + r]! * (codes[r * inF + i]! - zeros[g * out + r]!));
    }
  }
  return w;
}
