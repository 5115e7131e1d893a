/**
 * choose_qparams: from the values of a tensor to a scale and zero point per unit (tensor,
 * channel, token row or group). The formulas are torch's `determine_qparams` (which torch
 * 1.13's MinMaxObserver and PerChannelMinMaxObserver compute identically) and, for per_token,
 * `choose_qparams_per_token` / `_choose_qparams_per_token_asymmetric_impl` of
 * quantized_decomposed. Every operation is float32, in the order torch writes it.
 *
 * Worked example (uint8 affine, qmin 0, qmax 255): x in [-1, 3]
 *   scale = (3 - (-1)) / 255 = 0.015686275 (float32)
 *   zp    = 0 - round(-1 / 0.015686275) = 0 - round(-63.75) = 64
 */
import { QuantdError } from '../errors/index.js';
import { QDTYPE_INFO } from './dtypes.js';
import type { Layout } from './layout.js';
import { greedyRangeSearch } from './range-search.js';
import { fround, rint } from './rounding.js';
import { hasFloatZeroPoint, symmetricZeroPoint, type QuantSpec } from './spec.js';

export interface QParams {
  /** One float32 scale per unit, in the order of Layout.qparamShape. */
  readonly scale: Float32Array;
  /** int32 zero points, or float32 ones for float_qparams and per_token affine. */
  readonly zeroPoint: Int32Array | Float32Array;
}

export interface MinMax {
  readonly min: Float32Array;
  readonly max: Float32Array;
}

/**
 * Per-unit minimum and maximum. Rejects NaN and ±Infinity (they have no meaningful range).
 * Zeros order as -0 < +0 (IEEE 754 minimum/maximum, Math.min/Math.max): `<` alone would let
 * element order decide which zero a unit's minimum is, and backends and splits would disagree.
 * It matches torch whenever torch is unambiguous (a unit whose zeros are all +0, or all -0).
 */
export function reduceMinMax(tensor: string, x: Float32Array, layout: Layout, op: string): MinMax {
  const { outer, channels, inner } = layout;
  const min = new Float32Array(channels).fill(Infinity);
  const max = new Float32Array(channels).fill(-Infinity);
  let i = 0;
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      let lo = min[c]!;
      let hi = max[c]!;
      const end = i + inner;
      for (; i < end; i++) {
        const v = x[i]!;
        if (!(v - v === 0)) throw notFinite(tensor, v, i, op);
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      min[c] = lo;
      max[c] = hi;
    }
  }
  return { min, max };
}

/**
 * torch's validate_qmin_qmax: qparams are only chosen for a range that includes 0 (the zero
 * point of every mode lies in it then). Given qparams may use any range inside the qdtype's.
 */
export function checkRangeForChoosing(spec: QuantSpec): void {
  const { quantMin: qmin, quantMax: qmax } = spec;
  if (!(qmin <= 0 && 0 <= qmax)) {
    throw new QuantdError('QUANT_RANGE_INVALID', {
      detail: `choosing qparams needs a range that includes 0 (torch validate_qmin_qmax); [${qmin}, ${qmax}] does not — pass NAME.scale and NAME.zero_point to quantize into it`,
    });
  }
  if (spec.scheme === 'per_token' && spec.mode === 'symmetric' && qmax <= 0) {
    throw new QuantdError('QUANT_RANGE_INVALID', {
      detail: `symmetric per_token divides the row's absolute maximum by quant_max, which must be positive (got ${qmax})`,
    });
  }
}

export function notFinite(tensor: string, value: number, index: number, op: string): QuantdError {
  return new QuantdError('INPUT_NOT_FINITE', { tensor, value: String(value), index, op });
}

function rangeOverflow(tensor: string, lo: number, hi: number, scale: number): QuantdError {
  return new QuantdError('RANGE_OVERFLOW', { tensor, min: lo, max: hi, scale });
}

/** Gathers the elements of one unit (for per_channel with outer > 1 they are strided). */
function unitValues(x: Float32Array, layout: Layout, c: number): Float32Array {
  const { outer, channels, inner } = layout;
  if (outer === 1) return x.subarray(c * inner, (c + 1) * inner);
  const out = new Float32Array(outer * inner);
  for (let o = 0; o < outer; o++) {
    const start = (o * channels + c) * inner;
    out.set(x.subarray(start, start + inner), o * inner);
  }
  return out;
}

