/**
 * Weight quantization as compressed-tensors defines it — the `quantization_config` format
 * (`quant_method: compressed-tensors`) that vLLM and transformers load — bit for bit what
 * llm-compressor's QuantizationModifier saves for one Linear weight W [out, in] of dtype D
 * (float32, float16 or bfloat16: the checkpoint's; the scales are stored in D as well):
 *
 * 1. Observer (llm-compressor's min-max weight observer, compressed-tensors' calculate_qparams).
 *    Per unit — a row (strategy "channel") or a row's run of group_size columns ("group") —
 *    min = min(min(W_unit), 0), max = max(max(W_unit), 0), then, every operation in D (computed
 *    in float32, rounded to D: ./dtype-arithmetic.ts):
 *    ```
 *    symmetric:  scale = max(|min|, |max|) / ((qmax - qmin) / 2)        zero point 0
 *    asymmetric: scale = (max - min) / (qmax - qmin)
 *                zp    = round(clamp(qmin - min / scale, qmin, qmax))   (0 / 0 → NaN → 0)
 *    scale == 0  →  torch.finfo(D).eps                                  (after the zero point)
 *    ```
 *    int b bits: [qmin, qmax] = [-2^(b-1), 2^(b-1) - 1] (int4: scale = absmax / 7.5); float8
 *    e4m3fn: [-448, 448]. `round` is torch.round, half to even.
 * 2. Quantize (compressed-tensors' quantize → _quantize), in D:
 *    `q = clamp(D(D(w / scale) + zp), qmin, qmax)`, then int: round half to even; float8: the
 *    nearest e4m3fn value (its code is stored). The zero point is added even when symmetric
 *    (initialize_qparams creates it, as 0), which turns a quotient of -0 into +0.
 * 3. Dequantize (what a loader reads back): `D(D(q - zp) · scale)`.
 *
 * Because the quotient is rounded to D before it is rounded to an integer, codes differ from a
 * float32 computation wherever D's rounding crosses a .5 (bfloat16 keeps 8 significant bits: at
 * int8's |q| ≥ 64 every quotient is a multiple of 0.5). test/interop/golden records how many.
 *
 * A weight is refused when it holds a non-finite value (INPUT_NOT_FINITE) or when an
 * asymmetric range overflows D (float16 max - min past 65504: FEATURE_UNSUPPORTED).
 */
import { QuantdError, shapeText } from '../../errors/index.js';
import { DTYPE_EPS, roundIn } from '../dtype-arithmetic.js';
import type { FloatDType } from '../dtypes.js';
import { encodeFp8 } from '../fp8.js';
import { rint } from '../rounding.js';

/** compressed-tensors' CompressionFormat of a quantized weight's tensors. */
export type CtFormat = 'pack-quantized' | 'int-quantized' | 'float-quantized';

/** What compressed-tensors' QuantizationArgs says about a weight, as far as quantd writes it. */
export interface CtWeightArgs {
  /** 4 or 8 for "int" (2 too when reading), 8 for "float" (float8_e4m3fn). */
  readonly numBits: number;
  readonly type: 'int' | 'float';
  readonly symmetric: boolean;
  /** Input columns per scale (strategy "group"), or null: one scale per row ("channel"). */
  readonly groupSize: number | null;
}

export interface CtShapes {
  readonly out: number;
  readonly inF: number;
  /** Columns per scale (in_features for "channel"). */
  readonly groupSize: number;
  /** Scales per row. */
  readonly groups: number;
}

/** The quantized range [qmin, qmax] (calculate_range). */
export function ctRange(args: CtWeightArgs): { readonly qmin: number; readonly qmax: number } {
  if (args.type === 'float') return { qmin: -448, qmax: 448 };
  return { qmin: -(2 ** (args.numBits - 1)), qmax: 2 ** (args.numBits - 1) - 1 };
}

/** The scale grid of a [out, in] weight, or the catalogued error when compressed-tensors cannot make one. */
export function ctShapes(tensor: string, shape: readonly number[], args: CtWeightArgs): CtShapes {
  if (shape.length !== 2 || shape[0] === 0 || shape[1] === 0) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail: 'compressed-tensors quantizes non-empty 2-D Linear weights [out_features, in_features]',
    });
  }
  const [out, inF] = shape as [number, number];
  const groupSize = args.groupSize ?? inF;
  if (!Number.isSafeInteger(groupSize) || groupSize <= 0 || inF % groupSize !== 0) {
    // llm-compressor's observer reshapes the columns into groups (unflatten): they must divide
    throw new QuantdError('GROUP_SIZE_INVALID', {
      tensor,
      detail: 'the group strategy needs in_features to be a multiple of group_size',
      group_size: args.groupSize ?? -1,
      shape: shapeText(shape),
    });
  }
  return { out, inF, groupSize, groups: inF / groupSize };
}

export interface CtQuantized {
  /** [out, in]: int codes (type "int"), or float8_e4m3fn bytes in a Uint8Array (type "float"). */
  readonly codes: Int8Array | Uint8Array;
  /** [out, groups]: values of the weight's dtype. */
  readonly scales: Float32Array;
  /** [out, groups]: asymmetric only. */
  readonly zeroPoints: Int8Array | null;
}

