/**
 * Tensor encoders: the per-tensor work of the interop layouts (GGUF, GPTQ, AWQ, bitsandbytes,
 * ONNX MatMulNBits, compressed-tensors, and reading each back), as plain data a worker thread can
 * run. A layout describes each of its jobs with an `EncoderCall` (structured-clone safe); the
 * executor sends it with the job's input bytes to the pool, where `runEncodeTask` runs the C
 * kernel when the type has one and the TypeScript reference otherwise, and writes the results
 * into the output buffers the executor sized from the layout's plan.
 */
import { floatDTypeOfSt, type FloatDType, type StDType } from '../core/dtypes.js';
import {
  awqDequantize,
  awqQuantize,
  awqShapes,
  type AwqPacked,
  type AwqParams,
} from '../core/interop/awq.js';
import {
  bnbDequantize,
  bnbNestedAbsmax,
  bnbQuantStateJson,
  bnbQuantize,
  codeTable,
  type BnbPacked,
  type BnbQuantType,
} from '../core/interop/bnb.js';
import {
  ctDequantize,
  ctQuantize,
  type CtFormat,
  type CtWeightArgs,
} from '../core/interop/compressed-tensors.js';
import {
  packColumnsToInt32,
  packToInt32,
  unpackColumnsFromInt32,
  unpackFromInt32,
} from '../core/interop/ct-pack.js';
import { fp8DecodeTable } from '../core/fp8.js';
import { ggmlDecode, ggmlEncode, ggmlTypeByName, type GgmlWriteType } from '../core/interop/ggml.js';
import { ggmlEncodeWeighted } from '../core/interop/ggml-imatrix.js';
import { checkGgmlHalfFields, permuteHeads } from '../core/interop/ggml-tensor.js';
import {
  gptqDequantize,
  gptqGroupIndex,
  gptqPackSolution,
  gptqQuantize,
  gptqShapes,
  type GptqBits,
  type GptqPacked,
  type GptqParams,
} from '../core/interop/gptq.js';
import {
  matMulNBitsDequantize,
  matMulNBitsQuantize,
  matMulNBitsShapes,
  type MatMulNBitsPacked,
  type MatMulNBitsParams,
  type MatMulNBitsScaleType,
  type MatMulNBitsShapes,
} from '../core/interop/onnx.js';
import { GPTQ_SOLVE_DEFAULTS, gptqSolve, type GptqSolveKernel } from '../core/interop/gptq-solve.js';
import type { LinearStats } from '../core/linear-stats.js';
import { statsOutputError, type QuadraticFormsKernel, type StatsOutputError } from '../core/stats-error.js';
import { float32FromFloat16Bits } from '../core/float16.js';
import {
  awqCalibratedWeight,
  awqFoldResult,
  awqScalesResult,
  checkStats,
  type AwqCalibration,
  type AwqFoldCall,
  type AwqScalesCall,
} from './awq-calibrated.js';
import { bytesOf, fromFloat32, toFloat32, typedView } from '../core/tensor.js';
import { QuantdError, throwIfAborted } from '../errors/index.js';
import { decodedQuality } from '../core/quality.js';
import { histogramOf, sampledDecodedErrors, type ErrorHistogram } from '../core/error-histogram.js';
import type { QualityStats } from '../core/quality-stats.js';
import { checkFinite, encodedByRows, ggmlEncodeRows, type RowRange } from './ggml-rows.js';
import { BNB_KERNEL_TYPES, CONVERT, GPTQ_STORE, type KernelModule } from './module.js';
import { awqPackedByRows, gptqPackedByRows } from './packed-rows.js';

/** What the GPTQ algorithm needs beside the weight (gptq-solve.ts). */
export interface GptqCalibration {
  /** the activation the statistics are of, for messages */
  readonly name: string;
  readonly stats: LinearStats;
  readonly damp: number;
  readonly actOrder: boolean;
}

