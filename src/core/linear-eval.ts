/**
 * How much quantization moves a linear layer's OUTPUT, given real inputs (seed 004's quantized
 * linear patterns): for activations X [n, in] and a weight W [out, in] (and a bias),
 *
 *   reference     Y = X·Wᵀ + b                                  (float64 accumulation)
 *   weight-only   X·dequant(quant(W))ᵀ + b                      (any weight spec: int8 per channel,
 *                                                                int4 per group, …)
 *   qlinear       int8 activations (quint8, per tensor, from a min/max observer over X) times int8
 *                 per-channel symmetric weights (qint8), exact integer accumulation, then
 *                 y = acc · x_scale · w_scale[o] + b requantized to the output's quint8 qparams
 *                 (a min/max observer over Y) and dequantized — torch's reference quantized
 *                 linear (dequantize → linear → quantize) with the sum kept in integers
 *
 * and, for each, the error against the reference: relative MSE ‖Y − Ŷ‖² / ‖Y‖², SQNR in dB, and
 * the largest absolute error. The three products run in a C kernel where the caller has one
 * (native/src/linear_out.c, the same sums in the same order).
 */
import { dequantize } from './dequantize.js';
import { planLayout } from './layout.js';
import { observerConfig } from './observers/config.js';
import { aminmax, channelMinMax } from './observers/min-max.js';
import { calculateQParams } from './observers/qparams.js';
import { resolveQParams } from './ops.js';
import { quantize } from './quantize.js';
import { rint } from './rounding.js';
import type { QuantSpec } from './spec.js';

export interface LinearLayer {
  /** activations [n, in] */
  readonly x: Float32Array;
  readonly n: number;
  readonly inFeatures: number;
  /** weight [out, in] */
  readonly w: Float32Array;
  readonly outFeatures: number;
  readonly bias?: Float32Array;
}

export interface OutputError {
  readonly rel_mse: number;
  /** 10·log10(‖Y‖² / ‖Y − Ŷ‖²); Infinity when exact */
  readonly sqnr_db: number;
  readonly max_abs_error: number;
}

/**
 * Y [n, out] = X·Wᵀ + b, float32 operands, every output summed in float64 from its bias over i
 * ascending: equal to the bit to linearOutput (a C kernel).
 */
export type LinearOutputsKernel = (
  x: Float32Array,
  w: Float32Array,
  bias: Float32Array | null,
  n: number,
  k: number,
  out: number,
  y: Float64Array,
) => void;

/** X·Wᵀ + b for a weight given as float values, accumulated in float64. */
export function linearOutput(
  layer: LinearLayer,
  w: ArrayLike<number> = layer.w,
  kernel?: LinearOutputsKernel,
): Float64Array {
  const { x, n, inFeatures: k, outFeatures: out, bias } = layer;
  const y = new Float64Array(n * out);
  if (kernel && w instanceof Float32Array) {
    kernel(x, w, bias ?? null, n, k, out, y);
    return y;
  }
  for (let s = 0; s < n; s++) {
    for (let o = 0; o < out; o++) {
      let acc = bias ? bias[o]! : 0;
      for (let i = 0; i < k; i++) acc += x[s * k + i]! * w[o * k + i]!;
      y[s * out + o] = acc;
    }
  }
  return y;
}

export function outputError(reference: ArrayLike<number>, got: ArrayLike<number>): OutputError {
  let num = 0;
  let den = 0;
  let max = 0;
  for (let i = 0; i < reference.length; i++) {
    const d = reference[i]! - got[i]!;
    num += d * d;
    den += reference[i]! ** 2;
    max = Math.max(max, Math.abs(d));
  }
  return {
    rel_mse: den === 0 ? (num === 0 ? 0 : Infinity) : num / den,
    sqnr_db: num === 0 ? Infinity : 10 * Math.log10(den / num),
    max_abs_error: max,
  };
}

