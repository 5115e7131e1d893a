/**
 * The kernel module: the C kernels of native/ as JavaScript sees them, whether from the N-API
 * addon (native.ts) or the WebAssembly build (wasm.ts). Array arguments are views; counts come
 * from their lengths. Each call returns the kernel's status; the index of a rejected element is
 * read with lastBad().
 */
import { ggmlTypeByName } from '../core/interop/ggml.js';
import type { GptqSolveKernel } from '../core/interop/gptq-solve.js';
import type { QuadraticFormsKernel } from '../core/stats-error.js';
import type { LinearOutputsKernel } from '../core/linear-eval.js';

/** qd_codes */
export const CODES = {
  int8: 0,
  uint8: 1,
  int16: 2,
  int32: 3,
  int4: 4,
  uint4: 5,
  int2: 6,
  uint2: 7,
  float8_e4m3fn: 8,
  float8_e5m2: 9,
} as const;

/** qd_mode */
export const CHOOSE_MODE = {
  affine: 0,
  symmetric: 1,
  float_qparams: 2,
  token_symmetric: 3,
  token_affine: 4,
} as const;

/** qd_ggml_type in native/include/quantd.h: the ggml types the C kernels quantize. */
const GGML_KERNEL_IDS = {
  Q8_0: 0,
  Q4_0: 1,
  Q4_1: 2,
  Q5_0: 3,
  Q5_1: 4,
  Q4_K: 5,
  Q6_K: 6,
  Q5_K: 7,
  Q2_K: 8,
  Q3_K: 9,
  IQ4_NL: 10,
  IQ4_XS: 11,
} as const;
export type GgmlKernelType = keyof typeof GGML_KERNEL_IDS;

export interface GgmlKernelRow {
  /** The qd_ggml_type id ggmlQuantize takes. */
  readonly id: number;
  /** Floats per block (32, or 256 for the K-quants and IQ4_XS) and bytes per block. */
  readonly blockSize: number;
  readonly blockBytes: number;
}

function kernelRow(name: GgmlKernelType): GgmlKernelRow {
  const t = ggmlTypeByName(name)!;
  return { id: GGML_KERNEL_IDS[name], blockSize: t.blockSize, blockBytes: t.typeSize };
}

/** qd_bnb_type in native/include/quantd.h: bitsandbytes' code books the C kernels quantize to. */
export const BNB_KERNEL_TYPES = { nf4: 0, fp4: 1 } as const;

/** Every type with a C kernel. The encoders use one where its ggml.ts row names it (`kernel`). */
export const GGML_KERNEL_TYPES: Readonly<Record<GgmlKernelType, GgmlKernelRow>> = Object.fromEntries(
  (Object.keys(GGML_KERNEL_IDS) as GgmlKernelType[]).map((name) => [name, kernelRow(name)]),
) as Record<GgmlKernelType, GgmlKernelRow>;

/** native/src/measured.c's QD_MEASURE_CHUNK: the elements its measured kernels take at a time. */
export const MEASURED_CHUNK = 1 << 14;

/**
 * Units of a measured chunk (qd_measured_chunk_units): whole units of about MEASURED_CHUNK
 * elements, a multiple of 4 (so packed codes start on a byte), from 4 to 256.
 */
export function measuredChunkUnits(unitSize: number): number {
  return Math.min(256, Math.max(4, Math.floor(MEASURED_CHUNK / unitSize / 4) * 4));
}

/**
 * Units per call when chooseQuantize is called on consecutive slices of about `elements`
 * elements: whole measured chunks, so that statistics are summed in the same order as by one call
 * over all the units, whoever slices (the wasm wrapper).
 */
export function unitsPerCall(unitSize: number, elements: number): number {
  const measured = measuredChunkUnits(unitSize);
  return measured * Math.max(1, Math.floor(elements / (measured * unitSize)));
}

/** Conversion kinds of convert(). */
export const CONVERT = { f16ToF32: 0, bf16ToF32: 1, f32ToF16: 2, f32ToBf16: 3 } as const;

