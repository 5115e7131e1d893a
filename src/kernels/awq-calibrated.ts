/**
 * The encoders of the AWQ algorithm (src/core/interop/awq-stats.ts) for the awq layout with
 * calibration: the scale search of a group of layers that read one input, a weight scaled and
 * clipped before it is packed, and a norm weight or bias that takes 1/s. The statistics checks
 * are GPTQ's too (one file format, the same refusals).
 */
import type { FloatDType } from '../core/dtypes.js';
import type { AwqParams } from '../core/interop/awq.js';
import { toHalf } from '../core/interop/awq.js';
import { AWQ_SEARCH_DEFAULTS } from '../core/interop/awq-search.js';
import { awqPlannedWeight, awqScalesFromStats, divideBy } from '../core/interop/awq-stats.js';
import type { QuadraticFormsKernel } from '../core/stats-error.js';
import { bfloat16BitsFromFloat32, float16BitsFromFloat32 } from '../core/float16.js';
import type { LinearStats } from '../core/linear-stats.js';
import { bytesOf } from '../core/tensor.js';
import { QuantdError } from '../errors/index.js';

/** A layer's input statistics as a task carries them: the activation's name, for messages. */
export interface NamedStats {
  readonly name: string;
  readonly stats: LinearStats;
}

/** The AWQ scale search of layers sharing one input: inputs are their weights, in this order. */
export interface AwqScalesCall {
  readonly kind: 'awq-scales';
  readonly tensors: readonly string[];
  readonly dtypes: readonly FloatDType[];
  readonly rows: readonly number[];
  readonly inF: number;
  readonly params: AwqParams;
  readonly input: NamedStats;
}

/** What the awq encoder does to a weight before packing it, with calibration. */
export interface AwqCalibration {
  /** its group's scales (columns multiplied), null: none */
  readonly scales: Float64Array | null;
  /** the scales of the layers reading its output (rows divided), null: none */
  readonly rowDivide: Float64Array | null;
  /** its input's statistics (for the output error), null: none */
  readonly input: NamedStats | null;
  /** run the clipping search on `input` (AutoAWQ skips the query and key projections) */
  readonly clip: boolean;
}

/** A 1-D tensor divided elementwise by scales (a norm weight, or the bias of a scaled row). */
export interface AwqFoldCall {
  readonly kind: 'awq-fold';
  readonly tensor: string;
  readonly from: FloatDType;
  readonly to: FloatDType;
  readonly divide: Float64Array;
}

/** Refuses statistics that cannot be a weight's of `inF` inputs, naming both. */
export function checkStats(input: NamedStats, tensor: string, inF: number): void {
  if (input.stats.inFeatures !== inF) {
    throw new QuantdError('CALIBRATION_INVALID', {
      source: input.name,
      detail: `statistics of ${input.stats.inFeatures} input features, but ${tensor} has in_features ${inF} (statistics of another model?)`,
    });
  }
  for (const v of input.stats.hessian) {
    if (!Number.isFinite(v)) {
      throw new QuantdError('CALIBRATION_INVALID', { source: input.name, detail: `its Hessian holds ${v}` });
    }
  }
}

const groupOf = (params: AwqParams, inF: number): number =>
  params.groupSize === -1 ? inF : params.groupSize;

/** The scales (float64 bytes) and a note saying which grid step won. */
export function awqScalesResult(
  call: AwqScalesCall,
  weights: readonly Float32Array[],
  kernel?: QuadraticFormsKernel,
): { outputs: Uint8Array[]; notes: string[] } {
  checkStats(call.input, call.tensors[0]!, call.inF);
  weights.forEach((w, k) => {
    const index = w.findIndex((v) => !Number.isFinite(v));
    if (index >= 0) {
      throw new QuantdError('INPUT_NOT_FINITE', {
        tensor: call.tensors[k]!,
        value: w[index]!,
        index,
        op: 'the AWQ scale search',
      });
    }
  });
  const found = awqScalesFromStats(
    call.input.stats,
    weights,
    call.rows,
    {
      bits: 4,
      groupSize: groupOf(call.params, call.inF),
      zeroPoint: true,
      nGrid: AWQ_SEARCH_DEFAULTS.nGrid,
    },
    kernel,
  );
  const alpha = found.ratio / AWQ_SEARCH_DEFAULTS.nGrid;
  return {
    outputs: [bytesOf(found.scales)],
    notes: [
      found.ratio < 0
        ? `AWQ scales: round-to-nearest kept (no grid step beat it) on ${call.input.stats.tokens} tokens of ${call.input.name}`
        : `AWQ scales α = ${alpha} from ${call.input.stats.tokens} tokens of ${call.input.name}`,
    ],
  };
}

/** The weight to pack (float16 values as float32) and what was done to it, for the report. */
export function awqCalibratedWeight(
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  params: AwqParams,
  c: AwqCalibration,
  kernel?: QuadraticFormsKernel,
): { weight: Float32Array; notes: string[] } {
  const [out, inF] = shape as [number, number];
  if (c.input) checkStats(c.input, tensor, inF);
  const clipStats = c.clip && c.input ? c.input.stats : null;
  const { weight, clipped } = awqPlannedWeight(
    w,
    out,
    inF,
    { scales: c.scales, rowDivide: c.rowDivide, clipStats },
    { bits: 4, groupSize: groupOf(params, inF), zeroPoint: true, ...AWQ_SEARCH_DEFAULTS },
    kernel,
  );
  const notes: string[] = [];
  if (c.scales) notes.push('columns scaled by AWQ');
  if (c.rowDivide) notes.push("rows divided by the next layer's scales");
  if (clipStats) notes.push(`${clipped} of ${(out * inF) / groupOf(params, inF)} groups clipped`);
  return { weight, notes };
}

/** The divided tensor's bytes in `to` (float16: one rounding from float64). */
export function awqFoldResult(call: AwqFoldCall, values: Float32Array): Uint8Array {
  if (values.length !== call.divide.length) {
    throw new QuantdError('INTERNAL', {
      detail: `${call.tensor}: ${values.length} values and ${call.divide.length} scales`,
    });
  }
  const divided = divideBy(values, call.divide);
  const at = call.to === 'float32' ? -1 : divided.findIndex((v) => !(Math.abs(v) <= 65504));
  if (at >= 0 && (call.to === 'float16' || !Number.isFinite(divided[at]))) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${call.tensor}[${at}] divided by its AWQ scale is ${divided[at]}, beyond ${call.to}`,
    });
  }
  if (call.to === 'float32') return bytesOf(Float32Array.from(divided));
  // bfloat16 through float32: a double rounding only within 2^-24 of a bfloat16 tie
  const bits =
    call.to === 'float16'
      ? Uint16Array.from(divided, (v) => float16BitsFromFloat32(toHalf(v)))
      : Uint16Array.from(divided, (v) => bfloat16BitsFromFloat32(v));
  return bytesOf(bits);
}
