/**
 * The distribution of a tensor's quantization error, dequantize(quantize(x)) − x, for the quality
 * report and the console's histogram. The report's totals (RMSE, max error, SQNR) cover every
 * element; the histogram is taken on a sample — HISTOGRAM_SAMPLES elements evenly spaced over the
 * tensor — which shows the shape of the distribution at a cost independent of the tensor's size
 * (a few thousand element reads, cheap enough for the thread that plans the run).
 */
import { QDTYPE_INFO, type FloatDType, type QDType } from './dtypes.js';
import { float32FromBfloat16Bits, float32FromFloat16Bits } from './float16.js';
import { fp8DecodeTable, type Fp8Format } from './fp8.js';
import { dequantizeCode } from './dequantize.js';
import type { Layout } from './layout.js';
import { subByteValue } from './pack.js';
import type { QParams } from './qparams.js';
import { fround } from './rounding.js';
import type { QuantSpec } from './spec.js';

export const HISTOGRAM_SAMPLES = 4096;
export const HISTOGRAM_BINS = 41;

export interface ErrorHistogram {
  /** How many elements were measured (evenly spaced over the tensor). */
  readonly samples: number;
  /** The bins span [−limit, +limit]: limit is the largest |error| in the sample (0: all exact). */
  readonly limit: number;
  /**
   * counts[k]: errors in [−limit + k·w, −limit + (k+1)·w), w = 2·limit / counts.length, the last
   * bin closed; with limit 0 every sample is in the middle bin. An odd count centres a bin on 0.
   */
  readonly counts: readonly number[];
}

/** Up to `count` indices in [0, numel), evenly spaced, ascending and distinct. */
export function sampleIndices(numel: number, count = HISTOGRAM_SAMPLES): number[] {
  const n = Math.min(count, numel);
  const out: number[] = [];
  for (let k = 0; k < n; k++) out.push(Math.floor((k * numel) / n));
  return out;
}

/**
 * The sample indices of a tensor of `numel` elements that fall in [begin, end): a part's share
 * of the tensor's sample (slices and row parts join into the whole tensor's, in order).
 */
export function sampleIndicesIn(numel: number, begin: number, end: number): number[] {
  return sampleIndices(numel).filter((i) => i >= begin && i < end);
}

export function histogramOf(errors: ArrayLike<number>, bins = HISTOGRAM_BINS): ErrorHistogram {
  let limit = 0;
  for (let i = 0; i < errors.length; i++) limit = Math.max(limit, Math.abs(errors[i]!));
  const counts = new Array<number>(bins).fill(0);
  for (let i = 0; i < errors.length; i++) {
    const k = limit === 0 ? (bins - 1) >> 1 : Math.floor(((errors[i]! + limit) / (2 * limit)) * bins);
    counts[Math.min(bins - 1, Math.max(0, k))]! += 1;
  }
  return { samples: errors.length, limit, counts };
}

/** Element i of a float tensor's bytes, as float32 (float16 and bfloat16 widen exactly). */
function valueReader(x: Uint8Array, dtype: FloatDType): (i: number) => number {
  const view = new DataView(x.buffer, x.byteOffset, x.byteLength);
  if (dtype === 'float32') return (i) => view.getFloat32(4 * i, true);
  if (dtype === 'float16') return (i) => float32FromFloat16Bits(view.getUint16(2 * i, true));
  return (i) => float32FromBfloat16Bits(view.getUint16(2 * i, true));
}

/** Code i of a tensor's codes, as a number. */
function codeReader(codes: Uint8Array, qdtype: QDType): (i: number) => number {
  const { bits, signed } = QDTYPE_INFO[qdtype];
  if (bits < 8) return (i) => subByteValue(codes, i, bits, signed);
  const view = new DataView(codes.buffer, codes.byteOffset, codes.byteLength);
  switch (qdtype) {
    case 'int8':
      return (i) => view.getInt8(i);
    case 'uint8':
      return (i) => codes[i]!;
    case 'int16':
      return (i) => view.getInt16(2 * i, true);
    case 'int32':
      return (i) => view.getInt32(4 * i, true);
    default: {
      const table = fp8DecodeTable(qdtype as Fp8Format);
      return (i) => table[codes[i]!]!;
    }
  }
}

/** Where a quantized slice lies in its tensor: its first element, and the tensor's size. */
export interface SliceOf {
  readonly firstElement: number;
  readonly tensorNumel: number;
}

/**
 * The errors of the sampled elements of a quantized tensor: x from the input bytes (`dtype`),
 * the code from `codes`, dequantized with the element's scale and zero point in float32 as
 * dequantize does. Reads only the sampled elements: a few thousand, whatever the tensor's size.
 * For a slice of a tensor (`slice`), the tensor's samples that fall in it: the slices' errors,
 * in order, are the whole tensor's.
 */
export function sampledQuantizeErrors(
  x: Uint8Array,
  dtype: FloatDType,
  codes: Uint8Array,
  spec: QuantSpec,
  layout: Layout,
  qp: QParams,
  slice: SliceOf = { firstElement: 0, tensorNumel: layout.numel },
): Float64Array {
  const value = valueReader(x, dtype);
  const code = codeReader(codes, spec.qdtype);
  const first = slice.firstElement;
  const indices = sampleIndicesIn(slice.tensorNumel, first, first + layout.numel).map((i) => i - first);
  const errors = new Float64Array(indices.length);
  indices.forEach((i, k) => {
    const c = Math.floor(i / layout.inner) % layout.channels;
    errors[k] = dequantizeCode(code(i), fround(qp.zeroPoint[c]!), qp.scale[c]!) - value(i);
  });
  return errors;
}

/** The errors of the sampled elements of `x` decoded as `decoded` (a layout's own decoder). */
export function sampledDecodedErrors(x: Float32Array, decoded: Float32Array): Float64Array {
  return Float64Array.from(sampleIndices(x.length), (i) => decoded[i]! - x[i]!);
}