/** One tensor's encoding: which encoder, and everything it needs besides the input bytes. */
export type EncoderCall =
  /** A float tensor cast to another float dtype (biases of quantized layers to float16). */
  | { readonly kind: 'cast'; readonly from: FloatDType; readonly to: FloatDType }
  /** A float tensor as a ggml type, rows of `ne0`; q/k rows permuted per head first when given. */
  | {
      readonly kind: 'ggml';
      readonly tensor: string;
      readonly dtype: FloatDType;
      readonly type: GgmlWriteType;
      readonly ne0: number;
      readonly permute?: { readonly rows: number; readonly heads: number };
      /** An importance matrix's column weights (ne0 of them): llama.cpp's quant_weights path. */
      readonly imatrix?: Float32Array;
      /** Measure dequantize(quantize(x)) against x for the layout's report. */
      readonly quality?: boolean;
      /** Only these rows (kernel types without an imatrix): a part of a tensor split across threads. */
      readonly part?: RowRange;
      /** With part: the input and output hold the part's rows only (src/kernels/ggml-rows.ts). */
      readonly window?: { readonly rows: number };
    }
  | { readonly kind: 'ggml-decode'; readonly type: string; readonly numel: number }
  | {
      readonly kind: 'gptq';
      readonly tensor: string;
      readonly shape: readonly number[];
      readonly dtype: FloatDType;
      readonly params: GptqParams;
      /** The GPTQ algorithm on the layer's input statistics; none: round-to-nearest. */
      readonly calibration?: GptqCalibration;
    }
  /** Inputs: qweight, qzeros, scales[, g_idx]. */
  | {
      readonly kind: 'gptq-decode';
      readonly source: string;
      readonly module: string;
      readonly scales: StDType;
      readonly out: number;
      readonly inF: number;
      readonly groups: number;
      readonly bits: GptqBits;
    }
  | {
      readonly kind: 'awq';
      readonly tensor: string;
      readonly shape: readonly number[];
      readonly dtype: FloatDType;
      readonly params: AwqParams;
      /** The AWQ algorithm's scaling and clipping before packing; none: round-to-nearest. */
      readonly calibration?: AwqCalibration;
    }
  | AwqScalesCall
  | AwqFoldCall
  /** Inputs: qweight, qzeros, scales. */
  | {
      readonly kind: 'awq-decode';
      readonly scales: StDType;
      readonly out: number;
      readonly inF: number;
      readonly groups: number;
    }
  /** Outputs: packed codes, absmax, the code book, the quant state's JSON bytes. */
  | {
      readonly kind: 'bnb';
      readonly tensor: string;
      readonly shape: readonly number[];
      readonly dtype: FloatDType;
      readonly type: BnbQuantType;
      readonly blocksize: number;
    }
  /** Inputs: packed, absmax, quant_map[, nested_absmax, nested_quant_map]. */
  | {
      readonly kind: 'bnb-decode';
      readonly blocksize: number;
      readonly n: number;
      readonly nested?: { readonly blocksize: number; readonly offset: number };
    }
  /** Outputs: B, scales (in scaleType)[, zero points]. */
  | {
      readonly kind: 'onnx';
      readonly tensor: string;
      readonly shape: readonly number[];
      readonly dtype: FloatDType;
      readonly blockSize: number;
      readonly sym: boolean;
      readonly scaleType: MatMulNBitsScaleType;
    }
  /** Inputs: B, scales[, zero points]. */
  | { readonly kind: 'onnx-decode'; readonly scales: FloatDType; readonly shapes: MatMulNBitsShapes }
  /**
   * compressed-tensors. Outputs, pack-quantized: weight_packed, weight_scale, weight_shape
   * [, weight_zero_point]; int- / float-quantized: weight, weight_scale [, weight_zero_point].
   */
  | {
      readonly kind: 'ct';
      readonly tensor: string;
      readonly shape: readonly number[];
      readonly dtype: FloatDType;
      readonly weights: CtWeightArgs;
      readonly format: CtFormat;
    }
  /**
   * Inputs: the codes (weight_packed I32, or weight I8 / F8_E4M3), weight_scale
   * [, weight_zero_point][, weight_g_idx].
   */
  | CtDecodeCall;