/** Chooses qparams for every unit of `x` (already float32) under `spec`. */
export function chooseQParams(tensor: string, x: Float32Array, layout: Layout, spec: QuantSpec): QParams {
  if (layout.numel === 0) {
    throw new QuantdError('EMPTY_TENSOR', { tensor, shape: `[${layout.shape.join(', ')}]` });
  }
  checkRangeForChoosing(spec);
  const { min, max } = reduceMinMax(tensor, x, layout, 'choose_qparams');
  if (spec.rangeSearch === 'greedy') {
    const bits = QDTYPE_INFO[spec.qdtype].bits;
    for (let c = 0; c < layout.channels; c++) {
      const found = greedyRangeSearch(tensor, unitValues(x, layout, c), bits);
      min[c] = found.min;
      max[c] = found.max;
    }
  }
  if (spec.scheme === 'per_token') return perTokenQParams(tensor, min, max, spec);
  return determineQParams(tensor, min, max, spec);
}

/** torch `determine_qparams` for each unit, given its min and max. */
export function determineQParams(
  tensor: string,
  min: Float32Array,
  max: Float32Array,
  spec: QuantSpec,
): QParams {
  const n = min.length;
  const { quantMin: qmin, quantMax: qmax, eps } = spec;
  const scale = new Float32Array(n);
  const floatZp = hasFloatZeroPoint(spec);
  const zeroPoint = floatZp ? new Float32Array(n) : new Int32Array(n);
  const symZp = symmetricZeroPoint(spec);
  for (let c = 0; c < n; c++) {
    const [s, zp] = unitQParams(min[c]!, max[c]!, spec.mode, qmin, qmax, eps, symZp);
    if (!Number.isFinite(s) || !Number.isFinite(zp)) throw rangeOverflow(tensor, min[c]!, max[c]!, s);
    scale[c] = s;
    zeroPoint[c] = zp;
  }
  return { scale, zeroPoint };
}

/**
 * torch's determine_qparams for one unit with range [lo, hi]: its scale and zero point, in
 * float32 arithmetic (shared with the observers' _calculate_qparams, which is the same formula).
 * A non-finite result is the caller's to refuse.
 */
export function unitQParams(
  lo: number,
  hi: number,
  mode: 'affine' | 'symmetric' | 'float_qparams',
  qmin: number,
  qmax: number,
  eps: number,
  symmetricZp: number,
): [number, number] {
  const minNeg = Math.min(lo, 0);
  const maxPos = Math.max(hi, 0);
  if (mode === 'float_qparams') {
    let s = fround(fround(hi - lo) / fround(qmax - qmin));
    s = s > eps ? s : 1;
    return [s, fround(-lo / s)];
  }
  if (mode === 'symmetric') {
    return [Math.max(fround(Math.max(-minNeg, maxPos) / fround((qmax - qmin) / 2)), eps), symmetricZp];
  }
  const s = Math.max(fround(fround(maxPos - minNeg) / fround(qmax - qmin)), eps);
  return [s, Math.min(Math.max(qmin - rint(fround(minNeg / s)), qmin), qmax)];
}

const PER_TOKEN_MIN_AMAX = fround(1e-5);

/**
 * per_token: symmetric is `choose_qparams_per_token` (amax clamped to 1e-5, divided by
 * quant_max; torch defines it for int8, quant_max 127); affine is
 * `_choose_qparams_per_token_asymmetric_impl` with its zero-point rule, generalised from
 * torch's fixed [-128, 127] to the spec's range.
 */
function perTokenQParams(tensor: string, min: Float32Array, max: Float32Array, spec: QuantSpec): QParams {
  const n = min.length;
  const { quantMin: qmin, quantMax: qmax, eps } = spec;
  const scale = new Float32Array(n);
  if (spec.mode === 'symmetric') {
    const divisor = fround(qmax);
    for (let r = 0; r < n; r++) {
      const amax = Math.max(Math.abs(min[r]!), Math.abs(max[r]!));
      const s = fround(Math.max(amax, PER_TOKEN_MIN_AMAX) / divisor);
      if (!Number.isFinite(s)) throw rangeOverflow(tensor, min[r]!, max[r]!, s);
      scale[r] = s;
    }
    return { scale, zeroPoint: new Int32Array(n) };
  }
  const zeroPoint = new Float32Array(n);
  const levels = fround(qmax - qmin);
  for (let r = 0; r < n; r++) {
    const minNeg = Math.min(min[r]!, 0);
    const maxPos = Math.max(max[r]!, 0);
    let s = fround(fround(maxPos - minNeg) / levels);
    s = Math.max(s, eps);
    if (!Number.isFinite(s)) throw rangeOverflow(tensor, min[r]!, max[r]!, s);
    const descaledMin = fround(minNeg / s);
    const descaledMax = fround(maxPos / s);
    const zpFromMinError = fround(qmin + descaledMin);
    const zpFromMaxError = fround(qmax + descaledMax);
    let zp =
      fround(zpFromMinError + zpFromMaxError) > 0 ? fround(qmin - descaledMin) : fround(qmax - descaledMax);
    zp = rint(Math.min(Math.max(zp, qmin), qmax));
    scale[r] = s;
    zeroPoint[r] = zp;
  }
  return { scale, zeroPoint };
}
