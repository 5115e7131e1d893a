/**
 * A weight's GGUF blocks made a chunk of whole rows at a time, with the C kernel of its type:
 * each chunk is widened from float16 / bfloat16 by the kernels' convert into one cache-sized
 * scratch (q/k rows gathered in llama.cpp's head order on the way), checked finite by their
 * min/max scan, and encoded straight into the output. No float32 copy of the tensor is made: on a
 * bfloat16 checkpoint that copy (fresh pages, a fault per 4 KiB) cost as much as the Q4_K kernel.
 *
 * Blocks never span rows, so encoding by chunks of rows gives the bytes of one whole-tensor call;
 * the quality statistics add the chunks in element order, so they are the same numbers too.
 */
import type { FloatDType } from '../core/dtypes.js';
import { ggmlDecode, ggmlTypeByName, type GgmlWriteType } from '../core/interop/ggml.js';
import { checkGgmlFinite, checkGgmlHalfFields, headRowSource } from '../core/interop/ggml-tensor.js';
import { addDecodedErrors, emptyQuality } from '../core/quality.js';
import type { QualityStats } from '../core/quality-stats.js';
import { histogramOf, sampleIndicesIn, type ErrorHistogram } from '../core/error-histogram.js';
import { typedView } from '../core/tensor.js';
import { QuantdError } from '../errors/index.js';
import { CONVERT, type KernelModule } from './module.js';

/** Elements per chunk: 256 KiB of float32 stay in L2 from convert to the encoder. */
const CHUNK_ELEMENTS = 64 * 1024;

export interface GgmlRowsCall {
  readonly tensor: string;
  readonly dtype: FloatDType;
  readonly type: GgmlWriteType;
  readonly ne0: number;
  readonly permute?: { readonly rows: number; readonly heads: number };
  readonly quality?: boolean;
  /** An importance matrix's column weights (one per value of a row), for the weighted kernel. */
  readonly imatrix?: Float32Array;
  /** Only these rows (in output order): a part of a tensor split across the pool's threads. */
  readonly part?: RowRange;
  /**
   * With part: the data and the output hold the part's rows only (a slice of the tensor read on
   * its own, of whole heads when permuted), not the whole tensor's; the tensor has `rows` rows.
   */
  readonly window?: { readonly rows: number };
}

export interface RowRange {
  readonly first: number;
  readonly count: number;
}

export interface GgmlRowsResult {
  readonly quality?: QualityStats;
  /** With quality, the whole tensor's: the error's distribution on a sample of it. */
  readonly histogram?: ErrorHistogram;
  /** With quality, a part's: the errors of the tensor's sample elements that fall in the part. */
  readonly sampleErrors?: Float64Array;
}

/**
 * Whether workers with kernels encode `call` here: a type with a C kernel (with or without an
 * importance matrix). The encoder and the layouts' scheduler both ask.
 */
export function encodedByRows(call: { readonly type: GgmlWriteType }): boolean {
  return ggmlTypeByName(call.type)?.kernel !== undefined;
}

/**
 * INPUT_NOT_FINITE for values holding NaN or ±Infinity (llama.cpp refuses to load them; `offset`:
 * the index of x[0] in the tensor). The kernels' min/max scan stops at the first non-finite value;
 * the TypeScript scan, run only then (or without kernels), names it.
 */
export function checkFinite(
  module: KernelModule | null,
  x: Float32Array,
  type: GgmlWriteType,
  tensor: string,
  offset = 0,
): void {
  const whole = { outer: 1, channels: 1, inner: x.length };
  const lo = Float32Array.of(Infinity);
  const hi = Float32Array.of(-Infinity);
  if (x.length === 0) return;
  if (module === null) return checkGgmlFinite(x, type, tensor, offset);
  if (module.minmax(x, 0, whole, lo, hi) === 0) return;
  checkGgmlFinite(x, type, tensor, offset);
  throw new QuantdError('INTERNAL', { detail: `the min/max kernel refused finite values of ${tensor}` });
}

/** Per worker thread: the chunk's float32 values and, with quality, their decoding. */
let scratch = new Float32Array(CHUNK_ELEMENTS);
let decoded = new Float32Array(CHUNK_ELEMENTS);