/** How to read one compressed-tensors weight back (the layout checked the shapes). */
export interface CtDecodeCall {
  readonly kind: 'ct-decode';
  readonly source: string;
  readonly module: string;
  /** weight_packed (int32 words of `bits`-bit codes), or weight as int8 or float8_e4m3fn. */
  readonly codes: 'packed' | 'I8' | 'F8_E4M3';
  readonly bits: number;
  readonly rows: number;
  readonly cols: number;
  readonly scales: FloatDType;
  readonly scaleRows: number;
  readonly scaleCols: number;
  /** weight_zero_point: none (symmetric), packed along the rows (pack-quantized), or int8. */
  readonly zeroPoints: 'none' | 'packed' | 'I8';
  readonly gIdx: boolean;
}

/** A task for the pool: input bytes in, results written into `outputs` (sized by the plan). */
export interface EncodeTask {
  readonly op: 'encode';
  readonly call: EncoderCall;
  readonly inputs: readonly Uint8Array[];
  readonly outputs: readonly Uint8Array[];
}

export interface EncodeReply {
  /** Remarks for the layout's report (e.g. GPTQ groups stored with the v2-to-v1 borrow). */
  readonly notes: readonly string[];
  /** How far the decoded output is from the input, when the call asked (`quality`). */
  readonly quality?: QualityStats;
  /** With quality: the error's distribution on a sample of the tensor. */
  readonly histogram?: ErrorHistogram;
  /** With quality on a part of a tensor: its share of the sample's errors, for the caller to bin. */
  readonly sampleErrors?: Float64Array;
  /** With calibration: the layer's output error on the calibration tokens, from their statistics. */
  readonly outputError?: StatsOutputError;
}

/** Where a layout's encode tasks run: the worker pool, or inline (the CLI without kernels, tests). */
export interface Encoding {
  /** Tasks that usefully run at once (the pool's threads). */
  readonly parallelism: number;
  /** Whether task buffers must be SharedArrayBuffer views (the tasks run in other threads). */
  readonly shared: boolean;
  /** Whether tasks run with C kernels (a GGUF tensor may then be split into parts by rows). */
  readonly kernels: boolean;
  encode(task: EncodeTask, signal?: AbortSignal): Promise<EncodeReply>;
}

/** Runs tasks on the calling thread with `module`'s kernels (null: the TypeScript reference). */
export function inlineEncoding(module: KernelModule | null): Encoding {
  return {
    parallelism: 1,
    shared: false,
    kernels: module !== null,
    encode: async (task, signal) => {
      throwIfAborted(signal);
      return runEncodeTask(module, task);
    },
  };
}

/** The TypeScript reference on the calling thread: the default of direct API calls. */
export const referenceEncoding: Encoding = inlineEncoding(null);

type Results = {
  readonly outputs: readonly Uint8Array[];
  readonly notes?: readonly string[];
  readonly quality?: QualityStats;
  readonly histogram?: ErrorHistogram;
  readonly sampleErrors?: Float64Array;
  readonly outputError?: StatsOutputError;
};

/**
 * float32 values of a weight: float16 / bfloat16 widened by the kernels' convert when loaded
 * (exact either way; the TypeScript loop took as long as the Q4_K kernel on a bf16 checkpoint).
 */
function floatsOf(dtype: FloatDType, data: Uint8Array, module: KernelModule | null = null): Float32Array {
  if (module === null || dtype === 'float32') return toFloat32(data, dtype);
  const out = new Float32Array(data.byteLength / 2);
  module.convert(
    dtype === 'float16' ? CONVERT.f16ToF32 : CONVERT.bf16ToF32,
    typedView(Uint16Array, data),
    out,
  );
  return out;
}

function floatsOfSt(dtype: StDType, data: Uint8Array): Float32Array {
  return toFloat32(data, floatDTypeOfSt(dtype)!);
}