/** The weight as quantized by `spec` and read back (float32 values, [out, in]). */
export function weightRoundTrip(name: string, layer: LinearLayer, spec: QuantSpec): Float32Array {
  const shape = [layer.outFeatures, layer.inFeatures];
  const layout = planLayout(name, shape, spec);
  const qp = resolveQParams(name, layer.w, layout, spec, undefined);
  return dequantize(quantize(name, layer.w, layout, spec, qp), spec.qdtype, layout, qp);
}

/** The qlinear path (see the module comment): the dequantized output [n, out]. */
export function qlinearOutput(
  layer: LinearLayer,
  reference: ArrayLike<number>,
  kernel?: LinearOutputsKernel,
): Float64Array {
  const { x, n, inFeatures: k, w, outFeatures: out, bias } = layer;
  const minMax = (values: ArrayLike<number>): [Float32Array, Float32Array] => {
    const [lo, hi] = aminmax(values);
    return [Float32Array.of(lo), Float32Array.of(hi)];
  };
  const act = observerConfig({ kind: 'min_max', dtype: 'quint8' });
  const xq = calculateQParams(act, ...minMax(x));
  const xs = xq.scale[0]!;
  const xz = xq.zeroPoint[0]!;
  const yq = calculateQParams(act, ...minMax(reference));
  const ys = yq.scale[0]!;
  const yz = yq.zeroPoint[0]!;
  // weights: qint8 per output channel, symmetric
  const wConfig = observerConfig({
    kind: 'per_channel_min_max',
    dtype: 'qint8',
    qscheme: 'per_channel_symmetric',
  });
  const [wLo, wHi] = channelMinMax('qlinear weight', w, [out, k], 0);
  const wq = calculateQParams(wConfig, wLo, wHi);
  const codes = new Int32Array(out * k);
  for (let o = 0; o < out; o++) {
    const s = wq.scale[o]!;
    for (let i = 0; i < k; i++) codes[o * k + i] = Math.min(Math.max(rint(w[o * k + i]! / s), -128), 127);
  }
  const xCodes = new Int32Array(n * k);
  for (let j = 0; j < n * k; j++) xCodes[j] = Math.min(Math.max(rint(x[j]! / xs) + xz, 0), 255) - xz;
  // the integer sums, exact either way (|acc| ≤ in · 255 · 128): codes are exact in float32
  const sums = kernel
    ? linearOutput(
        { x: Float32Array.from(xCodes), n, inFeatures: k, w, outFeatures: out },
        Float32Array.from(codes),
        kernel,
      )
    : null;
  const y = new Float64Array(n * out);
  for (let s = 0; s < n; s++) {
    for (let o = 0; o < out; o++) {
      let acc = 0;
      if (sums) acc = sums[s * out + o]!;
      else for (let i = 0; i < k; i++) acc += xCodes[s * k + i]! * codes[o * k + i]!;
      const real = acc * xs * wq.scale[o]! + (bias ? bias[o]! : 0);
      const q = Math.min(Math.max(rint(real / ys) + yz, 0), 255);
      y[s * out + o] = (q - yz) * ys;
    }
  }
  return y;
}

export interface LinearErrorReport {
  readonly n: number;
  readonly in_features: number;
  readonly out_features: number;
  readonly weight_only: OutputError;
  readonly qlinear_int8: OutputError;
}

/** Every path's output error for `layer`, the weight-only path quantizing W with `spec`. */
export function linearErrorReport(
  layer: LinearLayer,
  spec: QuantSpec,
  kernel?: LinearOutputsKernel,
): LinearErrorReport {
  const reference = linearOutput(layer, layer.w, kernel);
  const weightOnly = linearOutput(layer, weightRoundTrip('weight', layer, spec), kernel);
  return {
    n: layer.n,
    in_features: layer.inFeatures,
    out_features: layer.outFeatures,
    weight_only: outputError(reference, weightOnly),
    qlinear_int8: outputError(reference, qlinearOutput(layer, reference, kernel)),
  };
}