/** Encodes `data` (call.dtype values, rows of call.ne0) as call.type into `into`. */
export function ggmlEncodeRows(
  module: KernelModule,
  call: GgmlRowsCall,
  data: Uint8Array,
  into: Uint8Array,
): GgmlRowsResult {
  const t = ggmlTypeByName(call.type)!;
  const { ne0 } = call;
  const float32 = call.dtype === 'float32';
  const held = data.byteLength / (float32 ? 4 : 2);
  const source = float32 ? typedView(Float32Array, data) : typedView(Uint16Array, data);
  const kind = call.dtype === 'float16' ? CONVERT.f16ToF32 : CONVERT.bf16ToF32;
  const sourceRow = call.permute ? headRowSource(call.permute.rows, call.permute.heads, call.tensor) : null;
  const rowsPerChunk = Math.max(1, Math.floor(CHUNK_ELEMENTS / ne0));
  if (scratch.length < rowsPerChunk * ne0) scratch = new Float32Array(rowsPerChunk * ne0);
  const rowBytes = (ne0 / t.blockSize) * t.typeSize;
  const first = call.part?.first ?? 0;
  const end = call.part ? first + call.part.count : held / ne0;
  // the tensor's elements, and the row of it that data[0] and into[0] hold (a window's first)
  const n = call.window ? call.window.rows * ne0 : held;
  const base = call.window ? first : 0;
  if (call.window && (!call.part || held !== call.part.count * ne0)) {
    throw new QuantdError('INTERNAL', { detail: `a window of ${call.tensor} that is not its part's rows` });
  }
  const stats = call.quality === true ? emptyQuality() : null;
  const samples = stats ? sampleIndicesIn(n, first * ne0, end * ne0) : [];
  const errors = new Float64Array(samples.length);
  let sampled = 0;
  let overflow: unknown = null;

  for (let row = first; row < end; row += rowsPerChunk) {
    const rows = Math.min(rowsPerChunk, end - row);
    const count = rows * ne0;
    const at = row * ne0;
    let x: Float32Array;
    if (sourceRow === null && float32) {
      x = (source as Float32Array).subarray(at - base * ne0, at - base * ne0 + count);
    } else {
      x = scratch.subarray(0, count);
      // consecutive rows when not permuted; one row at a time when they are gathered
      const runs = sourceRow === null ? [[row, 0, rows]] : rowRuns(sourceRow, row, rows);
      for (const [from, to, length] of runs) {
        if (from! < base || from! + length! > base + held / ne0) {
          throw new QuantdError('INTERNAL', { detail: `a window of ${call.tensor} that splits a head` });
        }
        widen(module, kind, source, (from! - base) * ne0, length! * ne0, x, to! * ne0);
      }
    }
    checkFinite(module, x, call.type, call.tensor, at);
    const out = into.subarray((row - base) * rowBytes, (row - base + rows) * rowBytes);
    const status =
      call.imatrix === undefined
        ? module.ggmlQuantize(t.kernel!, x, out)
        : module.ggmlQuantizeWeighted(t.kernel!, x, ne0, call.imatrix, out);
    if (status !== 0)
      throw new QuantdError('INTERNAL', { detail: `ggml ${call.type} kernel returned status ${status}` });
    // as one whole-tensor call reports: a non-finite value anywhere before an overflowed block
    if (overflow === null) overflow = halfFieldsError(call.type, out, call.tensor, at);
    if (stats) {
      if (decoded.length < count) decoded = new Float32Array(scratch.length);
      const y = ggmlDecode(call.type, out, count, decoded.subarray(0, count));
      addDecodedErrors(stats, x, y);
      for (; sampled < samples.length && samples[sampled]! < at + count; sampled++) {
        const i = samples[sampled]! - at;
        errors[sampled] = y[i]! - x[i]!;
      }
    }
  }
  if (overflow !== null) throw overflow;
  if (stats === null) return {};
  return call.part
    ? { quality: stats, sampleErrors: errors }
    : { quality: stats, histogram: histogramOf(errors) };
}

function halfFieldsError(type: GgmlWriteType, out: Uint8Array, tensor: string, at: number): unknown {
  try {
    checkGgmlHalfFields(type, out, tensor, at);
    return null;
  } catch (err) {
    return err;
  }
}

/** [source row, chunk row, rows] runs of consecutive source rows for chunk rows [row, row + rows). */
function rowRuns(sourceRow: (row: number) => number, row: number, rows: number): number[][] {
  const runs: number[][] = [];
  for (let i = 0; i < rows; i++) {
    const from = sourceRow(row + i);
    const last = runs[runs.length - 1];
    if (last && last[0]! + last[2]! === from) last[2]!++;
    else runs.push([from, i, 1]);
  }
  return runs;
}

/** `count` source values from `at` as float32 into `x` from `to`. */
function widen(
  module: KernelModule,
  kind: number,
  source: Float32Array | Uint16Array,
  at: number,
  count: number,
  x: Float32Array,
  to: number,
): void {
  const target = x.subarray(to, to + count);
  if (source instanceof Float32Array) target.set(source.subarray(at, at + count));
  else module.convert(kind, source.subarray(at, at + count), target);
}