/** Through the C kernel of the type, when one is loaded (byte-identical: test/interop/gguf-kernels). */
function ggmlBytes(
  module: KernelModule | null,
  type: GgmlWriteType,
  x: Float32Array,
  ne0: number,
): Uint8Array {
  const t = ggmlTypeByName(type)!;
  if (module === null || t.kernel === undefined) return ggmlEncode(type, x, ne0);
  const out = new Uint8Array((x.length / t.blockSize) * t.typeSize);
  const status = module.ggmlQuantize(t.kernel, x, out);
  if (status !== 0)
    throw new QuantdError('INTERNAL', { detail: `ggml ${type} kernel returned status ${status}` });
  return out;
}

/**
 * bnbQuantize's result from the C kernel when there is one; a tensor the kernel refuses (a
 * non-finite value) goes to the TypeScript reference, which refuses it with the catalogued error.
 */
function bnbPacked(
  module: KernelModule | null,
  tensor: string,
  x: Float32Array,
  type: BnbQuantType,
  blocksize: number,
): BnbPacked {
  if (module === null) return bnbQuantize(tensor, x, type, blocksize);
  const packed = new Uint8Array(Math.ceil(x.length / 2));
  const absmax = new Float32Array(Math.ceil(x.length / blocksize));
  const status = module.bnbQuantize(BNB_KERNEL_TYPES[type], x, blocksize, packed, absmax);
  if (status === 1) return bnbQuantize(tensor, x, type, blocksize);
  if (status !== 0)
    throw new QuantdError('INTERNAL', { detail: `bnb ${type} kernel returned status ${status}` });
  return { packed, absmax };
}

/**
 * matMulNBitsQuantize's result from the C kernel when there is one. A weight the kernel refuses
 * (a non-finite value, a scale whose reciprocal overflows) goes to the TypeScript reference,
 * which refuses it with the catalogued error naming the value, row and block.
 */
function matMulNBitsPacked(
  module: KernelModule | null,
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  params: MatMulNBitsParams,
): MatMulNBitsPacked {
  if (module === null) return matMulNBitsQuantize(tensor, w, shape, params);
  const s = matMulNBitsShapes(tensor, shape, params.blockSize);
  const b = new Uint8Array(s.b[0] * s.b[1] * s.b[2]);
  const scales = new Float32Array(s.scales);
  const zeroPoints = new Uint8Array(params.sym ? 0 : s.zeroPoints);
  const f16 = params.scaleType === 'float16';
  const status = module.nbitsQuantize(w, s.N, s.K, s.blockSize, params.sym, f16, b, scales, zeroPoints);
  if (status === 1 || status === 2) return matMulNBitsQuantize(tensor, w, shape, params);
  if (status !== 0)
    throw new QuantdError('INTERNAL', { detail: `MatMulNBits kernel returned status ${status}` });
  return { b, scales, zeroPoints: params.sym ? null : zeroPoints };
}

/**
 * gptqQuantize's result from the C kernel when there is one; a weight the kernel refuses (a
 * non-finite value, a float16 scale of 0 or ∞) goes to the TypeScript reference, which refuses
 * it with the catalogued error naming the value or the row and group.
 */
function gptqPacked(
  module: KernelModule | null,
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  dtype: FloatDType,
  params: GptqParams,
): GptqPacked {
  if (module === null) return gptqQuantize(tensor, w, shape, dtype, params);
  const s = gptqShapes(tensor, shape, params);
  const [out, inF] = shape as [number, number];
  const qweight = new Int32Array(s.qweight[0] * s.qweight[1]);
  const qzeros = new Int32Array(s.qzeros[0] * s.qzeros[1]);
  const scales = new Uint16Array(s.scales[0] * s.scales[1]);
  const counts = new Float64Array(2);
  const { bits, sym } = params;
  const store = GPTQ_STORE[dtype];
  const status = module.gptqQuantize(
    w,
    out,
    inF,
    bits,
    s.groupSize,
    sym,
    store,
    qweight,
    qzeros,
    scales,
    counts,
  );
  if (status === 1 || status === 2) return gptqQuantize(tensor, w, shape, dtype, params);
  if (status !== 0) throw new QuantdError('INTERNAL', { detail: `GPTQ kernel returned status ${status}` });
  const gIdx = gptqGroupIndex(inF, s.groupSize);
  return { qweight, qzeros, scales, gIdx, zeroPointZero: counts[0]!, clampedCodes: counts[1]! };
}

