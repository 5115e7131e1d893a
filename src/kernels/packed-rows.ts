/**
 * AutoGPTQ's and AutoAWQ's packing of a weight by chunks of whole rows, with the C kernels: each
 * chunk is widened from float16 / bfloat16 by the kernels' convert into one scratch of the
 * thread, packed into chunk-sized outputs and copied into place. No float32 copy of the tensor is
 * made: on a bfloat16 checkpoint that copy was twice the weight, in fresh pages, held by each
 * worker (the GPTQ and AWQ runs of `npm run bench:model` went a third over their memory bound).
 *
 * Rows are packed independently of each other, and a chunk starts on a whole word of zero points
 * (32 rows hold whole GPTQ words at 2, 4 and 8 bits; 8 rows an AWQ word), so the bytes are those of
 * one whole-tensor call, and GPTQ's counts add up.
 */
import type { FloatDType } from '../core/dtypes.js';
import { awqShapes, type AwqPacked, type AwqParams } from '../core/interop/awq.js';
import { gptqGroupIndex, gptqShapes, type GptqPacked, type GptqParams } from '../core/interop/gptq.js';
import { typedView } from '../core/tensor.js';
import { QuantdError } from '../errors/index.js';
import { CONVERT, GPTQ_STORE, type KernelModule } from './module.js';

/** About this many elements per chunk (4 MiB of float32); chunks are multiples of 128 rows. */
const CHUNK_ELEMENTS = 1 << 20;
const ROW_ALIGN = 128;

let scratch = new Float32Array(0);

/** Rows [first, first + count) of a [rows, inF] weight as float32: a view, or converted into the scratch. */
function rowsOf(
  module: KernelModule,
  data: Uint8Array,
  dtype: FloatDType,
  inF: number,
): (first: number, count: number) => Float32Array {
  if (dtype === 'float32') {
    const all = typedView(Float32Array, data);
    return (first, count) => all.subarray(first * inF, (first + count) * inF);
  }
  const all = typedView(Uint16Array, data);
  const kind = dtype === 'float16' ? CONVERT.f16ToF32 : CONVERT.bf16ToF32;
  return (first, count) => {
    if (scratch.length < count * inF) scratch = new Float32Array(count * inF);
    const out = scratch.subarray(0, count * inF);
    module.convert(kind, all.subarray(first * inF, (first + count) * inF), out);
    return out;
  };
}

/** Rows per chunk for rows of inF elements: a multiple of 128, at most `rows`. */
function chunkRows(rows: number, inF: number): number {
  return Math.min(rows, Math.max(1, Math.floor(CHUNK_ELEMENTS / inF / ROW_ALIGN)) * ROW_ALIGN);
}

/** src, `lines` lines of `width` elements, into dst's lines of `stride` elements at column `at`. */
function placeColumns<T extends Int32Array | Uint16Array>(
  dst: T,
  stride: number,
  src: T,
  width: number,
  lines: number,
  at: number,
): void {
  for (let i = 0; i < lines; i++) dst.set(src.subarray(i * width, (i + 1) * width), i * stride + at);
}

function kernelStatus(layout: string, status: number): boolean {
  if (status === 1 || status === 2) return false;
  if (status !== 0)
    throw new QuantdError('INTERNAL', { detail: `${layout} kernel returned status ${status}` });
  return true;
}

/**
 * gptqQuantize's result by chunks of rows, `data` the weight's bytes in `dtype`; null when the
 * kernel refuses a chunk (the caller's whole-tensor reference then gives the catalogued error).
 */
export function gptqPackedByRows(
  module: KernelModule,
  tensor: string,
  data: Uint8Array,
  dtype: FloatDType,
  shape: readonly number[],
  params: GptqParams,
): GptqPacked | null {
  const s = gptqShapes(tensor, shape, params);
  const [out, inF] = shape as [number, number];
  const { bits, sym } = params;
  const words = s.qweight[0];
  const groups = s.scales[0];
  const qweight = new Int32Array(words * out);
  const qzeros = new Int32Array(groups * s.qzeros[1]);
  const scales = new Uint16Array(groups * out);
  const step = chunkRows(out, inF);
  const part = {
    qweight: new Int32Array(words * step),
    qzeros: new Int32Array((groups * step * bits) / 32),
    scales: new Uint16Array(groups * step),
  };
  const rows = rowsOf(module, data, dtype, inF);
  const counts = new Float64Array(2);
  let zeroPointZero = 0;
  let clampedCodes = 0;
  for (let first = 0; first < out; first += step) {
    const n = Math.min(step, out - first);
    const status = module.gptqQuantize(
      rows(first, n),
      n,
      inF,
      bits,
      s.groupSize,
      sym,
      GPTQ_STORE[dtype],
      part.qweight,
      part.qzeros,
      part.scales,
      counts,
    );
    if (!kernelStatus('GPTQ', status)) return null;
    placeColumns(qweight, out, part.qweight, n, words, first);
    placeColumns(qzeros, s.qzeros[1], part.qzeros, (n * bits) / 32, groups, (first * bits) / 32);
    placeColumns(scales, out, part.scales, n, groups, first);
    zeroPointZero += counts[0]!;
    clampedCodes += counts[1]!;
  }
  return { qweight, qzeros, scales, gIdx: gptqGroupIndex(inF, s.groupSize), zeroPointZero, clampedCodes };
}

/** awqQuantize's result by chunks of rows, as gptqPackedByRows. */
export function awqPackedByRows(
  module: KernelModule,
  tensor: string,
  data: Uint8Array,
  dtype: FloatDType,
  shape: readonly number[],
  params: AwqParams,
): AwqPacked | null {
  const s = awqShapes(tensor, shape, params);
  const [out, inF] = shape as [number, number];
  const groups = s.groups;
  const qweight = new Int32Array(inF * (out / 8));
  const qzeros = new Int32Array(groups * (out / 8));
  const scales = new Uint16Array(groups * out);
  const step = chunkRows(out, inF);
  const part = {
    qweight: new Int32Array(inF * (step / 8)),
    qzeros: new Int32Array(groups * (step / 8)),
    scales: new Uint16Array(groups * step),
  };
  const rows = rowsOf(module, data, dtype, inF);
  for (let first = 0; first < out; first += step) {
    const n = Math.min(step, out - first);
    const status = module.awqQuantize(
      rows(first, n),
      n,
      inF,
      s.groupSize,
      part.qweight,
      part.qzeros,
      part.scales,
    );
    if (!kernelStatus('AWQ', status)) return null;
    placeColumns(qweight, out / 8, part.qweight, n / 8, inF, first / 8);
    placeColumns(qzeros, out / 8, part.qzeros, n / 8, groups, first / 8);
    placeColumns(scales, out, part.scales, n, groups, first);
  }
  return { qweight, qzeros, scales };
}
