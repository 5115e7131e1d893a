/**
 * What the GGUF layout does to one float tensor besides block quantization: the q/k row
 * permutation llama.cpp expects, and the checks ggml applies to the bytes it loads. Pure
 * numerics, run by the layout's encoder (src/kernels/encoders.ts) in a worker thread.
 */
import { QuantdError } from '../../errors/index.js';
import { ggmlTypeByName, type GgmlWriteType } from './ggml.js';

/**
 * convert_hf_to_gguf.py's LlamaModel.permute: the rows of each head, (2, half) interleaved into
 * (half, 2), i.e. new row h·2r + 2i + s = old row h·2r + s·r + i (r = rows / heads / 2).
 */
export function permuteHeads(x: Float32Array, rows: number, heads: number, tensor: string): Float32Array {
  checkHeadRows(rows, heads, tensor);
  const cols = x.length / rows;
  const r = rows / heads / 2;
  const out = new Float32Array(x.length);
  for (let h = 0; h < heads; h++) {
    for (let s = 0; s < 2; s++) {
      for (let i = 0; i < r; i++) {
        const from = (h * 2 * r + s * r + i) * cols;
        const to = (h * 2 * r + 2 * i + s) * cols;
        out.set(x.subarray(from, from + cols), to);
      }
    }
  }
  return out;
}

function checkHeadRows(rows: number, heads: number, tensor: string): void {
  if (rows % (2 * heads) !== 0) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: `[${rows}, ...]`,
      detail: `its ${rows} rows cannot be split into ${heads} heads of an even size (check heads / kv_heads)`,
    });
  }
}

/** permuteHeads one row at a time: the old row that new row `row` holds. */
export function headRowSource(rows: number, heads: number, tensor: string): (row: number) => number {
  checkHeadRows(rows, heads, tensor);
  const r = rows / heads / 2;
  return (row) => {
    const h = Math.floor(row / (2 * r));
    const within = row - h * 2 * r;
    return h * 2 * r + (within % 2) * r + Math.floor(within / 2);
  };
}

/** The fp16 fields of a block (d, and m / dmin) must be finite: ggml_validate_row_data rejects others. */
const HALF_FIELDS: Readonly<Record<GgmlWriteType, readonly number[]>> = {
  F32: [],
  F16: [0],
  Q8_0: [0],
  Q4_0: [0],
  Q4_1: [0, 2],
  Q5_0: [0],
  Q5_1: [0, 2],
  Q2_K: [80, 82],
  Q3_K: [108],
  Q4_K: [0, 2],
  Q5_K: [0, 2],
  Q6_K: [208],
  IQ4_NL: [0],
  IQ4_XS: [0],
};

/*
 * What ggml refuses to load, quantd refuses to write: INPUT_NOT_FINITE for a non-finite input
 * (checkGgmlFinite), FEATURE_UNSUPPORTED for a block whose float16 fields overflowed
 * (checkGgmlHalfFields).
 */

/** INPUT_NOT_FINITE naming the first non-finite value of `x`. */
export function checkGgmlFinite(x: Float32Array, type: GgmlWriteType, tensor: string, offset = 0): void {
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]!)) {
      throw new QuantdError('INPUT_NOT_FINITE', {
        tensor,
        value: x[i],
        index: offset + i,
        op: `GGUF ${type}`,
      });
    }
  }
}

/** FEATURE_UNSUPPORTED for the first block of `bytes` whose float16 fields overflowed. */
export function checkGgmlHalfFields(
  type: GgmlWriteType,
  bytes: Uint8Array,
  tensor: string,
  offset = 0,
): void {
  const t = ggmlTypeByName(type)!;
  // the first overflowed block over all fields: one strided scan per field (a block-by-block
  // loop over the field list cost a third of a Q8_0 encode)
  let first = bytes.length;
  for (const field of HALF_FIELDS[type]) {
    for (let at = field + 1; at < first; at += t.typeSize) {
      if ((bytes[at]! & 0x7c) === 0x7c) {
        first = at - field - 1;
        break;
      }
    }
  }
  if (first < bytes.length) {
    const element = offset + (first / t.typeSize) * t.blockSize;
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `tensor ${tensor}: the ${type} block at element ${element} needs a value or scale beyond float16's range (65504)`,
    });
  }
}