/**
 * awqQuantize's result from the C kernel when there is one; a weight the kernel refuses goes to
 * the TypeScript reference, which refuses it with the catalogued error naming the row and group.
 */
function awqPacked(
  module: KernelModule | null,
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  params: AwqParams,
): AwqPacked {
  if (module === null) return awqQuantize(tensor, w, shape, params);
  const s = awqShapes(tensor, shape, params);
  const [out, inF] = shape as [number, number];
  const qweight = new Int32Array(s.qweight[0] * s.qweight[1]);
  const qzeros = new Int32Array(s.qzeros[0] * s.qzeros[1]);
  const scales = new Uint16Array(s.scales[0] * s.scales[1]);
  const status = module.awqQuantize(w, out, inF, s.groupSize, qweight, qzeros, scales);
  if (status === 1 || status === 2) return awqQuantize(tensor, w, shape, params);
  if (status !== 0) throw new QuantdError('INTERNAL', { detail: `AWQ kernel returned status ${status}` });
  return { qweight, qzeros, scales };
}

/**
 * The AWQ algorithm's packing of a weight (awq-calibrated.ts scales and clips it first), and its
 * output error on the calibration tokens as the checkpoint computes it: diag(rowDivide) · Q ·
 * diag(1/s) against the original weight, on the original inputs.
 */
function awqCalibrated(
  module: KernelModule | null,
  call: Extract<EncoderCall, { kind: 'awq' }>,
  w: Float32Array,
  c: AwqCalibration,
): Results {
  const s = awqShapes(call.tensor, call.shape, call.params);
  const [out, inF] = call.shape as [number, number];
  const forms = module?.quadraticForms;
  const planned = awqCalibratedWeight(call.tensor, w, call.shape, call.params, c, forms);
  const p = awqPacked(module, call.tensor, planned.weight, call.shape, call.params);
  const outputs = [bytesOf(p.qweight), bytesOf(p.qzeros), bytesOf(p.scales)];
  if (c.input === null) return { outputs, notes: planned.notes };
  const q = awqDequantize(
    p.qweight,
    p.qzeros,
    Float32Array.from(p.scales, float32FromFloat16Bits),
    out,
    inF,
    s.groups,
  );
  const effective = Float64Array.from(q, (v, k) => {
    const r = Math.floor(k / inF);
    return (v * (c.rowDivide ? c.rowDivide[r]! : 1)) / (c.scales ? c.scales[k % inF]! : 1);
  });
  return {
    outputs,
    notes: planned.notes,
    outputError: statsOutputError(c.input.stats, w, effective, out, forms),
  };
}

/**
 * The GPTQ algorithm's result for a weight, from its layer's input statistics, on the worker the
 * task runs on: gptq-solve.ts with the module's C kernels for its costly steps where it has them
 * (the same bits), the TypeScript otherwise.
 */
function gptqSolved(
  call: Extract<EncoderCall, { kind: 'gptq' }>,
  w: Float32Array,
  c: GptqCalibration,
  kernel: GptqSolveKernel | undefined,
  forms: QuadraticFormsKernel | undefined,
): Results {
  const { tensor, shape, params } = call;
  gptqShapes(tensor, shape, params);
  const [out, inF] = shape as [number, number];
  checkStats(c, tensor, inF);
  const solution = gptqSolve(
    tensor,
    w,
    out,
    inF,
    c.stats.hessian,
    {
      bits: params.bits,
      groupSize: params.groupSize,
      sym: params.sym,
      damp: c.damp,
      blockSize: GPTQ_SOLVE_DEFAULTS.blockSize,
      actOrder: c.actOrder,
    },
    kernel,
  );
  const p = gptqPackSolution(tensor, solution, out, inF, params.bits);
  const notes = [`GPTQ from ${c.stats.tokens} tokens of ${c.name}${c.actOrder ? ', act-order' : ''}`];
  const groups = p.scales.length / out;
  const effective = gptqDequantize(
    p.qweight,
    p.qzeros,
    Float32Array.from(p.scales, float32FromFloat16Bits),
    p.gIdx,
    out,
    inF,
    groups,
    params.bits,
  );
  return {
    outputs: [bytesOf(p.qweight), bytesOf(p.qzeros), bytesOf(p.scales), bytesOf(p.gIdx)],
    notes: [...notes, ...gptqNotes(p.zeroPointZero, 0, params.bits)],
    outputError: statsOutputError(c.stats, w, effective, out, forms),
  };
}