/** The kernels' qd_input of values stored as float32, or as the half kind CONVERT widens. */
export function inputKind(half: number | undefined): number {
  if (half === undefined) return 0;
  return half === CONVERT.f16ToF32 ? 1 : 2;
}

export interface LayoutArgs {
  readonly outer: number;
  readonly channels: number;
  readonly inner: number;
}

export interface QuantArgs {
  readonly codes: number;
  readonly qmin: number;
  readonly qmax: number;
  readonly addFirst: boolean;
  readonly rejectInf: boolean;
}

export interface ChooseArgs {
  readonly mode: number;
  readonly qmin: number;
  readonly qmax: number;
  readonly eps: number;
  readonly symmetricZeroPoint: number;
}

export interface KernelModule {
  /** "native" or "wasm". */
  readonly backend: 'native' | 'wasm';
  /** The instruction set in use: avx512, avx2, simd128 or scalar. */
  readonly isa: string;
  lastBad(): number;
  minmax(x: Float32Array, start: number, l: LayoutArgs, mins: Float32Array, maxs: Float32Array): number;
  quantize(
    x: Float32Array,
    start: number,
    l: LayoutArgs,
    scale: Float32Array,
    zeroPoint: Float32Array,
    q: QuantArgs,
    out: Uint8Array,
    /** When given, the codes' quality statistics are added to it, in the same pass (see quality). */
    stats?: Float64Array,
  ): number;
  dequantize(
    codes: Uint8Array,
    kind: number,
    start: number,
    count: number,
    l: LayoutArgs,
    scale: Float32Array,
    zeroPoint: Float32Array,
    out: Float32Array,
  ): number;
  fakeQuantize(
    x: Float32Array,
    start: number,
    l: LayoutArgs,
    scale: Float32Array,
    zeroPoint: Float32Array,
    qmin: number,
    qmax: number,
    floatZeroPoint: boolean,
    out: Float32Array,
    mask: Uint8Array,
  ): number;
  /**
   * Units of `unitSize` elements: x holds whole units, the first being unit `first`: float32
   * values, or with `half` (the CONVERT kind that widens them) float16 / bfloat16 bits, widened as
   * they are read.
   */
  chooseQuantize(
    x: Float32Array | Uint16Array,
    first: number,
    unitSize: number,
    c: ChooseArgs,
    q: QuantArgs,
    scale: Float32Array,
    zeroPoint: Float64Array,
    out: Uint8Array,
    /** When given, the codes' quality statistics are added to it, in the same pass (see quality). */
    stats?: Float64Array,
    half?: number,
  ): number;
  determine(
    mins: Float32Array,
    maxs: Float32Array,
    c: ChooseArgs,
    scale: Float32Array,
    zeroPoint: Float64Array,
  ): number;
  convert(kind: number, input: Uint16Array | Float32Array, out: Float32Array | Uint16Array): void;
  /** torch.histc's counting of x into `hist` (float32 counts, added to; its length is the bins). */
  histc(x: Float32Array, left: number, right: number, hist: Float32Array): number;
  /** Adds the error statistics of `codes` (of x) to stats: [Σerr², Σx², max|err|, clipped, count]. */
  quality(
    x: Float32Array,
    codes: Uint8Array,
    start: number,
    l: LayoutArgs,
    scale: Float32Array,
    zeroPoint: Float32Array,
    q: QuantArgs,
    stats: Float64Array,
  ): number;
  /**
   * x.length / blockSize ggml blocks of GGML_KERNEL_TYPES[·].id into out (blockBytes each),
   * ggml's reference rounding.
   */
  ggmlQuantize(type: number, x: Float32Array, out: Uint8Array): number;
  /**
   * With an importance matrix, as llama-quantize's quant_weights paths (native/src/ggml_weighted.c;
   * Q8_0 ignores the matrix): rows of `ne0` values (whole blocks), each against the column weights
   * qw[ne0], into out. An unknown type or a partial block: status 3, bad argument.
   */
  ggmlQuantizeWeighted(type: number, x: Float32Array, ne0: number, qw: Float32Array, out: Uint8Array): number;
  /**
   * bitsandbytes' 4-bit blockwise quantization (BNB_KERNEL_TYPES): x in blocks of `blocksize`
   * into ceil(n / 2) bytes of codes, high nibble first, and one float32 absmax per block.
   * NaN and ±Infinity: status 1 (not finite), lastBad() the first such index.
   */
  bnbQuantize(
    type: number,
    x: Float32Array,
    blocksize: number,
    packed: Uint8Array,
    absmax: Float32Array,
  ): number;
  /**
   * ONNX Runtime's MatMulNBits 4-bit quantizer: w [nCols, kLen] in blocks of `blockSize` along k
   * into B (low nibble first), the float32 scales as the scale type stores them (f16: through
   * float16) and, unless sym, the zero points. Status 1: a non-finite value (lastBad() its index);
   * 2: a scale whose reciprocal overflows (lastBad() its index, n · k_blocks + block).
   */
  nbitsQuantize(
    w: Float32Array,
    nCols: number,
    kLen: number,
    blockSize: number,
    sym: boolean,
    f16: boolean,
    b: Uint8Array,
    scales: Float32Array,
    zeroPoints: Uint8Array,
  ): number;
  /**
   * AutoAWQ's GEMM packing of round-to-nearest 4-bit groups of w [out, in] (float16 arithmetic):
   * qweight [in, out / 8], qzeros [in / groupSize, out / 8], float16 scales [in / groupSize, out].
   * Status 1: a non-finite value (lastBad() its index); 2: a group whose scale cannot re-derive its
   * codes (lastBad() r · groups + g).
   */
  awqQuantize(
    w: Float32Array,
    out: number,
    inF: number,
    groupSize: number,
    qweight: Int32Array,
    qzeros: Int32Array,
    scales: Uint16Array,
  ): number;
  /**
   * AutoGPTQ's v1 packing of round-to-nearest groups of w [out, in], Q stored as `store`
   * (GPTQ_STORE): qweight [in·bits/32, out], qzeros [groups, out·bits/32], float16 scales
   * [groups, out]; counts[0] the groups whose zero point is 0, counts[1] the clamped codes.
   * Status 1: a non-finite value (lastBad() its index); 2: a group whose float16 scale is 0 or
   * infinite (lastBad() r · groups + g).
   */
  gptqQuantize(
    w: Float32Array,
    out: number,
    inF: number,
    bits: number,
    groupSize: number,
    sym: boolean,
    store: number,
    qweight: Int32Array,
    qzeros: Int32Array,
    scales: Uint16Array,
    counts: Float64Array,
  ): number;
  /**
   * The GPTQ algorithm's two costly steps (native/src/gptq_solve.c), equal to the bit to
   * gptq-solve.ts's own; absent where the TypeScript runs them (WebAssembly).
   */
  readonly gptqSolve?: GptqSolveKernel;
  /**
   * A calibration batch x [tokens, k] added in place to a layer's Σ xᵀx (k×k) and Σ |x|
   * (qd_linear_stats_add in native/src/linear_stats.c, a blocked syrk, equal to the bit to
   * core/linear-stats.ts's addLinearStats). Status 1:
   * a NaN or ±Infinity (lastBad() its index), nothing changed. Absent in WebAssembly.
   */
  linearStatsAdd?(hessian: Float64Array, absSum: Float64Array, k: number, x: Float32Array): number;
  /**
   * δ H δᵀ of each row of d [rows, n] into out (qd_quadratic_forms, equal to the bit to
   * stats-error.ts's quadraticForm): AWQ's searches and the calibrated output error. Absent in
   * WebAssembly.
   */
  readonly quadraticForms?: QuadraticFormsKernel;
  /**
   * A linear layer's output X·Wᵀ + b in float64 (qd_linear_outputs, equal to the bit to
   * linear-eval.ts's linearOutput): /v1/linear-error's products. Absent in WebAssembly.
   */
  readonly linearOutputs?: LinearOutputsKernel;
}

/** The layer dtype GPTQ rounds Q to before re-deriving its code (gptqQuantize's `store`). */
export const GPTQ_STORE = { float32: 0, float16: 1, bfloat16: 2 } as const;