/** Quantizes the weight `w` [out, in] (values of `dtype`) as compressed-tensors does (file comment). */
export function ctQuantize(
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  dtype: FloatDType,
  args: CtWeightArgs,
): CtQuantized {
  const { out, inF, groupSize, groups } = ctShapes(tensor, shape, args);
  const round = roundIn(dtype);
  const { qmin, qmax } = ctRange(args);
  const bitRange = qmax - qmin;
  const half = bitRange / 2; // float(bit_range) / 2: 7.5, 127.5, 448 — exact in every dtype
  const eps = DTYPE_EPS[dtype];
  const float = args.type === 'float';
  const codes = float ? new Uint8Array(out * inF) : new Int8Array(out * inF);
  const scales = new Float32Array(out * groups);
  const zeroPoints = args.symmetric ? null : new Int8Array(out * groups);
  for (let r = 0; r < out; r++) {
    for (let g = 0; g < groups; g++) {
      const lo = r * inF + g * groupSize;
      const hi = lo + groupSize;
      let mn = 0;
      let mx = 0;
      for (let i = lo; i < hi; i++) {
        const x = w[i]!;
        if (!Number.isFinite(x)) {
          throw new QuantdError('INPUT_NOT_FINITE', {
            tensor,
            value: x,
            index: i,
            op: 'compressed-tensors quantization',
          });
        }
        if (x < mn) mn = x;
        else if (x > mx) mx = x;
      }
      let scale: number;
      let zp = 0;
      if (args.symmetric) {
        scale = round(Math.max(-mn, mx) / half);
      } else {
        scale = round(round(mx - mn) / bitRange);
        if (!Number.isFinite(scale)) throw overflow(tensor, r, g, mn, mx, dtype);
        const z = round(qmin - round(mn / scale)); // NaN for an all-zero unit (0 / 0)
        // torch casts NaN to int8 as 0 (what the reference wrote on x86)
        zp = Number.isNaN(z) ? 0 : rint(Math.min(Math.max(z, qmin), qmax));
      }
      if (scale === 0) scale = eps;
      scales[r * groups + g] = scale;
      if (zeroPoints) zeroPoints[r * groups + g] = zp;
      for (let i = lo; i < hi; i++) {
        // + zp even when 0: -0 becomes +0, as in the reference (its zero point exists while it
        // compresses); exact, so only an asymmetric sum needs rounding
        let q = round(w[i]! / scale) + zp;
        if (zp !== 0) q = round(q);
        q = q < qmin ? qmin : q > qmax ? qmax : q;
        codes[i] = float ? encodeFp8(q, 'float8_e4m3fn') : rint(q);
      }
    }
  }
  return { codes, scales, zeroPoints };
}

function overflow(tensor: string, row: number, group: number, mn: number, mx: number, dtype: FloatDType) {
  return new QuantdError('FEATURE_UNSUPPORTED', {
    detail:
      `tensor ${tensor}: row ${row}, group ${group} spans [${mn}, ${mx}], whose width overflows ` +
      `${dtype}: compressed-tensors' asymmetric scale would be infinite; use a symmetric scheme, ` +
      'exclude the tensor or rescale it',
  });
}

/**
 * Where a weight's scales (and zero points) lie: a grid of [scaleRows, scaleCols] over [rows,
 * cols] — one scale (tensor), one per row (channel), per row and group of columns (group), or
 * per block of rows × columns (block) — with an optional column → group map (g_idx, activation
 * order). compressed-tensors' dequantize infers the same from the scale's shape.
 */
export interface CtScaleGrid {
  readonly rows: number;
  readonly cols: number;
  readonly scaleRows: number;
  readonly scaleCols: number;
  readonly gIdx: Int32Array | null;
}

/**
 * `D(D(q - zp) · scale)` for every element: `values` are the codes as numbers (int codes, or
 * the float8 values), `scales` and `zeroPoints` the grid's ([scaleRows, scaleCols]).
 */
export function ctDequantize(
  values: ArrayLike<number>,
  scales: Float32Array,
  zeroPoints: Int8Array | null,
  grid: CtScaleGrid,
  dtype: FloatDType,
): Float32Array {
  const { rows, cols, scaleRows, scaleCols, gIdx } = grid;
  const round = roundIn(dtype);
  const rowsPer = rows / scaleRows;
  const colsPer = cols / scaleCols;
  const colGroup = new Int32Array(cols);
  for (let c = 0; c < cols; c++) colGroup[c] = gIdx ? gIdx[c]! : Math.floor(c / colsPer);
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const srow = Math.floor(r / rowsPer) * scaleCols;
    for (let c = 0; c < cols; c++) {
      const k = srow + colGroup[c]!;
      const zp = zeroPoints ? zeroPoints[k]! : 0;
      out[r * cols + c] = round(round(values[r * cols + c]! - zp) * scales[k]!);
    }
  }
  return out;
}