function gptqNotes(zeroPointZero: number, clampedCodes: number, bits: number): string[] {
  const notes: string[] = [];
  if (zeroPointZero > 0) {
    notes.push(
      `${zeroPointZero} group(s) have zero point 0, which GPTQ v1 cannot store; written with ` +
        "GPTQModel's v2-to-v1 borrow (exact for GPTQModel, off for per-field +1 kernels)",
    );
  }
  if (clampedCodes > 0) {
    notes.push(
      `${clampedCodes} code(s) re-derived outside [0, ${2 ** bits - 1}] by GPTQ's packing ` +
        'were clamped (AutoGPTQ would corrupt the neighbouring fields)',
    );
  }
  return notes;
}

function checkGIdx(gIdx: Int32Array, groups: number, source: string, module: string, name = 'g_idx'): void {
  for (const [i, v] of gIdx.entries()) {
    if (!(v >= 0 && v < groups)) {
      throw new QuantdError('LAYOUT_INVALID', {
        source,
        tensor: `${module}.${name}`,
        detail: `g_idx[${i}] = ${v} is not a group of [0, ${groups})`,
      });
    }
  }
}

/** A compressed-tensors weight's tensors (see the EncoderCall's comment for their order). */
function ctEncoded(call: Extract<EncoderCall, { kind: 'ct' }>, w: Float32Array): Results {
  const q = ctQuantize(call.tensor, w, call.shape, call.dtype, call.weights);
  const [out, inF] = call.shape as [number, number];
  const groups = q.scales.length / out;
  const scales = fromFloat32(q.scales, call.dtype);
  const bits = call.weights.numBits;
  if (call.format === 'pack-quantized') {
    const outputs = [
      bytesOf(packToInt32(q.codes as Int8Array, out, inF, bits)),
      scales,
      bytesOf(BigInt64Array.from([BigInt(out), BigInt(inF)])),
    ];
    if (q.zeroPoints) outputs.push(bytesOf(packColumnsToInt32(q.zeroPoints, out, groups, bits)));
    return { outputs };
  }
  const outputs = [bytesOf(q.codes), scales];
  if (q.zeroPoints) outputs.push(bytesOf(q.zeroPoints));
  return { outputs };
}

/** A compressed-tensors weight dequantized to the values of its scales' dtype, as float32. */
function ctDecoded(call: CtDecodeCall, inputs: readonly Uint8Array[]): Results {
  const { rows, cols, bits, scaleRows, scaleCols } = call;
  const [codes, scaleBytes] = inputs;
  let k = 2;
  const zpBytes = call.zeroPoints === 'none' ? undefined : inputs[k++];
  const gBytes = call.gIdx ? inputs[k++] : undefined;
  let values: ArrayLike<number>;
  if (call.codes === 'packed') values = unpackFromInt32(typedView(Int32Array, codes!), rows, cols, bits);
  else if (call.codes === 'I8') values = typedView(Int8Array, codes!);
  else {
    const table = fp8DecodeTable('float8_e4m3fn');
    values = Float32Array.from(codes!, (c) => table[c]!);
    const nan = (values as Float32Array).findIndex((v) => Number.isNaN(v));
    if (nan >= 0) {
      throw new QuantdError('LAYOUT_INVALID', {
        source: call.source,
        tensor: `${call.module}.weight`,
        detail: `element ${nan} is the float8_e4m3fn NaN code`,
      });
    }
  }
  let zeroPoints: Int8Array | null = null;
  if (call.zeroPoints === 'packed') {
    zeroPoints = unpackColumnsFromInt32(typedView(Int32Array, zpBytes!), scaleRows, scaleCols, bits);
  } else if (call.zeroPoints === 'I8') zeroPoints = typedView(Int8Array, zpBytes!);
  let gIdx: Int32Array | null = null;
  if (gBytes) {
    gIdx = typedView(Int32Array, gBytes);
    // g_idx of -1 is an initialized-but-unset map: compressed-tensors then ignores it
    if (gIdx.includes(-1)) gIdx = null;
    else checkGIdx(gIdx, scaleCols, call.source, call.module, 'weight_g_idx');
  }
  const scales = toFloat32(scaleBytes!, call.scales);
  const bad = scales.findIndex((v) => !(Number.isFinite(v) && v > 0));
  if (bad >= 0) {
    // compressed-tensors never writes one; dequantizing by it would give NaN or ±∞ weights
    throw new QuantdError('LAYOUT_INVALID', {
      source: call.source,
      tensor: `${call.module}.weight_scale`,
      detail: `weight_scale[${bad}] = ${scales[bad]}; a scale must be finite and positive`,
    });
  }
  const w = ctDequantize(values, scales, zeroPoints, { rows, cols, scaleRows, scaleCols, gIdx }, call.scales);
  return { outputs: [bytesOf(w)] };
}

