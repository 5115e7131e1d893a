/**
 * How well codes represent the values they came from: the squared and the largest absolute error
 * of dequantize(quantize(x)) against x, the signal energy, and how many elements were clamped.
 * Sums are float64 in element order here; the kernels sum in blocks, so statistics agree to
 * rounding rather than bit for bit (they are for people deciding which layers to keep wider).
 */
import { QDTYPE_INFO } from './dtypes.js';
import { decodeValues, dequantizeCode } from './dequantize.js';
import type { Layout } from './layout.js';
import type { QParams } from './qparams.js';
import { addsZeroPointBeforeRounding } from './quantize.js';
import { fround, rint } from './rounding.js';
import type { FloatInput, QuantizeOutput } from './ops.js';
import type { QuantSpec } from './spec.js';
import { toFloat32 } from './tensor.js';
import type { QualityStats } from './quality-stats.js';

export type { QualityStats } from './quality-stats.js';

export const emptyQuality = (): QualityStats => ({
  sumSqError: 0,
  sumSqValue: 0,
  maxAbsError: 0,
  clipped: 0,
  count: 0,
});

/** Adds `b` into `a` (the statistics of two ranges of one tensor). */
export function mergeQuality(a: QualityStats, b: QualityStats): QualityStats {
  a.sumSqError += b.sumSqError;
  a.sumSqValue += b.sumSqValue;
  a.maxAbsError = Math.max(a.maxAbsError, b.maxAbsError);
  a.clipped += b.clipped;
  a.count += b.count;
  return a;
}

export function quality(
  x: Float32Array,
  codes: Uint8Array,
  layout: Layout,
  spec: QuantSpec,
  qp: QParams,
): QualityStats {
  const stats = emptyQuality();
  const q = decodeValues(codes, spec.qdtype, layout.numel);
  const fp8 = QDTYPE_INFO[spec.qdtype].float8;
  const addFirst = addsZeroPointBeforeRounding(spec);
  const { outer, channels, inner } = layout;
  const { quantMin: qmin, quantMax: qmax } = spec;
  let i = 0;
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      const s = qp.scale[c]!;
      const inv = fround(1 / s);
      const zp = fround(qp.zeroPoint[c]!);
      for (const end = i + inner; i < end; i++) {
        const v = x[i]!;
        addError(stats, v, dequantizeCode(q[i]!, zp, s));
        const t = fround(v * inv);
        const u = fp8 ? t : addFirst ? rint(fround(t + zp)) : fround(rint(t) + zp);
        if (u < qmin || u > qmax) stats.clipped++;
      }
    }
  }
  stats.count = layout.numel;
  return stats;
}

/** One value's error against what it dequantizes back to, into `stats`. */
function addError(stats: QualityStats, v: number, back: number): void {
  const err = v - back;
  stats.sumSqError += err * err;
  stats.sumSqValue += v * v;
  // NaN errors count in the sums but not in the maximum, as in the kernels
  if (Math.abs(err) > stats.maxAbsError) stats.maxAbsError = Math.abs(err);
}

/**
 * The statistics of `y`, what a file format decodes the values `x` back to (the GGUF types: no
 * quantization range, so nothing counts as clipped).
 */
export function decodedQuality(x: Float32Array, y: Float32Array): QualityStats {
  return addDecodedErrors(emptyQuality(), x, y);
}

/**
 * decodedQuality over consecutive chunks of a tensor: `stats` gains chunk `x` decoded as `y`
 * (the same sums in the same order as one call over the whole tensor, so the same numbers).
 */
export function addDecodedErrors(stats: QualityStats, x: Float32Array, y: Float32Array): QualityStats {
  for (let i = 0; i < x.length; i++) addError(stats, x[i]!, y[i]!);
  stats.count += x.length;
  return stats;
}

/** The statistics of `output`, the quantization of `input` under `spec`. */
export function tensorQuality(input: FloatInput, spec: QuantSpec, output: QuantizeOutput): QualityStats {
  return quality(toFloat32(input.data, input.dtype), output.data, input.layout, spec, output.qparams);
}

export interface QualitySummary {
  readonly rmse: number;
  readonly max_abs_error: number;
  /** Signal-to-quantization-noise ratio in dB; null when the error is exactly zero. */
  readonly sqnr_db: number | null;
  readonly clipped_fraction: number;
  readonly elements: number;
}

export function summarizeQuality(s: QualityStats): QualitySummary {
  return {
    rmse: s.count > 0 ? Math.sqrt(s.sumSqError / s.count) : 0,
    max_abs_error: s.maxAbsError,
    sqnr_db: s.sumSqError > 0 ? 10 * Math.log10(s.sumSqValue / s.sumSqError) : null,
    clipped_fraction: s.count > 0 ? s.clipped / s.count : 0,
    elements: s.count,
  };
}