function encode(
  module: KernelModule | null,
  call: EncoderCall,
  inputs: readonly Uint8Array[],
  into: readonly Uint8Array[],
): Results {
  const [a, b, c, d, e] = inputs;
  switch (call.kind) {
    case 'cast':
      return { outputs: [fromFloat32(floatsOf(call.from, a!), call.to)] };
    case 'ggml': {
      if (module !== null && encodedByRows(call)) {
        return { outputs: [into[0]!], ...ggmlEncodeRows(module, call, a!, into[0]!) };
      }
      if (call.part !== undefined) {
        throw new QuantdError('INTERNAL', {
          detail: `a part of ${call.tensor} without the ${call.type} kernel`,
        });
      }
      let x = floatsOf(call.dtype, a!, module);
      if (call.permute) x = permuteHeads(x, call.permute.rows, call.permute.heads, call.tensor);
      checkFinite(module, x, call.type, call.tensor);
      const bytes =
        call.imatrix !== undefined
          ? ggmlEncodeWeighted(call.type, x, call.ne0, call.imatrix)
          : ggmlBytes(module, call.type, x, call.ne0);
      checkGgmlHalfFields(call.type, bytes, call.tensor);
      if (call.quality !== true) return { outputs: [bytes] };
      const decoded = ggmlDecode(call.type, bytes, x.length);
      return {
        outputs: [bytes],
        quality: decodedQuality(x, decoded),
        histogram: histogramOf(sampledDecodedErrors(x, decoded)),
      };
    }
    case 'ggml-decode':
      return { outputs: [bytesOf(ggmlDecode(call.type, a!, call.numel))] };
    case 'gptq': {
      if (call.calibration) {
        return gptqSolved(
          call,
          floatsOf(call.dtype, a!, module),
          call.calibration,
          module?.gptqSolve,
          module?.quadraticForms,
        );
      }
      const p =
        (module && gptqPackedByRows(module, call.tensor, a!, call.dtype, call.shape, call.params)) ??
        gptqPacked(
          module,
          call.tensor,
          floatsOf(call.dtype, a!, module),
          call.shape,
          call.dtype,
          call.params,
        );
      return {
        outputs: [bytesOf(p.qweight), bytesOf(p.qzeros), bytesOf(p.scales), bytesOf(p.gIdx)],
        notes: gptqNotes(p.zeroPointZero, p.clampedCodes, call.params.bits),
      };
    }
    case 'gptq-decode': {
      const gIdx = d ? typedView(Int32Array, d) : null;
      if (gIdx) checkGIdx(gIdx, call.groups, call.source, call.module);
      const w = gptqDequantize(
        typedView(Int32Array, a!),
        typedView(Int32Array, b!),
        floatsOfSt(call.scales, c!),
        gIdx,
        call.out,
        call.inF,
        call.groups,
        call.bits,
      );
      return { outputs: [bytesOf(w)] };
    }
    case 'awq': {
      if (call.calibration)
        return awqCalibrated(module, call, floatsOf(call.dtype, a!, module), call.calibration);
      const p =
        (module && awqPackedByRows(module, call.tensor, a!, call.dtype, call.shape, call.params)) ??
        awqPacked(module, call.tensor, floatsOf(call.dtype, a!, module), call.shape, call.params);
      return { outputs: [bytesOf(p.qweight), bytesOf(p.qzeros), bytesOf(p.scales)] };
    }
    case 'awq-scales':
      return awqScalesResult(
        call,
        inputs.map((bytes, k) => floatsOf(call.dtypes[k]!, bytes, module)),
        module?.quadraticForms,
      );
    case 'awq-fold':
      return { outputs: [awqFoldResult(call, floatsOf(call.from, a!))] };
    case 'awq-decode': {
      const scales = floatsOfSt(call.scales, c!);
      const w = awqDequantize(
        typedView(Int32Array, a!),
        typedView(Int32Array, b!),
        scales,
        call.out,
        call.inF,
        call.groups,
      );
      return { outputs: [bytesOf(w)] };
    }
    case 'bnb': {
      const p = bnbPacked(module, call.tensor, floatsOf(call.dtype, a!, module), call.type, call.blocksize);
      const state = new TextEncoder().encode(
        bnbQuantStateJson(call.type, call.blocksize, call.dtype, call.shape),
      );
      return { outputs: [p.packed, bytesOf(p.absmax), bytesOf(codeTable(call.type)), state] };
    }
    case 'bnb-decode': {
      const absmax = call.nested
        ? bnbNestedAbsmax(
            b!,
            typedView(Float32Array, d!),
            typedView(Float32Array, e!),
            call.nested.blocksize,
            call.nested.offset,
          )
        : typedView(Float32Array, b!);
      const out = bnbDequantize(a!, absmax, typedView(Float32Array, c!), call.blocksize, call.n);
      return { outputs: [bytesOf(out)] };
    }
    case 'onnx': {
      const params = { blockSize: call.blockSize, sym: call.sym, scaleType: call.scaleType };
      const p = matMulNBitsPacked(module, call.tensor, floatsOf(call.dtype, a!, module), call.shape, params);
      const outputs = [p.b, fromFloat32(p.scales, call.scaleType)];
      if (p.zeroPoints) outputs.push(p.zeroPoints);
      return { outputs };
    }
    case 'onnx-decode': {
      const w = matMulNBitsDequantize(a!, floatsOf(call.scales, b!), c ?? null, call.shapes);
      return { outputs: [bytesOf(w)] };
    }
    case 'ct':
      return ctEncoded(call, floatsOf(call.dtype, a!, module));
    case 'ct-decode':
      return ctDecoded(call, inputs);
  }
}

/**
 * Runs one task: the encoder's results are copied into the task's output buffers, whose sizes
 * the layout planned; a result of another size is a bug (INTERNAL), never a short file.
 */
export function runEncodeTask(module: KernelModule | null, task: EncodeTask): EncodeReply {
  const {
    outputs,
    notes = [],
    quality,
    histogram,
    sampleErrors,
    outputError,
  } = encode(module, task.call, task.inputs, task.outputs);
  if (outputs.length !== task.outputs.length) {
    throw new QuantdError('INTERNAL', {
      detail: `encoder ${task.call.kind} made ${outputs.length} outputs, the plan has ${task.outputs.length}`,
    });
  }
  outputs.forEach((bytes, i) => {
    const into = task.outputs[i]!;
    if (bytes.byteLength !== into.byteLength) {
      throw new QuantdError('INTERNAL', {
        detail: `encoder ${task.call.kind} output ${i} has ${bytes.byteLength} bytes, the plan ${into.byteLength}`,
      });
    }
    if (bytes !== into) into.set(bytes);
  });
  return {
    notes,
    ...(quality !== undefined && { quality }),
    ...(histogram !== undefined && { histogram }),
    ...(sampleErrors !== undefined && { sampleErrors }),
    ...(outputError !== undefined && { outputError }),
  };
}
